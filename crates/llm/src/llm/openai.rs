//! OpenAI-compatible Chat Completions: the request body and reading the answer.
//!
//! `POST {base_url}/chat/completions` (default base `https://api.openai.com/v1`). Messages are the
//! system prompt, the prefix as the first user message, then the turns, so the unchanged start of
//! every request is served by the provider's automatic prompt caching. The output limit is sent as
//! `max_completion_tokens` (OpenAI's current field; `max_tokens` is deprecated there) or as
//! `max_tokens` (what other OpenAI-compatible servers read), as `endpoint` chooses or
//! `llm.max-tokens-field` says. The answer is `choices[0].message.content`, passed on untouched.
//! [`Chat`] is the vendor for OpenAI, Azure OpenAI and Vertex's OpenAI-compatible endpoint
//! (with a Google token); transport and retries live in `wire`.

use bork_ci_core::net::reqwest::header::HeaderMap;
use bork_ci_core::net::reqwest::{Client, Url};
use futures_util::future::BoxFuture;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::data::{
    Completion, Conversation, FinishReason, LlmError, LlmSettings, ProviderKind, ResponseFormat,
};
use super::data::{MaxTokensField, Role, StructuredOutput, Usage};
use super::google::{self, TokenSource};
use super::sse;
use super::vendor::{
    Answers, Ask, Decoder, Events, Partial, ServerSentEvents, StreamProblem, Vendor, error_excerpt,
};

pub(super) const PATH: &str = "/chat/completions";

/// Chat Completions at one URL.
#[derive(Debug)]
pub(super) struct Chat {
    pub(super) reader: Reader,
    pub(super) url: Url,
    /// Vertex: the model as its OpenAI-compatible endpoint names it (`google/…`).
    pub(super) model_override: Option<String>,
    /// Vertex: where the bearer token of each attempt comes from.
    pub(super) google: Option<TokenSource>,
    pub(super) temperature: Option<f64>,
    pub(super) seed: Option<i64>,
    /// The cap's field when `llm.max-tokens-field` is not set.
    pub(super) cap_field: MaxTokensField,
}

impl Chat {
    /// A Chat Completions endpoint at `url` reached with a key (OpenAI-compatible servers,
    /// Azure OpenAI): the model as configured, no Google token, `cap_field` when
    /// `llm.max-tokens-field` is not set.
    pub(super) fn keyed(settings: &LlmSettings, url: Url, cap_field: MaxTokensField) -> Chat {
        Chat {
            reader: Reader {
                kind: settings.provider,
            },
            url,
            model_override: None,
            google: None,
            temperature: settings.endpoint.temperature,
            seed: settings.endpoint.seed,
            cap_field,
        }
    }
}

impl Vendor for Chat {
    fn url(&self, _stream: bool) -> &Url {
        &self.url
    }

    fn authorize<'a>(
        &'a self,
        _client: &'a Client,
        _url: &'a Url,
        headers: &'a mut HeaderMap,
        _body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LlmError>> {
        Box::pin(google::authorize_with(self.google.as_ref(), headers))
    }

    fn body(&self, ask: &Ask<'_>) -> Value {
        let mut body = request_body(
            ask.model,
            (ask.max_output_tokens, ask.max_tokens_field),
            ask.conversation,
            ask.format,
            ask.mode,
        );
        if let Some(object) = body.as_object_mut() {
            if let Some(model) = &self.model_override {
                object.insert("model".into(), json!(model));
            }
            if let Some(temperature) = self.temperature {
                object.insert("temperature".into(), json!(temperature));
            }
            if let Some(seed) = self.seed {
                object.insert("seed".into(), json!(seed));
            }
        }
        body
    }

    fn ask_for_stream(&self, body: &mut Map<String, Value>) {
        body.insert("stream".into(), Value::Bool(true));
        // The usage comes in a last chunk only when asked for.
        body.entry("stream_options")
            .or_insert_with(|| json!({"include_usage": true}));
    }

    fn answers(&self) -> &dyn Answers {
        &self.reader
    }

    fn weaker(&self, mode: StructuredOutput) -> Option<StructuredOutput> {
        match mode {
            StructuredOutput::JsonSchema => Some(StructuredOutput::JsonObject),
            StructuredOutput::JsonObject => Some(StructuredOutput::None),
            StructuredOutput::None => None,
        }
    }

    fn sends_seed(&self) -> bool {
        true
    }

    fn cap_field(&self) -> Option<MaxTokensField> {
        Some(self.cap_field)
    }

    fn scrub(&self, text: &str) -> String {
        google::scrub_with(self.google.as_ref(), text)
    }

    fn handoff_env<'a>(
        &'a self,
        _client: &'a Client,
    ) -> BoxFuture<'a, Result<Vec<(String, SecretString)>, LlmError>> {
        Box::pin(google::handoff_with(self.google.as_ref()))
    }
}

