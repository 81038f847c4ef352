//! GitHub delivery: the result pull request, one approval pull request per pending edit, the
//! escalation label and findings comment, and resuming a run from state saved in the result pull
//! request. This is the only module that imports octocrab.
//!
//! It takes plain data from the loop ([`IterationSummary`], [`PublishInput`]) and never orders
//! the loop's steps: the caller calls [`start`] before the first iteration,
//! [`Session::commit_iteration`] after each iteration that applied edits, [`Session::publish`] at
//! the end, and [`Session::decide_approvals`] or [`Session::wait_for_approvals`] for pending
//! edits. Rendering for the Actions log lives in `crate::actions`; SARIF in `crate::sarif`.
//!
//! Pushing: git over HTTPS, with the token handed to git in the environment
//! (`GIT_CONFIG_COUNT`/`http.extraheader`), never on the command line or in a remote URL.

mod client;
mod git;
mod labels;
mod pulls;
mod reviews;
mod state;

use std::path::{Path, PathBuf};
use std::time::Duration;

use secrecy::SecretString;

pub use client::RetryPolicy;
pub use reviews::{Decision, Permission, ReviewView, is_approved};
pub use state::{ApprovalRecord, ApprovalState, SavedState};

/// Default escalation label.
pub const DEFAULT_LABEL: &str = "bork:needs-human";
/// Default prefix of bork-ci's branches.
pub const DEFAULT_BRANCH_PREFIX: &str = "bork/";
/// Default commit author name.
pub const DEFAULT_AUTHOR_NAME: &str = "bork-ci";
/// Default commit author email.
pub const DEFAULT_AUTHOR_EMAIL: &str = "bork-ci@users.noreply.github.com";
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

/// Command-line flags for GitHub delivery; the CLI flattens this into `bork-ci run`. Each flag
/// falls back to the Actions variable of the same meaning.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GithubFlags {
    /// Repository as `owner/name`; without it the run stays local. Named without a token, or set
    /// but empty while a token is: an error.
    #[arg(long, env = "GITHUB_REPOSITORY", value_name = "OWNER/NAME")]
    pub github_repo: Option<String>,
    /// REST API root (GitHub Enterprise Server: `https://HOST/api/v3`).
    #[arg(long, env = "GITHUB_API_URL", value_name = "URL")]
    pub github_api_url: Option<String>,
    /// Web/git root; derived from the API URL when absent.
    #[arg(long, env = "GITHUB_SERVER_URL", value_name = "URL")]
    pub github_server_url: Option<String>,
    /// Name of the environment variable that holds the token (default: `BORK_GITHUB_TOKEN`,
    /// then `GITHUB_TOKEN`). The token itself is never a flag.
    #[arg(long, value_name = "VAR")]
    pub github_token_env: Option<String>,
    /// Commit the run started from.
    #[arg(long, env = "GITHUB_SHA", value_name = "SHA")]
    pub github_sha: Option<String>,
    /// Ref the run started from (`refs/heads/main`).
    #[arg(long, env = "GITHUB_REF", value_name = "REF")]
    pub github_ref: Option<String>,
    /// Base branch of the result pull request (default: the branch of `--github-ref` or of the
    /// reviewed pull request).
    #[arg(long, value_name = "BRANCH")]
    pub github_base: Option<String>,
    /// Event that started the run (`push`, `pull_request_review`, ...).
    #[arg(long, env = "GITHUB_EVENT_NAME", value_name = "NAME")]
    pub github_event_name: Option<String>,
    /// JSON payload of that event.
    #[arg(long, env = "GITHUB_EVENT_PATH", value_name = "PATH")]
    pub github_event_path: Option<PathBuf>,
    /// File the job summary is appended to.
    #[arg(long, env = "GITHUB_STEP_SUMMARY", value_name = "PATH")]
    pub github_step_summary: Option<PathBuf>,
    /// File the step outputs are appended to.
    #[arg(long, env = "GITHUB_OUTPUT", value_name = "PATH")]
    pub github_output: Option<PathBuf>,
    /// Label added when a run needs a human (`github.label`).
    #[arg(long, env = "BORK_GITHUB_LABEL", value_name = "LABEL")]
    pub github_label: Option<String>,
    /// Commit author name (`github.author-name`).
    #[arg(long, env = "BORK_GITHUB_AUTHOR_NAME", value_name = "NAME")]
    pub github_author_name: Option<String>,
    /// Commit author email (`github.author-email`).
    #[arg(long, env = "BORK_GITHUB_AUTHOR_EMAIL", value_name = "EMAIL")]
    pub github_author_email: Option<String>,
    /// Wait this long for reviewers of pending edits, polling with backoff (e.g. `30m`);
    /// without it a run with pending edits saves its state and exits 3.
    #[arg(long, env = "BORK_WAIT_FOR_APPROVAL", value_name = "DURATION")]
    pub wait_for_approval: Option<humantime::Duration>,
}

