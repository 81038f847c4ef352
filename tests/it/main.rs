//! The one integration-test binary: each area of bork-ci has a module here.
#![expect(
    clippy::disallowed_methods,
    reason = "tests lay out fixtures and run tools directly"
)]

mod action;
mod apply;
mod architecture;
mod budgets;
mod check;
mod ci_setup;
mod ci_templates;
mod cli;
mod deps;
mod diff_base;
mod endpoints;
mod fake_llm;
mod ghsim;
mod github;
mod judge;
mod llm;
mod onboarding;
mod pack;
mod preflight;
mod providers;
mod review;
mod review_cli;
mod run;
mod run_docker;
mod run_github;
mod run_http;
mod safety;
mod sandbox;
mod sarif;
mod static_build;
mod streaming;
mod support;
mod verdict;
mod verify;
