//! bork-ci: the headless CI runner of Bork, a spec-driven coding harness.
//!
//! A repository keeps its intended behaviour in `specs/`; `bork-ci run` packs the repository and
//! its specs into one prompt, asks an LLM for file edits, applies them safely, runs the team's
//! correctness checker, and loops until the checker is clean or the iteration cap is reached.
//! See `ARCHITECTURE.md` for the code map and the invariants.
//!
//! The lower floors are crates of their own (`crates/`); their modules are re-exported here
//! under the names the rest of bork-ci and its tests use.
pub mod actions;
pub mod cli;
pub mod commands;
pub mod config;
pub mod delivery;
pub mod init;
pub mod outputs;
pub mod sarif;
pub use bork_ci_core::{blocking, findings, git, net, safe_fs, secrets, strict_json, untrusted, url_text};
pub use bork_ci_edit::{edit, pack, prompt, review};
pub use bork_ci_github::github;
pub use bork_ci_llm::llm;
pub use bork_ci_run::{budget, edit_step, exit, reconcile, report, run_plan};
pub use bork_ci_sandbox::{check, checker, sandbox, verify};
