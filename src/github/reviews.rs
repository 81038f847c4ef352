//! Approvals: the pure decision over a pull request's full review list ([`is_approved`]), and
//! the session step that reads reviews and permissions at decision time, checks the approved
//! content's hash and merges approved changes into the result branch.

use std::collections::HashMap;

use serde_json::Value;

use super::client::expect_success;
use super::state::{ApprovalRecord, ApprovalState};
use super::{ApprovalDecision, GithubError, Session, git};

/// A collaborator's permission on the repository, read at decision time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    Admin,
    Maintain,
    Write,
    Triage,
    Read,
    None,
}

impl Permission {
    /// From the `permission` (legacy) and `role_name` fields of
    /// `GET /repos/{o}/{r}/collaborators/{u}/permission`.
    pub fn from_api(permission: &str, role_name: Option<&str>) -> Self {
        match (permission, role_name) {
            ("admin", _) => Permission::Admin,
            (_, Some("maintain")) => Permission::Maintain,
            ("write" | "push" | "maintain", _) => Permission::Write,
            (_, Some("triage")) => Permission::Triage,
            ("read" | "pull" | "triage", _) => Permission::Read,
            _ => Permission::None,
        }
    }

    /// Write, maintain or admin.
    pub fn can_write(self) -> bool {
        matches!(self, Permission::Admin | Permission::Maintain | Permission::Write)
    }
}

/// One review as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewView {
    pub id: u64,
    /// `None` for a deleted ("ghost") user.
    pub login: Option<String>,
    /// GitHub's `user.type`: `User`, `Bot`, `Organization`.
    pub user_type: String,
    /// `APPROVED`, `CHANGES_REQUESTED`, `COMMENTED`, `DISMISSED`, `PENDING`.
    pub state: String,
    pub commit_id: Option<String>,
    pub body: String,
}

impl ReviewView {
    /// From one element of `GET …/pulls/{n}/reviews`.
    pub fn from_json(review: &Value) -> Self {
        let text = |pointer: &str| review.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
        ReviewView {
            id: review.get("id").and_then(Value::as_u64).unwrap_or(0),
            login: text("/user/login"),
            user_type: text("/user/type").unwrap_or_default(),
            state: text("/state").unwrap_or_default(),
            commit_id: text("/commit_id"),
            body: text("/body").unwrap_or_default(),
        }
    }
}

/// The outcome of [`is_approved`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approved { by: String },
    Rejected { by: String, comment: String },
    Pending,
}

/// Decides a pull request from its full review list, in the order GitHub lists it.
///
/// Only human accounts (`type=User`, not `…[bot]`, not `bot_login`) with write, maintain or
/// admin permission in `permissions` count. Per user, the latest `APPROVED`,
/// `CHANGES_REQUESTED` or `DISMISSED` review is their state (`COMMENTED` and `PENDING` change
/// nothing; `DISMISSED` clears it). Any counted user whose state is `CHANGES_REQUESTED` rejects;
/// otherwise a counted `APPROVED` whose `commit_id` is `head_sha` approves.
pub fn is_approved(
    reviews: &[ReviewView],
    head_sha: &str,
    permissions: &HashMap<String, Permission>,
    bot_login: &str,
) -> Decision {
    let mut latest: HashMap<&str, &ReviewView> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for review in reviews {
        let Some(login) = review.login.as_deref() else {
            continue;
        };
        if !counts(review, login, permissions, bot_login) {
            continue;
        }
        match review.state.as_str() {
            "APPROVED" | "CHANGES_REQUESTED" => {
                if !latest.contains_key(login) {
                    order.push(login);
                }
                latest.insert(login, review);
            }
            "DISMISSED" => {
                latest.remove(login);
            }
            _ => {}
        }
    }
    for login in &order {
        if let Some(review) = latest.get(login)
            && review.state == "CHANGES_REQUESTED"
        {
            return Decision::Rejected {
                by: (*login).to_owned(),
                comment: review.body.clone(),
            };
        }
    }
    for login in &order {
        if let Some(review) = latest.get(login)
            && review.state == "APPROVED"
            && review.commit_id.as_deref() == Some(head_sha)
        {
            return Decision::Approved {
                by: (*login).to_owned(),
            };
        }
    }
    Decision::Pending
}

