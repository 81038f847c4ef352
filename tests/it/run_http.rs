//! End-to-end runs of the `bork-ci` binary against the fake OpenAI-compatible and Anthropic
//! servers on 127.0.0.1: the loop over real HTTP, retries, the conversation layout that prompt
//! caching relies on, the report's token figures, and the secrets that must never leave the host.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, write_app};
use crate::support::{Outcome, Repo, SPEC, TestContext, app_repo, checker_wanting};

const MODEL: &str = "fake-model-1";
const CHECKER_CONFIG: &str = r#"{"correctness-checker": "check.sh"}"#;

fn repo_with_checker() -> Repo {
    app_repo(CHECKER_CONFIG)
}

/// How to run the binary against a fake.
struct Run<'a> {
    fake: &'a FakeLlm,
    key: &'a str,
    env: Vec<(String, String)>,
    args: Vec<String>,
}

impl<'a> Run<'a> {
    fn new(fake: &'a FakeLlm) -> Self {
        Self {
            fake,
            key: crate::fake_llm::TEST_KEY,
            env: Vec::new(),
            args: Vec::new(),
        }
    }

    fn key(mut self, key: &'a str) -> Self {
        self.key = key;
        self
    }

    fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.to_owned());
        self
    }

    /// Runs `bork-ci run` on `repo` (off the async runtime, so the fake keeps answering).
    async fn on(self, repo: &Repo) -> Outcome {
        let (provider, key_var) = match self.fake.api {
            crate::fake_llm::Api::Openai => ("openai", "OPENAI_API_KEY"),
            crate::fake_llm::Api::Anthropic => ("anthropic", "ANTHROPIC_API_KEY"),
        };
        let mut context = TestContext::on(repo);
        context
            .env("BORK_LLM_PROVIDER", provider)
            .env("BORK_LLM_BASE_URL", self.fake.base_url())
            .env("BORK_LLM_MODEL", MODEL)
            .env("BORK_LLM_MAX_RETRIES", "2")
            .env("BORK_LLM_TIMEOUT_SECS", "10")
            .env(key_var, self.key);
        for (name, value) in &self.env {
            context.env(name, value);
        }
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        context.run_async(&args).await
    }
}

fn iterations(outcome: &Outcome) -> &Vec<Value> {
    outcome.report["iterations"]
        .as_array()
        .unwrap_or_else(|| panic!("no iterations in {}", outcome.report_text))
}

/// The `content` of OpenAI message `index` of a request body.
fn openai_content(body: &Value, index: usize) -> String {
    body["messages"][index]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("message {index} has text content: {body}"))
        .to_owned()
}

/// The number of messages in a request body.
fn message_count(body: &Value) -> usize {
    body["messages"].as_array().expect("messages").len()
}

