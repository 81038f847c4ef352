//! Turning the model's answer into changes to the repository, safely.
//!
//! Owns the answer format ([`mod@parse`]), the lexical path rules ([`path`]), the classification of
//! each edit as allowed, gated or refused ([`policy`]), and the code that writes the model's edits
//! to the target repository ([`mod@apply`]; the other writers of the working tree are git, run
//! by `github` to check out, merge and commit, and `bork-ci init`). It does not talk to the
//! model, print refused contents, or decide what happens next in the loop: that is `reconcile`'s.
//!
//! The rule for failures: a parse error rejects the whole answer (nothing is applied, and the
//! error goes back to the model), while refusals are per edit (a refused or gated edit does not
//! stop the others). A held edit is not written by the run: on GitHub it becomes an approval pull
//! request, and what a human merges comes back through git. [`apply::apply_approved`] writes a
//! held edit with exactly the bytes whose sha256 was shown, for library users that approve
//! without GitHub.

pub mod apply;
pub mod code;
pub mod glob;
pub mod identity;
pub mod judge_files;
pub mod layout;
pub mod parse;
pub mod path;
pub mod policy;
pub mod stdlib;

pub use apply::{
    AppliedEdit, ApplyError, ApplyOptions, Changeset, EditAction, PendingApproval, RefusedEdit, apply,
    apply_approved,
};
pub use parse::{EditPlan, ParseError, ParseLimits, ProposedWrite, parse};
pub use path::{PathRejection, RepoPath, validate};
pub use policy::{Disposition, Protection, Refusal, classify};
