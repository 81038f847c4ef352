//! Real endpoints' behaviour, against fakes shaped after real servers: structured
//! output negotiated down when a server rejects it, the output cap, usage that adds up, and the
//! reviewer's failures named.

use bork_ci::llm::StructuredOutput;
use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Quirks, Reply, conversation, edit_format, write_app};
use crate::support::{Repo, SPEC, app_repo, bork, report};

use crate::fake_llm::provider;

const EDITS: &str = r#"{"create-or-update":{"src/a.rs":"fn main() {}\n"},"delete":[]}"#;

fn response_format_type(body: &Value) -> Option<&str> {
    body.get("response_format")?.get("type")?.as_str()
}

/// llama-cpp-python answers HTTP 500 to `json_schema`: the provider falls back to `json_object`
/// at once (no retries of the 500), and keeps using it for later calls.
#[tokio::test(flavor = "multi_thread")]
async fn llama_cpp_python_rejecting_json_schema_falls_back_to_json_object_and_remembers() {
    let fake = FakeLlm::openai_with(
        vec![Reply::Answer(EDITS.into())],
        Quirks {
            rejects_json_schema: true,
            ..Quirks::default()
        },
    )
    .await;
    let provider = provider(fake.settings("qwen2-0_5b"));
    let first = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("falls back");
    assert_eq!(first.text, EDITS);
    let second = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("remembered");
    assert_eq!(second.text, EDITS);
    let kinds: Vec<Option<String>> = fake
        .requests()
        .iter()
        .map(|body| response_format_type(body).map(str::to_owned))
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some("json_schema".to_owned()),
            Some("json_object".to_owned()),
            Some("json_object".to_owned())
        ]
    );
    assert_eq!(
        provider.learned().structured_output,
        Some(StructuredOutput::JsonObject)
    );
}

/// A server that rejects `json_object` too ends at no `response_format` at all.
#[tokio::test(flavor = "multi_thread")]
async fn each_rejection_steps_down_one_mode() {
    let rejected = |what: &str| {
        Reply::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": format!("'response_format.type' {what} is not supported"), "type": "invalid_request_error", "param": "response_format", "code": null}})
            .to_string()
            .into_bytes(),
    }
    };
    let fake = FakeLlm::openai(vec![
        rejected("json_schema"),
        rejected("json_object"),
        Reply::Answer(EDITS.into()),
    ])
    .await;
    let provider = provider(fake.settings("local"));
    provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("ends without a format");
    let kinds: Vec<Option<String>> = fake
        .requests()
        .iter()
        .map(|body| response_format_type(body).map(str::to_owned))
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some("json_schema".to_owned()),
            Some("json_object".to_owned()),
            None
        ]
    );
    assert_eq!(provider.learned().structured_output, Some(StructuredOutput::None));
}

/// An error that names no structured-output feature is not a reason to drop the format.
#[tokio::test(flavor = "multi_thread")]
async fn an_unrelated_400_keeps_the_format_and_fails() {
    let fake = FakeLlm::openai(vec![Reply::Status(400, None)]).await;
    let provider = provider(fake.settings("gpt-4o"));
    provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect_err("400");
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(provider.learned().structured_output, None);
}

/// Anthropic: a gateway that refuses tools gets the plain prompt (no tool, no tool_choice).
#[tokio::test(flavor = "multi_thread")]
async fn anthropic_gateway_rejecting_tools_gets_no_tool() {
    let fake = FakeLlm::anthropic(vec![
        Reply::Raw {
            status: 400,
            content_type: "application/json".into(),
            body: json!({"type": "error", "error": {"type": "invalid_request_error", "message": "tools: Extra inputs are not permitted"}})
                .to_string()
                .into_bytes(),
        },
        Reply::AnswerText(format!("```json\n{EDITS}\n```")),
    ])
    .await;
    let provider = provider(fake.settings("claude-3-5-sonnet-20241022"));
    let completion = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("falls back to no tool");
    assert!(completion.text.contains(EDITS), "{}", completion.text);
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[0].get("tools").is_some());
    assert!(requests[1].get("tools").is_none(), "{}", requests[1]);
    assert!(requests[1].get("tool_choice").is_none());
    assert_eq!(provider.learned().structured_output, Some(StructuredOutput::None));
}

/// A configured `json-object` or `none` is sent from the first request.
#[tokio::test(flavor = "multi_thread")]
async fn configured_modes_are_sent_as_such() {
    for (mode, expected) in [
        (StructuredOutput::JsonObject, Some("json_object")),
        (StructuredOutput::None, None),
    ] {
        let fake = FakeLlm::openai(vec![Reply::Answer(EDITS.into())]).await;
        let mut settings = fake.settings("local");
        settings.structured_output = mode;
        provider(settings)
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("answers");
        assert_eq!(response_format_type(&fake.requests()[0]), expected, "{mode}");
    }
}

