//! Streaming: answers as server-sent events from OpenAI-compatible and Anthropic
//! fakes and as AWS event-stream frames from Bedrock fakes (`converse-stream`),
//! `llm.timeout-secs` as the longest silence and `llm.max-request-secs` as the whole bound,
//! progress while a long answer streams, usage from the stream's events, and the fallback to
//! whole answers for servers that do not stream.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bork_ci::llm::{LlmError, LlmSettings, ProviderKind, Usage};
use serde_json::{Value, json};

use crate::fake_llm::{
    FakeLlm, Quirks, Reply, Step, TEST_KEY, TimedServer, bedrock_event, bedrock_exception, bedrock_settings,
    bedrock_stream, conversation, edit_format, slow_openai_stream,
};

use crate::fake_llm::provider;

const EDITS: &str =
    r#"{"create-or-update":{"src/a.rs":"fn main() { println!(\"streamed\"); }\n"},"delete":[]}"#;

fn timed_settings(server: &TimedServer) -> LlmSettings {
    let mut settings = LlmSettings::new(ProviderKind::Openai, "slow-model");
    settings.base_url = Some(format!("{}/v1", server.url));
    settings.api_key = Some(TEST_KEY.into());
    settings.max_retries = 0;
    settings
}

/// A stream that takes far longer than `llm.timeout-secs` but is never silent that long
/// succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_stream_longer_than_the_silence_limit_succeeds() {
    let server = TimedServer::start(
        "text/event-stream",
        slow_openai_stream(EDITS, 8, Duration::from_millis(350)),
    )
    .await;
    let mut settings = timed_settings(&server);
    settings.timeout = Duration::from_secs(1);
    let started = Instant::now();
    let completion = provider(settings)
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("a slow stream is alive");
    assert!(
        started.elapsed() > Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(completion.text, EDITS);
    assert_eq!(
        completion.usage,
        Usage {
            input_tokens: 100,
            output_tokens: 8,
            cached_input_tokens: 0,
            estimated_answers: 0,
        },
        "usage from the stream's last chunk"
    );
    let body = &server.requests()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

/// A stream that goes silent for longer than `llm.timeout-secs` fails, naming the silence and
/// the setting; what it reported before is still counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_goes_silent_fails_naming_the_silence() {
    let mut steps = slow_openai_stream(EDITS, 4, Duration::from_millis(50));
    steps.truncate(4);
    steps.push(Step::Wait(Duration::from_secs(10)));
    let server = TimedServer::start("text/event-stream", steps).await;
    let mut settings = timed_settings(&server);
    settings.timeout = Duration::from_millis(800);
    settings.max_retries = 1;
    let started = Instant::now();
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("silence");
    assert!(
        matches!(error, LlmError::Timeout { attempts: 2, .. }),
        "silence is retried: {error:?}"
    );
    let shown = error.to_string();
    assert!(
        shown.contains("sent nothing for 0.8s (llm.timeout-secs)"),
        "{shown}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.requests().len(), 2);
}

/// A stream that never ends is bounded by `llm.max-request-secs`, and not retried.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_never_ends_hits_the_request_limit() {
    let mut steps = slow_openai_stream(EDITS, 2, Duration::from_millis(10));
    steps.truncate(3);
    for _ in 0..200 {
        steps.push(Step::Wait(Duration::from_millis(100)));
        steps.push(Step::Send(b": keep-alive\n\n".to_vec()));
    }
    let server = TimedServer::start("text/event-stream", steps).await;
    let mut settings = timed_settings(&server);
    settings.timeout = Duration::from_secs(1);
    settings.max_request = Duration::from_millis(1500);
    settings.max_retries = 2;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("never ends");
    assert!(
        matches!(error, LlmError::TooLong { attempts: 1, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("1.5s (llm.max-request-secs)"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// A shared buffer for captured log lines.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Progress lines come at least every interval while a long answer streams, with the tokens so
/// far growing.
#[tokio::test(flavor = "current_thread")]
async fn a_long_stream_logs_its_progress() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let server = TimedServer::start(
        "text/event-stream",
        slow_openai_stream(&EDITS.repeat(4), 12, Duration::from_millis(150)),
    )
    .await;
    let mut settings = timed_settings(&server);
    settings.timeout = Duration::from_secs(1);
    settings.progress_interval = Duration::from_millis(300);
    provider(settings)
        .complete(&conversation(), None)
        .await
        .expect("answers");
    let text = String::from_utf8_lossy(&captured.0.lock().expect("log")).into_owned();
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("tokens so far"))
        .collect();
    assert!(lines.len() >= 4, "{text}");
    let counts: Vec<u64> = lines
        .iter()
        .filter_map(|line| {
            let after = line.split("about ").nth(1)?;
            after.split(' ').next()?.parse().ok()
        })
        .collect();
    assert!(counts.windows(2).all(|pair| pair[0] <= pair[1]), "{counts:?}");
    assert!(counts.last() > counts.first(), "{counts:?}");
}

/// Both vendors' streams give the answer and the usage the server reported.
#[tokio::test(flavor = "multi_thread")]
async fn usage_comes_from_the_stream_events() {
    for fake in [
        FakeLlm::openai(vec![Reply::Answer(EDITS.into())]).await,
        FakeLlm::anthropic(vec![Reply::Answer(EDITS.into())]).await,
    ] {
        let provider = provider(fake.settings("m"));
        let completion = provider
            .complete(&conversation(), Some(&edit_format()))
            .await
            .expect("streamed answer");
        assert_eq!(completion.text, EDITS, "{:?}", fake.api);
        let (input, output) = fake.usage_returned();
        assert_eq!(
            (completion.usage.input_tokens, completion.usage.output_tokens),
            (input, output),
            "{:?}",
            fake.api
        );
        assert_eq!(provider.spent(), completion.usage);
        assert_eq!(fake.requests()[0]["stream"], true);
    }
}

/// Anthropic's streamed tool input is kept exactly as sent: duplicate keys stay visible.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_tool_input_stays_raw() {
    let raw = r#"{"create-or-update": {"a": "1"}, "create-or-update": {"b": "2"}}"#;
    let fake = FakeLlm::anthropic(vec![Reply::Answer(raw.into())]).await;
    let completion = provider(fake.settings("claude"))
        .complete(&conversation(), Some(&edit_format()))
        .await
        .expect("answer");
    assert_eq!(completion.text, raw);
}

/// Servers that do not stream: one that answers whole is taken as it is, one that refuses
/// `stream` gets the request again without it; both are not asked to stream again.
#[tokio::test(flavor = "multi_thread")]
async fn servers_that_do_not_stream_are_asked_without_streaming() {
    for (quirks, first_requests) in [
        (
            Quirks {
                ignores_stream: true,
                ..Quirks::default()
            },
            1,
        ),
        (
            Quirks {
                rejects_stream: true,
                ..Quirks::default()
            },
            2,
        ),
    ] {
        let fake = FakeLlm::openai_with(vec![Reply::Answer(EDITS.into())], quirks).await;
        let provider = provider(fake.settings("m"));
        for _ in 0..2 {
            let completion = provider
                .complete(&conversation(), Some(&edit_format()))
                .await
                .expect("answers whole");
            assert_eq!(completion.text, EDITS);
        }
        let streamed: Vec<bool> = fake
            .requests()
            .iter()
            .map(|body| body["stream"] == true)
            .collect();
        let mut expected = vec![true];
        expected.resize(first_requests, false);
        expected.push(false);
        assert_eq!(streamed, expected, "{quirks:?}");
        assert_eq!(provider.learned().stream, Some(false));
    }
}

/// `llm.stream = false`: no `stream` in the body at all.
#[tokio::test(flavor = "multi_thread")]
async fn streaming_can_be_turned_off() {
    let fake = FakeLlm::anthropic(vec![Reply::Answer(EDITS.into())]).await;
    let mut settings = fake.settings("claude");
    settings.stream = false;
    provider(settings)
        .complete(&conversation(), None)
        .await
        .expect("answer");
    let body = &fake.requests()[0];
    assert!(body.get("stream").is_none(), "{body}");
}

fn sse(events: &[(&str, Value)]) -> Vec<u8> {
    events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect::<String>()
        .into_bytes()
}

/// An Anthropic stream that breaks off with an `overloaded_error` event is retried; the input
/// tokens its `message_start` reported are counted.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_event_mid_stream_is_retried_and_its_usage_counted() {
    let broken = sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 70, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "{\"crea"}}),
        ),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let fake = FakeLlm::anthropic(vec![
        Reply::Raw {
            status: 200,
            content_type: "text/event-stream".into(),
            body: broken,
        },
        Reply::Answer(EDITS.into()),
    ])
    .await;
    let provider = provider(fake.settings("m"));
    let completion = provider
        .complete(&conversation(), None)
        .await
        .expect("the retry answers");
    assert_eq!(completion.text, EDITS);
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(
        provider.spent().input_tokens,
        70 + completion.usage.input_tokens,
        "the broken attempt's input tokens count"
    );
}

