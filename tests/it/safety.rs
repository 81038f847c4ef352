//! Safety classes end to end, through the binary on real repositories: protected files by
//! identity (every spelling of the checker, `specs/` and `.config/` through symlinks and
//! hardlinks, deletions), configuration that must be refused, files that must never block, and
//! writes outside the repository that must not follow symlinks. Each attack is checked with the
//! before/after digest of the repository, its `.git` and an outside canary; no run may exit 0
//! unless the configured checker, unmodified, reported no findings.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Outcome, Repo, TestContext, bork, checker_wanting, script, tree_hash};

const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";
/// A checker body that always says clean: what a model would write to fake a pass.
const FAKE_CLEAN: &str = "#!/bin/sh\necho '{\"per_file_findings\":[],\"overall_findings\":[]}'\nexit 0\n";

fn base_repo(config: Value, extra: &[(&str, &str)]) -> Repo {
    let mut files = vec![
        ("specs/app.md", SPEC.to_owned()),
        ("src/app.txt", "nothing yet\n".to_owned()),
        (".config/bork.json", config.to_string()),
    ];
    for (path, contents) in extra {
        files.push((path, (*contents).to_owned()));
    }
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let repo = Repo::new(&borrowed);
    repo.write("specs/app.md", &format!("{SPEC}It also prints DONE.\n"));
    repo
}

fn run_with(repo: &Repo, answers: &[Value], envs: &[(&str, &str)], extra: &[&str]) -> Outcome {
    let mut context = TestContext::on(repo);
    context.scripted(answers);
    for (name, value) in envs {
        context.env(name, value);
    }
    context.run(extra)
}

/// Digests of the tree outside `.git`, `.git` itself, and an outside canary folder.
struct Digests {
    tree: String,
    git: String,
    outside: String,
}

fn digests(repo: &Repo, outside: &Path) -> Digests {
    Digests {
        tree: tree_hash_without_git(repo.path()),
        git: repo.git_dir_hash(),
        outside: tree_hash(outside),
    }
}

fn tree_hash_without_git(root: &Path) -> String {
    let mut parts = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(root)
        .expect("read")
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name != ".git")
        .collect();
    names.sort();
    for name in names {
        let path = root.join(&name);
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        let digest = if meta.is_dir() {
            tree_hash(&path)
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path).expect("link").display().to_string()
        } else {
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                std::fs::read(&path).expect("read"),
            ))
        };
        parts.push(format!("{}={digest}", name.to_string_lossy()));
    }
    parts.join(";")
}

fn write(path: &str, contents: &str) -> Value {
    json!({ "create-or-update": { path: contents } })
}

fn delete(path: &str) -> Value {
    json!({ "delete": [path] })
}

/// The model tries `answer` in every iteration. The checker, unmodified, always reports a
/// finding: any exit 0 would be a false green.
fn assert_no_false_green(repo: &Repo, answer: Value, protected: &[&str], label: &str) -> Outcome {
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("canary"), "canary").expect("canary");
    let before_files: Vec<String> = protected.iter().map(|path| repo.read(path)).collect();
    let before = digests(repo, outside.path());
    let answers: Vec<Value> = (0..6).map(|_| answer.clone()).collect();
    let outcome = run_with(repo, &answers, &[], &[]);
    let after = digests(repo, outside.path());
    assert_ne!(outcome.code, 0, "{label}: false green\n{}", outcome.stderr);
    assert_ne!(outcome.report["status"], "converged", "{label}");
    for (path, before) in protected.iter().zip(&before_files) {
        assert_eq!(&repo.read(path), before, "{label}: {path} was changed");
    }
    assert_eq!(before.tree, after.tree, "{label}: the tree changed");
    assert_eq!(before.git, after.git, "{label}: .git changed");
    assert_eq!(
        before.outside, after.outside,
        "{label}: the outside canary changed"
    );
    outcome
}

fn held_or_refused(outcome: &Outcome, path: &str) -> bool {
    let held = outcome.report["pending-approvals"]
        .as_array()
        .is_some_and(|held| held.iter().any(|edit| edit["path"] == path));
    let refused = outcome.report["iterations"].as_array().is_some_and(|iterations| {
        iterations.iter().any(|iteration| {
            iteration["refused"]
                .as_array()
                .is_some_and(|refused| refused.iter().any(|edit| edit["path"] == path))
        })
    });
    held || refused
}

fn checker_config(checker: &str) -> Value {
    json!({"correctness-checker": checker, "llm": {"provider": "scripted"}})
}

/// (from, to) pairs: files with their contents, or symlinks (target, where).
type Pairs<'a> = &'a [(&'a str, &'a str)];

