//! End-to-end runs of the `bork-ci` binary on real git repositories with a scripted model.

use serde_json::json;

use crate::support::{Outcome, Repo, TestContext, bork, checker_wanting, report, script};

const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";

fn repo_with_checker(needle: &str) -> Repo {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", &checker_wanting("src/app.txt", needle)),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    repo.write("specs/app.md", &format!("{SPEC}It also prints {needle}.\n"));
    repo
}

fn write_app(contents: &str) -> serde_json::Value {
    json!({"create-or-update": {"src/app.txt": contents}})
}

fn run(repo: &Repo, answers: &[serde_json::Value], extra: &[&str]) -> Outcome {
    TestContext::on(repo).scripted(answers).run(extra)
}

/// [`run`] without the preflight: for what the loop does with a checker that fails to run
/// after an edit, with no verdict on the approved tree to compare it with.
fn run_unchecked(repo: &Repo, answers: &[serde_json::Value]) -> Outcome {
    TestContext::on(repo)
        .scripted(answers)
        .env("BORK_PREFLIGHT", "false")
        .run(&[])
}

#[test]
fn converges_in_one() {
    let repo = repo_with_checker("DONE");
    let outcome = run(&repo, &[write_app("DONE\n")], &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(
        outcome.report["iterations"].as_array().expect("iterations").len(),
        1
    );
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
    assert_eq!(outcome.report["prompt-version"], bork_ci::prompt::PROMPT_VERSION);
}

#[test]
fn converges_in_three() {
    let repo = repo_with_checker("DONE");
    let answers = [write_app("first\n"), write_app("second\n"), write_app("DONE\n")];
    let outcome = run(&repo, &answers, &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let iterations = outcome.report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 3);
    assert_eq!(iterations[0]["checker"]["status"], "findings");
    assert_eq!(iterations[2]["checker"]["status"], "clean");
    assert!(outcome.stderr.contains("iteration 3 of 5"), "{}", outcome.stderr);
}

#[test]
fn never_converges_needs_human_after_five() {
    let repo = repo_with_checker("DONE");
    let answers: Vec<_> = (0..7).map(|n| write_app(&format!("try {n}\n"))).collect();
    let outcome = run(&repo, &answers, &[]);
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "needs-human");
    assert_eq!(
        outcome.report["iterations"].as_array().expect("iterations").len(),
        5
    );
    // The last changes are kept.
    assert_eq!(repo.read("src/app.txt"), "try 4\n");
    assert_eq!(
        outcome.report["findings-left"]["per_file_findings"]
            .as_array()
            .expect("findings")
            .len(),
        1
    );
}

#[test]
fn max_iterations_from_the_environment() {
    let repo = repo_with_checker("DONE");
    let answers: Vec<_> = (0..7).map(|n| write_app(&format!("try {n}\n"))).collect();
    let scratch = tempfile::tempdir().expect("tempdir");
    let script = script(scratch.path(), &answers);
    let report_path = scratch.path().join("r.json");
    let status = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .arg("--report")
        .arg(&report_path)
        .env("BORK_LLM_SCRIPT", &script)
        .env("BORK_MAX_ITERATIONS", "2")
        .status()
        .expect("runs");
    assert_eq!(status.code(), Some(1));
    assert_eq!(
        report(&report_path)["iterations"]
            .as_array()
            .expect("iterations")
            .len(),
        2
    );
}

#[test]
fn no_checker_means_exactly_one_iteration() {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        (".config/bork.json", r#"{"llm": {"provider": "scripted"}}"#),
    ]);
    let outcome = run(&repo, &[write_app("one\n"), write_app("two\n")], &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(
        outcome.report["iterations"].as_array().expect("iterations").len(),
        1
    );
    assert_eq!(repo.read("src/app.txt"), "one\n");
}

#[test]
fn checker_exit_two_is_fed_back_and_a_final_one_is_an_error() {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("check.sh", "#!/bin/sh\necho 'cannot start' >&2\nexit 2\n"),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "max-iterations": 2, "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    let outcome = run_unchecked(&repo, &[write_app("a\n"), write_app("b\n")]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "error");
    let first = &outcome.report["iterations"][0]["checker"];
    assert_eq!(first["status"], "failed-to-run");
    assert!(
        first["stderr-tail"]
            .as_str()
            .expect("tail")
            .contains("cannot start")
    );
}

