//! The `ReviewResult` parser: raw model text → validated [`ReviewResult`] with diagnostics.
//!
//! It runs the contract's four steps in order: (1) parse one strict JSON document, (2) validate
//! the top level, versions included, and reject the whole response on any problem there,
//! (3) validate each finding, applying only the safe coercions and dropping invalid findings one
//! by one, (4) reconcile each remaining finding's `file` with the changed files. It does no I/O.
//!
//! Pinned choices where the contract is silent:
//! - Accepted wrappers: surrounding JSON whitespace, or exactly one ```` ```json ```` fence that
//!   is the whole response. A byte-order mark, prose, a second document or `~~~` fences are
//!   rejected as `invalid_json`. Duplicate object keys (after unescaping) are rejected at every
//!   level, since serde would silently keep the last one.
//! - `line`/`end_line`: a JSON integer, a JSON number with no fractional part (`12.0`, which JSON
//!   Schema counts as an integer), or a string of optional surrounding whitespace around
//!   `-?[0-9]+` (`"12"`, `" 12 "`, coerced, `coerced_line_string`). `"12.0"`, `"+12"`, `"0x0c"`,
//!   `12.5` and `null` are `invalid_type`; negative and zero values are `non_positive_line`.
//! - Enum values must be the exact lowercase spelling after trimming; `"HIGH"` is `invalid_enum`.
//! - `null` for an optional field is `invalid_type` (the schema has no nullable fields).
//! - A response whose `schema_version` is a newer minor than ours is read in compat mode: fields
//!   this build does not know are ignored with an `ignored_unknown_field` note instead of
//!   rejecting the response or dropping the finding, as minor versions only add fields.
//! - Versions are trimmed like every other string before their pattern is checked.
//! - An empty `findings` array is a valid, clean review: no `all_findings_dropped` warning.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value, json};

use super::version::{self, VersionPolicy, VersionProblem};
use super::{
    Category, Confidence, Diagnostic, DiagnosticLevel, ReviewError, ReviewFinding, ReviewResult,
    ReviewStats, Severity, codes, shorten,
};

/// Responses larger than this are rejected before parsing (`response_too_large`).
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// At most this many findings are validated; the rest are dropped (`too_many_findings`).
pub const MAX_FINDINGS: usize = 500;

/// The canonical `ReviewResult` JSON schema, for requesting structured output.
pub fn response_schema() -> Value {
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["schema_version", "prompt_version", "findings"],
        "properties": {
            "schema_version": { "type": "string", "pattern": "^[0-9]+\\.[0-9]+$" },
            "prompt_version": { "type": "string", "pattern": "^[0-9]+\\.[0-9]+(\\.[0-9]+)?$" },
            "summary": { "type": "string" },
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["id", "severity", "category", "title", "file", "line", "message"],
                    "properties": {
                        "id": { "type": "string", "minLength": 1 },
                        "severity": {
                            "type": "string",
                            "enum": ["critical", "high", "medium", "low", "info"]
                        },
                        "category": {
                            "type": "string",
                            "enum": ["correctness", "security", "performance", "reliability",
                                     "maintainability", "style", "test"]
                        },
                        "title": { "type": "string", "minLength": 1 },
                        "file": { "type": "string", "minLength": 1 },
                        "line": { "type": "integer", "minimum": 1 },
                        "end_line": { "type": "integer", "minimum": 1 },
                        "message": { "type": "string", "minLength": 1 },
                        "suggestion": { "type": "string" },
                        "confidence": { "type": "string", "enum": ["high", "medium", "low"] },
                        "rule_id": { "type": "string" }
                    }
                }
            },
            "meta": { "type": "object", "additionalProperties": true }
        }
    })
}

const TOP_LEVEL_FIELDS: [&str; 5] = [
    "schema_version",
    "prompt_version",
    "summary",
    "findings",
    "meta",
];

const FINDING_FIELDS: [&str; 11] = [
    "id",
    "severity",
    "category",
    "title",
    "file",
    "line",
    "end_line",
    "message",
    "suggestion",
    "confidence",
    "rule_id",
];

