//! The preflight as a new user meets it: a checker that cannot start stops the run before any
//! model call; a checker that starts and fails on the approved tree because of the code (it does
//! not build, a test module does not import) is the baseline, and the model is asked to fix it
//! with that output in its first prompt; a failure the model's edit left unchanged stops the run
//! then. Each runs with `--sandbox none` and in Docker.

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply};
use crate::sandbox::{TEST_IMAGE, ensure_test_image, transports};
use crate::support::{Repo, TestContext};

const CLEAN: &str = r#"{"per_file_findings":[],"overall_findings":[]}"#;

/// Where the checker runs: `None` locally, else Docker over the first transport.
fn profiles() -> Vec<Option<&'static str>> {
    let mut all = vec![None];
    all.extend(transports().into_iter().take(1).map(|t| Some(t.as_str())));
    all
}

fn context<'a>(repo: &'a Repo, profile: Option<&'static str>) -> TestContext<'a> {
    let mut ctx = TestContext::on(repo);
    if let Some(transport) = profile {
        ensure_test_image();
        ctx.docker(TEST_IMAGE).env("BORK_SANDBOX_TRANSPORT", transport);
    }
    ctx
}

/// A repository whose checker is `checker` (run by `sh`, as a team's script would be).
fn repo_with(checker: &str) -> Repo {
    Repo::new(&[
        ("specs/app.md", "src/app.py imports cleanly and says DONE.\n"),
        ("src/app.py", "def broken(:\n"),
        ("check", checker),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check", "max-iterations": 5, "checker-timeout-secs": 60, "sandbox": {"pull": "never"}}"#,
        ),
    ])
}

/// Every request the fake model received, as text.
fn requests_text(fake: &FakeLlm) -> Vec<String> {
    fake.requests()
        .iter()
        .map(|request| request.to_string())
        .collect()
}

/// A checker that exits 2 because the code does not build: its stderr names the line.
fn build_checker() -> String {
    format!(
        "#!/bin/sh\nif grep -q 'def broken(:' src/app.py; then echo 'SyntaxError: src/app.py line 1: invalid syntax (the tests cannot import app)' >&2; exit 2; fi\n\
         grep -q DONE src/app.py && {{ echo '{CLEAN}'; exit 0; }}\n\
         echo '{{\"per_file_findings\":[{{\"provenance\":\"code-review\",\"file\":\"src/app.py\",\"finding\":\"say DONE\"}}],\"overall_findings\":[]}}'; exit 1\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checker_failing_because_the_code_does_not_build_is_the_baseline_the_model_fixes() {
    for profile in profiles() {
        let fake = FakeLlm::openai(vec![Reply::json(
            &json!({"create-or-update": {"src/app.py": "print('DONE')\n"}}),
        )])
        .await;
        let repo = repo_with(&build_checker());
        let mut ctx = context(&repo, profile);
        ctx.openai(&fake);
        let outcome = ctx.run_async(&[]).await;
        assert_eq!(outcome.code, 0, "{profile:?}\n{}", outcome.stderr);
        let requests = requests_text(&fake);
        assert_eq!(requests.len(), 1, "{profile:?}");
        assert!(
            requests[0].contains("SyntaxError: src/app.py line 1: invalid syntax"),
            "{profile:?}: the first prompt lacks the checker's output\n{}",
            requests[0]
        );
        assert_eq!(
            outcome.report["baseline"]["checker"]["status"], "failed-to-run",
            "{profile:?}"
        );
        assert_eq!(repo.read("src/app.py"), "print('DONE')\n");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checker_that_cannot_start_stops_the_run_before_any_model_call() {
    let missing_tool = "#!/bin/sh\necho 'running pytest' >&2\nexec pytest-not-installed -q\n";
    let adapter =
        "#!/bin/sh\necho 'bork-ci check: could not start `pytest`: No such file or directory' >&2\nexit 2\n";
    for profile in profiles() {
        for (checker, needle) in [(missing_tool, "running pytest"), (adapter, "could not start")] {
            let fake = FakeLlm::openai(vec![Reply::json(
                &json!({"create-or-update": {"src/app.py": "print('DONE')\n"}}),
            )])
            .await;
            let repo = repo_with(checker);
            let mut ctx = context(&repo, profile);
            ctx.openai(&fake);
            let outcome = ctx.run_async(&[]).await;
            assert_eq!(outcome.code, 2, "{profile:?}\n{}", outcome.stderr);
            assert!(fake.requests().is_empty(), "{profile:?}: the model was asked");
            for expected in ["preflight", "Likely fix", needle] {
                assert!(
                    outcome.stderr.contains(expected),
                    "{profile:?}: {expected}\n{}",
                    outcome.stderr
                );
            }
            assert_eq!(repo.read("src/app.py"), "def broken(:\n");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_failure_the_edit_did_not_change_stops_the_run_then() {
    for profile in profiles() {
        // The model's edit leaves the import error as it was: the run stops after iteration 1.
        let fake = FakeLlm::openai(vec![
            Reply::json(&json!({"create-or-update": {"src/notes.txt": "looked at it\n"}})),
            Reply::json(&json!({"create-or-update": {"src/app.py": "print('DONE')\n"}})),
        ])
        .await;
        let repo = repo_with(&build_checker());
        let mut ctx = context(&repo, profile);
        ctx.openai(&fake);
        let outcome = ctx.run_async(&[]).await;
        assert_eq!(outcome.code, 2, "{profile:?}\n{}", outcome.stderr);
        assert_eq!(
            fake.requests().len(),
            1,
            "{profile:?}: more model calls were paid for"
        );
        let iterations = outcome.report["iterations"].as_array().expect("iterations");
        assert_eq!(iterations.len(), 1, "{profile:?}");
        let error = outcome.report["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("did not change the judge's failure") && error.contains("approved tree"),
            "{profile:?}: {error}"
        );
    }
    // A failure that changes goes on to the model; the same failure twice in a row stops.
    let checker = "#!/bin/sh\necho \"ImportError in app: $(head -c 40 src/app.py)\" >&2\nexit 2\n";
    let fake = FakeLlm::openai(vec![
        Reply::json(&json!({"create-or-update": {"src/app.py": "import missing\n"}})),
        Reply::json(&json!({"create-or-update": {"src/app.py": "import missing\n", "src/notes.txt": "x\n"}})),
        Reply::json(&json!({"create-or-update": {"src/app.py": "print('DONE')\n"}})),
    ])
    .await;
    let repo = repo_with(checker);
    let mut ctx = TestContext::on(&repo);
    ctx.openai(&fake);
    let outcome = ctx.run_async(&[]).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 2);
    let error = outcome.report["error"].as_str().unwrap_or_default();
    assert!(error.contains("after the previous iteration"), "{error}");
}
