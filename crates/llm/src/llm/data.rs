//! The data every room of `llm` shares: the conversation sent to a model, its answer and token
//! usage, the provider kinds, the settings `config` resolves ([`LlmSettings`], [`EndpointSettings`],
//! [`Credentials`]), what a provider learned about its server ([`Learned`]), the errors
//! ([`LlmError`]) and prices. No I/O; it names no other room.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Add, AddAssign};
use std::path::PathBuf;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who speaks a turn of the conversation after the first user message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    User,
    Assistant,
}

/// One message appended to the conversation by an iteration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    pub role: Role,
    pub text: String,
}

impl Turn {
    /// A user turn (what was applied or refused, the findings).
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            text: text.into(),
        }
    }

    /// An assistant turn (the model's earlier answer, sent back verbatim).
    pub fn assistant(text: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            text: text.into(),
        }
    }
}

/// What is sent to the model.
///
/// `system` and `prefix` never change between iterations, so provider prompt caching serves them
/// (Anthropic: `cache_control` on both); each iteration only appends `turns`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Conversation {
    /// The system prompt (instructions).
    pub system: String,
    /// The first user message: packed repository and spec diff.
    pub prefix: String,
    /// Later turns, oldest first; the first one normally is the model's first answer.
    pub turns: Vec<Turn>,
}

impl Conversation {
    /// The name of the first registered secret anywhere in what would be sent to a model.
    pub fn secret_name(&self) -> Option<String> {
        bork_ci_core::secrets::find(&self.system)
            .or_else(|| bork_ci_core::secrets::find(&self.prefix))
            .or_else(|| {
                self.turns
                    .iter()
                    .find_map(|turn| bork_ci_core::secrets::find(&turn.text))
            })
    }
}

impl Conversation {
    /// How many assistant turns the conversation holds (the scripted model's answer index).
    pub fn assistant_turns(&self) -> usize {
        self.turns
            .iter()
            .filter(|turn| turn.role == Role::Assistant)
            .count()
    }
}

/// Token usage of one or more requests.
///
/// `input_tokens` counts every input token, cached or not (for Anthropic: `input_tokens` +
/// `cache_creation_input_tokens` + `cache_read_input_tokens`); `cached_input_tokens` is the part
/// of it served from the provider's prompt cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    /// How many of the answers counted here came without usage from the server, so that their
    /// tokens are bork-ci's estimate (request and answer sizes, see [`Usage::estimate`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub estimated_answers: u64,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Usage {
    /// An answer's usage when the server reported none (llama.cpp's server ignores
    /// `stream_options.include_usage`, for one): about one token per four bytes of the request
    /// body and of the answer, marked as estimated.
    pub fn estimate(request_bytes: usize, answer_bytes: usize) -> Usage {
        Usage {
            input_tokens: (request_bytes as u64).div_ceil(4),
            output_tokens: (answer_bytes as u64).div_ceil(4).max(1),
            cached_input_tokens: 0,
            estimated_answers: 1,
        }
    }

    /// `self` with each side the server left at zero estimated from its size, as [`Usage::estimate`]
    /// does (and marked as estimated): a server that reports no usage at all, or one that counts
    /// only the answer (`prompt_tokens: 0` for a non-empty request), must not make the budgets
    /// blind.
    pub fn filled_in(self, request_bytes: usize, answer_bytes: usize) -> Usage {
        if self.total_tokens() == 0 {
            return Usage::estimate(request_bytes, answer_bytes);
        }
        let estimate = Usage::estimate(request_bytes, answer_bytes);
        let input_missing = self.input_tokens == 0 && request_bytes > 0;
        let output_missing = self.output_tokens == 0 && answer_bytes > 0;
        if !input_missing && !output_missing {
            return self;
        }
        Usage {
            input_tokens: if input_missing {
                estimate.input_tokens
            } else {
                self.input_tokens
            },
            output_tokens: if output_missing {
                estimate.output_tokens
            } else {
                self.output_tokens
            },
            cached_input_tokens: self.cached_input_tokens,
            estimated_answers: self.estimated_answers.max(1),
        }
    }

    /// Input plus output tokens: what a per-run token budget counts.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl Add for Usage {
    type Output = Usage;

    fn add(self, other: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cached_input_tokens: self.cached_input_tokens.saturating_add(other.cached_input_tokens),
            estimated_answers: self.estimated_answers.saturating_add(other.estimated_answers),
        }
    }
}

