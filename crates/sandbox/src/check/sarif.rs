//! A SARIF 2.1.0 log a tool wrote (`--sarif FILE`): each result of each run is a failure, unless
//! its `kind` says it passed or does not apply, or it is suppressed. Pure.
//!
//! The file is the first location's `artifactLocation.uri` (a `file://` URI made a path; a
//! percent-escape is left as it is), the line its `region.startLine`, the test the `ruleId`.

use serde::Deserialize;

use super::{Collected, Failure};

#[derive(Deserialize, Default)]
#[serde(default)]
struct Log {
    runs: Vec<Run>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Run {
    results: Vec<SarifResult>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SarifResult {
    #[serde(rename = "ruleId")]
    rule_id: Option<String>,
    kind: Option<String>,
    level: Option<String>,
    message: Message,
    locations: Vec<Location>,
    suppressions: Vec<serde_json::Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Message {
    text: Option<String>,
    markdown: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Location {
    #[serde(rename = "physicalLocation")]
    physical_location: Option<PhysicalLocation>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PhysicalLocation {
    #[serde(rename = "artifactLocation")]
    artifact_location: Option<ArtifactLocation>,
    region: Option<Region>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ArtifactLocation {
    uri: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Region {
    #[serde(rename = "startLine")]
    start_line: Option<u32>,
}

/// The results in the SARIF log `text`.
pub fn parse(text: &str) -> Collected {
    let mut collected = Collected::default();
    let Ok(log) = serde_json::from_str::<Log>(text.trim()) else {
        return collected;
    };
    for run in log.runs {
        for result in run.results {
            let kind = result.kind.as_deref().unwrap_or("fail");
            if matches!(kind, "pass" | "notApplicable" | "informational") || !result.suppressions.is_empty() {
                continue;
            }
            let physical = result
                .locations
                .into_iter()
                .find_map(|location| location.physical_location);
            let file = physical
                .as_ref()
                .and_then(|physical| physical.artifact_location.as_ref())
                .and_then(|artifact| artifact.uri.clone())
                .map(|uri| uri.strip_prefix("file://").map(str::to_owned).unwrap_or(uri));
            let line = physical
                .as_ref()
                .and_then(|physical| physical.region.as_ref())
                .and_then(|region| region.start_line);
            let text = result
                .message
                .text
                .or(result.message.markdown)
                .unwrap_or_default();
            let message = match result.level.as_deref() {
                Some(level) => format!("{level}: {text}"),
                None => text,
            };
            collected.push(Failure {
                file,
                line,
                test: result.rule_id,
                message,
            });
            if collected.failures.len() > super::MAX_FAILURES {
                return collected;
            }
        }
    }
    collected
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_with_places() {
        let text = crate::check::fixtures::read("lint.sarif");
        let collected = parse(&text);
        let found: Vec<_> = collected
            .failures
            .iter()
            .map(|f| (f.file.as_deref(), f.line, f.test.as_deref(), f.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (
                    Some("src/app.py"),
                    Some(12),
                    Some("F841"),
                    "error: Local variable `unused` is assigned to but never used"
                ),
                (
                    Some("/repo/src/util.py"),
                    Some(3),
                    Some("E501"),
                    "warning: Line too long (120 > 88)"
                ),
            ]
        );
    }

    proptest::proptest! {
        #[test]
        fn sarif_never_panics(text in "\\{\"runs\":\\[\\{\"results\":\\[(\\{\"ruleId\":\"[A-Z0-9]{0,3}\",(\"kind\":\"(pass|fail)\",)?\"message\":\\{\"text\":\"[a-z ]{0,6}\"\\},\"locations\":\\[\\{\"physicalLocation\":\\{\"artifactLocation\":\\{\"uri\":\"[a-z:/.]{0,8}\"\\},\"region\":\\{\"startLine\":-?[0-9]{0,11}\\}\\}\\}\\]\\},?){0,3}\\]\\}\\]\\}|.{0,30}") {
            let _ = parse(&text);
        }
    }
}
