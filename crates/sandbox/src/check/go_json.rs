//! `go test -json`: one JSON event per line (`Action`, `Package`, `Test`, `Output`); a test whose
//! last action is `fail` is a failure, with the output it printed. Pure.
//!
//! The file is the first `FILE:LINE:` its output names (`    calc_test.go:7: got 5`), joined to
//! the package's import path (`example.com/calc/calc_test.go`) for `run` to find in the
//! repository. A parent test that failed only because a subtest did is not reported twice. A
//! package that failed with no failing test (a build error, a panic in `init`) is one failure
//! with its output; the compiler's errors on stderr (`./calc.go:3:9: undefined: x`) are one each.

use std::collections::HashMap;

use serde::Deserialize;

use super::{Collected, Failure, MAX_MESSAGE, file_line};

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "Action", default)]
    action: String,
    #[serde(rename = "Package", default)]
    package: String,
    #[serde(rename = "Test", default)]
    test: Option<String>,
    #[serde(rename = "Output", default)]
    output: Option<String>,
}

/// The failures in `go test -json`'s `stdout`, and the build errors on its `stderr`.
pub fn parse(stdout: &str, stderr: &str) -> Collected {
    let mut outputs: HashMap<(String, String), String> = HashMap::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut package_failed: Vec<String> = Vec::new();
    for line in stdout.lines() {
        let Ok(event) = serde_json::from_str::<Event>(line.trim()) else {
            continue;
        };
        let key = (event.package.clone(), event.test.clone().unwrap_or_default());
        if let Some(output) = event.output {
            let kept = outputs.entry(key.clone()).or_default();
            if kept.len() < MAX_MESSAGE * 4 {
                kept.push_str(bork_ci_core::untrusted::head(
                    &output,
                    MAX_MESSAGE * 4 - kept.len(),
                ));
            }
        }
        match (event.action.as_str(), event.test.is_some()) {
            ("fail", true) if !failed.contains(&key) => failed.push(key),
            ("pass" | "skip", true) => failed.retain(|known| *known != key),
            ("fail", false) if !package_failed.contains(&event.package) => package_failed.push(event.package),
            _ => {}
        }
    }
    let mut collected = Collected::default();
    for (package, test) in &failed {
        let subtest_failed = failed
            .iter()
            .any(|(other_package, other)| other_package == package && other.starts_with(&format!("{test}/")));
        let output = outputs
            .get(&(package.clone(), test.clone()))
            .map_or("", String::as_str);
        let said: Vec<&str> = output
            .lines()
            .filter(|line| {
                let trimmed = line.trim_start();
                !trimmed.starts_with("=== ") && !trimmed.starts_with("--- FAIL") && !trimmed.is_empty()
            })
            .collect();
        if subtest_failed && said.is_empty() {
            continue;
        }
        let place = said.iter().find_map(|line| file_line(line));
        let message = said.iter().map(|line| line.trim()).collect::<Vec<_>>().join("\n");
        collected.push(Failure {
            file: place.as_ref().map(|(file, _)| joined(package, file)),
            line: place.map(|(_, line)| line),
            test: Some(test.clone()),
            message,
        });
    }
    for package in &package_failed {
        if failed.iter().any(|(failed_package, _)| failed_package == package) {
            continue;
        }
        let output = outputs
            .get(&(package.clone(), String::new()))
            .map_or("", String::as_str);
        let place = output.lines().find_map(file_line);
        collected.push(Failure {
            file: place.as_ref().map(|(file, _)| joined(package, file)),
            line: place.map(|(_, line)| line),
            test: None,
            message: format!("package {package} failed\n{}", output.trim()),
        });
    }
    let mut package = String::new();
    for line in stderr.lines() {
        if let Some(name) = line.strip_prefix("# ") {
            package = name.trim().to_owned();
            continue;
        }
        if let Some((file, number)) = file_line(line)
            && file.ends_with(".go")
        {
            collected.push(Failure {
                file: Some(if package.is_empty() {
                    file
                } else {
                    joined(&package, &file)
                }),
                line: Some(number),
                test: None,
                message: line.trim().to_owned(),
            });
        }
        if collected.failures.len() > super::MAX_FAILURES {
            break;
        }
    }
    collected
}

/// A file a package's test named, under the package's import path (unless already a path).
fn joined(package: &str, file: &str) -> String {
    let file = file.strip_prefix("./").unwrap_or(file);
    if file.starts_with('/') || package.is_empty() {
        return file.to_owned();
    }
    format!("{package}/{file}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_go_test_json() {
        let text = crate::check::fixtures::read("go-test.json");
        let collected = parse(&text, "");
        let found: Vec<_> = collected
            .failures
            .iter()
            .map(|f| (f.file.as_deref(), f.line, f.test.as_deref(), f.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    Some("example.com/calc/calc_test.go"),
                    Some(7),
                    Some("TestAdd"),
                    "calc_test.go:7: Add(2, 2) = 5, want 4"
                ),
                (
                    Some("example.com/calc/calc_test.go"),
                    Some(15),
                    Some("TestSub/inner"),
                    "calc_test.go:15: inner broke"
                ),
            ]
        );
    }

    #[test]
    fn build_errors_on_stderr() {
        let collected = parse(
            r#"{"Action":"fail","Package":"example.com/calc"}"#,
            "# example.com/calc\n./calc.go:3:33: undefined: x\n",
        );
        assert_eq!(collected.failures.len(), 2);
        assert_eq!(
            collected.failures[1].file.as_deref(),
            Some("example.com/calc/calc.go")
        );
        assert_eq!(collected.failures[1].line, Some(3));
    }

    proptest::proptest! {
        #[test]
        fn go_json_never_panics(lines in proptest::collection::vec("\\{\"Action\":\"(run|fail|pass|output)\",\"Package\":\"[a-z/]{0,5}\"(,\"Test\":\"[A-Za-z/]{0,5}\")?(,\"Output\":\"[a-z.: 0-9]{0,12}\")?\\}|.{0,10}", 0..20)) {
            let _ = parse(&lines.join("\n"), &lines.join("\n"));
        }
    }
}
