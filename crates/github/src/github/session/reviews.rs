//! Deciding held edits: reads each approval pull request, its full review list and the
//! reviewers' permissions at decision time, hands them to [`is_approved`], checks that the
//! approved commit holds exactly the proposed bytes, and merges approved changes into the result
//! branch.

use std::collections::HashMap;

use serde_json::json;

use super::Session;
use super::answers::{CollaboratorPermission, Merged, PullRequest, PullState, Review};
use crate::github::approval::{AccountKind, Decision, Permission, ReviewView, is_approved};
use crate::github::client::expect_success;
use crate::github::data::{ApprovalDecision, GithubError, sha256_hex};
use crate::github::git;
use crate::github::render;
use crate::github::state::{ApprovalRecord, ApprovalState};

impl Session {
    /// Decides every pending approval from the full review list and permissions read now;
    /// merges approved changes (exactly the approved bytes) into the result branch and
    /// fast-forwards the local checkout; records rejections. Saves the new state.
    pub async fn decide_approvals(&mut self) -> Result<Vec<ApprovalDecision>, GithubError> {
        let Some(mut state) = self.state.clone() else {
            return Ok(Vec::new());
        };
        let mut decisions = Vec::new();
        let mut merged_any = false;
        for index in 0..state.approvals.len() {
            let record = state.approvals[index].clone();
            let decision = match &record.state {
                ApprovalState::Approved { merged_sha } => ApprovalDecision::Approved {
                    path: record.path.clone(),
                    merged_sha: merged_sha.clone(),
                },
                ApprovalState::Rejected { reviewer, comment } => ApprovalDecision::Rejected {
                    path: record.path.clone(),
                    reviewer: reviewer.clone(),
                    comment: comment.clone(),
                },
                ApprovalState::Pending => {
                    let decision = self.decide_one(&record).await?;
                    match &decision {
                        ApprovalDecision::Approved { merged_sha, .. } => {
                            merged_any = true;
                            state.approvals[index].state = ApprovalState::Approved {
                                merged_sha: merged_sha.clone(),
                            };
                        }
                        ApprovalDecision::Rejected {
                            reviewer, comment, ..
                        } => {
                            state.approvals[index].state = ApprovalState::Rejected {
                                reviewer: reviewer.clone(),
                                comment: comment.clone(),
                            };
                        }
                        ApprovalDecision::Pending { .. } => {}
                    }
                    decision
                }
            };
            decisions.push(decision);
        }
        if merged_any {
            git::fetch_branch(
                &self.repo_root,
                &self.ctx.remote_url(),
                &self.ctx.token,
                &self.branch,
            )?;
            git::fast_forward(&self.repo_root, "FETCH_HEAD")?;
            self.remote_tip = git::rev_parse(&self.repo_root, "HEAD").ok();
        }
        if self.state.as_ref() != Some(&state) {
            self.state = Some(state);
            self.save_state().await?;
        }
        Ok(decisions)
    }

    async fn decide_one(&mut self, record: &ApprovalRecord) -> Result<ApprovalDecision, GithubError> {
        let route = format!(
            "/repos/{}/{}/pulls/{}",
            self.ctx.owner, self.ctx.repo, record.pr_number
        );
        let pull: PullRequest = self.client.get_json(&route).await?;
        let path = record.path.clone();
        if pull.is_merged() {
            // A human merged it through the UI: accept only if the merged head is the
            // content bork-ci proposed.
            self.verify_content(record, &pull.head.sha)?;
            let merged_sha = pull.merge_commit_sha.unwrap_or_default();
            return Ok(ApprovalDecision::Approved { path, merged_sha });
        }
        if pull.state == PullState::Closed {
            return Ok(ApprovalDecision::Rejected {
                path,
                reviewer: None,
                comment: "The approval pull request was closed without merging.".to_owned(),
            });
        }
        let head_sha = pull.head.sha;
        let reviews: Vec<Review> = self.client.get_all(&format!("{route}/reviews")).await?;
        let reviews: Vec<ReviewView> = reviews.into_iter().map(ReviewView::from).collect();
        let mut permissions = HashMap::new();
        for review in &reviews {
            let Some(login) = &review.login else { continue };
            if review.kind != AccountKind::User || permissions.contains_key(login) {
                continue;
            }
            if !review.is_verdict() {
                continue;
            }
            permissions.insert(login.clone(), self.permission(login).await?);
        }
        let bot = self.bot_login.clone().unwrap_or_default();
        match is_approved(&reviews, &head_sha, &permissions, &bot) {
            Decision::Pending => Ok(ApprovalDecision::Pending { path }),
            Decision::Rejected { by, comment } => Ok(ApprovalDecision::Rejected {
                path,
                reviewer: Some(by),
                comment,
            }),
            Decision::Approved { by } => {
                // The head may have moved since bork-ci pushed it (someone pushed to the
                // approval branch), so the approved commit's bytes are checked, not ours.
                self.verify_content(record, &head_sha)?;
                let merge = json!({
                    "sha": head_sha,
                    "merge_method": "merge",
                    "commit_title": render::approved_merge_title(&record.path, &by),
                });
                let answer = self.client.put(&format!("{route}/merge"), &merge).await?;
                if answer.status == 409 || answer.status == 405 {
                    tracing::warn!(pr = record.pr_number, "approval pull request not mergeable now");
                    return Ok(ApprovalDecision::Pending { path });
                }
                let merged: Merged = expect_success(answer, &route)?.json(&route)?;
                let merged_sha = merged.sha.unwrap_or_default();
                Ok(ApprovalDecision::Approved { path, merged_sha })
            }
        }
    }

    /// Checks that `commit` holds exactly the proposed change to `record.path`.
    fn verify_content(&self, record: &ApprovalRecord, commit: &str) -> Result<(), GithubError> {
        let url = self.ctx.remote_url();
        let pull_head = format!("refs/pull/{}/head", record.pr_number);
        if git::fetch_ref(&self.repo_root, &url, &self.ctx.token, &pull_head).is_err() {
            git::fetch_branch(&self.repo_root, &url, &self.ctx.token, &record.branch)?;
        }
        let bytes = git::file_at(&self.repo_root, commit, &record.path)?;
        let ok = match (&bytes, record.delete) {
            (None, true) => true,
            (Some(bytes), false) => record.sha256.as_deref() == Some(&sha256_hex(bytes)),
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(GithubError::ContentMismatch {
                path: record.path.clone(),
            })
        }
    }

    async fn permission(&self, login: &str) -> Result<Permission, GithubError> {
        let route = format!(
            "/repos/{}/{}/collaborators/{}/permission",
            self.ctx.owner, self.ctx.repo, login
        );
        let answer = self.client.get(&route).await?;
        if answer.status == 404 || answer.status == 403 {
            return Ok(Permission::None);
        }
        let answer: CollaboratorPermission = expect_success(answer, &route)?.json(&route)?;
        Ok(answer.permission())
    }
}
