//! The result pull request and the approval pull requests: finding them again on a re-run
//! (deterministic branch plus a hidden marker in the body), pushing, opening or updating them,
//! and keeping the saved state in the result pull request's body. Bodies and titles come from
//! `render`.

use std::path::Path;

use serde_json::json;

use super::Session;
use super::answers::PullRequest;
use super::labels;
use crate::github::client::{Client, encode, expect_success};
use crate::github::context::GithubContext;
use crate::github::data::{GithubError, PendingEdit, PublishInput, PublishOutcome, PullRef, sha256_hex};
use crate::github::git;
use crate::github::render;
use crate::github::state::{ApprovalRecord, ApprovalState, SavedState};
use bork_ci_run::report::RunStatus;

/// Open pull requests from `head` (this repository) into `base`.
pub(super) async fn find_open(
    client: &Client,
    ctx: &GithubContext,
    head: &str,
    base: Option<&str>,
) -> Result<Vec<PullRequest>, GithubError> {
    let mut route = format!(
        "/repos/{}/{}/pulls?state=open&head={}:{}",
        ctx.owner,
        ctx.repo,
        ctx.owner,
        encode(head).replace("%2F", "/")
    );
    if let Some(base) = base {
        route.push_str(&format!("&base={}", encode(base).replace("%2F", "/")));
    }
    let pulls: Vec<PullRequest> = client.get_all(&route).await?;
    // Filter again: some servers ignore `head` without an owner prefix.
    Ok(pulls.into_iter().filter(|pull| pull.head.name == head).collect())
}

/// Opens a pull request, or finds the one that already exists for `head` (re-run or a
/// concurrent run), and sets its title and body.
async fn open_or_update(
    client: &Client,
    ctx: &GithubContext,
    head: &str,
    base: &str,
    title: &str,
    body: &str,
    existing: Option<u64>,
) -> Result<PullRef, GithubError> {
    let route = format!("/repos/{}/{}/pulls", ctx.owner, ctx.repo);
    let number = match existing {
        Some(number) => Some(number),
        None => {
            let answer = client
                .post(
                    &route,
                    &json!({ "title": title, "head": head, "base": base, "body": body,
                             "maintainer_can_modify": true }),
                )
                .await?;
            if answer.is_success() {
                return Ok(answer.json::<PullRequest>(&route)?.pull_ref());
            }
            if answer.status != 422 || !answer.message().contains("already exists") {
                expect_success(answer, &route)?;
            }
            find_open(client, ctx, head, Some(base))
                .await?
                .first()
                .map(|pull| pull.number)
        }
    };
    let number = number
        .ok_or_else(|| GithubError::Protocol(format!("no open pull request from `{head}` after 422")))?;
    let update = format!("{route}/{number}");
    let answer = client
        .patch(&update, &json!({ "title": title, "body": body }))
        .await?;
    let pull: PullRequest = expect_success(answer, &update)?.json(&update)?;
    Ok(pull.pull_ref())
}

