//! bork-ci's edits: the pack (the repository and its spec changes as one prompt), the prompt, the
//! model's answer parsed and applied to the working tree safely (the policy of what is held), and
//! the reviewer's answer parsed. It depends on `bork-ci-core` only: no LLM, no engine, no GitHub.
pub mod edit;
pub mod pack;
pub mod prompt;
pub mod review;