/// Parses and validates one reviewer response against the paths under review.
///
/// `Err(ReviewError::Rejected)` when the response as a whole is unusable (not JSON, bad top
/// level, incompatible versions); otherwise a result whose findings are those that passed every
/// check, possibly none, with a diagnostic for each coercion and each dropped finding.
pub fn parse(
    raw: &str,
    changed_files: &[String],
    policy: &VersionPolicy,
) -> Result<ReviewResult, ReviewError> {
    // Step 1: one strict JSON document.
    if raw.len() > MAX_RESPONSE_BYTES {
        return Err(reject(
            codes::RESPONSE_TOO_LARGE,
            None,
            format!(
                "response is {} bytes, more than the {MAX_RESPONSE_BYTES}-byte limit",
                raw.len()
            ),
        ));
    }
    let document = match serde_json::from_str::<StrictValue>(unfence(raw)) {
        Ok(StrictValue(value)) => value,
        Err(error) => {
            return Err(reject(
                codes::INVALID_JSON,
                None,
                format!("response is not one strict JSON document: {error}"),
            ));
        }
    };

    // Step 2: the top level, versions before findings.
    let Value::Object(top) = document else {
        return Err(reject(
            codes::INVALID_TOP_LEVEL,
            None,
            format!("top level is {}, not an object", type_name(&document)),
        ));
    };
    let mut notes = Notes::default();
    let top = validate_top_level(top, policy, &mut notes)?;

    // Step 3: each finding on its own.
    let received = top.findings.len();
    let mut candidates = Vec::new();
    for (index, value) in top.findings.iter().enumerate().take(MAX_FINDINGS) {
        if let Some(finding) = validate_finding(index, value, top.compat, &mut notes) {
            candidates.push((index, finding));
        }
    }
    if received > MAX_FINDINGS {
        let extra = received - MAX_FINDINGS;
        notes.push(
            DiagnosticLevel::Warning,
            codes::TOO_MANY_FINDINGS,
            None,
            None,
            None,
            format!("{extra} findings beyond the first {MAX_FINDINGS} were dropped"),
        );
        *notes
            .dropped
            .entry(codes::TOO_MANY_FINDINGS.to_owned())
            .or_insert(0) += extra;
    }

    // Step 4: reconcile files with the changed files.
    let findings = reconcile(candidates, changed_files, &mut notes);

    if received > 0 && findings.is_empty() {
        notes.push(
            DiagnosticLevel::Warning,
            codes::ALL_FINDINGS_DROPPED,
            None,
            None,
            None,
            format!("all {received} findings were dropped"),
        );
    }
    let mut seen = HashSet::new();
    for finding in &findings {
        if !seen.insert(finding.id.as_str()) {
            notes.push(
                DiagnosticLevel::Info,
                codes::DUPLICATE_ID,
                None,
                Some(finding.id.clone()),
                Some("id"),
                "another kept finding has the same id".to_owned(),
            );
        }
    }

    let stats = ReviewStats {
        received,
        kept: findings.len(),
        coerced: notes.coerced,
        dropped_by_reason: notes.dropped,
    };
    Ok(ReviewResult {
        schema_version: top.schema_version,
        prompt_version: top.prompt_version,
        summary: top.summary,
        findings,
        meta: top.meta,
        diagnostics: notes.diagnostics,
        stats,
    })
}

/// The validated top level, findings still raw.
struct TopLevel {
    schema_version: String,
    prompt_version: String,
    summary: Option<String>,
    findings: Vec<Value>,
    meta: Option<Map<String, Value>>,
    /// The response declares a newer schema minor: unknown fields are ignored, not fatal.
    compat: bool,
}

/// Diagnostics and counters gathered while parsing.
#[derive(Default)]
struct Notes {
    diagnostics: Vec<Diagnostic>,
    coerced: usize,
    dropped: BTreeMap<String, usize>,
}

