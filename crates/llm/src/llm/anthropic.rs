//! Anthropic Messages: the request body and reading the answer.
//!
//! `POST {base_url}/v1/messages` (default base `https://api.anthropic.com`), headers `x-api-key`
//! and `anthropic-version: 2023-06-01` (set in `endpoint`). The system prompt is a text block list and
//! the prefix the first user content block, both marked `cache_control: ephemeral`, so every
//! iteration reads them from the prompt cache; the last block of the conversation is marked too, so
//! the next iteration also reuses what this one appended. Turns of the same role in a row are
//! merged into one message (the API wants roles to alternate).
//!
//! Structured output: when a [`ResponseFormat`] with an object schema is given, it becomes the one
//! tool, forced through `tool_choice`, and the answer text is that tool's `input` exactly as the
//! server sent it (kept raw, so duplicate keys stay visible to the parser). A response without the
//! tool call falls back to its text blocks, so a plain JSON answer works too.
//!
//! [`Messages`] is the vendor for Anthropic and for Claude on Vertex (`rawPredict`, a Google
//! token, `anthropic_version` in the body instead of the header).

use bork_ci_core::net::reqwest::header::HeaderMap;
use bork_ci_core::net::reqwest::{Client, Url};
use futures_util::future::BoxFuture;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::data::{Completion, Conversation, FinishReason, LlmError, ProviderKind, ResponseFormat};
use super::data::{Role, Usage};
use super::google::{self, TokenSource};
use super::sse;
use super::vendor::{
    Answers, Ask, Decoder, Events, Partial, ServerSentEvents, StreamProblem, Vendor, error_excerpt,
};

pub(super) const PATH: &str = "/v1/messages";
pub(super) const VERSION: &str = "2023-06-01";
/// What Vertex wants in the body of an Anthropic request instead of the `anthropic-version` header.
pub(super) const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

const PROVIDER: ProviderKind = ProviderKind::Anthropic;

/// Anthropic Messages at one URL.
#[derive(Debug)]
pub(super) struct Messages {
    pub(super) url: Url,
    /// Vertex: `:streamRawPredict`, where streamed requests go.
    pub(super) stream_url: Option<Url>,
    /// Vertex: the Google token source; `anthropic_version` goes in the body, the model in the URL.
    pub(super) google: Option<TokenSource>,
    /// `cache_control` blocks (true) or plain strings (false).
    pub(super) prompt_caching: bool,
    pub(super) temperature: Option<f64>,
}

