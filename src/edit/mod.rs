//! Turning the model's answer into changes to the repository, safely.
//!
//! Owns the answer format ([`mod@parse`]), the lexical path rules ([`path`]), the classification of
//! each edit as allowed, gated or refused ([`policy`]), and the only code that writes to the
//! target repository ([`mod@apply`]). It does not talk to the model, print refused contents, or
//! decide what happens next in the loop: that is `reconcile`'s.
//!
//! The rule for failures: a parse error rejects the whole answer (nothing is applied, and the
//! error goes back to the model), while refusals are per edit (a refused or gated edit does not
//! stop the others). Pending approvals are written later, by [`apply::apply_approved`], only
//! with the exact bytes whose sha256 a human approved.

pub mod apply;
pub mod identity;
pub mod judge_files;
pub mod parse;
pub mod path;
pub mod policy;

pub use apply::{
    AppliedEdit, ApplyError, ApplyOptions, Changeset, EditAction, PendingApproval, RefusedEdit, apply,
    apply_approved,
};
pub use parse::{EditPlan, ParseError, ParseLimits, ProposedWrite, parse};
pub use path::{PathRejection, RepoPath, validate};
pub use policy::{Disposition, Protection, Refusal, classify};
