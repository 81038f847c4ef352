//! One run's GitHub session: the REST calls (through `client`) and the git steps (through
//! `git`) that find bork-ci's branch and result pull request again, commit each iteration,
//! publish ([`pulls`]), decide held edits from reviews ([`reviews`]) and keep the escalation
//! label and marked comments ([`labels`]). GitHub's answers are read into the small shapes of
//! [`answers`]; what is written comes from `render`.
//!
//! The session orders nothing of the loop: `delivery` calls [`start`] before the first
//! iteration, [`Committer::commit`] after each, [`Session::publish`] at the end, and
//! [`Session::decide_approvals`] or [`Session::wait_for_approvals`] for held edits.

mod answers;
mod labels;
mod pulls;
mod reviews;

use std::path::{Path, PathBuf};
use std::time::Duration;

use answers::{Content, Repository, User};

use super::client::{self, Client};
use super::context::GithubContext;
use super::data::{ApprovalDecision, GithubError, IterationSummary, PullRef};
use super::git;
use super::render;
use super::state::SavedState;

/// One run's GitHub session: the client, the branch, the result pull request and saved state.
pub struct Session {
    ctx: GithubContext,
    client: Client,
    base: String,
    base_sha: String,
    branch: String,
    repo_root: PathBuf,
    bot_login: Option<String>,
    result_pr: Option<PullRef>,
    state: Option<SavedState>,
    /// Remote tip of bork's branch when this run started (for `--force-with-lease`).
    remote_tip: Option<String>,
    /// True when the local branch was reset to the base over bork-only commits.
    rebuilt: bool,
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

/// Opens the run's GitHub session: finds bork-ci's branch and result pull request for `base`,
/// checks the local repository out onto that branch (on top of commits others pushed), and
/// loads saved approval state.
pub async fn start(ctx: &GithubContext, repo_root: &Path, base: &str) -> Result<Session, GithubError> {
    let client = Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
    // An Actions token may not read `/user`; the result pull request's author says it then.
    let who = client.get("/user").await?;
    let bot_login = if who.is_success() {
        who.json::<User>("/user").ok().map(|user| user.login)
    } else {
        None
    };
    let branch = ctx.result_branch(base);
    let url = ctx.remote_url();
    let base_sha = match (&ctx.sha, ctx.is_review_event()) {
        (Some(sha), false) => sha.clone(),
        _ => match git::fetch_branch(repo_root, &url, &ctx.token, base)? {
            Some(tip) => tip,
            None => git::rev_parse(repo_root, "HEAD")?,
        },
    };
    let marker = render::result_marker(base);
    let pulls = pulls::find_open(&client, ctx, &branch, Some(base)).await?;
    let result = pulls.iter().find(|pull| pull.body().contains(&marker));
    let result_pr = result.map(|pull| pull.pull_ref());
    let bot_login = bot_login.or_else(|| {
        result
            .and_then(|pull| pull.user.as_ref())
            .map(|user| user.login.clone())
    });
    let state = result.and_then(|pull| SavedState::from_body(pull.body()));
    let identity = identity(ctx);
    let remote_tip = git::fetch_branch(repo_root, &url, &ctx.token, &branch)?;
    let mut rebuilt = false;
    match &remote_tip {
        None => git::checkout(repo_root, &branch, &base_sha)?,
        Some(tip) if git::is_ancestor(repo_root, &base_sha, tip) => git::checkout(repo_root, &branch, tip)?,
        Some(tip) => {
            let authors = git::author_emails(repo_root, &base_sha, tip)?;
            let only_bork = authors.iter().all(|email| *email == ctx.author_email);
            let waiting = state.as_ref().is_some_and(|s| s.pending().next().is_some());
            if only_bork && !waiting {
                // The base moved on and nobody else touched bork's branch: start afresh from
                // the new base; the push uses a lease on the old tip.
                git::checkout(repo_root, &branch, &base_sha)?;
                rebuilt = true;
            } else {
                git::checkout(repo_root, &branch, tip)?;
                git::merge(
                    repo_root,
                    &identity,
                    &base_sha,
                    &render::merge_message(base, &branch),
                )?;
            }
        }
    }
    tracing::info!(branch = %branch, base = %base, resumed = state.is_some(), "GitHub session started");
    Ok(Session {
        ctx: ctx.clone(),
        client,
        base: base.to_owned(),
        base_sha,
        branch,
        repo_root: repo_root.to_path_buf(),
        bot_login,
        result_pr,
        state,
        remote_tip,
        rebuilt,
    })
}

/// Who bork-ci's commits are by, from the context.
fn identity(ctx: &GithubContext) -> git::Identity {
    git::Identity {
        name: ctx.author_name.clone(),
        email: ctx.author_email.clone(),
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

    /// The commit bork-ci's branch is at on GitHub, as last pushed or found.
    pub fn remote_tip(&self) -> Option<&str> {
        self.remote_tip.as_deref()
    }

    /// One commit for one iteration (bork-ci's identity, paths after `--`); `None` when the
    /// iteration changed nothing git sees.
    pub fn commit_iteration(
        &self,
        repo_root: &Path,
        summary: &IterationSummary,
    ) -> Result<Option<String>, GithubError> {
        self.committer().commit(repo_root, summary)
    }

    /// A [`Committer`] with this session's identity.
    pub fn committer(&self) -> Committer {
        Committer {
            identity: self.identity(),
        }
    }

    fn identity(&self) -> git::Identity {
        identity(&self.ctx)
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
        git::commit_paths(
            repo_root,
            &self.identity,
            &summary.applied,
            &summary.deleted,
            &render::iteration_message(summary),
        )
    }
}

/// The commit the tag `tag` of `repository` (`owner/name`) points at, an annotated tag followed
/// to its commit (`bork-ci init --pin`). `token` is optional: a public repository's tags are
/// readable anonymously.
pub async fn tag_commit(
    api_url: &str,
    token: Option<&secrecy::SecretString>,
    repository: &str,
    tag: &str,
) -> Result<String, GithubError> {
    #[derive(serde::Deserialize)]
    struct Object {
        #[serde(rename = "type")]
        kind: String,
        sha: String,
    }
    #[derive(serde::Deserialize)]
    struct Tagged {
        object: Object,
    }
    let policy = super::data::RetryPolicy {
        max_attempts: 3,
        base: Duration::from_secs(1),
        max_wait: Duration::from_secs(30),
    };
    let client = Client::with_token(api_url, token, policy)?;
    let mut object = client
        .get_json::<Tagged>(&format!("/repos/{repository}/git/ref/tags/{tag}"))
        .await?
        .object;
    // An annotated tag names a tag object, which names the commit (at most a short chain).
    for _ in 0..4 {
        if object.kind != "tag" {
            break;
        }
        object = client
            .get_json::<Tagged>(&format!("/repos/{repository}/git/tags/{}", object.sha))
            .await?
            .object;
    }
    if object.kind == "commit" && object.sha.len() == 40 && object.sha.bytes().all(|b| b.is_ascii_hexdigit())
    {
        Ok(object.sha.to_ascii_lowercase())
    } else {
        Err(GithubError::Protocol(format!(
            "the tag {tag} of {repository} names no commit"
        )))
    }
}

/// Logs what the token may do on the repository and warns when that is more than bork-ci needs
/// (`contents: write` and `pull-requests: write`, i.e. push without admin). Returns the
/// permission names granted.
pub async fn check_token_permissions(ctx: &GithubContext) -> Result<Vec<String>, GithubError> {
    let client = Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
    let route = format!("/repos/{}/{}", ctx.owner, ctx.repo);
    let repository: Repository = client.get_json(&route).await?;
    let granted: Vec<String> = repository
        .permissions
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, granted)| *granted)
        .map(|(name, _)| name)
        .collect();
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
    let client = Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
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
    let Ok(Content {
        content: Some(encoded),
    }) = answer.json::<Content>(&route)
    else {
        return Err(GithubError::Config(format!("{path} on {git_ref} is not a file")));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded.replace(['\n', '\r'], ""))
        .map_err(|error| GithubError::Config(format!("{path} on {git_ref}: {error}")))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| GithubError::Config(format!("{path} on {git_ref} is not UTF-8")))
}
