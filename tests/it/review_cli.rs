//! `bork-ci review` as a correctness checker, and the reviewer inside the loop, against a fake
//! OpenAI-compatible server.

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY};
use crate::support::{Repo, bork, report, script};

fn review_answer(file: &str, severity: &str) -> Reply {
    Reply::json(&json!({
        "schema_version": bork_ci::review::SCHEMA_VERSION,
        "prompt_version": bork_ci::review::PROMPT_VERSION,
        "findings": [{
            "id": "R1", "severity": severity, "category": "correctness",
            "title": "Off by one", "file": file, "line": "2", "message": "The loop skips the last item."
        }]
    }))
}

fn changed_repo() -> Repo {
    let repo = Repo::new(&[("src/lib.txt", "one\ntwo\n")]);
    repo.write("src/lib.txt", "one\ntwo\nthree\n");
    repo
}

fn review_command(fake: &FakeLlm, repo: &Repo) -> std::process::Command {
    let mut command = bork();
    command
        .arg("review")
        .arg("--repo")
        .arg(repo.path())
        .env("BORK_LLM_PROVIDER", "openai")
        .env("BORK_LLM_BASE_URL", fake.base_url())
        .env("BORK_LLM_MODEL", "gpt-test")
        .env("BORK_LLM_MAX_RETRIES", "0")
        .env("OPENAI_API_KEY", TEST_KEY);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn review_is_a_checker_with_findings() {
    let fake = FakeLlm::openai(vec![review_answer("src/lib.txt", "high")]).await;
    let repo = changed_repo();
    let output = review_command(&fake, &repo).output().expect("runs");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let findings: bork_ci::findings::Findings = serde_json::from_slice(&output.stdout).expect("checker JSON");
    assert_eq!(findings.per_file_findings.len(), 1);
    let text = serde_json::to_string(&findings).expect("json");
    assert!(text.contains("Off by one") && text.contains("src/lib.txt"));
    let prompt = fake.requests()[0].to_string();
    assert!(prompt.contains("three"), "the changed contents are sent");
}

#[tokio::test(flavor = "multi_thread")]
async fn review_result_format_and_low_severity_filtered() {
    let fake = FakeLlm::openai(vec![review_answer("./src/lib.txt", "low")]).await;
    let repo = changed_repo();
    let output = review_command(&fake, &repo).output().expect("runs");
    assert_eq!(output.status.code(), Some(0), "low is under the default medium");

    let fake = FakeLlm::openai(vec![review_answer("not/changed.rs", "high")]).await;
    let output = review_command(&fake, &repo)
        .args(["--format", "review-result"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0));
    let result: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let codes: Vec<_> = result["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .map(|diagnostic| diagnostic["code"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(
        codes.contains(&"file_not_in_changed_files".to_owned()),
        "{codes:?}"
    );
    assert!(codes.contains(&"all_findings_dropped".to_owned()), "{codes:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rejected_review_is_exit_two_with_json() {
    let fake = FakeLlm::openai(vec![Reply::Answer("{\"findings\": []}".into())]).await;
    let repo = changed_repo();
    let output = review_command(&fake, &repo).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    // An error object naming why, never empty findings that read as a clean review.
    let error: serde_json::Value = serde_json::from_slice(&output.stdout).expect("still JSON");
    assert!(
        error["error"]
            .as_str()
            .is_some_and(|text| text.contains("review response rejected")),
        "{error}"
    );
    assert!(serde_json::from_slice::<bork_ci::findings::Findings>(&output.stdout).is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn loop_with_the_reviewer_converges_after_its_finding_is_fixed() {
    // The edit model is scripted; the reviewer is the fake server (`review.llm` overrides).
    let fake = FakeLlm::openai(vec![
        review_answer("src/lib.txt", "high"),
        Reply::json(&json!({"schema_version": "1.0", "prompt_version": "1.0.0", "findings": []})),
    ])
    .await;
    let repo = Repo::new(&[
        ("specs/lib.md", "lib lists three items\n"),
        ("src/lib.txt", "one\n"),
    ]);
    repo.write(
        ".config/bork.json",
        &json!({
            "llm": {"provider": "scripted"},
            "review": {"enabled": true, "llm": {"provider": "openai", "model": "gpt-review", "base-url": fake.base_url(), "max-retries": 0}}
        })
        .to_string(),
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = script(
        scratch.path(),
        &[
            json!({"create-or-update": {"src/lib.txt": "one\ntwo\n"}}),
            json!({"create-or-update": {"src/lib.txt": "one\ntwo\nthree\n"}}),
        ],
    );
    let report_path = scratch.path().join("report.json");
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .arg("--report")
        .arg(&report_path)
        .env("BORK_LLM_SCRIPT", &answers)
        .env("OPENAI_API_KEY", TEST_KEY)
        .output()
        .expect("runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = report(&report_path);
    let iterations = report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 2);
    assert_eq!(iterations[0]["reviewer"]["status"], "findings");
    assert_eq!(iterations[1]["reviewer"]["status"], "clean");
    assert!(report["review-usage"]["input-tokens"].as_u64().expect("tokens") > 0);
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(repo.read("src/lib.txt"), "one\ntwo\nthree\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn credential_files_are_never_sent_to_the_reviewer() {
    let fake = FakeLlm::openai(vec![Reply::json(&json!({
        "schema_version": "1.0", "prompt_version": "1.0.0", "findings": []
    }))])
    .await;
    let repo = changed_repo();
    repo.write(".env", "API_TOKEN=canary-dotenv-9911\n");
    repo.write("deploy.pem", "-----BEGIN canary-pem-7722-----\n");
    let output = review_command(&fake, &repo).output().expect("runs");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sent = fake.requests()[0].to_string();
    assert!(!sent.contains("canary-dotenv-9911") && !sent.contains("canary-pem-7722"));
    assert!(sent.contains("three"), "ordinary changes are still sent");
}
