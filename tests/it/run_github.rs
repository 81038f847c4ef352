//! `bork-ci run` delivering on GitHub, driven as in Actions against the GitHub simulator:
//! the result pull request, a held spec edit becoming an approval pull request, exit 3, and the
//! resume on a `pull_request_review` event.

use std::path::Path;

use serde_json::json;

use crate::ghsim::GithubSim;
use crate::support::{bork, script};

const BOT_TOKEN: &str = "t-bot-canary-5150";

fn run_in_actions(
    sim: &GithubSim,
    checkout: &Path,
    answers: &Path,
    scratch: &Path,
    event: Option<(&str, &Path)>,
) -> (i32, String, String) {
    let mut command = bork();
    command
        .args(["run", "--repo"])
        .arg(checkout)
        .arg("--report")
        .arg(scratch.join("report.json"))
        .envs(sim.actions_env(BOT_TOKEN, scratch))
        .env("BORK_LLM_PROVIDER", "scripted")
        .env("BORK_LLM_SCRIPT", answers);
    if let Some((name, path)) = event {
        command
            .env("GITHUB_EVENT_NAME", name)
            .env("GITHUB_EVENT_PATH", path);
    }
    let output = command.output().expect("bork-ci runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.code().unwrap_or(-1), stdout, stderr)
}

#[tokio::test(flavor = "multi_thread")]
async fn held_spec_edit_exit_three_then_resume_on_approval() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let checkout = scratch.path().join("checkout");
    sim.clone_into(&checkout);
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {
            "src/widget.txt": "colour = blue\n",
            "specs/widget.md": "A widget is blue and round.\n"
        }})],
    );

    // First run: the code change goes to the result PR, the spec edit waits for approval.
    let (code, stdout, stderr) = run_in_actions(&sim, &checkout, &answers, scratch.path(), None);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("token's permissions on acme/widgets: "),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("::add-mask::{BOT_TOKEN}")),
        "masked before use"
    );
    let outputs = std::fs::read_to_string(scratch.path().join("github-output")).expect("outputs");
    assert!(outputs.contains("awaiting-approval"), "{outputs}");
    assert!(
        std::fs::read_to_string(scratch.path().join("step-summary"))
            .expect("summary")
            .contains("awaiting")
    );
    let state = sim.state().await;
    let all = crate::ghsim::pulls_of(&state);
    assert_eq!(all.len(), 2, "a result PR and one approval PR: {all:#?}");
    let approval = all
        .iter()
        .find(|pull| pull["base"]["ref"] == "bork/main" || pull["base"] == "bork/main")
        .cloned()
        .expect("approval PR into the result branch");
    let number = approval["number"].as_u64().expect("number");
    let head_ref = approval["head"]["ref"]
        .as_str()
        .or(approval["head"].as_str())
        .expect("head")
        .to_owned();

    // A writer approves on the current head.
    let review = sim
        .call(
            "POST",
            &format!("/repos/acme/widgets/pulls/{number}/reviews"),
            Some(json!({"event": "APPROVE"})),
            Some("t-alice"),
        )
        .await;
    assert_eq!(review["state"], "APPROVED", "{review}");

    // Second run, on the review event, in a fresh checkout: it resumes and converges.
    let event_path = scratch.path().join("event.json");
    std::fs::write(
        &event_path,
        json!({"review": {"state": "approved"}, "pull_request": {
            "number": number,
            "base": {"ref": "bork/main"},
            "head": {"ref": head_ref, "repo": {"full_name": "acme/widgets"}}
        }})
        .to_string(),
    )
    .expect("event");
    let second = scratch.path().join("second");
    sim.clone_into(&second);
    std::fs::remove_file(scratch.path().join("github-output")).expect("reset outputs");
    let (code, _stdout, stderr) = run_in_actions(
        &sim,
        &second,
        &answers,
        scratch.path(),
        Some(("pull_request_review", &event_path)),
    );
    assert_eq!(code, 0, "{stderr}");
    let outputs = std::fs::read_to_string(scratch.path().join("github-output")).expect("outputs");
    assert!(outputs.contains("converged"), "{outputs}");
    // The approved spec is on the result branch, exactly as approved.
    let spec = sim
        .call(
            "GET",
            "/repos/acme/widgets/contents/specs/widget.md?ref=bork/main",
            None,
            Some("t-alice"),
        )
        .await;
    let content = spec["content"].as_str().unwrap_or_default().replace('\n', "");
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(content)
        .expect("base64");
    assert_eq!(String::from_utf8_lossy(&decoded), "A widget is blue and round.\n");

    // The token never reached the simulator's stored text.
    let everything = sim.state().await.to_string();
    assert!(!everything.contains(BOT_TOKEN));
    assert!(!stderr.contains(BOT_TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fork_pull_request_is_skipped_without_calling_the_model() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let checkout = scratch.path().join("checkout");
    sim.clone_into(&checkout);
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {"src/widget.txt": "x\n"}})],
    );
    let event_path = scratch.path().join("event.json");
    std::fs::write(
        &event_path,
        json!({"pull_request": {"number": 1, "base": {"ref": "main"},
               "head": {"ref": "feature", "repo": {"full_name": "mallory/widgets"}}}})
        .to_string(),
    )
    .expect("event");
    let (code, _stdout, stderr) = run_in_actions(
        &sim,
        &checkout,
        &answers,
        scratch.path(),
        Some(("pull_request", &event_path)),
    );
    assert_eq!(code, 0, "{stderr}");
    let outputs = std::fs::read_to_string(scratch.path().join("github-output")).expect("outputs");
    assert!(outputs.contains("skipped"), "{outputs}");
    assert_eq!(
        std::fs::read_to_string(checkout.join("src/widget.txt")).expect("file"),
        "colour = red\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_pull_request_events_the_checker_comes_from_the_base_branch() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let checkout = scratch.path().join("checkout");
    sim.clone_into(&checkout);
    // The pull request's head names its own "checker", which would run with the repository.
    let marker = scratch.path().join("head-checker-ran");
    std::fs::write(
        checkout.join("evil.sh"),
        format!("#!/bin/sh\ntouch '{}'\necho '{{}}'\n", marker.display()),
    )
    .expect("write");
    std::fs::set_permissions(
        checkout.join("evil.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::create_dir_all(checkout.join(".config")).expect("mkdir");
    std::fs::write(
        checkout.join(".config/bork.json"),
        r#"{"correctness-checker": "evil.sh", "llm": {"base-url": "http://127.0.0.1:9/v1"}}"#,
    )
    .expect("write");
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {"src/widget.txt": "colour = blue\n"}})],
    );
    let event_path = scratch.path().join("event.json");
    std::fs::write(
        &event_path,
        json!({"pull_request": {"number": 7, "base": {"ref": "main"},
               "head": {"ref": "feature", "repo": {"full_name": "acme/widgets"}}}})
        .to_string(),
    )
    .expect("event");
    let (code, _stdout, stderr) = run_in_actions(
        &sim,
        &checkout,
        &answers,
        scratch.path(),
        Some(("pull_request", &event_path)),
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(!marker.exists(), "the head's checker must not run");
    assert!(stderr.contains("ignoring `correctness-checker`"), "{stderr}");
}