/// Reads Chat Completions answers; errors name `kind`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader {
    pub(super) kind: ProviderKind,
}

impl Answers for Reader {
    fn decoder(&self) -> Option<Box<dyn Decoder>> {
        Some(Box::new(ServerSentEvents::new(Box::new(Stream::new(self.kind)))))
    }

    fn read(
        &self,
        model: &str,
        bytes: &[u8],
        _tool_format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError> {
        read_completion(self.kind, model, bytes)
    }
}

pub(super) fn request_body(
    model: &str,
    (max_output_tokens, field): (u32, MaxTokensField),
    conversation: &Conversation,
    format: Option<&ResponseFormat>,
    mode: StructuredOutput,
) -> Value {
    let mut messages = Vec::with_capacity(conversation.turns.len() + 2);
    if !conversation.system.is_empty() {
        messages.push(json!({"role": "system", "content": conversation.system}));
    }
    messages.push(json!({"role": "user", "content": conversation.prefix}));
    for turn in &conversation.turns {
        let role = match turn.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        messages.push(json!({"role": role, "content": turn.text}));
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
    });
    body[field.as_str()] = json!(max_output_tokens);
    match (format, mode) {
        (Some(format), StructuredOutput::JsonSchema) => {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {
                    "name": format.name,
                    "schema": format.schema,
                    "strict": is_strict_compatible(&format.schema),
                }
            });
        }
        (Some(_), StructuredOutput::JsonObject) => {
            body["response_format"] = json!({"type": "json_object"});
        }
        _ => {}
    }
    body
}

/// Whether OpenAI's strict structured outputs accept `schema`: every object schema closed with
/// `additionalProperties: false` and requiring all of its properties. A map with free keys (the
/// edit format's `create-or-update`) is not, and is then sent with `strict: false`.
fn is_strict_compatible(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            let is_object_schema = map.get("type").is_some_and(|kind| {
                kind == "object"
                    || kind
                        .as_array()
                        .is_some_and(|kinds| kinds.iter().any(|kind| kind == "object"))
            }) || map.contains_key("properties");
            if is_object_schema {
                if map.get("additionalProperties") != Some(&Value::Bool(false)) {
                    return false;
                }
                let required: Vec<&str> = map
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|names| names.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let all_required = map
                    .get("properties")
                    .and_then(Value::as_object)
                    .is_none_or(|properties| properties.keys().all(|name| required.contains(&name.as_str())));
                if !all_required {
                    return false;
                }
            }
            map.iter()
                .filter(|(key, _)| !matches!(key.as_str(), "required" | "enum" | "const"))
                .all(|(_, value)| is_strict_compatible(value))
        }
        Value::Array(items) => items.iter().all(is_strict_compatible),
        _ => true,
    }
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

fn usage_of(usage: Option<WireUsage>) -> Usage {
    usage
        .map(|usage| Usage {
            input_tokens: usage.prompt_tokens.unwrap_or(0),
            output_tokens: usage.completion_tokens.unwrap_or(0),
            cached_input_tokens: usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .unwrap_or(0),
            estimated_answers: 0,
        })
        .unwrap_or_default()
}

pub(super) fn read_completion(
    provider: ProviderKind,
    model: &str,
    bytes: &[u8],
) -> Result<Completion, LlmError> {
    let response: ChatResponse = super::data::parse_body(provider, model, bytes, "a chat completion")?;
    let usage = usage_of(response.usage);
    let choice = response.choices.into_iter().next().map(|choice| {
        let message = choice.message.unwrap_or(Message {
            content: None,
            refusal: None,
        });
        (message.content, message.refusal, choice.finish_reason)
    });
    answer(provider, model, usage, choice)
}

/// The rules shared by whole and streamed answers: `choice` is the first choice's content,
/// refusal and finish reason, `None` when there was no choice.
fn answer(
    provider: ProviderKind,
    model: &str,
    usage: Usage,
    choice: Option<(Option<String>, Option<String>, Option<String>)>,
) -> Result<Completion, LlmError> {
    let empty = |reason: String| LlmError::EmptyAnswer {
        provider,
        model: model.to_owned(),
        usage,
        reason,
    };
    let Some((content, refusal, finish_reason)) = choice else {
        return Err(empty("the response has no choices".to_owned()));
    };
    if let Some(refusal) = refusal.filter(|text| !text.trim().is_empty()) {
        return Err(LlmError::Refused {
            provider,
            model: model.to_owned(),
            usage,
            message: bork_ci_core::untrusted::excerpt(&refusal, 500),
        });
    }
    let finish = match finish_reason.as_deref() {
        None | Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("content_filter") => {
            return Err(LlmError::Refused {
                provider,
                model: model.to_owned(),
                usage,
                message: "a content filter stopped the answer (finish_reason content_filter)".to_owned(),
            });
        }
        Some(other) => FinishReason::Other(other.to_owned()),
    };
    let text = content.unwrap_or_default();
    if text.trim().is_empty() {
        let reason = match finish {
            FinishReason::Length => {
                "the output token limit was reached before any answer (finish_reason length)".to_owned()
            }
            FinishReason::Other(other) => {
                format!("the message has no content (finish_reason {other})")
            }
            _ => "the message has no content".to_owned(),
        };
        return Err(empty(reason));
    }
    Ok(Completion { text, usage, finish })
}