/// Everything one run needs to talk to GitHub, read once at start.
#[derive(Clone)]
pub struct GithubContext {
    pub api_url: String,
    pub server_url: String,
    pub owner: String,
    pub repo: String,
    pub token: SecretString,
    pub sha: Option<String>,
    pub git_ref: Option<String>,
    pub base: Option<String>,
    pub event_name: Option<String>,
    pub event_path: Option<PathBuf>,
    pub step_summary: Option<PathBuf>,
    pub output: Option<PathBuf>,
    pub author_name: String,
    pub author_email: String,
    pub label: String,
    pub branch_prefix: String,
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for GithubContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GithubContext")
            .field("api_url", &self.api_url)
            .field("owner", &self.owner)
            .field("repo", &self.repo)
            .field("token", &"[redacted]")
            .field("base", &self.base)
            .field("event_name", &self.event_name)
            .finish_non_exhaustive()
    }
}

impl GithubContext {
    /// Builds the context from flags (which clap already filled from the Actions variables) and
    /// the token variable. `Ok(None)` means a local run: neither a repository nor a token, or a
    /// token alone (said in one line). Half a setup is an error naming the missing setting: a
    /// repository without a token, or a token with a repository setting that is set but empty.
    #[allow(clippy::disallowed_methods)] // the GitHub context reads the runner's documented variables
    pub fn from_env_and_flags(flags: &GithubFlags) -> Result<Option<Self>, GithubError> {
        Self::from_flags_with(flags, |name| std::env::var(name).ok())
    }

