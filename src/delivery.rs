//! GitHub delivery around the loop: opens the run's GitHub session, resumes from saved approval
//! decisions, runs the loop (committing each iteration on bork-ci's branch), publishes the result
//! and approval pull requests, and waits for reviewers when asked to. It orders these steps only;
//! the loop itself is `reconcile`, the talking to GitHub is `github`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::budget;
use crate::config::{GithubConfig, Resolved};
use crate::edit::apply::EditAction;
use crate::github::{
    self, ApprovalDecision, ApprovalState, GithubContext, IterationSummary, PendingEdit, PublishInput,
};
use crate::reconcile::{self, RunOptions};
use crate::report::{IterationReport, PullPurpose, PullRequestRef, RunReport, RunStatus};
use crate::sandbox::Sandbox;

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

/// What GitHub started this run with, if anything (`None`: a local run).
pub fn github_context(flags: &github::GithubFlags, config: &GithubConfig) -> Result<Option<GithubContext>> {
    Ok(GithubContext::from_env_and_flags(flags)
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
    checkout: &Resolved,
) -> Result<Resolved> {
    let base = ctx.base_branch().unwrap_or_else(|| checkout.config.base.clone());
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

/// Runs the loop with GitHub delivery around it.
pub async fn run(
    ctx: &GithubContext,
    resolved: &Resolved,
    sandbox: &Sandbox,
    mut options: RunOptions,
    wait: Option<Duration>,
) -> Result<RunReport> {
    if let Err(error) = github::check_token_permissions(ctx).await {
        tracing::warn!("could not read the GitHub token's permissions: {error}");
    }
    let base = ctx.base_branch().unwrap_or_else(|| resolved.config.base.clone());
    let mut session = github::start(ctx, &options.repo, &base).await.with_context(|| {
        format!(
            "opening the GitHub session for {}/{} (base {base})",
            ctx.owner, ctx.repo
        )
    })?;
    let committer = session.committer();
    let repo = options.repo.clone();
    options.after_iteration = Some(Box::new(move |iteration: &IterationReport| {
        committer
            .commit(&repo, &iteration_summary(iteration))
            .map(|_| ())
            .map_err(anyhow::Error::new)
    }));

    // Decisions the model was already told about (earlier jobs or rounds): only new ones start
    // a round. The budgets count on from what the run spent before.
    let mut told: Vec<ApprovalDecision> = Vec::new();
    if let Some(saved) = session.resume_state() {
        options.spent = saved.spent;
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
                told.push(decision.clone());
            }
        }
        if new.is_empty() && decisions.iter().any(|d| !is_decided(d)) {
            let mut report = RunReport::new(
                options.run_id.clone(),
                resolved.config.llm.provider_name(),
                resolved.config.llm.model.clone(),
                sandbox.kind().as_str().to_owned(),
                resolved.config.max_iterations,
            );
            report.run_totals = options.spent;
            report.finish(
                RunStatus::AwaitingApproval,
                "edits held for approval have no decision yet",
            );
            attach_prs(&mut report, &session, &[]);
            return Ok(report);
        }
        if !new.is_empty() {
            tracing::info!("resuming with {} new decision(s) on held edits", new.len());
            told.extend(new);
            options.preamble = Some(decisions_text(&told));
        }
    }

    let mut whole: Option<RunReport> = None;
    for _round in 0..budget::MAX_ROUNDS {
        let this = reconcile::run(resolved, sandbox, &options).await?;
        options.spent = this.run_totals;
        let waiting = this.status == RunStatus::AwaitingApproval;
        let mut report = match whole.take() {
            Some(mut earlier) => {
                earlier.absorb(this);
                earlier
            }
            None => this,
        };
        report.pull_requests.clear();
        let outcome = session
            .publish(&publish_input(&report))
            .await
            .context("publishing the result on GitHub")?;
        report.warnings.extend(outcome.warnings.iter().cloned());
        attach_prs(&mut report, &session, &outcome.approval_prs);
        whole = Some(report);
        let Some(wait) = wait.filter(|_| waiting) else {
            break;
        };
        tracing::info!("waiting up to {}s for reviewers of held edits", wait.as_secs());
        let decisions = session
            .wait_for_approvals(wait)
            .await
            .context("waiting for reviewers")?;
        let new: Vec<ApprovalDecision> = decisions
            .into_iter()
            .filter(|decision| is_decided(decision) && !told.contains(decision))
            .collect();
        if new.is_empty() {
            break;
        }
        told.extend(new);
        options.preamble = Some(decisions_text(&told));
    }
    whole.context("the delivery loop ran no round")
}

fn attach_prs(report: &mut RunReport, session: &github::Session, approvals: &[(String, github::PullRef)]) {
    if let Some(pr) = session.result_pr() {
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
