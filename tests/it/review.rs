//! The review criticizer end to end: changed files from real git repositories, `review()` with a
//! fake model, the conversion into `code-review` findings, and parser robustness properties.

use std::path::Path;
use std::sync::{Arc, Mutex};

use bork_ci::findings::Finding;
use bork_ci::review::{
    self, ChangedFile, ReviewError, Severity, VersionPolicy, changed_files, parse, to_findings,
};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::git;

fn write(dir: &Path, path: &str, text: &str) {
    let path = dir.join(path);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(path, text).expect("write");
}

/// A repository on `feature`, branched from `main`, with one change of every kind.
fn sample_repo() -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    write(outside.path(), "secret.txt", "CANARY-SECRET-42\n");
    let dir = repo.path();
    git(dir, &["init", "-q"]);
    for name in ["committed", "staged", "unstaged", "deleted", "untouched"] {
        write(dir, &format!("{name}.txt"), &format!("{name} v1\n"));
    }
    write(dir, ".gitignore", "*.log\n");
    write(dir, "sub/inner.txt", "inner\n");
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "base"]);
    git(dir, &["checkout", "-q", "-b", "feature"]);
    write(dir, "committed.txt", "committed v2\n");
    git(dir, &["commit", "-q", "-am", "feature work"]);
    write(dir, "staged.txt", "staged v2\n");
    git(dir, &["add", "staged.txt"]);
    write(dir, "unstaged.txt", "unstaged v2\n");
    std::fs::remove_file(dir.join("deleted.txt")).expect("rm");
    write(dir, "new dir/untracked.txt", "untracked v1\n");
    write(dir, "debug.log", "ignored\n");
    write(dir, "binary.bin", "a\0b");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), dir.join("escape.txt")).expect("symlink");
    std::os::unix::fs::symlink("sub", dir.join("sublink")).expect("symlink");
    (repo, outside)
}

fn paths(files: &[ChangedFile]) -> Vec<&str> {
    files.iter().map(|file| file.path.as_str()).collect()
}

fn contents<'a>(files: &'a [ChangedFile], path: &str) -> Option<&'a str> {
    files
        .iter()
        .find(|file| file.path == path)
        .and_then(|file| file.contents.as_deref())
}

#[test]
fn changed_files_covers_every_kind_of_change() {
    let (repo, _outside) = sample_repo();
    let (files, diff) = changed_files(repo.path(), "main", None).expect("collects");
    assert_eq!(
        paths(&files),
        vec![
            "binary.bin",
            "committed.txt",
            "deleted.txt",
            "escape.txt",
            "new dir/untracked.txt",
            "staged.txt",
            "sublink",
            "unstaged.txt",
        ]
    );
    assert_eq!(contents(&files, "committed.txt"), Some("committed v2\n"));
    assert_eq!(contents(&files, "staged.txt"), Some("staged v2\n"));
    assert_eq!(contents(&files, "unstaged.txt"), Some("unstaged v2\n"));
    assert_eq!(contents(&files, "new dir/untracked.txt"), Some("untracked v1\n"));
    assert_eq!(contents(&files, "deleted.txt"), None);
    assert_eq!(contents(&files, "binary.bin"), None);
    assert_eq!(contents(&files, "escape.txt"), None, "symlink not followed");
    assert_eq!(contents(&files, "sublink"), None, "symlink not followed");
    for needle in [
        "+committed v2",
        "+staged v2",
        "+unstaged v2",
        "-deleted v1",
        "+untracked v1",
    ] {
        assert!(diff.contains(needle), "diff lacks {needle}:\n{diff}");
    }
    assert!(!diff.contains("CANARY-SECRET-42"));
    assert!(!diff.contains("ignored"));
    assert!(!diff.contains("\u{1b}["), "no color codes");
    assert!(
        files
            .iter()
            .filter_map(|f| f.contents.as_deref())
            .all(|c| !c.contains("CANARY"))
    );
}