impl Session {
    /// Pushes bork-ci's branch, opens or updates the result pull request and one approval pull
    /// request per pending edit, and adds or removes the escalation label and findings comment.
    pub async fn publish(&mut self, input: &PublishInput) -> Result<PublishOutcome, GithubError> {
        let mut outcome = PublishOutcome::default();
        if input.status == RunStatus::Skipped {
            return Ok(outcome);
        }
        let (owner, repo) = (self.ctx.owner.clone(), self.ctx.repo.clone());
        if let Some(pr) = &self.result_pr {
            let route = format!("/repos/{owner}/{repo}/pulls/{}", pr.number);
            let pull: PullRequest = self.client.get_json(&route).await?;
            if pull.is_merged() {
                return Err(GithubError::ResultClosed {
                    number: pr.number,
                    what: "merged",
                });
            }
        }
        let repo_root = self.repo_root.clone();
        let mut head = git::rev_parse(&repo_root, "HEAD")?;
        let ahead = git::count_between(&repo_root, &self.base_sha, &head)?;
        let new_pending: Vec<&PendingEdit> = input
            .pending
            .iter()
            .filter(|edit| !self.already_decided(edit))
            .collect();
        if ahead == 0 && new_pending.is_empty() && self.result_pr.is_none() {
            tracing::info!("no changes: no pull request");
            return Ok(outcome);
        }
        if ahead == 0 && self.result_pr.is_none() {
            // GitHub refuses a pull request without commits, and the result pull request is
            // where the approval state lives: record the wait as an empty commit.
            head = self.empty_commit(input.pending.len())?;
        }
        if self.remote_tip.as_deref() != Some(head.as_str()) {
            let lease = if self.rebuilt {
                self.remote_tip.as_deref()
            } else {
                None
            };
            if let Err(error) = git::push(
                &repo_root,
                &self.ctx.remote_url(),
                &self.ctx.token,
                &head,
                &self.branch,
                lease,
            ) {
                if let Some(pr) = self.result_pr.clone() {
                    let note = render::push_refused_comment(&self.branch, &error.to_string());
                    let _ = self
                        .client
                        .post(
                            &format!("/repos/{owner}/{repo}/issues/{}/comments", pr.number),
                            &json!({ "body": note }),
                        )
                        .await;
                }
                return Err(error);
            }
            self.remote_tip = Some(head.clone());
            self.rebuilt = false;
            outcome.pushed = true;
        }
        let mut state = self.state.clone().unwrap_or_default();
        state.version = 1;
        state.base = self.base.clone();
        state.base_sha = self.base_sha.clone();
        state.status = input.status;
        state.iterations = input.spent.iterations;
        state.spent = input.spent;
        for edit in &input.pending {
            match self.open_approval(&head, edit, &state).await {
                Ok(Some(record)) => {
                    outcome.approval_prs.push((
                        record.path.clone(),
                        PullRef {
                            number: record.pr_number,
                            url: record.pr_url.clone(),
                        },
                    ));
                    state
                        .approvals
                        .retain(|old| !(old.path == record.path && old.state == ApprovalState::Pending));
                    state.approvals.push(record);
                }
                Ok(None) => outcome.warnings.push(format!(
                    "{}: the same change was rejected before; not proposed again",
                    edit.path
                )),
                Err(GithubError::PushRejected { detail, .. }) if refuses_workflows(&detail) => {
                    let warning = format!(
                        "approval pull request for {}: not delivered: GitHub refuses a push that changes a workflow file from a token without the `workflows` permission; give the GitHub App `workflows: write` (`permission-workflows: write` in the create-github-app-token step), or make the change by hand: its content is in the report",
                        edit.path
                    );
                    tracing::warn!("{warning}");
                    outcome.warnings.push(warning);
                }
                Err(error) => outcome
                    .warnings
                    .push(format!("approval pull request for {}: {error}", edit.path)),
            }
        }
        let body = render::result_body(&self.base, input, &state.approvals, &state);
        let title = render::result_title(&self.base);
        let pr = open_or_update(
            &self.client,
            &self.ctx,
            &self.branch,
            &self.base,
            &title,
            &body,
            self.result_pr.as_ref().map(|pr| pr.number),
        )
        .await?;
        self.result_pr = Some(pr.clone());
        self.state = Some(state);
        outcome.result_pr = Some(pr.clone());
        let marker = render::findings_marker(&self.base);
        if input.status == RunStatus::NeedsHuman {
            labels::ensure_label(&self.client, &owner, &repo, &self.ctx.label).await?;
            labels::add_label(&self.client, &owner, &repo, pr.number, &self.ctx.label).await?;
            outcome.labelled = true;
            let comment = render::findings_comment(&self.base, &input.findings_left, input.iterations.len());
            labels::upsert_comment(
                &self.client,
                &owner,
                &repo,
                pr.number,
                &marker,
                &comment,
                self.bot_login.as_deref(),
                false,
            )
            .await?;
        } else if input.status == RunStatus::Converged {
            labels::remove_label(&self.client, &owner, &repo, pr.number, &self.ctx.label).await?;
            labels::upsert_comment(
                &self.client,
                &owner,
                &repo,
                pr.number,
                &marker,
                &render::resolved_comment(&self.base),
                self.bot_login.as_deref(),
                true,
            )
            .await?;
        }
        Ok(outcome)
    }

    fn already_decided(&self, edit: &PendingEdit) -> bool {
        let sha = edit.content_sha256();
        self.state.as_ref().is_some_and(|state| {
            state.approvals.iter().any(|record| {
                record.path == edit.path
                    && record.sha256 == sha
                    && record.delete == edit.delete
                    && !matches!(record.state, ApprovalState::Pending)
            })
        })
    }

