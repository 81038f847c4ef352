//! The review criticizer: an LLM code review of the working tree's changes, parsed strictly and
//! defensively into a [`ReviewResult`], then converted into `code-review` [`Findings`].
//!
//! This module owns the `ReviewResult` model, its parser ([`parse()`]), the version policy
//! ([`version`]), the reviewer prompt ([`render_prompt`]) and the collection of the changes under
//! review ([`changed_files`]). It does not call a model itself: [`review`] takes the LLM call as a
//! closure, so the caller chooses the provider. It does not decide when a review runs, nor print.
//!
//! Validation runs in the order the reviewer contract fixes: parse the JSON, validate the top
//! level (versions before anything else), validate each finding with only the safe coercions, then
//! reconcile each finding's file against the changed files. Every coercion and every dropped
//! finding leaves a [`Diagnostic`] in the result, and [`ReviewStats`] counts them for rollout
//! monitoring.

pub mod changes;
pub mod parse;
pub mod prompt;
pub mod version;

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use bork_ci_core::findings::{Finding, Findings};

pub use changes::changed_files;
pub use parse::{MAX_FINDINGS, MAX_RESPONSE_BYTES, parse, request_schema, response_schema};
pub use prompt::{ChangedFile, render_prompt};
pub use version::{PROMPT_VERSION, SCHEMA_VERSION, VersionPolicy};

/// How serious a finding is. Ordered: `Info < Low < Medium < High < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
    Info,
}

impl Severity {
    /// Every severity, most serious first.
    pub const ALL: [Severity; 5] = [
        Severity::Critical,
        Severity::High,
        Severity::Medium,
        Severity::Low,
        Severity::Info,
    ];

    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
            Severity::Info => "info",
        }
    }

    fn rank(self) -> u8 {
        match self {
            Severity::Info => 0,
            Severity::Low => 1,
            Severity::Medium => 2,
            Severity::High => 3,
            Severity::Critical => 4,
        }
    }
}

impl PartialOrd for Severity {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Severity {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

/// The category of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Correctness,
    Security,
    Performance,
    Reliability,
    Maintainability,
    Style,
    Test,
}

impl Category {
    /// Every category, in the schema's order.
    pub const ALL: [Category; 7] = [
        Category::Correctness,
        Category::Security,
        Category::Performance,
        Category::Reliability,
        Category::Maintainability,
        Category::Style,
        Category::Test,
    ];

    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Correctness => "correctness",
            Category::Security => "security",
            Category::Performance => "performance",
            Category::Reliability => "reliability",
            Category::Maintainability => "maintainability",
            Category::Style => "style",
            Category::Test => "test",
        }
    }
}

/// How sure the reviewer is of a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    High,
    Medium,
    Low,
}

impl Confidence {
    /// Every confidence, in the schema's order.
    pub const ALL: [Confidence; 3] = [Confidence::High, Confidence::Medium, Confidence::Low];

    /// The schema's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// A value that is not one of an enum's schema spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not one of: {allowed}")]
pub struct UnknownVariant {
    /// The rejected text, shortened.
    pub value: String,
    /// The accepted spellings, comma-separated.
    pub allowed: String,
}

macro_rules! schema_enum_text {
    ($name:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownVariant;

            /// Accepts exactly the schema's lowercase spelling.
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|variant| variant.as_str() == text)
                    .ok_or_else(|| UnknownVariant {
                        value: shorten(text),
                        allowed: $name::ALL
                            .iter()
                            .map(|variant| variant.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
        }
    };
}

schema_enum_text!(Severity);
schema_enum_text!(Category);
schema_enum_text!(Confidence);

/// One validated review finding, after coercion and file reconciliation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewFinding {
    pub id: String,
    pub severity: Severity,
    pub category: Category,
    pub title: String,
    /// A path from the changed files, exactly as listed there.
    pub file: String,
    /// 1-based first line.
    pub line: u64,
    /// 1-based last line, never before `line`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u64>,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confidence: Option<Confidence>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
}

/// How much a diagnostic matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiagnosticLevel {
    /// A coercion or a normalization: the finding was kept.
    Info,
    /// A dropped finding, or every finding dropped.
    Warning,
    /// The whole response was rejected.
    Error,
}

