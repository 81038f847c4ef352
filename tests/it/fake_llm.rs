//! Fake LLM servers on 127.0.0.1 for integration tests: an OpenAI-compatible Chat Completions
//! endpoint and an Anthropic Messages endpoint, answering a scripted list of [`Reply`]s.
//!
//! Path layout: the OpenAI fake answers `POST /v1/chat/completions`, so its base URL (what
//! `llm.base-url` is set to) is `url + "/v1"`; the Anthropic fake answers `POST /v1/messages`, so
//! its base URL is `url` itself. [`FakeLlm::base_url`] gives the right one. Other paths get 404.
//!
//! Replies are served in order, one per request; past the end the last reply repeats (an empty
//! list answers 500). Requests without a key header (`authorization: Bearer …` / `x-api-key`, plus
//! `anthropic-version`) get 401/400 and consume no reply. The OpenAI fake checks every request body
//! against OpenAI's own request schema (`tests/fixtures/api/openai-chat-schemas.json`): an invalid
//! body gets 400, consumes no reply and is listed by [`FakeLlm::schema_violations`].
//!
//! Response bodies follow the providers' documented shapes (ids, `object`, `created`, `usage` with
//! cached-token counts). Token counts are deterministic estimates (request bytes / 4); every request
//! after the first reports the previous request's prompt as cached, as a provider's prompt cache
//! would. The Anthropic fake answers with a `tool_use` block when the request forces a tool and the
//! answer is a JSON object (its `input` is the answer text byte for byte), else with a text block.
//!
//! A request with `"stream": true` is answered with server-sent events shaped like the vendor's
//! stream (OpenAI chunks with the usage chunk when `stream_options.include_usage` asks for it and
//! `data: [DONE]`; Anthropic's `message_start` … `message_stop`). [`Quirks`] make a fake answer
//! like a real server that departs from the vendor's API (llama-cpp-python's 500 to
//! `json_schema`, an output maximum, no streaming). [`TimedServer`] sends timed bytes for slow,
//! silent or endless streams. [`bedrock_stream`] builds Bedrock's `converse-stream` answer as AWS
//! event-stream frames, CRC32s included, for any of these servers to send.
//!
//! The servers run on their own threads (wiremock), so they keep answering while a test blocks on
//! a spawned `bork-ci` process.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bork_ci::llm::{LlmSettings, ProviderKind};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// The key the fakes' [`FakeLlm::settings`] carry.
pub const TEST_KEY: &str = "test-key-0000";

/// One scripted answer of a fake server.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this answer text (OpenAI `content`; Anthropic text block or tool input).
    Answer(String),
    /// Anthropic: 200 with a text block even when the request forced a tool. OpenAI: as `Answer`.
    AnswerText(String),
    /// 200 with this text and `finish_reason: length` / `stop_reason: max_tokens`.
    Truncated(String),
    /// 200 with a refusal (`message.refusal` / `stop_reason: refusal`).
    Refusal(String),
    /// That status with the provider's error body, and `retry-after: N` when given.
    Status(u16, Option<u64>),
    /// 307 with `location` set to this URL.
    Redirect(String),
    /// Exactly this status, content type and body (empty bodies, invalid UTF-8, odd shapes).
    Raw {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
    /// The inner reply, sent after this delay.
    Delay(Duration, Box<Reply>),
}

impl Reply {
    /// `Answer` with a JSON value serialized compactly.
    pub fn json(value: &Value) -> Self {
        Reply::Answer(value.to_string())
    }

    /// `Delay` without the `Box`.
    pub fn delayed(delay: Duration, reply: Reply) -> Self {
        Reply::Delay(delay, Box::new(reply))
    }
}

/// Which API a fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Openai,
    Anthropic,
}

/// A request a fake received.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body as JSON, `Value::Null` when it is not JSON.
    pub body: Value,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Default)]
struct Log {
    next: usize,
    received: Vec<Received>,
    violations: Vec<String>,
    previous_prompt_tokens: Option<u64>,
    /// Input and output tokens of every answer with a `usage` (200s), in order.
    usage: Vec<(u64, u64)>,
}

