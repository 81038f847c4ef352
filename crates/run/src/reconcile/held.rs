//! Held edits the checks need: when the model proposes again an edit that is held, or a failing
//! finding names a held path, more iterations cannot make the checks pass without a human's
//! decision, so the round ends awaiting approval and each such edit says which findings wait on
//! it; and how an iteration's findings are printed, one line each. Pure.

use std::collections::BTreeSet;

use bork_ci_core::findings::{Finding, Findings};
use bork_ci_edit::edit::PendingApproval;

/// At most this many findings are named per held edit.
const MAX_WAITING: usize = 5;

/// The held edits the checks wait on after an iteration, each with the findings that wait on
/// it: those of `held` (every edit held so far and not decided) whose path a finding in
/// `findings` names, and those of `proposed` (held in this iteration) that were held already
/// in an earlier iteration of the round (`held_before`), with every finding.
pub(super) fn waiting(
    held: &[PendingApproval],
    proposed: &[PendingApproval],
    held_before: &BTreeSet<String>,
    findings: &Findings,
) -> Vec<(String, Vec<String>)> {
    let mut waiting: Vec<(String, Vec<String>)> = Vec::new();
    for edit in held {
        let path = normalize(&edit.path);
        let naming: Vec<String> = findings
            .per_file_findings
            .iter()
            .filter(|finding| finding_file(finding).is_some_and(|file| normalize(file) == path))
            .map(line)
            .take(MAX_WAITING)
            .collect();
        let again = proposed.iter().any(|now| now.path == edit.path) && held_before.contains(&edit.path);
        if !naming.is_empty() {
            waiting.push((edit.path.clone(), naming));
        } else if again {
            let all: Vec<String> = findings
                .per_file_findings
                .iter()
                .chain(&findings.overall_findings)
                .map(line)
                .take(MAX_WAITING)
                .collect();
            waiting.push((edit.path.clone(), all));
        }
    }
    waiting
}

/// At most this many findings of an iteration are printed, one line each.
pub const MAX_PRINTED: usize = 10;

/// An iteration's findings as printed in the log: one line each (file, first line of the text),
/// at most [`MAX_PRINTED`], then how many more.
pub fn finding_lines(findings: &Findings) -> Vec<String> {
    let all: Vec<&Finding> = findings
        .per_file_findings
        .iter()
        .chain(&findings.overall_findings)
        .collect();
    let mut lines: Vec<String> = all
        .iter()
        .take(MAX_PRINTED)
        .map(|finding| line(finding))
        .collect();
    if all.len() > MAX_PRINTED {
        lines.push(format!(
            "... and {} more (all in the report)",
            all.len() - MAX_PRINTED
        ));
    }
    lines
}

fn finding_file(finding: &Finding) -> Option<&str> {
    match finding {
        Finding::CodeReview { file, .. } => file.as_deref(),
        Finding::Command { .. } => None,
    }
}

/// A path as findings and edits spell it, for comparison: no leading `./`, no empty or `.`
/// components.
fn normalize(path: &str) -> String {
    bork_ci_edit::edit::glob::normalize_path(path)
}

/// A finding in one line: its file and the first line of its text, at most 200 characters,
/// control characters dropped (`untrusted::one_line`).
fn line(finding: &Finding) -> String {
    let text = match finding {
        Finding::CodeReview {
            file: Some(file),
            finding,
        } => format!("{file}: {}", first_line(finding)),
        Finding::CodeReview { file: None, finding } => first_line(finding).to_owned(),
        Finding::Command {
            command, exit_code, ..
        } => format!("`{command}` exited {exit_code}"),
    };
    bork_ci_core::untrusted::one_line(&text)
}

fn first_line(text: &str) -> &str {
    text.lines().find(|line| !line.trim().is_empty()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bork_ci_edit::edit::EditAction;

    fn held(path: &str) -> PendingApproval {
        PendingApproval {
            path: path.to_owned(),
            action: EditAction::Write,
            contents: Some(String::new()),
            sha256: None,
            rule: bork_ci_edit::edit::code::APPROVED_TEST.to_owned(),
            waiting: Vec::new(),
        }
    }

    fn findings(file: &str) -> Findings {
        Findings {
            per_file_findings: vec![Finding::CodeReview {
                file: Some(file.to_owned()),
                finding: "`adds` failed\nassertion failed".to_owned(),
            }],
            overall_findings: Vec::new(),
        }
    }

    #[test]
    fn a_finding_naming_a_held_path_waits_on_it() {
        let got = waiting(
            &[held("tests/a.rs")],
            &[],
            &BTreeSet::new(),
            &findings("./tests/a.rs"),
        );
        assert_eq!(
            got,
            vec![(
                "tests/a.rs".to_owned(),
                vec!["./tests/a.rs: `adds` failed".to_owned()]
            )]
        );
    }

    #[test]
    fn a_held_edit_proposed_again_waits_with_every_finding() {
        let before: BTreeSet<String> = ["tests/a.rs".to_owned()].into();
        let got = waiting(
            &[held("tests/a.rs")],
            &[held("tests/a.rs")],
            &before,
            &findings("src/b.rs"),
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1, vec!["src/b.rs: `adds` failed".to_owned()]);
    }

    #[test]
    fn an_iterations_findings_print_one_line_each_bounded() {
        let mut many = Findings::default();
        for index in 0..12 {
            many.per_file_findings.push(Finding::CodeReview {
                file: Some(format!("src/{index}.rs")),
                finding: format!("line {index}: failed\nat depth"),
            });
        }
        let lines = finding_lines(&many);
        assert_eq!(lines.len(), 11);
        assert_eq!(lines[0], "src/0.rs: line 0: failed");
        assert_eq!(lines[10], "... and 2 more (all in the report)");
    }

    #[test]
    fn a_first_proposal_no_finding_names_does_not_wait() {
        let got = waiting(
            &[held("tests/a.rs")],
            &[held("tests/a.rs")],
            &BTreeSet::new(),
            &findings("src/b.rs"),
        );
        assert!(got.is_empty());
    }
}
