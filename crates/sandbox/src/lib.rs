//! bork-ci's judges and where they run: the sandbox (Docker, `none`, devcontainer), the
//! correctness checker, the Verifier pipeline and the parsers of checker output. It depends on
//! `bork-ci-core` and `bork-ci-edit`, and it is the only crate that talks to the engine.
pub mod check;
pub mod checker;
pub mod sandbox;
pub mod verify;
