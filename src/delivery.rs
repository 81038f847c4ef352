//! GitHub as a run's [`Delivery`]: opens the run's GitHub session, reads a resumed run's saved
//! state and the review decisions since, commits each iteration on bork-ci's branch, publishes
//! the result and approval pull requests, and waits for reviewers when asked to. It orders
//! nothing: [`crate::reconcile::run`] calls these steps; the talking to GitHub is `github`. Also the
//! GitHub side of a run's set-up: flags, context and the base branch's trusted configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::config::{GithubConfig, Resolved};
use crate::edit::apply::EditAction;
use crate::github::{
    self, ApprovalDecision, ApprovalState, GithubContext, IterationSummary, PendingEdit, PublishInput,
};
use crate::reconcile::{Delivery, IterationHook, Resume};
use crate::report::{IterationReport, PullPurpose, PullRequestRef, RunReport};

/// `flags` with each one the command line left out taken from its variable in `env`
/// (the process's snapshot; the names are `config::env_vars::FLAG_VARS`). A text variable
/// set but empty is an empty value; an empty path or duration counts as unset.
pub fn github_flags_from_env(
    flags: &github::GithubFlags,
    env: &BTreeMap<String, String>,
) -> Result<github::GithubFlags, github::GithubError> {
    let mut flags = flags.clone();
    use crate::config::env_vars::flag;
    let text = |slot: &mut Option<String>, name: &str| {
        if slot.is_none() {
            *slot = env.get(name).cloned();
        }
    };
    text(&mut flags.github_repo, flag::GITHUB_REPOSITORY);
    text(&mut flags.github_api_url, flag::GITHUB_API_URL);
    text(&mut flags.github_server_url, flag::GITHUB_SERVER_URL);
    text(&mut flags.github_sha, flag::GITHUB_SHA);
    text(&mut flags.github_ref, flag::GITHUB_REF);
    text(&mut flags.github_event_name, flag::GITHUB_EVENT_NAME);
    text(&mut flags.github_label, flag::BORK_GITHUB_LABEL);
    text(&mut flags.github_author_name, flag::BORK_GITHUB_AUTHOR_NAME);
    text(&mut flags.github_author_email, flag::BORK_GITHUB_AUTHOR_EMAIL);
    let set = |name: &str| env.get(name).filter(|value| !value.is_empty());
    let path = |slot: &mut Option<PathBuf>, name: &str| {
        if slot.is_none() {
            *slot = set(name).map(PathBuf::from);
        }
    };
    path(&mut flags.github_event_path, flag::GITHUB_EVENT_PATH);
    path(&mut flags.github_step_summary, flag::GITHUB_STEP_SUMMARY);
    path(&mut flags.github_output, flag::GITHUB_OUTPUT);
    if flags.wait_for_approval.is_none()
        && let Some(value) = set(flag::BORK_WAIT_FOR_APPROVAL)
    {
        flags.wait_for_approval = Some(value.parse().map_err(|error| {
            github::GithubError::Config(format!(
                "{} `{}` is not a duration (e.g. `30m`): {error}",
                flag::BORK_WAIT_FOR_APPROVAL,
                crate::untrusted::one_line(value)
            ))
        })?);
    }
    Ok(flags)
}

/// The GitHub flags with the repository's `github.*` settings filling what the command line
/// left unset.
pub fn github_flags(flags: &github::GithubFlags, config: &GithubConfig) -> github::GithubFlags {
    let mut flags = flags.clone();
    flags.github_label.get_or_insert_with(|| config.label.clone());
    flags
        .github_author_name
        .get_or_insert_with(|| config.author_name.clone());
    flags
        .github_author_email
        .get_or_insert_with(|| config.author_email.clone());
    flags
}

/// What GitHub started this run with, if anything (`None`: a local run); the token is read from
/// `env`, the process's snapshot.
pub fn github_context(
    flags: &github::GithubFlags,
    config: &GithubConfig,
    env: &BTreeMap<String, String>,
) -> Result<Option<GithubContext>> {
    Ok(GithubContext::from_env_and_flags(flags, env)
        .map_err(anyhow::Error::new)
        .context("reading the GitHub settings")?
        .map(|mut ctx| {
            ctx.branch_prefix = config.branch_prefix.clone();
            ctx
        }))
}

/// On pull-request events the checkout is not trusted yet: the settings that decide where
/// secrets go and what is protected come from the base branch's configuration file.
pub async fn trusted_config(
    ctx: &GithubContext,
    repo: &Path,
    repo_args: &crate::cli::RepoArgs,
    flags: &crate::cli::ConfigFlags,
    env: &BTreeMap<String, String>,
) -> Result<Resolved> {
    let base = ctx
        .base_branch()
        .context("a pull-request event whose payload names no base branch")?;
    let path = repo_args
        .config
        .as_ref()
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| crate::config::CONFIG_PATH.to_owned());
    let text = github::file_at(ctx, &path, &base)
        .await
        .map_err(anyhow::Error::new)
        .with_context(|| format!("reading {path} from the base branch {base}"))?;
    tracing::info!("pull-request event: security settings come from {path} on {base}");
    crate::config::load_with_trusted(
        repo,
        repo_args.config.as_deref(),
        env,
        &flags.values(),
        Some(text.as_deref()),
    )
    .map_err(anyhow::Error::new)
    .context("invalid configuration")
}

