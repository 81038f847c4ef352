//! The plain data every room of `github` shares: the error, the settings' defaults, the retry
//! policy, what the loop hands over ([`IterationSummary`], [`PendingEdit`], [`PublishInput`]) and
//! what comes back ([`PublishOutcome`], [`PullRef`], [`ApprovalDecision`]), plus the few pure
//! naming rules every room needs (branch names, content hashes, credentials cut out of URLs).
//!
//! A leaf: it imports no other file of `github`, does no I/O and talks to nobody.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// Largest body bork-ci sends for a pull request or comment (GitHub refuses 65 536 characters).
pub const MAX_BODY_BYTES: usize = 60 * 1024;

/// Errors of GitHub delivery; callers branch on them (rate limits, refused pushes).
#[derive(Debug, thiserror::Error)]
pub enum GithubError {
    /// Settings are missing or malformed.
    #[error("GitHub settings: {0}")]
    Config(String),
    /// The request did not reach GitHub or the answer could not be read.
    #[error("GitHub request failed: {0}")]
    Transport(String),
    /// GitHub answered with an error status after retries.
    #[error("GitHub answered {status} to {method} {route}: {message}")]
    Api {
        method: &'static str,
        route: String,
        status: u16,
        message: String,
    },
    /// A rate limit asks for a longer wait than allowed.
    #[error("GitHub rate limit: retry in {wait:?}, longer than allowed")]
    RateLimited { wait: Duration },
    /// GitHub answered something unexpected.
    #[error("unexpected GitHub answer: {0}")]
    Protocol(String),
    /// A git command failed.
    #[error("git {action} failed: {detail}")]
    Git { action: String, detail: String },
    /// The push was refused (someone else pushed, a protected branch, a workflow file without
    /// the `workflows` permission): bork-ci never retries it with force or a broader token.
    #[error("git push to `{branch}` was refused: {detail}")]
    PushRejected { branch: String, detail: String },
    /// An approved change's content differs from the content whose hash was shown.
    #[error("approved content of `{path}` does not match the recorded sha256; not applied")]
    ContentMismatch { path: String },
    /// The result pull request was merged or closed by a human during the run.
    #[error("the result pull request #{number} was {what} by a human; bork-ci stops here")]
    ResultClosed { number: u64, what: &'static str },
}

impl GithubError {
    /// An error answer, with the fix appended where GitHub's message is one bork-ci knows.
    pub fn api(method: &'static str, route: String, status: u16, message: String) -> GithubError {
        let lower = message.to_ascii_lowercase();
        let message = if status == 403 && lower.contains("not permitted to create or approve pull requests") {
            format!(
                "{message} (fix: enable the repository's Settings > Actions > General > \"Allow GitHub Actions to create and approve pull requests\", or give the action a GitHub App's installation token as github-token)"
            )
        } else {
            message
        };
        GithubError::Api {
            method,
            route,
            status,
            message,
        }
    }
}

/// How hard the REST client tries before giving up.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// First backoff after a 5xx or a transport error; doubled on each retry.
    pub base: Duration,
    /// Longest single wait for `retry-after` or `x-ratelimit-reset`; a longer wait is an error.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_secs(1),
            max_wait: Duration::from_secs(15 * 60),
        }
    }
}

/// What one iteration did, as the loop reports it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct IterationSummary {
    pub number: u32,
    pub applied: Vec<String>,
    pub deleted: Vec<String>,
    pub findings_left: usize,
    /// The loop's own one-line summary (not model text).
    pub message: String,
}

/// An edit held for human approval.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct PendingEdit {
    pub path: String,
    pub delete: bool,
    /// New bytes (text) for a create-or-update.
    pub contents: Option<String>,
    /// sha256 of `contents` in hex; computed when absent.
    pub sha256: Option<String>,
    /// Why it needs approval (`specs/**`, an `edits-require-approval` pattern, a deletion).
    pub rule: String,
    /// The findings of the checks that wait on it (one line each).
    #[serde(default)]
    pub waiting: Vec<String>,
}

impl PendingEdit {
    /// The sha256 the approval is about: the recorded one, else the contents' own; `None` for a
    /// deletion.
    pub fn content_sha256(&self) -> Option<String> {
        if self.delete {
            return None;
        }
        self.sha256.clone().or_else(|| {
            self.contents
                .as_deref()
                .map(|contents| sha256_hex(contents.as_bytes()))
        })
    }
}

/// What the loop hands over at the end of a run.
#[derive(Debug, Clone, Default)]
pub struct PublishInput {
    pub status: bork_ci_run::report::RunStatus,
    pub iterations: Vec<IterationSummary>,
    pub findings_left: bork_ci_core::findings::Findings,
    pub pending: Vec<PendingEdit>,
    /// Refused edits: path and reason.
    pub refused: Vec<(String, String)>,
    /// Input, output and cached tokens.
    pub tokens: (u64, u64, u64),
    pub cost_usd: Option<f64>,
    pub prompt_version: String,
    /// What the whole run spent so far (every round and job), saved for a resume.
    pub spent: bork_ci_run::budget::Spent,
}

