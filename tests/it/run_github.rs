//! `bork-ci run` delivering on GitHub, driven as in Actions against the GitHub simulator:
//! the result pull request, a held spec edit becoming an approval pull request, exit 3, and the
//! resume on a `pull_request_review` event.

use serde_json::{Value, json};

use crate::ghsim::GithubSim;
use crate::support::{Repo, TestContext};

const BOT_TOKEN: &str = "t-bot-canary-5150";

/// A job in Actions on the simulator's `acme/widgets`, with a scripted model.
fn job<'r>(sim: &GithubSim, repo: &'r Repo, answers: &[Value]) -> TestContext<'r> {
    let mut context = TestContext::on(repo);
    context.github(sim, BOT_TOKEN).scripted(answers);
    context
}

#[tokio::test(flavor = "multi_thread")]
async fn held_spec_edit_exit_three_then_resume_on_approval() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let answers = [json!({"create-or-update": {
        "src/widget.txt": "colour = blue\n",
        "specs/widget.md": "A widget is blue and round.\n"
    }})];

    // First run: the code change goes to the result PR, the spec edit waits for approval.
    let checkout = sim.checkout();
    let first = job(&sim, &checkout, &answers);
    let outcome = first.run(&[]);
    let (stdout, stderr) = (&outcome.stdout, &outcome.stderr);
    assert_eq!(outcome.code, 3, "{stderr}");
    assert!(
        stderr.contains("token's permissions on acme/widgets: "),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("::add-mask::{BOT_TOKEN}")),
        "masked before use"
    );
    let outputs = std::fs::read_to_string(first.scratch_file("github-output")).expect("outputs");
    assert!(outputs.contains("awaiting-approval"), "{outputs}");
    // Where the result is, for SARIF and later steps: the branch and the commit pushed.
    assert!(
        outputs.contains("result-branch<<") && outputs.contains("\nbork/main\n"),
        "{outputs}"
    );
    assert_eq!(outcome.report["result-branch"], "bork/main");
    let sha = outcome.report["result-sha"].as_str().expect("result-sha");
    assert!(sha.len() == 40 && outputs.contains(sha), "{outputs}");
    assert!(
        std::fs::read_to_string(first.scratch_file("step-summary"))
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
    readme_picture_is_true(
        &std::fs::read_to_string(first.scratch_file("step-summary")).expect("summary"),
        &sim.url,
        approval["title"].as_str().expect("title"),
        approval["body"].as_str().expect("body"),
    );
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
    let checkout = sim.checkout();
    let mut second = job(&sim, &checkout, &answers);
    second.event(
        "pull_request_review",
        &json!({"review": {"state": "approved"}, "pull_request": {
            "number": number,
            "base": {"ref": "bork/main"},
            "head": {"ref": head_ref, "repo": {"full_name": "acme/widgets"}}
        }}),
    );
    let outcome = second.run(&[]);
    let stderr = &outcome.stderr;
    assert_eq!(outcome.code, 0, "{stderr}");
    let outputs = std::fs::read_to_string(second.scratch_file("github-output")).expect("outputs");
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
    let checkout = sim.checkout();
    let mut context = job(
        &sim,
        &checkout,
        &[json!({"create-or-update": {"src/widget.txt": "x\n"}})],
    );
    context.event(
        "pull_request",
        &json!({"pull_request": {"number": 1, "base": {"ref": "main"},
               "head": {"ref": "feature", "repo": {"full_name": "mallory/widgets"}}}}),
    );
    let outcome = context.run(&[]);
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let outputs = std::fs::read_to_string(context.scratch_file("github-output")).expect("outputs");
    assert!(outputs.contains("skipped"), "{outputs}");
    assert_eq!(checkout.read("src/widget.txt"), "colour = red\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_pull_request_events_the_checker_comes_from_the_base_branch() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let checkout = sim.checkout();
    let mut context = job(
        &sim,
        &checkout,
        &[json!({"create-or-update": {"src/widget.txt": "colour = blue\n"}})],
    );
    // The pull request's head names its own "checker", which would run with the repository.
    let marker = context.scratch_file("head-checker-ran");
    checkout.write(
        "evil.sh",
        &format!("#!/bin/sh\ntouch '{}'\necho '{{}}'\n", marker.display()),
    );
    checkout.write(
        ".config/bork.json",
        r#"{"correctness-checker": "evil.sh", "llm": {"base-url": "http://127.0.0.1:9/v1"}}"#,
    );
    context.event(
        "pull_request",
        &json!({"pull_request": {"number": 7, "base": {"ref": "main"},
               "head": {"ref": "feature", "repo": {"full_name": "acme/widgets"}}}}),
    );
    let outcome = context.run(&[]);
    let stderr = &outcome.stderr;
    assert_eq!(outcome.code, 0, "{stderr}");
    assert!(!marker.exists(), "the head's checker must not run");
    assert!(stderr.contains("ignoring `correctness-checker`"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_workflow_edit_a_token_may_not_push_is_reported_not_lost() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    // The bot's token may not change workflow files, as an App without `workflows: write`.
    sim.call(
        "POST",
        "/_sim/users",
        Some(json!({"login": "bork-bot", "token": BOT_TOKEN, "type": "User", "permissions": {"acme/widgets": "write"}, "workflows": false})),
        None,
    )
    .await;
    let workflow = "name: ci\non: push\njobs: {}\n";
    let answers = [json!({"create-or-update": {
        "src/widget.txt": "colour = blue\n",
        ".github/workflows/ci.yml": workflow,
        "specs/widget.md": "A widget is blue and round.\n"
    }})];
    let checkout = sim.checkout();
    let outcome = job(&sim, &checkout, &answers).run(&[]);
    assert_eq!(outcome.code, 3, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("not delivered") && outcome.stderr.contains("permission-workflows: write"),
        "{}",
        outcome.stderr
    );
    // The rest of the run went on: the result pull request and the spec's approval exist.
    let pulls = crate::ghsim::pulls_of(&sim.state().await);
    assert_eq!(pulls.len(), 2, "{pulls:#?}");
    // Not lost: the held content is in the report.
    let held = outcome.report["pending-approvals"]
        .as_array()
        .expect("pending")
        .iter()
        .find(|edit| edit["path"] == ".github/workflows/ci.yml")
        .cloned()
        .expect("the workflow edit is pending");
    assert_eq!(held["contents"], workflow);
    assert!(
        outcome.report["warnings"].to_string().contains("not delivered"),
        "{}",
        outcome.report["warnings"]
    );
}

/// The README's "What a finished run looks like" quotes this run's job summary and approval pull
/// request: every line, with the simulator's address as github.com and token counts as digits.
fn readme_picture_is_true(summary: &str, sim_url: &str, title: &str, body: &str) {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let start = readme
        .find("### What a finished run looks like")
        .expect("the README's picture");
    let picture = &readme[start..start + readme[start..].find("\n## ").unwrap_or(readme.len() - start)];
    let digits = |text: &str| -> String {
        text.chars()
            .map(|c| if c.is_ascii_digit() { '0' } else { c })
            .collect()
    };
    let quoted = digits(picture);
    for line in summary
        .replace(sim_url, "https://github.com")
        .lines()
        .chain(body.lines())
    {
        let want = if line.is_empty() {
            ">".to_owned()
        } else {
            format!("> {line}")
        };
        assert!(
            quoted.lines().any(|have| have == digits(&want)),
            "README's picture lacks the line {want:?}; update it from this run"
        );
    }
    assert!(picture.contains(&format!("titled \"{title}\"")), "{title}");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_pull_request_events_where_bork_ci_pushes_comes_from_the_base_branch() {
    // The pull request's head asks bork-ci to push its result onto `main` itself (an empty
    // prefix) and to label with its own label: both are ignored, the base branch decides.
    for prefix in ["", "hijack/"] {
        let sim = GithubSim::start();
        sim.setup(BOT_TOKEN).await;
        let checkout = sim.checkout();
        let mut context = job(
            &sim,
            &checkout,
            &[json!({"create-or-update": {"src/widget.txt": "colour = blue\n"}})],
        );
        checkout.write(
            ".config/bork.json",
            &json!({"github": {"branch-prefix": prefix, "label": "hijacked"}}).to_string(),
        );
        context.event(
            "pull_request",
            &json!({"pull_request": {"number": 7, "base": {"ref": "main"},
                   "head": {"ref": "feature", "repo": {"full_name": "acme/widgets"}}}}),
        );
        let outcome = context.run(&[]);
        let stderr = &outcome.stderr;
        assert_eq!(outcome.code, 0, "{prefix:?}: {stderr}");
        assert!(stderr.contains("ignoring `github`"), "{stderr}");
        assert_eq!(outcome.report["result-branch"], "bork/main", "{prefix:?}");
        let state = sim.state().await;
        let pulls = crate::ghsim::pulls_of(&state);
        assert!(
            pulls
                .iter()
                .all(|pull| pull["head"]["ref"] != "main" && pull["head"]["ref"] != "hijack/main"),
            "{pulls:#?}"
        );
    }
}

#[test]
fn an_empty_or_unsafe_branch_prefix_is_a_configuration_error() {
    for prefix in ["", "bork", "/x/", "refs/heads/", "a..b/", "-x/", "a b/"] {
        let repo = Repo::new(&[(
            ".config/bork.json",
            &json!({"correctness-checker": "check.sh", "github": {"branch-prefix": prefix}}).to_string(),
        )]);
        let context = TestContext::on(&repo);
        let outcome = context.run(&[]);
        assert_eq!(outcome.code, 2, "{prefix:?}: {}", outcome.stderr);
        assert!(
            outcome.stderr.contains("github.branch-prefix"),
            "{prefix:?}: {}",
            outcome.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_held_test_the_checks_need_ends_the_round_and_its_approval_names_the_findings() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    // The spec now wants a blue widget; the approved test still says red, so the checks cannot
    // pass until a human approves the test's change.
    let answer = json!({"create-or-update": {
        "src/widget.txt": "colour = blue\n",
        "tests/colour.txt": "blue\n"
    }});
    let checkout = sim.checkout();
    checkout.write("specs/widget.md", "A widget is blue and round.\n");
    checkout.write("tests/colour.txt", "red\n");
    checkout.write(
        "check.sh",
        "#!/bin/sh\nwant=$(sed -n 's/^colour = //p' src/widget.txt)\nif [ \"$(cat tests/colour.txt)\" = \"$want\" ]; then\n  echo '{\"per_file_findings\":[],\"overall_findings\":[]}'; exit 0\nfi\necho \"{\\\"per_file_findings\\\":[{\\\"provenance\\\":\\\"code-review\\\",\\\"file\\\":\\\"tests/colour.txt\\\",\\\"finding\\\":\\\"the test expects $(cat tests/colour.txt), the widget is $want\\\"}],\\\"overall_findings\\\":[]}\"\nexit 1\n",
    );
    checkout.write(
        ".config/bork.json",
        r#"{"correctness-checker": "check.sh", "max-iterations": 5}"#,
    );
    let first = job(&sim, &checkout, &[answer.clone(), answer]);
    let outcome = first.run(&[]);
    let stderr = &outcome.stderr;
    assert_eq!(outcome.code, 3, "{stderr}");
    assert_eq!(
        outcome.report["iterations"].as_array().map(Vec::len),
        Some(1),
        "the round ends as soon as a finding names the held test\n{stderr}"
    );
    assert!(
        stderr.contains("the checks wait on held edit(s) `tests/colour.txt`"),
        "{stderr}"
    );
    // The log says what failed, one line a finding.
    assert!(
        stderr.contains("  tests/colour.txt: the test expects red, the widget is blue"),
        "{stderr}"
    );
    assert_eq!(
        checkout.read("src/widget.txt"),
        "colour = blue\n",
        "the code edit is applied"
    );
    assert_eq!(
        checkout.read("tests/colour.txt"),
        "red\n",
        "the approved test is held"
    );
    let held = &outcome.report["pending-approvals"][0];
    assert_eq!(held["path"], "tests/colour.txt");
    assert_eq!(
        held["rule"],
        "an approved test: a change to or deletion of it changes the judge"
    );
    let state = sim.state().await;
    let approval = crate::ghsim::pulls_of(&state)
        .into_iter()
        .find(|pull| {
            pull["title"]
                .as_str()
                .is_some_and(|title| title.contains("tests/colour.txt"))
        })
        .expect("an approval pull request for the test");
    let body = approval["body"].as_str().expect("body");
    assert!(body.contains("The checks wait on this change"), "{body}");
    assert!(
        body.contains("tests/colour.txt: the test expects red, the widget is blue"),
        "{body}"
    );
}

/// A new repository refuses pull requests from `GITHUB_TOKEN` (GitHub's 403 "GitHub Actions is
/// not permitted to create or approve pull requests."): the error names the request's method, the
/// repository setting and the App alternative, and the run keeps its record: its iterations, its
/// tokens, and the result branch it pushed with that commit, in the report and the outputs.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_pull_request_names_the_setting_and_the_run_keeps_its_record() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    sim.call(
        "POST",
        "/_sim/faults",
        Some(json!({
            "method": "POST",
            "path": "^/repos/acme/widgets/pulls$",
            "status": 403,
            "count": -1,
            "body": {
                "message": "GitHub Actions is not permitted to create or approve pull requests.",
                "documentation_url": "https://docs.github.com/rest/pulls/pulls#create-a-pull-request"
            }
        })),
        None,
    )
    .await;
    let answers = [json!({"create-or-update": {"src/widget.txt": "colour = blue\n"}})];
    let checkout = sim.checkout();
    let run = job(&sim, &checkout, &answers);
    let outcome = run.run(&[]);
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let error = outcome
        .stderr
        .lines()
        .find(|line| line.contains("ERROR"))
        .unwrap_or_else(|| panic!("{}", outcome.stderr));
    assert!(error.contains("403 to POST /repos/acme/widgets/pulls"), "{error}");
    assert!(
        error.contains("Allow GitHub Actions to create and approve pull requests")
            && error.contains("GitHub App"),
        "{error}"
    );
    // The record: one iteration with its tokens, the pushed branch and its commit.
    assert_eq!(outcome.report["status"], "error");
    assert_eq!(outcome.report["iterations"].as_array().map(Vec::len), Some(1));
    assert!(
        outcome.report["usage"]["input-tokens"].as_u64().unwrap_or(0) > 0,
        "{}",
        outcome.report
    );
    assert_eq!(outcome.report["result-branch"], "bork/main");
    let sha = outcome.report["result-sha"].as_str().expect("result-sha");
    let outputs = std::fs::read_to_string(run.scratch_file("github-output")).expect("outputs");
    assert!(
        outputs.contains(sha) && outputs.contains("\nbork/main\n"),
        "{outputs}"
    );
    let summary = std::fs::read_to_string(run.scratch_file("step-summary")).expect("summary");
    assert!(
        summary.contains("1 iteration") || summary.contains("iterations"),
        "{summary}"
    );
    assert!(
        !outcome.stderr.contains("error after 0 iteration"),
        "{}",
        outcome.stderr
    );
}