impl Vendor for Messages {
    fn url(&self, stream: bool) -> &Url {
        match &self.stream_url {
            Some(url) if stream => url,
            _ => &self.url,
        }
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
            ask.max_output_tokens,
            ask.conversation,
            ask.tool_format(),
        );
        if let Some(object) = body.as_object_mut() {
            if self.google.is_some() {
                object.remove("model");
                object.insert("anthropic_version".into(), json!(VERTEX_ANTHROPIC_VERSION));
            }
            if !self.prompt_caching {
                plain_content(object);
            }
            if let Some(temperature) = self.temperature {
                object.insert("temperature".into(), json!(temperature));
            }
        }
        body
    }

    fn answers(&self) -> &dyn Answers {
        &Reader
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

/// Reads Messages answers.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader;

impl Answers for Reader {
    fn decoder(&self) -> Option<Box<dyn Decoder>> {
        Some(Box::new(ServerSentEvents::new(Box::<Stream>::default())))
    }

    fn read(
        &self,
        model: &str,
        bytes: &[u8],
        tool_format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError> {
        read_completion(model, bytes, tool_format)
    }
}

fn cached_text(text: &str) -> Value {
    json!({"type": "text", "text": non_empty(text), "cache_control": {"type": "ephemeral"}})
}

/// The API refuses empty text blocks.
fn non_empty(text: &str) -> &str {
    if text.is_empty() { "(empty)" } else { text }
}

pub(super) fn request_body(
    model: &str,
    max_output_tokens: u32,
    conversation: &Conversation,
    format: Option<&ResponseFormat>,
) -> Value {
    // (role, blocks) with same-role neighbours merged.
    let mut messages: Vec<(&str, Vec<Value>)> = vec![("user", vec![cached_text(&conversation.prefix)])];
    for turn in &conversation.turns {
        let role = match turn.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let block = json!({"type": "text", "text": non_empty(&turn.text)});
        match messages.last_mut() {
            Some((last_role, blocks)) if *last_role == role => blocks.push(block),
            _ => messages.push((role, vec![block])),
        }
    }
    if !conversation.turns.is_empty()
        && let Some(last) = messages.last_mut().and_then(|(_, blocks)| blocks.last_mut())
    {
        last["cache_control"] = json!({"type": "ephemeral"});
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": max_output_tokens,
        "messages": messages,
    });
    if !conversation.system.is_empty() {
        body["system"] = json!([cached_text(&conversation.system)]);
    }
    if let Some(format) = format.filter(|format| format.schema.get("type") == Some(&json!("object"))) {
        body["tools"] = json!([{
            "name": format.name,
            "description": "Give your whole answer as this tool's input.",
            "input_schema": format.schema,
        }]);
        body["tool_choice"] = json!({"type": "tool", "name": format.name});
    }
    body
}

/// Without prompt caching (`llm.prompt-caching = false`): the system prompt and every message's
/// content as plain strings, no `cache_control`, no block lists (some gateways reject them).
fn plain_content(body: &mut serde_json::Map<String, Value>) {
    fn joined(blocks: &Value) -> Option<String> {
        let blocks = blocks.as_array()?;
        let texts: Option<Vec<&str>> = blocks
            .iter()
            .map(|block| (block.get("type")? == "text").then(|| block.get("text")?.as_str())?)
            .collect();
        Some(texts?.join("\n\n"))
    }
    if let Some(system) = body.get_mut("system")
        && let Some(text) = joined(system)
    {
        *system = Value::String(text);
    }
    if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
        for message in messages {
            if let Some(content) = message.get_mut("content")
                && let Some(text) = joined(content)
            {
                *content = Value::String(text);
            }
        }
    }
}

#[derive(Deserialize)]
struct MessageResponse {
    #[serde(default)]
    content: Vec<Block>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A content block; a plain struct rather than a tagged enum so `input` can stay raw.
#[derive(Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

/// A content block as read from a whole response or assembled from a stream; `input` is the
/// tool input's JSON text exactly as the server sent it.
#[derive(Debug, Default)]
struct OwnedBlock {
    kind: String,
    text: Option<String>,
    name: Option<String>,
    input: Option<String>,
}

fn usage_of(usage: &WireUsage) -> Usage {
    let read = usage.cache_read_input_tokens.unwrap_or(0);
    Usage {
        input_tokens: usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0))
            .saturating_add(read),
        output_tokens: usage.output_tokens.unwrap_or(0),
        cached_input_tokens: read,
        estimated_answers: 0,
    }
}

pub(super) fn read_completion(
    model: &str,
    bytes: &[u8],
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    let response: MessageResponse = super::data::parse_body(PROVIDER, model, bytes, "a message")?;
    let usage = response.usage.as_ref().map(usage_of).unwrap_or_default();
    let blocks = response
        .content
        .into_iter()
        .map(|block| OwnedBlock {
            kind: block.kind,
            text: block.text,
            name: block.name,
            input: block.input.map(|input| input.get().to_owned()),
        })
        .collect();
    answer(model, blocks, response.stop_reason, usage, format)
}

