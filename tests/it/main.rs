//! The one integration-test binary: each area of bork-ci has a module here.

mod apply;
mod fake_llm;
mod ghsim;
mod github;
mod llm;
mod pack;
mod review;
mod review_cli;
mod run;
mod run_docker;
mod run_github;
mod run_http;
mod sandbox;
mod static_build;
mod support;
mod verify;