#[test]
fn the_checker_is_protected_under_every_spelling() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    // (configured checker, files to lay out, symlinks to make, the path the model writes)
    let cases: &[(&str, Pairs, Pairs, &str)] = &[
        ("ci/./check.sh", &[("ci/check.sh", &wanting)], &[], "ci/check.sh"),
        ("./ci/check.sh", &[("ci/check.sh", &wanting)], &[], "ci/check.sh"),
        ("ci//check.sh", &[("ci/check.sh", &wanting)], &[], "ci/check.sh"),
        (
            "ci/check",
            &[("ci/check.py", &wanting)],
            &[("check.py", "ci/check")],
            "ci/check.py",
        ),
        (
            "tools/check.sh",
            &[("ci/check.sh", &wanting)],
            &[("ci", "tools")],
            "ci/check.sh",
        ),
        (
            "a/b/check.sh",
            &[("x/y/check.sh", &wanting)],
            &[("x", "a"), ("y", "x/b")],
            "x/y/check.sh",
        ),
        (
            "bin/check",
            &[("ci/check.sh", &wanting)],
            &[("ci", "tools"), ("../tools/check.sh", "bin/check")],
            "ci/check.sh",
        ),
    ];
    for (checker, files, links, target) in cases {
        let config = checker_config(checker);
        let mut all_files: Vec<(&str, &str)> = files.to_vec();
        all_files.push(("bin/.keep", ""));
        let repo = base_repo(config, &all_files);
        for (to, at) in *links {
            let at = repo.path().join(at);
            std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
            symlink(to, &at).expect("symlink");
        }
        repo.commit("links");
        for answer in [write(target, FAKE_CLEAN), delete(target)] {
            let label = format!("checker {checker}, edit {target}: {answer}");
            let outcome = assert_no_false_green(&repo, answer, &[target], &label);
            assert!(held_or_refused(&outcome, target), "{label}: {}", outcome.report);
        }
    }
}

#[test]
fn a_hardlink_of_the_checker_is_protected_too() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    let repo = base_repo(checker_config("ci/check.sh"), &[("ci/check.sh", &wanting)]);
    std::fs::hard_link(repo.path().join("ci/check.sh"), repo.path().join("other.sh")).expect("link");
    repo.commit("hardlink");
    for answer in [write("other.sh", FAKE_CLEAN), delete("ci/check.sh")] {
        let label = format!("hardlink: {answer}");
        let outcome = assert_no_false_green(&repo, answer, &["ci/check.sh"], &label);
        assert!(
            outcome.report["pending-approvals"]
                .as_array()
                .is_some_and(|held| !held.is_empty()),
            "{label}: {}",
            outcome.report
        );
    }
}

#[test]
fn specs_through_a_symlinked_folder_are_gated() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    let repo = Repo::new(&[
        ("docs/specs/app.md", SPEC),
        ("src/app.txt", "x\n"),
        ("check.sh", &wanting),
        (".config/bork.json", &checker_config("check.sh").to_string()),
    ]);
    symlink("docs/specs", repo.path().join("specs")).expect("symlink");
    repo.commit("specs link");
    repo.write("docs/specs/app.md", &format!("{SPEC}More.\n"));
    for answer in [
        write("docs/specs/app.md", "rewritten\n"),
        write("docs/specs/new.md", "new\n"),
        delete("docs/specs/app.md"),
    ] {
        let label = format!("specs link: {answer}");
        let outcome = assert_no_false_green(&repo, answer, &["docs/specs/app.md"], &label);
        assert!(
            outcome.report["pending-approvals"]
                .as_array()
                .is_some_and(|held| !held.is_empty()),
            "{label}: {}",
            outcome.report
        );
    }
}

#[test]
fn approval_globs_are_normalised_and_match() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    let config = json!({
        "correctness-checker": "check.sh",
        "edits-require-approval": ["./deploy/**", "infra//prod.tf", "ops/./run.sh"],
        "llm": {"provider": "scripted"},
    });
    let repo = base_repo(
        config,
        &[
            ("check.sh", &wanting),
            ("deploy/app.yml", "a\n"),
            ("infra/prod.tf", "b\n"),
            ("ops/run.sh", "c\n"),
        ],
    );
    for path in ["deploy/app.yml", "infra/prod.tf", "ops/run.sh"] {
        let outcome = assert_no_false_green(&repo, write(path, "changed\n"), &[path], path);
        assert!(
            outcome.report["pending-approvals"]
                .as_array()
                .is_some_and(|held| held.iter().any(|edit| edit["path"] == path)),
            "{path}: {}",
            outcome.report
        );
    }
}

#[test]
fn a_missing_checker_is_an_error_before_any_model_call() {
    for (checker, links) in [
        ("ci/check.sh", &[][..]),
        ("ci/check", &[("missing.py", "ci/check")][..]),
        ("out/check", &[("../..", "out")][..]),
    ] {
        let repo = base_repo(checker_config(checker), &[("ci/.keep", "")]);
        for (to, at) in links {
            symlink(to, repo.path().join(at)).expect("symlink");
        }
        let outcome = run_with(&repo, &[write("src/app.txt", "DONE\n")], &[], &[]);
        assert_eq!(outcome.code, 2, "{checker}: {}", outcome.stderr);
        assert!(
            outcome.stderr.contains("correctness-checker"),
            "{}",
            outcome.stderr
        );
        assert_eq!(
            repo.read("src/app.txt"),
            "nothing yet\n",
            "{checker}: the model was called"
        );
        assert_eq!(
            outcome.report["iterations"].as_array().map(Vec::len).unwrap_or(0),
            0,
            "{checker}"
        );
    }
}