/// The rules shared by whole and streamed answers.
fn answer(
    model: &str,
    blocks: Vec<OwnedBlock>,
    stop_reason: Option<String>,
    usage: Usage,
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    let text_blocks: String = blocks
        .iter()
        .filter(|block| block.kind == "text")
        .filter_map(|block| block.text.as_deref())
        .collect();
    let finish = match stop_reason.as_deref() {
        None | Some("end_turn" | "stop_sequence" | "tool_use") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some("refusal") => {
            let said = text_blocks.split_whitespace().collect::<Vec<_>>().join(" ");
            return Err(LlmError::Refused {
                provider: PROVIDER,
                model: model.to_owned(),
                usage,
                message: if said.is_empty() {
                    "stop_reason refusal".to_owned()
                } else {
                    format!(
                        "stop_reason refusal: {}",
                        bork_ci_core::untrusted::excerpt(&said, 500)
                    )
                },
            });
        }
        Some(other) => FinishReason::Other(other.to_owned()),
    };
    let tool_input = format.and_then(|format| {
        blocks
            .iter()
            .find(|block| block.kind == "tool_use" && block.name.as_deref() == Some(&format.name))
            .and_then(|block| block.input.as_ref())
    });
    let text = match tool_input {
        Some(input) => input.clone(),
        None => text_blocks,
    };
    if text.trim().is_empty() {
        let reason = match finish {
            FinishReason::Length => {
                "the output token limit was reached before any answer (stop_reason max_tokens)".to_owned()
            }
            _ => {
                let kinds: Vec<&str> = blocks.iter().map(|block| block.kind.as_str()).collect();
                format!(
                    "no text or answer tool call in the content (blocks: [{}])",
                    kinds.join(", ")
                )
            }
        };
        return Err(LlmError::EmptyAnswer {
            provider: PROVIDER,
            model: model.to_owned(),
            usage,
            reason,
        });
    }
    Ok(Completion { text, usage, finish })
}

/// One event of a Messages stream, by its `type` (the event's name).
#[derive(Deserialize)]
struct StreamEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    message: Option<StartedMessage>,
    #[serde(default)]
    content_block: Option<Block>,
    #[serde(default)]
    delta: Option<StreamDelta>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct StartedMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct StreamDelta {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    partial_json: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
}

/// An answer read from a Messages stream (`stream: true`): `message_start` (usage so far),
/// content blocks built from `content_block_start` and their `text_delta` / `input_json_delta`
/// deltas (the tool input's JSON text concatenated as sent, so it stays raw), `message_delta`
/// (stop reason, cumulative usage), `message_stop`. `ping` and unknown events are skipped; an
/// `error` event ends the stream.
#[derive(Debug, Default)]
pub(super) struct Stream {
    /// Blocks by index, with the tool input's deltas.
    blocks: Vec<(usize, OwnedBlock, Option<String>)>,
    stop_reason: Option<String>,
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    text_bytes: usize,
    done: bool,
}

impl Stream {
    fn overlay(&mut self, usage: &WireUsage) {
        // Counts are cumulative: the latest value of each wins.
        if usage.input_tokens.is_some() {
            self.input_tokens = usage.input_tokens;
        }
        if usage.cache_creation_input_tokens.is_some() {
            self.cache_creation_input_tokens = usage.cache_creation_input_tokens;
        }
        if usage.cache_read_input_tokens.is_some() {
            self.cache_read_input_tokens = usage.cache_read_input_tokens;
        }
        if usage.output_tokens.is_some() {
            self.output_tokens = usage.output_tokens;
        }
    }
}