/// Ways a fake departs from the vendor's own API, after real servers that speak it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// Like llama-cpp-python's server (`python -m llama_cpp.server`, 0.3.x): a request whose
    /// `response_format.type` is `json_schema` fails FastAPI's validation (the type must be
    /// `text` or `json_object`), and its route handler wraps that error as HTTP 500
    /// `internal_server_error`. Such requests consume no reply.
    pub rejects_json_schema: bool,
    /// The model's output maximum: a request asking for more gets the vendor's 400, worded as
    /// OpenAI does for gpt-4o (16,384) or Anthropic for Claude 3.5 Sonnet (8,192). Such
    /// requests consume no reply.
    pub max_output_tokens: Option<u64>,
    /// Like servers that do not stream: `stream: true` is ignored and the answer comes whole
    /// (`application/json`).
    pub ignores_stream: bool,
    /// Like servers that refuse to stream: a request with `stream: true` gets a 400 naming it.
    /// Such requests consume no reply.
    pub rejects_stream: bool,
    /// Like llama-cpp-python's server: a streamed answer never carries a usage chunk, whatever
    /// `stream_options.include_usage` asks.
    pub ignores_include_usage: bool,
    /// Like servers that count only what they generate: usage reports `prompt_tokens: 0` (and
    /// no cached tokens) for every request, with the completion tokens.
    pub reports_no_prompt_tokens: bool,
}

/// The body llama-cpp-python's server answers a `json_schema` request with (HTTP 500):
/// `{"error": {"message": str(RequestValidationError), "type": "internal_server_error", ...}}`.
pub const LLAMA_CPP_JSON_SCHEMA_ERROR: &str = r#"[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': "Input should be 'text' or 'json_object'", 'input': 'json_schema', 'ctx': {'expected': "'text' or 'json_object'"}}]"#;

struct State {
    api: Api,
    quirks: Quirks,
    replies: Vec<Reply>,
    log: Mutex<Log>,
    validator: Option<jsonschema::Validator>,
}

impl State {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running fake LLM server.
pub struct FakeLlm {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub url: String,
    pub api: Api,
    state: Arc<State>,
    _server: MockServer,
}

impl FakeLlm {
    /// An OpenAI-compatible fake: `POST /v1/chat/completions`; base URL `url + "/v1"`.
    pub async fn openai(replies: Vec<Reply>) -> Self {
        Self::start(Api::Openai, replies).await
    }

    /// An Anthropic fake: `POST /v1/messages`; base URL `url`.
    pub async fn anthropic(replies: Vec<Reply>) -> Self {
        Self::start(Api::Anthropic, replies).await
    }

    /// An OpenAI-compatible fake with `quirks`.
    pub async fn openai_with(replies: Vec<Reply>, quirks: Quirks) -> Self {
        Self::start_with(Api::Openai, replies, quirks).await
    }

    /// An Anthropic fake with `quirks`.
    pub async fn anthropic_with(replies: Vec<Reply>, quirks: Quirks) -> Self {
        Self::start_with(Api::Anthropic, replies, quirks).await
    }

    async fn start(api: Api, replies: Vec<Reply>) -> Self {
        Self::start_with(api, replies, Quirks::default()).await
    }

    async fn start_with(api: Api, replies: Vec<Reply>, quirks: Quirks) -> Self {
        let validator = match api {
            Api::Openai => Some(openai_request_validator()),
            Api::Anthropic => None,
        };
        let state = Arc::new(State {
            api,
            quirks,
            replies,
            log: Mutex::new(Log::default()),
            validator,
        });
        let server = MockServer::start().await;
        let endpoint = match api {
            Api::Openai => "/v1/chat/completions",
            Api::Anthropic => "/v1/messages",
        };
        Mock::given(method("POST"))
            .and(path(endpoint))
            .respond_with(Responder(Arc::clone(&state)))
            .mount(&server)
            .await;
        // The models list both APIs serve (`GET /v1/models`), refused without the key as the
        // real servers refuse it.
        Mock::given(method("GET"))
            .and(path("/v1/models"))
            .respond_with(move |request: &Request| {
                let keyed = |name: &str| {
                    request
                        .headers
                        .get(name)
                        .and_then(|value| value.to_str().ok())
                        .is_some_and(|value| value.contains(TEST_KEY))
                };
                if keyed("authorization") || keyed("x-api-key") {
                    ResponseTemplate::new(200).set_body_json(serde_json::json!({
                        "object": "list",
                        "data": [{"id": "gpt-4.1", "object": "model", "type": "model"}],
                        "has_more": false
                    }))
                } else {
                    ResponseTemplate::new(401).set_body_json(serde_json::json!({
                        "error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}
                    }))
                }
            })
            .mount(&server)
            .await;
        Self {
            url: server.uri().trim_end_matches('/').to_owned(),
            api,
            state,
            _server: server,
        }
    }

