//! GitHub's answers as the session reads them: small `Deserialize` shapes holding only the fields
//! bork-ci uses (GitHub sends many more, which are ignored). An answer without a field GitHub
//! documents as always there, or with a field of another type, is a
//! [`GithubError::Protocol`](crate::github::GithubError) naming the route, never a default
//! that could pass for a decision. Fields the session treats as optional are `Option`s here.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::github::approval::{AccountKind, Permission, ReviewState, ReviewView};
use crate::github::data::PullRef;

/// An account (`simple-user`), `null` in the answers for a deleted ("ghost") one.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct User {
    pub login: String,
    #[serde(rename = "type", default)]
    pub kind: AccountKind,
}

/// `open` or `closed`; a merged pull request is `closed` with `merged: true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum PullState {
    Open,
    Closed,
    #[serde(other)]
    Other,
}

/// A pull request's `head` (or `base`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct PullBranch {
    #[serde(rename = "ref")]
    pub name: String,
    pub sha: String,
}

/// A pull request, from `pulls/get`, `pulls/list`, `pulls/create` and `pulls/update`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct PullRequest {
    pub number: u64,
    pub html_url: String,
    pub state: PullState,
    pub body: Option<String>,
    pub user: Option<User>,
    pub head: PullBranch,
    /// Only `pulls/get` says; lists leave it out.
    pub merged: Option<bool>,
    pub merge_commit_sha: Option<String>,
}

impl PullRequest {
    /// Number and web address.
    pub fn pull_ref(&self) -> PullRef {
        PullRef {
            number: self.number,
            url: self.html_url.clone(),
        }
    }

    /// True once merged (only `pulls/get` knows).
    pub fn is_merged(&self) -> bool {
        self.merged == Some(true)
    }

    /// The body, empty when there is none.
    pub fn body(&self) -> &str {
        self.body.as_deref().unwrap_or_default()
    }
}

/// One review from `pulls/list-reviews`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Review {
    pub id: u64,
    pub user: Option<User>,
    pub state: ReviewState,
    pub commit_id: Option<String>,
    pub body: Option<String>,
}

impl From<Review> for ReviewView {
    fn from(review: Review) -> Self {
        let (login, kind) = match review.user {
            Some(user) => (Some(user.login), user.kind),
            None => (None, AccountKind::Other),
        };
        ReviewView {
            id: review.id,
            login,
            kind,
            state: review.state,
            commit_id: review.commit_id,
            body: review.body.unwrap_or_default(),
        }
    }
}

/// `GET /repos/{o}/{r}/collaborators/{u}/permission`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct CollaboratorPermission {
    /// The legacy field: `admin`, `write`, `read` or `none`.
    pub permission: Option<String>,
    /// The role: `admin`, `maintain`, `write`, `triage`, `read` or a custom one.
    pub role_name: Option<String>,
}

impl CollaboratorPermission {
    /// The permission as the decision counts it.
    pub fn permission(&self) -> Permission {
        Permission::from_api(
            self.permission.as_deref().unwrap_or("none"),
            self.role_name.as_deref(),
        )
    }
}

/// An issue comment, from `issues/list-comments` and `issues/create-comment`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Comment {
    pub id: u64,
    pub body: Option<String>,
    pub user: Option<User>,
}

/// The answer to `PUT …/pulls/{n}/merge`.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Merged {
    pub sha: Option<String>,
}

/// The part of `repos/get` that says what the token may do.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Repository {
    pub permissions: Option<BTreeMap<String, bool>>,
}

/// `repos/get-content` for a file; a directory is a list and does not read as one.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Content {
    pub content: Option<String>,
}

#[cfg(test)]
#[expect(
    clippy::disallowed_methods,
    reason = "tests read the vendor's examples directly"
)]
mod tests {
    use super::*;

    /// One example answer from the vendor's API description (`../shared/api/github-examples`).
    fn example(operation: &str) -> serde_json::Value {
        let path = format!(
            "{}/../../../shared/api/github-examples/{operation}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).expect("the vendor's example");
        serde_json::from_str(&text).expect("JSON")
    }

    #[test]
    fn the_vendors_examples_read_into_the_shapes() {
        let pull: PullRequest = serde_json::from_value(example("pulls__get")).expect("pulls/get");
        assert_eq!(pull.number, 1347);
        assert_eq!(pull.state, PullState::Open);
        assert!(!pull.is_merged());
        assert_eq!(pull.user.as_ref().map(|user| user.kind), Some(AccountKind::User));
        let listed: Vec<PullRequest> = serde_json::from_value(example("pulls__list")).expect("pulls/list");
        assert_eq!(listed.len(), 1);
        serde_json::from_value::<PullRequest>(example("pulls__create")).expect("pulls/create");
        serde_json::from_value::<PullRequest>(example("pulls__update")).expect("pulls/update");
        let reviews: Vec<Review> =
            serde_json::from_value(example("pulls__list-reviews")).expect("pulls/list-reviews");
        let view = ReviewView::from(reviews[0].clone());
        assert_eq!(view.state, ReviewState::Approved);
        assert_eq!(view.login.as_deref(), Some("octocat"));
        let comments: Vec<Comment> =
            serde_json::from_value(example("issues__list-comments")).expect("issues/list-comments");
        assert!(comments[0].user.is_some());
        serde_json::from_value::<Comment>(example("issues__create-comment")).expect("create-comment");
        let repository: Repository = serde_json::from_value(example("repos__get")).expect("repos/get");
        assert!(repository.permissions.is_some());
        let content: Content = serde_json::from_value(example("repos__get-content")).expect("get-content");
        assert!(content.content.is_some());
        assert!(
            serde_json::from_value::<Content>(example(
                "repos__get-content--response-if-content-is-a-directory"
            ))
            .is_err(),
            "a directory is not a file"
        );
    }

    #[test]
    fn a_ghost_reviewer_and_unknown_words_do_not_count() {
        let review: Review = serde_json::from_str(
            r#"{"id": 1, "user": null, "state": "SOMETHING_NEW", "commit_id": null, "body": null}"#,
        )
        .expect("review");
        let view = ReviewView::from(review);
        assert_eq!(view.login, None);
        assert_eq!(view.state, ReviewState::Other);
        assert_eq!(view.body, "");
        let permission: CollaboratorPermission =
            serde_json::from_str(r#"{"role_name": "maintain"}"#).expect("permission");
        assert_eq!(permission.permission(), Permission::Maintain);
        let missing: CollaboratorPermission = serde_json::from_str("{}").expect("permission");
        assert_eq!(missing.permission(), Permission::None);
    }

    #[test]
    fn a_pull_request_without_its_head_is_refused() {
        let error = serde_json::from_str::<PullRequest>(
            r#"{"number": 1, "html_url": "http://x/1", "state": "open"}"#,
        )
        .expect_err("no head");
        assert!(error.to_string().contains("head"), "{error}");
    }
}