#[test]
fn the_checkers_folder_cannot_be_made_to_vanish() {
    // The model asks to delete the checker's folder from under it: a symlinked folder whose
    // link the model deletes (deleting a symlink is an ordinary edit of the link). The folder is
    // a judge file: the delete waits for a human, and the checker still judges.
    let wanting = checker_wanting("src/app.txt", "DONE");
    let repo = base_repo(checker_config("tools/check.sh"), &[("ci/check.sh", &wanting)]);
    symlink("ci", repo.path().join("tools")).expect("symlink");
    repo.commit("tools");
    let outcome = run_with(
        &repo,
        &[json!({"create-or-update": {"src/app.txt": "DONE\n"}, "delete": ["tools"]})],
        &[],
        &[],
    );
    assert_eq!(outcome.code, 3, "{}", outcome.stderr);
    let held = &outcome.report["pending-approvals"][0];
    assert_eq!(held["path"], "tools", "{}", outcome.report);
    assert_eq!(held["rule"], "correctness-checker's folder", "{}", outcome.report);
    assert!(repo.path().join("tools/check.sh").is_file());
}

#[test]
fn configuration_through_a_symlink_is_refused() {
    let repo = Repo::new(&[
        ("cfg/bork.json", &checker_config("check.sh").to_string()),
        ("check.sh", FAKE_CLEAN),
        ("specs/app.md", SPEC),
    ]);
    symlink("cfg", repo.path().join(".config")).expect("symlink");
    let outcome = run_with(&repo, &[write("cfg/bork.json", "{}")], &[], &[]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(outcome.stderr.contains("symbolic link"), "{}", outcome.stderr);
}

#[test]
fn the_real_config_file_is_refused_under_an_alias() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", &wanting)]);
    symlink(".config", repo.path().join("cfg")).expect("symlink");
    std::fs::hard_link(
        repo.path().join(".config/bork.json"),
        repo.path().join("bork-copy.json"),
    )
    .expect("hardlink");
    repo.commit("aliases");
    for path in ["bork-copy.json", "cfg/bork.json"] {
        let outcome = assert_no_false_green(&repo, write(path, "{}"), &[".config/bork.json"], path);
        assert!(held_or_refused(&outcome, path), "{path}: {}", outcome.report);
    }
}

/// Seed 001 refuses edits of `.config/bork.json` without asking anyone: deleting or writing
/// over the folder that holds it, under any spelling or through an alias, is refused with the
/// config file's code, never held for approval.
#[test]
fn the_config_folder_is_refused_not_held() {
    let wanting = checker_wanting("src/app.txt", "NEVER-THERE");
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", &wanting)]);
    symlink(".config", repo.path().join("cfg")).expect("symlink");
    repo.commit("an alias of the config folder");
    for answer in [
        delete(".config"),
        delete("./.config"),
        delete(".CONFIG"),
        delete(".config/"),
        delete("cfg"),
        write(".config", "{}"),
    ] {
        let label = answer.to_string();
        let outcome = assert_no_false_green(&repo, answer, &[".config/bork.json"], &label);
        let held = outcome.report["pending-approvals"].as_array().map_or(0, Vec::len);
        assert_eq!(held, 0, "{label}: held for approval\n{}", outcome.report);
        let codes: Vec<String> = outcome.report["iterations"][0]["refused"]
            .as_array()
            .expect("refused")
            .iter()
            .map(|edit| edit["code"].as_str().unwrap_or_default().to_owned())
            .collect();
        assert!(
            !codes.is_empty() && codes.iter().all(|code| code == "config-file"),
            "{label}: {codes:?}\n{}",
            outcome.report
        );
    }
}

#[test]
fn bad_settings_are_refused_naming_the_key() {
    let cases = [
        (json!({"run-timeout-secs": u64::MAX}), "run-timeout-secs"),
        (
            json!({"checker-timeout-secs": 1u64 << 40}),
            "checker-timeout-secs",
        ),
        (json!({"llm": {"timeout-secs": u64::MAX}}), "llm.timeout-secs"),
        (json!({"max-file-bytes": u64::MAX}), "max-file-bytes"),
        (
            json!({"context-budget-tokens": u64::MAX}),
            "context-budget-tokens",
        ),
        (json!({"llm": {"api-key-env": ""}}), "llm.api-key-env"),
        (
            json!({"edits-require-approval": ["../x"]}),
            "edits-require-approval",
        ),
        (
            json!({"edits-require-approval": ["a\\b"]}),
            "edits-require-approval",
        ),
        (
            json!({"edits-require-approval": ["./"]}),
            "edits-require-approval",
        ),
        (
            json!({"correctness-checker": "ci/../../x"}),
            "correctness-checker",
        ),
        (json!({"correctness-checker": "ci\\check"}), "correctness-checker"),
    ];
    for (config, key) in cases {
        let repo = base_repo(config.clone(), &[]);
        let outcome = run_with(&repo, &[write("src/app.txt", "x")], &[], &[]);
        assert_eq!(outcome.code, 2, "{config}: {}", outcome.stderr);
        assert!(outcome.stderr.contains(key), "{config}: {}", outcome.stderr);
        assert!(!outcome.stderr.contains("panicked"), "{}", outcome.stderr);
    }
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success());
}

