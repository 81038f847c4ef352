//! `bork-ci check -- <command>`: a correctness checker built into bork-ci that runs a test tool
//! and says what failed, one per-file finding per failing test (file, line, test, message).
//!
//! [`tool`] decides how to ask a known tool for structured output (pytest's JUnit XML,
//! `go test -json`, jest's and vitest's JSON, node's TAP); one parser per format reads it
//! ([`libtest`], [`junit`], [`go_json`], [`tap`], [`jest`], [`sarif`]), each pure and bounded;
//! [`run`] starts the tool, reads its output and report files bounded, and turns failures into
//! the checker contract's [`Findings`]. Everything a tool printed is hostile: escape codes and
//! control characters are stripped, every message is cut, at most [`MAX_FAILURES`] failures
//! are kept, and nothing in it can make a parser panic or loop. This module does not judge the
//! findings (that is `checker`'s business once bork-ci reads them back).

pub mod go_json;
pub mod jest;
pub mod junit;
pub mod libtest;
pub mod run;
pub mod sarif;
pub mod tap;
pub mod tool;

use bork_ci_core::findings::{Finding, Findings};

/// The most bytes read of each output stream and each report file.
pub const MAX_READ: usize = 16 << 20;
/// The most failures reported; more are counted in one overall finding.
pub const MAX_FAILURES: usize = 200;
/// The longest message kept per failure (bytes).
pub const MAX_MESSAGE: usize = 4 * 1024;
/// How much of each output stream's end is passed on to stderr and into a `command` finding.
pub const TAIL: usize = 8 * 1024;
/// The deepest XML or JSON nesting a parser follows.
pub const MAX_DEPTH: usize = 64;

/// The structured output to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Ask a known tool for structured output and read what it gives, else sniff the output.
    #[default]
    Auto,
    /// `cargo test` (libtest's text output) and rustc's errors.
    Libtest,
    /// JUnit XML (`--junit FILE`, or pytest's `--junit-xml`).
    Junit,
    /// `go test -json`.
    GoJson,
    /// The Test Anything Protocol (`prove`, `node --test --test-reporter=tap`).
    Tap,
    /// jest's or vitest's JSON report.
    Jest,
    /// A SARIF 2.1.0 log (`--sarif FILE`).
    Sarif,
}

/// One failing test or result, as a parser read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Failure {
    /// The file the failure points at, as the tool wrote it (made relative by [`run`]).
    pub file: Option<String>,
    /// The line in `file`, from 1.
    pub line: Option<u32>,
    /// The test's name.
    pub test: Option<String>,
    /// What the tool said about it.
    pub message: String,
}

/// Text from a tool made safe to keep: ANSI escape sequences removed, then every control
/// character but newline and tab, then cut to `max` bytes at a character boundary.
pub fn clean(text: &str, max: usize) -> String {
    // Cut first so that a huge input costs no more than twice `max` to clean.
    let head = bork_ci_core::untrusted::head(text, max.saturating_mul(2));
    let stripped = strip_ansi(head);
    let trimmed = stripped.trim_matches(['\n', '\r', ' ']);
    bork_ci_core::untrusted::strip_controls(trimmed, max)
}

/// `text` without ANSI escape sequences (CSI `ESC [ … final`, OSC `ESC ] … BEL|ST`, and
/// two-character `ESC x`); a lone or unfinished escape drops only the `ESC`.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' && c != '\u{9b}' {
            out.push(c);
            continue;
        }
        let kind = if c == '\u{9b}' {
            Some('[')
        } else {
            chars.peek().copied()
        };
        match kind {
            Some('[') => {
                if c == '\u{1b}' {
                    chars.next();
                }
                // Parameters and intermediates, then one final byte in @..~.
                while let Some(&next) = chars.peek() {
                    chars.next();
                    if ('@'..='~').contains(&next) {
                        break;
                    }
                    if !(' '..='?').contains(&next) {
                        break;
                    }
                }
            }
            Some(']') => {
                chars.next();
                while let Some(next) = chars.next() {
                    if next == '\u{7}' {
                        break;
                    }
                    if next == '\u{1b}' && chars.peek() == Some(&'\\') {
                        chars.next();
                        break;
                    }
                }
            }
            Some(next) if ('@'..='_').contains(&next) => {
                chars.next();
            }
            _ => {}
        }
    }
    out
}

/// A test name or path from a tool, on one line and bounded.
pub fn name(text: &str) -> String {
    clean(text, 512).replace(['\n', '\t'], " ")
}

/// The contract's findings for `failures`: a per-file finding for each one with a file, an
/// overall one for the rest, at most [`MAX_FAILURES`] (the rest counted in one more).
pub fn findings(failures: &[Failure], total: usize) -> Findings {
    let mut findings = Findings::default();
    for failure in failures.iter().take(MAX_FAILURES) {
        let text = describe(failure);
        match &failure.file {
            Some(file) => findings.per_file_findings.push(Finding::CodeReview {
                file: Some(file.clone()),
                finding: text,
            }),
            None => findings.overall_findings.push(Finding::CodeReview {
                file: None,
                finding: text,
            }),
        }
    }
    let total = total.max(failures.len());
    if total > MAX_FAILURES {
        findings.overall_findings.push(Finding::CodeReview {
            file: None,
            finding: format!(
                "{} more failures are not listed (at most {MAX_FAILURES} are)",
                total - MAX_FAILURES
            ),
        });
    }
    findings
}