    /// As [`GithubContext::from_env_and_flags`], with the environment lookup injected (tests).
    pub fn from_flags_with(
        flags: &GithubFlags,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, GithubError> {
        let names: Vec<&str> = match flags.github_token_env.as_deref() {
            Some(name) => vec![name],
            None => vec!["BORK_GITHUB_TOKEN", "GITHUB_TOKEN"],
        };
        for name in &names {
            if let Some(value) = lookup(name) {
                crate::secrets::register(name, &value);
            }
        }
        let token = names.iter().find_map(|name| {
            lookup(name)
                .filter(|value| !value.trim().is_empty())
                .map(|value| (*name, value))
        });
        // Clap fills the flag from `GITHUB_REPOSITORY`; an empty variable may reach us as absent,
        // so look at it directly: set-but-empty is what CI plugins pass for an unset variable.
        let from_variable = flags.github_repo.is_none() || flags.github_repo == lookup("GITHUB_REPOSITORY");
        let setting = if from_variable {
            "GITHUB_REPOSITORY"
        } else {
            "--github-repo"
        };
        let repository = flags
            .github_repo
            .clone()
            .or_else(|| lookup("GITHUB_REPOSITORY"))
            .map(|value| value.trim().to_owned());
        let (repository, (token_name, token)) = match (repository, token) {
            (None, None) => return Ok(None),
            (Some(repository), None) if repository.is_empty() => return Ok(None),
            (None, Some((name, _))) => {
                tracing::info!(
                    "{name} is set but no repository is (--github-repo or GITHUB_REPOSITORY): local run, no pull requests"
                );
                return Ok(None);
            }
            (Some(repository), Some((name, _))) if repository.is_empty() => {
                return Err(GithubError::Config(format!(
                    "{setting} is set but empty while a GitHub token is ({name}): set it to OWNER/NAME for pull requests, or unset {name} for a local run"
                )));
            }
            (Some(repository), None) => {
                let empty: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|name| lookup(name).is_some())
                    .collect();
                let state = if empty.is_empty() {
                    "no token is set".to_owned()
                } else {
                    format!("{} is set but empty", empty.join(" and "))
                };
                return Err(GithubError::Config(format!(
                    "{setting} names `{repository}` but {state}: set {} to a token that may push and open pull requests{}, or unset {setting} for a local run",
                    names.join(" or "),
                    if flags.github_token_env.is_none() {
                        " (or name its variable with --github-token-env)"
                    } else {
                        ""
                    }
                )));
            }
            (Some(repository), Some(token)) => (repository, token),
        };
        let (owner, repo) = repository
            .split_once('/')
            .filter(|(owner, repo)| !owner.is_empty() && !repo.is_empty() && !repo.contains('/'))
            .ok_or_else(|| GithubError::Config(format!("{setting} `{repository}` is not OWNER/NAME")))?;
        tracing::debug!("GitHub delivery to {repository} with the token in {token_name}");
        let api_url = flags
            .github_api_url
            .clone()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| "https://api.github.com".to_owned());
        let server_url = flags
            .github_server_url
            .clone()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| server_from_api(&api_url));
        Ok(Some(Self {
            api_url,
            server_url,
            owner: owner.to_owned(),
            repo: repo.to_owned(),
            token: SecretString::from(token.trim().to_owned()),
            sha: flags.github_sha.clone().filter(|s| !s.is_empty()),
            git_ref: flags.github_ref.clone().filter(|s| !s.is_empty()),
            base: flags.github_base.clone().filter(|s| !s.is_empty()),
            event_name: flags.github_event_name.clone().filter(|s| !s.is_empty()),
            event_path: flags.github_event_path.clone(),
            step_summary: flags.github_step_summary.clone(),
            output: flags.github_output.clone(),
            author_name: flags
                .github_author_name
                .clone()
                .unwrap_or_else(|| DEFAULT_AUTHOR_NAME.to_owned()),
            author_email: flags
                .github_author_email
                .clone()
                .unwrap_or_else(|| DEFAULT_AUTHOR_EMAIL.to_owned()),
            label: flags
                .github_label
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| DEFAULT_LABEL.to_owned()),
            branch_prefix: DEFAULT_BRANCH_PREFIX.to_owned(),
            retry: RetryPolicy::default(),
        }))
    }

    /// The base branch of the result pull request: `--github-base`, else the reviewed pull
    /// request's base (with bork-ci's prefix removed for an approval pull request), else the
    /// branch of `GITHUB_REF`.
    pub fn base_branch(&self) -> Option<String> {
        if let Some(base) = &self.base {
            return Some(base.clone());
        }
        if let Some(event) = self.event()
            && let Some(pull) = event.get("pull_request")
            && let Some(base) = pull.pointer("/base/ref").and_then(|v| v.as_str())
        {
            let head = pull.pointer("/head/ref").and_then(|v| v.as_str());
            if let Some(stripped) = base.strip_prefix(&self.branch_prefix) {
                // An approval pull request: its base is `bork/<base>`, except when it is
                // `bork/approve/...` which is never a base.
                return Some(stripped.to_owned());
            }
            if head.is_some_and(|head| head.starts_with(&self.branch_prefix)) {
                return Some(base.to_owned());
            }
        }
        self.git_ref
            .as_deref()
            .and_then(|r| r.strip_prefix("refs/heads/"))
            .map(str::to_owned)
    }

    /// The event payload, when there is one and it parses.
    pub fn event(&self) -> Option<serde_json::Value> {
        let path = self.event_path.as_ref()?;
        let bytes = crate::safe_fs::read_regular(std::path::Path::new(path), 64 << 20).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Why this run must not use secrets or push, when it must not: a `pull_request_target`
    /// event (threat model G16) or a pull request from a fork (G15). The caller then reports
    /// `skipped` and exits 0 without calling the LLM.
    pub fn untrusted_context(&self) -> Option<String> {
        let event_name = self.event_name.as_deref()?;
        if event_name == "pull_request_target" {
            return Some("untrusted context: pull_request_target runs untrusted code with secrets".into());
        }
        if event_name.starts_with("pull_request") {
            let event = self.event()?;
            let head_repo = event
                .pointer("/pull_request/head/repo/full_name")
                .and_then(|v| v.as_str());
            let this = format!("{}/{}", self.owner, self.repo);
            if head_repo.is_some_and(|head| !head.eq_ignore_ascii_case(&this)) {
                return Some("untrusted context: pull request from a fork, no secrets".into());
            }
        }
        None
    }

    /// True for the `pull_request*` events, whose checkout holds code that is not yet trusted.
    pub fn is_pull_request_event(&self) -> bool {
        self.event_name
            .as_deref()
            .is_some_and(|name| name.starts_with("pull_request"))
    }

    /// The pull request's base branch from the event payload, when there is one.
    pub fn event_base_ref(&self) -> Option<String> {
        self.event()?
            .pointer("/pull_request/base/ref")
            .and_then(|value| value.as_str())
            .map(str::to_owned)
    }

    /// True when this run was started by a review (the resume path).
    pub fn is_review_event(&self) -> bool {
        self.event_name.as_deref() == Some("pull_request_review")
    }

    /// HTTPS URL of the repository for git, without credentials.
    pub fn remote_url(&self) -> String {
        format!(
            "{}/{}/{}.git",
            self.server_url.trim_end_matches('/'),
            self.owner,
            self.repo
        )
    }

    /// bork-ci's branch for `base`, sanitised.
    pub fn result_branch(&self, base: &str) -> String {
        sanitize_branch(&format!("{}{}", self.branch_prefix, base))
    }
}

