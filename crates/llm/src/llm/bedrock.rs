//! AWS Bedrock's Converse API: the request body, reading the answer (whole or streamed), and
//! SigV4 credentials.
//!
//! `POST {base}/model/{modelId}/converse` (default base
//! `https://bedrock-runtime.{region}.amazonaws.com`), signed with SigV4 for the service `bedrock`
//! by the `aws-sigv4` crate. Messages carry content blocks (`[{"text": …}]`), the system prompt is
//! `system: [{"text": …}]`, the output cap `inferenceConfig.maxTokens`. Structured output is one
//! tool (`toolConfig.tools[0].toolSpec.inputSchema.json`) forced through `toolChoice.tool`; the
//! answer is that tool's `input`, kept raw. Usage: `inputTokens`, `outputTokens`,
//! `cacheReadInputTokens`, `cacheWriteInputTokens`.
//!
//! Streamed (`llm.stream`): the same body to `…/converse-stream`, answered as AWS's event stream
//! (`application/vnd.amazon.eventstream`: binary frames with headers and a CRC32 each, decoded by
//! `aws-smithy-eventstream`). Each frame's `:event-type` names its JSON payload: `messageStart`,
//! `contentBlockStart` (a tool call's name), `contentBlockDelta` (`delta.text`, or
//! `delta.toolUse.input`: the tool input's JSON text in pieces, concatenated as sent so it stays
//! raw), `contentBlockStop`, `messageStop` (`stopReason`), `metadata` (`usage`). A frame whose
//! `:message-type` is `exception` (`throttlingException`, `validationException`, …) or `error`
//! ends the stream with the server's message.
//!
//! Credentials: AWS's standard chain (`aws_credentials`): the environment, profiles (keys, SSO,
//! `credential_process`), web identity, ECS/EKS container credentials, IMDSv2. Temporary
//! credentials are cached until shortly before they expire.

use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::Credentials as AwsCredentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::Message as Frame;
use bork_ci_core::net::reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use bork_ci_core::net::reqwest::{Client, Url};
use futures_util::future::BoxFuture;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::aws_credentials;
use super::data::{
    Completion, Conversation, Credentials, FinishReason, LlmError, ProviderKind, ResponseFormat,
};
use super::data::{Role, Usage};
use super::vendor::{Answers, Ask, Decoder, Partial, StreamProblem, Vendor};

const PROVIDER: ProviderKind = ProviderKind::Bedrock;

/// Largest event-stream frame buffered; AWS's frames are at most 16 MiB.
const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;

/// The Converse API at one model's URLs, SigV4-signed.
#[derive(Debug)]
pub(super) struct Converse {
    /// `…/converse`.
    pub(super) url: Url,
    /// `…/converse-stream`.
    pub(super) stream_url: Url,
    pub(super) aws: AwsAuth,
    pub(super) temperature: Option<f64>,
}

impl Vendor for Converse {
    fn url(&self, stream: bool) -> &Url {
        if stream { &self.stream_url } else { &self.url }
    }

    fn authorize<'a>(
        &'a self,
        client: &'a Client,
        url: &'a Url,
        headers: &'a mut HeaderMap,
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<(), LlmError>> {
        Box::pin(self.aws.sign(client, url, headers, body))
    }

    /// The URL asks for the stream; the body is the same.
    fn ask_for_stream(&self, _body: &mut serde_json::Map<String, Value>) {}

    fn body(&self, ask: &Ask<'_>) -> Value {
        let mut body = request_body(ask.max_output_tokens, ask.conversation, ask.tool_format());
        if let Some(temperature) = self.temperature
            && let Some(config) = body.get_mut("inferenceConfig").and_then(Value::as_object_mut)
        {
            config.insert("temperature".into(), json!(temperature));
        }
        body
    }

    fn answers(&self) -> &dyn Answers {
        &Reader
    }

    fn scrub(&self, text: &str) -> String {
        self.aws.scrub(text)
    }

    fn handoff_env<'a>(
        &'a self,
        client: &'a Client,
    ) -> BoxFuture<'a, Result<Vec<(String, SecretString)>, LlmError>> {
        Box::pin(self.aws.handoff_env(client))
    }
}

/// Reads Converse answers, whole or from `converse-stream`'s event stream.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reader;