/// One `chat.completion.chunk` of a stream (or an error object a server sends instead).
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    index: u32,
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
}

/// An answer read from a Chat Completions stream (`stream: true`, with
/// `stream_options.include_usage` so the last chunk carries the usage): the first choice's
/// content and refusal deltas concatenated, its finish reason, the usage; `data: [DONE]` ends it.
#[derive(Debug)]
pub(super) struct Stream {
    provider: ProviderKind,
    content: String,
    refusal: String,
    any_choice: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    done: bool,
}

impl Stream {
    fn new(provider: ProviderKind) -> Self {
        Self {
            provider,
            content: String::new(),
            refusal: String::new(),
            any_choice: false,
            finish_reason: None,
            usage: None,
            done: false,
        }
    }
}

impl Events for Stream {
    fn event(&mut self, event: &sse::Event) -> Result<(), StreamProblem> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk: Chunk = serde_json::from_str(data).map_err(|error| {
            StreamProblem::Invalid(format!("a stream chunk is not a chat completion chunk: {error}"))
        })?;
        if let Some(error) = chunk.error {
            let message = error_excerpt(json!({"error": error}).to_string().as_bytes());
            return Err(StreamProblem::Server {
                message,
                retryable: true,
            });
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage_of(Some(usage)));
        }
        for choice in chunk.choices.into_iter().filter(|choice| choice.index == 0) {
            self.any_choice = true;
            if let Some(delta) = choice.delta {
                if let Some(content) = delta.content {
                    self.content.push_str(&content);
                }
                if let Some(refusal) = delta.refusal {
                    self.refusal.push_str(&refusal);
                }
            }
            if choice.finish_reason.is_some() {
                self.finish_reason = choice.finish_reason;
            }
        }
        Ok(())
    }
}

impl Partial for Stream {
    /// Whether the answer is complete: `[DONE]`, or a finish reason (some servers end the
    /// stream without `[DONE]`).
    fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    /// Whether `data: [DONE]` came.
    fn is_ended(&self) -> bool {
        self.done
    }

    /// The usage reported so far (the last chunk carries it).
    fn usage(&self) -> Usage {
        self.usage.unwrap_or_default()
    }

    fn text_bytes(&self) -> usize {
        self.content.len() + self.refusal.len()
    }

    fn finish(
        self: Box<Self>,
        model: &str,
        _tool_format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError> {
        let this = *self;
        let usage = this.usage();
        let choice = this.any_choice.then(|| {
            (
                Some(this.content),
                Some(this.refusal).filter(|refusal| !refusal.is_empty()),
                this.finish_reason,
            )
        });
        answer(this.provider, model, usage, choice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strictness_follows_the_schema() {
        let closed = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["delete"],
            "properties": {"delete": {"type": "array", "items": {"type": "string"}}}
        });
        assert!(is_strict_compatible(&closed));
        let map = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["create-or-update"],
            "properties": {"create-or-update": {"type": "object", "additionalProperties": {"type": "string"}}}
        });
        assert!(!is_strict_compatible(&map));
        let optional = json!({
            "type": "object",
            "additionalProperties": false,
            "required": [],
            "properties": {"delete": {"type": "array"}}
        });
        assert!(!is_strict_compatible(&optional));
    }

    #[test]
    fn reads_usage_with_cached_tokens() {
        let body = br#"{"id":"x","object":"chat.completion","created":1,"model":"m",
            "choices":[{"index":0,"message":{"role":"assistant","content":"{}","refusal":null},"logprobs":null,"finish_reason":"stop"}],
            "usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":64}}}"#;
        let completion = read_completion(ProviderKind::Openai, "m", body).expect("reads");
        assert_eq!(completion.text, "{}");
        assert_eq!(completion.finish, FinishReason::Stop);
        assert_eq!(
            completion.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 7,
                cached_input_tokens: 64,
                estimated_answers: 0,
            }
        );
    }

    #[test]
    fn content_filter_is_a_refusal_and_null_content_is_empty() {
        let filtered = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}"#;
        assert!(matches!(
            read_completion(ProviderKind::Openai, "m", filtered),
            Err(LlmError::Refused { .. })
        ));
        let empty = br#"{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"length"}]}"#;
        let error = read_completion(ProviderKind::Openai, "m", empty).expect_err("empty");
        assert!(error.to_string().contains("output token limit"), "{error}");
    }
}