#[test]
fn fifos_never_block() {
    // A FIFO as the configuration file.
    let repo = Repo::new(&[("specs/app.md", SPEC), ("src/app.txt", "x\n")]);
    std::fs::create_dir_all(repo.path().join(".config")).expect("mkdir");
    mkfifo(&repo.path().join(".config/bork.json"));
    let started = Instant::now();
    let outcome = run_with(&repo, &[], &[], &[]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(outcome.stderr.contains("regular file"), "{}", outcome.stderr);
    assert!(started.elapsed() < Duration::from_secs(30));

    // A FIFO as the scripted model's file.
    let repo = base_repo(json!({"llm": {"provider": "scripted"}}), &[]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let fifo = scratch.path().join("answers.json");
    mkfifo(&fifo);
    let started = Instant::now();
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .env("BORK_LLM_SCRIPT", &fifo)
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn outputs_never_follow_a_symlink_or_enter_git() {
    let repo = base_repo(json!({"llm": {"provider": "scripted"}}), &[]);
    let outside = tempfile::tempdir().expect("tempdir");
    let canary = outside.path().join("canary");
    std::fs::write(&canary, "canary").expect("canary");
    for name in ["results.sarif", "report.json", "summary.md", "outputs.txt"] {
        symlink(&canary, repo.path().join(name)).expect("symlink");
    }
    symlink(".git/config", repo.path().join("git.sarif")).expect("symlink");
    repo.commit("links");
    let git_before = repo.git_dir_hash();
    let scratch = tempfile::tempdir().expect("tempdir");
    let script = script(scratch.path(), &[write("src/app.txt", "DONE\n")]);
    for sarif in ["results.sarif", "git.sarif"] {
        let output = bork()
            .current_dir(repo.path())
            .args(["run", "--repo", "."])
            .args(["--sarif", sarif, "--report", "report.json"])
            .env("BORK_LLM_SCRIPT", &script)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", repo.path().join("summary.md"))
            .env("GITHUB_OUTPUT", repo.path().join("outputs.txt"))
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            std::fs::read_to_string(&canary).expect("canary"),
            "canary",
            "{stderr}"
        );
        assert_eq!(repo.git_dir_hash(), git_before, "{stderr}");
    }
    let direct = bork()
        .current_dir(repo.path())
        .args(["run", "--repo", ".", "--report", ".git/report.json"])
        .env("BORK_LLM_SCRIPT", &script)
        .output()
        .expect("runs");
    assert_ne!(direct.status.code(), Some(0));
    assert_eq!(repo.git_dir_hash(), git_before);
}

const TOKEN: &str = "ghs_SeCrEtToKeN0123456789abcdefXYZ";

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Every spelling of the token a leak could take.
fn leaks(text: &str) -> Vec<String> {
    let mut spellings = vec![
        TOKEN.to_owned(),
        b64(TOKEN),
        b64(TOKEN).trim_end_matches('=').to_owned(),
    ];
    for prefix in ["a", "ab"] {
        let long = b64(&format!("{prefix}{TOKEN}"));
        spellings.push(long[4..long.len() - 4].to_owned());
    }
    spellings
        .into_iter()
        .filter(|spelling| text.contains(spelling.as_str()))
        .collect()
}

#[test]
fn secrets_never_reach_the_model_the_report_or_the_checker() {
    // The checker prints the token (and its base64) it finds anywhere it can, and reports
    // which of the token's variables it can see.
    let checker = format!(
        "#!/bin/sh\nseen=\"${{GITHUB_TOKEN}}|${{MY_CI_TOKEN}}\"\necho \"stderr {TOKEN} $(printf %s {TOKEN} | base64)\" >&2\necho '{{\"per_file_findings\":[{{\"provenance\":\"code-review\",\"file\":\"src/app.txt\",\"finding\":\"leak {TOKEN} seen='\"$seen\"'\"}}],\"overall_findings\":[]}}'\nexit 1\n"
    );
    let repo = base_repo(
        checker_config("check.sh"),
        &[
            ("check.sh", &checker),
            ("notes.txt", &format!("copied: {}\n", b64(&format!("xy{TOKEN}")))),
        ],
    );
    repo.git(&["config", "bork.marker", "GITCONFIG-MARKER-42"]);
    std::fs::hard_link(repo.path().join(".git/config"), repo.path().join("leak.txt")).expect("hardlink");
    // Packing: neither the base64 copy nor the hardlink of .git/config is packed.
    let packed = bork()
        .args(["pack", "--repo"])
        .arg(repo.path())
        .env("GITHUB_TOKEN", TOKEN)
        .output()
        .expect("pack runs");
    let stdout = String::from_utf8_lossy(&packed.stdout);
    let stderr = String::from_utf8_lossy(&packed.stderr);
    assert!(leaks(&stdout).is_empty(), "{:?}", leaks(&stdout));
    assert!(!stdout.contains("GITCONFIG-MARKER-42"));
    assert!(
        stderr.contains("notes.txt") && stderr.contains("GITHUB_TOKEN"),
        "{stderr}"
    );
    assert!(stderr.contains("leak.txt"), "{stderr}");
    assert!(!stderr.contains(TOKEN));

    // A run: the checker's output holds the token; nothing written or printed does.
    let scratch = tempfile::tempdir().expect("tempdir");
    let sarif = scratch.path().join("out.sarif");
    let summary = scratch.path().join("summary.md");
    let outputs = scratch.path().join("outputs.txt");
    let outcome = run_with(
        &repo,
        &[write("src/app.txt", "a\n"), write("src/app.txt", "b\n")],
        &[
            ("GITHUB_TOKEN", TOKEN),
            ("MY_CI_TOKEN", TOKEN),
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_STEP_SUMMARY", summary.to_str().expect("utf8")),
            ("GITHUB_OUTPUT", outputs.to_str().expect("utf8")),
            ("BORK_MAX_ITERATIONS", "2"),
        ],
        &["--sarif", sarif.to_str().expect("utf8")],
    );
    let report_text = outcome.report.to_string();
    assert!(
        report_text.contains("seen=|"),
        "the checker saw the token: {report_text}"
    );
    for (what, text) in [
        ("report", report_text.clone()),
        ("stderr", outcome.stderr.clone()),
        ("stdout", outcome.stdout.clone()),
        ("sarif", std::fs::read_to_string(&sarif).unwrap_or_default()),
        ("summary", std::fs::read_to_string(&summary).unwrap_or_default()),
        ("outputs", std::fs::read_to_string(&outputs).unwrap_or_default()),
    ] {
        assert!(leaks(&text).is_empty(), "{what} leaks {:?}", leaks(&text));
    }
    assert!(report_text.contains("[redacted]"), "{report_text}");
}

/// A model of the Actions runner's log parser: the commands it would act on in `log`.
fn commands_seen(log: &str) -> Vec<String> {
    lines_outside_blocks(log)
        .into_iter()
        .filter(|line| line.trim_start().starts_with("::") || line.contains("##["))
        .map(|line| line.trim_start().to_owned())
        .collect()
}

#[test]
fn untrusted_text_never_issues_a_workflow_command() {
    // The checker echoes hostile text in a field name (a serde error quotes it), on stderr, and
    // fails to run; the model answers with hostile paths and contents.
    let hostile =
        "x\\n::add-mask::HOSTILE\\r::error::HOSTILE\\n::stop-commands::HOSTILE\\n##[set-env name=A]HOSTILE";
    let checker = format!(
        "#!/bin/sh\nprintf '\\n::error::HOSTILE\\n::add-mask::HOSTILE\\n' >&2\necho '{{\"per_file_findings\":[], \"{hostile}\": 1}}'\nexit 0\n"
    );
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", &checker)]);
    let answers = [
        json!({"create-or-update": {
            "src/app.txt": "fine\n::add-mask::HOSTILE\n",
            ".git/\n::error::HOSTILE": "x",
            "specs/\n::warning::HOSTILE.md": "::error::HOSTILE\n",
        }}),
        json!("not json\n::error::HOSTILE\n::add-mask::HOSTILE"),
        json!("still not json\r::error::HOSTILE"),
    ];
    let outcome = run_with(&repo, &answers, &[("GITHUB_ACTIONS", "true")], &[]);
    assert_ne!(outcome.code, 0, "{}", outcome.stderr);
    for (what, log) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
        for command in commands_seen(log) {
            assert!(!command.contains("HOSTILE"), "{what}: {command:?}\n{log}");
        }
    }
    assert!(
        outcome.stderr.contains("HOSTILE"),
        "the hostile text is shown, escaped"
    );

    // `bork-ci pack` prints the repository's files: under Actions, none of their lines is a
    // command either, whatever stop-commands token the file tries to guess or end early.
    repo.write(
        "src/notes.txt",
        "::add-mask::HOSTILE\n::stop-commands::HOSTILE\n::HOSTILE::\n::error::HOSTILE\n",
    );
    let packed = bork()
        .args(["pack", "--repo"])
        .arg(repo.path())
        .env("GITHUB_ACTIONS", "true")
        .output()
        .expect("pack runs");
    let stdout = String::from_utf8_lossy(&packed.stdout);
    assert!(
        packed.status.success(),
        "{}",
        String::from_utf8_lossy(&packed.stderr)
    );
    assert!(stdout.contains("src/notes.txt"), "{stdout}");
    for command in commands_seen(&stdout) {
        assert!(!command.contains("HOSTILE"), "pack: {command:?}\n{stdout}");
    }
}

#[test]
fn terminal_lines_are_redacted_and_escaped_with_or_without_colour() {
    // The model's answers and the checker's output hold a colour code, a screen clear, a
    // hyperlink, a workflow command and the token; whether the log is coloured (as on a
    // terminal) or not, stderr shows none of them raw.
    const HOSTILE_SGR: &str = "\u{1b}[5;31m";
    let checker = format!(
        "#!/bin/sh\nprintf '\\033[5;31mRED \\033[2J\\033]8;;http://x\\007 {TOKEN}\\n::add-mask::x\\n' >&2\nprintf 'not json \\033[5;31m {TOKEN}\\n::add-mask::x\\n'\nexit 0\n"
    );
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", &checker)]);
    let hostile =
        format!("not json {HOSTILE_SGR}RED \u{1b}[2J\u{1b}]8;;http://x\u{7} {TOKEN}\n::add-mask::x");
    for colour in ["never", "always"] {
        let outcome = run_with(
            &repo,
            &[json!(hostile.clone()), json!(hostile.clone())],
            &[("GITHUB_TOKEN", TOKEN)],
            &["--color", colour],
        );
        let stderr = &outcome.stderr;
        assert!(stderr.contains("RED"), "the hostile text is shown: {stderr}");
        assert!(!stderr.contains(HOSTILE_SGR), "{colour}: {stderr:?}");
        assert!(
            !stderr.contains("\u{1b}[2J") && !stderr.contains("\u{1b}]"),
            "{colour}: {stderr:?}"
        );
        assert!(leaks(stderr).is_empty(), "{colour}: {:?}", leaks(stderr));
        for line in lines_outside_blocks(stderr) {
            assert!(!line.trim_start().starts_with("::add-mask"), "{colour}: {line:?}");
        }
        if colour == "never" {
            assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
        }
    }
}

/// Lines of `log` outside stop-commands blocks.
fn lines_outside_blocks(log: &str) -> Vec<&str> {
    let mut stopped: Option<String> = None;
    let mut outside = Vec::new();
    for line in log.split('\n') {
        let trimmed = line.trim_start();
        if let Some(token) = &stopped {
            if trimmed == format!("::{token}::") {
                stopped = None;
            }
            continue;
        }
        if let Some(token) = trimmed.strip_prefix("::stop-commands::") {
            stopped = Some(token.trim_end_matches('\r').to_owned());
            continue;
        }
        outside.push(line);
    }
    outside
}

#[test]
fn the_legacy_command_form_is_defused_in_held_refused_and_finding_paths() {
    // The runner accepts `##[command]` anywhere in a line: a held path, a refused path and a
    // finding's file name carry it; no line bork-ci prints outside a stop-commands block does.
    let checker = "#!/bin/sh\nif grep -q DONE src/app.txt; then echo '{\"per_file_findings\":[],\"overall_findings\":[]}'; exit 0; fi\necho '{\"per_file_findings\":[{\"provenance\":\"code-review\",\"file\":\"src/##[add-mask]LEGACY.txt\",\"finding\":\"##[error]LEGACY finding\"}],\"overall_findings\":[]}'\nexit 1\n";
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", checker)]);
    let answers = [json!({"create-or-update": {
        "specs/##[stop-commands]LEGACY.md": "held\n",
        ".git/##[error]LEGACY": "refused",
        "src/app.txt": "not yet\n",
    }})];
    let outcome = run_with(&repo, &answers, &[("GITHUB_ACTIONS", "true")], &[]);
    assert_ne!(outcome.code, 0, "{}", outcome.stderr);
    for (what, log) in [("stdout", &outcome.stdout), ("stderr", &outcome.stderr)] {
        for line in lines_outside_blocks(log) {
            assert!(!line.contains("##["), "{what}: {line:?}\n{log}");
        }
    }
    // The paths are still shown, defused.
    let both = format!("{}{}", outcome.stdout, outcome.stderr);
    assert!(both.contains("specs/#\\u{23}[stop-commands]LEGACY.md"), "{both}");
}

#[test]
fn a_run_sweeps_temporary_files_a_killed_one_left() {
    let wanting = checker_wanting("src/app.txt", "DONE");
    let repo = base_repo(checker_config("check.sh"), &[("check.sh", &wanting)]);
    let outside = tempfile::tempdir().expect("tempdir");
    let canary = outside.path().join("canary");
    std::fs::write(&canary, "canary").expect("canary");
    repo.write(".bork-tmp-aaaa", "left over");
    repo.write("src/deep/.bork-tmp-bbbb", "left over");
    repo.write(".git/.bork-tmp-cccc", "git's own business");
    symlink(&canary, repo.path().join(".bork-tmp-link")).expect("symlink");
    let outcome = run_with(&repo, &[write("src/app.txt", "DONE\n")], &[], &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(repo.read(".bork-tmp-aaaa"), "<absent>");
    assert_eq!(repo.read("src/deep/.bork-tmp-bbbb"), "<absent>");
    assert_eq!(repo.read(".git/.bork-tmp-cccc"), "git's own business");
    assert!(std::fs::symlink_metadata(repo.path().join(".bork-tmp-link")).is_ok());
    assert_eq!(std::fs::read_to_string(&canary).expect("canary"), "canary");
}

fn alive(pid: i32) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| !stat.split(") ").nth(1).unwrap_or("").starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn a_signal_ends_the_checkers_whole_process_group() {
    for signal in ["TERM", "INT"] {
        let scratch = tempfile::tempdir().expect("tempdir");
        let pid_file = scratch.path().join("grandchild.pid");
        let checker = format!(
            "#!/bin/sh\nsleep 300 &\necho $! > '{}'\nwait\n",
            pid_file.display()
        );
        let repo = base_repo(checker_config("check.sh"), &[("check.sh", &checker)]);
        let script = script(scratch.path(), &[write("src/app.txt", "DONE\n")]);
        let mut child = bork()
            .args(["run", "--repo"])
            .arg(repo.path())
            .env("BORK_LLM_SCRIPT", &script)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        let started = Instant::now();
        while !pid_file.exists()
            || std::fs::read_to_string(&pid_file)
                .unwrap_or_default()
                .trim()
                .is_empty()
        {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the checker never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let grandchild: i32 = std::fs::read_to_string(&pid_file)
            .expect("pid")
            .trim()
            .parse()
            .expect("pid");
        assert!(alive(grandchild));
        let status = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let code = child.wait().expect("wait").code();
        assert_ne!(code, Some(0), "{signal}");
        let waited = Instant::now();
        while alive(grandchild) && waited.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            !alive(grandchild),
            "SIG{signal}: the checker's child {grandchild} survived"
        );
        assert_eq!(repo.read(".bork-tmp-x"), "<absent>");
    }
}

/// Runs `bork-ci run` on `repo` with `envs` and a scripted model. Returns the exit code and
/// stderr, or panics when it is still running 30 s in (a read blocked on a FIFO would be).
fn run_bounded(repo: &Repo, envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = script(scratch.path(), &[write("src/app.txt", "DONE\n")]);
    let stderr_file = scratch.path().join("stderr");
    let mut command = bork();
    command
        .args(["run", "--repo"])
        .arg(repo.path())
        .env("BORK_LLM_SCRIPT", &answers)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_file).expect("stderr file"));
    for (name, value) in envs {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("spawn");
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let stderr = std::fs::read_to_string(&stderr_file).unwrap_or_default();
            return (status.code(), stderr);
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!(
                "bork-ci still runs after 30 s: {}",
                std::fs::read_to_string(&stderr_file).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_fifo_or_device_as_a_file_read_from_outside_never_hangs() {
    let wanting = checker_wanting("src/app.txt", "DONE");
    let fifos = tempfile::tempdir().expect("tempdir");
    let fifo = fifos.path().join("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo")
            .success()
    );
    let fifo_text = fifo.display().to_string();
    // A credential file whose subject token file is the FIFO.
    let external = fifos.path().join("external.json");
    std::fs::write(
        &external,
        json!({"type": "external_account", "audience": "//iam.googleapis.com/x",
               "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
               "token_url": "http://127.0.0.1:9/token",
               "credential_source": {"file": fifo_text}})
        .to_string(),
    )
    .expect("write");
    let external_text = external.display().to_string();
    for file in [fifo_text.as_str(), "/dev/zero"] {
        // The push event's payload: a warning, and the run goes on.
        let repo = base_repo(checker_config("check.sh"), &[("check.sh", &wanting)]);
        let (code, stderr) = run_bounded(
            &repo,
            &[("GITHUB_EVENT_NAME", "push"), ("GITHUB_EVENT_PATH", file)],
        );
        assert_eq!(code, Some(0), "{file}: {stderr}");
        assert!(stderr.contains("push event payload cannot be read"), "{stderr}");

        // Cloud credentials: a clear error (exit 2), never a hang.
        let bedrock = base_repo(
            json!({"correctness-checker": "check.sh", "llm": {"provider": "bedrock", "region": "us-east-1", "base-url": "http://127.0.0.1:9"}}),
            &[("check.sh", &wanting)],
        );
        let (code, stderr) = run_bounded(
            &bedrock,
            &[
                ("AWS_WEB_IDENTITY_TOKEN_FILE", file),
                ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/x"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
            ],
        );
        assert_eq!(code, Some(2), "{file}: {stderr}");
        assert!(stderr.contains("not a regular file"), "{stderr}");
        for variable in ["AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"] {
            let (code, stderr) = run_bounded(
                &bedrock,
                &[(variable, file), ("AWS_EC2_METADATA_DISABLED", "true")],
            );
            assert_eq!(code, Some(2), "{variable}={file}: {stderr}");
            assert!(stderr.contains("not a regular file"), "{stderr}");
        }
        let vertex = base_repo(
            json!({"correctness-checker": "check.sh", "llm": {"provider": "vertex", "region": "global", "project": "p", "base-url": "http://127.0.0.1:9"}}),
            &[("check.sh", &wanting)],
        );
        for credentials in [file, external_text.as_str()] {
            let (code, stderr) = run_bounded(&vertex, &[("GOOGLE_APPLICATION_CREDENTIALS", credentials)]);
            assert_eq!(code, Some(2), "{credentials}: {stderr}");
            assert!(stderr.contains("not a regular file"), "{stderr}");
        }
    }
}

/// RFC 4648 base32 without padding, written here independently of bork-ci's.
fn base32_of(bytes: &[u8]) -> String {
    let alphabet: Vec<char> = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".chars().collect();
    let bits: String = bytes.iter().map(|byte| format!("{byte:08b}")).collect();
    bits.as_bytes()
        .chunks(5)
        .map(|chunk| {
            let mut group = String::from_utf8_lossy(chunk).into_owned();
            while group.len() < 5 {
                group.push('0');
            }
            alphabet[usize::from_str_radix(&group, 2).expect("bits")]
        })
        .collect()
}

/// Each spelling of `key` a leak could take: hex (both cases), reversed, base32 (both cases,
/// two alignments), split across lines, JSON `\u` escapes, a long prefix.
fn spellings_of(key: &str) -> Vec<(&'static str, String)> {
    let (head, tail) = key.split_at(key.len() / 2);
    vec![
        ("hex", hex_of(key.as_bytes())),
        ("HEX", hex_of(key.as_bytes()).to_ascii_uppercase()),
        ("reversed", key.chars().rev().collect::<String>()),
        ("base32", base32_of(key.as_bytes())),
        (
            "base32 lower case",
            base32_of(format!("ab{key}").as_bytes()).to_ascii_lowercase(),
        ),
        ("split across lines", format!("\"{head}\"\n    \"{tail}\"")),
        (
            "JSON \\u escapes",
            key.chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect::<String>(),
        ),
        ("a long prefix", key[..key.len() * 3 / 4].to_owned()),
    ]
}

#[test]
fn every_encoding_of_a_secret_in_a_repository_file_keeps_that_file_from_the_model() {
    let wanting = checker_wanting("src/app.txt", "DONE");
    for (what, spelled) in spellings_of(TOKEN) {
        let repo = base_repo(
            checker_config("check.sh"),
            &[
                ("check.sh", &wanting),
                ("notes.txt", &format!("copied:\n{spelled}\n")),
            ],
        );
        let packed = bork()
            .args(["pack", "--repo"])
            .arg(repo.path())
            .env("GITHUB_TOKEN", TOKEN)
            .output()
            .expect("pack runs");
        let stdout = String::from_utf8_lossy(&packed.stdout);
        let stderr = String::from_utf8_lossy(&packed.stderr);
        assert!(!stdout.contains(&spelled), "{what}: packed");
        assert!(
            stderr.contains("notes.txt") && stderr.contains("GITHUB_TOKEN"),
            "{what}: {stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_encoding_of_the_key_in_an_answer_is_refused_whole() {
    // An endpoint that echoes the model's key, under any spelling: the answer is refused, nothing
    // of it reaches the tree, and the report and logs never show it.
    const KEY: &str = "sk-live-ECHOEDKEY-0123456789abcdefghijKLMN";
    let wanting = checker_wanting("src/app.txt", "DONE");
    for (what, spelled) in spellings_of(KEY) {
        let answer = json!({"create-or-update": {"src/app.txt": format!("DONE\n{spelled}\n")}});
        let fake =
            crate::fake_llm::FakeLlm::openai(vec![crate::fake_llm::Reply::Answer(answer.to_string())]).await;
        let repo = base_repo(checker_config("check.sh"), &[("check.sh", &wanting)]);
        let mut context = TestContext::on(&repo);
        context
            .openai(&fake)
            .env("OPENAI_API_KEY", KEY)
            .env("BORK_MAX_ITERATIONS", "1");
        let outcome = context.run_async(&[]).await;
        assert_ne!(outcome.code, 0, "{what}: {}", outcome.stderr);
        assert!(!repo.read("src/app.txt").contains(&spelled), "{what}: written");
        let report = outcome.report.to_string();
        for text in [&report, &outcome.stderr, &outcome.stdout] {
            assert!(!text.contains(&spelled), "{what}: {text}");
        }
        assert!(
            format!("{}{report}", outcome.stderr).contains("OPENAI_API_KEY"),
            "{what}: the refusal names the secret: {}",
            outcome.stderr
        );
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}