    fn empty_commit(&self, pending: usize) -> Result<String, GithubError> {
        let identity = self.identity();
        let message = render::waiting_message(pending);
        let tree_parent = git::rev_parse(&self.repo_root, "HEAD")?;
        let commit = git::single_change_commit_empty(&self.repo_root, &identity, &tree_parent, &message)?;
        git::fast_forward(&self.repo_root, &commit)?;
        Ok(commit)
    }

    /// Opens (or keeps) the approval pull request for one pending edit; `None` when the same
    /// change was already rejected.
    async fn open_approval(
        &self,
        head: &str,
        edit: &PendingEdit,
        state: &SavedState,
    ) -> Result<Option<ApprovalRecord>, GithubError> {
        let sha256 = edit.content_sha256();
        if let Some(old) = state.approvals.iter().find(|record| {
            record.path == edit.path && record.sha256 == sha256 && record.delete == edit.delete
        }) {
            match old.state {
                ApprovalState::Rejected { .. } => return Ok(None),
                ApprovalState::Pending => return Ok(Some(old.clone())),
                ApprovalState::Approved { .. } => return Ok(Some(old.clone())),
            }
        }
        let tag = sha256.clone().unwrap_or_else(|| "delete".to_owned());
        let branch = self.ctx.approval_branch(&self.base, &edit.path, &tag);
        let identity = self.identity();
        let message = render::approval_commit_message(edit, &tag);
        let url = self.ctx.remote_url();
        let existing = git::fetch_branch(&self.repo_root, &url, &self.ctx.token, &branch)?;
        let commit = match existing {
            Some(tip) if content_matches(&self.repo_root, &tip, edit, sha256.as_deref()) => tip,
            Some(_) => {
                return Err(GithubError::PushRejected {
                    branch,
                    detail: "the approval branch holds other content; left alone".into(),
                });
            }
            None => {
                let commit = git::single_change_commit(
                    &self.repo_root,
                    &identity,
                    head,
                    &edit.path,
                    edit.contents.as_deref().map(str::as_bytes),
                    &message,
                )?;
                git::push(&self.repo_root, &url, &self.ctx.token, &commit, &branch, Some(""))?;
                commit
            }
        };
        let title = render::approval_title(edit);
        let body = render::approval_body(&self.base, edit, &tag);
        let existing_pr = find_open(&self.client, &self.ctx, &branch, Some(&self.branch))
            .await?
            .first()
            .map(|pull| pull.number);
        let pr = open_or_update(
            &self.client,
            &self.ctx,
            &branch,
            &self.branch,
            &title,
            &body,
            existing_pr,
        )
        .await?;
        Ok(Some(ApprovalRecord {
            path: edit.path.clone(),
            delete: edit.delete,
            sha256,
            rule: edit.rule.clone(),
            branch,
            pr_number: pr.number,
            pr_url: pr.url,
            head_sha: commit,
            state: ApprovalState::Pending,
        }))
    }

    /// Writes the current state into the result pull request's body, in place.
    pub(super) async fn save_state(&mut self) -> Result<(), GithubError> {
        let (Some(pr), Some(state)) = (&self.result_pr, &self.state) else {
            return Ok(());
        };
        let route = format!("/repos/{}/{}/pulls/{}", self.ctx.owner, self.ctx.repo, pr.number);
        let pull: PullRequest = self.client.get_json(&route).await?;
        let body = render::body_with_state(pull.body(), state);
        expect_success(self.client.patch(&route, &json!({ "body": body })).await?, &route)?;
        Ok(())
    }
}

fn content_matches(repo: &Path, commit: &str, edit: &PendingEdit, sha256: Option<&str>) -> bool {
    match git::file_at(repo, commit, &edit.path) {
        Ok(None) => edit.delete,
        Ok(Some(bytes)) => !edit.delete && sha256 == Some(sha256_hex(&bytes).as_str()),
        Err(_) => false,
    }
}

/// Whether a refused push is GitHub's refusal of a workflow file from a token that may not
/// change workflows (an App without `workflows`, an OAuth token without the `workflow` scope).
fn refuses_workflows(detail: &str) -> bool {
    detail.contains("refusing to allow") && detail.contains("workflow")
}