/// The diagnostic codes the parser emits. Codes are stable: teams count them.
pub mod codes {
    /// A string field had surrounding whitespace, which was trimmed.
    pub const COERCED_TRIM: &str = "coerced_trim";
    /// `\` in `file` became `/`.
    pub const COERCED_PATH_SEPARATOR: &str = "coerced_path_separator";
    /// An integral numeric string in `line`/`end_line` became an integer.
    pub const COERCED_LINE_STRING: &str = "coerced_line_string";
    /// A leading `./` was removed from `file` to match a changed file.
    pub const NORMALIZED_PATH_PREFIX: &str = "normalized_path_prefix";
    /// A field this schema minor does not know, ignored because the response declares a newer
    /// compatible minor.
    pub const IGNORED_UNKNOWN_FIELD: &str = "ignored_unknown_field";
    /// Two kept findings share an `id`; both are kept.
    pub const DUPLICATE_ID: &str = "duplicate_id";

    /// A required field is missing (top level: rejected; finding: dropped).
    pub const MISSING_FIELD: &str = "missing_field";
    /// A field has the wrong JSON type (top level: rejected; finding: dropped).
    pub const INVALID_TYPE: &str = "invalid_type";
    /// A required string is empty after trimming.
    pub const EMPTY_FIELD: &str = "empty_field";
    /// `severity`, `category` or `confidence` outside its enum.
    pub const INVALID_ENUM: &str = "invalid_enum";
    /// `line` or `end_line` below 1.
    pub const NON_POSITIVE_LINE: &str = "non_positive_line";
    /// `end_line` before `line`.
    pub const END_LINE_BEFORE_LINE: &str = "end_line_before_line";
    /// A field the schema does not define (`additionalProperties: false`).
    pub const UNKNOWN_FIELD: &str = "unknown_field";
    /// `file` is not one of the changed files.
    pub const FILE_NOT_IN_CHANGED_FILES: &str = "file_not_in_changed_files";
    /// Findings beyond [`super::MAX_FINDINGS`] were dropped.
    pub const TOO_MANY_FINDINGS: &str = "too_many_findings";
    /// Findings were received and every one was dropped.
    pub const ALL_FINDINGS_DROPPED: &str = "all_findings_dropped";

    /// A version is well formed but not accepted by this build.
    pub const INCOMPATIBLE_VERSION: &str = "incompatible_version";
    /// A version does not match its pattern.
    pub const INVALID_VERSION: &str = "invalid_version";
    /// The response is not one strict JSON document (or one ```json fence holding one).
    pub const INVALID_JSON: &str = "invalid_json";
    /// The JSON document is not an object.
    pub const INVALID_TOP_LEVEL: &str = "invalid_top_level";
    /// The response is larger than [`super::MAX_RESPONSE_BYTES`].
    pub const RESPONSE_TOO_LARGE: &str = "response_too_large";
}

/// One thing the parser noticed: a coercion, a dropped finding, or a reason for rejection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Diagnostic {
    pub level: DiagnosticLevel,
    /// One of [`codes`].
    pub code: String,
    /// The finding's position in the response's `findings` array, for per-finding diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_index: Option<usize>,
    /// The finding's `id` when it had a usable one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finding_id: Option<String>,
    /// The field concerned, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
}

/// Counts over one parsed response, for watching the dropped-finding rate during a rollout.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewStats {
    /// Elements in the response's `findings` array.
    pub received: usize,
    /// Findings that passed validation and reconciliation.
    pub kept: usize,
    /// Coercion diagnostics (`coerced_*`), over all findings and the top level.
    pub coerced: usize,
    /// Dropped findings, each counted once under the first reason it was dropped for.
    pub dropped_by_reason: BTreeMap<String, usize>,
}

