//! Run state saved between runs, hidden in the result pull request's body as a base64 JSON
//! comment, so that a later run (a `pull_request_review` event) can resume. This module owns the
//! format; it does not talk to GitHub.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

const OPEN: &str = "<!-- bork-ci:state ";
const CLOSE: &str = " -->";

/// Where one pending edit stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ApprovalState {
    Pending,
    Approved {
        merged_sha: String,
    },
    Rejected {
        reviewer: Option<String>,
        comment: String,
    },
}

/// One pending edit and its approval pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub path: String,
    pub delete: bool,
    /// sha256 of the proposed bytes (absent for a deletion).
    pub sha256: Option<String>,
    pub rule: String,
    pub branch: String,
    pub pr_number: u64,
    pub pr_url: String,
    /// The approval pull request's head when bork-ci pushed it.
    pub head_sha: String,
    pub state: ApprovalState,
}

/// What a later run needs to resume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedState {
    pub version: u32,
    pub base: String,
    pub base_sha: String,
    pub status: bork_ci_run::report::RunStatus,
    pub iterations: u32,
    pub approvals: Vec<ApprovalRecord>,
    /// What the run spent before this state was saved; a resumed run counts on from it.
    #[serde(default)]
    pub spent: bork_ci_run::budget::Spent,
}

impl SavedState {
    /// How the hidden comment that carries the state begins.
    pub const MARKER_OPEN: &'static str = OPEN;

    /// The hidden comment that carries this state.
    pub fn to_marker(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{OPEN}{}{CLOSE}", STANDARD.encode(json))
    }

    /// Reads the state out of a pull request body; `None` when absent or unreadable.
    pub fn from_body(body: &str) -> Option<Self> {
        let start = body.find(OPEN)? + OPEN.len();
        let end = start + body[start..].find(CLOSE)?;
        let bytes = STANDARD.decode(body[start..end].trim()).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// The approvals still waiting for a decision.
    pub fn pending(&self) -> impl Iterator<Item = &ApprovalRecord> {
        self.approvals
            .iter()
            .filter(|record| record.state == ApprovalState::Pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_a_body() {
        let state = SavedState {
            version: 1,
            base: "main".into(),
            base_sha: "abc".into(),
            status: bork_ci_run::report::RunStatus::AwaitingApproval,
            iterations: 2,
            spent: bork_ci_run::budget::Spent {
                iterations: 2,
                input_tokens: 100,
                ..Default::default()
            },
            approvals: vec![ApprovalRecord {
                path: "specs/a --> b.md".into(),
                delete: false,
                sha256: Some("00".into()),
                rule: "specs/**".into(),
                branch: "bork/main/approve/x".into(),
                pr_number: 7,
                pr_url: "http://x/7".into(),
                head_sha: "def".into(),
                state: ApprovalState::Pending,
            }],
        };
        let body = format!("hello\n\n{}\n", state.to_marker());
        assert!(!body.contains("specs/a"), "state is not readable as text");
        assert_eq!(SavedState::from_body(&body), Some(state));
        assert_eq!(SavedState::from_body("no state"), None);
        assert_eq!(SavedState::from_body("<!-- bork-ci:state !!! -->"), None);
    }
}