fn server_from_api(api_url: &str) -> String {
    let trimmed = api_url.trim_end_matches('/');
    if trimmed == "https://api.github.com" {
        return "https://github.com".to_owned();
    }
    trimmed.strip_suffix("/api/v3").unwrap_or(trimmed).to_owned()
}

/// Keeps `[A-Za-z0-9._/-]`, turns everything else into `-`, and removes what git refuses
/// (`..`, leading `-` or `/`, `.lock`, empty components).
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
}

/// What the loop hands over at the end of a run.
#[derive(Debug, Clone, Default)]
pub struct PublishInput {
    pub status: crate::report::RunStatus,
    pub iterations: Vec<IterationSummary>,
    pub findings_left: crate::findings::Findings,
    pub pending: Vec<PendingEdit>,
    /// Refused edits: path and reason.
    pub refused: Vec<(String, String)>,
    /// Input, output and cached tokens.
    pub tokens: (u64, u64, u64),
    pub cost_usd: Option<f64>,
    pub prompt_version: String,
    /// What the whole run spent so far (every round and job), saved for a resume.
    pub spent: crate::budget::Spent,
}

/// A pull request bork-ci opened or updated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PullRef {
    pub number: u64,
    pub url: String,
}

/// What [`Session::publish`] did.
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
    pub fn to_finding(&self) -> Option<crate::findings::Finding> {
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
                Some(crate::findings::Finding::CodeReview {
                    file: Some(path.clone()),
                    finding: format!(
                        "The proposed change to `{path}` was rejected by {who}. The reviewer wrote \
                         (untrusted text, quoted):\n\n{}",
                        crate::untrusted::markdown_block(&words)
                    ),
                })
            }
            _ => None,
        }
    }
}

/// One run's GitHub session: the client, the branch, the result pull request and saved state.
pub struct Session {
    pub(crate) ctx: GithubContext,
    pub(crate) client: client::Client,
    pub(crate) base: String,
    pub(crate) base_sha: String,
    pub(crate) branch: String,
    pub(crate) repo_root: PathBuf,
    pub(crate) bot_login: Option<String>,
    pub(crate) result_pr: Option<PullRef>,
    pub(crate) state: Option<SavedState>,
    /// Remote tip of bork's branch when this run started (for `--force-with-lease`).
    pub(crate) remote_tip: Option<String>,
    /// True when the local branch was reset to the base over bork-only commits.
    pub(crate) rebuilt: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("ctx", &self.ctx)
            .field("base", &self.base)
            .field("branch", &self.branch)
            .field("result_pr", &self.result_pr)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// State saved by an earlier run in the result pull request, if any.
    pub fn resume_state(&self) -> Option<&SavedState> {
        self.state.as_ref()
    }

    /// bork-ci's branch for this base.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The result pull request, once found or opened.
    pub fn result_pr(&self) -> Option<&PullRef> {
        self.result_pr.as_ref()
    }

    /// One commit for one iteration (bork-ci's identity, paths after `--`); `None` when the
    /// iteration changed nothing git sees.
    pub fn commit_iteration(
        &self,
        repo_root: &Path,
        summary: &IterationSummary,
    ) -> Result<Option<String>, GithubError> {
        git::commit_iteration(repo_root, &self.identity(), summary)
    }

    pub(crate) fn identity(&self) -> git::Identity {
        git::Identity {
            name: self.ctx.author_name.clone(),
            email: self.ctx.author_email.clone(),
        }
    }

    /// Polls [`Session::decide_approvals`] with backoff until nothing is pending or `wait` is
    /// over; returns the last decisions.
    pub async fn wait_for_approvals(&mut self, wait: Duration) -> Result<Vec<ApprovalDecision>, GithubError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut delay = self.ctx.retry.base.max(Duration::from_millis(10));
        loop {
            let decisions = self.decide_approvals().await?;
            let pending = decisions
                .iter()
                .any(|d| matches!(d, ApprovalDecision::Pending { .. }));
            let now = tokio::time::Instant::now();
            if !pending || now >= deadline {
                return Ok(decisions);
            }
            let sleep = delay.min(deadline - now);
            tracing::info!(wait_ms = sleep.as_millis() as u64, "waiting for reviewers");
            tokio::time::sleep(sleep).await;
            delay = (delay * 2).min(Duration::from_secs(60));
        }
    }
}