/// Every request to an OpenAI fake was valid against OpenAI's request schema, named the model and
/// asked for structured output.
fn assert_openai_requests_well_formed(fake: &FakeLlm) {
    assert!(
        fake.schema_violations().is_empty(),
        "{:?}",
        fake.schema_violations()
    );
    for received in fake.received() {
        assert_eq!(received.path, "/v1/chat/completions");
        assert_eq!(received.body["model"], MODEL);
        assert_eq!(received.body["response_format"]["type"], "json_schema");
        assert_eq!(received.body["messages"][0]["role"], "system");
        assert_eq!(received.body["messages"][1]["role"], "user");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_converges_in_one() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(outcome.report["exit-code"], 0);
    assert_eq!(iterations(&outcome).len(), 1);
    assert_eq!(iterations(&outcome)[0]["checker"]["status"], "clean");
    assert_eq!(outcome.report["model"], MODEL);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");

    let received = fake.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {}", crate::fake_llm::TEST_KEY).as_str())
    );
    assert_openai_requests_well_formed(&fake);
    // The prefix holds the packed repository and the spec change.
    let prefix = openai_content(&received[0].body, 1);
    assert!(
        prefix.contains("src/app.txt") && prefix.contains("nothing yet"),
        "{prefix}"
    );
    assert!(prefix.contains("It also prints DONE twice."), "{prefix}");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_converges_in_three() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![
        write_app("first\n"),
        write_app("second\n"),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    let iterations = iterations(&outcome);
    assert_eq!(iterations.len(), 3);
    assert_eq!(iterations[0]["checker"]["status"], "findings");
    assert_eq!(iterations[1]["checker"]["status"], "findings");
    assert_eq!(iterations[2]["checker"]["status"], "clean");
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
    assert_eq!(fake.requests().len(), 3);
    assert_openai_requests_well_formed(&fake);
    assert!(outcome.stderr.contains("iteration 3 of 5"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_prompt_layout_keeps_the_prefix_and_appends_findings() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![write_app("first\n"), write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (&requests[0], &requests[1]);
    // System prompt and first user message are the same bytes, so the provider cache serves them.
    assert_eq!(openai_content(first, 0), openai_content(second, 0));
    assert_eq!(openai_content(first, 1), openai_content(second, 1));
    assert_eq!(message_count(first), 2);
    assert_eq!(message_count(second), 4);
    // Then the model's own answer, verbatim, and the result of iteration 1.
    assert_eq!(second["messages"][2]["role"], "assistant");
    assert_eq!(
        openai_content(second, 2),
        json!({"create-or-update": {"src/app.txt": "first\n"}}).to_string()
    );
    assert_eq!(second["messages"][3]["role"], "user");
    let feedback = openai_content(second, 3);
    assert!(feedback.contains("src/app.txt lacks DONE"), "{feedback}");
    assert!(feedback.contains("iteration 1"), "{feedback}");
    // The prefix shows the tree as it was before the run; the feedback says what was written.
    assert!(feedback.contains("src/app.txt"), "{feedback}");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_never_converges_needs_human_after_five_requests() {
    let repo = repo_with_checker();
    let replies = (0..8).map(|n| write_app(&format!("try {n}\n"))).collect();
    let fake = FakeLlm::openai(replies).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "needs-human");
    assert_eq!(iterations(&outcome).len(), 5);
    assert_eq!(fake.requests().len(), 5);
    // The last changes are kept, and what is left is reported.
    assert_eq!(repo.read("src/app.txt"), "try 4\n");
    assert_eq!(
        outcome.report["findings-left"]["per_file_findings"]
            .as_array()
            .expect("findings")
            .len(),
        1
    );
    // Each request appends to the one before.
    let counts: Vec<usize> = fake.requests().iter().map(message_count).collect();
    assert_eq!(counts, vec![2, 4, 6, 8, 10]);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_without_a_checker_asks_exactly_once() {
    let repo = Repo::new(&[("specs/app.md", SPEC), ("src/app.txt", "nothing yet\n")]);
    repo.write("specs/app.md", &format!("{SPEC}And more.\n"));
    let fake = FakeLlm::openai(vec![write_app("one\n"), write_app("two\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(iterations(&outcome).len(), 1);
    assert_eq!(iterations(&outcome)[0]["checker"]["status"], "absent");
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(repo.read("src/app.txt"), "one\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_rate_limit_with_retry_after_then_success() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![Reply::Status(429, Some(1)), write_app("DONE\n")]).await;
    let started = std::time::Instant::now();
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(iterations(&outcome).len(), 1);
    assert_eq!(fake.requests().len(), 2);
    // `retry-after: 1` was waited out, not ignored.
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    // The retry is the same request.
    let requests = fake.requests();
    assert_eq!(requests[0], requests[1]);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
    assert!(outcome.stderr.contains("429"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_server_error_forever_is_exit_two_naming_provider_model_and_status() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![Reply::Status(500, None)]).await;
    let key = "sk-canary-5000-server-error";
    let outcome = Run::new(&fake)
        .key(key)
        .env("BORK_LLM_MAX_RETRIES", "1")
        .on(&repo)
        .await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "error");
    // One attempt and one retry.
    assert_eq!(fake.requests().len(), 2);
    let error_line = outcome
        .stderr
        .lines()
        .find(|line| line.contains("HTTP 500"))
        .unwrap_or_else(|| panic!("no line names the status: {}", outcome.stderr));
    assert!(error_line.contains("openai"), "{error_line}");
    assert!(error_line.contains(MODEL), "{error_line}");
    assert!(!outcome.stderr.contains(key));
    assert!(!outcome.stdout.contains(key));
    assert!(!outcome.report_text.contains(key));
    assert_eq!(repo.read("src/app.txt"), "nothing yet\n");
}

/// An unusable first answer was asked again once, within the one iteration, and the second,
/// good answer was applied: the run converged after two requests.
fn assert_asked_again_once(outcome: &Outcome, requests: usize, repo: &Repo) {
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let iterations = iterations(outcome);
    assert_eq!(iterations.len(), 1);
    assert_eq!(iterations[0]["parse-retries"], 1);
    assert_eq!(requests, 2);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_malformed_answer_then_recovery_within_the_iteration() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![
        Reply::Answer("I would rather chat about it.".into()),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;

    let requests = fake.requests();
    assert_asked_again_once(&outcome, requests.len(), &repo);
    assert!(iterations(&outcome)[0].get("answer-error").is_none());
    // The second ask carries the bad answer and a message about it, after the same prefix.
    assert_eq!(openai_content(&requests[0], 1), openai_content(&requests[1], 1));
    assert_eq!(message_count(&requests[1]), 4);
    assert_eq!(openai_content(&requests[1], 2), "I would rather chat about it.");
    assert_eq!(requests[1]["messages"][3]["role"], "user");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_fenced_json_answer_is_accepted() {
    let repo = repo_with_checker();
    let answer = format!(
        "```json\n{}\n```",
        json!({"create-or-update": {"src/app.txt": "DONE\n"}})
    );
    let fake = FakeLlm::openai(vec![Reply::Answer(answer)]).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(iterations(&outcome)[0]["parse-retries"], 0);
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_truncated_answer_is_unusable_even_when_it_parses() {
    let repo = repo_with_checker();
    // A cut-off answer that happens to be valid JSON must still not be applied.
    let fake = FakeLlm::openai(vec![
        Reply::Truncated(json!({"create-or-update": {"src/app.txt": "cut\n"}}).to_string()),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_asked_again_once(&outcome, fake.requests().len(), &repo);
    let retry = openai_content(&fake.requests()[1], 3);
    assert!(retry.contains("length") || retry.contains("cut off"), "{retry}");
    let applied = iterations(&outcome)[0]["applied"].as_array().expect("applied");
    assert_eq!(applied.len(), 1);
}

/// The text blocks of Anthropic content, as `(text, has cache_control)`.
fn anthropic_blocks(content: &Value) -> Vec<(String, bool)> {
    content
        .as_array()
        .expect("content blocks")
        .iter()
        .map(|block| {
            (
                block["text"].as_str().unwrap_or_default().to_owned(),
                block["cache_control"]["type"] == "ephemeral",
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_converges_in_two_with_a_cached_prefix() {
    let repo = repo_with_checker();
    let fake = FakeLlm::anthropic(vec![write_app("first\n"), write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(iterations(&outcome).len(), 2);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");

    let received = fake.received();
    assert_eq!(received.len(), 2);
    for request in &received {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some(crate::fake_llm::TEST_KEY));
        assert!(request.header("authorization").is_none());
        assert!(request.header("anthropic-version").is_some());
        assert_eq!(request.body["model"], MODEL);
        // The system prompt and the prefix are marked for the prompt cache.
        let system = anthropic_blocks(&request.body["system"]);
        assert!(
            !system.is_empty() && system.iter().all(|(_, cached)| *cached),
            "{system:?}"
        );
        assert_eq!(request.body["messages"][0]["role"], "user");
        let prefix = anthropic_blocks(&request.body["messages"][0]["content"]);
        assert!(prefix[0].1, "the prefix block has no cache_control");
        assert!(prefix[0].0.contains("src/app.txt"));
        // The answer format is a forced tool.
        assert_eq!(request.body["tool_choice"]["type"], "tool");
    }
    let (first, second) = (&received[0].body, &received[1].body);
    assert_eq!(first["system"].to_string(), second["system"].to_string());
    assert_eq!(
        first["messages"][0].to_string(),
        second["messages"][0].to_string(),
        "the prefix changed between iterations"
    );
    assert_eq!(message_count(first), 1);
    assert!(message_count(second) >= 3, "{second}");
    assert_eq!(second["messages"][1]["role"], "assistant");
    let last = second["messages"]
        .as_array()
        .expect("messages")
        .last()
        .expect("last")
        .clone();
    assert_eq!(last["role"], "user");
    let feedback = anthropic_blocks(&last["content"]);
    assert!(
        feedback
            .iter()
            .any(|(text, _)| text.contains("src/app.txt lacks DONE")),
        "{feedback:?}"
    );

    // Usage per iteration, the second read from the cache.
    let iterations = iterations(&outcome);
    for iteration in iterations {
        assert!(iteration["usage"]["input-tokens"].as_u64().expect("input") > 0);
        assert!(iteration["usage"]["output-tokens"].as_u64().expect("output") > 0);
    }
    assert_eq!(iterations[0]["usage"]["cached-input-tokens"], 0);
    // Input counts cache writes and reads too, not only Anthropic's uncached `input_tokens`.
    let estimate = outcome.report["prompt-tokens-estimate"]
        .as_u64()
        .expect("estimate");
    for iteration in iterations {
        let input = iteration["usage"]["input-tokens"].as_u64().expect("input");
        assert!(
            input >= estimate / 2,
            "input {input} vs prompt estimate {estimate}"
        );
    }
    assert!(
        iterations[1]["usage"]["cached-input-tokens"]
            .as_u64()
            .expect("cached")
            > 0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn report_has_usage_per_iteration_and_a_cost_with_prices() {
    let repo = app_repo(
        r#"{"correctness-checker": "check.sh", "llm": {"prices": {"input-per-mtok": 3.0, "output-per-mtok": 15.0, "cached-input-per-mtok": 0.3}}}"#,
    );
    let fake = FakeLlm::openai(vec![write_app("first\n"), write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);

    let iterations = iterations(&outcome);
    assert_eq!(iterations.len(), 2);
    let mut sum = [0u64; 3];
    for (index, iteration) in iterations.iter().enumerate() {
        let usage = &iteration["usage"];
        let input = usage["input-tokens"].as_u64().expect("input-tokens");
        let output = usage["output-tokens"].as_u64().expect("output-tokens");
        let cached = usage["cached-input-tokens"]
            .as_u64()
            .expect("cached-input-tokens");
        assert!(input > 0 && output > 0, "{usage}");
        assert!(cached <= input, "{usage}");
        if index == 0 {
            assert_eq!(cached, 0, "nothing is cached on the first request");
        } else {
            assert!(
                cached > 0,
                "the fake reports the previous prompt as cached: {usage}"
            );
        }
        sum[0] += input;
        sum[1] += output;
        sum[2] += cached;
    }
    let total = &outcome.report["usage"];
    assert_eq!(total["input-tokens"], sum[0]);
    assert_eq!(total["output-tokens"], sum[1]);
    assert_eq!(total["cached-input-tokens"], sum[2]);
    let cost = outcome.report["cost-usd"].as_f64().expect("cost-usd");
    let expected = ((sum[0] - sum[2]) as f64 * 3.0 + sum[2] as f64 * 0.3 + sum[1] as f64 * 15.0) / 1e6;
    assert!(cost > 0.0);
    assert!((cost - expected).abs() < 1e-9, "{cost} vs {expected}");

    // Without prices there is no cost figure.
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).on(&repo).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(
        outcome.report.get("cost-usd").is_none(),
        "{}",
        outcome.report_text
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn json_log_format_writes_only_json_lines() {
    let repo = repo_with_checker();
    // A retry and a second iteration produce warnings and progress lines.
    let fake = FakeLlm::openai(vec![
        Reply::Status(503, Some(0)),
        write_app("first\n"),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).arg("--log-format").arg("json").on(&repo).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let lines: Vec<&str> = outcome.stderr.lines().collect();
    assert!(lines.len() >= 3, "{}", outcome.stderr);
    for line in lines {
        let value: Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"));
        assert!(value.is_object(), "{line}");
    }
    assert!(outcome.stderr.contains("iteration 2 of 5"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_not_followed_and_is_exit_two() {
    let repo = repo_with_checker();
    let elsewhere = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let fake = FakeLlm::openai(vec![Reply::Redirect(format!(
        "{}/v1/chat/completions",
        elsewhere.url
    ))])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "error");
    assert_eq!(fake.requests().len(), 1, "a redirect is not retried");
    assert!(elsewhere.received().is_empty(), "the second host got a request");
    assert!(outcome.stderr.contains("307"), "{}", outcome.stderr);
    assert_eq!(repo.read("src/app.txt"), "nothing yet\n");
}

// ---- Secrets -------------------------------------------------------------------------------

/// A unique canary value for this test run.
fn canary(tag: &str) -> String {
    format!("sk-canary-{tag}-{}", uuid::Uuid::new_v4().simple())
}

/// The forms of `secret` that must appear nowhere.
fn forms(secret: &str) -> Vec<String> {
    let standard = base64::engine::general_purpose::STANDARD.encode(secret);
    let unpadded = base64::engine::general_purpose::STANDARD_NO_PAD.encode(secret);
    let url_safe = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    vec![secret.to_owned(), standard, unpadded, url_safe]
}

fn assert_absent(secret: &str, place: &str, text: &str) {
    for form in forms(secret) {
        assert!(!text.contains(&form), "{place} holds the secret as {form:?}");
    }
}

/// A checker that writes its environment to `env_file` (outside the repository), then judges
/// like [`checker_wanting`].
fn env_dumping_checker(env_file: &Path) -> String {
    let judging = checker_wanting("src/app.txt", "DONE");
    let body = judging.strip_prefix("#!/bin/sh\n").expect("a shell script");
    format!("#!/bin/sh\nenv >> '{}'\n{body}", env_file.display())
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_neither_outputs_nor_prompts_nor_the_checker() {
    let key = canary("llm");
    let token = canary("gh");
    let outside = tempfile::tempdir().expect("tempdir");
    let env_file: PathBuf = outside.path().join("checker-env.txt");
    let repo = repo_with_checker();
    repo.write("check.sh", &env_dumping_checker(&env_file));
    repo.commit("checker dumps env");
    repo.write("specs/app.md", &format!("{SPEC}It also prints DONE twice.\n"));
    // A model that asks for the key by name gets nothing: it never saw it (X12).
    let fake = FakeLlm::openai(vec![
        Reply::json(&json!({"create-or-update": {
            "src/app.txt": "first\n",
            "src/leak.txt": "the key is $OPENAI_API_KEY and ${GITHUB_TOKEN}\n"
        }})),
        write_app("DONE\n"),
    ])
    .await;
    let private_tmp = tempfile::tempdir().expect("tempdir");
    let outcome = Run::new(&fake)
        .key(&key)
        .env("GITHUB_TOKEN", token.clone())
        .env("GH_TOKEN", token.clone())
        .env("TMPDIR", private_tmp.path().display().to_string())
        .on(&repo)
        .await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 2);
    // The key did go where it belongs: the authorization header.
    assert_eq!(
        fake.received()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    for secret in [&key, &token] {
        assert_absent(secret, "stdout", &outcome.stdout);
        assert_absent(secret, "stderr", &outcome.stderr);
        assert_absent(secret, "the report", &outcome.report_text);
        for (index, body) in fake.requests().iter().enumerate() {
            assert_absent(secret, &format!("request body {index}"), &body.to_string());
        }
        assert_absent(secret, "src/leak.txt", &repo.read("src/leak.txt"));
    }
    assert_eq!(
        repo.read("src/leak.txt"),
        "the key is $OPENAI_API_KEY and ${GITHUB_TOKEN}\n"
    );

    // The checker ran twice, with an environment, but without the secrets.
    let env_dump = std::fs::read_to_string(&env_file).expect("the checker wrote its environment");
    assert!(env_dump.contains("PATH="), "{env_dump}");
    for name in ["OPENAI_API_KEY=", "GITHUB_TOKEN=", "GH_TOKEN="] {
        assert!(
            !env_dump.lines().any(|line| line.starts_with(name)),
            "{name} reached the checker"
        );
    }
    assert_absent(&key, "the checker's environment", &env_dump);
    assert_absent(&token, "the checker's environment", &env_dump);

    // No file left on disk holds them: not in the repository (`.git` included), not in temp (X16).
    for root in [repo.path(), private_tmp.path()] {
        for (path, contents) in files_below(root) {
            let text = String::from_utf8_lossy(&contents);
            assert_absent(&key, &path.display().to_string(), &text);
            assert_absent(&token, &path.display().to_string(), &text);
        }
    }
}

/// Every regular file below `root` with its contents (links not followed).
fn files_below(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                let contents = std::fs::read(&path).expect("read");
                files.push((path, contents));
            }
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn a_custom_key_variable_is_kept_from_the_checker_too() {
    let key = canary("custom");
    let outside = tempfile::tempdir().expect("tempdir");
    let env_file = outside.path().join("checker-env.txt");
    let repo = app_repo(r#"{"correctness-checker": "check.sh", "llm": {"api-key-env": "TEAM_LLM_TOKEN"}}"#);
    repo.write("check.sh", &env_dumping_checker(&env_file));
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    // The default variable holds a decoy; the configured one holds the key.
    let outcome = Run::new(&fake)
        .key("decoy-not-used")
        .env("TEAM_LLM_TOKEN", key.clone())
        .on(&repo)
        .await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(
        fake.received()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str())
    );
    let env_dump = std::fs::read_to_string(&env_file).expect("the checker wrote its environment");
    assert!(env_dump.contains("PATH="), "{env_dump}");
    assert!(!env_dump.contains("TEAM_LLM_TOKEN="), "{env_dump}");
    assert_absent(&key, "the checker's environment", &env_dump);
    assert_absent(&key, "stderr", &outcome.stderr);
    assert_absent(&key, "the report", &outcome.report_text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_echoed_by_the_server_stays_out_of_the_error() {
    let key = canary("echo");
    let repo = repo_with_checker();
    let body = json!({"error": {
        "message": format!("Incorrect API key provided: {key}. Request was: Authorization: Bearer {key}"),
        "type": "invalid_request_error", "param": null, "code": "invalid_api_key"
    }});
    let fake = FakeLlm::openai(vec![Reply::Raw {
        status: 401,
        content_type: "application/json".into(),
        body: body.to_string().into_bytes(),
    }])
    .await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 1, "a 401 is not retried");
    assert!(outcome.stderr.contains("401"), "{}", outcome.stderr);
    assert_absent(&key, "stderr", &outcome.stderr);
    assert_absent(&key, "stdout", &outcome.stdout);
    assert_absent(&key, "the report", &outcome.report_text);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repo_file_holding_the_key_is_withheld_and_named() {
    let key = canary("inrepo");
    let repo = repo_with_checker();
    repo.write("src/settings.env", &format!("OPENAI_API_KEY={key}\n"));
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    // The file that holds the key stops itself, not the run: named (with the variable), not sent.
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    for request in fake.requests() {
        assert_absent(&key, "a request", &request.to_string());
    }
    assert!(outcome.stderr.contains("OPENAI_API_KEY"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("src/settings.env"), "{}", outcome.stderr);
    assert_absent(&key, "stderr", &outcome.stderr);
    assert_absent(&key, "stdout", &outcome.stdout);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn symlinks_to_outside_secrets_are_named_not_read() {
    let key = canary("environ");
    let outside_secret = canary("outside");
    let outside = tempfile::tempdir().expect("tempdir");
    let secret_file = outside.path().join("secret.txt");
    std::fs::write(&secret_file, format!("{outside_secret}\n")).expect("write");
    let repo = repo_with_checker();
    std::os::unix::fs::symlink(&secret_file, repo.path().join("outside-link.txt")).expect("symlink");
    // The process environment holds the key (S18).
    std::os::unix::fs::symlink("/proc/self/environ", repo.path().join("leak.txt")).expect("symlink");
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    let body = requests[0].to_string();
    assert_absent(&outside_secret, "the prompt", &body);
    assert_absent(&key, "the prompt", &body);
    // The links are named with their targets instead.
    let prefix = openai_content(&requests[0], 1);
    assert!(prefix.contains("outside-link.txt"), "{prefix}");
    assert!(
        prefix.contains("leak.txt") && prefix.contains("/proc/self/environ"),
        "{prefix}"
    );
    // Neither the link nor its target was touched.
    assert_eq!(
        std::fs::read_to_string(&secret_file).expect("read"),
        format!("{outside_secret}\n")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn trace_logging_never_shows_the_key() {
    let key = canary("trace");
    let repo = repo_with_checker();
    let fake = FakeLlm::anthropic(vec![Reply::Status(529, Some(0)), write_app("DONE\n")]).await;
    let outcome = Run::new(&fake)
        .key(&key)
        .env("BORK_LOG", "trace")
        .arg("--log-format")
        .arg("json")
        .on(&repo)
        .await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 2);
    assert!(outcome.stderr.lines().count() >= 3, "{}", outcome.stderr);
    assert_absent(&key, "trace-level stderr", &outcome.stderr);
    assert_absent(&key, "stdout", &outcome.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_repo_file_holding_the_github_token_is_never_sent() {
    let token = canary("ghinrepo");
    let repo = repo_with_checker();
    repo.write("deploy/token.txt", &format!("{token}\n"));
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).env("GITHUB_TOKEN", token.clone()).on(&repo).await;

    // Like the LLM key, a file holding any registered secret is withheld from the model and named.
    for request in fake.requests() {
        assert_absent(&token, "a request", &request.to_string());
    }
    assert!(outcome.stderr.contains("GITHUB_TOKEN"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("deploy/token.txt"), "{}", outcome.stderr);
    assert_absent(&token, "stderr", &outcome.stderr);
    assert_absent(&token, "stdout", &outcome.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_key_is_exit_two_before_any_request() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let outcome = Run::new(&fake).key("").on(&repo).await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(fake.received().is_empty(), "the fake got a request");
    assert!(outcome.stderr.contains("OPENAI_API_KEY"), "{}", outcome.stderr);
    assert_eq!(repo.read("src/app.txt"), "nothing yet\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_redirect_does_not_forward_the_key() {
    let key = canary("redirect");
    let repo = repo_with_checker();
    let elsewhere = FakeLlm::anthropic(vec![write_app("DONE\n")]).await;
    let fake = FakeLlm::anthropic(vec![Reply::Redirect(format!("{}/v1/messages", elsewhere.url))]).await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 1);
    assert!(elsewhere.received().is_empty(), "the second host got a request");
    assert!(outcome.stderr.contains("redirect"), "{}", outcome.stderr);
    assert_absent(&key, "stderr", &outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_echoed_key_in_an_error_is_scrubbed() {
    let key = canary("anthropic-echo");
    let repo = repo_with_checker();
    let body = json!({
        "type": "error",
        "error": {"type": "invalid_request_error", "message": format!("bad header x-api-key: {key}")},
        "request_id": "req_echo"
    });
    let fake = FakeLlm::anthropic(vec![Reply::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: body.to_string().into_bytes(),
    }])
    .await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(fake.requests().len(), 1, "a 400 is not retried");
    assert!(outcome.stderr.contains("400"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("anthropic"), "{}", outcome.stderr);
    assert_absent(&key, "stderr", &outcome.stderr);
    assert_absent(&key, "the report", &outcome.report_text);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_truncated_answer_then_a_good_one() {
    let repo = repo_with_checker();
    let fake = FakeLlm::anthropic(vec![
        Reply::Truncated("{\"create-or-update\": {\"src/app.txt\": \"DO".into()),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_asked_again_once(&outcome, fake.requests().len(), &repo);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_model_hits_the_request_timeout_and_is_exit_two() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![Reply::delayed(
        std::time::Duration::from_secs(5),
        write_app("DONE\n"),
    )])
    .await;
    let started = std::time::Instant::now();
    let outcome = Run::new(&fake)
        .env("BORK_LLM_TIMEOUT_SECS", "1")
        .env("BORK_LLM_MAX_RETRIES", "1")
        .on(&repo)
        .await;

    // Two attempts that each waited for the 5 s answer would take 10 s; the margin is for a
    // loaded machine starting the binary.
    assert!(started.elapsed() < std::time::Duration::from_secs(9));
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "error");
    assert_eq!(fake.requests().len(), 2);
    assert!(
        outcome.stderr.contains("sent nothing for 1s (llm.timeout-secs)"),
        "{}",
        outcome.stderr
    );
    assert_eq!(repo.read("src/app.txt"), "nothing yet\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_run_timeout_ends_needs_human_keeping_the_work() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![
        write_app("first\n"),
        Reply::delayed(std::time::Duration::from_secs(120), write_app("DONE\n")),
    ])
    .await;
    let started = std::time::Instant::now();
    // The budget leaves a loaded machine room for the first iteration (a request and a checker
    // run); the second answer comes long after it, so only the run timeout can end the run early.
    let outcome = Run::new(&fake).env("BORK_RUN_TIMEOUT_SECS", "8").on(&repo).await;

    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "needs-human");
    assert!(
        outcome.report["stop-reason"]
            .as_str()
            .expect("stop-reason")
            .contains("run-timeout-secs"),
        "{}",
        outcome.report_text
    );
    // The first iteration's change is kept.
    assert_eq!(repo.read("src/app.txt"), "first\n");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_token_budget_ends_needs_human_after_one_request() {
    let repo = repo_with_checker();
    let replies = (0..5).map(|n| write_app(&format!("try {n}\n"))).collect();
    let fake = FakeLlm::openai(replies).await;
    let outcome = Run::new(&fake)
        .env("BORK_LLM_MAX_TOTAL_TOKENS", "10")
        .on(&repo)
        .await;

    assert_eq!(outcome.code, 1, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "needs-human");
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(iterations(&outcome).len(), 1);
    assert_eq!(repo.read("src/app.txt"), "try 0\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_beyond_the_cap_ends_at_once() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![Reply::Status(429, Some(3600)), write_app("DONE\n")]).await;
    let started = std::time::Instant::now();
    let outcome = Run::new(&fake).on(&repo).await;

    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "error");
    assert_eq!(fake.requests().len(), 1);
    assert!(outcome.stderr.contains("429"), "{}", outcome.stderr);
    assert!(outcome.stderr.contains("rate limited"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_fenced_text_answer_is_accepted() {
    let repo = repo_with_checker();
    let answer = format!(
        "```json\n{}\n```\n",
        json!({"create-or-update": {"src/app.txt": "DONE\n"}})
    );
    let fake = FakeLlm::anthropic(vec![Reply::AnswerText(answer)]).await;
    let outcome = Run::new(&fake).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_lines_show_the_elapsed_time() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![
        Reply::delayed(std::time::Duration::from_millis(1_200), write_app("first\n")),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);

    let line = outcome
        .stderr
        .lines()
        .find(|line| line.contains("iteration 2 of 5: asking the model"))
        .unwrap_or_else(|| panic!("no progress line: {}", outcome.stderr));
    let seconds: u64 = line
        .split('(')
        .nth(1)
        .and_then(|rest| rest.split("s elapsed").next())
        .and_then(|number| number.trim().parse().ok())
        .unwrap_or_else(|| panic!("no elapsed time in {line:?}"));
    assert!(seconds >= 1, "{line}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusal_is_an_unusable_answer_asked_again_within_the_iteration() {
    let repo = repo_with_checker();
    let fake = FakeLlm::openai(vec![
        Reply::Refusal("I cannot help with that.".into()),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).on(&repo).await;
    assert_asked_again_once(&outcome, fake.received().len(), &repo);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_writes_the_key_into_a_file_is_never_applied() {
    let key = canary("answer");
    let encoded = base64::engine::general_purpose::STANDARD.encode(key.as_bytes());
    let repo = repo_with_checker();
    let before = repo.read("src/app.txt");
    // The endpoint echoes the key into an edit, then its base64, then answers properly.
    let fake = FakeLlm::openai(vec![
        write_app(&format!("DONE\nkey={key}\n")),
        write_app(&format!("DONE\nkey={encoded}\n")),
        write_app("DONE\n"),
    ])
    .await;
    let outcome = Run::new(&fake).key(&key).on(&repo).await;

    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_ne!(before, "DONE\n");
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
    // Neither answer reached the tree, a later request, the report or the log.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "{}", outcome.stderr);
    for request in &requests {
        assert_absent(&key, "a request", &request.to_string());
    }
    assert!(
        outcome.report_text.contains("OPENAI_API_KEY"),
        "the refusal names the variable: {}",
        outcome.report_text
    );
    assert_absent(&key, "stderr", &outcome.stderr);
    assert_absent(&key, "stdout", &outcome.stdout);
    assert_absent(&key, "the report", &outcome.report_text);
}
