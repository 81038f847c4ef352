//! bork-ci's ground floor: what every other crate of bork-ci may use and nothing it may not.
//! Findings, the registry of secrets, untrusted text, safe file access outside the working tree,
//! git as a subprocess, strict JSON and the one HTTP client builder. It depends on no other
//! bork-ci crate. See `ARCHITECTURE.md` for the code map and the invariants.
pub mod blocking;
pub mod findings;
pub mod git;
pub mod net;
pub mod safe_fs;
pub mod secrets;
pub mod strict_json;
pub mod untrusted;
pub mod url_text;