impl ReviewStats {
    /// Total dropped findings.
    pub fn dropped(&self) -> usize {
        self.dropped_by_reason.values().sum()
    }
}

/// A validated reviewer response, with what the parser did to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewResult {
    pub schema_version: String,
    pub prompt_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The kept findings, in response order.
    pub findings: Vec<ReviewFinding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    /// Coercions, dropped findings and top-level warnings, in the order they happened.
    pub diagnostics: Vec<Diagnostic>,
    pub stats: ReviewStats,
}

/// Why a review produced no [`ReviewResult`].
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The whole response was rejected; the diagnostics (level `error`) say why.
    #[error("review response rejected: {}", summarize(diagnostics))]
    Rejected { diagnostics: Vec<Diagnostic> },
    /// The model could not be asked (transport, provider or budget failure); the message names
    /// the cause (the HTTP status and the provider's own message, when there was one).
    #[error("asking the model for a review: {0:#}")]
    Ask(anyhow::Error),
}

impl ReviewError {
    /// The diagnostics of a rejected response; empty for other errors.
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            ReviewError::Rejected { diagnostics } => diagnostics,
            ReviewError::Ask(_) => &[],
        }
    }
}

fn summarize(diagnostics: &[Diagnostic]) -> String {
    let mut codes: Vec<&str> = diagnostics.iter().map(|d| d.code.as_str()).collect();
    codes.dedup();
    codes.join(", ")
}

/// Shortens text echoed from a response into a diagnostic or an error.
pub(crate) fn shorten(text: &str) -> String {
    const LIMIT: usize = 64;
    if text.chars().count() <= LIMIT {
        text.to_owned()
    } else {
        let head: String = text.chars().take(LIMIT).collect();
        format!("{head}…")
    }
}

/// Converts the kept findings at or above `min_severity` into `code-review` findings, one per
/// review finding, in `per_file_findings` with the finding's file.
pub fn to_findings(result: &ReviewResult, min_severity: Severity) -> Findings {
    let per_file_findings = result
        .findings
        .iter()
        .filter(|finding| finding.severity >= min_severity)
        .map(|finding| Finding::CodeReview {
            file: Some(finding.file.clone()),
            finding: render_finding(finding),
        })
        .collect();
    Findings {
        per_file_findings,
        overall_findings: Vec::new(),
    }
}

/// The Markdown text of one finding: title, severity, category, line range, message, suggestion.
pub fn render_finding(finding: &ReviewFinding) -> String {
    let lines = match finding.end_line {
        Some(end) if end != finding.line => format!("lines {}-{}", finding.line, end),
        _ => format!("line {}", finding.line),
    };
    let mut facts = vec![
        format!("severity: {}", finding.severity),
        format!("category: {}", finding.category),
        format!("`{}` {lines}", finding.file),
    ];
    if let Some(confidence) = finding.confidence {
        facts.push(format!("confidence: {confidence}"));
    }
    if let Some(rule) = finding.rule_id.as_deref().filter(|rule| !rule.is_empty()) {
        facts.push(format!("rule: {rule}"));
    }
    let mut text = format!(
        "**{}** ({})\n\n{}",
        finding.title,
        facts.join(", "),
        finding.message
    );
    if let Some(suggestion) = finding.suggestion.as_deref().filter(|s| !s.is_empty()) {
        text.push_str("\n\n**Suggestion:** ");
        text.push_str(suggestion);
    }
    text
}

/// What `bork-ci review` prints on stdout (`--format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// The correctness-checker JSON: `code-review` findings (the default).
    #[default]
    Findings,
    /// The validated `ReviewResult`, with its diagnostics and stats.
    ReviewResult,
}

