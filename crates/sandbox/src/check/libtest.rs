//! `cargo test`'s text output (libtest) and rustc's errors, read from stdout and stderr
//! together. Pure.
//!
//! A failing test is a line `test NAME ... FAILED`; its `---- NAME stdout ----` section holds
//! the panic (`thread 'NAME' panicked at FILE:LINE:COL:` then the message, or the older
//! `panicked at 'MESSAGE', FILE:LINE:COL`). A doctest names its file and line in its name
//! (`src/lib.rs - add (line 5)`). A build that failed is read from rustc's `error…` lines,
//! each with the ` --> FILE:LINE:COL` that follows it.

use super::{Collected, Failure, file_line};

/// The most lines of a section or an error kept as its message.
const MESSAGE_LINES: usize = 40;

/// The failures `text` reports.
pub fn parse(text: &str) -> Collected {
    let text = super::strip_ansi(text);
    let lines: Vec<&str> = text.lines().collect();
    let mut collected = Collected::default();
    let mut failed: Vec<&str> = Vec::new();
    for line in &lines {
        // `test NAME ... FAILED`, or with `--quiet` only the section `---- NAME stdout ----`.
        let name = line
            .strip_prefix("test ")
            .and_then(|rest| rest.strip_suffix(" ... FAILED"))
            .or_else(|| {
                line.strip_prefix("---- ")
                    .and_then(|rest| rest.trim_end().strip_suffix(" stdout ----"))
            });
        if let Some(name) = name
            && !failed.contains(&name)
        {
            failed.push(name);
        }
    }
    for name in &failed {
        let body = section(&lines, name);
        let mut failure = panic_of(&body).unwrap_or_else(|| Failure {
            message: body
                .iter()
                .filter(|line| !line.trim().is_empty())
                .take(MESSAGE_LINES)
                .copied()
                .collect::<Vec<_>>()
                .join("\n"),
            ..Failure::default()
        });
        if failure.file.is_none()
            && let Some((file, line)) = doctest_location(name)
        {
            failure.file = Some(file);
            failure.line = Some(line);
        }
        failure.test = Some((*name).to_owned());
        collected.push(failure);
    }
    for failure in compile_errors(&lines) {
        collected.push(failure);
    }
    collected
}

/// The lines of `---- NAME stdout ----` up to the next section or the `failures:` list.
fn section<'a>(lines: &[&'a str], name: &str) -> Vec<&'a str> {
    let header = format!("---- {name} stdout ----");
    let Some(start) = lines.iter().position(|line| line.trim_end() == header) else {
        return Vec::new();
    };
    lines[start + 1..]
        .iter()
        .take_while(|line| {
            !(line.starts_with("---- ") && line.trim_end().ends_with(" ----"))
                && line.trim_end() != "failures:"
        })
        .copied()
        .collect()
}

/// The panic in a test's section: where, and the message after it.
fn panic_of(body: &[&str]) -> Option<Failure> {
    let at = body.iter().position(|line| line.contains(" panicked at "))?;
    let line = body[at];
    let after = &line[line.find(" panicked at ")? + " panicked at ".len()..];
    let mut failure = Failure::default();
    if let Some(rest) = after.strip_prefix('\'') {
        // Before Rust 1.73: `panicked at 'MESSAGE', FILE:LINE:COL`.
        if let Some(comma) = rest.rfind("', ") {
            failure.message = rest[..comma].to_owned();
            if let Some((file, line)) = file_line(&rest[comma + 3..]) {
                failure.file = Some(file);
                failure.line = Some(line);
            }
        }
        return Some(failure);
    }
    if let Some((file, line)) = file_line(after) {
        failure.file = Some(file);
        failure.line = Some(line);
    }
    failure.message = body[at + 1..]
        .iter()
        .take_while(|line| !line.starts_with("note: run with") && !line.starts_with("stack backtrace:"))
        .take(MESSAGE_LINES)
        .copied()
        .collect::<Vec<_>>()
        .join("\n");
    Some(failure)
}

