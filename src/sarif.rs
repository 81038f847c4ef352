//! SARIF 2.1.0 output of findings (`--sarif PATH`) for code scanning. Pure rendering; writing
//! the file is the caller's business.

use serde_json::{Value, json};

use crate::findings::{Finding, Findings};

/// The findings as one SARIF 2.1.0 log with one run. Per-file findings carry a location;
/// overall findings and command findings are reported without one.
pub fn render(findings: &Findings, tool_version: &str) -> Value {
    let mut results = Vec::new();
    let mut rules_used = (false, false);
    for finding in findings
        .per_file_findings
        .iter()
        .chain(findings.overall_findings.iter())
    {
        match finding {
            Finding::CodeReview { file, finding } => {
                rules_used.0 = true;
                let mut result = json!({
                    "ruleId": "bork/code-review",
                    "level": "warning",
                    "message": { "text": finding },
                });
                if let Some(file) = file {
                    result["locations"] = json!([{
                        "physicalLocation": {
                            "artifactLocation": { "uri": uri(file), "uriBaseId": "%SRCROOT%" },
                            "region": { "startLine": crate::findings::line_hint(finding).unwrap_or(1) }
                        }
                    }]);
                }
                results.push(result);
            }
            Finding::Command {
                command,
                stdout,
                stderr,
                exit_code,
            } => {
                rules_used.1 = true;
                results.push(json!({
                    "ruleId": "bork/command",
                    "level": "error",
                    "message": { "text": format!("`{command}` exited with {exit_code}\n\nstdout:\n{stdout}\n\nstderr:\n{stderr}") },
                }));
            }
        }
    }
    let mut rules = Vec::new();
    if rules_used.0 {
        rules.push(json!({
            "id": "bork/code-review",
            "name": "CodeReview",
            "shortDescription": { "text": "A correctness-checker finding about the code" },
        }));
    }
    if rules_used.1 {
        rules.push(json!({
            "id": "bork/command",
            "name": "Command",
            "shortDescription": { "text": "A check command that failed" },
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
            "originalUriBaseIds": { "%SRCROOT%": { "uri": "file:///" } },
            "results": results,
        }]
    })
}

fn uri(path: &str) -> String {
    let mut out = String::new();
    for byte in path.trim_start_matches("./").bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn renders_per_file_findings_with_locations() {
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
        let sarif = render(&findings, "0.1.0");
        assert_eq!(sarif["version"], "2.1.0");
        let results = sarif["runs"][0]["results"].as_array().expect("results");
        assert_eq!(results.len(), 2);
        let location = &results[0]["locations"][0]["physicalLocation"];
        assert_eq!(location["artifactLocation"]["uri"], "src/a%20b.rs");
        assert_eq!(location["region"]["startLine"], 12);
        assert!(results[1].get("locations").is_none());
        assert_eq!(
            sarif["runs"][0]["tool"]["driver"]["rules"]
                .as_array()
                .map(Vec::len),
            Some(2)
        );
    }
}