#[test]
fn changed_files_uses_origin_in_a_fresh_clone() {
    let (repo, _outside) = sample_repo();
    git(repo.path(), &["checkout", "-q", "main"]);
    let clone = tempfile::tempdir().expect("tempdir");
    let source = repo.path().to_str().expect("utf-8 path");
    git(clone.path(), &["clone", "-q", source, "work"]);
    let work = clone.path().join("work");
    git(&work, &["checkout", "-q", "-b", "topic"]);
    git(&work, &["branch", "-q", "-D", "main"]);
    write(&work, "untouched.txt", "untouched v2\n");
    let (files, diff) = changed_files(&work, "main", None).expect("falls back to origin/main");
    assert_eq!(paths(&files), vec!["untouched.txt"]);
    assert!(diff.contains("+untouched v2"));
}

#[test]
fn changed_files_only_reviews_the_given_files() {
    let (repo, _outside) = sample_repo();
    let only = [
        "unstaged.txt".to_owned(),
        "./untouched.txt".to_owned(),
        "new dir/untracked.txt".to_owned(),
        "unstaged.txt".to_owned(),
        "sublink/inner.txt".to_owned(),
        "*.txt".to_owned(),
    ];
    let (files, diff) = changed_files(repo.path(), "main", Some(&only)).expect("collects");
    assert_eq!(
        paths(&files),
        vec![
            "unstaged.txt",
            "untouched.txt",
            "new dir/untracked.txt",
            "sublink/inner.txt",
            "*.txt"
        ]
    );
    assert_eq!(contents(&files, "untouched.txt"), Some("untouched v1\n"));
    assert_eq!(
        contents(&files, "sublink/inner.txt"),
        None,
        "symlinked directory not followed"
    );
    assert_eq!(contents(&files, "*.txt"), None);
    assert!(diff.contains("+unstaged v2"));
    assert!(diff.contains("+untracked v1"));
    assert!(!diff.contains("committed v2"), "pathspecs are literal:\n{diff}");
}

#[test]
fn changed_files_refuses_bad_input() {
    let (repo, _outside) = sample_repo();
    for bad in ["../outside", "/etc/passwd", ".git/config", "a/../../b", ""] {
        let only = [bad.to_owned()];
        assert!(changed_files(repo.path(), "main", Some(&only)).is_err(), "{bad}");
    }
    for base in ["--output=/tmp/x", "", "no-such-branch"] {
        let error = changed_files(repo.path(), base, None).err();
        assert!(error.is_some(), "{base}");
    }
    let not_a_repo = tempfile::tempdir().expect("tempdir");
    assert!(changed_files(not_a_repo.path(), "main", None).is_err());
}

fn canned(findings: Value) -> String {
    json!({ "schema_version": "1.0", "prompt_version": "1.0.0", "summary": "Two issues.", "findings": findings })
        .to_string()
}

fn sample_finding(id: &str, severity: &str, file: &str) -> Value {
    json!({
        "id": id, "severity": severity, "category": "correctness", "title": format!("Problem {id}"),
        "file": file, "line": 2, "message": "Explained."
    })
}

#[tokio::test]
async fn review_asks_with_the_prompt_and_parses_the_answer() {
    let changed = vec![
        ChangedFile {
            path: "src/a.rs".to_owned(),
            contents: Some("fn a() {}\n".to_owned()),
        },
        ChangedFile {
            path: "gone.rs".to_owned(),
            contents: None,
        },
    ];
    let seen = Arc::new(Mutex::new(None));
    let seen_by_ask = Arc::clone(&seen);
    let answer = format!(
        "```json\n{}\n```",
        canned(json!([
            sample_finding("F1", "high", "src/a.rs"),
            sample_finding("F2", "low", "./gone.rs"),
            sample_finding("F3", "critical", "elsewhere.rs"),
        ]))
    );
    let result = review::review(
        &changed,
        "+fn a() {}\n",
        move |system, user| async move {
            *seen_by_ask.lock().expect("lock") = Some((system, user));
            Ok(answer)
        },
        &VersionPolicy::default(),
    )
    .await
    .expect("review succeeds");
    let ids: Vec<&str> = result.findings.iter().map(|f| f.id.as_str()).collect();
    assert_eq!(ids, vec!["F1", "F2"]);
    assert_eq!(
        result.stats.dropped_by_reason.get("file_not_in_changed_files"),
        Some(&1)
    );
    let (system, user) = seen.lock().expect("lock").take().expect("ask was called");
    assert!(system.contains("prompt_version \"1.0.0\""));
    assert!(system.contains("schema_version \"1.0\""));
    assert!(user.contains("- src/a.rs\n- gone.rs\n"));
    assert!(user.contains("    1| fn a() {}"));
    assert!(user.contains("+fn a() {}"));
}