/// The one-line commit message and summary of an iteration (bork-ci's words, not the model's).
pub fn iteration_summary(iteration: &IterationReport) -> IterationSummary {
    let mut applied = Vec::new();
    let mut deleted = Vec::new();
    for edit in &iteration.applied {
        match edit.action {
            EditAction::Write => applied.push(edit.path.clone()),
            EditAction::Delete => deleted.push(edit.path.clone()),
        }
    }
    IterationSummary {
        number: iteration.number,
        message: format!(
            "bork-ci: iteration {}: {} file(s) written, {} deleted, {} finding(s) left",
            iteration.number,
            applied.len(),
            deleted.len(),
            iteration.findings.len()
        ),
        applied,
        deleted,
        findings_left: iteration.findings.len(),
    }
}

/// What `github` needs to publish a report.
pub fn publish_input(report: &RunReport) -> PublishInput {
    PublishInput {
        status: report.status,
        iterations: report.iterations.iter().map(iteration_summary).collect(),
        findings_left: report.findings_left.clone(),
        pending: report
            .pending_approvals
            .iter()
            .map(|edit| PendingEdit {
                path: edit.path.clone(),
                delete: matches!(edit.action, EditAction::Delete),
                contents: edit.contents.clone(),
                sha256: edit.sha256.clone(),
                rule: edit.rule.clone(),
                waiting: edit.waiting.clone(),
            })
            .collect(),
        refused: report
            .refused
            .iter()
            .map(|edit| (edit.path.clone(), edit.reason.clone()))
            .collect(),
        tokens: (
            report.usage.input_tokens,
            report.usage.output_tokens,
            report.usage.cached_input_tokens,
        ),
        cost_usd: report.cost_usd,
        prompt_version: report.prompt_version.clone(),
        spent: report.run_totals,
    }
}

fn is_decided(decision: &ApprovalDecision) -> bool {
    !matches!(decision, ApprovalDecision::Pending { .. })
}

/// Renders new decisions for the model: approvals as facts, rejections quoting the reviewer.
fn decisions_text(decisions: &[ApprovalDecision]) -> String {
    let mut text = String::from("# Human decisions on edits held for approval\n\n");
    for decision in decisions {
        match decision {
            ApprovalDecision::Approved { path, .. } => {
                text.push_str(&format!(
                    "- `{path}`: approved and merged; it is in the files above.\n"
                ));
            }
            ApprovalDecision::Rejected { .. } => {
                if let Some(crate::findings::Finding::CodeReview { finding, .. }) = decision.to_finding() {
                    text.push_str(&format!("- {finding}\n"));
                }
            }
            ApprovalDecision::Pending { path } => {
                text.push_str(&format!(
                    "- `{path}`: still waiting for a reviewer; do not propose it again.\n"
                ));
            }
        }
    }
    text
}

/// GitHub as a run's delivery: the session (the result branch and pull request, approval pull
/// requests, labels), the per-iteration commits, resuming from saved state and waiting for
/// reviewers. [`crate::reconcile::run`] decides when each of these happens.
pub struct Github<'a> {
    ctx: &'a GithubContext,
    repo: PathBuf,
    base: String,
    /// How long to wait for reviewers after a round that held edits (`--wait-for-approval`).
    wait: Option<Duration>,
    session: Option<github::Session>,
    /// Decisions the model was already told about (earlier jobs or rounds): only new ones
    /// start a round.
    told: Vec<ApprovalDecision>,
}

impl<'a> Github<'a> {
    pub fn new(ctx: &'a GithubContext, resolved: &Resolved, repo: &Path, wait: Option<Duration>) -> Self {
        Github {
            ctx,
            repo: repo.to_owned(),
            base: ctx.base_branch().unwrap_or_else(|| resolved.config.base.clone()),
            wait,
            session: None,
            told: Vec::new(),
        }
    }

    fn session(&mut self) -> Result<&mut github::Session> {
        self.session
            .as_mut()
            .context("the GitHub session is opened by `resume` first")
    }
}

