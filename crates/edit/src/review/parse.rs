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
//!   rejecting the response or dropping the finding, as minor versions only add fields. Enum
//!   values a newer minor adds are still `invalid_enum`: this build cannot rank them.
//! - Versions are trimmed like every other string before their pattern is checked.
//! - An empty `findings` array is a valid, clean review: no `all_findings_dropped` warning.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::version::{self, VersionPolicy, VersionProblem};
use super::{
    Category, Confidence, Diagnostic, DiagnosticLevel, ReviewError, ReviewFinding, ReviewResult, ReviewStats,
    Severity, codes, shorten,
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

/// The schema sent to servers as the requested structured output: [`response_schema`] without
/// `pattern` keywords, which common grammar engines (llama.cpp's among them) reject or crash on.
/// The versions' patterns are checked by [`parse`] instead.
pub fn request_schema() -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                if map.get("type") == Some(&Value::String("string".into())) {
                    map.remove("pattern");
                }
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut schema = response_schema();
    strip(&mut schema);
    schema
}

const TOP_LEVEL_FIELDS: [&str; 5] = ["schema_version", "prompt_version", "summary", "findings", "meta"];

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
    let document = match bork_ci_core::strict_json::from_str(unfence(raw)) {
        Ok(value) => value,
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
    let Some(rest) = rest.strip_prefix('\n').or_else(|| rest.strip_prefix("\r\n")) else {
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
        (Some(schema_version), Some(prompt_version), Some(findings)) if errors.is_empty() => Ok(TopLevel {
            schema_version,
            prompt_version,
            summary,
            findings,
            meta,
            compat,
        }),
        _ => Err(ReviewError::Rejected { diagnostics: errors }),
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
    notes.push(DiagnosticLevel::Error, code, None, None, Some(field), message);
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
                    self.drop(codes::EMPTY_FIELD, Some(field), format!("`{field}` is empty"));
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
                self.drop(codes::INVALID_ENUM, Some(field), format!("`{field}`: {error}"));
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
fn validate_finding(index: usize, value: &Value, compat: bool, notes: &mut Notes) -> Option<ReviewFinding> {
    let Value::Object(object) = value else {
        notes.push(
            DiagnosticLevel::Warning,
            codes::INVALID_TYPE,
            Some(index),
            None,
            None,
            format!("finding dropped: it is {}, not an object", type_name(value)),
        );
        *notes.dropped.entry(codes::INVALID_TYPE.to_owned()).or_insert(0) += 1;
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

#[cfg(test)]
mod tests {
    use super::*;

    const CHANGED: [&str; 3] = ["src/a.rs", "docs/b.md", "./odd/c.rs"];

    fn changed() -> Vec<String> {
        CHANGED.iter().map(|path| (*path).to_owned()).collect()
    }

    fn finding() -> Value {
        json!({
            "id": "F1", "severity": "high", "category": "correctness", "title": "Off by one",
            "file": "src/a.rs", "line": 3, "message": "The loop stops one early."
        })
    }

    fn with(key: &str, value: Value) -> Value {
        let mut finding = finding();
        finding[key] = value;
        finding
    }

    fn without(key: &str) -> Value {
        let mut finding = finding();
        if let Some(object) = finding.as_object_mut() {
            object.remove(key);
        }
        finding
    }

    fn response(findings: Vec<Value>) -> String {
        json!({ "schema_version": "1.0", "prompt_version": "1.0.0", "findings": findings }).to_string()
    }

    fn codes_of(diagnostics: &[Diagnostic]) -> Vec<&str> {
        diagnostics.iter().map(|d| d.code.as_str()).collect()
    }

    fn strict() -> VersionPolicy {
        VersionPolicy::default()
    }

    /// One finding per row: whether it is kept, and every diagnostic code expected, in order.
    #[test]
    fn coerce_and_drop_rules() {
        let rows: Vec<(&str, Value, bool, Vec<&str>)> = vec![
            ("valid", finding(), true, vec![]),
            ("trim id", with("id", json!("  F1\t")), true, vec!["coerced_trim"]),
            (
                "trim enum",
                with("severity", json!(" high ")),
                true,
                vec!["coerced_trim"],
            ),
            (
                "backslashes",
                with("file", json!("src\\a.rs")),
                true,
                vec!["coerced_path_separator"],
            ),
            (
                "trim and backslashes",
                with("file", json!(" src\\a.rs ")),
                true,
                vec!["coerced_trim", "coerced_path_separator"],
            ),
            (
                "line string",
                with("line", json!("12")),
                true,
                vec!["coerced_line_string"],
            ),
            (
                "line padded string",
                with("line", json!(" 12 ")),
                true,
                vec!["coerced_line_string"],
            ),
            (
                "end_line string",
                with("end_line", json!("4")),
                true,
                vec!["coerced_line_string"],
            ),
            ("line 12.0 is an integer", with("line", json!(12.0)), true, vec![]),
            ("end_line equal", with("end_line", json!(3)), true, vec![]),
            (
                "optional fields",
                {
                    let mut f = finding();
                    f["end_line"] = json!(9);
                    f["suggestion"] = json!("Use <=.");
                    f["confidence"] = json!("medium");
                    f["rule_id"] = json!("R1");
                    f
                },
                true,
                vec![],
            ),
            (
                "empty suggestion kept",
                with("suggestion", json!("")),
                true,
                vec![],
            ),
            (
                "line 12.0 string",
                with("line", json!("12.0")),
                false,
                vec!["invalid_type"],
            ),
            (
                "line 12.5",
                with("line", json!(12.5)),
                false,
                vec!["invalid_type"],
            ),
            (
                "line +12",
                with("line", json!("+12")),
                false,
                vec!["invalid_type"],
            ),
            (
                "line words",
                with("line", json!("twelve")),
                false,
                vec!["invalid_type"],
            ),
            (
                "line empty string",
                with("line", json!("")),
                false,
                vec!["invalid_type"],
            ),
            (
                "line null",
                with("line", Value::Null),
                false,
                vec!["invalid_type"],
            ),
            (
                "line bool",
                with("line", json!(true)),
                false,
                vec!["invalid_type"],
            ),
            (
                "line huge",
                with("line", json!("99999999999999999999999")),
                false,
                vec!["coerced_line_string", "invalid_type"],
            ),
            (
                "line zero",
                with("line", json!(0)),
                false,
                vec!["non_positive_line"],
            ),
            (
                "line negative",
                with("line", json!(-3)),
                false,
                vec!["non_positive_line"],
            ),
            (
                "line negative string",
                with("line", json!("-3")),
                false,
                vec!["coerced_line_string", "non_positive_line"],
            ),
            (
                "end_line zero",
                with("end_line", json!(0)),
                false,
                vec!["non_positive_line"],
            ),
            (
                "end_line before line",
                with("end_line", json!(2)),
                false,
                vec!["end_line_before_line"],
            ),
            (
                "end_line null",
                with("end_line", Value::Null),
                false,
                vec!["invalid_type"],
            ),
            ("missing id", without("id"), false, vec!["missing_field"]),
            (
                "missing severity",
                without("severity"),
                false,
                vec!["missing_field"],
            ),
            (
                "missing category",
                without("category"),
                false,
                vec!["missing_field"],
            ),
            ("missing title", without("title"), false, vec!["missing_field"]),
            ("missing file", without("file"), false, vec!["missing_field"]),
            ("missing line", without("line"), false, vec!["missing_field"]),
            (
                "missing message",
                without("message"),
                false,
                vec!["missing_field"],
            ),
            (
                "empty title",
                with("title", json!("")),
                false,
                vec!["empty_field"],
            ),
            (
                "blank message",
                with("message", json!("   ")),
                false,
                vec!["coerced_trim", "empty_field"],
            ),
            ("empty file", with("file", json!("")), false, vec!["empty_field"]),
            (
                "title number",
                with("title", json!(7)),
                false,
                vec!["invalid_type"],
            ),
            (
                "severity unknown",
                with("severity", json!("urgent")),
                false,
                vec!["invalid_enum"],
            ),
            (
                "severity uppercase",
                with("severity", json!("HIGH")),
                false,
                vec!["invalid_enum"],
            ),
            (
                "severity number",
                with("severity", json!(1)),
                false,
                vec!["invalid_type"],
            ),
            (
                "category unknown",
                with("category", json!("bug")),
                false,
                vec!["invalid_enum"],
            ),
            (
                "confidence unknown",
                with("confidence", json!("certain")),
                false,
                vec!["invalid_enum"],
            ),
            (
                "confidence null",
                with("confidence", Value::Null),
                false,
                vec!["invalid_type"],
            ),
            (
                "suggestion number",
                with("suggestion", json!(5)),
                false,
                vec!["invalid_type"],
            ),
            (
                "rule_id array",
                with("rule_id", json!(["R1"])),
                false,
                vec!["invalid_type"],
            ),
            (
                "unknown field",
                with("fix", json!("x")),
                false,
                vec!["unknown_field"],
            ),
            (
                "two problems",
                {
                    let mut f = without("title");
                    f["severity"] = json!("severe");
                    f
                },
                false,
                vec!["invalid_enum", "missing_field"],
            ),
            ("not an object", json!("F1"), false, vec!["invalid_type"]),
            ("null finding", Value::Null, false, vec!["invalid_type"]),
            (
                "dot slash",
                with("file", json!("./src/a.rs")),
                true,
                vec!["normalized_path_prefix"],
            ),
            (
                "dot slash twice",
                with("file", json!("././src/a.rs")),
                true,
                vec!["normalized_path_prefix"],
            ),
            (
                "dot backslash",
                with("file", json!(".\\src\\a.rs")),
                true,
                vec!["coerced_path_separator", "normalized_path_prefix"],
            ),
            (
                "listed with dot slash",
                with("file", json!("odd/c.rs")),
                true,
                vec!["normalized_path_prefix"],
            ),
            (
                "listed with dot slash, exact",
                with("file", json!("./odd/c.rs")),
                true,
                vec![],
            ),
            (
                "not changed",
                with("file", json!("src/b.rs")),
                false,
                vec!["file_not_in_changed_files"],
            ),
            (
                "absolute",
                with("file", json!("/src/a.rs")),
                false,
                vec!["file_not_in_changed_files"],
            ),
            (
                "other case",
                with("file", json!("SRC/a.rs")),
                false,
                vec!["file_not_in_changed_files"],
            ),
            (
                "dot dot",
                with("file", json!("docs/../src/a.rs")),
                false,
                vec!["file_not_in_changed_files"],
            ),
        ];
        for (label, value, kept, expected) in rows {
            let result = parse(&response(vec![value]), &changed(), &strict())
                .unwrap_or_else(|error| panic!("{label}: rejected: {error}"));
            let mut expected = expected;
            if !kept {
                expected.push("all_findings_dropped");
            }
            assert_eq!(codes_of(&result.diagnostics), expected, "{label}");
            assert_eq!(result.findings.len(), usize::from(kept), "{label}");
            assert_eq!(result.stats.received, 1, "{label}");
            assert_eq!(result.stats.kept, usize::from(kept), "{label}");
            assert_eq!(result.stats.dropped(), usize::from(!kept), "{label}");
            for diagnostic in &result.diagnostics {
                if diagnostic.code != "all_findings_dropped" {
                    assert_eq!(diagnostic.finding_index, Some(0), "{label}");
                }
                let level = if diagnostic.code.starts_with("coerced_")
                    || diagnostic.code == "normalized_path_prefix"
                {
                    DiagnosticLevel::Info
                } else {
                    DiagnosticLevel::Warning
                };
                assert_eq!(diagnostic.level, level, "{label}: {}", diagnostic.code);
            }
        }
    }

    #[test]
    fn coerced_values() {
        let mut f = finding();
        f["id"] = json!(" F9 ");
        f["file"] = json!(".\\src\\a.rs");
        f["line"] = json!(" 12 ");
        f["end_line"] = json!("14");
        f["suggestion"] = json!("\n use a guard \n");
        let result = parse(&response(vec![f]), &changed(), &strict()).expect("parses");
        let kept = &result.findings[0];
        assert_eq!(kept.id, "F9");
        assert_eq!(kept.file, "src/a.rs");
        assert_eq!((kept.line, kept.end_line), (12, Some(14)));
        assert_eq!(kept.suggestion.as_deref(), Some("use a guard"));
        assert_eq!(result.stats.coerced, 5);
        assert!(
            result
                .diagnostics
                .iter()
                .all(|d| d.finding_id.as_deref() == Some("F9"))
        );

        let listed = parse(
            &response(vec![with("file", json!("odd/c.rs"))]),
            &changed(),
            &strict(),
        )
        .expect("parses");
        assert_eq!(listed.findings[0].file, "./odd/c.rs");
    }

    fn rejected(raw: &str, policy: &VersionPolicy) -> Vec<String> {
        match parse(raw, &changed(), policy) {
            Ok(result) => panic!("accepted {raw:.80}: {result:?}"),
            Err(ReviewError::Rejected { diagnostics }) => {
                assert!(diagnostics.iter().all(|d| d.level == DiagnosticLevel::Error));
                assert!(diagnostics.iter().all(|d| d.finding_index.is_none()));
                diagnostics.into_iter().map(|d| d.code).collect()
            }
            Err(other) => panic!("unexpected error {other}"),
        }
    }

    #[test]
    fn reject_rules() {
        let valid = response(vec![finding()]);
        let top = |value: Value| value.to_string();
        let rows: Vec<(&str, String, Vec<&str>)> = vec![
            ("empty", String::new(), vec!["invalid_json"]),
            ("prose", "Here are my findings.".to_owned(), vec!["invalid_json"]),
            ("prose then json", format!("Sure! {valid}"), vec!["invalid_json"]),
            ("trailing data", format!("{valid} xyz"), vec!["invalid_json"]),
            ("two documents", format!("{valid}{valid}"), vec!["invalid_json"]),
            ("truncated", valid[..valid.len() - 5].to_owned(), vec!["invalid_json"]),
            ("byte-order mark", format!("\u{feff}{valid}"), vec!["invalid_json"]),
            ("two fences", format!("```json\n{valid}\n```\n```json\n{valid}\n```"), vec!["invalid_json"]),
            ("prose and fence", format!("Result:\n```json\n{valid}\n```"), vec!["invalid_json"]),
            ("tilde fence", format!("~~~json\n{valid}\n~~~"), vec!["invalid_json"]),
            ("unclosed fence", format!("```json\n{valid}\n"), vec!["invalid_json"]),
            ("other language fence", format!("```js\n{valid}\n```"), vec!["invalid_json"]),
            ("duplicate top-level key",
                r#"{"schema_version":"1.0","schema_version":"1.0","prompt_version":"1.0.0","findings":[]}"#.to_owned(),
                vec!["invalid_json"]),
            ("duplicate finding key",
                r#"{"schema_version":"1.0","prompt_version":"1.0.0","findings":[{"id":"a","id":"b"}]}"#.to_owned(),
                vec!["invalid_json"]),
            ("escaped duplicate key",
                r#"{"schema_version":"1.0","prompt_version":"1.0.0","findings":[],"find\u0069ngs":[]}"#.to_owned(),
                vec!["invalid_json"]),
            ("lone surrogate",
                r#"{"schema_version":"1.0","prompt_version":"1.0.0","summary":"\ud800","findings":[]}"#.to_owned(),
                vec!["invalid_json"]),
            ("raw control character",
                "{\"schema_version\":\"1.0\",\"prompt_version\":\"1.0.0\",\"summary\":\"a\tb\",\"findings\":[]}".to_owned(),
                vec!["invalid_json"]),
            ("deep nesting", format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)), vec!["invalid_json"]),
            ("array top level", "[]".to_owned(), vec!["invalid_top_level"]),
            ("null top level", "null".to_owned(), vec!["invalid_top_level"]),
            ("string top level", "\"findings\"".to_owned(), vec!["invalid_top_level"]),
            ("missing schema_version", top(json!({"prompt_version":"1.0.0","findings":[]})), vec!["missing_field"]),
            ("missing prompt_version", top(json!({"schema_version":"1.0","findings":[]})), vec!["missing_field"]),
            ("missing findings", top(json!({"schema_version":"1.0","prompt_version":"1.0.0"})), vec!["missing_field"]),
            ("missing everything", "{}".to_owned(), vec!["missing_field", "missing_field", "missing_field"]),
            ("findings object", top(json!({"schema_version":"1.0","prompt_version":"1.0.0","findings":{}})), vec!["invalid_type"]),
            ("findings null", top(json!({"schema_version":"1.0","prompt_version":"1.0.0","findings":null})), vec!["invalid_type"]),
            ("schema_version number", top(json!({"schema_version":1.0,"prompt_version":"1.0.0","findings":[]})), vec!["invalid_type"]),
            ("prompt_version null", top(json!({"schema_version":"1.0","prompt_version":null,"findings":[]})), vec!["invalid_type"]),
            ("summary number", top(json!({"schema_version":"1.0","prompt_version":"1.0.0","summary":5,"findings":[]})), vec!["invalid_type"]),
            ("meta array", top(json!({"schema_version":"1.0","prompt_version":"1.0.0","meta":[],"findings":[]})), vec!["invalid_type"]),
            ("unknown top-level field", top(json!({"schema_version":"1.0","prompt_version":"1.0.0","findings":[],"verdict":"ok"})), vec!["unknown_field"]),
            ("schema_version malformed", top(json!({"schema_version":"1","prompt_version":"1.0.0","findings":[]})), vec!["invalid_version"]),
            ("schema_version with patch", top(json!({"schema_version":"1.0.0","prompt_version":"1.0.0","findings":[]})), vec!["invalid_version"]),
            ("prompt_version malformed", top(json!({"schema_version":"1.0","prompt_version":"v1.0.0","findings":[]})), vec!["invalid_version"]),
            ("prompt_version empty", top(json!({"schema_version":"1.0","prompt_version":"","findings":[]})), vec!["invalid_version"]),
            ("other schema major", top(json!({"schema_version":"2.0","prompt_version":"1.0.0","findings":[]})), vec!["incompatible_version"]),
            ("older schema major", top(json!({"schema_version":"0.9","prompt_version":"1.0.0","findings":[]})), vec!["incompatible_version"]),
            ("prompt patch drift, strict", top(json!({"schema_version":"1.0","prompt_version":"1.0.1","findings":[]})), vec!["incompatible_version"]),
            ("prompt minor drift", top(json!({"schema_version":"1.0","prompt_version":"1.1.0","findings":[]})), vec!["incompatible_version"]),
            ("prompt major drift", top(json!({"schema_version":"1.0","prompt_version":"2.0.0","findings":[]})), vec!["incompatible_version"]),
            ("both versions wrong", top(json!({"schema_version":"3.0","prompt_version":"0.1","findings":[]})), vec!["incompatible_version", "incompatible_version"]),
            ("versions before findings",
                top(json!({"schema_version":"2.0","prompt_version":"1.0.0","findings":[{"bogus":true}]})),
                vec!["incompatible_version"]),
            ("too large", " ".repeat(MAX_RESPONSE_BYTES + 1), vec!["response_too_large"]),
        ];
        for (label, raw, expected) in rows {
            assert_eq!(rejected(&raw, &strict()), expected, "{label}");
        }
    }

    #[test]
    fn accepted_wrappers() {
        let valid = response(vec![finding()]);
        for raw in [
            valid.clone(),
            format!("\n\t  {valid}\r\n  "),
            format!("```json\n{valid}\n```"),
            format!("  ```json  \r\n{valid}\r\n```\n"),
            format!(
                "```json\n{{\"schema_version\":\"1.0\",\"prompt_version\":\"1.0.0\",\"findings\":[{}]}}\n```",
                with("suggestion", json!("```rust\nfix()\n```"))
            ),
        ] {
            let result =
                parse(&raw, &changed(), &strict()).unwrap_or_else(|error| panic!("{raw:.60}: {error}"));
            assert_eq!(result.findings.len(), 1, "{raw:.60}");
        }
    }

    #[test]
    fn version_compatibility() {
        let drift = VersionPolicy {
            allow_prompt_patch_drift: true,
        };
        let accept = |schema: &str, prompt: &str, policy: &VersionPolicy| {
            let raw = json!({"schema_version": schema, "prompt_version": prompt, "findings": [finding()]});
            parse(&raw.to_string(), &changed(), policy)
        };
        assert!(accept("1.0", "1.0.0", &strict()).is_ok());
        assert!(accept("1.0", "1.0", &strict()).is_ok());
        assert!(accept("1.7", "1.0.0", &strict()).is_ok());
        assert!(accept("1.0", "1.0.3", &drift).is_ok());
        assert!(accept("1.0", "1.0.3", &strict()).is_err());
        assert!(accept("1.0", "1.1.0", &drift).is_err());
        assert!(accept("2.0", "1.0.0", &drift).is_err());
        let incompatible = accept("1.0", "1.0.3", &strict())
            .err()
            .map(|e| e.diagnostics().to_vec());
        let diagnostic = incompatible.as_ref().and_then(|d| d.first());
        assert_eq!(diagnostic.map(|d| d.code.as_str()), Some("incompatible_version"));
        assert_eq!(
            diagnostic.and_then(|d| d.field.as_deref()),
            Some("prompt_version")
        );

        // The versions are kept as declared (trimmed).
        let result = accept(" 1.7 ", "1.0.3", &drift).expect("accepted");
        assert_eq!(
            (result.schema_version.as_str(), result.prompt_version.as_str()),
            ("1.7", "1.0.3")
        );
        assert_eq!(codes_of(&result.diagnostics), vec!["coerced_trim"]);
    }

    #[test]
    fn newer_minor_reads_unknown_fields_in_compat_mode() {
        let raw = json!({
            "schema_version": "1.1", "prompt_version": "1.0.0", "findings": [with("cwe", json!("CWE-79"))],
            "model": "x"
        });
        let result = parse(&raw.to_string(), &changed(), &strict()).expect("accepted");
        assert_eq!(result.findings.len(), 1);
        assert_eq!(
            codes_of(&result.diagnostics),
            vec!["ignored_unknown_field", "ignored_unknown_field"]
        );
        assert_eq!(result.diagnostics[0].finding_index, None);
        assert_eq!(result.diagnostics[1].finding_index, Some(0));
    }

    #[test]
    fn partial_parse_keeps_the_valid_findings() {
        let raw = json!({
            "schema_version": "1.0", "prompt_version": "1.0.0", "summary": " Mostly fine. ",
            "meta": {"model": "m", "tokens": 12},
            "findings": [
                finding(),
                with("severity", json!("urgent")),
                with("file", json!("nope.rs")),
                with("id", json!("F4")),
                with("line", json!(0)),
            ]
        });
        let result = parse(&raw.to_string(), &changed(), &strict()).expect("accepted");
        let ids: Vec<&str> = result.findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(ids, vec!["F1", "F4"]);
        assert_eq!(result.summary.as_deref(), Some("Mostly fine."));
        assert_eq!(result.meta.as_ref().map(|m| m.len()), Some(2));
        let indexed: Vec<(&str, Option<usize>)> = result
            .diagnostics
            .iter()
            .map(|d| (d.code.as_str(), d.finding_index))
            .collect();
        // Finding validation runs for every finding before reconciliation.
        assert_eq!(
            indexed,
            vec![
                ("coerced_trim", None),
                ("invalid_enum", Some(1)),
                ("non_positive_line", Some(4)),
                ("file_not_in_changed_files", Some(2)),
            ]
        );
        let mut dropped = BTreeMap::new();
        dropped.insert("invalid_enum".to_owned(), 1);
        dropped.insert("non_positive_line".to_owned(), 1);
        dropped.insert("file_not_in_changed_files".to_owned(), 1);
        assert_eq!(
            result.stats,
            ReviewStats {
                received: 5,
                kept: 2,
                coerced: 1,
                dropped_by_reason: dropped
            }
        );
    }

    #[test]
    fn all_dropped_is_a_warning_not_an_error() {
        let result = parse(
            &response(vec![with("file", json!("x.rs")), without("message")]),
            &changed(),
            &strict(),
        )
        .expect("not rejected");
        assert!(result.findings.is_empty());
        let last = result.diagnostics.last().expect("diagnostics");
        assert_eq!(last.code, "all_findings_dropped");
        assert_eq!(last.level, DiagnosticLevel::Warning);
        assert_eq!(last.finding_index, None);
        assert_eq!(result.stats.dropped(), 2);

        let clean = parse(&response(vec![]), &changed(), &strict()).expect("clean");
        assert!(clean.findings.is_empty() && clean.diagnostics.is_empty());

        let nothing_changed = parse(&response(vec![finding()]), &[], &strict()).expect("accepted");
        assert_eq!(
            codes_of(&nothing_changed.diagnostics),
            vec!["file_not_in_changed_files", "all_findings_dropped"]
        );
    }

    #[test]
    fn findings_past_the_cap_are_dropped() {
        let findings: Vec<Value> = (0..MAX_FINDINGS + 3)
            .map(|n| with("id", json!(format!("F{n}"))))
            .collect();
        let result = parse(&response(findings), &changed(), &strict()).expect("accepted");
        assert_eq!(result.findings.len(), MAX_FINDINGS);
        assert_eq!(codes_of(&result.diagnostics), vec!["too_many_findings"]);
        assert_eq!(result.stats.dropped_by_reason.get("too_many_findings"), Some(&3));
    }

    #[test]
    fn duplicate_ids_are_noted_and_kept() {
        let result = parse(&response(vec![finding(), finding()]), &changed(), &strict()).expect("accepted");
        assert_eq!(result.findings.len(), 2);
        assert_eq!(codes_of(&result.diagnostics), vec!["duplicate_id"]);
    }

    #[test]
    fn diagnostics_do_not_echo_long_text() {
        let long = "x".repeat(10_000);
        let result = parse(
            &response(vec![with("file", json!(long)), with(&long, json!(1))]),
            &changed(),
            &strict(),
        )
        .expect("accepted");
        assert!(
            result.diagnostics.iter().all(|d| d.message.len() < 300),
            "{:?}",
            result.diagnostics
        );
    }

    #[test]
    fn the_schema_sent_to_servers_has_no_pattern_and_the_parser_checks_it() {
        let sent = request_schema().to_string();
        assert!(!sent.contains("pattern"), "{sent}");
        assert!(response_schema().to_string().contains("pattern"));
        let bad = response(vec![]).replacen("\"1.0\"", "\"1.0-beta\"", 1);
        let error = parse(&bad, &changed(), &strict()).expect_err("pattern checked");
        assert!(
            error
                .diagnostics()
                .iter()
                .any(|d| d.code == codes::INVALID_VERSION),
            "{error:?}"
        );
    }

    #[test]
    fn schema_is_the_canonical_one() {
        let schema = response_schema();
        assert_eq!(
            schema["required"],
            json!(["schema_version", "prompt_version", "findings"])
        );
        assert_eq!(schema["additionalProperties"], json!(false));
        let items = &schema["properties"]["findings"]["items"];
        assert_eq!(items["additionalProperties"], json!(false));
        assert_eq!(
            items["required"],
            json!(["id", "severity", "category", "title", "file", "line", "message"])
        );
        assert_eq!(
            items["properties"].as_object().map(|p| p.len()),
            Some(FINDING_FIELDS.len())
        );
        assert_eq!(
            schema["properties"].as_object().map(|p| p.len()),
            Some(TOP_LEVEL_FIELDS.len())
        );
    }

    #[test]
    fn result_serializes_with_diagnostics() {
        let result =
            parse(&response(vec![with("line", json!("3"))]), &changed(), &strict()).expect("accepted");
        let value = serde_json::to_value(&result).expect("serializes");
        assert_eq!(value["diagnostics"][0]["code"], json!("coerced_line_string"));
        assert_eq!(value["diagnostics"][0]["level"], json!("info"));
        assert_eq!(value["findings"][0]["line"], json!(3));
        assert_eq!(value["stats"]["coerced"], json!(1));
        let back: ReviewResult = serde_json::from_value(value).expect("round trip");
        assert_eq!(back, result);
    }
}
