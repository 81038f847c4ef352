//! Run-level budgets across approval rounds and jobs: with `--wait-for-approval`, a reviewer's
//! decision starts a second round of the loop in the same job, and `llm.max-total-tokens` and
//! `llm.max-cost-usd` count both rounds; a resumed job counts what the earlier job spent; the
//! report covers every round and its totals equal what the model server reported.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply};
use crate::ghsim::GithubSim;
use crate::support::{Outcome, Repo, TestContext};

const BOT_TOKEN: &str = "t-bot-budget-7070";

/// Clean until the spec asks for a round widget that the code does not describe.
const CHECKER: &str = "#!/bin/sh\n\
if grep -q round specs/widget.md && ! grep -q round src/widget.txt; then\n\
  echo '{\"per_file_findings\":[{\"provenance\":\"code-review\",\"file\":\"src/widget.txt\",\"finding\":\"the spec says round\"}],\"overall_findings\":[]}'\n\
  exit 1\n\
fi\n\
echo '{\"per_file_findings\":[],\"overall_findings\":[]}'\n";

fn answers() -> Vec<Reply> {
    vec![
        // Round 1: the code changes, the spec edit is held for approval; the checker is clean.
        Reply::json(&json!({"create-or-update": {
            "src/widget.txt": "colour = blue\n",
            "specs/widget.md": "A widget is blue and round.\n"
        }})),
        // Round 2 (after approval) and any later call: the code still misses the spec.
        Reply::json(&json!({"create-or-update": {"src/widget.txt": "colour = blue\n"}})),
    ]
}

/// A fresh checkout of the simulator's repository with the checker beside it (not committed).
fn checkout(sim: &GithubSim) -> Repo {
    let repo = sim.checkout();
    repo.write("check.sh", CHECKER);
    repo
}

/// A job of this run in Actions on the simulator, with the fake model.
fn job<'r>(sim: &GithubSim, fake: &FakeLlm, repo: &'r Repo) -> TestContext<'r> {
    let mut context = TestContext::on(repo);
    context
        .github(sim, BOT_TOKEN)
        .openai(fake)
        .env("BORK_CORRECTNESS_CHECKER", "check.sh");
    context
}

/// The tokens one round takes: a run that stops after round 1, awaiting approval.
async fn tokens_of_one_round() -> u64 {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let fake = FakeLlm::openai(answers()).await;
    let repo = checkout(&sim);
    let outcome = job(&sim, &fake, &repo).run_async(&[]).await;
    assert_eq!(outcome.code, 3, "{}", outcome.stderr);
    let (input, output) = fake.usage_returned();
    input + output
}

fn approval_pr(state: &Value) -> Option<u64> {
    let pulls = state["repos"]["acme/widgets"]["pulls"]
        .as_array()
        .cloned()
        .or_else(|| {
            state["repos"]
                .as_array()
                .and_then(|repos| repos.iter().find(|r| r["full_name"] == "acme/widgets"))
                .and_then(|repo| repo["pulls"].as_array().cloned())
        })?;
    pulls
        .iter()
        .find(|pull| pull["base"]["ref"] == "bork/main" || pull["base"] == "bork/main")
        .and_then(|pull| pull["number"].as_u64())
}