/// gpt-4o allows 16,384 output tokens and says so in its 400: the cap is lowered to that once,
/// and kept.
#[tokio::test(flavor = "multi_thread")]
async fn a_cap_over_gpt_4o_maximum_is_retried_once_with_the_stated_maximum() {
    let fake = FakeLlm::openai_with(
        vec![Reply::Answer(EDITS.into())],
        Quirks {
            max_output_tokens: Some(16_384),
            ..Quirks::default()
        },
    )
    .await;
    let mut settings = fake.settings("gpt-4o");
    settings.max_output_tokens = 32_000;
    let provider = provider(settings);
    for _ in 0..2 {
        provider
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("answers at the model's maximum");
    }
    let caps: Vec<u64> = fake
        .requests()
        .iter()
        .map(|body| body["max_tokens"].as_u64().expect("max_tokens"))
        .collect();
    assert_eq!(caps, vec![32_000, 16_384, 16_384]);
    assert_eq!(provider.learned().max_output_tokens, Some(16_384));
}

/// Claude 3.5 Sonnet allows 8,192 output tokens; Anthropic's 400 says so.
#[tokio::test(flavor = "multi_thread")]
async fn a_cap_over_claude_3_5_maximum_is_retried_once_with_the_stated_maximum() {
    let fake = FakeLlm::anthropic_with(
        vec![Reply::Answer(EDITS.into())],
        Quirks {
            max_output_tokens: Some(8192),
            ..Quirks::default()
        },
    )
    .await;
    let mut settings = fake.settings("claude-3-5-sonnet-20241022");
    settings.max_output_tokens = 32_000;
    let provider = provider(settings);
    provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("answers at the model's maximum");
    let caps: Vec<u64> = fake
        .requests()
        .iter()
        .map(|body| body["max_tokens"].as_u64().expect("max_tokens"))
        .collect();
    assert_eq!(caps, vec![32_000, 8192]);
}

/// The default cap is accepted as it is by both vendors' smaller models.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_cap_fits_gpt_4o_and_claude_3_5() {
    assert_eq!(bork_ci::llm::DEFAULT_MAX_OUTPUT_TOKENS, 8192);
    assert_eq!(
        bork_ci::config::Config::default().llm.max_output_tokens,
        bork_ci::llm::DEFAULT_MAX_OUTPUT_TOKENS
    );
    let openai = FakeLlm::openai_with(
        vec![Reply::Answer(EDITS.into())],
        Quirks {
            max_output_tokens: Some(16_384),
            ..Quirks::default()
        },
    )
    .await;
    let anthropic = FakeLlm::anthropic_with(
        vec![Reply::Answer(EDITS.into())],
        Quirks {
            max_output_tokens: Some(8192),
            ..Quirks::default()
        },
    )
    .await;
    for fake in [&openai, &anthropic] {
        provider(fake.settings("m"))
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("the default cap is accepted");
        assert_eq!(fake.requests().len(), 1);
    }
}

/// A server that keeps refusing the cap it stated is not asked again and again.
#[tokio::test(flavor = "multi_thread")]
async fn the_cap_is_lowered_once_per_call() {
    let fake = FakeLlm::openai(vec![Reply::Raw {
        status: 400,
        content_type: "application/json".into(),
        body: json!({"error": {"message": "max_tokens is too large: 9000. This model supports at most 4096 completion tokens, whereas you provided 9000.", "type": "invalid_request_error", "param": "max_tokens", "code": "invalid_value"}})
            .to_string()
            .into_bytes(),
    }])
    .await;
    let mut settings = fake.settings("m");
    settings.max_output_tokens = 9000;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("still refused");
    assert!(error.to_string().contains("HTTP 400"), "{error}");
    assert_eq!(fake.requests().len(), 2);
}

/// `llm.max-tokens-field` overrides the endpoint's choice.
#[tokio::test(flavor = "multi_thread")]
async fn the_cap_field_can_be_chosen() {
    let fake = FakeLlm::openai(vec![Reply::Answer(EDITS.into())]).await;
    let mut settings = fake.settings("o3-mini");
    settings.max_tokens_field = Some(bork_ci::llm::MaxTokensField::MaxCompletionTokens);
    provider(settings)
        .complete(&conversation(), None)
        .await
        .expect("answers");
    let body = &fake.requests()[0];
    assert_eq!(body["max_completion_tokens"], 8192);
    assert!(body.get("max_tokens").is_none());
}

