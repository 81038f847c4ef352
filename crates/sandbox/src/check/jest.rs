//! jest's JSON report (`--json --outputFile`) and vitest's (`--reporter=json`, the same shape):
//! each assertion result with status `failed` is a failure; a test file that failed with no
//! failing assertion (it did not load) is one failure with its message. Pure.
//!
//! The line is the first stack frame in the test's file (`(/repo/sum.test.js:5:10)`), else the
//! result's `location` (with `--testLocationInResults`).

use serde::Deserialize;

use super::{Collected, Failure, file_line};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Report {
    #[serde(rename = "testResults")]
    test_results: Vec<FileResult>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct FileResult {
    name: String,
    status: String,
    message: String,
    #[serde(rename = "assertionResults")]
    assertion_results: Vec<Assertion>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Assertion {
    status: String,
    #[serde(rename = "fullName")]
    full_name: String,
    title: String,
    #[serde(rename = "failureMessages")]
    failure_messages: Vec<String>,
    location: Option<Location>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Location {
    line: u32,
}

/// The failures in a jest or vitest JSON report.
pub fn parse(text: &str) -> Collected {
    let mut collected = Collected::default();
    let Ok(report) = serde_json::from_str::<Report>(text.trim()) else {
        return collected;
    };
    for file in report.test_results {
        let mut any = false;
        for assertion in file.assertion_results {
            if assertion.status != "failed" {
                continue;
            }
            any = true;
            let message = assertion.failure_messages.join("\n");
            let line = frame_line(&message, &file.name).or(assertion
                .location
                .map(|location| location.line)
                .filter(|line| *line > 0));
            let test = if assertion.full_name.is_empty() {
                assertion.title
            } else {
                assertion.full_name
            };
            collected.push(Failure {
                file: Some(file.name.clone()).filter(|name| !name.is_empty()),
                line,
                test: Some(test),
                message,
            });
            if collected.failures.len() > super::MAX_FAILURES {
                return collected;
            }
        }
        if !any && file.status == "failed" {
            let line = frame_line(&file.message, &file.name);
            collected.push(Failure {
                file: Some(file.name.clone()).filter(|name| !name.is_empty()),
                line,
                test: None,
                message: file.message,
            });
        }
    }
    collected
}

/// The line of the first stack frame in `file` that `message` holds (`(FILE:LINE:COL)` or
/// `at FILE:LINE:COL`).
fn frame_line(message: &str, file: &str) -> Option<u32> {
    if file.is_empty() {
        return None;
    }
    message.lines().find_map(|line| {
        let at = line.find(file)?;
        let (found, number) = file_line(&line[at..])?;
        (found == file).then_some(number)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jest_report() {
        let text = crate::check::fixtures::read("jest.json");
        let collected = parse(&text);
        let found = crate::check::fixtures::places(&collected);
        assert_eq!(
            found,
            [
                (Some("/repo/sum.test.js"), Some(4), Some("sum adds two numbers")),
                (Some("/repo/broken.test.js"), Some(2), None),
            ]
        );
        assert!(collected.failures[0].message.contains("Expected: 4"));
    }

    proptest::proptest! {
        #[test]
        fn jest_never_panics(text in "\\{\"testResults\":\\[(\\{\"name\":\"[a-z/.]{0,6}\",\"status\":\"(failed|passed)\",\"message\":\"[a-z:0-9 ()/.]{0,10}\",\"assertionResults\":\\[(\\{\"status\":\"failed\",\"fullName\":\"[a-z]{0,4}\",\"failureMessages\":\\[\"[a-z:0-9 ()/.]{0,12}\"\\],\"location\":(null|\\{\"line\":[0-9]{1,3}\\})\\},?){0,3}\\]\\},?){0,3}\\]\\}|.{0,30}") {
            let _ = parse(&text);
        }
    }
}
