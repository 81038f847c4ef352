//! `bork-ci run --sarif`: the file validates against the official OASIS SARIF 2.1.0 schema
//! (`tests/fixtures/sarif-schema-2.1.0.json`) and meets GitHub code scanning's documented upload
//! rules ("SARIF support for code scanning", "SARIF results exceed limits"), checked here one by
//! one, for findings with a file, without one, naming a path outside the repository, and commands.

use serde_json::{Value, json};

use crate::support::{Repo, bork, script};

const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";

/// A checker that always reports every kind of finding.
const CHECKER: &str = r#"#!/bin/sh
cat <<'JSON'
{"per_file_findings": [
  {"provenance": "code-review", "file": "src/app.txt", "finding": "line 3: prints nothing"},
  {"provenance": "code-review", "file": "/etc/passwd", "finding": "an absolute path"},
  {"provenance": "code-review", "file": "src/dir with space/ü.txt", "finding": "odd name"}
 ],
 "overall_findings": [
  {"provenance": "code-review", "finding": "the app as a whole does not print DONE"},
  {"provenance": "command", "command": "make test", "stdout": "1 failed", "stderr": "", "exit-code": 2}
 ]}
JSON
exit 1
"#;

fn schema_validator() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sarif-schema-2.1.0.json"
    );
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("read the schema"))
        .expect("the schema is JSON");
    assert_eq!(
        schema["id"],
        "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
    );
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the schema compiles")
}

