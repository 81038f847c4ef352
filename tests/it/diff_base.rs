//! The start of the spec diff on a push: the commit before the push when the checked-out commit
//! is the base branch itself (GitHub's push event, GitLab's `CI_COMMIT_BEFORE_SHA`), the merge
//! base with the default branch for a new branch, an error naming `fetch-depth: 0` for a shallow
//! clone, and `--diff-base` / `BORK_DIFF_BASE` / `diff-base` over all of it. Real git clones,
//! through the binary.

use std::path::Path;
use std::process::Output;

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::support::{Repo, bork};

const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";
const ZEROS: &str = "0000000000000000000000000000000000000000";

/// An upstream repository whose `main` went `t0` (the spec) -> `tA` (+ALPHA) -> `tB` (+BETA),
/// each commit tagged, and a full clone of it checked out at `main` (== `origin/main` == `tB`).
struct Pushed {
    upstream: Repo,
    clone: Repo,
    before: String,
}

fn pushed() -> Pushed {
    let upstream = Repo::new(&[
        ("specs/app.md", SPEC),
        ("src/app.txt", "nothing yet\n"),
        (".config/bork.json", r#"{"llm": {"provider": "scripted"}}"#),
    ]);
    upstream.git(&["tag", "t0"]);
    upstream.write("specs/app.md", &format!("{SPEC}ALPHA line.\n"));
    upstream.commit("alpha");
    upstream.git(&["tag", "tA"]);
    let before = upstream.git(&["rev-parse", "HEAD"]).trim().to_owned();
    upstream.write("specs/app.md", &format!("{SPEC}ALPHA line.\nBETA line.\n"));
    upstream.commit("beta: the push");
    upstream.git(&["tag", "tB"]);
    let clone = clone_of(&upstream, &[]);
    Pushed {
        upstream,
        clone,
        before,
    }
}

fn clone_of(upstream: &Repo, extra: &[&str]) -> Repo {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("file://{}", upstream.path().display());
    let status = std::process::Command::new("git")
        .args(["clone", "-q"])
        .args(extra)
        .arg(&url)
        .arg(dir.path())
        .status()
        .expect("git clone runs");
    assert!(status.success());
    Repo { dir }
}

fn push_event(dir: &Path, before: &str, git_ref: &str) -> std::path::PathBuf {
    let path = dir.join("event.json");
    let event = json!({
        "ref": git_ref,
        "before": before,
        "after": "ffffffffffffffffffffffffffffffffffffffff",
        "repository": {"default_branch": "main", "full_name": "octo/app"},
    });
    std::fs::write(&path, event.to_string()).expect("write event");
    path
}

fn pack(repo: &Repo, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = bork();
    command.arg("pack").arg("--repo").arg(repo.path()).args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().expect("bork-ci runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The spec-diff section of a prompt.
fn spec_section(prompt: &str) -> String {
    let start = prompt
        .find("===== SPEC DIFF")
        .unwrap_or_else(|| panic!("no spec diff in {prompt}"));
    let end = prompt[start..]
        .find("===== END SPEC DIFF =====")
        .map_or(prompt.len(), |end| start + end);
    prompt[start..end].to_owned()
}

#[test]
fn without_push_information_a_checkout_of_main_says_why_the_diff_is_empty() {
    let pushed = pushed();
    let output = pack(&pushed.clone, &[], &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let section = spec_section(&text(&output.stdout));
    assert!(!section.contains("no changes"), "{section}");
    assert!(section.contains("itself"), "{section}");
    assert!(
        text(&output.stderr).contains("--diff-base"),
        "{}",
        text(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_github_push_to_main_diffs_against_before_in_pack_and_run_alike() {
    let pushed = pushed();
    let scratch = tempfile::tempdir().expect("tempdir");
    let event = push_event(scratch.path(), &pushed.before, "refs/heads/main");
    let event = event.to_str().expect("utf-8 path");
    let env = [("GITHUB_EVENT_NAME", "push"), ("GITHUB_EVENT_PATH", event)];

    let output = pack(&pushed.clone, &env, &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let packed = spec_section(&text(&output.stdout));
    assert!(packed.contains("+BETA line."), "{packed}");
    assert!(
        !packed.contains("+ALPHA line."),
        "only the push's change: {packed}"
    );
    assert!(!packed.contains("no changes"), "{packed}");
    assert!(packed.contains(&pushed.before[..12]), "{packed}");

    // `run` sends the model exactly the diff `pack` shows.
    let fake = FakeLlm::openai(vec![Reply::json(&json!({"create-or-update": {}}))]).await;
    let mut command = bork();
    command
        .arg("run")
        .arg("--repo")
        .arg(pushed.clone.path())
        .env("BORK_LLM_PROVIDER", "openai")
        .env("BORK_LLM_BASE_URL", fake.base_url())
        .env("BORK_LLM_MODEL", "test-model")
        .env("BORK_LLM_TIMEOUT_SECS", "10")
        .env("OPENAI_API_KEY", crate::fake_llm::TEST_KEY);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("bork-ci runs");
    let received = fake.received();
    assert!(
        !received.is_empty(),
        "the model was called: {}",
        text(&output.stderr)
    );
    let prefix = received[0].body["messages"][1]["content"]
        .as_str()
        .expect("text content")
        .to_owned();
    assert_eq!(spec_section(&prefix), packed);
}

#[test]
fn a_gitlab_push_to_the_default_branch_diffs_against_ci_commit_before_sha() {
    let pushed = pushed();
    let env = [
        ("CI_COMMIT_BEFORE_SHA", pushed.before.as_str()),
        ("CI_PIPELINE_SOURCE", "push"),
        ("CI_COMMIT_BRANCH", "main"),
        ("CI_DEFAULT_BRANCH", "main"),
    ];
    let output = pack(&pushed.clone, &env, &[]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let section = spec_section(&text(&output.stdout));
    assert!(section.contains("+BETA line."), "{section}");
    assert!(!section.contains("+ALPHA line."), "{section}");
}

#[test]
fn a_new_branch_diffs_against_its_merge_base_with_the_default_branch() {
    let pushed = pushed();
    let clone = &pushed.clone;
    clone.git(&["checkout", "-q", "-b", "feature"]);
    clone.write(
        "specs/app.md",
        &format!("{SPEC}ALPHA line.\nBETA line.\nFEATURE line.\n"),
    );
    clone.commit("feature");
    for env in [
        vec![
            ("CI_COMMIT_BEFORE_SHA", ZEROS),
            ("CI_COMMIT_BRANCH", "feature"),
            ("CI_DEFAULT_BRANCH", "main"),
        ],
        vec![("GITHUB_EVENT_NAME", "push")],
    ] {
        let scratch = tempfile::tempdir().expect("tempdir");
        let event = push_event(scratch.path(), ZEROS, "refs/heads/feature");
        let mut env = env;
        let event = event.to_str().expect("utf-8").to_owned();
        if env[0].0 == "GITHUB_EVENT_NAME" {
            env.push(("GITHUB_EVENT_PATH", &event));
        }
        let output = pack(clone, &env, &[]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let section = spec_section(&text(&output.stdout));
        assert!(section.contains("+FEATURE line."), "{section}");
        assert!(!section.contains("+BETA line."), "{section}");
        assert!(section.contains("merge base with main"), "{section}");
    }
}

#[test]
fn a_before_missing_from_a_shallow_clone_is_exit_two_naming_fetch_depth() {
    let pushed = pushed();
    let shallow = clone_of(&pushed.upstream, &["--depth", "1"]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let event = push_event(scratch.path(), &pushed.before, "refs/heads/main");
    let event = event.to_str().expect("utf-8");
    let before_hash = shallow.git_dir_hash();
    let github = [("GITHUB_EVENT_NAME", "push"), ("GITHUB_EVENT_PATH", event)];
    let gitlab = [
        ("CI_COMMIT_BEFORE_SHA", pushed.before.as_str()),
        ("CI_COMMIT_BRANCH", "main"),
    ];
    for (command, env) in [("pack", &github[..]), ("run", &github[..]), ("run", &gitlab[..])] {
        let mut bork = bork();
        bork.arg(command)
            .arg("--repo")
            .arg(shallow.path())
            .env("BORK_LLM_SCRIPT", scratch.path().join("never-read.json"));
        for (name, value) in env {
            bork.env(name, value);
        }
        let output = bork.output().expect("bork-ci runs");
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        let errors: Vec<_> = stderr
            .lines()
            .filter(|line| line.contains("fetch-depth: 0"))
            .collect();
        assert_eq!(errors.len(), 1, "{stderr}");
        assert!(
            errors[0].contains(&pushed.before) && errors[0].contains("GIT_DEPTH: 0"),
            "{stderr}"
        );
        assert!(
            !stderr.contains("never-read.json"),
            "no model was set up: {stderr}"
        );
        assert_eq!(shallow.git_dir_hash(), before_hash);
        assert_eq!(shallow.git(&["status", "--porcelain"]), "");
    }
}

#[test]
fn flag_over_variable_over_file_over_the_push() {
    let pushed = pushed();
    let scratch = tempfile::tempdir().expect("tempdir");
    let event = push_event(scratch.path(), &pushed.before, "refs/heads/main");
    let event = event.to_str().expect("utf-8");
    let clone = &pushed.clone;
    // The file sits outside the repository so the checkout stays clean.
    let config = scratch.path().join("bork.json");
    std::fs::write(&config, r#"{"diff-base": "t0", "llm": {"provider": "scripted"}}"#).expect("write");
    let config = config.to_str().expect("utf-8");
    let push = [("GITHUB_EVENT_NAME", "push"), ("GITHUB_EVENT_PATH", event)];
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [&'a str], &'a str);
    let cases: [Case; 4] = [
        (&[], &[], "the commit before the push"),
        (&[], &["--config", config], "against t0 (diff-base)"),
        (
            &[("BORK_DIFF_BASE", "tA")],
            &["--config", config],
            "against tA (diff-base)",
        ),
        (
            &[("BORK_DIFF_BASE", "tA")],
            &["--config", config, "--diff-base", "tB"],
            "against tB (diff-base)",
        ),
    ];
    for (extra_env, args, label) in cases {
        let env: Vec<_> = push.iter().chain(extra_env).copied().collect();
        let output = pack(clone, &env, args);
        assert!(output.status.success(), "{}", text(&output.stderr));
        let section = spec_section(&text(&output.stdout));
        assert!(section.contains(label), "{label}: {section}");
    }
    // t0 shows both lines; tB (the checked-out commit) none, and says so plainly.
    let output = pack(clone, &push, &["--diff-base", "t0"]);
    let section = spec_section(&text(&output.stdout));
    assert!(
        section.contains("+ALPHA line.") && section.contains("+BETA line."),
        "{section}"
    );
    let output = pack(clone, &push, &["--diff-base", "no-such-rev"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output.stderr).contains("no-such-rev"),
        "{}",
        text(&output.stderr)
    );
    // `bork-ci config` names where the value came from.
    let output = bork()
        .args(["config", "--repo"])
        .arg(clone.path())
        .env("BORK_DIFF_BASE", "tA")
        .output()
        .expect("runs");
    let shown = text(&output.stdout);
    assert!(
        shown
            .lines()
            .any(|line| line.starts_with("diff-base") && line.contains("BORK_DIFF_BASE")),
        "{shown}"
    );
}