impl Delivery for Github<'_> {
    async fn resume(&mut self) -> Result<Resume> {
        if let Err(error) = github::check_token_permissions(self.ctx).await {
            tracing::warn!("could not read the GitHub token's permissions: {error}");
        }
        let session = github::start(self.ctx, &self.repo, &self.base)
            .await
            .with_context(|| {
                format!(
                    "opening the GitHub session for {}/{} (base {})",
                    self.ctx.owner, self.ctx.repo, self.base
                )
            })?;
        let session = self.session.insert(session);
        let Some(saved) = session.resume_state() else {
            return Ok(Resume::Fresh);
        };
        let spent = saved.spent;
        let was_pending: Vec<bool> = saved
            .approvals
            .iter()
            .map(|record| record.state == ApprovalState::Pending)
            .collect();
        let decisions = session
            .decide_approvals()
            .await
            .context("deciding held edits from reviews")?;
        // One decision per saved record, in order: new are those whose record was pending.
        let mut new = Vec::new();
        for (index, decision) in decisions.iter().enumerate() {
            if !is_decided(decision) {
                continue;
            }
            if was_pending.get(index).copied().unwrap_or(true) {
                new.push(decision.clone());
            } else {
                self.told.push(decision.clone());
            }
        }
        if new.is_empty() && decisions.iter().any(|d| !is_decided(d)) {
            return Ok(Resume::StillWaiting { spent });
        }
        let decisions = if new.is_empty() {
            None
        } else {
            tracing::info!("{} new decision(s) on held edits", new.len());
            self.told.extend(new);
            Some(decisions_text(&self.told))
        };
        Ok(Resume::Continue { spent, decisions })
    }

    fn iteration_hook(&self) -> Option<IterationHook> {
        let committer = self.session.as_ref()?.committer();
        let repo = self.repo.clone();
        Some(Box::new(move |iteration: &IterationReport| {
            committer
                .commit(&repo, &iteration_summary(iteration))
                .map(|_| ())
                .map_err(anyhow::Error::new)
        }))
    }

    async fn publish(&mut self, report: &mut RunReport) -> Result<()> {
        let session = self.session()?;
        report.pull_requests.clear();
        let outcome = match session.publish(&publish_input(report)).await {
            Ok(outcome) => outcome,
            Err(error) => {
                // What was pushed stays on record: the branch and its commit.
                if let Some(tip) = session.remote_tip() {
                    report.result_branch = Some(session.branch().to_owned());
                    report.result_sha = Some(tip.to_owned());
                }
                return Err(anyhow::Error::new(error).context("publishing the result on GitHub"));
            }
        };
        report.warnings.extend(outcome.warnings.iter().cloned());
        attach_prs(report, session, &outcome.approval_prs);
        Ok(())
    }

    fn link(&self, report: &mut RunReport) {
        if let Some(session) = &self.session {
            attach_prs(report, session, &[]);
        }
    }

    async fn decisions(&mut self) -> Result<Option<String>> {
        let Some(wait) = self.wait else {
            return Ok(None);
        };
        tracing::info!("waiting up to {}s for reviewers of held edits", wait.as_secs());
        let decisions = self
            .session()?
            .wait_for_approvals(wait)
            .await
            .context("waiting for reviewers")?;
        let new: Vec<ApprovalDecision> = decisions
            .into_iter()
            .filter(|decision| is_decided(decision) && !self.told.contains(decision))
            .collect();
        if new.is_empty() {
            return Ok(None);
        }
        self.told.extend(new);
        Ok(Some(decisions_text(&self.told)))
    }
}

fn attach_prs(report: &mut RunReport, session: &github::Session, approvals: &[(String, github::PullRef)]) {
    if let Some(pr) = session.result_pr() {
        report.result_branch = Some(session.branch().to_owned());
        report.result_sha = session.remote_tip().map(str::to_owned);
        report.pull_requests.push(PullRequestRef {
            number: pr.number,
            url: pr.url.clone(),
            purpose: PullPurpose::Result,
        });
    }
    for (path, pr) in approvals {
        report.pull_requests.push(PullRequestRef {
            number: pr.number,
            url: pr.url.clone(),
            purpose: PullPurpose::Approval(path.clone()),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> github::GithubFlags {
        github::GithubFlags {
            github_repo: Some("acme/widgets".into()),
            github_api_url: Some("http://127.0.0.1:9/api/v3".into()),
            github_ref: Some("refs/heads/main".into()),
            ..github::GithubFlags::default()
        }
    }

    #[test]
    fn unset_flags_fall_back_to_their_variables() {
        let env: BTreeMap<String, String> = [
            ("GITHUB_REPOSITORY", "acme/other"),
            ("GITHUB_SHA", ""),
            ("GITHUB_EVENT_NAME", "push"),
            ("GITHUB_STEP_SUMMARY", ""),
            ("GITHUB_OUTPUT", "/tmp/out"),
            ("BORK_WAIT_FOR_APPROVAL", "30m"),
        ]
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
        let filled = github_flags_from_env(&flags(), &env).expect("reads");
        assert_eq!(filled.github_repo.as_deref(), Some("acme/widgets"), "a flag wins");
        assert_eq!(filled.github_sha.as_deref(), Some(""), "empty text is a value");
        assert_eq!(filled.github_event_name.as_deref(), Some("push"));
        assert_eq!(filled.github_step_summary, None, "an empty path is unset");
        assert_eq!(filled.github_output, Some(PathBuf::from("/tmp/out")));
        assert_eq!(
            filled.wait_for_approval.map(std::time::Duration::from),
            Some(std::time::Duration::from_secs(1800))
        );
        let bad: BTreeMap<String, String> = [("BORK_WAIT_FOR_APPROVAL".to_owned(), "soon".to_owned())].into();
        let error = github_flags_from_env(&flags(), &bad)
            .expect_err("refuses")
            .to_string();
        assert!(error.contains("BORK_WAIT_FOR_APPROVAL"), "{error}");
    }
}