fn sarif_of(checker: Option<&str>) -> Value {
    let mut files = vec![("specs/app.md", SPEC), ("src/app.txt", "nothing yet\n")];
    let config = match checker {
        Some(_) => {
            r#"{"correctness-checker": "ci/check", "max-iterations": 1, "llm": {"provider": "scripted"}}"#
        }
        None => r#"{"max-iterations": 1, "llm": {"provider": "scripted"}}"#,
    };
    files.push((".config/bork.json", config));
    if let Some(checker) = checker {
        files.push(("ci/check", checker));
    }
    let repo = Repo::new(&files);
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = [json!({"create-or-update": {"src/app.txt": "still nothing\n"}})];
    let script = script(scratch.path(), &answers);
    let sarif_path = scratch.path().join("out.sarif");
    let output = bork()
        .arg("run")
        .arg("--repo")
        .arg(repo.path())
        .arg("--sarif")
        .arg(&sarif_path)
        .env("BORK_LLM_SCRIPT", &script)
        .output()
        .expect("bork-ci runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let text = std::fs::read_to_string(&sarif_path).unwrap_or_else(|_| panic!("SARIF written: {stderr}"));
    serde_json::from_str(&text).expect("SARIF is JSON")
}

/// GitHub's documented rules for an uploaded SARIF file, as assertions.
fn assert_github_accepts(sarif: &Value) {
    assert_eq!(sarif["version"], "2.1.0");
    let runs = sarif["runs"].as_array().expect("runs");
    assert!(!runs.is_empty() && runs.len() <= 20, "1 to 20 runs per file");
    for run in runs {
        assert!(
            run.get("originalUriBaseIds")
                .is_none_or(|bases| !bases.to_string().contains("file:///"))
        );
        let driver = &run["tool"]["driver"];
        assert!(
            driver["name"].as_str().is_some_and(|name| !name.is_empty()),
            "tool.driver.name"
        );
        let rules = driver["rules"].as_array().expect("rules");
        assert!(rules.len() <= 25_000, "rules per run");
        let mut rule_ids = Vec::new();
        for rule in rules {
            let id = rule["id"].as_str().expect("rule id");
            rule_ids.push(id.to_owned());
            for field in ["shortDescription", "fullDescription", "help"] {
                assert!(
                    rule[field]["text"].as_str().is_some_and(|text| !text.is_empty()),
                    "rule {id} has {field}.text"
                );
            }
            assert!(
                rule["properties"]["tags"]
                    .as_array()
                    .is_none_or(|tags| tags.len() <= 20)
            );
        }
        let results = run["results"].as_array().expect("results");
        assert!(results.len() <= 25_000, "results per run");
        for result in results {
            let rule = result["ruleId"].as_str().expect("ruleId");
            assert!(
                rule_ids.iter().any(|id| id == rule),
                "ruleId {rule} is a rule of the driver"
            );
            assert!(
                result["message"]["text"]
                    .as_str()
                    .is_some_and(|text| !text.is_empty()),
                "message.text"
            );
            let fingerprints = result["partialFingerprints"]
                .as_object()
                .expect("partialFingerprints");
            assert!(!fingerprints.is_empty() && fingerprints.values().all(Value::is_string));
            let locations = result["locations"].as_array().expect("locations");
            assert!(
                !locations.is_empty() && locations.len() <= 1000,
                "1 to 1000 locations"
            );
            for location in locations {
                let physical = &location["physicalLocation"];
                let uri = physical["artifactLocation"]["uri"]
                    .as_str()
                    .expect("artifactLocation.uri");
                assert!(
                    !uri.is_empty() && !uri.starts_with('/') && !uri.contains("://") && !uri.contains(".."),
                    "relative uri {uri}"
                );
                assert!(!uri.contains(':'), "no scheme in {uri}");
                assert!(
                    physical["region"]["startLine"]
                        .as_u64()
                        .is_some_and(|line| line >= 1),
                    "startLine >= 1"
                );
            }
        }
    }
}

fn uri_of(result: &Value) -> &str {
    result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        .as_str()
        .expect("uri")
}

#[test]
fn sarif_is_schema_valid_and_meets_code_scanning_rules() {
    let validator = schema_validator();
    for checker in [Some(CHECKER), None] {
        let sarif = sarif_of(checker);
        let errors: Vec<String> = validator
            .iter_errors(&sarif)
            .map(|error| error.to_string())
            .collect();
        assert!(errors.is_empty(), "{errors:#?}\n{sarif:#}");
        assert_github_accepts(&sarif);
        let results = sarif["runs"][0]["results"].as_array().expect("results");
        if checker.is_none() {
            // No checker: no findings, still a valid file.
            assert!(results.is_empty(), "{sarif:#}");
            continue;
        }
        assert_eq!(results.len(), 5, "{sarif:#}");
        assert_eq!(uri_of(&results[0]), "src/app.txt");
        assert_eq!(
            results[0]["locations"][0]["physicalLocation"]["region"]["startLine"],
            3
        );
        assert_eq!(
            uri_of(&results[1]),
            "ci/check",
            "an absolute path is shown at the checker"
        );
        assert!(
            results[1]["message"]["text"]
                .as_str()
                .expect("text")
                .contains("/etc/passwd")
        );
        assert_eq!(uri_of(&results[2]), "src/dir%20with%20space/%C3%BC.txt");
        for overall in &results[3..] {
            assert_eq!(uri_of(overall), "ci/check");
            assert!(
                overall["message"]["text"]
                    .as_str()
                    .expect("text")
                    .contains("correctness checker `ci/check`, line 1")
            );
        }
        // Fingerprints are stable across runs and distinct between findings.
        let again = sarif_of(checker);
        assert_eq!(
            again["runs"][0]["results"][0]["partialFingerprints"],
            results[0]["partialFingerprints"]
        );
        assert_ne!(
            results[3]["partialFingerprints"],
            results[4]["partialFingerprints"]
        );
    }
}

#[test]
fn without_a_checker_findings_point_at_the_configuration_file() {
    // The reviewer's findings are the only ones possible without a checker; the renderer is
    // shown the same findings the checker above reports.
    let findings: bork_ci::findings::Findings = serde_json::from_str(
        r#"{"per_file_findings": [], "overall_findings": [
            {"provenance": "code-review", "finding": "overall"},
            {"provenance": "command", "command": "x", "stdout": "", "stderr": "", "exit-code": 1}]}"#,
    )
    .expect("findings");
    let sarif = bork_ci::sarif::render(&findings, "0.1.0", None);
    let errors: Vec<String> = schema_validator()
        .iter_errors(&sarif)
        .map(|error| error.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert_github_accepts(&sarif);
    for result in sarif["runs"][0]["results"].as_array().expect("results") {
        assert_eq!(uri_of(result), ".config/bork.json");
        assert!(
            result["message"]["text"]
                .as_str()
                .expect("text")
                .contains("no correctness checker is configured")
        );
    }
}