impl Usage {
    /// What `self` holds beyond `earlier` (field by field, never below zero): the usage between
    /// two readings of a running total.
    pub fn since(self, earlier: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            cached_input_tokens: self
                .cached_input_tokens
                .saturating_sub(earlier.cached_input_tokens),
            estimated_answers: self.estimated_answers.saturating_sub(earlier.estimated_answers),
        }
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        *self = *self + other;
    }
}

/// Why the model stopped writing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// A natural end (`stop`, `end_turn`, `tool_use`, `stop_sequence`).
    Stop,
    /// The output token limit was hit: the answer is probably cut off and must be rejected even
    /// when it parses.
    Length,
    /// The model refused. [`Provider::complete`](super::Provider::complete) reports a refusal as
    /// [`LlmError::Refused`]; this variant exists so a report can name it.
    Refusal,
    /// Anything else the provider said, verbatim.
    Other(String),
}

/// The model's answer: the raw text (never parsed here) and what it cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    pub usage: Usage,
    pub finish: FinishReason,
}

/// Which API a provider speaks (`llm.provider`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    /// Any OpenAI-compatible Chat Completions endpoint.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Canned answers from a file, no network: for the quick start and tests.
    Scripted,
    /// Azure OpenAI: Chat Completions at a deployment, `api-key` or Entra ID bearer auth.
    Azure,
    /// AWS Bedrock's Converse API, SigV4-signed.
    Bedrock,
    /// Google Vertex AI: Claude through `rawPredict`, other models through its OpenAI-compatible
    /// endpoint.
    Vertex,
}

impl ProviderKind {
    /// The name used in config, errors and [`Provider::describe`](super::Provider::describe).
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Scripted => "scripted",
            ProviderKind::Azure => "azure",
            ProviderKind::Bedrock => "bedrock",
            ProviderKind::Vertex => "vertex",
        }
    }

    /// The variable the key is read from when `llm.api-key-env` is not set (empty: the provider
    /// takes no key; the scripted model reads none but keeps `OPENAI_API_KEY` registered as a
    /// secret, as the quick start's key would be).
    pub fn default_api_key_env(self) -> &'static str {
        match self {
            ProviderKind::Openai | ProviderKind::Scripted => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Azure => "AZURE_OPENAI_API_KEY",
            ProviderKind::Bedrock | ProviderKind::Vertex => "",
        }
    }

    /// The model used when `llm.model` is not set anywhere: each provider's own default.
    pub fn default_model(self) -> &'static str {
        match self {
            ProviderKind::Anthropic => "claude-sonnet-4-5",
            // Azure: the deployment name; deployments are usually named after their model.
            ProviderKind::Openai | ProviderKind::Scripted | ProviderKind::Azure => "gpt-4.1",
            ProviderKind::Bedrock => "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            ProviderKind::Vertex => "claude-sonnet-4-5@20250929",
        }
    }

    /// The default model in `region`. Bedrock serves Claude Sonnet 4.5 on demand only through
    /// cross-region inference profiles: the one of the region's geography (`us.`, `eu.`, `apac.`,
    /// `us-gov.`), else the global one (`global.`). Every other provider's default does not depend
    /// on the region.
    pub fn default_model_in(self, region: Option<&str>) -> String {
        const BEDROCK_BASE: &str = "anthropic.claude-sonnet-4-5-20250929-v1:0";
        if self != ProviderKind::Bedrock {
            return self.default_model().to_owned();
        }
        let Some(region) = region.map(str::trim).filter(|region| !region.is_empty()) else {
            return self.default_model().to_owned();
        };
        let profile = if region.starts_with("us-gov-") {
            Some("us-gov")
        } else if region.starts_with("us-") || region.starts_with("ca-") {
            Some("us")
        } else if region.starts_with("eu-") {
            Some("eu")
        } else if region.starts_with("ap-") {
            Some("apac")
        } else {
            None
        };
        match profile {
            Some(profile) => format!("{profile}.{BEDROCK_BASE}"),
            None => format!("global.{BEDROCK_BASE}"),
        }
    }

    /// The base URL used when `llm.base-url` is not set.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::Openai => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
            ProviderKind::Scripted | ProviderKind::Azure | ProviderKind::Bedrock | ProviderKind::Vertex => "",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the answer's JSON structure is asked for (`llm.structured-output`), strongest first.