impl Notes {
    fn push(
        &mut self,
        level: DiagnosticLevel,
        code: &str,
        finding_index: Option<usize>,
        finding_id: Option<String>,
        field: Option<&str>,
        message: String,
    ) {
        if code.starts_with("coerced_") {
            self.coerced += 1;
        }
        self.diagnostics.push(Diagnostic {
            level,
            code: code.to_owned(),
            finding_index,
            finding_id,
            field: field.map(str::to_owned),
            message,
        });
    }

    fn errors(&self) -> Vec<Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.level == DiagnosticLevel::Error)
            .cloned()
            .collect()
    }
}

fn reject(code: &str, field: Option<&str>, message: String) -> ReviewError {
    ReviewError::Rejected {
        diagnostics: vec![Diagnostic {
            level: DiagnosticLevel::Error,
            code: code.to_owned(),
            finding_index: None,
            finding_id: None,
            field: field.map(str::to_owned),
            message,
        }],
    }
}

/// Returns the JSON inside a response that is exactly one ```` ```json ```` fence, or the
/// response itself otherwise (which then fails to parse if it is fenced any other way).
fn unfence(raw: &str) -> &str {
    let json_whitespace = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    let trimmed = raw.trim_matches(json_whitespace);
    let Some(rest) = trimmed.strip_prefix("```json") else {
        return raw;
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    let Some(rest) = rest
        .strip_prefix('\n')
        .or_else(|| rest.strip_prefix("\r\n"))
    else {
        return raw;
    };
    match rest.strip_suffix("```") {
        Some(inner) if inner.ends_with('\n') => inner,
        _ => raw,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn validate_top_level(
    mut top: Map<String, Value>,
    policy: &VersionPolicy,
    notes: &mut Notes,
) -> Result<TopLevel, ReviewError> {
    let error = DiagnosticLevel::Error;
    let schema_present = top.contains_key("schema_version");
    let prompt_present = top.contains_key("prompt_version");
    let schema_version = top_string("schema_version", &mut top, notes);
    let prompt_version = top_string("prompt_version", &mut top, notes);
    let summary = top_string("summary", &mut top, notes);

    for (name, present) in [
        ("schema_version", schema_present),
        ("prompt_version", prompt_present),
        ("findings", top.contains_key("findings")),
    ] {
        if !present {
            notes.push(
                error,
                codes::MISSING_FIELD,
                None,
                None,
                Some(name),
                format!("required field `{name}` is missing"),
            );
        }
    }

    // Versions are checked before anything about findings is consumed.
    let mut compat = false;
    if let Some(text) = &schema_version {
        match version::check_schema(text) {
            Ok(newer) => compat = newer,
            Err(problem) => version_problem("schema_version", text, problem, notes),
        }
    }
    if let Some(text) = &prompt_version
        && let Err(problem) = version::check_prompt(text, policy)
    {
        version_problem("prompt_version", text, problem, notes);
    }

    let findings = match top.remove("findings") {
        None => None,
        Some(Value::Array(items)) => Some(items),
        Some(other) => {
            notes.push(
                error,
                codes::INVALID_TYPE,
                None,
                None,
                Some("findings"),
                format!("`findings` is {}, not an array", type_name(&other)),
            );
            None
        }
    };
    let meta = match top.remove("meta") {
        None => None,
        Some(Value::Object(map)) => Some(map),
        Some(other) => {
            notes.push(
                error,
                codes::INVALID_TYPE,
                None,
                None,
                Some("meta"),
                format!("`meta` is {}, not an object", type_name(&other)),
            );
            None
        }
    };

    // What is left is unknown; only the five schema fields were removed above.
    for name in top.keys() {
        debug_assert!(!TOP_LEVEL_FIELDS.contains(&name.as_str()));
        if compat {
            notes.push(
                DiagnosticLevel::Info,
                codes::IGNORED_UNKNOWN_FIELD,
                None,
                None,
                Some(&shorten(name)),
                format!(
                    "unknown top-level field `{}` ignored (newer schema minor)",
                    shorten(name)
                ),
            );
        } else {
            notes.push(
                error,
                codes::UNKNOWN_FIELD,
                None,
                None,
                Some(&shorten(name)),
                format!("unknown top-level field `{}`", shorten(name)),
            );
        }
    }

    let errors = notes.errors();
    match (schema_version, prompt_version, findings) {
        (Some(schema_version), Some(prompt_version), Some(findings)) if errors.is_empty() => {
            Ok(TopLevel {
                schema_version,
                prompt_version,
                summary,
                findings,
                meta,
                compat,
            })
        }
        _ => Err(ReviewError::Rejected {
            diagnostics: errors,
        }),
    }
}

/// Removes a top-level string field, trimmed; a non-string is an `invalid_type` error.
fn top_string(name: &str, top: &mut Map<String, Value>, notes: &mut Notes) -> Option<String> {
    match top.remove(name)? {
        Value::String(text) => Some(trim_noting(text, None, None, name, notes)),
        other => {
            notes.push(
                DiagnosticLevel::Error,
                codes::INVALID_TYPE,
                None,
                None,
                Some(name),
                format!("`{name}` is {}, not a string", type_name(&other)),
            );
            None
        }
    }
}

fn version_problem(field: &str, text: &str, problem: VersionProblem, notes: &mut Notes) {
    let (code, message) = match problem {
        VersionProblem::Malformed => (
            codes::INVALID_VERSION,
            format!("`{field}` `{}` does not match its pattern", shorten(text)),
        ),
        VersionProblem::Incompatible(why) => (codes::INCOMPATIBLE_VERSION, why),
    };
    notes.push(
        DiagnosticLevel::Error,
        code,
        None,
        None,
        Some(field),
        message,
    );
}

/// Trims a string field, noting the coercion when it changed anything.
fn trim_noting(
    text: String,
    index: Option<usize>,
    id: Option<&str>,
    field: &str,
    notes: &mut Notes,
) -> String {
    let trimmed = text.trim();
    if trimmed.len() == text.len() {
        return text;
    }
    notes.push(
        DiagnosticLevel::Info,
        codes::COERCED_TRIM,
        index,
        id.map(str::to_owned),
        Some(field),
        format!("surrounding whitespace trimmed from `{field}`"),
    );
    trimmed.to_owned()
}

/// Per-finding validation state: the diagnostics go to `notes`, the first drop reason is kept.
struct FindingCheck<'a> {
    index: usize,
    id: Option<String>,
    object: &'a Map<String, Value>,
    notes: &'a mut Notes,
    drop_reason: Option<&'static str>,
}

impl FindingCheck<'_> {
    fn drop(&mut self, code: &'static str, field: Option<&str>, message: String) {
        self.drop_reason.get_or_insert(code);
        self.notes.push(
            DiagnosticLevel::Warning,
            code,
            Some(self.index),
            self.id.clone(),
            field,
            format!("finding dropped: {message}"),
        );
    }

    fn note(&mut self, code: &'static str, field: &str, message: String) {
        self.notes.push(
            DiagnosticLevel::Info,
            code,
            Some(self.index),
            self.id.clone(),
            Some(field),
            message,
        );
    }

    /// A string field, trimmed; `None` (and a drop) when missing, not a string, or, when
    /// `required`, empty after trimming. `Ok(None)` for an absent optional field.
    fn string(&mut self, field: &'static str, required: bool) -> Result<Option<String>, ()> {
        match self.object.get(field) {
            None if required => {
                self.drop(
                    codes::MISSING_FIELD,
                    Some(field),
                    format!("required field `{field}` is missing"),
                );
                Err(())
            }
            None => Ok(None),
            Some(Value::String(text)) => {
                let text = trim_noting(
                    text.clone(),
                    Some(self.index),
                    self.id.as_deref(),
                    field,
                    self.notes,
                );
                if required && text.is_empty() {
                    self.drop(
                        codes::EMPTY_FIELD,
                        Some(field),
                        format!("`{field}` is empty"),
                    );
                    return Err(());
                }
                Ok(Some(text))
            }
            Some(other) => {
                let kind = type_name(other);
                self.drop(
                    codes::INVALID_TYPE,
                    Some(field),
                    format!("`{field}` is {kind}, not a string"),
                );
                Err(())
            }
        }
    }

    /// An enum field: a string holding exactly one of the schema's spellings.
    fn enumerated<T: std::str::FromStr<Err = super::UnknownVariant>>(
        &mut self,
        field: &'static str,
        required: bool,
    ) -> Result<Option<T>, ()> {
        let Some(text) = self.string(field, required)? else {
            return Ok(None);
        };
        match text.parse::<T>() {
            Ok(value) => Ok(Some(value)),
            Err(error) => {
                self.drop(
                    codes::INVALID_ENUM,
                    Some(field),
                    format!("`{field}`: {error}"),
                );
                Err(())
            }
        }
    }

    /// A line number: positive integer, or an integral numeric string (coerced).
    fn line(&mut self, field: &'static str, required: bool) -> Result<Option<u64>, ()> {
        let value = match self.object.get(field) {
            None if required => {
                self.drop(
                    codes::MISSING_FIELD,
                    Some(field),
                    format!("required field `{field}` is missing"),
                );
                return Err(());
            }
            None => return Ok(None),
            Some(value) => value,
        };
        let number: Option<i128> = match value {
            Value::Number(number) => {
                if let Some(unsigned) = number.as_u64() {
                    Some(i128::from(unsigned))
                } else if let Some(signed) = number.as_i64() {
                    Some(i128::from(signed))
                } else {
                    // A float: an integer only when it has no fractional part and is exact.
                    number
                        .as_f64()
                        .filter(|float| float.fract() == 0.0 && float.abs() <= 9.0e15)
                        .map(|float| float as i128)
                }
            }
            Value::String(text) => {
                let trimmed = text.trim();
                let digits = trimmed.strip_prefix('-').unwrap_or(trimmed);
                let integral = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                let parsed = if integral {
                    trimmed.parse::<i128>().ok()
                } else {
                    None
                };
                if parsed.is_some() {
                    self.note(
                        codes::COERCED_LINE_STRING,
                        field,
                        format!("`{field}` string `{}` read as an integer", shorten(text)),
                    );
                }
                parsed
            }
            _ => None,
        };
        match number {
            None => {
                let kind = match value {
                    Value::String(text) => format!("the non-integral string `{}`", shorten(text)),
                    other => type_name(other).to_owned(),
                };
                self.drop(
                    codes::INVALID_TYPE,
                    Some(field),
                    format!("`{field}` is {kind}, not an integer"),
                );
                Err(())
            }
            Some(number) if number < 1 => {
                self.drop(
                    codes::NON_POSITIVE_LINE,
                    Some(field),
                    format!("`{field}` is {number}, not positive"),
                );
                Err(())
            }
            Some(number) => match u64::try_from(number) {
                Ok(line) => Ok(Some(line)),
                Err(_) => {
                    self.drop(
                        codes::INVALID_TYPE,
                        Some(field),
                        format!("`{field}` is out of range"),
                    );
                    Err(())
                }
            },
        }
    }
}

/// Validates one element of `findings`; `None` when it is dropped.
fn validate_finding(
    index: usize,
    value: &Value,
    compat: bool,
    notes: &mut Notes,
) -> Option<ReviewFinding> {
    let Value::Object(object) = value else {
        notes.push(
            DiagnosticLevel::Warning,
            codes::INVALID_TYPE,
            Some(index),
            None,
            None,
            format!("finding dropped: it is {}, not an object", type_name(value)),
        );
        *notes
            .dropped
            .entry(codes::INVALID_TYPE.to_owned())
            .or_insert(0) += 1;
        return None;
    };
    // The id labels every diagnostic of this finding, so read it (quietly) first.
    let id = match object.get("id") {
        Some(Value::String(text)) if !text.trim().is_empty() => Some(shorten(text.trim())),
        _ => None,
    };
    let mut check = FindingCheck {
        index,
        id,
        object,
        notes,
        drop_reason: None,
    };

    let id = check.string("id", true);
    let severity = check.enumerated::<Severity>("severity", true);
    let category = check.enumerated::<Category>("category", true);
    let title = check.string("title", true);
    let file = check.string("file", true).map(|file| {
        file.map(|file| {
            if file.contains('\\') {
                check.note(
                    codes::COERCED_PATH_SEPARATOR,
                    "file",
                    "`\\` in `file` replaced by `/`".to_owned(),
                );
                file.replace('\\', "/")
            } else {
                file
            }
        })
    });
    let line = check.line("line", true);
    let end_line = check.line("end_line", false);
    let message = check.string("message", true);
    let suggestion = check.string("suggestion", false);
    let confidence = check.enumerated::<Confidence>("confidence", false);
    let rule_id = check.string("rule_id", false);

    let unknown: Vec<String> = object
        .keys()
        .filter(|key| !FINDING_FIELDS.contains(&key.as_str()))
        .map(|key| shorten(key))
        .collect();
    for name in unknown {
        if compat {
            check.note(
                codes::IGNORED_UNKNOWN_FIELD,
                &name,
                format!("unknown field `{name}` ignored (newer schema minor)"),
            );
        } else {
            check.drop(
                codes::UNKNOWN_FIELD,
                Some(&name),
                format!("unknown field `{name}`"),
            );
        }
    }

    if let (Ok(Some(line)), Ok(Some(end_line))) = (&line, &end_line)
        && end_line < line
    {
        check.drop(
            codes::END_LINE_BEFORE_LINE,
            Some("end_line"),
            format!("`end_line` {end_line} is before `line` {line}"),
        );
    }

    if let Some(reason) = check.drop_reason {
        *check.notes.dropped.entry(reason.to_owned()).or_insert(0) += 1;
        return None;
    }
    Some(ReviewFinding {
        id: id.ok()??,
        severity: severity.ok()??,
        category: category.ok()??,
        title: title.ok()??,
        file: file.ok()??,
        line: line.ok()??,
        end_line: end_line.ok()?,
        message: message.ok()??,
        suggestion: suggestion.ok()?,
        confidence: confidence.ok()?,
        rule_id: rule_id.ok()?,
    })
}

/// Strips every leading `./` from a path.
fn strip_dot_slash(mut path: &str) -> &str {
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    path
}

/// Keeps the findings whose `file` names a changed file, exactly or after removing a leading
/// `./`; the kept finding carries the changed file's own spelling.
fn reconcile(
    candidates: Vec<(usize, ReviewFinding)>,
    changed_files: &[String],
    notes: &mut Notes,
) -> Vec<ReviewFinding> {
    let exact: HashSet<&str> = changed_files.iter().map(String::as_str).collect();
    let normalized: HashMap<&str, &str> = changed_files
        .iter()
        .map(|path| (strip_dot_slash(path), path.as_str()))
        .collect();
    let mut kept = Vec::with_capacity(candidates.len());
    for (index, mut finding) in candidates {
        if exact.contains(finding.file.as_str()) {
            kept.push(finding);
            continue;
        }
        match normalized.get(strip_dot_slash(&finding.file)) {
            Some(path) => {
                notes.push(
                    DiagnosticLevel::Info,
                    codes::NORMALIZED_PATH_PREFIX,
                    Some(index),
                    Some(finding.id.clone()),
                    Some("file"),
                    format!("`{}` matched changed file `{path}`", shorten(&finding.file)),
                );
                finding.file = (*path).to_owned();
                kept.push(finding);
            }
            None => {
                notes.push(
                    DiagnosticLevel::Warning,
                    codes::FILE_NOT_IN_CHANGED_FILES,
                    Some(index),
                    Some(finding.id.clone()),
                    Some("file"),
                    format!(
                        "finding dropped: `{}` is not one of the changed files",
                        shorten(&finding.file)
                    ),
                );
                *notes
                    .dropped
                    .entry(codes::FILE_NOT_IN_CHANGED_FILES.to_owned())
                    .or_insert(0) += 1;
            }
        }
    }
    kept
}

/// A JSON value whose objects never had duplicate keys (compared after unescaping).
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Value, E> {
        Ok(Value::from(value))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number is not finite"))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(de::Error::custom(format_args!(
                    "duplicate key `{}`",
                    shorten(&key)
                )));
            }
            let StrictValue(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}