fn counts(
    review: &ReviewView,
    login: &str,
    permissions: &HashMap<String, Permission>,
    bot_login: &str,
) -> bool {
    review.user_type == "User"
        && !login.to_ascii_lowercase().ends_with("[bot]")
        && !login.eq_ignore_ascii_case(bot_login)
        && permissions
            .get(login)
            .is_some_and(|permission| permission.can_write())
}

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
        let pull = expect_success(self.client.get(&route).await?, &route)?.body;
        let path = record.path.clone();
        if pull.get("merged").and_then(Value::as_bool) == Some(true) {
            // A human merged it through the UI: accept only if the merged head is the
            // content bork-ci proposed.
            let head = pull
                .pointer("/head/sha")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            self.verify_content(record, &head)?;
            let merged_sha = pull
                .get("merge_commit_sha")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            return Ok(ApprovalDecision::Approved { path, merged_sha });
        }
        if pull.get("state").and_then(Value::as_str) == Some("closed") {
            return Ok(ApprovalDecision::Rejected {
                path,
                reviewer: None,
                comment: "The approval pull request was closed without merging.".to_owned(),
            });
        }
        let head_sha = pull
            .pointer("/head/sha")
            .and_then(Value::as_str)
            .ok_or_else(|| GithubError::Protocol("pull request without head sha".into()))?
            .to_owned();
        let reviews: Vec<ReviewView> = self
            .client
            .get_all(&format!("{route}/reviews"))
            .await?
            .iter()
            .map(ReviewView::from_json)
            .collect();
        let mut permissions = HashMap::new();
        for review in &reviews {
            let Some(login) = &review.login else { continue };
            if review.user_type != "User" || permissions.contains_key(login) {
                continue;
            }
            if !matches!(review.state.as_str(), "APPROVED" | "CHANGES_REQUESTED") {
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
                let merge = serde_json::json!({
                    "sha": head_sha,
                    "merge_method": "merge",
                    "commit_title": crate::untrusted::one_line(&format!(
                        "bork-ci: apply approved change to {} (approved by {by})",
                        record.path
                    )),
                });
                let answer = self.client.put(&format!("{route}/merge"), &merge).await?;
                if answer.status == 409 || answer.status == 405 {
                    tracing::warn!(pr = record.pr_number, "approval pull request not mergeable now");
                    return Ok(ApprovalDecision::Pending { path });
                }
                let answer = expect_success(answer, &route)?;
                let merged_sha = answer
                    .body
                    .get("sha")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
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
            (Some(bytes), false) => record.sha256.as_deref() == Some(&git::sha256_hex(bytes)),
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
        let body = expect_success(answer, &route)?.body;
        let permission = body.get("permission").and_then(Value::as_str).unwrap_or("none");
        Ok(Permission::from_api(
            permission,
            body.get("role_name").and_then(Value::as_str),
        ))
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEAD: &str = "head";

    fn review(id: u64, login: &str, state: &str, commit: &str) -> ReviewView {
        ReviewView {
            id,
            login: Some(login.to_owned()),
            user_type: if login.ends_with("[bot]") { "Bot" } else { "User" }.to_owned(),
            state: state.to_owned(),
            commit_id: Some(commit.to_owned()),
            body: format!("{login} says {state}"),
        }
    }

    fn perms() -> HashMap<String, Permission> {
        [
            ("alice", Permission::Write),
            ("carol", Permission::Admin),
            ("bob", Permission::Read),
            ("bork-bot", Permission::Write),
            ("app[bot]", Permission::Write),
        ]
        .into_iter()
        .map(|(l, p)| (l.to_owned(), p))
        .collect()
    }

    fn check(reviews: &[ReviewView], expect: Decision) {
        assert_eq!(is_approved(reviews, HEAD, &perms(), "bork-bot"), expect);
    }

    #[test]
    fn writer_on_head_approves() {
        check(
            &[review(1, "alice", "APPROVED", HEAD)],
            Decision::Approved { by: "alice".into() },
        );
    }

    #[test]
    fn reader_bot_self_stale_ghost_do_not_count() {
        check(&[review(1, "bob", "APPROVED", HEAD)], Decision::Pending);
        check(&[review(1, "app[bot]", "APPROVED", HEAD)], Decision::Pending);
        check(&[review(1, "bork-bot", "APPROVED", HEAD)], Decision::Pending);
        check(&[review(1, "alice", "APPROVED", "old")], Decision::Pending);
        check(&[review(1, "mallory", "APPROVED", HEAD)], Decision::Pending);
        let mut ghost = review(1, "alice", "APPROVED", HEAD);
        ghost.login = None;
        check(&[ghost], Decision::Pending);
        let mut bot_typed = review(1, "alice", "APPROVED", HEAD);
        bot_typed.user_type = "Bot".into();
        check(&[bot_typed], Decision::Pending);
    }

    #[test]
    fn later_changes_requested_and_dismissal_win() {
        check(
            &[
                review(1, "alice", "APPROVED", HEAD),
                review(2, "alice", "CHANGES_REQUESTED", HEAD),
            ],
            Decision::Rejected {
                by: "alice".into(),
                comment: "alice says CHANGES_REQUESTED".into(),
            },
        );
        check(
            &[
                review(1, "alice", "APPROVED", HEAD),
                review(2, "alice", "DISMISSED", HEAD),
            ],
            Decision::Pending,
        );
        check(
            &[
                review(1, "alice", "APPROVED", HEAD),
                review(2, "alice", "COMMENTED", HEAD),
            ],
            Decision::Approved { by: "alice".into() },
        );
        check(
            &[
                review(1, "alice", "APPROVED", HEAD),
                review(2, "carol", "CHANGES_REQUESTED", HEAD),
            ],
            Decision::Rejected {
                by: "carol".into(),
                comment: "carol says CHANGES_REQUESTED".into(),
            },
        );
        check(
            &[
                review(1, "alice", "CHANGES_REQUESTED", HEAD),
                review(2, "alice", "APPROVED", HEAD),
            ],
            Decision::Approved { by: "alice".into() },
        );
        check(&[review(1, "bob", "CHANGES_REQUESTED", HEAD)], Decision::Pending);
    }

    #[test]
    fn permissions_map_from_the_api() {
        assert_eq!(
            Permission::from_api("write", Some("maintain")),
            Permission::Maintain
        );
        assert_eq!(Permission::from_api("read", Some("triage")), Permission::Triage);
        assert!(!Permission::from_api("read", Some("triage")).can_write());
        assert!(Permission::from_api("admin", Some("admin")).can_write());
        assert!(!Permission::from_api("none", None).can_write());
    }

    fn arb_review() -> impl Strategy<Value = ReviewView> {
        (
            0usize..6,
            prop_oneof![
                Just("APPROVED"),
                Just("CHANGES_REQUESTED"),
                Just("COMMENTED"),
                Just("DISMISSED"),
                Just("PENDING")
            ],
            prop::bool::ANY,
        )
            .prop_map(|(user, state, on_head)| {
                let logins = ["alice", "carol", "bob", "bork-bot", "app[bot]", "mallory"];
                review(0, logins[user], state, if on_head { HEAD } else { "old" })
            })
    }

    proptest! {
        // PT6: whatever the history, an approval needs a counted writer's latest state to be
        // APPROVED on the head, and no counted writer's latest state may be CHANGES_REQUESTED.
        #[test]
        fn approval_needs_a_valid_writer(reviews in prop::collection::vec(arb_review(), 0..40)) {
            let decision = is_approved(&reviews, HEAD, &perms(), "bork-bot");
            let writers = ["alice", "carol"];
            let mut latest: HashMap<&str, &ReviewView> = HashMap::new();
            for review in &reviews {
                let login = review.login.as_deref().unwrap_or_default();
                if !writers.contains(&login) { continue; }
                match review.state.as_str() {
                    "APPROVED" | "CHANGES_REQUESTED" => { latest.insert(login, review); }
                    "DISMISSED" => { latest.remove(login); }
                    _ => {}
                }
            }
            let blocked = latest.values().any(|r| r.state == "CHANGES_REQUESTED");
            let approved = latest.values().any(|r| r.state == "APPROVED" && r.commit_id.as_deref() == Some(HEAD));
            match decision {
                Decision::Approved { by } => {
                    prop_assert!(!blocked && approved);
                    prop_assert!(writers.contains(&by.as_str()));
                }
                Decision::Rejected { by, .. } => {
                    prop_assert!(blocked);
                    prop_assert!(writers.contains(&by.as_str()));
                }
                Decision::Pending => prop_assert!(!blocked && !approved),
            }
            // Removing every non-writer review never changes the decision.
            let only_writers: Vec<ReviewView> = reviews.iter().filter(|r| writers.contains(&r.login.as_deref().unwrap_or_default())).cloned().collect();
            prop_assert_eq!(is_approved(&only_writers, HEAD, &perms(), "bork-bot"), is_approved(&reviews, HEAD, &perms(), "bork-bot"));
        }
    }
}
