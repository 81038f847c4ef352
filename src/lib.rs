//! bork-ci: the headless CI runner of Bork, a spec-driven coding harness.
//!
//! A repository keeps its intended behaviour in `specs/`; `bork-ci run` packs the repository and
//! its specs into one prompt, asks an LLM for file edits, applies them safely, runs the team's
//! correctness checker, and loops until the checker is clean or the iteration cap is reached.
//! See `ARCHITECTURE.md` for the code map and the invariants.
pub mod actions;
pub mod blocking;
pub mod budget;
pub mod check;
pub mod checker;
pub mod cli;
pub mod commands;
pub mod config;
pub mod delivery;
pub mod edit;
pub mod edit_step;
pub mod exit;
pub mod findings;
pub mod git;
pub mod github;
pub mod init;
pub mod llm;
pub mod net;
pub mod outputs;
pub mod pack;
pub mod prompt;
pub mod reconcile;
pub mod report;
pub mod review;
pub mod safe_fs;
pub mod sandbox;
pub mod sarif;
pub mod secrets;
pub mod strict_json;
pub mod untrusted;
pub mod url_text;
pub mod verify;
