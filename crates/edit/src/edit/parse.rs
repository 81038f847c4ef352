//! Parsing the model's answer into an [`EditPlan`].
//!
//! Owns the answer format of the edit-loop spec, strictly: one JSON object with the optional
//! keys `create-or-update` (an object from path to contents string) and `delete` (an array of
//! paths). Anything else is a [`ParseError`] whose message can be sent back to the model. The
//! answer may be wrapped in exactly one Markdown fence (```` ```json ```` or ```` ``` ````)
//! with nothing but whitespace around it. A leading byte-order mark is rejected.
//!
//! serde's maps keep the last of two equal keys without a word, so what a reviewer reads and
//! what is written could differ; this parser walks the object itself and rejects duplicates at
//! every level, after unescaping. Paths are not validated here (that is `edit::path`), but two
//! paths that one filesystem or another would treat as the same file (NFC, case) are rejected,
//! since the answer is then ambiguous. Pure: no I/O.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::path::collision_key;

/// The edits a model asked for, in the order of its answer. Paths are raw, as sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EditPlan {
    /// Files to create or replace.
    pub writes: Vec<ProposedWrite>,
    /// Files to delete.
    pub deletes: Vec<String>,
}

impl EditPlan {
    /// A plan from (path, contents) writes and paths to delete, as given (no validation).
    pub fn from_pairs(writes: &[(&str, &str)], deletes: &[&str]) -> EditPlan {
        EditPlan {
            writes: writes
                .iter()
                .map(|(path, contents)| ProposedWrite {
                    path: (*path).to_owned(),
                    contents: (*contents).to_owned(),
                })
                .collect(),
            deletes: deletes.iter().map(|path| (*path).to_owned()).collect(),
        }
    }

    /// Whether the plan asks for nothing.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.deletes.is_empty()
    }
}

/// One file the model wants to exist with the given contents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ProposedWrite {
    /// The raw path.
    pub path: String,
    /// The full new contents.
    pub contents: String,
}

/// Size limits applied while parsing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ParseLimits {
    /// Largest answer accepted, in bytes (checked before parsing).
    pub max_answer_bytes: usize,
    /// Most entries (`create-or-update` plus `delete`) in one answer.
    pub max_files: usize,
    /// Largest contents of one file, in bytes.
    pub max_file_bytes: usize,
}

impl Default for ParseLimits {
    fn default() -> Self {
        Self {
            max_answer_bytes: 8 * 1024 * 1024,
            max_files: 1000,
            max_file_bytes: 2 * 1024 * 1024,
        }
    }
}