/// Waits for the approval pull request of the held spec edit and approves it as a writer.
async fn approve_the_held_edit(sim: &GithubSim) {
    let mut number = None;
    for _ in 0..600 {
        if let Some(found) = approval_pr(&sim.state().await) {
            number = Some(found);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let number = number.expect("an approval pull request was opened");
    let review = sim
        .call(
            "POST",
            &format!("/repos/acme/widgets/pulls/{number}/reviews"),
            Some(json!({"event": "APPROVE"})),
            Some("t-alice"),
        )
        .await;
    assert_eq!(review["state"], "APPROVED", "{review}");
}

/// One job with `--wait-for-approval`: round 1 holds the spec edit, a writer approves it, and
/// round 2 runs in the same job.
async fn two_rounds_in_one_job(sim: &GithubSim, fake: &FakeLlm, budget: &[(&str, String)]) -> Outcome {
    let repo = checkout(sim);
    let mut context = job(sim, fake, &repo);
    for (name, value) in budget {
        context.env(name, value);
    }
    let running = context.spawn(&["--wait-for-approval", "2m"]);
    approve_the_held_edit(sim).await;
    let outcome = running.finish().await;
    assert_eq!(outcome.code, 1, "needs-human: {}", outcome.stderr);
    outcome
}

/// The run ended `needs-human` because the budget named `budget_key` ran out.
fn assert_stopped_by(report: &Value, budget_key: &str) {
    assert_eq!(report["status"], "needs-human", "{report:#}");
    assert!(
        report["stop-reason"]
            .as_str()
            .is_some_and(|reason| reason.contains(budget_key)),
        "{report:#}"
    );
}

/// The numbers of the report's iterations, in order.
fn iteration_numbers(report: &Value) -> Vec<u64> {
    report["iterations"]
        .as_array()
        .expect("iterations")
        .iter()
        .filter_map(|iteration| iteration["number"].as_u64())
        .collect()
}

/// The report of a run stopped by a budget after two rounds (one model call each): numbered
/// across rounds, and totals that equal every request the model server answered.
fn assert_two_rounds_add_up(report: &Value, fake: &FakeLlm, budget_key: &str, stderr: &str) {
    assert_stopped_by(report, budget_key);
    // Two rounds, one model call each: the second round did not start with a fresh budget.
    assert_eq!(fake.requests().len(), 2, "{stderr}");
    assert_run_totals(report, fake, 2, 2);
}

/// The report's `run-totals`: these rounds and iterations, and every token the fake served.
fn assert_run_totals(report: &Value, fake: &FakeLlm, rounds: u64, iterations: u64) {
    let (input, output) = fake.usage_returned();
    let field = |key: &str| report["run-totals"][key].as_u64().unwrap_or(0);
    assert_eq!(field("rounds"), rounds, "{report:#}");
    assert_eq!(field("iterations"), iterations, "{report:#}");
    assert_eq!(field("input-tokens") + field("output-tokens"), input + output);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_budget_spans_approval_rounds_and_the_report_adds_up() {
    let one_round = tokens_of_one_round().await;
    // Round 1 fits; rounds 1 and 2 together do not.
    let budget = one_round + one_round / 2;

    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let fake = FakeLlm::openai(answers()).await;
    let outcome =
        two_rounds_in_one_job(&sim, &fake, &[("BORK_LLM_MAX_TOTAL_TOKENS", budget.to_string())]).await;
    let report = &outcome.report;
    assert_two_rounds_add_up(report, &fake, "llm.max-total-tokens", &outcome.stderr);
    let numbers = iteration_numbers(report);
    assert_eq!(numbers, vec![1, 2], "iterations are numbered across rounds");

    // The report's totals are exactly what the model server reported.
    let (input, output_tokens) = fake.usage_returned();
    let field = |section: &str, key: &str| report[section][key].as_u64().unwrap_or(0);
    assert_eq!(
        field("usage", "input-tokens") + field("review-usage", "input-tokens"),
        input
    );
    assert_eq!(
        field("usage", "output-tokens") + field("review-usage", "output-tokens"),
        output_tokens
    );
    let per_iteration: u64 = report["iterations"]
        .as_array()
        .expect("iterations")
        .iter()
        .map(|iteration| {
            iteration["usage"]["input-tokens"].as_u64().unwrap_or(0)
                + iteration["usage"]["output-tokens"].as_u64().unwrap_or(0)
        })
        .sum();
    assert_eq!(per_iteration, input + output_tokens);
    assert!(input + output_tokens > budget && one_round <= budget);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cost_budget_spans_approval_rounds() {
    let one_round = tokens_of_one_round().await;
    // $1,000 per million tokens, cached or not: one token costs a tenth of a cent, so one round
    // costs `one_round` tenths of a cent; round 1 fits, rounds 1 and 2 together do not.
    let budget_usd = (one_round + one_round / 2) as f64 / 1000.0;

    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let fake = FakeLlm::openai(answers()).await;
    let prices = [
        ("BORK_LLM_PRICES_INPUT_PER_MTOK", "1000".to_owned()),
        ("BORK_LLM_PRICES_OUTPUT_PER_MTOK", "1000".to_owned()),
        ("BORK_LLM_PRICES_CACHED_INPUT_PER_MTOK", "1000".to_owned()),
        ("BORK_LLM_MAX_COST_USD", budget_usd.to_string()),
    ];
    let outcome = two_rounds_in_one_job(&sim, &fake, &prices).await;
    let report = &outcome.report;
    assert_two_rounds_add_up(report, &fake, "llm.max-cost-usd", &outcome.stderr);
    let (input, output) = fake.usage_returned();
    let cost = report["cost-usd"].as_f64().expect("the report states the cost");
    let expected = (input + output) as f64 / 1000.0;
    assert!((cost - expected).abs() < 1e-9, "cost {cost}, expected {expected}");
    assert!(cost > budget_usd, "the run stopped past its budget, not before");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_job_counts_what_the_earlier_jobs_spent() {
    let one_round = tokens_of_one_round().await;
    let budget = (one_round + one_round / 2).to_string();

    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let fake = FakeLlm::openai(answers()).await;

    // Job 1 holds the spec edit and ends awaiting approval (exit 3).
    let first = checkout(&sim);
    let outcome = job(&sim, &fake, &first)
        .env("BORK_LLM_MAX_TOTAL_TOKENS", &budget)
        .run_async(&[])
        .await;
    assert_eq!(outcome.code, 3, "{}", outcome.stderr);
    let after_first = fake.usage_returned();

    // A writer approves; job 2, on a fresh checkout, resumes from the saved state.
    approve_the_held_edit(&sim).await;
    let second = checkout(&sim);
    let outcome = job(&sim, &fake, &second)
        .env("BORK_LLM_MAX_TOTAL_TOKENS", &budget)
        .run_async(&[])
        .await;
    let stderr = &outcome.stderr;
    assert_eq!(outcome.code, 1, "needs-human: {stderr}");

    let report = &outcome.report;
    assert_stopped_by(report, "llm.max-total-tokens");
    assert_eq!(fake.requests().len(), 2, "one model call per job: {stderr}");
    let numbers = iteration_numbers(report);
    assert_eq!(numbers, vec![2], "job 2 numbers its iteration on from job 1's");
    // This job's usage is its own request; the run's totals are both jobs'.
    let (input, output) = fake.usage_returned();
    let field = |section: &str, key: &str| report[section][key].as_u64().unwrap_or(0);
    assert_eq!(
        field("usage", "input-tokens") + field("usage", "output-tokens"),
        input + output - after_first.0 - after_first.1
    );
    assert_run_totals(report, &fake, 2, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_round_that_cannot_start_keeps_the_earlier_rounds_in_the_report() {
    // The held spec edit is long: once approved, the next round's prompt is far larger.
    let long_spec = "A widget is blue and round, and stays round. ".repeat(150);
    let answers = || {
        vec![Reply::json(&json!({"create-or-update": {
            "src/widget.txt": "colour = blue\n",
            "specs/widget.md": long_spec
        }}))]
    };
    // What round 1's prompt takes, from a run that stops after it.
    let estimate = {
        let sim = GithubSim::start();
        sim.setup(BOT_TOKEN).await;
        let fake = FakeLlm::openai(answers()).await;
        let repo = checkout(&sim);
        let outcome = job(&sim, &fake, &repo).run_async(&[]).await;
        assert_eq!(outcome.code, 3, "{}", outcome.stderr);
        outcome.report["prompt-tokens-estimate"]
            .as_u64()
            .expect("the report states the prompt's size")
    };

    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let fake = FakeLlm::openai(answers()).await;
    let repo = checkout(&sim);
    let mut context = job(&sim, &fake, &repo);
    context.env("BORK_CONTEXT_BUDGET_TOKENS", (estimate + 200).to_string());
    let running = context.spawn(&["--wait-for-approval", "2m"]);
    approve_the_held_edit(&sim).await;
    let outcome = running.finish().await;
    let report = &outcome.report;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(report["status"], "error", "{report:#}");
    assert!(
        report["error"]
            .as_str()
            .is_some_and(|error| error.contains("context-budget-tokens")),
        "{report:#}"
    );
    // Round 1 is still in the report, and so is what it spent.
    assert_eq!(
        report["iterations"].as_array().map(Vec::len),
        Some(1),
        "{report:#}"
    );
    assert_eq!(fake.requests().len(), 1);
    assert_run_totals(report, &fake, 1, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_answer_without_usage_is_estimated_and_the_token_budget_still_stops_the_run() {
    // Like llama-cpp-python's server: streamed answers carry no usage whatever is asked. The
    // answer never satisfies the checker; a budget smaller than one prompt must stop the run.
    let fake = FakeLlm::openai_with(
        vec![Reply::json(
            &json!({"create-or-update": {"src/app.txt": "not yet\n"}}),
        )],
        crate::fake_llm::Quirks {
            ignores_include_usage: true,
            ..Default::default()
        },
    )
    .await;
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("src/app.txt", "nothing\n"),
        (
            "check.sh",
            &crate::support::checker_wanting("src/app.txt", "DONE"),
        ),
        (".config/bork.json", r#"{"correctness-checker": "check.sh"}"#),
    ]);
    repo.write("specs/app.md", "The app prints DONE, loudly.\n");
    let summary = tempfile::tempdir().expect("tempdir");
    let summary_file = summary.path().join("summary.md");
    let mut context = TestContext::on(&repo);
    context
        .openai(&fake)
        .env("BORK_LLM_STREAM", "true")
        .env("BORK_LLM_MAX_TOTAL_TOKENS", "100")
        .env("GITHUB_STEP_SUMMARY", &summary_file);
    let outcome = context.run_async(&[]).await;
    let report = &outcome.report;
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_stopped_by(report, "llm.max-total-tokens");
    assert_eq!(
        fake.requests().len(),
        1,
        "one answer, then the budget stops the run"
    );
    assert!(fake.requests()[0]["stream"] == true, "the answer was streamed");
    let usage = &report["usage"];
    assert!(usage["input-tokens"].as_u64().unwrap_or(0) > 100, "{usage}");
    assert!(usage["output-tokens"].as_u64().unwrap_or(0) > 0, "{usage}");
    assert_eq!(usage["estimated-answers"], 1, "{usage}");
    assert_eq!(report["iterations"][0]["usage"]["estimated-answers"], 1);
    let warned = outcome.stderr.matches("reported no token usage").count();
    assert_eq!(warned, 1, "warned once: {}", outcome.stderr);
    let summary = std::fs::read_to_string(&summary_file).expect("summary");
    assert!(summary.contains("estimated"), "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_counts_no_prompt_tokens_is_estimated_and_the_token_budget_still_stops_the_run() {
    // A server that reports `prompt_tokens: 0` with its completion tokens: the request's tokens
    // are estimated, so a 3,000-token budget stops a run whose prompt alone is about 6,000.
    let fake = FakeLlm::openai_with(
        vec![Reply::json(
            &json!({"create-or-update": {"src/app.txt": "not yet\n"}}),
        )],
        crate::fake_llm::Quirks {
            reports_no_prompt_tokens: true,
            ..Default::default()
        },
    )
    .await;
    let big = "a line of the repository that the prompt carries\n".repeat(500);
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("src/app.txt", "nothing\n"),
        ("src/notes.txt", &big),
        (
            "check.sh",
            &crate::support::checker_wanting("src/app.txt", "DONE"),
        ),
        (".config/bork.json", r#"{"correctness-checker": "check.sh"}"#),
    ]);
    repo.write("specs/app.md", "The app prints DONE, loudly.\n");
    let mut context = TestContext::on(&repo);
    context.openai(&fake).env("BORK_LLM_MAX_TOTAL_TOKENS", "3000");
    let outcome = context.run_async(&[]).await;
    let report = &outcome.report;
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_stopped_by(report, "llm.max-total-tokens");
    assert_eq!(
        fake.requests().len(),
        1,
        "one answer, then the budget stops the run"
    );
    let usage = &report["usage"];
    assert!(usage["input-tokens"].as_u64().unwrap_or(0) > 3000, "{usage}");
    assert_eq!(usage["estimated-answers"], 1, "{usage}");
    assert!(
        outcome.stderr.contains("reported no token usage"),
        "{}",
        outcome.stderr
    );
}
