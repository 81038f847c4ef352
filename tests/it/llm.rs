//! The LLM providers against fake servers on 127.0.0.1: request bodies, answers, retries,
//! timeouts, redirects, refusals, unreadable bodies, and the key kept out of every error.

use std::time::{Duration, Instant};

use bork_ci::llm::{
    Conversation, FinishReason, LlmError, LlmSettings, Provider, ProviderKind, ResponseFormat, Turn,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY, openai_request_validator};

const CANARY: &str = "sk-canary-9f8e7d6c5b4a";

use crate::fake_llm::provider;

fn conversation() -> Conversation {
    Conversation {
        system: "You edit repositories. Answer with JSON only.".into(),
        prefix: "<file path=\"src/a.rs\">fn main() {}</file>".into(),
        turns: vec![
            Turn::assistant(r#"{"create-or-update":{"src/a.rs":"x"},"delete":[]}"#),
            Turn::user("Findings: src/a.rs does not compile."),
        ],
    }
}

fn edit_format() -> ResponseFormat {
    ResponseFormat {
        name: "edits".into(),
        schema: json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["create-or-update", "delete"],
            "properties": {
                "create-or-update": {"type": "object", "additionalProperties": {"type": "string"}},
                "delete": {"type": "array", "items": {"type": "string"}}
            }
        }),
    }
}

const EDITS: &str = r#"{"create-or-update":{"src/a.rs":"fn main() {}\n"},"delete":[]}"#;

