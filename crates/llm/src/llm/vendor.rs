//! What every vendor's API is to the HTTP exchange: the [`Vendor`] trait (where a request goes,
//! what each attempt adds to its headers, the request body, the weaker structured-output mode,
//! the credentials a separate process gets) and the [`Answers`] trait (reading a whole answer, or
//! a streamed one through a [`Decoder`]: server-sent events read by an [`Events`] reader, or a
//! vendor's own framing). `openai`, `anthropic` and `bedrock` implement them; `endpoint` picks
//! one; `wire` speaks to them without knowing which.

use std::fmt;

use bork_ci_core::net::reqwest::header::HeaderMap;
use bork_ci_core::net::reqwest::{Client, Url};
use futures_util::future::BoxFuture;
use secrecy::SecretString;
use serde_json::{Map, Value};

use super::data::{
    Completion, Conversation, LlmError, MaxTokensField, ResponseFormat, StructuredOutput, Usage,
};
use super::sse;

/// How much of an error body an error message quotes.
const EXCERPT_CHARS: usize = 300;

/// What one request asks for: the conversation and the shape negotiated so far.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask<'a> {
    pub model: &'a str,
    pub conversation: &'a Conversation,
    pub format: Option<&'a ResponseFormat>,
    pub mode: StructuredOutput,
    pub max_output_tokens: u32,
    /// OpenAI-compatible bodies: the field the cap goes in.
    pub max_tokens_field: MaxTokensField,
}

impl Ask<'_> {
    /// The format a forced tool carries: only in `json-schema` mode.
    pub(super) fn tool_format(&self) -> Option<&ResponseFormat> {
        self.format.filter(|_| self.mode == StructuredOutput::JsonSchema)
    }
}

/// One vendor's API as the HTTP exchange sees it. Static headers (a key, extra headers) are
/// `endpoint`'s; what changes per attempt is the vendor's.
pub(super) trait Vendor: fmt::Debug + Send + Sync {
    /// Where a request goes, streamed or not.
    fn url(&self, stream: bool) -> &Url;

    /// Adds what one attempt with `body` to `url` needs to `headers`: a fresh signature or
    /// token.
    fn authorize<'a>(
        &'a self,
        client: &'a Client,
        url: &'a Url,
        headers: &'a mut HeaderMap,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LlmError>>;

    /// The request body, with this vendor's touches (temperature, seed, its version field).
    fn body(&self, ask: &Ask<'_>) -> Value;

    /// Asks for a streamed answer in `body` (server-sent events: `"stream": true`).
    fn ask_for_stream(&self, body: &mut Map<String, Value>) {
        body.insert("stream".into(), Value::Bool(true));
    }

    /// How this vendor's answers are read.
    fn answers(&self) -> &dyn Answers;

    /// The next weaker structured-output mode after `mode` was rejected. A forced tool has no
    /// JSON mode between it and none.
    fn weaker(&self, mode: StructuredOutput) -> Option<StructuredOutput> {
        match mode {
            StructuredOutput::JsonSchema => Some(StructuredOutput::None),
            StructuredOutput::JsonObject | StructuredOutput::None => None,
        }
    }

    /// Whether `llm.seed` reaches the server.
    fn sends_seed(&self) -> bool {
        false
    }

    /// The field the output cap goes in when `llm.max-tokens-field` is not set, for a vendor
    /// whose body has a choice of fields.
    fn cap_field(&self) -> Option<MaxTokensField> {
        None
    }

    /// Removes the credentials fetched so far from a message.
    fn scrub(&self, text: &str) -> String {
        text.to_owned()
    }

    /// Credentials for a separate process that calls this vendor on its own.
    fn handoff_env<'a>(
        &'a self,
        client: &'a Client,
    ) -> BoxFuture<'a, Result<Vec<(String, SecretString)>, LlmError>>;
}

/// How a vendor's answers are read: whole, or as they stream.
pub(super) trait Answers: Send + Sync {
    /// A reader of a streamed answer; `None`: the vendor's answers never stream.
    fn decoder(&self) -> Option<Box<dyn Decoder>>;

    /// Reads a whole answer body. `tool_format`: the forced tool whose input is the answer.
    fn read(
        &self,
        model: &str,
        bytes: &[u8],
        tool_format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError>;
}

/// A streamed answer as far as it came: what the exchange watches while it streams, and the
/// answer at its end. Each vendor's stream reader is one.
pub(super) trait Partial: Send {
    /// Whether the answer is complete.
    fn is_complete(&self) -> bool;

