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

/// Parses a checker's stdout as the contract's findings JSON, failing closed.
///
/// Command output that is not UTF-8 is kept as the contract says: a `command` finding whose
/// `stdout` or `stderr` string holds invalid UTF-8 bytes or a lone surrogate escape (`\ud800`
/// without its pair, which no UTF-8 text can hold) keeps its place, with that field replaced by
/// [`NON_UTF8_OUTPUT`]. Such a string anywhere else (a file name, a finding's text, the command),
/// invalid bytes outside strings, and anything that is not exactly the documented shape are
/// errors.
pub fn parse_checker_output(bytes: &[u8]) -> Result<Findings, String> {
    let strict = match std::str::from_utf8(bytes) {
        Ok(text) => match serde_json::from_str::<Findings>(text) {
            Ok(findings) => return Ok(findings),
            Err(error) => error.to_string(),
        },
        Err(_) => "not UTF-8".to_owned(),
    };
    // Only strings that cannot be decoded are replaced, each by a marker no checker can guess;
    // where a marker lands decides whether the output is kept.
    let marker = format!("\u{0}bork-non-utf8-{}", uuid::Uuid::new_v4().simple());
    let Some(repaired) = replace_undecodable_strings(bytes, &marker) else {
        return Err(strict);
    };
    let Ok(text) = std::str::from_utf8(&repaired) else {
        return Err("not UTF-8 outside a command's stdout or stderr".to_owned());
    };
    let mut findings: Findings = serde_json::from_str(text).map_err(|_| strict.clone())?;
    let mut elsewhere = false;
    for finding in findings
        .per_file_findings
        .iter_mut()
        .chain(findings.overall_findings.iter_mut())
    {
        match finding {
            Finding::Command {
                command,
                stdout,
                stderr,
                ..
            } => {
                for output in [stdout, stderr] {
                    if *output == marker {
                        *output = NON_UTF8_OUTPUT.to_owned();
                    }
                }
                elsewhere |= command.contains(&marker);
            }
            Finding::CodeReview { file, finding } => {
                elsewhere |=
                    finding.contains(&marker) || file.as_ref().is_some_and(|file| file.contains(&marker));
            }
        }
    }
    if elsewhere {
        return Err("a string other than a command's stdout or stderr is not UTF-8".to_owned());
    }
    Ok(findings)
}

/// `bytes` with every JSON string literal that cannot be decoded to UTF-8 text (invalid bytes,
/// a lone surrogate escape) but is otherwise well formed replaced by `marker` as a JSON string.
/// `None` when a string is not closed. Everything else (including strings with a bad escape or
/// a raw control character) is copied as it is, for the JSON parser to reject.
fn replace_undecodable_strings(bytes: &[u8], marker: &str) -> Option<Vec<u8>> {
    let encoded = serde_json::to_string(marker).ok()?;
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] != b'"' {
            out.push(bytes[index]);
            index += 1;
            continue;
        }
        let start = index;
        index += 1;
        let mut lone_surrogate = false;
        let mut pending_high = false;
        let mut malformed = false;
        loop {
            let byte = *bytes.get(index)?;
            let mut unit = None;
            match byte {
                b'"' => break,
                b'\\' => match *bytes.get(index + 1)? {
                    b'u' => {
                        unit = bytes
                            .get(index + 2..index + 6)
                            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
                            .and_then(|hex| std::str::from_utf8(hex).ok())
                            .and_then(|hex| u16::from_str_radix(hex, 16).ok());
                        match unit {
                            Some(_) => index += 6,
                            None => {
                                malformed = true;
                                index += 2;
                            }
                        }
                    }
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => index += 2,
                    _ => {
                        malformed = true;
                        index += 2;
                    }
                },
                control if control < 0x20 => {
                    malformed = true;
                    index += 1;
                }
                _ => index += 1,
            }
            match unit {
                Some(0xD800..=0xDBFF) => {
                    lone_surrogate |= pending_high;
                    pending_high = true;
                }
                Some(0xDC00..=0xDFFF) if pending_high => pending_high = false,
                Some(0xDC00..=0xDFFF) => lone_surrogate = true,
                _ => {
                    lone_surrogate |= pending_high;
                    pending_high = false;
                }
            }
        }
        lone_surrogate |= pending_high;
        let literal = &bytes[start..=index];
        index += 1;
        if !malformed && (lone_surrogate || std::str::from_utf8(literal).is_err()) {
            out.extend_from_slice(encoded.as_bytes());
        } else {
            out.extend_from_slice(literal);
        }
    }
    Some(out)
}