impl Answers for Reader {
    fn decoder(&self) -> Option<Box<dyn Decoder>> {
        Some(Box::<Stream>::default())
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

fn text_block(text: &str) -> Value {
    json!({"text": if text.is_empty() { "(empty)" } else { text }})
}

fn request_body(
    max_output_tokens: u32,
    conversation: &Conversation,
    format: Option<&ResponseFormat>,
) -> Value {
    let mut messages: Vec<(&str, Vec<Value>)> = vec![("user", vec![text_block(&conversation.prefix)])];
    for turn in &conversation.turns {
        let role = match turn.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let block = text_block(&turn.text);
        match messages.last_mut() {
            Some((last_role, blocks)) if *last_role == role => blocks.push(block),
            _ => messages.push((role, vec![block])),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "messages": messages,
        "inferenceConfig": {"maxTokens": max_output_tokens},
    });
    if !conversation.system.is_empty() {
        body["system"] = json!([text_block(&conversation.system)]);
    }
    if let Some(format) = format.filter(|format| format.schema.get("type") == Some(&json!("object"))) {
        body["toolConfig"] = json!({
            "tools": [{"toolSpec": {
                "name": format.name,
                "description": "Give your whole answer as this tool's input.",
                "inputSchema": {"json": format.schema},
            }}],
            "toolChoice": {"tool": {"name": format.name}},
        });
    }
    body
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseResponse {
    #[serde(default)]
    output: Option<Output>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct Output {
    #[serde(default)]
    message: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Vec<Block>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Block {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<ToolUse>,
}

#[derive(Deserialize)]
struct ToolUse {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Box<RawValue>>,
}

#[derive(Debug, Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

fn usage_of(usage: &WireUsage) -> Usage {
    let read = usage.cache_read_input_tokens.unwrap_or(0);
    Usage {
        input_tokens: usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(read)
            .saturating_add(usage.cache_write_input_tokens.unwrap_or(0)),
        output_tokens: usage.output_tokens.unwrap_or(0),
        cached_input_tokens: read,
        estimated_answers: 0,
    }
}

/// A content block as read from a whole answer or assembled from a stream; `input` is the tool
/// input's JSON text exactly as the server sent it.
#[derive(Debug, Default)]
struct OwnedBlock {
    text: Option<String>,
    tool_name: Option<String>,
    input: Option<String>,
}

fn read_completion(
    model: &str,
    bytes: &[u8],
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    let response: ConverseResponse = super::data::parse_body(PROVIDER, model, bytes, "a Converse response")?;
    let usage = response.usage.as_ref().map(usage_of).unwrap_or_default();
    let blocks = response
        .output
        .and_then(|output| output.message)
        .map(|message| message.content)
        .unwrap_or_default()
        .into_iter()
        .map(|block| OwnedBlock {
            text: block.text,
            tool_name: block.tool_use.as_ref().and_then(|tool| tool.name.clone()),
            input: block
                .tool_use
                .and_then(|tool| tool.input)
                .map(|input| input.get().to_owned()),
        })
        .collect();
    answer(model, blocks, response.stop_reason.as_deref(), usage, format)
}

/// The rules shared by whole and streamed answers.
fn answer(
    model: &str,
    blocks: Vec<OwnedBlock>,
    stop_reason: Option<&str>,
    usage: Usage,
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    let text_blocks: String = blocks.iter().filter_map(|block| block.text.as_deref()).collect();
    let finish = match stop_reason {
        None | Some("end_turn" | "stop_sequence" | "tool_use") => FinishReason::Stop,
        Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
        Some(reason @ ("guardrail_intervened" | "content_filtered")) => {
            return Err(LlmError::Refused {
                provider: PROVIDER,
                model: model.to_owned(),
                usage,
                message: format!("stopReason {reason}"),
            });
        }
        Some(other) => FinishReason::Other(other.to_owned()),
    };
    let tool_input = format.and_then(|format| {
        blocks
            .iter()
            .find(|block| block.tool_name.as_deref() == Some(&format.name))
            .and_then(|block| block.input.as_ref())
    });
    let text = match tool_input {
        Some(input) => input.clone(),
        None => text_blocks,
    };
    if text.trim().is_empty() {
        let reason = match finish {
            FinishReason::Length => {
                "the output token limit was reached before any answer (stopReason max_tokens)".to_owned()
            }
            _ => "no text or answer tool call in the content".to_owned(),
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

/// One event's JSON payload, by its `:event-type`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StreamEvent {
    #[serde(default)]
    content_block_index: Option<usize>,
    /// `contentBlockStart`.
    #[serde(default)]
    start: Option<BlockStart>,
    /// `contentBlockDelta`.
    #[serde(default)]
    delta: Option<BlockDelta>,
    /// `messageStop`.
    #[serde(default)]
    stop_reason: Option<String>,
    /// `metadata`.
    #[serde(default)]
    usage: Option<WireUsage>,
    /// An exception's text.
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart {
    #[serde(default)]
    tool_use: Option<ToolUseStart>,
}

#[derive(Deserialize)]
struct ToolUseStart {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_use: Option<ToolUseDelta>,
}

#[derive(Deserialize)]
struct ToolUseDelta {
    #[serde(default)]
    input: Option<String>,
}

/// An answer read from `converse-stream`'s event stream, frame by frame as the bytes arrive.
/// Unknown events (reasoning, citations) are skipped.
#[derive(Debug, Default)]
pub(super) struct Stream {
    frames: MessageFrameDecoder,
    /// Bytes of a frame not yet whole.
    pending: Vec<u8>,
    /// Blocks by `contentBlockIndex`, in the order they began.
    blocks: Vec<(usize, OwnedBlock)>,
    stop_reason: Option<String>,
    usage: WireUsage,
    text_bytes: usize,
    /// `messageStop` came: the answer is complete.
    stopped: bool,
    /// `metadata` came after it: the stream's last event.
    ended: bool,
}

/// A header of a frame, when it is a string.
fn header<'a>(frame: &'a Frame, name: &str) -> Option<&'a str> {
    frame
        .headers()
        .iter()
        .find(|header| header.name().as_str() == name)
        .and_then(|header| header.value().as_string().ok())
        .map(|value| value.as_str())
}

impl Stream {
    fn block(&mut self, index: usize) -> &mut OwnedBlock {
        let at = match self.blocks.iter().position(|(at, _)| *at == index) {
            Some(at) => at,
            None => {
                self.blocks.push((index, OwnedBlock::default()));
                self.blocks.len() - 1
            }
        };
        &mut self.blocks[at].1
    }

    fn frame(&mut self, frame: &Frame) -> Result<(), StreamProblem> {
        match header(frame, ":message-type") {
            Some("event") | None => {}
            Some("exception") => {
                let kind = header(frame, ":exception-type").unwrap_or("exception");
                let said = serde_json::from_slice::<StreamEvent>(frame.payload())
                    .ok()
                    .and_then(|event| event.message)
                    .unwrap_or_else(|| String::from_utf8_lossy(frame.payload()).into_owned());
                return Err(StreamProblem::Server {
                    message: bork_ci_core::untrusted::excerpt(&format!("{kind}: {said}"), 300),
                    retryable: matches!(
                        kind,
                        "throttlingException"
                            | "internalServerException"
                            | "serviceUnavailableException"
                            | "modelStreamErrorException"
                    ),
                });
            }
            Some(other) => {
                let code = header(frame, ":error-code").unwrap_or(other);
                let said = header(frame, ":error-message").unwrap_or_default();
                return Err(StreamProblem::Server {
                    message: bork_ci_core::untrusted::excerpt(&format!("{code}: {said}"), 300),
                    retryable: true,
                });
            }
        }
        let Some(kind) = header(frame, ":event-type") else {
            return Ok(());
        };
        if !matches!(
            kind,
            "contentBlockStart" | "contentBlockDelta" | "messageStop" | "metadata"
        ) {
            return Ok(());
        }
        let event: StreamEvent = serde_json::from_slice(frame.payload()).map_err(|error| {
            StreamProblem::Invalid(format!("a `{kind}` event is not ConverseStream's JSON: {error}"))
        })?;
        let index = event.content_block_index.unwrap_or(0);
        match kind {
            "contentBlockStart" => {
                if let Some(name) = event
                    .start
                    .and_then(|start| start.tool_use)
                    .and_then(|tool| tool.name)
                {
                    self.block(index).tool_name = Some(name);
                }
            }
            "contentBlockDelta" => {
                let Some(delta) = event.delta else {
                    return Ok(());
                };
                if let Some(text) = delta.text {
                    self.text_bytes += text.len();
                    self.block(index)
                        .text
                        .get_or_insert_with(String::new)
                        .push_str(&text);
                }
                if let Some(input) = delta.tool_use.and_then(|tool| tool.input) {
                    self.text_bytes += input.len();
                    self.block(index)
                        .input
                        .get_or_insert_with(String::new)
                        .push_str(&input);
                }
            }
            "messageStop" => {
                self.stop_reason = event.stop_reason;
                self.stopped = true;
            }
            _ => {
                if let Some(usage) = event.usage {
                    self.usage = usage;
                }
                self.ended = self.stopped;
            }
        }
        Ok(())
    }
}

impl Decoder for Stream {
    fn media_type(&self) -> &'static str {
        "application/vnd.amazon.eventstream"
    }

    fn push(&mut self, chunk: &[u8]) -> Result<(), StreamProblem> {
        self.pending.extend_from_slice(chunk);
        let mut rest: &[u8] = &self.pending;
        let mut frames = Vec::new();
        let decoded = loop {
            match self.frames.decode_frame(&mut rest) {
                Ok(DecodedFrame::Complete(frame)) => frames.push(frame),
                Ok(DecodedFrame::Incomplete) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        let consumed = self.pending.len() - rest.len();
        self.pending.drain(..consumed);
        for frame in &frames {
            self.frame(frame)?;
        }
        decoded.map_err(|error| {
            StreamProblem::Invalid(format!("the event stream holds a broken frame: {error}"))
        })?;
        if self.pending.len() > MAX_FRAME_BYTES {
            return Err(StreamProblem::Invalid(format!(
                "the event stream holds a frame of more than {MAX_FRAME_BYTES} bytes"
            )));
        }
        Ok(())
    }

    fn partial(&self) -> &dyn Partial {
        self
    }

    fn into_partial(self: Box<Self>) -> Box<dyn Partial> {
        self
    }
}

impl Partial for Stream {
    /// Whether `messageStop` came.
    fn is_complete(&self) -> bool {
        self.stopped
    }

    /// Whether `metadata` (with the usage) came after `messageStop`.
    fn is_ended(&self) -> bool {
        self.ended
    }

    fn usage(&self) -> Usage {
        usage_of(&self.usage)
    }

    /// Bytes of answer text (and tool input) received so far.
    fn text_bytes(&self) -> usize {
        self.text_bytes
    }

    fn finish(self: Box<Self>, model: &str, format: Option<&ResponseFormat>) -> Result<Completion, LlmError> {
        let usage = self.usage();
        let this = *self;
        let blocks = this.blocks.into_iter().map(|(_, block)| block).collect();
        answer(model, blocks, this.stop_reason.as_deref(), usage, format)
    }
}

/// A set of AWS credentials (the session token is set for temporary ones).
#[derive(Debug, Clone)]
struct Keys {
    access_key_id: SecretString,
    secret_access_key: SecretString,
    session_token: Option<SecretString>,
}

/// SigV4 signing with credentials from the environment, else the standard chain
/// (`aws_credentials`).
#[derive(Debug)]
pub(super) struct AwsAuth {
    region: String,
    fixed: Option<Keys>,
    web_identity: Option<aws_credentials::WebIdentity>,
    /// The shared config and credentials files the profile step reads, checked first.
    profile_files: Vec<std::path::PathBuf>,
    chain: tokio::sync::OnceCell<aws_credentials::Chain>,
    cached: Mutex<Option<(Keys, Instant)>>,
    /// Temporary credentials fetched so far, to scrub from messages.
    fetched: std::sync::Mutex<Vec<SecretString>>,
}

fn settings_error(message: String) -> LlmError {
    LlmError::Settings {
        provider: PROVIDER,
        message,
    }
}

impl AwsAuth {
    pub(super) fn new(
        region: String,
        sts_url: Option<String>,
        credentials: &Credentials,
    ) -> Result<Self, LlmError> {
        let secret = |name: &str| {
            credentials
                .secrets
                .get(name)
                .filter(|value| !value.expose_secret().trim().is_empty())
                .cloned()
        };
        let plain = |name: &str| {
            credentials
                .plain
                .get(name)
                .filter(|value| !value.trim().is_empty())
                .cloned()
        };
        let fixed = match (secret("AWS_ACCESS_KEY_ID"), secret("AWS_SECRET_ACCESS_KEY")) {
            (Some(access_key_id), Some(secret_access_key)) => Some(Keys {
                access_key_id,
                secret_access_key,
                session_token: secret("AWS_SESSION_TOKEN"),
            }),
            (Some(_), None) => {
                return Err(settings_error(
                    "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".to_owned(),
                ));
            }
            _ => None,
        };
        let web_identity = match (plain("AWS_WEB_IDENTITY_TOKEN_FILE"), plain("AWS_ROLE_ARN")) {
            (Some(token_file), Some(role_arn)) => Some(aws_credentials::WebIdentity {
                token_file,
                role_arn,
                session_name: plain("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "bork-ci".to_owned()),
                sts_url: sts_url.filter(|url| !url.trim().is_empty()),
            }),
            _ => None,
        };
        let home = credentials.home.clone().unwrap_or_default();
        let profile_files = vec![
            plain("AWS_CONFIG_FILE").map_or_else(|| home.join(".aws/config"), Into::into),
            plain("AWS_SHARED_CREDENTIALS_FILE").map_or_else(|| home.join(".aws/credentials"), Into::into),
        ];
        Ok(Self {
            region,
            fixed,
            web_identity,
            profile_files,
            chain: tokio::sync::OnceCell::new(),
            cached: Mutex::new(None),
            fetched: std::sync::Mutex::new(Vec::new()),
        })
    }

    async fn keys(&self, client: &Client) -> Result<Keys, LlmError> {
        if let Some(keys) = &self.fixed {
            return Ok(keys.clone());
        }
        let mut cached = self.cached.lock().await;
        if let Some((keys, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(keys.clone());
        }
        for file in &self.profile_files {
            aws_credentials::check_profile_file(file).map_err(settings_error)?;
        }
        let chain = self
            .chain
            .get_or_init(|| async {
                aws_credentials::Chain::new(client, &self.region, self.web_identity.clone())
            })
            .await;
        let found = chain.credentials().await.map_err(|message| LlmError::Settings {
            provider: PROVIDER,
            message: self.scrub(&message),
        })?;
        let keys = Keys {
            access_key_id: SecretString::from(found.access_key_id().to_owned()),
            secret_access_key: SecretString::from(found.secret_access_key().to_owned()),
            session_token: found
                .session_token()
                .map(|token| SecretString::from(token.to_owned())),
        };
        if let Ok(mut fetched) = self.fetched.lock() {
            fetched.push(keys.secret_access_key.clone());
            if let Some(token) = &keys.session_token {
                fetched.push(token.clone());
            }
        }
        let lifetime = found.expiry().map(until).unwrap_or(Duration::from_secs(3600));
        *cached = Some((keys.clone(), refresh_at(lifetime)));
        Ok(keys)
    }

    /// Adds `x-amz-date`, `x-amz-security-token` (temporary credentials) and `authorization`.
    async fn sign(
        &self,
        client: &Client,
        url: &Url,
        headers: &mut HeaderMap,
        body: &[u8],
    ) -> Result<(), LlmError> {
        let keys = self.keys(client).await?;
        let identity = AwsCredentials::new(
            keys.access_key_id.expose_secret().trim(),
            keys.secret_access_key.expose_secret().trim(),
            keys.session_token
                .as_ref()
                .map(|token| token.expose_secret().trim().to_owned()),
            None,
            "bork-ci",
        )
        .into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("bedrock")
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|error| settings_error(format!("cannot sign the request: {error}")))?
            .into();
        let mut unsigned: Vec<(String, String)> = headers
            .iter()
            .filter(|(name, _)| *name == bork_ci_core::net::reqwest::header::CONTENT_TYPE)
            .filter_map(|(name, value)| Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned())))
            .collect();
        if let Some(host) = url.host_str() {
            let host = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            unsigned.push(("host".to_owned(), host));
        }
        let signable = SignableRequest::new(
            "POST",
            url.as_str(),
            unsigned
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
            SignableBody::Bytes(body),
        )
        .map_err(|error| settings_error(format!("cannot sign the request: {error}")))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|error| settings_error(format!("cannot sign the request: {error}")))?
            .into_parts();
        for (name, value) in instructions.headers() {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| settings_error(format!("the signature header `{name}` is not a header name")))?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                settings_error("the AWS credentials cannot be sent in an HTTP header".to_owned())
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(())
    }

    /// Credentials for a process that signs on its own, without the token file.
    async fn handoff_env(&self, client: &Client) -> Result<Vec<(String, SecretString)>, LlmError> {
        let keys = self.keys(client).await?;
        let mut env = vec![
            ("AWS_ACCESS_KEY_ID".to_owned(), keys.access_key_id),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), keys.secret_access_key),
        ];
        if let Some(token) = keys.session_token {
            env.push(("AWS_SESSION_TOKEN".to_owned(), token));
        }
        Ok(env)
    }

    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        if let Ok(fetched) = self.fetched.lock() {
            for secret in fetched.iter() {
                let value = secret.expose_secret();
                if value.len() >= 4 {
                    text = text.replace(value, "[redacted]");
                }
            }
        }
        text
    }
}

/// How long a fetched token is trusted before it is fetched again: its lifetime less a margin.
fn refresh_at(lifetime: Duration) -> Instant {
    Instant::now()
        + lifetime
            .saturating_sub(Duration::from_secs(300))
            .max(Duration::from_secs(30))
}

/// How long from now until `when` (zero once it has passed), for lifetimes given as dates.
fn until(when: SystemTime) -> Duration {
    when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_eventstream::frame::write_message_to;
    use aws_smithy_types::event_stream::{Header, HeaderValue};

    #[test]
    fn body_has_blocks_system_cap_and_forced_tool() {
        let conversation = Conversation {
            system: "sys".into(),
            prefix: "repo".into(),
            turns: vec![
                crate::llm::Turn::assistant("{}"),
                crate::llm::Turn::user("findings"),
            ],
        };
        let format = ResponseFormat {
            name: "edits".into(),
            schema: json!({"type": "object"}),
        };
        let body = request_body(100, &conversation, Some(&format));
        assert_eq!(body["messages"][0]["content"][0]["text"], "repo");
        assert_eq!(body["messages"][1]["role"], "assistant");
        assert_eq!(body["system"][0]["text"], "sys");
        assert_eq!(body["inferenceConfig"]["maxTokens"], 100);
        assert_eq!(body["toolConfig"]["toolChoice"]["tool"]["name"], "edits");
    }

    #[test]
    fn reads_tool_input_raw_and_usage() {
        let format = ResponseFormat {
            name: "edits".into(),
            schema: json!({"type": "object"}),
        };
        let body = br#"{"output":{"message":{"role":"assistant","content":[{"toolUse":{"toolUseId":"t1","name":"edits","input":{"a" : 1}}}]}},
            "stopReason":"tool_use","usage":{"inputTokens":10,"outputTokens":3,"totalTokens":13,"cacheReadInputTokens":5},"metrics":{"latencyMs":9}}"#;
        let completion = read_completion("m", body, Some(&format)).expect("reads");
        assert_eq!(completion.text, r#"{"a" : 1}"#);
        assert_eq!(completion.usage.input_tokens, 15);
        assert_eq!(completion.usage.cached_input_tokens, 5);
        assert_eq!(completion.usage.output_tokens, 3);
    }

    /// One frame as Bedrock sends it: `:message-type`, the type header, a JSON payload.
    fn frame(message_type: &str, kind: &str, payload: &Value) -> Vec<u8> {
        let type_header = if message_type == "exception" {
            ":exception-type"
        } else {
            ":event-type"
        };
        let message = Frame::new(payload.to_string().into_bytes())
            .add_header(Header::new(
                ":message-type",
                HeaderValue::String(message_type.to_owned().into()),
            ))
            .add_header(Header::new(
                type_header,
                HeaderValue::String(kind.to_owned().into()),
            ))
            .add_header(Header::new(
                ":content-type",
                HeaderValue::String("application/json".into()),
            ));
        let mut bytes = Vec::new();
        write_message_to(&message, &mut bytes).expect("a frame");
        bytes
    }

    fn event(kind: &str, payload: &Value) -> Vec<u8> {
        frame("event", kind, payload)
    }

    /// A whole stream: `deltas` for block 0 (a tool's input when `tool` names it), the stop
    /// reason, then the usage.
    fn stream(tool: Option<&str>, deltas: &[&str], stop_reason: &str) -> Vec<u8> {
        let mut bytes = event("messageStart", &json!({"role": "assistant", "p": "abcd"}));
        if let Some(name) = tool {
            bytes.extend(event(
                "contentBlockStart",
                &json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": name}}}),
            ));
        }
        for delta in deltas {
            let delta = match tool {
                Some(_) => json!({"toolUse": {"input": delta}}),
                None => json!({"text": delta}),
            };
            bytes.extend(event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 0, "delta": delta}),
            ));
        }
        bytes.extend(event("contentBlockStop", &json!({"contentBlockIndex": 0})));
        bytes.extend(event("messageStop", &json!({"stopReason": stop_reason})));
        bytes.extend(event(
            "metadata",
            &json!({"usage": {"inputTokens": 10, "outputTokens": 3, "totalTokens": 18, "cacheReadInputTokens": 5}, "metrics": {"latencyMs": 9}}),
        ));
        bytes
    }

    fn streamed(chunks: &[&[u8]], format: Option<&ResponseFormat>) -> Result<Completion, LlmError> {
        crate::llm::read_answer(ProviderKind::Bedrock, "m", chunks.iter().copied(), true, format)
    }

    #[test]
    fn a_streamed_answer_is_the_same_however_the_bytes_are_split() {
        let bytes = stream(None, &["{\"create", "-or-update\": {}}"], "end_turn");
        let whole = streamed(&[&bytes], None).expect("reads");
        assert_eq!(whole.text, r#"{"create-or-update": {}}"#);
        assert_eq!(whole.finish, FinishReason::Stop);
        assert_eq!(
            whole.usage,
            Usage {
                input_tokens: 15,
                output_tokens: 3,
                cached_input_tokens: 5,
                estimated_answers: 0,
            }
        );
        for split in 0..=bytes.len() {
            let (a, b) = bytes.split_at(split);
            assert_eq!(streamed(&[a, b], None).expect("split"), whole, "split at {split}");
        }
        let bytewise: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(streamed(&bytewise, None).expect("bytewise"), whole);
    }

    #[test]
    fn a_streamed_tool_input_stays_raw() {
        let format = ResponseFormat {
            name: "edits".into(),
            schema: json!({"type": "object"}),
        };
        let bytes = stream(Some("edits"), &["{\"a\" :", " 1, \"a\": 2}"], "tool_use");
        let completion = streamed(&[&bytes], Some(&format)).expect("reads");
        assert_eq!(completion.text, r#"{"a" : 1, "a": 2}"#);
    }

    #[test]
    fn a_streamed_answer_cut_at_max_tokens_is_length() {
        let bytes = stream(None, &["{\"create"], "max_tokens");
        let completion = streamed(&[&bytes], None).expect("reads");
        assert_eq!(completion.finish, FinishReason::Length);
        let empty = stream(None, &[], "max_tokens");
        let error = streamed(&[&empty], None).expect_err("nothing");
        assert!(
            matches!(&error, LlmError::EmptyAnswer { reason, .. } if reason.contains("max_tokens")),
            "{error:?}"
        );
    }

    #[test]
    fn exceptions_end_the_stream_with_the_servers_message() {
        for (kind, retryable) in [
            ("throttlingException", true),
            ("modelStreamErrorException", true),
            ("validationException", false),
        ] {
            let mut decoder = Box::<Stream>::default();
            let mut bytes = event("messageStart", &json!({"role": "assistant"}));
            bytes.extend(frame("exception", kind, &json!({"message": "Too many tokens"})));
            match decoder.push(&bytes) {
                Err(StreamProblem::Server {
                    message,
                    retryable: found,
                }) => {
                    assert_eq!(message, format!("{kind}: Too many tokens"));
                    assert_eq!(found, retryable, "{kind}");
                }
                _ => panic!("{kind} is a server problem"),
            }
        }
    }

    #[test]
    fn a_broken_frame_and_a_cut_stream_are_not_answers() {
        let mut bytes = stream(None, &["x"], "end_turn");
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        let error = streamed(&[&bytes], None).expect_err("broken");
        assert!(error.to_string().contains("broken frame"), "{error}");
        let whole = stream(None, &["x"], "end_turn");
        let error = streamed(&[&whole[..whole.len() / 2]], None).expect_err("cut");
        assert!(error.to_string().contains("ended before"), "{error}");
    }
}