    /// Whether the stream's own end marker came: nothing more to read.
    fn is_ended(&self) -> bool {
        self.is_complete()
    }

    /// The usage reported so far.
    fn usage(&self) -> Usage;

    /// Bytes of answer text received so far.
    fn text_bytes(&self) -> usize;

    /// The answer, read by the same rules as a whole one.
    fn finish(
        self: Box<Self>,
        model: &str,
        tool_format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError>;
}

/// How a streamed body is read, chunk by chunk as it arrives, into a [`Partial`] answer.
pub(super) trait Decoder: Send {
    /// The media type a streamed answer comes as (`content-type`); a streamed request answered
    /// with another is read whole.
    fn media_type(&self) -> &'static str;

    /// Reads the next chunk of the body, split anywhere.
    fn push(&mut self, chunk: &[u8]) -> Result<(), StreamProblem>;

    /// The answer as far as it came.
    fn partial(&self) -> &dyn Partial;

    /// The answer once the body ended.
    fn into_partial(self: Box<Self>) -> Box<dyn Partial>;
}

/// A streamed answer of server-sent events being read, event by event.
pub(super) trait Events: Partial {
    /// Reads one event.
    fn event(&mut self, event: &sse::Event) -> Result<(), StreamProblem>;
}

/// A `text/event-stream` body parsed into events (`sse`) for an [`Events`] reader.
pub(super) struct ServerSentEvents {
    parser: sse::Parser,
    events: Box<dyn Events>,
}

impl ServerSentEvents {
    pub(super) fn new(events: Box<dyn Events>) -> Self {
        Self {
            parser: sse::Parser::new(),
            events,
        }
    }
}

impl Decoder for ServerSentEvents {
    fn media_type(&self) -> &'static str {
        "text/event-stream"
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), StreamProblem> {
        let events = &mut self.events;
        let mut problem = None;
        let pushed = self.parser.push(chunk, &mut |event: sse::Event| {
            if problem.is_none()
                && let Err(found) = events.event(&event)
            {
                problem = Some(found);
            }
        });
        if let Err(error) = pushed {
            problem.get_or_insert(StreamProblem::Invalid(format!("the event stream holds {error}")));
        }
        problem.map_or(Ok(()), Err)
    }

    fn partial(&self) -> &dyn Partial {
        &*self.events
    }

    /// An event whose blank line never came is not read (see `sse::Parser::finish`).
    fn into_partial(mut self: Box<Self>) -> Box<dyn Partial> {
        self.parser.finish();
        self.events
    }
}

/// A problem inside a stream, found by a vendor's stream reader.
pub(super) enum StreamProblem {
    /// The server reported an error in the stream (an `error` event, an error chunk).
    Server { message: String, retryable: bool },
    /// An event that is not the vendor's documented JSON.
    Invalid(String),
}

/// The readable part of an error body: the vendor's `error.message` (both vendors nest it so),
/// else the start of the body, cut short.
pub(super) fn error_excerpt(bytes: &[u8]) -> String {
    let from_json = serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .and_then(|value| {
            let Some(error) = value.get("error") else {
                // Bedrock and other AWS services: `{"message": "..."}` at the top.
                return value.get("message")?.as_str().map(str::to_owned);
            };
            let message = error.get("message")?.as_str()?.to_owned();
            Some(match error.get("type").and_then(|kind| kind.as_str()) {
                Some(kind) => format!("{kind}: {message}"),
                None => message,
            })
        });
    let text = from_json.unwrap_or_else(|| String::from_utf8_lossy(bytes).into_owned());
    // Secrets go before any cutting, so none is shown in part.
    let text = bork_ci_core::secrets::redact(&text);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    bork_ci_core::untrusted::excerpt(&text, EXCERPT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_prefer_the_vendor_message_and_stay_short() {
        let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(error_excerpt(body), "overloaded_error: Overloaded");
        let long = "x".repeat(1000);
        assert_eq!(error_excerpt(long.as_bytes()).chars().count(), EXCERPT_CHARS + 1);
        assert_eq!(error_excerpt(b""), "(empty body)");
        assert_eq!(
            error_excerpt(b"\xff\xfe bad\n\n gateway"),
            "\u{fffd}\u{fffd} bad gateway"
        );
    }
}