    /// What `llm.base-url` must be set to.
    pub fn base_url(&self) -> String {
        match self.api {
            Api::Openai => format!("{}/v1", self.url),
            Api::Anthropic => self.url.clone(),
        }
    }

    /// The `llm.provider` value for this fake.
    pub fn provider(&self) -> ProviderKind {
        match self.api {
            Api::Openai => ProviderKind::Openai,
            Api::Anthropic => ProviderKind::Anthropic,
        }
    }

    /// Settings pointing at this fake, with [`TEST_KEY`], a 10 s timeout and 3 retries.
    pub fn settings(&self, model: &str) -> LlmSettings {
        let mut settings = LlmSettings::new(self.provider(), model);
        settings.base_url = Some(self.base_url());
        settings.api_key = Some(TEST_KEY.into());
        settings.timeout = Duration::from_secs(10);
        settings.max_retries = 3;
        settings
    }

    /// Bodies of the requests to the endpoint, in order (rejected ones included).
    pub fn requests(&self) -> Vec<Value> {
        self.state
            .log()
            .received
            .iter()
            .map(|received| received.body.clone())
            .collect()
    }

    /// The requests to the endpoint with their headers, in order.
    pub fn received(&self) -> Vec<Received> {
        self.state.log().received.clone()
    }

    /// Input and output tokens the fake reported, summed over every answer it gave.
    pub fn usage_returned(&self) -> (u64, u64) {
        self.state
            .log()
            .usage
            .iter()
            .fold((0, 0), |(input, output), (i, o)| (input + i, output + o))
    }

    /// OpenAI only: why request bodies failed the request schema, one line per request.
    pub fn schema_violations(&self) -> Vec<String> {
        self.state.log().violations.clone()
    }
}

/// A validator for `CreateChatCompletionRequest` from the OpenAI schema fixture.
pub fn openai_request_validator() -> jsonschema::Validator {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/api/openai-chat-schemas.json"
    );
    let text = std::fs::read_to_string(path).expect("read the OpenAI schema fixture");
    let schema: Value = serde_json::from_str(&text).expect("the OpenAI schema fixture is JSON");
    jsonschema::validator_for(&schema).expect("the OpenAI schema compiles")
}

struct Responder(Arc<State>);

impl Respond for Responder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let state = &self.0;
        let body: Value = serde_json::from_slice(&request.body).unwrap_or(Value::Null);
        let headers = request
            .headers
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let received = Received {
            path: request.url.path().to_owned(),
            headers,
            body: body.clone(),
        };
        let mut log = state.log();
        log.received.push(received.clone());

        if let Some(rejection) = reject(state, &received, &mut log) {
            return rejection;
        }
        let reply = match state.replies.get(log.next).or(state.replies.last()) {
            Some(reply) => reply.clone(),
            None => Reply::Status(500, None),
        };
        log.next += 1;
        let number = log.next;
        let prompt_tokens = if state.quirks.reports_no_prompt_tokens {
            0
        } else {
            (request.body.len() as u64).div_ceil(4)
        };
        let cached = log
            .previous_prompt_tokens
            .map_or(0, |previous| previous.min(prompt_tokens));
        log.previous_prompt_tokens = Some(prompt_tokens);
        if let Reply::Answer(text) | Reply::AnswerText(text) | Reply::Truncated(text) | Reply::Refusal(text) =
            innermost(&reply)
        {
            let output_tokens = (text.len() as u64).div_ceil(4);
            log.usage.push((prompt_tokens, output_tokens));
        }
        drop(log);
        let context = Context {
            number,
            model: body["model"].as_str().unwrap_or("unknown").to_owned(),
            forced_tool: forced_tool(&body),
            prompt_tokens,
            cached,
            stream: body["stream"] == true && !state.quirks.ignores_stream,
            include_usage: body["stream_options"]["include_usage"] == true
                && !state.quirks.ignores_include_usage,
        };
        render(state.api, &reply, &context)
    }
}

/// The reply a `Delay` wraps, or the reply itself.
fn innermost(reply: &Reply) -> &Reply {
    match reply {
        Reply::Delay(_, inner) => innermost(inner),
        other => other,
    }
}

