//! What the run was started by: the flags and Actions variables ([`GithubFlags`]), read once
//! into a [`GithubContext`] (repository, token, API and web roots, the event and its payload),
//! and the branch names that follow from it (bork-ci's result branch, approval branches, the
//! base of the result pull request).
//!
//! It reads the runner's documented variables and the event file, and talks to nobody: the
//! REST calls are the session's, git is `git`'s.

use std::collections::BTreeMap;
use std::path::PathBuf;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use super::data::{GithubError, RetryPolicy, sanitize_branch};

/// Command-line flags for GitHub delivery; the CLI flattens this into `bork-ci run`. Each flag
/// falls back to the Actions variable of the same meaning (`delivery::github_flags_from_env`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GithubFlags {
    /// Repository as `owner/name`; without it the run stays local. Named without a token, or set
    /// but empty while a token is: an error. Falls back to `GITHUB_REPOSITORY`.
    #[arg(long, value_name = "OWNER/NAME")]
    pub github_repo: Option<String>,
    /// REST API root (GitHub Enterprise Server: `https://HOST/api/v3`). Falls back to
    /// `GITHUB_API_URL`.
    #[arg(long, value_name = "URL")]
    pub github_api_url: Option<String>,
    /// Web/git root; derived from the API URL when absent. Falls back to `GITHUB_SERVER_URL`.
    #[arg(long, value_name = "URL")]
    pub github_server_url: Option<String>,
    /// Name of the environment variable that holds the token (default: `BORK_GITHUB_TOKEN`,
    /// then `GITHUB_TOKEN`). The token itself is never a flag.
    #[arg(long, value_name = "VAR")]
    pub github_token_env: Option<String>,
    /// Commit the run started from. Falls back to `GITHUB_SHA`.
    #[arg(long, value_name = "SHA")]
    pub github_sha: Option<String>,
    /// Ref the run started from (`refs/heads/main`). Falls back to `GITHUB_REF`.
    #[arg(long, value_name = "REF")]
    pub github_ref: Option<String>,
    /// Base branch of the result pull request (default: the branch of `--github-ref` or of the
    /// reviewed pull request).
    #[arg(long, value_name = "BRANCH")]
    pub github_base: Option<String>,
    /// Event that started the run (`push`, `pull_request_review`, ...).
    /// Falls back to `GITHUB_EVENT_NAME`.
    #[arg(long, value_name = "NAME")]
    pub github_event_name: Option<String>,
    /// JSON payload of that event. Falls back to `GITHUB_EVENT_PATH`.
    #[arg(long, value_name = "PATH")]
    pub github_event_path: Option<PathBuf>,
    /// File the job summary is appended to. Falls back to `GITHUB_STEP_SUMMARY`.
    #[arg(long, value_name = "PATH")]
    pub github_step_summary: Option<PathBuf>,
    /// File the step outputs are appended to. Falls back to `GITHUB_OUTPUT`.
    #[arg(long, value_name = "PATH")]
    pub github_output: Option<PathBuf>,
    /// Label added when a run needs a human (`github.label`). Falls back to `BORK_GITHUB_LABEL`.
    #[arg(long, value_name = "LABEL")]
    pub github_label: Option<String>,
    /// Commit author name (`github.author-name`). Falls back to `BORK_GITHUB_AUTHOR_NAME`.
    #[arg(long, value_name = "NAME")]
    pub github_author_name: Option<String>,
    /// Commit author email (`github.author-email`). Falls back to `BORK_GITHUB_AUTHOR_EMAIL`.
    #[arg(long, value_name = "EMAIL")]
    pub github_author_email: Option<String>,
    /// Wait this long for reviewers of pending edits, polling with backoff (e.g. `30m`);
    /// without it a run with pending edits saves its state and exits 3.
    /// Falls back to `BORK_WAIT_FOR_APPROVAL`.
    #[arg(long, value_name = "DURATION")]
    pub wait_for_approval: Option<humantime::Duration>,
}