///
/// OpenAI-compatible servers: `json-schema` sends `response_format: {type: json_schema}`,
/// `json-object` sends `response_format: {type: json_object}`, `none` sends neither. Anthropic
/// Messages and Bedrock Converse: `json-schema` forces a tool whose input schema is the answer's;
/// `json-object` and `none` send no tool (those APIs have no JSON mode). In every mode the prompt
/// states the format, and the answer parser accepts a fenced JSON answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StructuredOutput {
    #[default]
    JsonSchema,
    JsonObject,
    None,
}

impl StructuredOutput {
    /// The name used in config and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredOutput::JsonSchema => "json-schema",
            StructuredOutput::JsonObject => "json-object",
            StructuredOutput::None => "none",
        }
    }
}

impl fmt::Display for StructuredOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body field that carries the output cap on OpenAI-compatible servers
/// (`llm.max-tokens-field`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// OpenAI's current field (`max_tokens` is deprecated there and refused by o-series models).
    MaxCompletionTokens,
    /// What most other OpenAI-compatible servers read (vLLM, llama.cpp, Ollama, LiteLLM, Vertex).
    MaxTokens,
}

impl MaxTokensField {
    /// The field's name in the request body.
    pub fn as_str(self) -> &'static str {
        match self {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        }
    }
}

/// What a provider learned about its server during a run, so that later requests (and later
/// processes of the same run, such as the next iteration's edit step) start from it: a weaker
/// structured-output mode, a lower output cap, streaming off. `None`: nothing learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct Learned {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<StructuredOutput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

impl Learned {
    /// Both lessons together; each value only ever moves one way (weaker mode, lower cap,
    /// streaming off), so a later process cannot undo an earlier one.
    pub fn merge(self, other: Learned) -> Learned {
        Learned {
            structured_output: self.structured_output.max(other.structured_output),
            max_output_tokens: match (self.max_output_tokens, other.max_output_tokens) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            stream: match (self.stream, other.stream) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (a, b) => a.or(b),
            },
        }
    }

    /// `settings` with these lessons applied (never a stronger mode, a higher cap, or streaming
    /// turned back on).
    pub fn apply(&self, settings: &mut LlmSettings) {
        if let Some(mode) = self.structured_output {
            settings.structured_output = settings.structured_output.max(mode);
        }
        if let Some(cap) = self.max_output_tokens.filter(|cap| *cap > 0) {
            settings.max_output_tokens = settings.max_output_tokens.min(cap);
        }
        if self.stream == Some(false) {
            settings.stream = false;
        }
    }
}

/// The output cap used when `llm.max-output-tokens` is not set: what every current and previous
/// model generation of both vendors accepts (gpt-4o allows 16,384, Claude 3.5 Sonnet 8,192).
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 8192;

/// The longest one request may take when `llm.max-request-secs` is not set: 30 minutes.
pub const DEFAULT_MAX_REQUEST_SECS: u64 = 1800;

/// Default of `llm.timeout-secs`: how long one request may go without a byte from the server.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// Default of `llm.max-retries`.
pub const DEFAULT_MAX_RETRIES: u32 = 4;

/// How often a long answer's progress is logged: at least this often.
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(15);