#[test]
fn checker_timeout_counts_as_failed_to_run() {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("check.sh", "#!/bin/sh\nsleep 30\n"),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "max-iterations": 1, "checker-timeout-secs": 1, "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    let started = std::time::Instant::now();
    let outcome = run_unchecked(&repo, &[write_app("a\n")]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let checker = &outcome.report["iterations"][0]["checker"];
    assert_eq!(checker["status"], "failed-to-run");
    assert!(checker["reason"].as_str().expect("reason").contains("timed out"));
}

#[test]
fn malformed_answer_then_recovery_within_the_iteration() {
    let repo = repo_with_checker("DONE");
    let answers = [json!("this is not JSON"), write_app("DONE\n")];
    let outcome = run(&repo, &answers, &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let iterations = outcome.report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 1);
    assert_eq!(iterations[0]["parse-retries"], 1);
}

#[test]
fn twice_malformed_ends_the_iteration_unconverged() {
    let repo = repo_with_checker("DONE");
    let answers = [
        json!("{\"create-or-update\": {\"a\": 1}}"),
        json!("{\"delete\": [\"x\"], \"delete\": [\"y\"]}"),
        write_app("DONE\n"),
    ];
    let outcome = run(&repo, &answers, &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let iterations = outcome.report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 2);
    assert!(iterations[0]["answer-error"].as_str().is_some());
    assert_eq!(iterations[0]["checker"]["status"], "skipped");
}

#[test]
fn refused_and_held_edits_leave_git_and_config_alone() {
    let repo = repo_with_checker("DONE");
    let git_before = repo.git_dir_hash();
    let config_before = repo.read(".config/bork.json");
    let answer = json!({"create-or-update": {
        "src/app.txt": "DONE\n",
        ".git/hooks/pre-commit": "#!/bin/sh\necho pwned\n",
        ".config/bork.json": "{\"max-iterations\": 99}",
        "../outside.txt": "escape",
        "specs/app.md": "rewritten spec\n",
        ".github/workflows/ci.yml": "on: push\n"
    }});
    let outcome = run(&repo, &[answer], &[]);
    assert_eq!(outcome.code, 3, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "awaiting-approval");
    assert_eq!(repo.git_dir_hash(), git_before);
    assert_eq!(repo.read(".config/bork.json"), config_before);
    assert!(!repo.path().parent().expect("parent").join("outside.txt").exists());
    assert!(repo.read("specs/app.md").starts_with("---"));
    assert_eq!(repo.read(".github/workflows/ci.yml"), "<absent>");
    let pending: Vec<_> = outcome.report["pending-approvals"]
        .as_array()
        .expect("pending")
        .iter()
        .map(|edit| edit["path"].as_str().expect("path").to_owned())
        .collect();
    assert_eq!(pending.len(), 2, "{pending:?}");
    assert_eq!(outcome.report["refused"].as_array().expect("refused").len(), 3);
    // The config attempt is printed; the .git one is not.
    assert!(
        outcome.stdout.contains("max-iterations\\\": 99")
            || outcome.stdout.contains("\"max-iterations\": 99"),
        "{}",
        outcome.stdout
    );
    assert!(!outcome.stdout.contains("echo pwned"));
    assert!(outcome.stdout.contains("rewritten spec"));
}

#[test]
fn context_budget_exceeded_is_an_error_before_any_call() {
    let repo = repo_with_checker("DONE");
    repo.write("big.txt", &"word ".repeat(20_000));
    let outcome = run(
        &repo,
        &[write_app("DONE\n")],
        &["--context-budget-tokens", "1000"],
    );
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(outcome.stderr.contains("context budget"), "{}", outcome.stderr);
    assert_eq!(repo.read("src/app.txt"), "nothing yet\n");
}

#[test]
fn token_budget_ends_needs_human_keeping_work() {
    let repo = repo_with_checker("DONE");
    let answers: Vec<_> = (0..5).map(|n| write_app(&format!("try {n}\n"))).collect();
    let outcome = run(&repo, &answers, &["--max-total-tokens", "10"]);
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_eq!(
        outcome.report["iterations"].as_array().expect("iterations").len(),
        1
    );
    assert!(
        outcome.report["stop-reason"]
            .as_str()
            .expect("reason")
            .contains("token budget")
    );
    assert_eq!(repo.read("src/app.txt"), "try 0\n");
}

#[test]
fn bad_config_is_exit_two_naming_key_and_file() {
    let repo = Repo::new(&[(".config/bork.json", r#"{"max-iterations": "many"}"#)]);
    let outcome = run(&repo, &[write_app("x\n")], &[]);
    assert_eq!(outcome.code, 2);
    assert!(outcome.stderr.contains("max-iterations"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains(".config/bork.json"), "{}", outcome.stderr);
}

#[test]
fn config_command_shows_sources_and_never_the_key() {
    let repo = Repo::new(&[(".config/bork.json", r#"{"max-iterations": 4}"#)]);
    let output = bork()
        .args(["config", "--repo"])
        .arg(repo.path())
        .env("OPENAI_API_KEY", "sk-canary-7781")
        .env("BORK_LLM_MODEL", "m-from-env")
        .output()
        .expect("runs");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("max-iterations") && text.contains(".config/bork.json"),
        "{text}"
    );
    assert!(text.contains("BORK_LLM_MODEL"), "{text}");
    assert!(!text.contains("sk-canary-7781"));
    assert!(!String::from_utf8_lossy(&output.stderr).contains("sk-canary-7781"));
}

#[test]
fn pack_prints_the_prompt_and_needs_no_llm_settings() {
    let repo = Repo::new(&[("specs/app.md", SPEC), ("src/a.txt", "hello\n")]);
    repo.write("specs/new.md", "brand new spec\n");
    let output = bork()
        .args(["pack", "--repo"])
        .arg(repo.path())
        .output()
        .expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("src/a.txt") && text.contains("hello"));
    assert!(text.contains("specs/new.md"));
    assert_eq!(text.matches("brand new spec").count(), 1);
    assert!(String::from_utf8_lossy(&output.stderr).contains("tokens"));
}

#[test]
fn a_held_edit_identical_to_the_tree_is_not_pending() {
    let repo = repo_with_checker("DONE");
    let current_spec = repo.read("specs/app.md");
    let answer = json!({"create-or-update": {"src/app.txt": "DONE\n", "specs/app.md": current_spec}});
    let outcome = run(&repo, &[answer], &[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.report["pending-approvals"]
            .as_array()
            .expect("pending")
            .is_empty()
    );
}

#[test]
fn a_checker_that_cannot_start_counts_as_failed_to_run() {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("check.sh", "not a script, not executable\n"),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "max-iterations": 1, "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    let outcome = run_unchecked(&repo, &[write_app("a\n")]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let checker = &outcome.report["iterations"][0]["checker"];
    assert_eq!(checker["status"], "failed-to-run");
    assert!(
        checker["reason"]
            .as_str()
            .expect("reason")
            .contains("could not start")
    );
}

#[test]
fn an_artifact_directory_inside_the_repository_is_refused() {
    let repo = repo_with_checker("DONE");
    let inside = repo.path().join("artifacts");
    let outcome = run(&repo, &[write_app("DONE\n")], &[]);
    assert_eq!(outcome.code, 0, "control run: {}", outcome.stderr);
    let scratch = tempfile::tempdir().expect("tempdir");
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .env("BORK_LLM_SCRIPT", script(scratch.path(), &[write_app("DONE\n")]))
        .env("AGENT_ARTIFACT_DIR", &inside)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("inside the repository"));
}

#[test]
fn pack_and_config_need_no_model_settings_but_run_does() {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        (".config/bork.json", r#"{"llm": {"provider": "scripted"}}"#),
    ]);
    for command in ["pack", "config"] {
        let output = bork()
            .args([command, "--repo"])
            .arg(repo.path())
            .output()
            .expect("runs");
        assert!(
            output.status.success(),
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("llm.script"));
}

#[test]
fn fail_on_decides_which_outcomes_fail_the_process() {
    // A run that needs a human: exit 1 by default; 0 when --fail-on names only errors, the
    // report still saying needs-human; 1 again when --fail-on names it.
    let repo = repo_with_checker("DONE");
    let answers = [write_app("not yet\n")];
    let needs_human = |extra: &[&str]| {
        TestContext::on(&repo)
            .scripted(&answers)
            .env("BORK_MAX_ITERATIONS", "1")
            .run(extra)
    };
    assert_eq!(needs_human(&[]).code, 1);
    let green = needs_human(&["--fail-on", "error"]);
    assert_eq!(green.code, 0, "{}", green.stderr);
    assert_eq!(green.report["status"], "needs-human");
    assert_eq!(green.report["exit-code"], 1);
    assert_eq!(needs_human(&["--fail-on", "error,needs-human"]).code, 1);
    // An error always fails.
    let broken = Repo::new(&[
        ("specs/app.md", SPEC),
        (".config/bork.json", r#"{"max-iteration": 1}"#),
    ]);
    let error = TestContext::on(&broken)
        .scripted(&answers)
        .run(&["--fail-on", "needs-human"]);
    assert_eq!(error.code, 2, "{}", error.stderr);
}