/// How bork-ci appears on GitHub (the configuration's `github.*` section), each default stated
/// once here.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct GithubConfig {
    pub label: String,
    pub author_name: String,
    pub author_email: String,
    pub branch_prefix: String,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            label: "bork:needs-human".into(),
            author_name: "bork-ci".into(),
            author_email: "bork-ci@users.noreply.github.com".into(),
            branch_prefix: "bork/".into(),
        }
    }
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
    /// Builds the context from flags (filled from the Actions variables by the caller) and the token variable in `env`, the process's snapshot.
    /// `Ok(None)` means a local run: neither a repository nor a token, or a token alone (said in
    /// one line). Half a setup is an error naming the missing setting: a repository without a
    /// token, or a token with a repository setting that is set but empty.
    pub fn from_env_and_flags(
        flags: &GithubFlags,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, GithubError> {
        Self::from_flags_with(flags, |name| env.get(name).cloned())
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
                bork_ci_core::secrets::register(name, &value);
            }
        }
        let token = names.iter().find_map(|name| {
            lookup(name)
                .filter(|value| !value.trim().is_empty())
                .map(|value| (*name, value))
        });
        // The flag may hold `GITHUB_REPOSITORY`'s value; look at the variable directly:
        // set-but-empty is what CI plugins pass for an unset variable.
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
        // Unset settings take the configuration's defaults (`github.*`), stated once there.
        let defaults = GithubConfig::default();
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
            author_name: flags.github_author_name.clone().unwrap_or(defaults.author_name),
            author_email: flags.github_author_email.clone().unwrap_or(defaults.author_email),
            label: flags
                .github_label
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or(defaults.label),
            branch_prefix: defaults.branch_prefix,
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
        if let Some(pull) = self.event().and_then(|event| event.pull_request)
            && let Some(base) = pull.base.and_then(|base| base.name)
        {
            let head = pull.head.and_then(|head| head.name);
            if let Some(stripped) = base.strip_prefix(&self.branch_prefix) {
                // An approval pull request: its base is `bork/<base>`, except when it is
                // `bork/approve/...` which is never a base.
                return Some(stripped.to_owned());
            }
            if head.is_some_and(|head| head.starts_with(&self.branch_prefix)) {
                return Some(base);
            }
        }
        self.git_ref
            .as_deref()
            .and_then(|r| r.strip_prefix("refs/heads/"))
            .map(str::to_owned)
    }

    /// The event payload, when there is one and it reads as one.
    fn event(&self) -> Option<Event> {
        let path = self.event_path.as_ref()?;
        let bytes = bork_ci_core::safe_fs::read_regular(std::path::Path::new(path), 64 << 20).ok()?;
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
            // Fail closed: a payload that cannot be read, or a head repository it does not
            // name (a deleted fork), is treated as a fork.
            let Some(event) = self.event() else {
                return Some(format!(
                    "untrusted context: the {event_name} event payload (GITHUB_EVENT_PATH) could not be read, so the pull request is treated as coming from a fork"
                ));
            };
            let head_repo = event
                .pull_request
                .and_then(|pull| pull.head)
                .and_then(|head| head.repo)
                .and_then(|repo| repo.full_name);
            let this = format!("{}/{}", self.owner, self.repo);
            match head_repo {
                Some(head) if head.eq_ignore_ascii_case(&this) => {}
                Some(_) => return Some("untrusted context: pull request from a fork, no secrets".into()),
                None => {
                    return Some(
                        "untrusted context: the event payload names no head repository (a deleted fork?), no secrets".into(),
                    );
                }
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
        self.event()?.pull_request?.base?.name
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

    /// The branch of the approval pull request for one change to `path` into `base`'s result
    /// branch; `tag` is the change's sha256 (or `delete`), of which the first 12 characters go
    /// into the name, so another proposal for the same path gets another branch.
    pub fn approval_branch(&self, base: &str, path: &str, tag: &str) -> String {
        let short: String = tag.chars().take(12).collect();
        sanitize_branch(&format!("{}approve/{base}/{path}-{short}", self.branch_prefix))
    }
}

/// The part of an event payload the run looks at; every field may be absent.
#[derive(Debug, Deserialize)]
struct Event {
    pull_request: Option<EventPull>,
}

/// `pull_request` of a `pull_request*` event.
#[derive(Debug, Deserialize)]
struct EventPull {
    base: Option<EventBranch>,
    head: Option<EventBranch>,
}

/// `base` or `head` of that pull request.
#[derive(Debug, Deserialize)]
struct EventBranch {
    #[serde(rename = "ref")]
    name: Option<String>,
    repo: Option<EventRepository>,
}

/// The repository a pull request's branch lives in (`null` once a fork is deleted).
#[derive(Debug, Deserialize)]
struct EventRepository {
    full_name: Option<String>,
}

fn server_from_api(api_url: &str) -> String {
    let trimmed = api_url.trim_end_matches('/');
    if trimmed == "https://api.github.com" {
        return "https://github.com".to_owned();
    }
    trimmed.strip_suffix("/api/v3").unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    fn flags() -> GithubFlags {
        GithubFlags {
            github_repo: Some("acme/widgets".into()),
            github_api_url: Some("http://127.0.0.1:9/api/v3".into()),
            github_ref: Some("refs/heads/main".into()),
            ..GithubFlags::default()
        }
    }

    fn context(flags: &GithubFlags) -> GithubContext {
        GithubContext::from_flags_with(flags, |name| (name == "GITHUB_TOKEN").then(|| "t-1".to_owned()))
            .expect("ok")
            .expect("some")
    }

    #[test]
    fn context_from_flags() {
        let flags = flags();
        let ctx = context(&flags);
        assert_eq!(ctx.remote_url(), "http://127.0.0.1:9/acme/widgets.git");
        assert_eq!(ctx.base_branch().as_deref(), Some("main"));
        assert_eq!(ctx.label, GithubConfig::default().label);
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

    #[test]
    fn branches_are_named_from_the_prefix_and_sanitised() {
        let ctx = context(&flags());
        assert_eq!(ctx.result_branch("main"), "bork/main");
        assert_eq!(
            ctx.approval_branch("main", "specs/a b.md", "0123456789abcdef"),
            "bork/approve/main/specs/a-b.md-0123456789ab"
        );
        assert_eq!(
            ctx.approval_branch("main", "../x", "delete"),
            "bork/approve/main/x-delete"
        );
    }

    fn with_event(name: &str, payload: &str) -> (tempfile::TempDir, GithubContext) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("event.json");
        std::fs::write(&path, payload).expect("write");
        let flags = GithubFlags {
            github_event_name: Some(name.into()),
            github_event_path: Some(path),
            ..flags()
        };
        let ctx = context(&flags);
        (dir, ctx)
    }

    #[test]
    fn the_event_names_the_base_and_the_fork() {
        let same = r#"{"pull_request": {"base": {"ref": "release"}, "head": {"ref": "feature",
            "repo": {"full_name": "ACME/widgets"}}}}"#;
        let (_dir, ctx) = with_event("pull_request", same);
        assert!(ctx.is_pull_request_event());
        assert_eq!(ctx.untrusted_context(), None);
        assert_eq!(ctx.event_base_ref().as_deref(), Some("release"));
        assert_eq!(
            ctx.base_branch().as_deref(),
            Some("main"),
            "a human's pull request"
        );

        let fork = r#"{"pull_request": {"base": {"ref": "main"}, "head": {"ref": "x",
            "repo": {"full_name": "mallory/widgets"}}}}"#;
        let (_dir, ctx) = with_event("pull_request", fork);
        assert!(ctx.untrusted_context().expect("untrusted").contains("fork"));

        let gone = r#"{"pull_request": {"base": {"ref": "main"}, "head": {"ref": "x", "repo": null}}}"#;
        let (_dir, ctx) = with_event("pull_request_review", gone);
        assert!(
            ctx.untrusted_context()
                .expect("fails closed")
                .contains("head repository"),
            "a deleted fork is still a fork"
        );
        let (_dir, ctx) = with_event("pull_request", "not json");
        assert!(
            ctx.untrusted_context()
                .expect("fails closed")
                .contains("could not be read")
        );

        let approval = r#"{"pull_request": {"base": {"ref": "bork/release"},
            "head": {"ref": "bork/approve/release/specs/a.md-00"}}}"#;
        let (_dir, ctx) = with_event("pull_request_review", approval);
        assert!(ctx.is_review_event());
        assert_eq!(ctx.base_branch().as_deref(), Some("release"));

        let result = r#"{"pull_request": {"base": {"ref": "release"}, "head": {"ref": "bork/release"}}}"#;
        let (_dir, ctx) = with_event("pull_request_review", result);
        assert_eq!(ctx.base_branch().as_deref(), Some("release"));

        let (_dir, ctx) = with_event("pull_request_target", "{}");
        assert!(
            ctx.untrusted_context()
                .expect("untrusted")
                .contains("pull_request_target")
        );
    }
}