/// Everything a provider needs, resolved by `config`.
///
/// `Debug` never shows the key: [`SecretString`] prints as redacted.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    pub provider: ProviderKind,
    pub model: String,
    /// `None`: the vendor's public endpoint ([`ProviderKind::default_base_url`]).
    pub base_url: Option<String>,
    /// The key, read by `config` from the variable named in `api_key_env`.
    pub api_key: Option<SecretString>,
    /// Name of the variable holding the key; used in messages only.
    pub api_key_env: String,
    pub max_output_tokens: u32,
    /// The longest silence allowed (no bytes at all) while waiting for an answer or reading it,
    /// per attempt. Without streaming that is the wait for the whole answer.
    pub timeout: Duration,
    /// The longest one attempt may take in all, streamed or not.
    pub max_request: Duration,
    /// Ask for server-sent events (OpenAI-compatible and Anthropic endpoints; never Bedrock).
    pub stream: bool,
    /// How often a long answer's progress is logged.
    pub progress_interval: Duration,
    /// Retries after the first attempt on 429, 5xx, 529, timeouts and connection errors.
    pub max_retries: u32,
    /// Scripted provider only: the file of canned answers.
    pub script: Option<PathBuf>,
    /// URL, authentication, extra headers and body fields beyond the key (see `endpoint`).
    pub endpoint: EndpointSettings,
    /// How the answer's structure is asked for; weakened once per rejection by the server.
    pub structured_output: StructuredOutput,
    /// OpenAI-compatible servers: the cap's field; `None` chooses by endpoint
    /// (`max_completion_tokens` for `api.openai.com` and Azure, `max_tokens` elsewhere).
    pub max_tokens_field: Option<MaxTokensField>,
}

impl LlmSettings {
    /// Settings with the documented defaults for `provider` and `model`.
    pub fn new(provider: ProviderKind, model: impl Into<String>) -> Self {
        Self {
            provider,
            model: model.into(),
            base_url: None,
            api_key: None,
            api_key_env: provider.default_api_key_env().to_owned(),
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT_SECS),
            max_request: Duration::from_secs(DEFAULT_MAX_REQUEST_SECS),
            stream: true,
            progress_interval: PROGRESS_INTERVAL,
            max_retries: DEFAULT_MAX_RETRIES,
            script: None,
            endpoint: EndpointSettings::default(),
            structured_output: StructuredOutput::JsonSchema,
            max_tokens_field: None,
        }
    }
}

/// A JSON schema the answer must follow.
///
/// OpenAI: sent as `response_format` `json_schema`, with `strict: true` when the schema fits the
/// strict subset (every object closed with `additionalProperties: false` and listing all its
/// properties as required), else `strict: false` (a map of paths to contents cannot be strict).
/// Anthropic: a tool with this schema as `input_schema`, forced through `tool_choice`; the
/// answer is the tool input exactly as the server sent it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResponseFormat {
    /// `a-z`, `A-Z`, `0-9`, `_` and `-`, at most 64 characters.
    pub name: String,
    pub schema: serde_json::Value,
}