impl Events for Stream {
    fn event(&mut self, event: &sse::Event) -> Result<(), StreamProblem> {
        let parsed: StreamEvent = serde_json::from_str(&event.data).map_err(|error| {
            StreamProblem::Invalid(format!("a stream event is not a Messages event: {error}"))
        })?;
        match parsed.kind.as_str() {
            "message_start" => {
                if let Some(usage) = parsed.message.and_then(|message| message.usage) {
                    self.overlay(&usage);
                }
            }
            "content_block_start" => {
                let block = parsed.content_block.map(|block| OwnedBlock {
                    text: block.text,
                    name: block.name,
                    input: block.input.map(|input| input.get().to_owned()),
                    kind: block.kind,
                });
                self.text_bytes += block
                    .as_ref()
                    .and_then(|block| block.text.as_ref())
                    .map_or(0, String::len);
                self.blocks.push((
                    parsed.index.unwrap_or(self.blocks.len()),
                    block.unwrap_or_default(),
                    None,
                ));
            }
            "content_block_delta" => {
                let (Some(index), Some(delta)) = (parsed.index, parsed.delta) else {
                    return Ok(());
                };
                let Some((_, block, partial)) = self.blocks.iter_mut().rev().find(|(at, ..)| *at == index)
                else {
                    return Err(StreamProblem::Invalid(format!(
                        "a delta for content block {index}, which was not started"
                    )));
                };
                match delta.kind.as_deref() {
                    Some("text_delta") => {
                        let text = delta.text.unwrap_or_default();
                        self.text_bytes += text.len();
                        block.text.get_or_insert_with(String::new).push_str(&text);
                    }
                    Some("input_json_delta") => {
                        let json = delta.partial_json.unwrap_or_default();
                        self.text_bytes += json.len();
                        partial.get_or_insert_with(String::new).push_str(&json);
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = parsed.delta.and_then(|delta| delta.stop_reason) {
                    self.stop_reason = Some(reason);
                }
                if let Some(usage) = parsed.usage {
                    self.overlay(&usage);
                }
            }
            "message_stop" => self.done = true,
            "error" => {
                let error = parsed.error.unwrap_or(Value::Null);
                let kind = error
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let message = error_excerpt(json!({"error": error}).to_string().as_bytes());
                let retryable = !matches!(
                    kind.as_str(),
                    "invalid_request_error"
                        | "authentication_error"
                        | "permission_error"
                        | "not_found_error"
                        | "request_too_large"
                );
                return Err(StreamProblem::Server { message, retryable });
            }
            _ => {}
        }
        Ok(())
    }
}

impl Partial for Stream {
    /// Whether `message_stop` came.
    fn is_complete(&self) -> bool {
        self.done
    }

    fn usage(&self) -> Usage {
        usage_of(&WireUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_creation_input_tokens: self.cache_creation_input_tokens,
            cache_read_input_tokens: self.cache_read_input_tokens,
        })
    }

    /// Bytes of answer text (and tool input) received so far.
    fn text_bytes(&self) -> usize {
        self.text_bytes
    }

    fn finish(self: Box<Self>, model: &str, format: Option<&ResponseFormat>) -> Result<Completion, LlmError> {
        let usage = self.usage();
        let this = *self;
        let blocks = this
            .blocks
            .into_iter()
            .map(|(_, mut block, partial)| {
                if let Some(partial) = partial.filter(|json| !json.trim().is_empty()) {
                    block.input = Some(partial);
                }
                block
            })
            .collect();
        answer(model, blocks, this.stop_reason, usage, format)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::data::Turn;

    #[test]
    fn same_role_turns_merge_and_the_last_block_is_cached() {
        let conversation = Conversation {
            system: "sys".into(),
            prefix: "repo".into(),
            turns: vec![Turn::user("more"), Turn::assistant("{}"), Turn::user("findings")],
        };
        let body = request_body("claude", 100, &conversation, None);
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[0]["content"].as_array().map(Vec::len), Some(2));
        assert_eq!(messages[0]["content"][0]["cache_control"]["type"], "ephemeral");
        assert!(messages[0]["content"][1].get("cache_control").is_none());
        assert_eq!(messages[2]["content"][0]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn tool_input_is_kept_raw() {
        let format = ResponseFormat {
            name: "edits".into(),
            schema: json!({"type": "object"}),
        };
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m",
            "content":[{"type":"tool_use","id":"toolu_1","name":"edits","input":{"a" : 1, "a": 2}}],
            "stop_reason":"tool_use","stop_sequence":null,
            "usage":{"input_tokens":10,"cache_creation_input_tokens":null,"cache_read_input_tokens":90,"output_tokens":5}}"#;
        let completion = read_completion("m", body, Some(&format)).expect("reads");
        assert_eq!(completion.text, r#"{"a" : 1, "a": 2}"#);
        assert_eq!(
            completion.usage,
            Usage {
                input_tokens: 100,
                output_tokens: 5,
                cached_input_tokens: 90,
                estimated_answers: 0,
            }
        );
    }

    #[test]
    fn only_other_blocks_is_an_empty_answer() {
        let body = br#"{"content":[{"type":"thinking","thinking":"hm","signature":"s"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}"#;
        let error = read_completion("m", body, None).expect_err("empty");
        assert!(error.to_string().contains("thinking"), "{error}");
    }
}