/// Why an answer was not accepted. `Display` is written for the model, to be sent back to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The answer is empty or whitespace.
    #[error("the answer is empty; reply with one JSON object")]
    Empty,
    /// Larger than `max_answer_bytes`.
    #[error("the answer is {bytes} bytes; the limit is {limit} bytes, so propose fewer or smaller files")]
    AnswerTooLarge {
        /// Size of the answer.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Starts with U+FEFF.
    #[error("the answer starts with a byte-order mark (U+FEFF); start it with `{{`")]
    ByteOrderMark,
    /// A Markdown fence that is not exactly one ```` ``` ```` fence around the whole answer.
    #[error(
        "{0}; reply with the JSON object alone, or inside exactly one ```json fence with nothing around it"
    )]
    Fence(String),
    /// Not JSON at all, or invalid JSON (raw control characters, lone surrogates, …).
    #[error("the answer is not valid JSON: {0}")]
    Syntax(String),
    /// The JSON ends too early.
    #[error("the answer is truncated JSON: {0}; send the complete object")]
    Truncated(String),
    /// Something after the JSON object.
    #[error("there is more text after the JSON object ({0}); send one object and nothing else")]
    TrailingData(String),
    /// Valid JSON with the wrong shape (types, nesting).
    #[error("the JSON does not have the expected shape: {0}")]
    Schema(String),
    /// A top-level key other than `create-or-update` and `delete`.
    #[error("unknown key {0:?} at the top level; the only keys are \"create-or-update\" and \"delete\"")]
    UnknownKey(String),
    /// A top-level key given twice.
    #[error("the key {0:?} appears twice at the top level")]
    DuplicateKey(String),
    /// A path given twice in `create-or-update` (compared after unescaping).
    #[error("the path {0:?} appears twice in \"create-or-update\"")]
    DuplicatePath(String),
    /// A path given twice in `delete`.
    #[error("the path {0:?} appears twice in \"delete\"")]
    DuplicateDelete(String),
    /// The same path in both `create-or-update` and `delete`.
    #[error("the path {0:?} is both in \"create-or-update\" and in \"delete\"")]
    WriteAndDelete(String),
    /// Two different paths that name the same file on a case-insensitive or normalising
    /// filesystem.
    #[error(
        "the paths {first:?} and {second:?} differ only in case or Unicode normalisation; use one spelling"
    )]
    CollidingPaths {
        /// The path seen first.
        first: String,
        /// The path seen second.
        second: String,
    },
    /// More entries than `max_files`.
    #[error("the answer names more than {limit} files")]
    TooManyFiles {
        /// The limit.
        limit: usize,
    },
    /// Contents larger than `max_file_bytes`.
    #[error("the contents of {path:?} are {bytes} bytes; the limit is {limit} bytes")]
    FileTooLarge {
        /// The path.
        path: String,
        /// Size of the contents.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

/// Parses a model's answer. See the module documentation for the exact format.
pub fn parse(answer: &str, limits: &ParseLimits) -> Result<EditPlan, ParseError> {
    if answer.len() > limits.max_answer_bytes {
        return Err(ParseError::AnswerTooLarge {
            bytes: answer.len(),
            limit: limits.max_answer_bytes,
        });
    }
    let text = answer.trim();
    if text.starts_with('\u{feff}') {
        return Err(ParseError::ByteOrderMark);
    }
    if text.is_empty() {
        return Err(ParseError::Empty);
    }
    let json = unwrap_fence(text)?;
    if json.starts_with('\u{feff}') {
        return Err(ParseError::ByteOrderMark);
    }
    let plan = parse_object(json, limits)?;
    check_paths(&plan)?;
    Ok(plan)
}

/// Returns the JSON inside a single fence, or the text itself when it is not fenced.
fn unwrap_fence(text: &str) -> Result<&str, ParseError> {
    if text.starts_with("~~~") {
        return Err(ParseError::Fence("`~~~` fences are not accepted".to_owned()));
    }
    if !text.starts_with("```") {
        if !text.starts_with('{') && text.contains("```") {
            return Err(ParseError::Fence(
                "there is text before the Markdown fence".to_owned(),
            ));
        }
        return Ok(text);
    }
    let Some(newline) = text.find('\n') else {
        return Err(ParseError::Fence(
            "the Markdown fence is on a single line".to_owned(),
        ));
    };
    let info = text[3..newline].trim();
    if !(info.is_empty() || info.eq_ignore_ascii_case("json")) {
        return Err(ParseError::Fence(format!(
            "the fence is labelled {info:?}, not `json`"
        )));
    }
    let rest = &text[newline + 1..];
    let Some(body) = rest.strip_suffix("```") else {
        return Err(ParseError::Fence(
            "the Markdown fence is not closed at the end of the answer, or there is text after it".to_owned(),
        ));
    };
    if !(body.is_empty() || body.ends_with('\n')) {
        return Err(ParseError::Fence(
            "the closing fence is not on a line of its own".to_owned(),
        ));
    }
    // A JSON string cannot span lines, so a line that opens with a fence is a second fence.
    if body.lines().any(|line| {
        let line = line.trim_start();
        line.starts_with("```") || line.starts_with("~~~")
    }) {
        return Err(ParseError::Fence(
            "the answer holds more than one Markdown fence".to_owned(),
        ));
    }
    Ok(body.trim())
}

fn parse_object(json: &str, limits: &ParseLimits) -> Result<EditPlan, ParseError> {
    let failure = RefCell::new(None);
    let count = Cell::new(0usize);
    let state = State {
        limits,
        failure: &failure,
        count: &count,
    };
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let parsed = PlanSeed(state).deserialize(&mut deserializer);
    let plan = match parsed {
        Ok(plan) => plan,
        Err(error) => {
            return Err(match failure.into_inner() {
                Some(typed) => typed,
                None => from_json_error(&error),
            });
        }
    };
    deserializer
        .end()
        .map_err(|error| ParseError::TrailingData(error.to_string()))?;
    Ok(plan)
}

fn from_json_error(error: &serde_json::Error) -> ParseError {
    let message = error.to_string();
    match error.classify() {
        serde_json::error::Category::Eof => ParseError::Truncated(message),
        serde_json::error::Category::Data => ParseError::Schema(message),
        serde_json::error::Category::Syntax | serde_json::error::Category::Io => ParseError::Syntax(message),
    }
}

/// Rejects duplicates and collisions across the whole plan.
fn check_paths(plan: &EditPlan) -> Result<(), ParseError> {
    let written: HashSet<&str> = plan.writes.iter().map(|w| w.path.as_str()).collect();
    let mut deleted = HashSet::new();
    for path in &plan.deletes {
        if !deleted.insert(path.as_str()) {
            return Err(ParseError::DuplicateDelete(path.clone()));
        }
        if written.contains(path.as_str()) {
            return Err(ParseError::WriteAndDelete(path.clone()));
        }
    }
    let mut keys: HashMap<String, &str> = HashMap::new();
    let all = plan
        .writes
        .iter()
        .map(|w| w.path.as_str())
        .chain(plan.deletes.iter().map(String::as_str));
    for path in all {
        if let Some(first) = keys.insert(collision_key(path), path) {
            return Err(ParseError::CollidingPaths {
                first: first.to_owned(),
                second: path.to_owned(),
            });
        }
    }
    Ok(())
}

/// What every visitor shares: the limits, the running count, and the typed failure that a
/// visitor records before handing serde an opaque error.
#[derive(Clone, Copy)]
struct State<'a> {
    limits: &'a ParseLimits,
    failure: &'a RefCell<Option<ParseError>>,
    count: &'a Cell<usize>,
}