/// Why a completion failed. Every message names provider and model where it has them, and none
/// holds the key (messages from servers are cut short and scrubbed of it).
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// 429 on the last attempt, or a `retry-after` longer than the policy waits.
    #[error(
        "{provider} model `{model}` is rate limited (HTTP {status}) after {attempts} attempt(s){}: {message}",
        retry_after.map(|delay| format!(", retry after {}s", delay.as_secs())).unwrap_or_default()
    )]
    RateLimited {
        provider: ProviderKind,
        model: String,
        status: u16,
        attempts: u32,
        retry_after: Option<Duration>,
        message: String,
    },
    /// Any other non-success status (after retries, for retryable ones).
    #[error("{provider} model `{model}` answered HTTP {status} after {attempts} attempt(s): {message}")]
    Status {
        provider: ProviderKind,
        model: String,
        status: u16,
        attempts: u32,
        message: String,
    },
    /// A 3xx: redirects are never followed, so the key header cannot reach another host.
    #[error(
        "{provider} model `{model}` answered HTTP {status} redirecting to `{location}`; redirects are not followed: set llm.base-url to the final endpoint"
    )]
    Redirect {
        provider: ProviderKind,
        model: String,
        status: u16,
        location: String,
    },
    /// The server sent nothing (not a byte) for `timeout` (`llm.timeout-secs`), on the last
    /// attempt: before its answer began, or in the middle of a stream.
    #[error(
        "{provider} model `{model}` sent nothing for {}s (llm.timeout-secs) after {attempts} attempt(s)",
        timeout.as_secs_f64()
    )]
    Timeout {
        provider: ProviderKind,
        model: String,
        timeout: Duration,
        attempts: u32,
    },
    /// The answer was not complete within `limit` (`llm.max-request-secs`), though bytes kept
    /// coming; not retried.
    #[error(
        "{provider} model `{model}` did not finish its answer within {}s (llm.max-request-secs) after {attempts} attempt(s)",
        limit.as_secs_f64()
    )]
    TooLong {
        provider: ProviderKind,
        model: String,
        limit: Duration,
        attempts: u32,
    },
    /// Connection refused, DNS, TLS and similar, on the last attempt.
    #[error("{provider} model `{model}`: request failed after {attempts} attempt(s): {message}")]
    Transport {
        provider: ProviderKind,
        model: String,
        attempts: u32,
        message: String,
    },
    /// The model refused or a content filter stopped it. `usage`: what the refusal cost.
    #[error("{provider} model `{model}` refused to answer: {message}")]
    Refused {
        provider: ProviderKind,
        model: String,
        message: String,
        usage: Usage,
    },
    /// A 200 without any answer text. `usage`: what the empty answer cost.
    #[error("{provider} model `{model}` returned no answer: {reason}")]
    EmptyAnswer {
        provider: ProviderKind,
        model: String,
        reason: String,
        usage: Usage,
    },
    /// A 200 whose body is not the documented JSON (empty, invalid UTF-8, wrong shape).
    #[error("{provider} model `{model}` sent a response that could not be read: {message}")]
    InvalidResponse {
        provider: ProviderKind,
        model: String,
        message: String,
    },
    /// No key for a provider that needs one.
    #[error("no API key for {provider}: set the environment variable {env}")]
    MissingApiKey { provider: ProviderKind, env: String },
    /// The scripted model's file is missing, malformed, or has run out of answers.
    #[error("scripted model ({path}): {message}")]
    Script { path: String, message: String },
    /// Settings that cannot work (bad base URL, zero timeout, a key that is not a header value).
    #[error("{provider} settings: {message}")]
    Settings { provider: ProviderKind, message: String },
}

impl LlmError {
    /// The tokens an answer that could not be used still cost (a refusal, an empty answer).
    pub fn usage(&self) -> Usage {
        match self {
            LlmError::Refused { usage, .. } | LlmError::EmptyAnswer { usage, .. } => *usage,
            _ => Usage::default(),
        }
    }

    /// Whether the failure is the server's or the network's (worth trying again later) rather
    /// than the settings' or the model's.
    pub fn is_transient(&self) -> bool {
        match self {
            LlmError::RateLimited { .. }
            | LlmError::Timeout { .. }
            | LlmError::TooLong { .. }
            | LlmError::Transport { .. } => true,
            LlmError::Status { status, .. } => *status >= 500,
            _ => false,
        }
    }
}

/// How the key is sent to Azure OpenAI (`llm.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    /// The provider's own key header (`api-key` for Azure).
    #[default]
    Key,
    /// `Authorization: Bearer` (Microsoft Entra ID tokens).
    Bearer,
}

/// Environment values a provider reads besides `llm.api-key-env`, read once by `config`.
///
/// `secrets` are credentials (AWS keys, Google tokens, values of `${NAME}` extra headers); `plain`
/// are settings that are not secret (regions, the project, paths of credential files).
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub secrets: BTreeMap<String, SecretString>,
    pub plain: BTreeMap<String, String>,
    /// `HOME`, where the shared credential files are by default (`~/.aws/config`): a place, not
    /// a credential, so never handed to the edit step (which has its own).
    pub home: Option<std::path::PathBuf>,
}

impl Credentials {
    pub(super) fn secret(&self, name: &str) -> Option<&SecretString> {
        self.secrets
            .get(name)
            .filter(|value| !value.expose_secret().trim().is_empty())
    }

