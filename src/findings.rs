//! Findings: the correctness-checker seed's JSON output format, shared by every judge of an
//! iteration (the checker, the verifier, the reviewer). This module owns the data model and its
//! strict parsing; it does not run anything.

use serde::{Deserialize, Serialize};

/// One finding, tagged by its `provenance` exactly as the correctness-checker contract defines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "provenance", deny_unknown_fields)]
pub enum Finding {
    /// Freeform text, Markdown encouraged; `file` when the finding is specific to one file.
    #[serde(rename = "code-review")]
    CodeReview {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        finding: String,
    },
    /// An arbitrary command execution and what it printed.
    #[serde(rename = "command")]
    Command {
        command: String,
        stdout: String,
        stderr: String,
        #[serde(rename = "exit-code")]
        exit_code: i64,
    },
}

/// The whole checker output: findings per file, then overall.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Findings {
    #[serde(default)]
    pub per_file_findings: Vec<Finding>,
    #[serde(default)]
    pub overall_findings: Vec<Finding>,
}

impl Findings {
    /// True when there is nothing in either list.
    pub fn is_empty(&self) -> bool {
        self.per_file_findings.is_empty() && self.overall_findings.is_empty()
    }

    /// Total number of findings.
    pub fn len(&self) -> usize {
        self.per_file_findings.len() + self.overall_findings.len()
    }

    /// Appends another judge's findings after these.
    pub fn extend(&mut self, other: Findings) {
        self.per_file_findings.extend(other.per_file_findings);
        self.overall_findings.extend(other.overall_findings);
    }
}

/// The line a finding's text points at, when it says `line N` (any case): annotations and SARIF
/// locations use it.
pub fn line_hint(text: &str) -> Option<u32> {
    let lower = text.to_ascii_lowercase();
    let index = lower.find("line ")?;
    let digits: String = lower[index + 5..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().filter(|line| *line > 0)
}

/// The placeholder the contract prescribes for command output that is not UTF-8.
pub const NON_UTF8_OUTPUT: &str = "<non-UTF8 output>";

/// Decodes command output as the contract asks: UTF-8 as is, anything else as the placeholder.
pub fn decode_output(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => NON_UTF8_OUTPUT.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn parses_the_seed_example() {
        let json = r#"{
            "per_file_findings": [
                { "provenance": "code-review", "file": "foo/bar.py", "finding": "omits a check" }
            ],
            "overall_findings": [
                { "provenance": "code-review", "finding": "design" },
                { "provenance": "command", "command": "uv run pyright .", "stdout": "x", "stderr": "", "exit-code": 1 }
            ]
        }"#;
        let findings: Findings = serde_json::from_str(json).expect("seed example parses");
        assert_eq!(findings.len(), 3);
        assert!(matches!(
            &findings.overall_findings[1],
            Finding::Command { exit_code: 1, .. }
        ));
    }

    #[test]
    fn rejects_unknown_provenance_and_fields() {
        for bad in [
            r#"{"per_file_findings":[{"provenance":"lint","finding":"x"}]}"#,
            r#"{"per_file_findings":[{"provenance":"code-review","finding":"x","extra":1}]}"#,
            r#"{"findings":[]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"","stderr":""}]}"#,
        ] {
            assert!(serde_json::from_str::<Findings>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn non_utf8_is_the_placeholder() {
        assert_eq!(decode_output(b"ok"), "ok");
        assert_eq!(decode_output(&[0xff, 0xfe]), NON_UTF8_OUTPUT);
    }
}