/// A stream that ends before its answer is complete (no finish, no `[DONE]`) is retried, then
/// reported.
#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_stream_is_not_an_answer() {
    let mut steps = slow_openai_stream(EDITS, 4, Duration::from_millis(1));
    steps.truncate(5);
    let server = TimedServer::start("text/event-stream", steps).await;
    let mut settings = timed_settings(&server);
    settings.max_retries = 1;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("cut off");
    assert!(
        error.to_string().contains("ended before the answer was complete"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 2);
}

/// End to end: `bork-ci run` against a model that streams for 17 s with 0.5 s gaps under a 2 s
/// silence limit converges, and its progress line (at 15 s, from inside the edit step) reaches
/// bork-ci's stderr while the answer is still streaming, not when the step ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_shows_progress_while_the_answer_streams() {
    use std::io::BufRead;
    let contents = "DONE\n".repeat(40);
    let answer = json!({"create-or-update": {"src/app.txt": contents}}).to_string();
    let server = TimedServer::start(
        "text/event-stream",
        slow_openai_stream(&answer, 36, Duration::from_millis(500)),
    )
    .await;
    let spec = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";
    let repo = crate::support::Repo::new(&[("specs/app.md", spec), ("src/app.txt", "nothing yet\n")]);
    repo.write("specs/app.md", &format!("{spec}Twice.\n"));
    let mut command = crate::support::bork();
    command
        .arg("run")
        .arg("--repo")
        .arg(repo.path())
        .env("BORK_LLM_PROVIDER", "openai")
        .env("BORK_LLM_BASE_URL", format!("{}/v1", server.url))
        .env("BORK_LLM_MODEL", "slow-model")
        .env("BORK_LLM_TIMEOUT_SECS", "2")
        .env("OPENAI_API_KEY", TEST_KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let (code, lines) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut child = command.spawn().expect("bork-ci starts");
        let stderr = child.stderr.take().expect("stderr");
        let lines: Vec<(Duration, String)> = std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .map(|line| (started.elapsed(), line))
            .collect();
        let status = child.wait().expect("bork-ci ends");
        (status.code(), lines)
    })
    .await
    .expect("join");
    let shown: Vec<&str> = lines.iter().map(|(_, line)| line.as_str()).collect();
    assert_eq!(code, Some(0), "{shown:#?}");
    assert_eq!(repo.read("src/app.txt"), contents);
    let progress = lines
        .iter()
        .find(|(_, line)| line.contains("tokens so far"))
        .unwrap_or_else(|| panic!("no progress line: {shown:#?}"));
    let finished = lines.last().map(|(at, _)| *at).unwrap_or_default();
    assert!(
        progress.0 + Duration::from_secs(1) < finished,
        "the progress line came at {:?}, the run ended at {finished:?}",
        progress.0
    );
    assert!(progress.0 >= Duration::from_secs(14), "{:?}", progress.0);
}