#[tokio::test]
async fn review_reports_ask_failures_and_rejections() {
    let changed = [ChangedFile {
        path: "a.rs".to_owned(),
        contents: Some("x\n".to_owned()),
    }];
    let failed = review::review(
        &changed,
        "",
        |_, _| async { Err(anyhow::anyhow!("connection refused")) },
        &VersionPolicy::default(),
    )
    .await;
    assert!(matches!(failed, Err(ReviewError::Ask(_))));

    let rejected = review::review(
        &changed,
        "",
        |_, _| async { Ok("I found no problems.".to_owned()) },
        &VersionPolicy::default(),
    )
    .await;
    match rejected {
        Err(ReviewError::Rejected { diagnostics }) => {
            assert_eq!(diagnostics[0].code, "invalid_json");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }

    let drifted = json!({ "schema_version": "1.0", "prompt_version": "1.0.2", "findings": [] }).to_string();
    let drifting = VersionPolicy {
        allow_prompt_patch_drift: true,
    };
    let answer = drifted.clone();
    let accepted = review::review(&changed, "", |_, _| async { Ok(answer) }, &drifting).await;
    assert!(accepted.is_ok());
    let strict = review::review(
        &changed,
        "",
        |_, _| async { Ok(drifted) },
        &VersionPolicy::default(),
    )
    .await;
    let codes: Vec<String> = strict
        .err()
        .map(|e| e.diagnostics().iter().map(|d| d.code.clone()).collect())
        .unwrap_or_default();
    assert_eq!(codes, vec!["incompatible_version"]);
}

#[test]
fn to_findings_filters_by_severity_and_renders_markdown() {
    let mut full = sample_finding("F1", "high", "src\\a.rs");
    full["end_line"] = json!(5);
    full["suggestion"] = json!("Check the bound first.");
    full["confidence"] = json!("medium");
    full["rule_id"] = json!("bounds");
    let raw = canned(json!([
        full,
        sample_finding("F2", "medium", "src/a.rs"),
        sample_finding("F3", "low", "docs/b.md"),
        sample_finding("F4", "info", "docs/b.md"),
        sample_finding("F5", "critical", "docs/b.md"),
    ]));
    let changed = ["src/a.rs".to_owned(), "docs/b.md".to_owned()];
    let result = parse(&raw, &changed, &VersionPolicy::default()).expect("parses");

    let medium = to_findings(&result, Severity::Medium);
    assert!(medium.overall_findings.is_empty());
    assert_eq!(medium.per_file_findings.len(), 3);
    assert_eq!(to_findings(&result, Severity::Info).len(), 5);
    assert_eq!(to_findings(&result, Severity::Critical).len(), 1);
    for finding in &medium.per_file_findings {
        assert!(matches!(finding, Finding::CodeReview { file: Some(_), .. }));
    }
    if let Some(Finding::CodeReview { finding, .. }) = medium.per_file_findings.first() {
        insta::assert_snapshot!("review_finding_text", finding);
    }
    insta::assert_snapshot!(
        "review_to_findings",
        serde_json::to_string_pretty(&medium).expect("serializes")
    );
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        "[ -~\\\\\\.]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("1.0"),
            Just("1.0.0"),
            Just("src/a.rs"),
            Just("high"),
            Just("12"),
            Just("-1")
        ]
        .prop_map(|s| Value::String(s.to_owned())),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        let keys = prop_oneof![
            Just("schema_version".to_owned()),
            Just("prompt_version".to_owned()),
            Just("findings".to_owned()),
            Just("id".to_owned()),
            Just("severity".to_owned()),
            Just("file".to_owned()),
            Just("line".to_owned()),
            Just("end_line".to_owned()),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..8)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

fn near_valid_finding() -> impl Strategy<Value = Value> {
    let field = prop_oneof![
        Just(json!("high")),
        Just(json!("src/a.rs")),
        Just(json!(" ./src\\a.rs ")),
        Just(json!("12")),
        Just(json!(" -3 ")),
        Just(json!(0)),
        Just(json!(7)),
        Just(json!(1e300)),
        Just(json!(-1.5)),
        Just(json!(u64::MAX)),
        Just(json!(i64::MIN)),
        Just(Value::Null),
        Just(json!([])),
        Just(json!("")),
        ".{0,8}".prop_map(Value::String),
    ];
    prop::collection::btree_map(
        prop_oneof![
            Just("id"),
            Just("severity"),
            Just("category"),
            Just("title"),
            Just("file"),
            Just("line"),
            Just("end_line"),
            Just("message"),
            Just("suggestion"),
            Just("confidence"),
            Just("rule_id"),
            Just("extra"),
        ],
        field,
        0..12,
    )
    .prop_map(|map| {
        Value::Object(
            map.into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
        )
    })
}

proptest! {
    #[test]
    fn parse_never_panics_on_strings(raw in ".{0,400}") {
        let _ = parse(&raw, &["src/a.rs".to_owned()], &VersionPolicy::default());
    }

    #[test]
    fn parse_never_panics_on_json(value in arbitrary_json()) {
        let _ = parse(&value.to_string(), &["src/a.rs".to_owned()], &VersionPolicy::default());
    }

    #[test]
    fn parse_keeps_only_valid_findings(
        findings in prop::collection::vec(near_valid_finding(), 0..8),
        drift in any::<bool>(),
    ) {
        let raw = json!({"schema_version": "1.0", "prompt_version": "1.0.0", "findings": findings});
        let changed = ["src/a.rs".to_owned()];
        let policy = VersionPolicy { allow_prompt_patch_drift: drift };
        let result = parse(&raw.to_string(), &changed, &policy);
        prop_assert!(result.is_ok());
        if let Ok(result) = result {
            prop_assert_eq!(result.stats.received, findings.len());
            prop_assert_eq!(result.stats.kept + result.stats.dropped(), findings.len());
            for finding in &result.findings {
                prop_assert_eq!(finding.file.as_str(), "src/a.rs");
                prop_assert!(finding.line >= 1);
                prop_assert!(finding.end_line.is_none_or(|end| end >= finding.line));
                prop_assert!(!finding.id.is_empty() && !finding.title.is_empty());
                prop_assert!(!finding.message.is_empty());
            }
            let warned = result.diagnostics.iter().any(|d| d.code == "all_findings_dropped");
            prop_assert_eq!(warned, !findings.is_empty() && result.findings.is_empty());
        }
    }
}

#[tokio::test]
async fn review_of_a_real_repository() {
    let (repo, _outside) = sample_repo();
    let (files, diff) = changed_files(repo.path(), "main", None).expect("collects");
    let answer = canned(json!([
        sample_finding("F1", "medium", "committed.txt"),
        sample_finding("F2", "high", "untouched.txt"),
        sample_finding("F3", "low", "new dir\\untracked.txt"),
    ]));
    let result = review::review(
        &files,
        &diff,
        |_, user| async move {
            assert!(user.contains("+committed v2"));
            assert!(!user.contains("CANARY-SECRET-42"));
            Ok(answer)
        },
        &VersionPolicy::default(),
    )
    .await
    .expect("review succeeds");
    let kept: Vec<(&str, &str)> = result
        .findings
        .iter()
        .map(|f| (f.id.as_str(), f.file.as_str()))
        .collect();
    assert_eq!(
        kept,
        vec![("F1", "committed.txt"), ("F3", "new dir/untracked.txt")]
    );
    let findings = to_findings(&result, Severity::Medium);
    assert_eq!(findings.len(), 1);
}