/// A pull request bork-ci opened or updated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PullRef {
    pub number: u64,
    pub url: String,
}

/// What [`Session::publish`](crate::github::Session::publish) did.
#[derive(Debug, Clone, Default)]
pub struct PublishOutcome {
    /// The result pull request, when there is one.
    pub result_pr: Option<PullRef>,
    /// Approval pull requests, by path.
    pub approval_prs: Vec<(String, PullRef)>,
    /// True when commits were pushed.
    pub pushed: bool,
    /// True when the escalation label is on the result pull request.
    pub labelled: bool,
    /// Non-fatal problems.
    pub warnings: Vec<String>,
}

/// The fate of one pending edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Approved and merged into the result branch.
    Approved { path: String, merged_sha: String },
    /// Rejected by a review or by closing the pull request.
    Rejected {
        path: String,
        reviewer: Option<String>,
        comment: String,
    },
    /// No valid decision yet.
    Pending { path: String },
}

impl ApprovalDecision {
    /// The path the decision is about.
    pub fn path(&self) -> &str {
        match self {
            ApprovalDecision::Approved { path, .. }
            | ApprovalDecision::Rejected { path, .. }
            | ApprovalDecision::Pending { path } => path,
        }
    }

    /// A rejection as a finding for the next prompt, quoting the reviewer's words.
    pub fn to_finding(&self) -> Option<bork_ci_core::findings::Finding> {
        match self {
            ApprovalDecision::Rejected {
                path,
                reviewer,
                comment,
            } => {
                let who = reviewer.as_deref().unwrap_or("a maintainer");
                let words = if comment.trim().is_empty() {
                    "(no comment)".to_owned()
                } else {
                    comment.clone()
                };
                Some(bork_ci_core::findings::Finding::CodeReview {
                    file: Some(path.clone()),
                    finding: format!(
                        "The proposed change to `{path}` was rejected by {who}. The reviewer wrote \
                         (untrusted text, quoted):\n\n{}",
                        bork_ci_core::untrusted::markdown_block(&words)
                    ),
                })
            }
            _ => None,
        }
    }
}

/// Keeps `[A-Za-z0-9._/-]`, turns everything else into `-`, and removes what git refuses
/// (`..`, leading `-` or `/`, `.lock`, empty components). Branch names and the hidden markers
/// that name a base both go through it, so a re-run finds what an earlier run made.
pub fn sanitize_branch(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let mut parts = Vec::new();
    for part in mapped.split('/') {
        let mut part = part.replace("..", "-");
        while part.starts_with('.') || part.starts_with('-') {
            part.remove(0);
        }
        while part.ends_with(".lock") || part.ends_with('.') {
            part.truncate(part.len() - if part.ends_with('.') { 1 } else { 5 });
        }
        if !part.is_empty() {
            parts.push(part);
        }
    }
    let joined = parts.join("/");
    let mut joined: String = joined.chars().take(200).collect();
    while joined.ends_with('/') || joined.ends_with('.') {
        joined.pop();
    }
    if joined.is_empty() {
        "bork/unnamed".to_owned()
    } else {
        joined
    }
}

/// sha256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `text` with the credentials of any `scheme://user:secret@host` URL in it replaced by `***`:
/// error texts of the transport and of git can carry a remote URL.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_inclusive(char::is_whitespace) {
        match word.find("://") {
            Some(index) => {
                let (scheme, rest) = word.split_at(index + 3);
                match rest.find('@') {
                    Some(at) if !rest[..at].contains('/') => {
                        out.push_str(scheme);
                        out.push_str("***@");
                        out.push_str(&rest[at + 1..]);
                    }
                    _ => out.push_str(word),
                }
            }
            None => out.push_str(word),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_names_are_sanitised() {
        assert_eq!(sanitize_branch("bork/main"), "bork/main");
        assert_eq!(sanitize_branch("bork/$(id); rm -rf\n"), "bork/id---rm--rf-");
        assert_eq!(sanitize_branch("bork/../x.lock"), "bork/x");
        assert_eq!(sanitize_branch("bork/-x/.y"), "bork/x/y");
        assert!(sanitize_branch("bork/ü").is_ascii());
    }

    #[test]
    fn redacts_credentials_in_urls() {
        assert_eq!(
            redact_urls("error sending to https://x-access-token:s3cr3t@github.com/a/b.git now"),
            "error sending to https://***@github.com/a/b.git now"
        );
        assert_eq!(
            redact_urls("see https://github.com/a@b"),
            "see https://github.com/a@b"
        );
    }

    #[test]
    fn the_approved_hash_is_the_recorded_one_or_the_contents() {
        let mut edit = PendingEdit {
            path: "specs/a.md".into(),
            contents: Some("a\n".into()),
            ..PendingEdit::default()
        };
        assert_eq!(edit.content_sha256(), Some(sha256_hex(b"a\n")));
        edit.sha256 = Some("00".into());
        assert_eq!(edit.content_sha256().as_deref(), Some("00"));
        edit.delete = true;
        assert_eq!(edit.content_sha256(), None);
    }
}