/// A missing key, a missing version header or (OpenAI) a body that fails the schema.
fn reject(state: &State, received: &Received, log: &mut Log) -> Option<ResponseTemplate> {
    if state.quirks.rejects_stream && received.body["stream"] == true {
        return Some(match state.api {
            Api::Openai => openai_error_with(
                400,
                "invalid_request_error",
                "Unsupported parameter: 'stream' is not supported with this model.",
                "stream",
                "unsupported_parameter",
            ),
            Api::Anthropic => anthropic_error(
                400,
                "invalid_request_error",
                "stream: Extra inputs are not permitted",
            ),
        });
    }
    match state.api {
        Api::Openai => {
            let authorized = received
                .header("authorization")
                .and_then(|value| value.strip_prefix("Bearer "))
                .is_some_and(|key| !key.trim().is_empty());
            if !authorized {
                return Some(openai_error(401, "invalid_request_error", "missing API key"));
            }
            if let Some(maximum) = state.quirks.max_output_tokens {
                for field in ["max_completion_tokens", "max_tokens"] {
                    if let Some(asked) = received.body[field].as_u64().filter(|asked| *asked > maximum) {
                        return Some(openai_error_with(
                            400,
                            "invalid_request_error",
                            &format!(
                                "{field} is too large: {asked}. This model supports at most {maximum} completion tokens, whereas you provided {asked}."
                            ),
                            field,
                            "invalid_value",
                        ));
                    }
                }
            }
            if state.quirks.rejects_json_schema && received.body["response_format"]["type"] == "json_schema" {
                return Some(ResponseTemplate::new(500).set_body_json(json!({
                    "error": {
                        "message": LLAMA_CPP_JSON_SCHEMA_ERROR,
                        "type": "internal_server_error",
                        "param": null,
                        "code": null,
                    }
                })));
            }
            if let Some(validator) = &state.validator {
                let errors: Vec<String> = validator
                    .iter_errors(&received.body)
                    .take(5)
                    .map(|error| format!("{} at {}", error, error.instance_path()))
                    .collect();
                if !errors.is_empty() {
                    let message = errors.join("; ");
                    log.violations.push(message.clone());
                    return Some(openai_error(400, "invalid_request_error", &message));
                }
            }
            None
        }
        Api::Anthropic => {
            if received
                .header("x-api-key")
                .is_none_or(|key| key.trim().is_empty())
            {
                return Some(anthropic_error(
                    401,
                    "authentication_error",
                    "x-api-key header is required",
                ));
            }
            if received.header("anthropic-version").is_none() {
                return Some(anthropic_error(
                    400,
                    "invalid_request_error",
                    "anthropic-version header is required",
                ));
            }
            let body = &received.body;
            if let Some(maximum) = state.quirks.max_output_tokens
                && let Some(asked) = body["max_tokens"].as_u64().filter(|asked| *asked > maximum)
            {
                return Some(anthropic_error(
                    400,
                    "invalid_request_error",
                    &format!(
                        "max_tokens: {asked} > {maximum}, which is the maximum allowed number of output tokens for {}",
                        body["model"].as_str().unwrap_or("claude-3-5-sonnet-20241022")
                    ),
                ));
            }
            if !body["model"].is_string() || !body["max_tokens"].is_u64() || !body["messages"].is_array() {
                return Some(anthropic_error(
                    400,
                    "invalid_request_error",
                    "model, max_tokens and messages are required",
                ));
            }
            None
        }
    }
}

fn forced_tool(body: &Value) -> Option<String> {
    let choice = body.get("tool_choice")?;
    if choice["type"] != "tool" {
        return None;
    }
    choice["name"].as_str().map(str::to_owned)
}

struct Context {
    number: usize,
    model: String,
    forced_tool: Option<String>,
    prompt_tokens: u64,
    cached: u64,
    /// The request asked for server-sent events (and the fake streams).
    stream: bool,
    /// OpenAI: `stream_options.include_usage`.
    include_usage: bool,
}

fn render(api: Api, reply: &Reply, context: &Context) -> ResponseTemplate {
    match reply {
        Reply::Delay(delay, inner) => render(api, inner, context).set_delay(*delay),
        Reply::Status(status, retry_after) => {
            let template = match api {
                Api::Openai => openai_error(*status, openai_error_type(*status), "fake failure"),
                Api::Anthropic => anthropic_error(*status, anthropic_error_type(*status), "fake failure"),
            };
            match retry_after {
                Some(seconds) => template.insert_header("retry-after", seconds.to_string().as_str()),
                None => template,
            }
        }
        Reply::Redirect(location) => ResponseTemplate::new(307).insert_header("location", location.as_str()),
        Reply::Raw {
            status,
            content_type,
            body,
        } => ResponseTemplate::new(*status).set_body_raw(body.clone(), content_type),
        Reply::Answer(text) | Reply::AnswerText(text) | Reply::Truncated(text) | Reply::Refusal(text) => {
            let (body, content_type) = match (api, context.stream) {
                (Api::Openai, false) => (openai_answer(reply, text, context), "application/json"),
                (Api::Anthropic, false) => (anthropic_answer(reply, text, context), "application/json"),
                (Api::Openai, true) => (openai_stream(reply, text, context), "text/event-stream"),
                (Api::Anthropic, true) => (anthropic_stream(reply, text, context), "text/event-stream"),
            };
            ResponseTemplate::new(200)
                .set_body_raw(body.into_bytes(), content_type)
                .insert_header("x-request-id", format!("req_fake{}", context.number).as_str())
        }
    }
}