#[cfg(test)]
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

    /// Checker output the contract's rule applies to: one case per row, the bytes and
    /// what comes out (`Ok` with the command's stdout and stderr, or an error).
    #[test]
    fn non_utf8_command_output_is_kept_as_the_placeholder() {
        fn command(stdout: &[u8], stderr: &[u8]) -> Vec<u8> {
            let mut out =
                br#"{"overall_findings":[{"provenance":"command","command":"make test","stdout":""#.to_vec();
            out.extend_from_slice(stdout);
            out.extend_from_slice(br#"","stderr":""#);
            out.extend_from_slice(stderr);
            out.extend_from_slice(br#"","exit-code":2}]}"#);
            out
        }
        let placeholder = NON_UTF8_OUTPUT;
        let rows: Vec<(&str, Vec<u8>, (&str, &str))> = vec![
            ("plain", command(b"ok", b""), ("ok", "")),
            (
                "invalid bytes in stdout",
                command(b"a\xff\xfeb", b"fine"),
                (placeholder, "fine"),
            ),
            (
                "lone high surrogate in stderr",
                command(b"fine", br"x\ud800y"),
                ("fine", placeholder),
            ),
            ("lone low surrogate", command(br"\udc00", b""), (placeholder, "")),
            (
                "high surrogate at the end",
                command(br"x\ud83d", b""),
                (placeholder, ""),
            ),
            (
                "two highs",
                command(br"\ud83d\ud83d\ude00", b""),
                (placeholder, ""),
            ),
            (
                "a real pair stays",
                command(br"\ud83d\ude00", b""),
                ("\u{1f600}", ""),
            ),
            (
                "both fields",
                command(b"\xc3", br"\udfff"),
                (placeholder, placeholder),
            ),
            (
                "escaped quote before bad bytes",
                command(b"say \\\"hi\\\" \xff", b""),
                (placeholder, ""),
            ),
        ];
        for (name, bytes, expected) in rows {
            let (stdout, stderr) = expected;
            match parse_checker_output(&bytes) {
                Ok(findings) => match &findings.overall_findings[0] {
                    Finding::Command {
                        stdout: got_out,
                        stderr: got_err,
                        command,
                        exit_code,
                    } => {
                        assert_eq!((got_out.as_str(), got_err.as_str()), (stdout, stderr), "{name}");
                        assert_eq!((command.as_str(), *exit_code), ("make test", 2), "{name}");
                    }
                    other => panic!("{name}: {other:?}"),
                },
                Err(error) => panic!("{name}: {error}"),
            }
        }
    }

    /// Anything else that is not valid JSON still fails closed.
    #[test]
    fn other_undecodable_output_fails_closed() {
        // `<FF>` stands for the byte 0xff.
        let bytes = |text: &str| -> Vec<u8> {
            let mut out = Vec::new();
            for (index, part) in text.split("<FF>").enumerate() {
                if index > 0 {
                    out.push(0xff);
                }
                out.extend_from_slice(part.as_bytes());
            }
            out
        };
        for bad in [
            r#"{"overall_findings":[{"provenance":"code-review","finding":"bad <FF>"}]}"#,
            r#"{"per_file_findings":[{"provenance":"code-review","file":"a\ud800","finding":"x"}]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"<FF>","stdout":"","stderr":"","exit-code":1}]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"<FF>","stderr":"","exit-code":1}]"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"<FF>"#,
            r#"<FF>{"overall_findings":[]}"#,
            r#"{"<FF>":[]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"<FF>","stderr":"","exit-code":1,"extra":1}]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"<FF>","stderr":"","exit-code":1}],"overall_findings":[]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"\u12","stderr":"","exit-code":1}]}"#,
            r#"{"overall_findings":[{"provenance":"command","command":"x","stdout":"\q<FF>","stderr":"","exit-code":1}]}"#,
            "{\"overall_findings\":[{\"provenance\":\"command\",\"command\":\"x\",\"stdout\":\"\t<FF>\",\"stderr\":\"\",\"exit-code\":1}]}",
            "<FF><FF>",
            "",
        ] {
            let bad = bytes(bad);
            assert!(
                parse_checker_output(&bad).is_err(),
                "{}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

    proptest::proptest! {
        /// Findings-shaped bytes with undecodable strings: reading never panics, output that
        /// is valid as it is reads as it is, and what is kept holds no marker.
        #[test]
        fn checker_output_reading_never_panics(
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just(b"{".to_vec()), proptest::strategy::Just(b"}".to_vec()),
                proptest::strategy::Just(b"[".to_vec()), proptest::strategy::Just(b"]".to_vec()),
                proptest::strategy::Just(b",".to_vec()), proptest::strategy::Just(b":".to_vec()),
                proptest::strategy::Just(b"\"".to_vec()), proptest::strategy::Just(b"\\".to_vec()),
                proptest::strategy::Just(br"\ud800".to_vec()), proptest::strategy::Just(br"\udc00".to_vec()),
                proptest::strategy::Just(br"\u00e9".to_vec()), proptest::strategy::Just(vec![0xff]),
                proptest::strategy::Just(vec![0xc3]), proptest::strategy::Just(b"\"overall_findings\"".to_vec()),
                proptest::strategy::Just(b"\"provenance\":\"command\"".to_vec()),
                proptest::strategy::Just(b"\"command\":\"x\"".to_vec()),
                proptest::strategy::Just(b"\"stdout\"".to_vec()), proptest::strategy::Just(b"\"stderr\"".to_vec()),
                proptest::strategy::Just(b"\"exit-code\":1".to_vec()),
                proptest::strategy::Strategy::prop_map("[a-z ]{0,4}", String::into_bytes),
            ], 0..48),
        ) {
            let bytes = parts.concat();
            let read = parse_checker_output(&bytes);
            if let Ok(text) = std::str::from_utf8(&bytes)
                && let Ok(strict) = serde_json::from_str::<Findings>(text)
            {
                proptest::prop_assert_eq!(read.as_ref().ok(), Some(&strict));
            }
            if let Ok(findings) = read {
                let shown = serde_json::to_string(&findings).unwrap_or_default();
                proptest::prop_assert!(!shown.contains("bork-non-utf8-"));
            }
        }
    }

    #[test]
    fn non_utf8_is_the_placeholder() {
        assert_eq!(decode_output(b"ok"), "ok");
        assert_eq!(decode_output(&[0xff, 0xfe]), NON_UTF8_OUTPUT);
    }
}