impl State<'_> {
    fn fail<E: de::Error>(&self, error: ParseError) -> E {
        let message = error.to_string();
        *self.failure.borrow_mut() = Some(error);
        E::custom(message)
    }

    fn count_one<E: de::Error>(&self) -> Result<(), E> {
        let next = self.count.get() + 1;
        if next > self.limits.max_files {
            return Err(self.fail(ParseError::TooManyFiles {
                limit: self.limits.max_files,
            }));
        }
        self.count.set(next);
        Ok(())
    }
}

struct PlanSeed<'a>(State<'a>);

impl<'de> DeserializeSeed<'de> for PlanSeed<'_> {
    type Value = EditPlan;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<EditPlan, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for PlanSeed<'_> {
    type Value = EditPlan;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object with the keys \"create-or-update\" and \"delete\"")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<EditPlan, A::Error> {
        let state = self.0;
        let mut writes = None;
        let mut deletes = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "create-or-update" => {
                    if writes.is_some() {
                        return Err(state.fail(ParseError::DuplicateKey(key)));
                    }
                    writes = Some(map.next_value_seed(WritesSeed(state))?);
                }
                "delete" => {
                    if deletes.is_some() {
                        return Err(state.fail(ParseError::DuplicateKey(key)));
                    }
                    deletes = Some(map.next_value_seed(DeletesSeed(state))?);
                }
                _ => return Err(state.fail(ParseError::UnknownKey(key))),
            }
        }
        Ok(EditPlan {
            writes: writes.unwrap_or_default(),
            deletes: deletes.unwrap_or_default(),
        })
    }
}

struct WritesSeed<'a>(State<'a>);

impl<'de> DeserializeSeed<'de> for WritesSeed<'_> {
    type Value = Vec<ProposedWrite>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WritesSeed<'_> {
    type Value = Vec<ProposedWrite>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"create-or-update\" as an object from file path to contents string")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let state = self.0;
        let mut seen = HashSet::new();
        let mut writes = Vec::new();
        while let Some(path) = map.next_key::<String>()? {
            state.count_one()?;
            if !seen.insert(path.clone()) {
                return Err(state.fail(ParseError::DuplicatePath(path)));
            }
            let contents = map.next_value_seed(ContentsSeed { path: &path })?;
            if contents.len() > state.limits.max_file_bytes {
                return Err(state.fail(ParseError::FileTooLarge {
                    path,
                    bytes: contents.len(),
                    limit: state.limits.max_file_bytes,
                }));
            }
            writes.push(ProposedWrite { path, contents });
        }
        Ok(writes)
    }
}

struct ContentsSeed<'p> {
    path: &'p str,
}

impl<'de> DeserializeSeed<'de> for ContentsSeed<'_> {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for ContentsSeed<'_> {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the contents of {:?} as one JSON string (no nested objects)",
            self.path
        )
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        Ok(value.to_owned())
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<String, E> {
        Ok(value)
    }
}

struct DeletesSeed<'a>(State<'a>);