fn openai_answer(reply: &Reply, text: &str, context: &Context) -> String {
    let output_tokens = (text.len() as u64).div_ceil(4);
    let (content, refusal, finish) = match reply {
        Reply::Refusal(_) => (Value::Null, json!(text), "stop"),
        Reply::Truncated(_) => (json!(text), Value::Null, "length"),
        _ => (json!(text), Value::Null, "stop"),
    };
    json!({
        "id": format!("chatcmpl-fake{:08}", context.number),
        "object": "chat.completion",
        "created": 1_741_569_952u64 + context.number as u64,
        "model": context.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content, "refusal": refusal, "annotations": []},
            "logprobs": null,
            "finish_reason": finish,
        }],
        "usage": {
            "prompt_tokens": context.prompt_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": context.prompt_tokens + output_tokens,
            "prompt_tokens_details": {"cached_tokens": context.cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fake",
    })
    .to_string()
}

fn anthropic_answer(reply: &Reply, text: &str, context: &Context) -> String {
    const RAW: &str = "\"__RAW_TOOL_INPUT__\"";
    let output_tokens = (text.len() as u64).div_ceil(4);
    let is_object = serde_json::from_str::<Value>(text).is_ok_and(|value| value.is_object());
    let tool = match (reply, &context.forced_tool) {
        (Reply::Answer(_), Some(name)) if is_object => Some(name.clone()),
        _ => None,
    };
    let (content, stop_reason) = match (reply, &tool) {
        (_, Some(name)) => (
            json!([{
                "type": "tool_use",
                "id": format!("toolu_fake{:08}", context.number),
                "name": name,
                "input": "__RAW_TOOL_INPUT__",
            }]),
            "tool_use",
        ),
        (Reply::Refusal(_), None) => (json!([{"type": "text", "text": text}]), "refusal"),
        (Reply::Truncated(_), None) => (json!([{"type": "text", "text": text}]), "max_tokens"),
        _ => (json!([{"type": "text", "text": text}]), "end_turn"),
    };
    // Anthropic counts uncached input apart from cache reads and writes.
    let (input, written, read) = if context.number == 1 {
        let uncached = context.prompt_tokens / 10;
        (uncached, context.prompt_tokens - uncached, 0)
    } else {
        (context.prompt_tokens - context.cached, 0, context.cached)
    };
    let body = json!({
        "id": format!("msg_fake{:020}", context.number),
        "type": "message",
        "role": "assistant",
        "model": context.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": input,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
            "output_tokens": output_tokens,
            "service_tier": "standard",
        },
    })
    .to_string();
    match tool {
        // The tool input goes in byte for byte, so duplicate keys and spacing survive.
        Some(_) => body.replacen(RAW, text, 1),
        None => body,
    }
}

/// `text` in pieces of at most 16 bytes, cut at character boundaries, as a model streams it.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(16);
        while !rest.is_char_boundary(end) {
            end += 1;
        }
        let (piece, tail) = rest.split_at(end);
        out.push(piece);
        rest = tail;
    }
    out
}

