//! The escalation label and bork-ci's marked comments: the label is created if missing, added
//! and removed idempotently; a comment is found by its hidden marker and updated in place,
//! never posted twice.

use serde_json::json;

use super::answers::Comment;
use crate::github::client::{Client, encode, expect_success};
use crate::github::data::GithubError;

/// Creates `name` in the repository when it does not exist yet.
pub async fn ensure_label(client: &Client, owner: &str, repo: &str, name: &str) -> Result<(), GithubError> {
    let route = format!("/repos/{owner}/{repo}/labels/{}", encode(name));
    let answer = client.get(&route).await?;
    if answer.is_success() {
        return Ok(());
    }
    if answer.status != 404 {
        expect_success(answer, &route)?;
        return Ok(());
    }
    let create = format!("/repos/{owner}/{repo}/labels");
    let body = json!({
        "name": name,
        "color": "d93f0b",
        "description": "bork-ci could not converge: a human needs to look",
    });
    let answer = client.post(&create, &body).await?;
    // 422 means someone created it in between.
    if answer.status == 422 {
        return Ok(());
    }
    expect_success(answer, &create).map(|_| ())
}

/// Adds `name` to issue or pull request `number`.
pub async fn add_label(
    client: &Client,
    owner: &str,
    repo: &str,
    number: u64,
    name: &str,
) -> Result<(), GithubError> {
    let route = format!("/repos/{owner}/{repo}/issues/{number}/labels");
    let answer = client.post(&route, &json!({ "labels": [name] })).await?;
    expect_success(answer, &route).map(|_| ())
}

/// Removes `name` from issue or pull request `number`; absent is fine. Returns whether it was
/// there.
pub async fn remove_label(
    client: &Client,
    owner: &str,
    repo: &str,
    number: u64,
    name: &str,
) -> Result<bool, GithubError> {
    let route = format!("/repos/{owner}/{repo}/issues/{number}/labels/{}", encode(name));
    let answer = client.delete(&route).await?;
    if answer.status == 404 {
        return Ok(false);
    }
    expect_success(answer, &route).map(|_| true)
}

/// Creates or updates, in place, the comment on `number` that carries `marker`. With `only_update`,
/// nothing is posted when there is no such comment yet. Returns the comment id.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site per marker; a struct would only rename the arguments"
)]
pub async fn upsert_comment(
    client: &Client,
    owner: &str,
    repo: &str,
    number: u64,
    marker: &str,
    body: &str,
    bot_login: Option<&str>,
    only_update: bool,
) -> Result<Option<u64>, GithubError> {
    let list = format!("/repos/{owner}/{repo}/issues/{number}/comments");
    let comments: Vec<Comment> = client.get_all(&list).await?;
    let existing = comments.iter().find(|comment| {
        let mine = match bot_login {
            Some(login) => comment.user.as_ref().map(|user| user.login.as_str()) == Some(login),
            None => true,
        };
        mine && comment.body.as_deref().is_some_and(|text| text.contains(marker))
    });
    match existing {
        Some(comment) => {
            if comment.body.as_deref() != Some(body) {
                let route = format!("/repos/{owner}/{repo}/issues/comments/{}", comment.id);
                expect_success(client.patch(&route, &json!({ "body": body })).await?, &route)?;
            }
            Ok(Some(comment.id))
        }
        None if only_update => Ok(None),
        None => {
            let answer = expect_success(client.post(&list, &json!({ "body": body })).await?, &list)?;
            Ok(Some(answer.json::<Comment>(&list)?.id))
        }
    }
}