fn assert_secret_free(error: &LlmError) {
    for shown in [error.to_string(), format!("{error:?}")] {
        assert!(!shown.contains(CANARY), "key leaked: {shown}");
        assert!(!shown.contains(TEST_KEY), "key leaked: {shown}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_happy_path_sends_a_schema_valid_request() {
    let fake = FakeLlm::openai(vec![Reply::Answer(EDITS.into())]).await;
    let mut settings = fake.settings("gpt-4o");
    settings.max_output_tokens = 4096;
    let provider = provider(settings);
    let completion = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("completion");
    assert_eq!(completion.text, EDITS);
    assert_eq!(completion.finish, FinishReason::Stop);
    assert!(completion.usage.input_tokens > 0 && completion.usage.output_tokens > 0);

    let received = fake.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(
        received[0].header("authorization"),
        Some(format!("Bearer {TEST_KEY}").as_str())
    );
    let body = &received[0].body;
    assert_eq!(body["model"], "gpt-4o");
    // A base URL that is not OpenAI's gets the field other servers read.
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("max_completion_tokens").is_none());
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|message| message["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(body["messages"][0]["content"], conversation().system);
    assert_eq!(body["messages"][1]["content"], conversation().prefix);
    assert_eq!(body["response_format"]["type"], "json_schema");
    assert_eq!(body["response_format"]["json_schema"]["name"], "edits");
    assert_eq!(
        body["response_format"]["json_schema"]["schema"],
        edit_format().schema
    );
    // A map of paths to contents is outside the strict subset.
    assert_eq!(body["response_format"]["json_schema"]["strict"], false);

    let validator = openai_request_validator();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(fake.schema_violations().is_empty());
    assert!(!validator.is_valid(&json!({"model": "gpt-4o", "messages": []})));
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_strict_schema_is_requested_strictly() {
    let fake = FakeLlm::openai(vec![Reply::Answer("{\"ok\":true}".into())]).await;
    let format = ResponseFormat {
        name: "verdict".into(),
        schema: json!({"type": "object", "additionalProperties": false,
            "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}),
    };
    provider(fake.settings("gpt-4o"))
        .complete(&Conversation::default(), Some(&format))
        .await
        .expect("completion");
    let body = &fake.requests()[0];
    assert_eq!(body["response_format"]["json_schema"]["strict"], true);
    // No system prompt: the prefix is the first message.
    assert_eq!(body["messages"][0]["role"], "user");
    assert!(fake.schema_violations().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_happy_path_caches_the_prefix_and_forces_the_tool() {
    let answer = r#"{"create-or-update": {"a": "1", "a": "2"}, "delete": []}"#;
    let fake = FakeLlm::anthropic(vec![Reply::Answer(answer.into()), Reply::Answer(answer.into())]).await;
    let mut settings = fake.settings("claude-sonnet-4-5");
    settings.max_output_tokens = 2048;
    let provider = provider(settings);
    let completion = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("completion");
    // The tool input arrives byte for byte: duplicate keys stay visible to the parser.
    assert_eq!(completion.text, answer);
    assert_eq!(completion.finish, FinishReason::Stop);

    let received = fake.received();
    assert_eq!(received[0].path, "/v1/messages");
    assert_eq!(received[0].header("x-api-key"), Some(TEST_KEY));
    assert_eq!(received[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(received[0].header("authorization"), None);
    let body = &received[0].body;
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 2048);
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": conversation().system, "cache_control": {"type": "ephemeral"}}])
    );
    let messages = body["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|message| message["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(
        messages[0]["content"],
        json!([{"type": "text", "text": conversation().prefix, "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(messages[1]["content"][0]["text"], conversation().turns[0].text);
    assert_eq!(body["tool_choice"], json!({"type": "tool", "name": "edits"}));
    assert_eq!(body["tools"][0]["name"], "edits");
    assert_eq!(body["tools"][0]["input_schema"], edit_format().schema);

    // The second call reads the prefix from the cache.
    let second = provider
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("second completion");
    assert!(second.usage.cached_input_tokens > 0);
    assert!(second.usage.cached_input_tokens <= second.usage.input_tokens);
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_text_answer_works_without_the_tool_call() {
    let fenced = format!("```json\n{EDITS}\n```");
    let fake = FakeLlm::anthropic(vec![Reply::AnswerText(fenced.clone())]).await;
    let completion = provider(fake.settings("claude"))
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("completion");
    assert_eq!(completion.text, fenced);
}

#[tokio::test(flavor = "multi_thread")]
async fn fenced_json_passes_through_untouched() {
    let fenced = format!("```json\n{EDITS}\n```\n");
    for fake in [
        FakeLlm::openai(vec![Reply::Answer(fenced.clone())]).await,
        FakeLlm::anthropic(vec![Reply::Answer(fenced.clone())]).await,
    ] {
        let completion = provider(fake.settings("m"))
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("completion");
        assert_eq!(completion.text, fenced);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limit_with_retry_after_is_waited_out() {
    let fake = FakeLlm::openai(vec![Reply::Status(429, Some(1)), Reply::Answer(EDITS.into())]).await;
    let started = Instant::now();
    let completion = provider(fake.settings("gpt-4o"))
        .complete(&conversation(), None)
        .await
        .expect("completion after one retry");
    assert_eq!(completion.text, EDITS);
    assert!(started.elapsed() >= Duration::from_secs(1), "retry-after ignored");
    assert_eq!(fake.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_and_overload_are_retried() {
    let fake = FakeLlm::anthropic(vec![
        Reply::Status(500, None),
        Reply::Status(529, None),
        Reply::Answer("{}".into()),
    ])
    .await;
    let completion = provider(fake.settings("claude"))
        .complete(&conversation(), None)
        .await
        .expect("completion after two retries");
    assert_eq!(completion.text, "{}");
    assert_eq!(fake.requests().len(), 3);
    // Every attempt sends the same body.
    let bodies = fake.requests();
    assert!(bodies.windows(2).all(|pair| pair[0] == pair[1]));
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_retries_name_provider_model_and_status() {
    let fake = FakeLlm::openai(vec![Reply::Status(503, None)]).await;
    let mut settings = fake.settings("gpt-4o-mini");
    settings.api_key = Some(CANARY.into());
    settings.max_retries = 2;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("always 503");
    assert!(
        matches!(
            error,
            LlmError::Status {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{error:?}"
    );
    let shown = error.to_string();
    for part in ["openai", "gpt-4o-mini", "503", "fake failure"] {
        assert!(shown.contains(part), "`{part}` missing from: {shown}");
    }
    assert_secret_free(&error);
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn exhausted_rate_limit_is_rate_limited() {
    let fake = FakeLlm::anthropic(vec![Reply::Status(429, Some(0))]).await;
    let mut settings = fake.settings("claude");
    settings.max_retries = 1;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("always 429");
    assert!(
        matches!(
            error,
            LlmError::RateLimited {
                status: 429,
                attempts: 2,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("anthropic"), "{error}");
    assert!(error.is_transient());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_beyond_the_cap_ends_at_once() {
    let fake = FakeLlm::openai(vec![Reply::Status(429, Some(3600))]).await;
    let started = Instant::now();
    let error = provider(fake.settings("gpt-4o"))
        .complete(&conversation(), None)
        .await
        .expect_err("asked to wait an hour");
    assert!(
        matches!(error, LlmError::RateLimited { retry_after: Some(delay), attempts: 1, .. } if delay == Duration::from_secs(3600)),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn client_errors_are_not_retried() {
    let fake = FakeLlm::openai(vec![Reply::Status(400, None), Reply::Answer("{}".into())]).await;
    let error = provider(fake.settings("gpt-4o"))
        .complete(&conversation(), None)
        .await
        .expect_err("400");
    assert!(
        matches!(
            error,
            LlmError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.is_transient());
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_server_hits_the_deadline_and_is_retried() {
    let fake = FakeLlm::openai(vec![Reply::delayed(
        Duration::from_secs(3),
        Reply::Answer("{}".into()),
    )])
    .await;
    let mut settings = fake.settings("gpt-4o");
    settings.timeout = Duration::from_millis(300);
    settings.max_retries = 1;
    let started = Instant::now();
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("too slow");
    assert!(
        matches!(error, LlmError::Timeout { attempts: 2, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("gpt-4o"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(fake.requests().len(), 2);
}

/// A server that sends headers, then one body byte at a time (threat model R12): never silent
/// for `llm.timeout-secs`, so `llm.max-request-secs` bounds the whole request.
#[tokio::test(flavor = "multi_thread")]
async fn a_trickling_body_hits_the_whole_request_deadline() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                let _ = socket.read(&mut buffer).await;
                let head =
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for _ in 0..1000 {
                    if socket.write_all(b" ").await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
        }
    });
    let mut settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
    settings.base_url = Some(format!("http://{address}/v1"));
    settings.api_key = Some(TEST_KEY.into());
    settings.timeout = Duration::from_millis(700);
    settings.max_request = Duration::from_millis(900);
    settings.max_retries = 2;
    let started = Instant::now();
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("trickle");
    assert!(
        matches!(error, LlmError::TooLong { attempts: 1, .. }),
        "not retried: {error:?}"
    );
    assert!(error.to_string().contains("llm.max-request-secs"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_not_followed() {
    let second = FakeLlm::anthropic(vec![Reply::Answer("{}".into())]).await;
    let first = FakeLlm::anthropic(vec![Reply::Redirect(format!(
        "{}/v1/messages?key=abc",
        second.url
    ))])
    .await;
    let mut settings = first.settings("claude");
    settings.api_key = Some(CANARY.into());
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("redirect");
    assert!(
        matches!(error, LlmError::Redirect { status: 307, .. }),
        "{error:?}"
    );
    let shown = error.to_string();
    assert!(shown.contains(&second.url), "{shown}");
    assert!(!shown.contains("key=abc"), "{shown}");
    assert_secret_free(&error);
    assert_eq!(first.requests().len(), 1);
    assert!(second.requests().is_empty(), "the redirect was followed");
}

#[tokio::test(flavor = "multi_thread")]
async fn truncated_answers_finish_with_length() {
    for fake in [
        FakeLlm::openai(vec![Reply::Truncated("{\"create-or-update\":{\"a\":\"x".into())]).await,
        FakeLlm::anthropic(vec![Reply::Truncated("{\"create-or-update\":{\"a\":\"x".into())]).await,
    ] {
        let completion = provider(fake.settings("m"))
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("a truncated answer is still an answer");
        assert_eq!(completion.finish, FinishReason::Length);
        assert_eq!(completion.text, "{\"create-or-update\":{\"a\":\"x");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_errors() {
    for fake in [
        FakeLlm::openai(vec![Reply::Refusal("I can't help with that.".into())]).await,
        FakeLlm::anthropic(vec![Reply::Refusal("I can't help with that.".into())]).await,
    ] {
        let error = provider(fake.settings("m"))
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect_err("refusal");
        assert!(matches!(error, LlmError::Refused { .. }), "{error:?}");
        assert!(error.to_string().contains("can't help"), "{error}");
        assert_eq!(fake.requests().len(), 1, "a refusal is not retried");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_and_non_utf8_bodies_are_errors() {
    let bodies: [&[u8]; 3] = [
        b"",
        b"{\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"\xff\xfe\"},\"finish_reason\":\"stop\"}]}",
        b"<html>gateway</html>",
    ];
    for body in bodies {
        let fake = FakeLlm::openai(vec![Reply::Raw {
            status: 200,
            content_type: "application/json".into(),
            body: body.to_vec(),
        }])
        .await;
        let error = provider(fake.settings("gpt-4o"))
            .complete(&conversation(), None)
            .await
            .expect_err("unreadable");
        assert!(matches!(error, LlmError::InvalidResponse { .. }), "{error:?}");
        assert!(error.to_string().contains("gpt-4o"), "{error}");
    }
    let fake = FakeLlm::anthropic(vec![Reply::Raw {
        status: 200,
        content_type: "application/json".into(),
        body: br#"{"id":"msg","type":"message","role":"assistant","model":"m","content":[],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":0}}"#.to_vec(),
    }])
    .await;
    let error = provider(fake.settings("claude"))
        .complete(&conversation(), None)
        .await
        .expect_err("no content");
    assert!(matches!(error, LlmError::EmptyAnswer { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_error_body_echoing_the_key_is_scrubbed() {
    let echo = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {CANARY}","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}}}"#
    );
    let fake = FakeLlm::openai(vec![Reply::Raw {
        status: 401,
        content_type: "application/json".into(),
        body: echo.into_bytes(),
    }])
    .await;
    let mut settings = fake.settings("gpt-4o");
    settings.api_key = Some(CANARY.into());
    let provider = provider(settings);
    let error = provider.complete(&conversation(), None).await.expect_err("401");
    assert!(matches!(error, LlmError::Status { status: 401, .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("Incorrect API key provided: [redacted]"),
        "{error}"
    );
    assert_secret_free(&error);
    assert!(!format!("{provider:?}").contains(CANARY));
    assert!(!provider.describe().contains(CANARY));
    // The key went out in the header, as it should.
    assert_eq!(
        fake.received()[0].header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_in_the_base_url_query_stays_out_of_errors() {
    // Nothing listens on this port: the connection is refused on every attempt.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let mut settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
    settings.base_url = Some(format!("http://127.0.0.1:{port}/v1?key={CANARY}"));
    settings.api_key = Some(CANARY.into());
    settings.max_retries = 1;
    let provider = provider(settings);
    assert!(!provider.describe().contains(CANARY), "{}", provider.describe());
    let error = provider
        .complete(&conversation(), None)
        .await
        .expect_err("refused");
    assert!(
        matches!(error, LlmError::Transport { attempts: 2, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("openai"), "{error}");
    assert_secret_free(&error);
}

#[test]
fn a_missing_key_names_the_variable() {
    let settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
    let error = Provider::new(settings).expect_err("no key");
    assert!(
        matches!(&error, LlmError::MissingApiKey { env, .. } if env == "OPENAI_API_KEY"),
        "{error:?}"
    );
    assert!(error.to_string().contains("OPENAI_API_KEY"));

    let mut settings = LlmSettings::new(ProviderKind::Anthropic, "claude");
    settings.api_key_env = "MY_CLAUDE_KEY".into();
    settings.api_key = Some("".into());
    let error = Provider::new(settings).expect_err("empty key");
    assert!(error.to_string().contains("MY_CLAUDE_KEY"), "{error}");
}

#[test]
fn describe_names_provider_model_and_host() {
    let mut settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
    settings.api_key = Some(CANARY.into());
    let provider = Provider::new(settings).expect("provider");
    assert_eq!(provider.describe(), "openai gpt-4o at https://api.openai.com/v1");
    let mut settings = LlmSettings::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
    settings.api_key = Some(CANARY.into());
    settings.base_url = Some("http://user:pw@127.0.0.1:9/".into());
    let provider = Provider::new(settings).expect("provider");
    assert_eq!(
        provider.describe(),
        "anthropic claude-sonnet-4-5 at http://127.0.0.1:9"
    );
    assert!(!format!("{provider:?}").contains(CANARY));
}

#[test]
fn bad_base_urls_are_settings_errors() {
    for url in ["not a url", "ftp://host/v1", "file:///etc/passwd"] {
        let mut settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
        settings.api_key = Some(CANARY.into());
        settings.base_url = Some(url.into());
        let error = Provider::new(settings).expect_err(url);
        assert!(matches!(error, LlmError::Settings { .. }), "{url}: {error:?}");
        assert_secret_free(&error);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn scripted_answers_follow_the_assistant_turns() {
    let dir = tempfile::tempdir().expect("temp dir");
    let script = dir.path().join("answers.json");
    std::fs::write(
        &script,
        r#"{"answers": ["```json\n{}\n```", {"create-or-update": {"a.txt": "hi\n"}}]}"#,
    )
    .expect("write script");
    let mut settings = LlmSettings::new(ProviderKind::Scripted, "canned");
    settings.script = Some(script.clone());
    let provider = Provider::new(settings).expect("scripted provider");
    assert!(
        provider.describe().contains("scripted"),
        "{}",
        provider.describe()
    );
    assert_eq!(provider.kind(), ProviderKind::Scripted);

    let mut conversation = Conversation {
        system: "system".into(),
        prefix: "prefix".into(),
        turns: vec![],
    };
    let first = provider.complete(&conversation, None).await.expect("first");
    assert_eq!(first.text, "```json\n{}\n```");
    assert!(first.usage.input_tokens > 0);
    // User turns do not move the index; assistant turns do.
    conversation.turns.push(Turn::user("extra"));
    assert_eq!(
        provider.complete(&conversation, None).await.expect("again").text,
        first.text
    );
    conversation.turns.push(Turn::assistant(first.text));
    conversation.turns.push(Turn::user("parse error"));
    let second = provider.complete(&conversation, None).await.expect("second");
    let parsed: Value = serde_json::from_str(&second.text).expect("compact JSON");
    assert_eq!(parsed, json!({"create-or-update": {"a.txt": "hi\n"}}));
    assert!(!second.text.contains(' '));
    conversation.turns.push(Turn::assistant(second.text));
    let error = provider.complete(&conversation, None).await.expect_err("ran out");
    assert!(matches!(error, LlmError::Script { .. }), "{error:?}");
    assert!(error.to_string().contains("ran out"), "{error}");
}

#[test]
fn scripted_without_a_script_is_an_error() {
    let settings = LlmSettings::new(ProviderKind::Scripted, "canned");
    let error = Provider::new(settings).expect_err("no script");
    assert!(matches!(error, LlmError::Script { .. }), "{error:?}");
}