/// The answer as OpenAI streams it: a first chunk with the role, one chunk per piece of content
/// (or refusal), a chunk with the finish reason, the usage chunk when the request asked for it
/// (`stream_options.include_usage`), then `data: [DONE]`.
fn openai_stream(reply: &Reply, text: &str, context: &Context) -> String {
    let output_tokens = (text.len() as u64).div_ceil(4);
    let chunk = |choices: Value, usage: Value| {
        let mut chunk = json!({
            "id": format!("chatcmpl-fake{:08}", context.number),
            "object": "chat.completion.chunk",
            "created": 1_741_569_952u64 + context.number as u64,
            "model": context.model,
            "system_fingerprint": "fp_fake",
            "choices": choices,
        });
        if context.include_usage {
            chunk["usage"] = usage;
        }
        format!("data: {chunk}\n\n")
    };
    let (field, finish) = match reply {
        Reply::Refusal(_) => ("refusal", "stop"),
        Reply::Truncated(_) => ("content", "length"),
        _ => ("content", "stop"),
    };
    let mut out = chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": null, "finish_reason": null}]),
        Value::Null,
    );
    for piece in pieces(text) {
        out.push_str(&chunk(
            json!([{"index": 0, "delta": {field: piece}, "logprobs": null, "finish_reason": null}]),
            Value::Null,
        ));
    }
    out.push_str(&chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}]),
        Value::Null,
    ));
    if context.include_usage {
        out.push_str(&chunk(
            json!([]),
            json!({
                "prompt_tokens": context.prompt_tokens,
                "completion_tokens": output_tokens,
                "total_tokens": context.prompt_tokens + output_tokens,
                "prompt_tokens_details": {"cached_tokens": context.cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
            }),
        ));
    }
    out.push_str("data: [DONE]\n\n");
    out
}

/// The answer as Anthropic streams it: `message_start` (input usage), one content block (text,
/// or the forced tool with `input_json_delta` pieces of the raw input), a `ping`,
/// `content_block_stop`, `message_delta` (stop reason, output usage), `message_stop`.
fn anthropic_stream(reply: &Reply, text: &str, context: &Context) -> String {
    let output_tokens = (text.len() as u64).div_ceil(4);
    let is_object = serde_json::from_str::<Value>(text).is_ok_and(|value| value.is_object());
    let tool = match (reply, &context.forced_tool) {
        (Reply::Answer(_), Some(name)) if is_object => Some(name.clone()),
        _ => None,
    };
    let stop_reason = match (reply, &tool) {
        (_, Some(_)) => "tool_use",
        (Reply::Refusal(_), None) => "refusal",
        (Reply::Truncated(_), None) => "max_tokens",
        _ => "end_turn",
    };
    let (input, written, read) = if context.number == 1 {
        let uncached = context.prompt_tokens / 10;
        (uncached, context.prompt_tokens - uncached, 0)
    } else {
        (context.prompt_tokens - context.cached, 0, context.cached)
    };
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_fake{:020}", context.number),
            "type": "message", "role": "assistant", "model": context.model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_creation_input_tokens": written, "cache_read_input_tokens": read, "output_tokens": 1, "service_tier": "standard"},
        }}),
    );
    let block = match &tool {
        Some(name) => {
            json!({"type": "tool_use", "id": format!("toolu_fake{:08}", context.number), "name": name, "input": {}})
        }
        None => json!({"type": "text", "text": ""}),
    };
    out.push_str(&event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": block}),
    ));
    out.push_str(&event("ping", json!({"type": "ping"})));
    for piece in pieces(text) {
        let delta = match &tool {
            Some(_) => json!({"type": "input_json_delta", "partial_json": piece}),
            None => json!({"type": "text_delta", "text": piece}),
        };
        out.push_str(&event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ));
    }
    out.push_str(&event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    out.push_str(&event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": output_tokens}}),
    ));
    out.push_str(&event("message_stop", json!({"type": "message_stop"})));
    out
}

fn openai_error_type(status: u16) -> &'static str {
    match status {
        401 => "invalid_request_error",
        429 => "rate_limit_exceeded",
        500..=599 => "server_error",
        _ => "invalid_request_error",
    }
}

fn anthropic_error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

fn openai_error(status: u16, kind: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "error": {"message": message, "type": kind, "param": null, "code": null}
    }))
}

fn openai_error_with(status: u16, kind: &str, message: &str, param: &str, code: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "error": {"message": message, "type": kind, "param": param, "code": code}
    }))
}

fn anthropic_error(status: u16, kind: &str, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "type": "error",
        "error": {"type": kind, "message": message},
        "request_id": "req_fake_error",
    }))
}

/// One step of a [`TimedServer`] answer.
#[derive(Debug, Clone)]
pub enum Step {
    /// Write these bytes (flushed at once).
    Send(Vec<u8>),
    /// Write nothing for this long.
    Wait(Duration),
}

/// A server on 127.0.0.1 that answers every request with a status line, headers and then the
/// body as timed [`Step`]s, on a connection closed at the end (the body is delimited by the
/// close, as HTTP/1.1 allows): for answers that stream slowly, go silent, or never end, which a
/// fake built on whole responses cannot send.
pub struct TimedServer {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    requests: Arc<Mutex<Vec<Value>>>,
}

