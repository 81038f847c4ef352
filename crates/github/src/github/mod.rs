//! GitHub delivery: the result pull request, one approval pull request per pending edit, the
//! escalation label and findings comment, and resuming a run from state saved in the result pull
//! request. This is the only module that imports the GitHub REST client.
//!
//! It takes plain data from the loop ([`IterationSummary`], [`PublishInput`]) and never orders
//! the loop's steps: the caller calls [`start`] before the first iteration,
//! [`Committer::commit`] after each iteration that applied edits, [`Session::publish`] at the
//! end, and [`Session::decide_approvals`] or [`Session::wait_for_approvals`] for pending edits.
//! Rendering for the Actions log and SARIF live in the root crate (`actions`, `sarif`).
//!
//! Pushing: git over HTTPS, with the token handed to git in the environment
//! (`GIT_CONFIG_COUNT`/`http.extraheader`), never on the command line or in a remote URL.
//!
//! # Rooms
//!
//! Arrows point one way, from a room to the rooms below it; no file imports a room beside or
//! above its own (`tests/it/architecture.rs` reads the `use` lines and keeps it so):
//!
//! ```text
//!   mod.rs                 re-exports the public surface
//!     │
//!   session/               one run's REST calls and git steps: start, publish (pulls),
//!     │                    approvals (reviews), label and comments (labels); GitHub's
//!     │                    answers read into small Deserialize shapes (answers)
//!     ├──────────┬─────────┬──────────┐
//!   context    render     git       client
//!   (what the  (bodies,   (git      (REST, retries with backon,
//!   run was    comments,  commands) pagination)
//!   started by, commit
//!   branch     messages;
//!   names)     pure)
//!     ├──────────┴─────────┴──────────┘
//!   data, state, approval  leaves: the error and plain data; the hidden saved state;
//!                          the pure approval decision
//! ```

mod approval;
mod client;
mod context;
mod data;
mod git;
mod render;
mod session;
mod state;

pub use approval::{AccountKind, Decision, Permission, ReviewState, ReviewView, is_approved};
pub use context::{GithubConfig, GithubContext, GithubFlags};
pub use data::{
    ApprovalDecision, GithubError, IterationSummary, MAX_BODY_BYTES, PendingEdit, PublishInput,
    PublishOutcome, PullRef, RetryPolicy, sanitize_branch,
};
pub use session::{Committer, Session, check_token_permissions, file_at, start, tag_commit};
pub use state::{ApprovalRecord, ApprovalState, SavedState};
