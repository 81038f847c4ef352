//! bork-ci: the headless CI runner of Bork, a spec-driven coding harness.
//!
//! A repository keeps its intended behaviour in `specs/`; `bork-ci run` packs the repository and
//! its specs into one prompt, asks an LLM for file edits, applies them safely, runs the team's
//! correctness checker, and loops until the checker is clean or the iteration cap is reached.
//! See `ARCHITECTURE.md` for the code map and the invariants.
pub mod findings;
pub mod sandbox;
pub mod verify;