impl TimedServer {
    /// Starts the server; every request gets `head` (e.g. `content-type: text/event-stream`)
    /// with status 200, then `steps`.
    pub async fn start(content_type: &str, steps: Vec<Step>) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\nconnection: close\r\n\r\n");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let steps = steps.clone();
                let head = head.clone();
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    // The request: headers, then a body of content-length bytes.
                    let mut request = Vec::new();
                    let mut buffer = vec![0u8; 64 * 1024];
                    let body_start = loop {
                        let Ok(read) = socket.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        request.extend_from_slice(&buffer[..read]);
                        if let Some(end) = request.windows(4).position(|window| window == b"\r\n\r\n") {
                            break end + 4;
                        }
                    };
                    let head_text = String::from_utf8_lossy(&request[..body_start]).to_ascii_lowercase();
                    let length: usize = head_text
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|value| value.trim().parse().ok())
                        .unwrap_or(0);
                    while request.len() < body_start + length {
                        let Ok(read) = socket.read(&mut buffer).await else {
                            return;
                        };
                        if read == 0 {
                            return;
                        }
                        request.extend_from_slice(&buffer[..read]);
                    }
                    let body = serde_json::from_slice(&request[body_start..body_start + length])
                        .unwrap_or(Value::Null);
                    seen.lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .push(body);
                    if socket.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    for step in steps {
                        match step {
                            Step::Send(bytes) => {
                                if socket.write_all(&bytes).await.is_err() || socket.flush().await.is_err() {
                                    return;
                                }
                            }
                            Step::Wait(delay) => tokio::time::sleep(delay).await,
                        }
                    }
                    let _ = socket.shutdown().await;
                });
            }
        });
        Self {
            url: format!("http://{address}"),
            requests,
        }
    }

    /// Bodies of the requests received, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

/// An OpenAI stream of `text` in `parts` content chunks with `gap` before each, then the finish
/// chunk, a usage chunk (`prompt_tokens`, and one completion token per chunk) and `[DONE]`.
pub fn slow_openai_stream(text: &str, parts: usize, gap: Duration) -> Vec<Step> {
    let chunk = |choices: Value, usage: Value| {
        Step::Send(
            format!(
                "data: {}\n\n",
                json!({"id": "chatcmpl-slow", "object": "chat.completion.chunk", "created": 1, "model": "slow", "choices": choices, "usage": usage})
            )
            .into_bytes(),
        )
    };
    let mut steps = vec![chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
        Value::Null,
    )];
    let size = text.len().div_ceil(parts.max(1));
    for piece in text.as_bytes().chunks(size.max(1)) {
        steps.push(Step::Wait(gap));
        steps.push(chunk(
            json!([{"index": 0, "delta": {"content": String::from_utf8_lossy(piece)}, "finish_reason": null}]),
            Value::Null,
        ));
    }
    steps.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        Value::Null,
    ));
    steps.push(chunk(
        json!([]),
        json!({"prompt_tokens": 100, "completion_tokens": parts, "total_tokens": 100 + parts}),
    ));
    steps.push(Step::Send(b"data: [DONE]\n\n".to_vec()));
    steps
}

/// One AWS event-stream frame (`application/vnd.amazon.eventstream`): total and header lengths
/// (big-endian `u32`), their CRC32, the headers (name length, name, type 7 = string, `u16`
/// length, value), the payload, and the CRC32 of everything before it.
pub fn event_stream_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut encoded = Vec::new();
    for (name, value) in headers {
        encoded.push(u8::try_from(name.len()).expect("a short header name"));
        encoded.extend_from_slice(name.as_bytes());
        encoded.push(7);
        encoded.extend_from_slice(
            &u16::try_from(value.len())
                .expect("a short header value")
                .to_be_bytes(),
        );
        encoded.extend_from_slice(value.as_bytes());
    }
    let total = 12 + encoded.len() + payload.len() + 4;
    let mut frame = Vec::with_capacity(total);
    frame.extend_from_slice(&u32::try_from(total).expect("a small frame").to_be_bytes());
    frame.extend_from_slice(&u32::try_from(encoded.len()).expect("small headers").to_be_bytes());
    frame.extend_from_slice(&crc32(&frame).to_be_bytes());
    frame.extend_from_slice(&encoded);
    frame.extend_from_slice(payload);
    frame.extend_from_slice(&crc32(&frame).to_be_bytes());
    frame
}

