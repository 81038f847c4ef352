//! Who may approve a held edit, decided from data: a collaborator's [`Permission`], one review as
//! the decision needs it ([`ReviewView`], with GitHub's review states and account kinds typed),
//! and [`is_approved`] over a pull request's full review list.
//!
//! A leaf: pure, no I/O, no other file of `github`. The session reads the reviews and
//! permissions at decision time and hands them here.

use std::collections::HashMap;

use serde::Deserialize;

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

/// A review's `state` as GitHub lists it; anything else GitHub may add is [`ReviewState::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReviewState {
    Approved,
    ChangesRequested,
    Commented,
    Dismissed,
    Pending,
    #[serde(other)]
    Other,
}

/// An account's `type`: only a `User` is a human who can approve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum AccountKind {
    User,
    Bot,
    Organization,
    #[default]
    #[serde(other)]
    Other,
}

/// One review as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewView {
    pub id: u64,
    /// `None` for a deleted ("ghost") user.
    pub login: Option<String>,
    /// The reviewer's account kind (GitHub's `user.type`).
    pub kind: AccountKind,
    pub state: ReviewState,
    pub commit_id: Option<String>,
    pub body: String,
}

impl ReviewView {
    /// True for a review that decides something: an approval or a request for changes.
    pub fn is_verdict(&self) -> bool {
        matches!(self.state, ReviewState::Approved | ReviewState::ChangesRequested)
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
        match review.state {
            ReviewState::Approved | ReviewState::ChangesRequested => {
                if !latest.contains_key(login) {
                    order.push(login);
                }
                latest.insert(login, review);
            }
            ReviewState::Dismissed => {
                latest.remove(login);
            }
            ReviewState::Commented | ReviewState::Pending | ReviewState::Other => {}
        }
    }
    for login in &order {
        if let Some(review) = latest.get(login)
            && review.state == ReviewState::ChangesRequested
        {
            return Decision::Rejected {
                by: (*login).to_owned(),
                comment: review.body.clone(),
            };
        }
    }
    for login in &order {
        if let Some(review) = latest.get(login)
            && review.state == ReviewState::Approved
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
    review.kind == AccountKind::User
        && !login.to_ascii_lowercase().ends_with("[bot]")
        && !login.eq_ignore_ascii_case(bot_login)
        && permissions
            .get(login)
            .is_some_and(|permission| permission.can_write())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HEAD: &str = "head";

    fn review(id: u64, login: &str, state: ReviewState, commit: &str) -> ReviewView {
        ReviewView {
            id,
            login: Some(login.to_owned()),
            kind: if login.ends_with("[bot]") {
                AccountKind::Bot
            } else {
                AccountKind::User
            },
            state,
            commit_id: Some(commit.to_owned()),
            body: format!("{login} says {state:?}"),
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

    use ReviewState::{Approved, ChangesRequested, Commented, Dismissed};

    #[test]
    fn writer_on_head_approves() {
        check(
            &[review(1, "alice", Approved, HEAD)],
            Decision::Approved { by: "alice".into() },
        );
    }

    #[test]
    fn reader_bot_self_stale_ghost_do_not_count() {
        check(&[review(1, "bob", Approved, HEAD)], Decision::Pending);
        check(&[review(1, "app[bot]", Approved, HEAD)], Decision::Pending);
        check(&[review(1, "bork-bot", Approved, HEAD)], Decision::Pending);
        check(&[review(1, "alice", Approved, "old")], Decision::Pending);
        check(&[review(1, "mallory", Approved, HEAD)], Decision::Pending);
        let mut ghost = review(1, "alice", Approved, HEAD);
        ghost.login = None;
        check(&[ghost], Decision::Pending);
        let mut bot_typed = review(1, "alice", Approved, HEAD);
        bot_typed.kind = AccountKind::Bot;
        check(&[bot_typed], Decision::Pending);
        let mut unknown_kind = review(1, "alice", Approved, HEAD);
        unknown_kind.kind = AccountKind::Other;
        check(&[unknown_kind], Decision::Pending);
    }

    #[test]
    fn later_changes_requested_and_dismissal_win() {
        check(
            &[
                review(1, "alice", Approved, HEAD),
                review(2, "alice", ChangesRequested, HEAD),
            ],
            Decision::Rejected {
                by: "alice".into(),
                comment: "alice says ChangesRequested".into(),
            },
        );
        check(
            &[
                review(1, "alice", Approved, HEAD),
                review(2, "alice", Dismissed, HEAD),
            ],
            Decision::Pending,
        );
        check(
            &[
                review(1, "alice", Approved, HEAD),
                review(2, "alice", Commented, HEAD),
            ],
            Decision::Approved { by: "alice".into() },
        );
        check(
            &[
                review(1, "alice", Approved, HEAD),
                review(2, "carol", ChangesRequested, HEAD),
            ],
            Decision::Rejected {
                by: "carol".into(),
                comment: "carol says ChangesRequested".into(),
            },
        );
        check(
            &[
                review(1, "alice", ChangesRequested, HEAD),
                review(2, "alice", Approved, HEAD),
            ],
            Decision::Approved { by: "alice".into() },
        );
        check(&[review(1, "bob", ChangesRequested, HEAD)], Decision::Pending);
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

    #[test]
    fn states_and_kinds_read_from_github_words() {
        let states: Vec<ReviewState> = serde_json::from_str(
            r#"["APPROVED","CHANGES_REQUESTED","COMMENTED","DISMISSED","PENDING","LATER"]"#,
        )
        .expect("states");
        assert_eq!(
            states,
            [
                Approved,
                ChangesRequested,
                Commented,
                Dismissed,
                ReviewState::Pending,
                ReviewState::Other
            ]
        );
        let kinds: Vec<AccountKind> =
            serde_json::from_str(r#"["User","Bot","Organization","Mannequin"]"#).expect("kinds");
        assert_eq!(
            kinds,
            [
                AccountKind::User,
                AccountKind::Bot,
                AccountKind::Organization,
                AccountKind::Other
            ]
        );
    }

    fn arb_review() -> impl Strategy<Value = ReviewView> {
        (
            0usize..6,
            prop_oneof![
                Just(Approved),
                Just(ChangesRequested),
                Just(Commented),
                Just(Dismissed),
                Just(ReviewState::Pending)
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
                match review.state {
                    Approved | ChangesRequested => { latest.insert(login, review); }
                    Dismissed => { latest.remove(login); }
                    _ => {}
                }
            }
            let blocked = latest.values().any(|r| r.state == ChangesRequested);
            let approved = latest.values().any(|r| r.state == Approved && r.commit_id.as_deref() == Some(HEAD));
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