/// Stdout and exit code of `bork-ci review` under the correctness-checker contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckerOutput {
    /// JSON text, ending in a newline; empty when a `findings` review failed to run.
    pub stdout: String,
    /// 0: no finding at or above the minimum severity; 1: some; 2: the review failed to run
    /// (the model could not be asked, or its response was rejected).
    pub exit_code: i32,
}

/// Renders the outcome of a review as `bork-ci review` prints it.
///
/// With [`OutputFormat::ReviewResult`], a rejected response prints
/// `{"error": "...", "diagnostics": [...]}` so the rejection reasons can be counted too.
pub fn checker_output(
    outcome: &Result<ReviewResult, ReviewError>,
    min_severity: Severity,
    format: OutputFormat,
) -> CheckerOutput {
    let result = match outcome {
        Ok(result) => result,
        Err(error) => {
            // The checker contract wants JSON on stdout even when it failed to run: an error
            // object naming the cause (in both formats, so a failure never reads as a clean
            // review), its text escaped and free of secrets.
            let message = bork_ci_core::untrusted::inline(&bork_ci_core::secrets::redact(&error.to_string()));
            let stdout = to_json_line(&serde_json::json!({
                "error": message,
                "diagnostics": error.diagnostics(),
            }));
            return CheckerOutput { stdout, exit_code: 2 };
        }
    };
    let findings = to_findings(result, min_severity);
    let exit_code = if findings.is_empty() { 0 } else { 1 };
    let stdout = match format {
        OutputFormat::Findings => to_json_line(&findings),
        OutputFormat::ReviewResult => to_json_line(result),
    };
    CheckerOutput { stdout, exit_code }
}

fn to_json_line<T: Serialize + ?Sized>(value: &T) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(mut text) => {
            text.push('\n');
            text
        }
        // Serializing these types cannot fail: they hold only strings, numbers and maps with
        // string keys.
        Err(_) => String::new(),
    }
}