    pub(super) fn plain(&self, name: &str) -> Option<&str> {
        self.plain
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }
}

/// Endpoint settings beyond the base URL and key; part of [`LlmSettings`].
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    /// Azure: `api-version` (default `endpoint::AZURE_DEFAULT_API_VERSION`).
    pub api_version: Option<String>,
    pub auth: AuthMode,
    /// Bedrock and Vertex: the region (Bedrock falls back to `AWS_REGION`, `AWS_DEFAULT_REGION`).
    pub region: Option<String>,
    /// Vertex: the project (falls back to `GOOGLE_CLOUD_PROJECT`).
    pub project: Option<String>,
    /// Bedrock web identity: the STS endpoint (default `https://sts.{region}.amazonaws.com`).
    pub sts_url: Option<String>,
    /// Header name → value; a value written `${NAME}` is the secret `NAME` of `credentials`.
    pub extra_headers: BTreeMap<String, String>,
    /// Merged into the request body at the top level (after bork-ci's own fields).
    pub extra_body: serde_json::Map<String, Value>,
    pub temperature: Option<f64>,
    pub seed: Option<i64>,
    /// Anthropic: `cache_control` blocks (true) or plain strings (false).
    pub prompt_caching: bool,
    pub credentials: Credentials,
}

impl Default for EndpointSettings {
    fn default() -> Self {
        Self {
            api_version: None,
            auth: AuthMode::Key,
            region: None,
            project: None,
            sts_url: None,
            extra_headers: BTreeMap::new(),
            extra_body: serde_json::Map::new(),
            temperature: None,
            seed: None,
            prompt_caching: true,
            credentials: Credentials::default(),
        }
    }
}

/// Prices in a currency unit per million tokens (`llm.prices`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Prices {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// Price of input served from the prompt cache.
    pub cached_input_per_mtok: f64,
}

/// Reads a whole (not streamed) answer body as `T`, the provider's answer shape named `what`:
/// an empty body, or one that is not that shape, is the provider's `InvalidResponse`.
pub(super) fn parse_body<'a, T: Deserialize<'a>>(
    provider: ProviderKind,
    model: &str,
    bytes: &'a [u8],
    what: &str,
) -> Result<T, LlmError> {
    let invalid = |message: String| LlmError::InvalidResponse {
        provider,
        model: model.to_owned(),
        message,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(invalid("the body is empty".to_owned()));
    }
    serde_json::from_slice(bytes).map_err(|error| invalid(format!("not {what}: {error}")))
}

/// What `usage` cost: uncached input, cached input and output, each at its price. Anthropic's
/// cache writes are priced as ordinary input.
pub fn cost(usage: &Usage, prices: &Prices) -> f64 {
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let uncached = usage.input_tokens - cached;
    let per_token = |tokens: u64, per_mtok: f64| tokens as f64 * per_mtok / 1_000_000.0;
    per_token(uncached, prices.input_per_mtok)
        + per_token(cached, prices.cached_input_per_mtok)
        + per_token(usage.output_tokens, prices.output_per_mtok)
}