/// A doctest's file and line, from its name: `src/lib.rs - add (line 5)`.
fn doctest_location(name: &str) -> Option<(String, u32)> {
    let (file, rest) = name.split_once(" - ")?;
    let line = rest.rsplit_once("(line ")?.1.strip_suffix(')')?;
    let line: u32 = line.parse().ok()?;
    (line > 0 && !file.contains(char::is_whitespace)).then(|| (file.to_owned(), line))
}

/// rustc's errors: an `error` line followed, within a few lines, by ` --> FILE:LINE:COL`.
fn compile_errors(lines: &[&str]) -> Vec<Failure> {
    let mut failures = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        if !(line.starts_with("error[") || line.starts_with("error: ")) {
            continue;
        }
        let Some(arrow) = lines[index + 1..]
            .iter()
            .take(3)
            .find_map(|next| next.trim_start().strip_prefix("--> "))
        else {
            continue;
        };
        let Some((file, line_number)) = file_line(arrow) else {
            continue;
        };
        let snippet: Vec<&str> = lines[index..]
            .iter()
            .take_while(|next| !next.trim().is_empty())
            .take(MESSAGE_LINES)
            .copied()
            .collect();
        failures.push(Failure {
            file: Some(file),
            line: Some(line_number),
            test: None,
            message: snippet.join("\n"),
        });
        if failures.len() > super::MAX_FAILURES {
            break;
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        crate::check::fixtures::read(name)
    }

    #[test]
    fn real_cargo_test_failures() {
        let text = fixture("libtest.stdout") + &fixture("libtest.stderr");
        let collected = parse(&text);
        let found = crate::check::fixtures::places(&collected);
        assert_eq!(
            found,
            [
                (Some("src/lib.rs"), Some(23), Some("tests::panics_with_message")),
                (Some("src/lib.rs"), Some(11), Some("tests::adds")),
                (Some("tests/api.rs"), Some(3), Some("integration_fails")),
            ]
        );
        assert_eq!(
            collected.failures[1].message,
            "assertion `left == right` failed\n  left: 5\n right: 4"
        );
        assert_eq!(collected.failures[0].message, "the list is empty: no items");
    }

    #[test]
    fn real_rustc_errors() {
        let collected = parse(&fixture("rustc-error.stderr"));
        assert_eq!(collected.failures.len(), 1, "{:?}", collected.failures);
        let failure = &collected.failures[0];
        assert_eq!(
            (failure.file.as_deref(), failure.line),
            (Some("src/lib.rs"), Some(2))
        );
        assert!(
            failure
                .message
                .starts_with("error[E0277]: cannot add `&str` to `u64`")
        );
    }

    #[test]
    fn old_panics_and_doctests() {
        let text = "test a ... FAILED\ntest src/lib.rs - add (line 5) ... FAILED\n\nfailures:\n\n\
                    ---- a stdout ----\nthread 'a' panicked at 'boom', src/a.rs:4:5\n\n\
                    ---- src/lib.rs - add (line 5) stdout ----\nTest executable failed.\n\nfailures:\n";
        let collected = parse(text);
        assert_eq!(collected.failures[0].file.as_deref(), Some("src/a.rs"));
        assert_eq!(collected.failures[0].message, "boom");
        assert_eq!(collected.failures[1].file.as_deref(), Some("src/lib.rs"));
        assert_eq!(collected.failures[1].line, Some(5));
    }

    proptest::proptest! {
        #[test]
        fn libtest_never_panics(text in "(test [a-z:]{0,6} \\.\\.\\. FAILED\n|---- [a-z:]{0,6} stdout ----\n|thread 'x' panicked at [a-z/.:0-9']{0,12}\n|error\\[E1\\]: x\n  --> [a-z.:0-9]{0,8}\n|.{0,20}\n){0,12}") {
            let _ = parse(&text);
        }

        #[test]
        fn libtest_never_panics_on_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            let _ = parse(&String::from_utf8_lossy(&bytes));
        }
    }
}