/// Bedrock's path for model `m`, streamed or not.
const CONVERSE: &str = "/model/m/converse";
const CONVERSE_STREAM: &str = "/model/m/converse-stream";
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

fn event_stream(frames: Vec<Vec<u8>>) -> wiremock::ResponseTemplate {
    wiremock::ResponseTemplate::new(200).set_body_raw(frames.concat(), EVENT_STREAM)
}

/// The paths a wiremock server was asked, in order.
async fn paths(server: &wiremock::MockServer) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .map(|request| request.url.path().to_owned())
        .collect()
}

/// Bedrock streams from `converse-stream`: a text answer and a forced tool's input are put
/// together from their deltas (the input byte for byte), and the usage comes from `metadata`.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_streams_text_and_tool_answers_with_their_usage() {
    let raw = r#"{"create-or-update": {"a": "1"}, "create-or-update": {"b": "2"}}"#;
    for (format, tool) in [(None, None), (Some(edit_format()), Some("edits"))] {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::path(CONVERSE_STREAM))
            .respond_with(event_stream(bedrock_stream(raw, tool, 5, "end_turn", (120, 9))))
            .mount(&server)
            .await;
        let provider = provider(bedrock_settings(&server.uri()));
        let completion = provider
            .complete(&conversation(), format.as_ref())
            .await
            .expect("a streamed answer");
        assert_eq!(completion.text, raw, "{tool:?}");
        assert_eq!(
            completion.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 9,
                cached_input_tokens: 0,
                estimated_answers: 0,
            }
        );
        assert_eq!(provider.spent(), completion.usage);
        let requests = server.received_requests().await.unwrap_or_default();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].url.path(), CONVERSE_STREAM);
        let signature = requests[0]
            .headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        assert!(signature.starts_with("AWS4-HMAC-SHA256 "), "{signature}");
        let body: Value = serde_json::from_slice(&requests[0].body).expect("json");
        assert!(body.get("stream").is_none(), "{body}");
        assert_eq!(body["toolConfig"].is_object(), tool.is_some(), "{body}");
    }
}