/// An error and its sources, each once (the credential crates nest their causes).
pub(super) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = cause.source();
    }
    bork_ci_core::untrusted::excerpt(&text, 600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_the_server_left_at_zero_is_estimated() {
        let reported = |input, output| Usage {
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: 0,
            estimated_answers: 0,
        };
        // Both reported: kept as they are.
        assert_eq!(reported(10, 2).filled_in(4000, 40), reported(10, 2));
        // Nothing reported: the whole estimate.
        assert_eq!(reported(0, 0).filled_in(4000, 40), Usage::estimate(4000, 40));
        // The answer counted, the request not (a 24 kB request is about 6,000 tokens).
        let filled = reported(0, 7).filled_in(24_000, 40);
        assert_eq!(
            (
                filled.input_tokens,
                filled.output_tokens,
                filled.estimated_answers
            ),
            (6000, 7, 1)
        );
        // The request counted, a non-empty answer not.
        let filled = reported(900, 0).filled_in(4000, 40);
        assert_eq!(
            (
                filled.input_tokens,
                filled.output_tokens,
                filled.estimated_answers
            ),
            (900, 10, 1)
        );
    }

    #[test]
    fn bedrocks_default_model_follows_the_region() {
        let bedrock = ProviderKind::Bedrock;
        for (region, model) in [
            ("us-east-1", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ("eu-west-3", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ("eu-central-1", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            ("ap-northeast-1", "apac.anthropic.claude-sonnet-4-5-20250929-v1:0"),
            (
                "us-gov-west-1",
                "us-gov.anthropic.claude-sonnet-4-5-20250929-v1:0",
            ),
            ("sa-east-1", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ] {
            assert_eq!(bedrock.default_model_in(Some(region)), model, "{region}");
        }
        assert_eq!(bedrock.default_model_in(None), bedrock.default_model());
        assert_eq!(
            ProviderKind::Openai.default_model_in(Some("eu-west-3")),
            "gpt-4.1"
        );
    }

    #[test]
    fn usage_adds_field_by_field() {
        let mut total = Usage {
            input_tokens: 10,
            output_tokens: 2,
            cached_input_tokens: 4,
            estimated_answers: 0,
        };
        total += Usage {
            input_tokens: 5,
            output_tokens: 1,
            cached_input_tokens: 5,
            estimated_answers: 0,
        };
        assert_eq!(
            total,
            Usage {
                input_tokens: 15,
                output_tokens: 3,
                cached_input_tokens: 9,
                estimated_answers: 0,
            }
        );
        assert_eq!(total.total_tokens(), 18);
    }

    #[test]
    fn cost_prices_cached_input_separately() {
        let usage = Usage {
            input_tokens: 2_000_000,
            output_tokens: 1_000_000,
            cached_input_tokens: 1_000_000,
            estimated_answers: 0,
        };
        let prices = Prices {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cached_input_per_mtok: 0.3,
        };
        assert!((cost(&usage, &prices) - 18.3).abs() < 1e-9);
        assert_eq!(cost(&Usage::default(), &prices), 0.0);
    }

    #[test]
    fn provider_kind_speaks_config_names() {
        let kind: ProviderKind = serde_json::from_str("\"anthropic\"").expect("parses");
        assert_eq!(kind, ProviderKind::Anthropic);
        assert_eq!(
            serde_json::to_string(&ProviderKind::Scripted).expect("serializes"),
            "\"scripted\""
        );
        assert!(serde_json::from_str::<ProviderKind>("\"OpenAI\"").is_err());
    }

    #[test]
    fn lessons_only_ever_weaken() {
        let earlier = Learned {
            structured_output: Some(StructuredOutput::JsonObject),
            max_output_tokens: Some(16_384),
            stream: None,
        };
        let later = Learned {
            structured_output: Some(StructuredOutput::JsonSchema),
            max_output_tokens: Some(8192),
            stream: Some(false),
        };
        let merged = earlier.merge(later);
        assert_eq!(
            merged,
            Learned {
                structured_output: Some(StructuredOutput::JsonObject),
                max_output_tokens: Some(8192),
                stream: Some(false),
            }
        );
        assert_eq!(later.merge(earlier), merged);
        let mut settings = LlmSettings::new(ProviderKind::Openai, "m");
        settings.structured_output = StructuredOutput::None;
        settings.max_output_tokens = 4096;
        merged.apply(&mut settings);
        assert_eq!(settings.structured_output, StructuredOutput::None);
        assert_eq!(settings.max_output_tokens, 4096);
        assert!(!settings.stream);
        let text = serde_json::to_string(&Learned::default()).expect("serializes");
        assert_eq!(text, "{}");
    }

    #[test]
    fn settings_debug_hides_the_key() {
        let mut settings = LlmSettings::new(ProviderKind::Openai, "gpt-4o");
        settings.api_key = Some(SecretString::from("sk-canary-123"));
        let shown = format!("{settings:?}");
        assert!(!shown.contains("sk-canary-123"), "{shown}");
    }
}