/// CRC-32 (IEEE), as the event-stream format checks its frames with.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A ConverseStream event: `kind` (`messageStart`, `contentBlockDelta`, …) and its JSON.
pub fn bedrock_event(kind: &str, payload: &Value) -> Vec<u8> {
    event_stream_frame(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

/// A ConverseStream exception (`throttlingException`, `validationException`, …).
pub fn bedrock_exception(kind: &str, message: &str) -> Vec<u8> {
    event_stream_frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({"message": message}).to_string().as_bytes(),
    )
}

/// Bedrock's `converse-stream` answer, one frame each: `messageStart`, a `contentBlockStart`
/// when `tool` names the forced tool (the text is then its input), `text` in `contentBlockDelta`
/// pieces of `piece` bytes, `contentBlockStop`, `messageStop` with `stop_reason`, `metadata` with
/// `usage` (input, output tokens).
pub fn bedrock_stream(
    text: &str,
    tool: Option<&str>,
    piece: usize,
    stop_reason: &str,
    usage: (u64, u64),
) -> Vec<Vec<u8>> {
    let mut frames = vec![bedrock_event("messageStart", &json!({"role": "assistant"}))];
    if let Some(name) = tool {
        frames.push(bedrock_event(
            "contentBlockStart",
            &json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": name}}}),
        ));
    }
    for part in text.as_bytes().chunks(piece.max(1)) {
        let part = String::from_utf8_lossy(part);
        let delta = match tool {
            Some(_) => json!({"toolUse": {"input": part}}),
            None => json!({"text": part}),
        };
        frames.push(bedrock_event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": delta, "p": "abcdefgh"}),
        ));
    }
    frames.push(bedrock_event(
        "contentBlockStop",
        &json!({"contentBlockIndex": 0}),
    ));
    frames.push(bedrock_event("messageStop", &json!({"stopReason": stop_reason})));
    frames.push(bedrock_event(
        "metadata",
        &json!({"usage": {"inputTokens": usage.0, "outputTokens": usage.1, "totalTokens": usage.0 + usage.1}, "metrics": {"latencyMs": 5}}),
    ));
    frames
}

/// Settings for model `m` on a Bedrock server at `base`, in `us-east-1`, with static keys.
pub fn bedrock_settings(base: &str) -> LlmSettings {
    let mut settings = LlmSettings::new(ProviderKind::Bedrock, "m");
    settings.base_url = Some(base.to_owned());
    settings.endpoint.region = Some("us-east-1".into());
    let secrets = &mut settings.endpoint.credentials.secrets;
    secrets.insert("AWS_ACCESS_KEY_ID".into(), "AKIATESTKEY0007".into());
    secrets.insert("AWS_SECRET_ACCESS_KEY".into(), "bedrock-secret-0007".into());
    settings
}

/// Retry timing for tests: milliseconds, not seconds.
pub fn fast() -> bork_ci::llm::RetryPolicy {
    bork_ci::llm::RetryPolicy {
        base: std::time::Duration::from_millis(1),
        max_backoff: std::time::Duration::from_millis(5),
        max_retry_after: std::time::Duration::from_secs(5),
    }
}

/// A provider for `settings` with [`fast`] retries.
pub fn provider(settings: bork_ci::llm::LlmSettings) -> bork_ci::llm::Provider {
    bork_ci::llm::Provider::new(settings)
        .expect("valid settings")
        .with_retry_policy(fast())
}

/// A conversation as bork-ci sends it: system prompt, the cached prefix, one user turn.
pub fn conversation() -> bork_ci::llm::Conversation {
    bork_ci::llm::Conversation {
        system: "You edit repositories. Answer with JSON only.".into(),
        prefix: "<file path=\"src/a.rs\">fn main() {}</file>".into(),
        turns: vec![bork_ci::llm::Turn::user("Findings: none yet.")],
    }
}

/// The answer format of edits, as a JSON schema.
pub fn edit_format() -> bork_ci::llm::ResponseFormat {
    bork_ci::llm::ResponseFormat {
        name: "edits".into(),
        schema: serde_json::json!({
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "create-or-update": {"type": "object", "additionalProperties": {"type": "string"}},
                "delete": {"type": "array", "items": {"type": "string"}}
            }
        }),
    }
}

/// An answer writing `contents` to `src/app.txt` (the file [`crate::support::app_repo`]'s
/// checker reads).
pub fn write_app(contents: &str) -> Reply {
    Reply::json(&serde_json::json!({"create-or-update": {"src/app.txt": contents}}))
}
