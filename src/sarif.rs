//! SARIF 2.1.0 output of findings (`--sarif PATH`) for GitHub code scanning. Pure rendering;
//! writing the file is the caller's business.
//!
//! What code scanning needs, and how each finding gets it:
//! - every result has a location with a relative `artifactLocation.uri` and `region.startLine`
//!   of at least 1. A per-file finding points at its file (line from a "line N" hint, else 1).
//!   A finding with no file, a command finding, or a finding naming a path that is not a plain
//!   relative path inside the repository points at the correctness checker (the file that
//!   produced it), or at `.config/bork.json` when no checker is configured, line 1; its message
//!   says so.
//! - every result has `partialFingerprints` (a hash of the rule, the path and the finding's
//!   stable text), so an alert is recognised across runs.
//! - every rule has `shortDescription`, `fullDescription` and `help`.
//! - no `originalUriBaseIds`: URIs are relative to the repository root, as code scanning expects.
//! - at most [`MAX_RESULTS`] results in the one run (code scanning's hard limit per run).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::findings::{Finding, Findings};

/// Code scanning's hard limit of results per run.
pub const MAX_RESULTS: usize = 25_000;
/// The longest command output quoted in a message (the tail is kept).
const MAX_OUTPUT_BYTES: usize = 8 * 1024;
/// Where findings without a file point when no checker is configured.
const CONFIG_FILE: &str = crate::config::CONFIG_PATH;

const REVIEW_RULE: &str = "bork/code-review";
const COMMAND_RULE: &str = "bork/command";

/// The findings as one SARIF 2.1.0 log with one run. `checker` is the configured correctness
/// checker's path (relative to the repository root), where findings without a file point.
pub fn render(findings: &Findings, tool_version: &str, checker: Option<&str>) -> Value {
    let anchor = checker
        .and_then(relative_path)
        .map(|path| {
            (
                path,
                format!("the correctness checker `{}`", checker.unwrap_or_default()),
            )
        })
        .unwrap_or_else(|| {
            (
                CONFIG_FILE.to_owned(),
                format!("`{CONFIG_FILE}` (no correctness checker is configured)"),
            )
        });
    let mut results = Vec::new();
    let mut rules_used = (false, false);
    let all: Vec<&Finding> = findings
        .per_file_findings
        .iter()
        .chain(findings.overall_findings.iter())
        .collect();
    for finding in all.iter().take(MAX_RESULTS) {
        match finding {
            Finding::CodeReview { file, finding } => {
                rules_used.0 = true;
                let (path, line, text) = match file.as_deref().map(|file| (file, relative_path(file))) {
                    Some((_, Some(path))) => {
                        let line = crate::findings::line_hint(finding).unwrap_or(1).max(1);
                        (path, line, finding.clone())
                    }
                    Some((named, None)) => (
                        anchor.0.clone(),
                        1,
                        format!(
                            "{finding}\n\n(The finding names `{named}`, which is not a path inside the repository; shown at {}, line 1.)",
                            anchor.1
                        ),
                    ),
                    None => (
                        anchor.0.clone(),
                        1,
                        format!(
                            "{finding}\n\n(A finding about the whole repository, not one file; shown at {}, line 1.)",
                            anchor.1
                        ),
                    ),
                };
                let fingerprint = fingerprint(&[REVIEW_RULE, &path, finding]);
                results.push(result(REVIEW_RULE, "warning", text, &path, line, fingerprint));
            }
            Finding::Command {
                command,
                stdout,
                stderr,
                exit_code,
            } => {
                rules_used.1 = true;
                let text = format!(
                    "`{command}` exited with {exit_code}\n\nstdout:\n{}\n\nstderr:\n{}\n\n(A command finding, not about one file; shown at {}, line 1.)",
                    crate::untrusted::last(stdout, MAX_OUTPUT_BYTES),
                    crate::untrusted::last(stderr, MAX_OUTPUT_BYTES),
                    anchor.1
                );
                let fingerprint = fingerprint(&[COMMAND_RULE, &anchor.0, command, &exit_code.to_string()]);
                results.push(result(COMMAND_RULE, "error", text, &anchor.0, 1, fingerprint));
            }
        }
    }
    if all.len() > MAX_RESULTS {
        tracing::warn!(
            findings = all.len(),
            kept = MAX_RESULTS,
            "more findings than code scanning accepts in one SARIF run; the first ones are written"
        );
    }
    let mut rules = Vec::new();
    if rules_used.0 {
        rules.push(json!({
            "id": REVIEW_RULE,
            "name": "CodeReview",
            "shortDescription": { "text": "A correctness-checker finding about the code" },
            "fullDescription": { "text": "The repository's correctness checker (or bork-ci's LLM reviewer) found that the code does not do what its specs say. The message is the checker's own text." },
            "help": {
                "text": "Read the finding and the spec it refers to, then change the code (or the spec) so that they agree. Run bork-ci again to let it attempt the change.",
                "markdown": "Read the finding and the spec it refers to, then change the code (or the spec) so that they agree. Run `bork-ci run` again to let it attempt the change."
            },
            "defaultConfiguration": { "level": "warning" },
        }));
    }
    if rules_used.1 {
        rules.push(json!({
            "id": COMMAND_RULE,
            "name": "Command",
            "shortDescription": { "text": "A check command that failed" },
            "fullDescription": { "text": "A command run by the correctness checker or the Verifier pipeline (build, tests, lints) exited with a non-zero code. The message quotes its command, exit code and the end of its output." },
            "help": {
                "text": "Run the command locally, read its output and fix what it reports.",
                "markdown": "Run the command locally, read its output and fix what it reports."
            },
            "defaultConfiguration": { "level": "error" },
        }));
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": { "driver": {
                "name": "bork-ci",
                "version": tool_version,
                "informationUri": "https://github.com/bork-ci/bork-ci",
                "rules": rules,
            }},
            "results": results,
        }]
    })
}