impl<'de> DeserializeSeed<'de> for DeletesSeed<'_> {
    type Value = Vec<String>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DeletesSeed<'_> {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"delete\" as an array of path strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let state = self.0;
        let mut deletes = Vec::new();
        while let Some(path) = seq.next_element_seed(DeletePathSeed)? {
            state.count_one()?;
            deletes.push(path);
        }
        Ok(deletes)
    }
}

struct DeletePathSeed;

impl<'de> DeserializeSeed<'de> for DeletePathSeed {
    type Value = String;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_string(self)
    }
}

impl<'de> Visitor<'de> for DeletePathSeed {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a path string in \"delete\"")
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<String, E> {
        Ok(value.to_owned())
    }

    fn visit_string<E: de::Error>(self, value: String) -> Result<String, E> {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn variant(error: &ParseError) -> &'static str {
        match error {
            ParseError::Empty => "empty",
            ParseError::AnswerTooLarge { .. } => "answer-too-large",
            ParseError::ByteOrderMark => "bom",
            ParseError::Fence(_) => "fence",
            ParseError::Syntax(_) => "syntax",
            ParseError::Truncated(_) => "truncated",
            ParseError::TrailingData(_) => "trailing",
            ParseError::Schema(_) => "schema",
            ParseError::UnknownKey(_) => "unknown-key",
            ParseError::DuplicateKey(_) => "duplicate-key",
            ParseError::DuplicatePath(_) => "duplicate-path",
            ParseError::DuplicateDelete(_) => "duplicate-delete",
            ParseError::WriteAndDelete(_) => "write-and-delete",
            ParseError::CollidingPaths { .. } => "colliding-paths",
            ParseError::TooManyFiles { .. } => "too-many-files",
            ParseError::FileTooLarge { .. } => "file-too-large",
        }
    }

    fn check(answer: &str, expect: Result<(), &str>) {
        let got = parse(answer, &ParseLimits::default());
        let got = got.as_ref().map(|_| ()).map_err(variant);
        assert_eq!(got, expect, "parse({answer:?}) = {got:?}");
    }

    fn plan(writes: &[(&str, &str)], deletes: &[&str]) -> EditPlan {
        EditPlan::from_pairs(writes, deletes)
    }

    #[test]
    fn parses_the_seed_example_in_answer_order() {
        let answer = r#"{
            "create-or-update": {"foo/bar.py": "import os\n...", "a.txt": "x"},
            "delete": ["foo/baz.py"]
        }"#;
        assert_eq!(
            parse(answer, &ParseLimits::default()),
            Ok(plan(
                &[("foo/bar.py", "import os\n..."), ("a.txt", "x")],
                &["foo/baz.py"]
            ))
        );
    }

    #[test]
    fn empty_plans_are_valid() {
        for answer in ["{}", "{\"create-or-update\":{},\"delete\":[]}", "  {}\n  "] {
            assert_eq!(parse(answer, &ParseLimits::default()), Ok(EditPlan::default()));
        }
    }

    #[test]
    fn accepts_exactly_one_fence() {
        let expect = Ok(plan(&[("a", "b")], &[]));
        for answer in [
            "```json\n{\"create-or-update\":{\"a\":\"b\"}}\n```",
            "```\n{\"create-or-update\":{\"a\":\"b\"}}\n```",
            "\n  ```JSON\n{\"create-or-update\":{\"a\":\"b\"}}\n```\n\n",
            "```json\r\n{\"create-or-update\":{\"a\":\"b\"}}\r\n```",
        ] {
            assert_eq!(parse(answer, &ParseLimits::default()), expect, "{answer:?}");
        }
        // Backticks inside a string of an unfenced answer are plain contents.
        assert_eq!(
            parse(
                "{\"create-or-update\":{\"README.md\":\"```sh\\nmake\\n```\\n\"}}",
                &ParseLimits::default()
            ),
            Ok(plan(&[("README.md", "```sh\nmake\n```\n")], &[]))
        );
    }

    #[test]
    fn threat_model_json_cases() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let deep_value = format!(
            "{{\"create-or-update\":{{\"a\":{}{}}}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let table: Vec<(&str, Result<(), &str>)> = vec![
            // J01-J03: duplicates, also after unescaping.
            (r#"{"delete":["a"],"delete":["b"]}"#, Err("duplicate-key")),
            (
                r#"{"create-or-update":{"a.txt":"safe","a.txt":"evil"}}"#,
                Err("duplicate-path"),
            ),
            (
                r#"{"create-or-update":{"a.txt":"1","a\u002etxt":"2"}}"#,
                Err("duplicate-path"),
            ),
            (
                r#"{"create-or-update":{},"create-\u006fr-update":{}}"#,
                Err("duplicate-key"),
            ),
            // J04-J05: trailing data; trailing whitespace.
            ("{} xyz", Err("trailing")),
            ("{}{}", Err("trailing")),
            ("{}\n```", Err("trailing")),
            ("{}\n  ", Ok(())),
            // J06: fences.
            ("```json\n{}\n```\n```json\n{}\n```", Err("fence")),
            ("Here you go:\n```json\n{}\n```", Err("fence")),
            ("```json\n{}\n```\nDone.", Err("fence")),
            ("~~~json\n{}\n~~~", Err("fence")),
            ("```json {} ```", Err("fence")),
            ("```python\n{}\n```", Err("fence")),
            ("```json\n{}```", Err("fence")),
            // J07: truncated.
            (r#"{"create-or-update":{"a":"b"#, Err("truncated")),
            (r#"{"create-or-update":{"a":"b"}"#, Err("truncated")),
            // J08-J10: wrong types and nesting.
            (r#"{"create-or-update":[]}"#, Err("schema")),
            (r#"{"create-or-update":{"a":123}}"#, Err("schema")),
            (r#"{"create-or-update":{"a":null}}"#, Err("schema")),
            (r#"{"create-or-update":{"a":true}}"#, Err("schema")),
            (r#"{"create-or-update":{"a":{"x":1}}}"#, Err("schema")),
            (r#"{"create-or-update":{"a":["x"]}}"#, Err("schema")),
            (r#"{"delete":"a.txt"}"#, Err("schema")),
            (r#"{"delete":[1]}"#, Err("schema")),
            (r#"{"delete":[null]}"#, Err("schema")),
            (
                r#"{"create-or-update":{"src":{"main.rs":"fn main(){}"}}}"#,
                Err("schema"),
            ),
            ("[]", Err("schema")),
            ("\"text\"", Err("schema")),
            ("null", Err("schema")),
            // J11: unknown and miscased keys.
            (r#"{"create-or-update":{},"exec":"rm -rf /"}"#, Err("unknown-key")),
            (r#"{"Delete":[]}"#, Err("unknown-key")),
            (r#"{"create_or_update":{}}"#, Err("unknown-key")),
            // J12: recursion limit, no stack overflow.
            (&deep, Err("schema")),
            (&deep_value, Err("schema")),
            // J13: byte-order mark is rejected, not stripped.
            ("\u{feff}{}", Err("bom")),
            ("```json\n\u{feff}{}\n```", Err("bom")),
            // J15 is `empty_plans_are_valid`. J17: NFC/NFD and case collisions.
            (
                "{\"create-or-update\":{\"specs/caf\u{e9}.md\":\"1\",\"specs/cafe\u{301}.md\":\"2\"}}",
                Err("colliding-paths"),
            ),
            (
                r#"{"create-or-update":{"README.md":"1","readme.md":"2"}}"#,
                Err("colliding-paths"),
            ),
            (r#"{"delete":["A","a"]}"#, Err("colliding-paths")),
            (
                r#"{"create-or-update":{"A":"x"},"delete":["a"]}"#,
                Err("colliding-paths"),
            ),
            // D10, D12.
            (
                r#"{"create-or-update":{"a":"x"},"delete":["a"]}"#,
                Err("write-and-delete"),
            ),
            (r#"{"delete":["a","a"]}"#, Err("duplicate-delete")),
            // C05-C09: surrogates, raw control characters.
            (r#"{"create-or-update":{"a":"\ud800"}}"#, Err("syntax")),
            (r#"{"create-or-update":{"a":"\udc00"}}"#, Err("syntax")),
            (r#"{"create-or-update":{"a":"\udc00\ud800"}}"#, Err("syntax")),
            (r#"{"create-or-update":{"a":"\ud83d\ude00"}}"#, Ok(())),
            (r#"{"create-or-update":{"\ud800.txt":"x"}}"#, Err("syntax")),
            (r#"{"delete":["\ud800"]}"#, Err("syntax")),
            ("{\"create-or-update\":{\"a\":\"x\ty\"}}", Err("syntax")),
            ("{\"create-or-update\":{\"a\":\"x\ny\"}}", Err("syntax")),
            // Not JSON at all, empty.
            ("Sure! I will edit the files.", Err("syntax")),
            ("", Err("empty")),
            (" \n\t", Err("empty")),
            ("{'delete': []}", Err("syntax")),
        ];
        for (answer, expect) in table {
            check(answer, expect);
        }
    }

    #[test]
    fn valid_surrogate_pair_becomes_four_utf8_bytes() {
        let plan = parse(
            r#"{"create-or-update":{"a":"\ud83d\ude00"}}"#,
            &ParseLimits::default(),
        )
        .expect("valid pair");
        assert_eq!(plan.writes[0].contents.as_bytes(), [0xF0, 0x9F, 0x98, 0x80]);
    }

    #[test]
    fn crlf_and_bom_inside_contents_are_kept_byte_exact() {
        let plan = parse(
            r#"{"create-or-update":{"a":"\ufeffx\r\ny\r\n"}}"#,
            &ParseLimits::default(),
        )
        .expect("valid");
        assert_eq!(plan.writes[0].contents, "\u{feff}x\r\ny\r\n");
    }

    #[test]
    fn limits_are_exact() {
        let limits = ParseLimits {
            max_answer_bytes: 200,
            max_files: 2,
            max_file_bytes: 4,
        };
        let run = |answer: &str| parse(answer, &limits).map(|_| ()).map_err(|e| variant(&e));
        assert_eq!(run(r#"{"create-or-update":{"a":"1234"}}"#), Ok(()));
        assert_eq!(
            run(r#"{"create-or-update":{"a":"12345"}}"#),
            Err("file-too-large")
        );
        assert_eq!(run(r#"{"create-or-update":{"a":"1"},"delete":["b"]}"#), Ok(()));
        assert_eq!(
            run(r#"{"create-or-update":{"a":"1"},"delete":["b","c"]}"#),
            Err("too-many-files")
        );
        let big = format!("{{\"delete\":[\"{}\"]}}", "x".repeat(200));
        assert_eq!(run(&big), Err("answer-too-large"));
    }

    #[test]
    fn messages_name_the_problem_for_the_model() {
        let error = parse(
            r#"{"create-or-update":{"a.txt":"safe","a.txt":"evil"}}"#,
            &ParseLimits::default(),
        )
        .expect_err("duplicate");
        assert_eq!(
            error.to_string(),
            "the path \"a.txt\" appears twice in \"create-or-update\""
        );
        let error =
            parse(r#"{"create-or-update":{"a":123}}"#, &ParseLimits::default()).expect_err("wrong type");
        assert!(
            error
                .to_string()
                .contains("the contents of \"a\" as one JSON string"),
            "{error}"
        );
        let error = parse("\u{feff}{}", &ParseLimits::default()).expect_err("bom");
        assert!(error.to_string().contains("byte-order mark"), "{error}");
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn parse_never_panics(answer in ".*") {
                let _ = parse(&answer, &ParseLimits::default());
            }

            #[test]
            fn parse_never_panics_on_jsonish(parts in proptest::collection::vec(prop_oneof![
                Just("{"), Just("}"), Just("["), Just("]"), Just(":"), Just(","),
                Just("\"create-or-update\""), Just("\"delete\""), Just("\"a\""), Just("\"\\ud800\""),
                Just("```"), Just("\n"), Just("1"), Just("null"),
            ], 0..40)) {
                let _ = parse(&parts.concat(), &ParseLimits::default());
            }

            /// F3 differential: an accepted answer agrees with serde_json's own reading.
            #[test]
            fn accepted_answers_agree_with_serde_json(
                files in proptest::collection::btree_map("[a-z]{1,6}", ".{0,20}", 0..6),
                deletes in proptest::collection::btree_set("[0-9]{1,6}", 0..4),
            ) {
                let value = serde_json::json!({"create-or-update": files, "delete": deletes});
                let text = value.to_string();
                let plan = parse(&text, &ParseLimits::default());
                prop_assert!(plan.is_ok(), "{:?}", plan);
                if let Ok(plan) = plan {
                    let writes: std::collections::BTreeMap<String, String> = plan
                        .writes
                        .into_iter()
                        .map(|w| (w.path, w.contents))
                        .collect();
                    prop_assert_eq!(writes, files);
                    let got: std::collections::BTreeSet<String> = plan.deletes.into_iter().collect();
                    prop_assert_eq!(got, deletes);
                }
            }
        }
    }
}