/// One failure in words: where (`line N`, which SARIF and annotations read), which test, and
/// what the tool said, e.g. "line 11: `tests::adds` failed: assertion `left == right` failed"
/// (a compiler's error, with no test: "line 2: error\[E0277\]: …").
pub fn describe(failure: &Failure) -> String {
    let mut text = String::new();
    if let Some(line) = failure.line {
        text.push_str(&format!("line {line}: "));
    }
    let message = clean(&failure.message, MAX_MESSAGE);
    match &failure.test {
        Some(test) => {
            text.push_str(&format!("{} failed", bork_ci_core::untrusted::code_span(test)));
            if !message.is_empty() {
                text.push_str(": ");
            }
        }
        None if message.is_empty() => text.push_str("failed"),
        None => {}
    }
    text.push_str(&message);
    text
}

/// Keeps at most [`MAX_FAILURES`] + 1 failures while a parser reads (the one more says there
/// are more), counting them all.
#[derive(Debug, Default)]
pub struct Collected {
    pub failures: Vec<Failure>,
    pub total: usize,
}

impl Collected {
    /// Adds one failure, cleaning its fields.
    pub fn push(&mut self, mut failure: Failure) {
        self.total += 1;
        if self.failures.len() > MAX_FAILURES {
            return;
        }
        failure.message = clean(&failure.message, MAX_MESSAGE);
        failure.test = failure
            .test
            .map(|test| name(&test))
            .filter(|test| !test.is_empty());
        failure.file = failure
            .file
            .map(|file| name(&file))
            .filter(|file| !file.is_empty());
        failure.line = failure.line.filter(|line| *line > 0);
        self.failures.push(failure);
    }

    /// True when nothing failed.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// `FILE:LINE` or `FILE:LINE:COL` at the start of `text` (after blanks): the file and line.
/// The file must look like a path (no blanks, not a URL scheme, not empty).
pub fn file_line(text: &str) -> Option<(String, u32)> {
    let text = text.trim_start();
    let text = text.strip_prefix("./").unwrap_or(text);
    let mut parts = text.splitn(3, ':');
    let file = parts.next()?;
    let line = parts.next()?;
    if file.is_empty() || file.contains(char::is_whitespace) || file.len() > 1024 {
        return None;
    }
    if line.is_empty() || !line.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    let line: u32 = line.parse().ok()?;
    (line > 0).then(|| (file.to_owned(), line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_codes_and_controls_go() {
        assert_eq!(strip_ansi("\u{1b}[31mred\u{1b}[0m ok"), "red ok");
        assert_eq!(
            strip_ansi("a\u{1b}]8;;http://x\u{7}link\u{1b}]8;;\u{1b}\\b"),
            "alinkb"
        );
        assert_eq!(strip_ansi("end\u{1b}"), "end");
        assert_eq!(clean("\u{1b}[1mbold\u{0}\u{7}\n", 100), "bold");
        assert!(clean(&"x".repeat(10_000), 100).len() < 150);
    }

    #[test]
    fn file_and_line() {
        assert_eq!(file_line("src/lib.rs:11:9"), Some(("src/lib.rs".into(), 11)));
        assert_eq!(file_line("./tests/t.py:5"), Some(("tests/t.py".into(), 5)));
        assert_eq!(file_line("a b.rs:3"), None);
        assert_eq!(file_line("x.rs:0"), None);
        assert_eq!(file_line("x.rs:abc"), None);
        assert_eq!(file_line("x.rs:99999999999"), None);
    }

    #[test]
    fn a_failure_in_words_names_the_line_first() {
        let failure = Failure {
            file: Some("src/lib.rs".into()),
            line: Some(11),
            test: Some("tests::adds".into()),
            message: "assertion failed".into(),
        };
        let text = describe(&failure);
        assert_eq!(text, "line 11: `tests::adds` failed: assertion failed");
        assert_eq!(bork_ci_core::findings::line_hint(&text), Some(11));
    }

    #[test]
    fn more_than_the_cap_is_counted() {
        let failures: Vec<Failure> = (0..MAX_FAILURES + 1)
            .map(|n| Failure {
                file: Some(format!("f{n}.rs")),
                ..Failure::default()
            })
            .collect();
        let findings = findings(&failures, 500);
        assert_eq!(findings.per_file_findings.len(), MAX_FAILURES);
        assert_eq!(findings.overall_findings.len(), 1);
    }
}

/// What the parsers' unit tests share: the captured outputs in `tests/fixtures/check/`, and the
/// place of each failure found.
#[cfg(test)]
pub(crate) mod fixtures {
    /// The fixture `name`, as text.
    pub fn read(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/check")
            .join(name);
        String::from_utf8(bork_ci_core::safe_fs::read_regular(&path, 1 << 20).expect("fixture"))
            .expect("utf-8")
    }

    /// Each failure's file, line and test.
    pub fn places(collected: &super::Collected) -> Vec<(Option<&str>, Option<u32>, Option<&str>)> {
        collected
            .failures
            .iter()
            .map(|f| (f.file.as_deref(), f.line, f.test.as_deref()))
            .collect()
    }
}