/// Logs what the token may do on the repository and warns when that is more than bork-ci needs
/// (`contents: write` and `pull-requests: write`, i.e. push without admin). Returns the
/// permission names granted.
pub async fn check_token_permissions(ctx: &GithubContext) -> Result<Vec<String>, GithubError> {
    let client = client::Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
    let route = format!("/repos/{}/{}", ctx.owner, ctx.repo);
    let answer = client::expect_success(client.get(&route).await?, &route)?;
    let granted: Vec<String> = answer
        .body
        .get("permissions")
        .and_then(|permissions| permissions.as_object())
        .map(|permissions| {
            permissions
                .iter()
                .filter(|(_, value)| value.as_bool() == Some(true))
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    tracing::info!(
        "the GitHub token's permissions on {}/{}: {}",
        ctx.owner,
        ctx.repo,
        if granted.is_empty() {
            "unknown".to_owned()
        } else {
            granted.join(", ")
        }
    );
    if granted.iter().any(|name| name == "admin") {
        tracing::warn!(
            "the GitHub token has admin rights on {}/{}; bork-ci needs only contents: write and pull-requests: write",
            ctx.owner,
            ctx.repo
        );
    }
    Ok(granted)
}

/// The text of `path` on `git_ref` of the repository, through the contents API; `None` when the
/// file does not exist there. Used to read the base branch's configuration on pull-request events.
pub async fn file_at(ctx: &GithubContext, path: &str, git_ref: &str) -> Result<Option<String>, GithubError> {
    use base64::Engine;
    let client = client::Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
    let route = format!(
        "/repos/{}/{}/contents/{path}?ref={}",
        ctx.owner,
        ctx.repo,
        git_ref
            .replace('%', "%25")
            .replace('&', "%26")
            .replace('#', "%23")
    );
    let answer = client.get(&route).await?;
    if answer.status == 404 {
        return Ok(None);
    }
    let answer = client::expect_success(answer, &route)?;
    let Some(encoded) = answer.body.get("content").and_then(|value| value.as_str()) else {
        return Err(GithubError::Config(format!("{path} on {git_ref} is not a file")));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.replace(['\n', '\r'], ""))
        .map_err(|error| GithubError::Config(format!("{path} on {git_ref}: {error}")))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| GithubError::Config(format!("{path} on {git_ref} is not UTF-8")))
}

/// Commits iterations on bork-ci's branch without borrowing the [`Session`], so the loop can
/// commit while the session is kept for publishing.
#[derive(Debug, Clone)]
pub struct Committer {
    identity: git::Identity,
}

impl Committer {
    /// One commit for one iteration; `None` when it changed nothing git sees.
    pub fn commit(
        &self,
        repo_root: &Path,
        summary: &IterationSummary,
    ) -> Result<Option<String>, GithubError> {
        git::commit_iteration(repo_root, &self.identity, summary)
    }
}

impl Session {
    /// A [`Committer`] with this session's identity.
    pub fn committer(&self) -> Committer {
        Committer {
            identity: self.identity(),
        }
    }
}

/// Opens the run's GitHub session: finds bork-ci's branch and result pull request for `base`,
/// checks the local repository out onto that branch (on top of commits others pushed), and
/// loads saved approval state.
pub async fn start(ctx: &GithubContext, repo_root: &Path, base: &str) -> Result<Session, GithubError> {
    pulls::start(ctx, repo_root, base).await
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
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
    fn context_from_flags() {
        let flags = GithubFlags {
            github_repo: Some("acme/widgets".into()),
            github_api_url: Some("http://127.0.0.1:9/api/v3".into()),
            github_ref: Some("refs/heads/main".into()),
            ..GithubFlags::default()
        };
        let ctx =
            GithubContext::from_flags_with(&flags, |name| (name == "GITHUB_TOKEN").then(|| "t-1".to_owned()))
                .expect("ok")
                .expect("some");
        assert_eq!(ctx.remote_url(), "http://127.0.0.1:9/acme/widgets.git");
        assert_eq!(ctx.base_branch().as_deref(), Some("main"));
        assert_eq!(ctx.label, DEFAULT_LABEL);
        assert!(!format!("{ctx:?}").contains("t-1"));
        let half = GithubContext::from_flags_with(&flags, |_| None).expect_err("no token");
        assert!(half.to_string().contains("no token is set"), "{half}");
        let bad = GithubFlags {
            github_repo: Some("acme".into()),
            ..GithubFlags::default()
        };
        assert!(GithubContext::from_flags_with(&bad, |_| Some("t".into())).is_err());
        assert_eq!(server_from_api("https://api.github.com"), "https://github.com");
    }
}