fn result(rule: &str, level: &str, text: String, path: &str, line: u32, fingerprint: String) -> Value {
    json!({
        "ruleId": rule,
        "level": level,
        "message": { "text": text },
        "locations": [{
            "physicalLocation": {
                "artifactLocation": { "uri": uri(path) },
                "region": { "startLine": line }
            }
        }],
        "partialFingerprints": { "borkFindingHash/v1": fingerprint },
    })
}

/// sha256 of the parts, each followed by a NUL, as hex.
fn fingerprint(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// `path` as a plain relative path inside the repository (`./` removed), or `None` when it is
/// empty, absolute, has a `..`, `.git` or empty component, or a backslash.
fn relative_path(path: &str) -> Option<String> {
    let mut path = path.trim();
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.contains('\\')
        || path
            .split('/')
            .any(|part| part.is_empty() || part == ".." || part == "." || part.eq_ignore_ascii_case(".git"));
    (!bad).then(|| path.to_owned())
}

/// A relative URI reference: unreserved bytes and `/` as they are, everything else
/// percent-encoded (so a `:` can never read as a scheme).
fn uri(path: &str) -> String {
    crate::url_text::encode(path, crate::url_text::Keep::Slash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_finding_gets_a_location() {
        let findings = Findings {
            per_file_findings: vec![Finding::CodeReview {
                file: Some("src/a b.rs".into()),
                finding: "line 12: wrong".into(),
            }],
            overall_findings: vec![Finding::Command {
                command: "cargo test".into(),
                stdout: "".into(),
                stderr: "boom".into(),
                exit_code: 101,
            }],
        };
        let sarif = render(&findings, "0.1.0", Some("ci/check"));
        assert_eq!(sarif["version"], "2.1.0");
        let results = sarif["runs"][0]["results"].as_array().expect("results");
        assert_eq!(results.len(), 2);
        let location = &results[0]["locations"][0]["physicalLocation"];
        assert_eq!(location["artifactLocation"]["uri"], "src/a%20b.rs");
        assert_eq!(location["region"]["startLine"], 12);
        let location = &results[1]["locations"][0]["physicalLocation"];
        assert_eq!(location["artifactLocation"]["uri"], "ci/check");
        assert_eq!(location["region"]["startLine"], 1);
        assert!(sarif["runs"][0].get("originalUriBaseIds").is_none());
        let none = render(&findings, "0.1.0", None);
        let location = &none["runs"][0]["results"][1]["locations"][0]["physicalLocation"];
        assert_eq!(location["artifactLocation"]["uri"], ".config/bork.json");
    }

    #[test]
    fn paths_outside_the_repository_are_not_uris() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../b",
            "",
            ".git/config",
            "a\\b",
            "a//b",
        ] {
            assert_eq!(relative_path(bad), None, "{bad}");
        }
        assert_eq!(relative_path("./src/x.rs").as_deref(), Some("src/x.rs"));
        assert_eq!(uri("c:/x"), "c%3A/x");
    }
}