/// What a run of the binary left behind.
struct Outcome {
    code: i32,
    report: Value,
    stdout: String,
    stderr: String,
}

/// Runs `bork-ci ARGS` on `repo` against `fake` with `env` (off the async runtime, so the fake
/// keeps answering); `--report` is added for `run`.
async fn bork_on(repo: &Repo, fake: &FakeLlm, args: &[&str], env: &[(&str, String)]) -> Outcome {
    let scratch = tempfile::tempdir().expect("tempdir");
    let report_path = scratch.path().join("report.json");
    let (provider, key_var) = match fake.api {
        crate::fake_llm::Api::Openai => ("openai", "OPENAI_API_KEY"),
        crate::fake_llm::Api::Anthropic => ("anthropic", "ANTHROPIC_API_KEY"),
    };
    let mut command = bork();
    command.args(args).arg("--repo").arg(repo.path());
    if args.first() == Some(&"run") {
        command.arg("--report").arg(&report_path);
    }
    command
        .env("BORK_LLM_PROVIDER", provider)
        .env("BORK_LLM_BASE_URL", fake.base_url())
        .env("BORK_LLM_MODEL", "fake-model-1")
        .env("BORK_LLM_MAX_RETRIES", "1")
        .env("BORK_LLM_TIMEOUT_SECS", "10")
        .env(key_var, crate::fake_llm::TEST_KEY);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("bork-ci runs");
    let report = if report_path.exists() {
        report(&report_path)
    } else {
        Value::Null
    };
    Outcome {
        code: output.status.code().unwrap_or(-1),
        report,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// End to end: the fallback is logged once, and the next iteration's edit step (another process)
/// starts from `json_object`.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_against_llama_cpp_python_logs_the_fallback_once_and_keeps_it() {
    let fake = FakeLlm::openai_with(
        vec![write_app("not yet\n"), write_app("DONE\n")],
        Quirks {
            rejects_json_schema: true,
            ..Quirks::default()
        },
    )
    .await;
    let repo = app_repo(r#"{"correctness-checker": "check.sh"}"#);
    let outcome = bork_on(&repo, &fake, &["run"], &[]).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(
        outcome.stderr.matches("rejected structured output").count(),
        1,
        "{}",
        outcome.stderr
    );
    assert!(outcome.stderr.contains("json-object"), "{}", outcome.stderr);
    let kinds: Vec<Option<String>> = fake
        .requests()
        .iter()
        .map(|body| response_format_type(body).map(str::to_owned))
        .collect();
    assert_eq!(
        kinds,
        vec![
            Some("json_schema".to_owned()),
            Some("json_object".to_owned()),
            Some("json_object".to_owned())
        ],
        "the second iteration starts from json_object"
    );
}

/// A completion reporting more output tokens than the cap is logged, naming the field.
#[tokio::test(flavor = "multi_thread")]
async fn output_over_the_cap_is_logged() {
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let repo = app_repo(r#"{"correctness-checker": "check.sh"}"#);
    let env = [
        ("BORK_LLM_MAX_OUTPUT_TOKENS", "3".to_owned()),
        ("BORK_LLM_MAX_TOKENS_FIELD", "max_completion_tokens".to_owned()),
    ];
    let outcome = bork_on(&repo, &fake, &["run"], &env).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(fake.requests()[0]["max_completion_tokens"], 3);
    assert!(
        outcome.stderr.contains("more than the cap of 3"),
        "{}",
        outcome.stderr
    );
    assert!(
        outcome.stderr.contains("llm.max-tokens-field"),
        "{}",
        outcome.stderr
    );
}

/// `BORK_LLM_STRUCTURED_OUTPUT` and `review.llm.structured-output` are read, and `bork-ci config`
/// says where they came from.
#[tokio::test(flavor = "multi_thread")]
async fn structured_output_is_configurable_for_the_model_and_the_reviewer() {
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let reviewer = FakeLlm::openai(vec![Reply::json(&json!({
        "schema_version": "1.0", "prompt_version": "1.0.0", "findings": []
    }))])
    .await;
    let config = json!({
        "correctness-checker": "check.sh",
        "review": {"enabled": true, "llm": {"base-url": reviewer.base_url(), "structured-output": "none"}}
    });
    let repo = app_repo(&config.to_string());
    let env = [("BORK_LLM_STRUCTURED_OUTPUT", "json-object".to_owned())];
    let outcome = bork_on(&repo, &fake, &["run"], &env).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert_eq!(response_format_type(&fake.requests()[0]), Some("json_object"));
    let review_requests = reviewer.requests();
    assert_eq!(review_requests.len(), 1);
    assert!(review_requests[0].get("response_format").is_none());

    let shown = bork_on(&repo, &fake, &["config"], &env).await;
    assert_eq!(shown.code, 0, "{}", shown.stderr);
    let line = shown
        .stdout
        .lines()
        .find(|line| line.starts_with("llm.structured-output "))
        .unwrap_or_else(|| panic!("{}", shown.stdout));
    assert!(line.contains("json-object"), "{line}");
    assert!(line.contains("BORK_LLM_STRUCTURED_OUTPUT"), "{line}");
    let review_line = shown
        .stdout
        .lines()
        .find(|line| line.starts_with("review.llm.structured-output "))
        .unwrap_or_else(|| panic!("{}", shown.stdout));
    assert!(review_line.contains("none"), "{review_line}");
}

fn usage_of(value: &Value) -> (u64, u64) {
    (
        value["input-tokens"].as_u64().expect("input-tokens"),
        value["output-tokens"].as_u64().expect("output-tokens"),
    )
}

/// Every call counts: refused, cut off, unparsable and empty answers, a retried 5xx,
/// the reviewer's refused review. The report's totals equal what the fakes reported.
#[tokio::test(flavor = "multi_thread")]
async fn the_report_usage_is_the_sum_of_every_call() {
    let fake = FakeLlm::openai(vec![
        Reply::Refusal("I cannot help with that.".into()),
        Reply::Truncated(r#"{"create-or-update": {"src/app.txt": "DO"#.into()),
        Reply::Answer("not JSON at all".into()),
        Reply::Answer(String::new()),
        Reply::Status(500, None),
        write_app("not yet\n"),
        write_app("DONE\n"),
    ])
    .await;
    let reviewer = FakeLlm::openai(vec![
        Reply::Refusal("I will not review this.".into()),
        Reply::json(&json!({"schema_version": "1.0", "prompt_version": "1.0.0", "findings": []})),
    ])
    .await;
    let config = json!({
        "correctness-checker": "check.sh",
        "review": {"enabled": true, "llm": {"base-url": reviewer.base_url()}}
    });
    let repo = app_repo(&config.to_string());
    let outcome = bork_on(&repo, &fake, &["run"], &[]).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let iterations = outcome.report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 4, "{}", outcome.report);
    assert_eq!(fake.requests().len(), 7);
    assert_eq!(reviewer.requests().len(), 2);

    let (input, output) = fake.usage_returned();
    assert!(input > 0 && output > 0);
    assert_eq!(usage_of(&outcome.report["usage"]), (input, output));
    let summed = iterations.iter().fold((0, 0), |(i, o), iteration| {
        let (di, do_) = usage_of(&iteration["usage"]);
        (i + di, o + do_)
    });
    assert_eq!(summed, (input, output), "iterations add up to the total");
    assert_eq!(
        usage_of(&outcome.report["review-usage"]),
        reviewer.usage_returned(),
        "the refused review counts too"
    );
}

fn http_error(status: u16, message: &str) -> Reply {
    Reply::Raw {
        status,
        content_type: "application/json".into(),
        body: json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
            .to_string()
            .into_bytes(),
    }
}

/// A reviewer that cannot be reached is named with its status and the server's message, on
/// stderr and in the report.
#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_failure_names_its_cause_in_the_run() {
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let reviewer = FakeLlm::openai(vec![http_error(503, "the review pool is draining")]).await;
    let config = json!({
        "correctness-checker": "check.sh",
        "max-iterations": 1,
        "review": {"enabled": true, "llm": {"base-url": reviewer.base_url()}}
    });
    let repo = app_repo(&config.to_string());
    let outcome = bork_on(&repo, &fake, &["run"], &[]).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    for shown in [
        outcome.stderr.clone(),
        outcome.report["error"].to_string(),
        outcome.report["iterations"][0]["reviewer"].to_string(),
    ] {
        assert!(shown.contains("HTTP 503"), "{shown}");
        assert!(shown.contains("the review pool is draining"), "{shown}");
    }
    assert!(
        outcome.stderr.contains("the reviewer failed to run"),
        "{}",
        outcome.stderr
    );
}

/// `bork-ci review` with an unreachable reviewer exits 2 with an error object on stdout.
#[tokio::test(flavor = "multi_thread")]
async fn bork_ci_review_failing_prints_an_error_object() {
    let fake = FakeLlm::openai(vec![http_error(503, "the review pool is draining")]).await;
    let repo = Repo::new(&[("src/lib.txt", "one\n")]);
    repo.write("src/lib.txt", "one\ntwo\n");
    for format in ["findings", "review-result"] {
        let outcome = bork_on(&repo, &fake, &["review", "--format", format], &[]).await;
        assert_eq!(outcome.code, 2, "{}", outcome.stderr);
        let error: Value = serde_json::from_str(&outcome.stdout).expect("JSON on stdout");
        let text = error["error"].as_str().unwrap_or_else(|| panic!("{error}"));
        assert!(text.contains("HTTP 503"), "{text}");
        assert!(text.contains("the review pool is draining"), "{text}");
        assert!(outcome.stderr.contains("HTTP 503"), "{}", outcome.stderr);
    }
}

/// A real checker whose command finding carries bytes that are not UTF-8 and a
/// lone surrogate escape: the finding is kept with the placeholder and reaches the model.
#[tokio::test(flavor = "multi_thread")]
async fn a_checker_with_non_utf8_command_output_is_a_finding_not_a_failure() {
    let checker = concat!(
        "#!/bin/sh\n",
        "if grep -q DONE src/app.txt; then echo '{\"per_file_findings\":[],\"overall_findings\":[]}'; exit 0; fi\n",
        "printf '{\"overall_findings\":[{\"provenance\":\"command\",\"command\":\"./run-tests\",",
        "\"stdout\":\"\\211PNG\\377\\376\",\"stderr\":\"half \\\\ud800 pair\",\"exit-code\":1}]}\\n'\n",
        "exit 1\n"
    );
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", checker),
        (".config/bork.json", r#"{"correctness-checker": "check.sh"}"#),
    ]);
    repo.write("specs/app.md", &format!("{SPEC}It also prints DONE twice.\n"));
    let fake = FakeLlm::openai(vec![write_app("not yet\n"), write_app("DONE\n")]).await;
    let outcome = bork_on(&repo, &fake, &["run"], &[]).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    let first = &outcome.report["iterations"][0];
    assert_eq!(first["checker"]["status"], "findings", "{first}");
    let finding = &first["findings"]["overall_findings"][0];
    assert_eq!(finding["stdout"], "<non-UTF8 output>", "{finding}");
    assert_eq!(finding["stderr"], "<non-UTF8 output>", "{finding}");
    assert_eq!(finding["command"], "./run-tests");
    let second = fake.requests()[1].to_string();
    assert!(second.contains("<non-UTF8 output>"), "the model hears of it");
}

/// `BORK_LLM_STREAM=false` sends no `stream`; `BORK_LLM_MAX_REQUEST_SECS` is read; `bork-ci
/// config` names both sources, and the defaults (streaming on, 1800 s).
#[tokio::test(flavor = "multi_thread")]
async fn stream_settings_are_configurable() {
    let fake = FakeLlm::openai(vec![write_app("DONE\n")]).await;
    let repo = app_repo(r#"{"correctness-checker": "check.sh"}"#);
    let defaults = bork_on(&repo, &fake, &["config"], &[]).await;
    for expected in ["llm.stream", "llm.max-request-secs", "llm.max-output-tokens"] {
        let line = defaults
            .stdout
            .lines()
            .find(|line| line.starts_with(&format!("{expected} ")))
            .unwrap_or_else(|| panic!("{}", defaults.stdout));
        assert!(line.ends_with("# default"), "{line}");
    }
    assert!(defaults.stdout.contains("llm.max-request-secs"));
    let env = [
        ("BORK_LLM_STREAM", "false".to_owned()),
        ("BORK_LLM_MAX_REQUEST_SECS", "900".to_owned()),
    ];
    let outcome = bork_on(&repo, &fake, &["run"], &env).await;
    assert_eq!(outcome.code, 0, "{}", outcome.stderr);
    assert!(fake.requests()[0].get("stream").is_none());
    let shown = bork_on(&repo, &fake, &["config"], &env).await;
    for (key, value, source) in [
        ("llm.stream", "false", "BORK_LLM_STREAM"),
        ("llm.max-request-secs", "900", "BORK_LLM_MAX_REQUEST_SECS"),
    ] {
        let line = shown
            .stdout
            .lines()
            .find(|line| line.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{}", shown.stdout));
        assert!(line.contains(value) && line.contains(source), "{line}");
    }
    let zero = bork_on(
        &repo,
        &fake,
        &["config"],
        &[("BORK_LLM_MAX_REQUEST_SECS", "0".to_owned())],
    )
    .await;
    assert_eq!(zero.code, 2);
    assert!(zero.stderr.contains("llm.max-request-secs"), "{}", zero.stderr);
}