/// Reviews `changed` and `diff`: renders the prompt, asks the model through `ask` with the
/// system and user texts, and parses the answer against the changed paths.
pub async fn review<F, Fut>(
    changed: &[ChangedFile],
    diff: &str,
    ask: F,
    policy: &VersionPolicy,
) -> Result<ReviewResult, ReviewError>
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = anyhow::Result<String>>,
{
    let (system, user) = render_prompt(changed, diff);
    let answer = ask(system, user).await.map_err(ReviewError::Ask)?;
    let paths: Vec<String> = changed.iter().map(|file| file.path.clone()).collect();
    let result = parse(&answer, &paths, policy);
    match &result {
        Ok(result) => tracing::info!(
            received = result.stats.received,
            kept = result.stats.kept,
            coerced = result.stats.coerced,
            dropped = result.stats.dropped(),
            "review response parsed"
        ),
        Err(error) => tracing::warn!(%error, "review response rejected"),
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_order_and_text() {
        assert!(Severity::Critical > Severity::High);
        assert!(Severity::High > Severity::Medium);
        assert!(Severity::Medium > Severity::Low);
        assert!(Severity::Low > Severity::Info);
        for severity in Severity::ALL {
            assert_eq!(severity.as_str().parse::<Severity>(), Ok(severity));
            assert_eq!(
                serde_json::to_value(severity).ok(),
                Some(serde_json::Value::String(severity.to_string()))
            );
        }
        let error = "Medium".parse::<Severity>().err();
        assert_eq!(
            error.map(|e| e.to_string()),
            Some("`Medium` is not one of: critical, high, medium, low, info".to_owned())
        );
        assert!("".parse::<Severity>().is_err());
    }

    #[test]
    fn enums_round_trip() {
        for category in Category::ALL {
            assert_eq!(category.as_str().parse::<Category>(), Ok(category));
        }
        for confidence in Confidence::ALL {
            assert_eq!(confidence.as_str().parse::<Confidence>(), Ok(confidence));
        }
        assert!("tests".parse::<Category>().is_err());
    }

    #[test]
    fn rejected_error_names_its_codes() {
        let error = ReviewError::Rejected {
            diagnostics: vec![Diagnostic {
                level: DiagnosticLevel::Error,
                code: codes::INVALID_JSON.to_owned(),
                finding_index: None,
                finding_id: None,
                field: None,
                message: "x".to_owned(),
            }],
        };
        assert_eq!(error.to_string(), "review response rejected: invalid_json");
        assert_eq!(error.diagnostics().len(), 1);
    }

    fn sample_result(severities: &[Severity]) -> ReviewResult {
        ReviewResult {
            schema_version: SCHEMA_VERSION.to_owned(),
            prompt_version: PROMPT_VERSION.to_owned(),
            summary: None,
            findings: severities
                .iter()
                .enumerate()
                .map(|(n, severity)| ReviewFinding {
                    id: format!("F{n}"),
                    severity: *severity,
                    category: Category::Style,
                    title: "Naming".to_owned(),
                    file: "a.rs".to_owned(),
                    line: 1,
                    end_line: None,
                    message: "Rename it.".to_owned(),
                    suggestion: None,
                    confidence: None,
                    rule_id: None,
                })
                .collect(),
            meta: None,
            diagnostics: Vec::new(),
            stats: ReviewStats::default(),
        }
    }

    #[test]
    fn checker_output_follows_the_checker_contract() {
        let clean = Ok(sample_result(&[Severity::Low]));
        let output = checker_output(&clean, Severity::Medium, OutputFormat::Findings);
        assert_eq!(output.exit_code, 0);
        let parsed: Findings = serde_json::from_str(&output.stdout).expect("checker JSON");
        assert!(parsed.is_empty());

        let found = Ok(sample_result(&[Severity::Low, Severity::High]));
        let output = checker_output(&found, Severity::Medium, OutputFormat::Findings);
        assert_eq!(output.exit_code, 1);
        let parsed: Findings = serde_json::from_str(&output.stdout).expect("checker JSON");
        assert_eq!(parsed.len(), 1);

        let output = checker_output(&found, Severity::Medium, OutputFormat::ReviewResult);
        assert_eq!(output.exit_code, 1);
        let parsed: ReviewResult = serde_json::from_str(&output.stdout).expect("result JSON");
        assert_eq!(parsed.findings.len(), 2);

        let rejected = Err(ReviewError::Rejected {
            diagnostics: vec![Diagnostic {
                level: DiagnosticLevel::Error,
                code: codes::INCOMPATIBLE_VERSION.to_owned(),
                finding_index: None,
                finding_id: None,
                field: Some("prompt_version".to_owned()),
                message: "x".to_owned(),
            }],
        });
        let output = checker_output(&rejected, Severity::Medium, OutputFormat::Findings);
        assert_eq!(output.exit_code, 2);
        let parsed: serde_json::Value = serde_json::from_str(&output.stdout).expect("JSON");
        assert!(
            parsed["error"]
                .as_str()
                .is_some_and(|error| error.contains("rejected"))
        );
        assert!(
            serde_json::from_str::<Findings>(&output.stdout).is_err(),
            "an error is not empty findings"
        );
        let output = checker_output(&rejected, Severity::Medium, OutputFormat::ReviewResult);
        assert_eq!(output.exit_code, 2);
        let parsed: serde_json::Value = serde_json::from_str(&output.stdout).expect("JSON");
        assert_eq!(parsed["diagnostics"][0]["code"], "incompatible_version");
        let failed = Err(ReviewError::Ask(
            anyhow::anyhow!("openai model `m` answered HTTP 503 after 2 attempt(s): down")
                .context("asking the reviewer"),
        ));
        let output = checker_output(&failed, Severity::Info, OutputFormat::Findings);
        assert_eq!(output.exit_code, 2);
        let parsed: serde_json::Value = serde_json::from_str(&output.stdout).expect("JSON");
        assert_eq!(
            parsed["error"],
            "asking the model for a review: asking the reviewer: openai model `m` answered HTTP 503 after 2 attempt(s): down"
        );
    }
}