/// An exception in the stream ends it with the server's words: `throttlingException` is tried
/// again, `validationException` is not.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_exception_events_are_errors_with_the_servers_message() {
    let throttled = vec![
        bedrock_event("messageStart", &json!({"role": "assistant"})),
        bedrock_exception(
            "throttlingException",
            "Too many tokens, please wait before trying again.",
        ),
    ];
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path(CONVERSE_STREAM))
        .respond_with(event_stream(throttled))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    wiremock::Mock::given(wiremock::matchers::path(CONVERSE_STREAM))
        .respond_with(event_stream(bedrock_stream(EDITS, None, 16, "end_turn", (50, 5))))
        .mount(&server)
        .await;
    let completion = provider(bedrock_settings(&server.uri()))
        .complete(&conversation(), None)
        .await
        .expect("the retry answers");
    assert_eq!(completion.text, EDITS);
    assert_eq!(paths(&server).await, [CONVERSE_STREAM, CONVERSE_STREAM]);

    let refused = vec![bedrock_exception(
        "validationException",
        "The model returned the following errors: input is too long for requested model.",
    )];
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::path(CONVERSE_STREAM))
        .respond_with(event_stream(refused))
        .mount(&server)
        .await;
    let mut settings = bedrock_settings(&server.uri());
    settings.max_retries = 3;
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("refused");
    let shown = error.to_string();
    assert!(
        shown.contains("validationException: The model returned the following errors: input is too long")
            && shown.contains(CONVERSE_STREAM),
        "{shown}"
    );
    assert!(!shown.contains("bedrock-secret-0007"), "{shown}");
    assert_eq!(paths(&server).await, [CONVERSE_STREAM], "not retried");
}

/// Bedrock servers that do not stream: one without `converse-stream` (HTTP 404) gets the request
/// again at `converse`, one that answers it whole is taken as it is; both are not asked to
/// stream again.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_servers_that_do_not_stream_are_asked_whole() {
    let converse = json!({
        "output": {"message": {"role": "assistant", "content": [{"text": EDITS}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 40, "outputTokens": 6, "totalTokens": 46},
        "metrics": {"latencyMs": 5},
    });
    let whole = wiremock::ResponseTemplate::new(200).set_body_json(&converse);
    let missing = wiremock::ResponseTemplate::new(404)
        .insert_header("x-amzn-ErrorType", "UnknownOperationException")
        .set_body_json(json!({"message": "Unknown operation"}));
    for (stream_answer, first_paths) in [
        (missing, vec![CONVERSE_STREAM, CONVERSE]),
        (whole.clone(), vec![CONVERSE_STREAM]),
    ] {
        let server = wiremock::MockServer::start().await;
        wiremock::Mock::given(wiremock::matchers::path(CONVERSE_STREAM))
            .respond_with(stream_answer)
            .mount(&server)
            .await;
        wiremock::Mock::given(wiremock::matchers::path(CONVERSE))
            .respond_with(whole.clone())
            .mount(&server)
            .await;
        let provider = provider(bedrock_settings(&server.uri()));
        for _ in 0..2 {
            let completion = provider
                .complete(&conversation(), None)
                .await
                .expect("answers whole");
            assert_eq!(completion.text, EDITS);
        }
        let mut expected = first_paths.clone();
        expected.push(CONVERSE);
        assert_eq!(paths(&server).await, expected);
        assert_eq!(provider.learned().stream, Some(false));
    }
}

/// A Bedrock stream that goes silent for longer than `llm.timeout-secs` fails, naming the
/// silence, long before the whole-request limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_silent_bedrock_stream_hits_the_silence_limit() {
    let mut frames = bedrock_stream(EDITS, None, 16, "end_turn", (50, 5));
    frames.truncate(3);
    let mut steps: Vec<Step> = frames.into_iter().map(Step::Send).collect();
    steps.push(Step::Wait(Duration::from_secs(10)));
    let server = TimedServer::start(EVENT_STREAM, steps).await;
    let mut settings = bedrock_settings(&server.url);
    settings.timeout = Duration::from_millis(800);
    settings.max_retries = 0;
    let started = Instant::now();
    let error = provider(settings)
        .complete(&conversation(), None)
        .await
        .expect_err("silence");
    assert!(
        matches!(error, LlmError::Timeout { attempts: 1, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("0.8s (llm.timeout-secs)"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 1);
}
