//! The LLM providers: one [`Provider`] per vendor behind one call, [`Provider::complete`].
//!
//! This module owns the conversation layout sent to a model ([`Conversation`]: a fixed system
//! prompt and first user message, so provider prompt caching serves them on every iteration,
//! followed by the turns each iteration appends), the HTTP exchange with OpenAI-compatible Chat
//! Completions (`openai`) and Anthropic Messages (`anthropic`), retries with backoff
//! ([`retry`]), token usage and its cost, and a scripted model that needs no network
//! (`scripted`). Vendor JSON shapes stay private to the vendor modules.
//!
//! Its files are rooms on floors, each naming only lower floors (checked by
//! `tests/it/architecture.rs`): `data`, `sse`, `retry`, `address` ← `vendor` (the `Vendor`
//! trait), `google`, `aws_credentials` ← `openai`, `anthropic`, `bedrock`, `scripted` ←
//! `endpoint` (picks the vendor) ← `wire` (the HTTP exchange) ← this file.
//!
//! It deliberately does not build the prompt (`prompt`), parse the model's answer (`edit::parse`:
//! a fenced or malformed answer is passed through untouched), enforce a run's token or time budget
//! (`reconcile`), or read configuration or the environment (`config` hands over [`LlmSettings`]
//! with the key already read).
//!
//! Secrets: the key lives in a [`SecretString`], is sent in a header marked sensitive, never in a
//! URL, and is scrubbed from every error message (a server may echo it back). Redirects are not
//! followed, so a key header never reaches a second host.

mod address;
mod anthropic;
mod aws_credentials;
mod bedrock;
pub mod config;
mod data;
pub mod endpoint;
mod google;
mod openai;
pub mod retry;
pub mod scripted;
pub mod sse;
mod vendor;
mod wire;

use secrecy::SecretString;

pub use config::LlmConfig;
pub use data::{
    AuthMode, Completion, Conversation, Credentials, DEFAULT_MAX_OUTPUT_TOKENS, DEFAULT_MAX_REQUEST_SECS,
    DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT_SECS, EndpointSettings, FinishReason, Learned, LlmError,
    LlmSettings, MaxTokensField, PROGRESS_INTERVAL, Prices, ProviderKind, ResponseFormat, Role,
    StructuredOutput, Turn, Usage, cost,
};
pub use retry::RetryPolicy;

/// A configured model. Cheap to share by reference; one HTTP client per provider.
#[derive(Debug)]
pub struct Provider {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Http(Box<wire::HttpProvider>),
    Scripted(scripted::ScriptedProvider),
}

impl Provider {
    /// Checks the settings and builds the HTTP client; makes no request.
    pub fn new(settings: LlmSettings) -> Result<Self, LlmError> {
        let inner = match settings.provider {
            ProviderKind::Openai
            | ProviderKind::Anthropic
            | ProviderKind::Azure
            | ProviderKind::Bedrock
            | ProviderKind::Vertex => Inner::Http(Box::new(wire::HttpProvider::new(settings)?)),
            ProviderKind::Scripted => Inner::Scripted(scripted::ScriptedProvider::new(&settings)?),
        };
        Ok(Self { inner })
    }

    /// Replaces the retry timing (tests use a millisecond base so they run fast).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        if let Inner::Http(http) = &mut self.inner {
            http.retry = policy;
        }
        self
    }

    /// Sends the conversation and returns the model's raw answer text, retrying transient
    /// failures per the settings. `format` asks for structured JSON output.
    pub async fn complete(
        &self,
        conversation: &Conversation,
        format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError> {
        // The one boundary every vendor's request passes: nothing holding a registered secret
        // (under any encoding) is sent, whichever iteration it is.
        if let Some(name) = conversation.secret_name() {
            return Err(LlmError::Settings {
                provider: self.kind(),
                message: format!(
                    "the request holds the value of {name}; refusing to send a secret to the model"
                ),
            });
        }
        match &self.inner {
            Inner::Http(http) => http.complete(conversation, format).await,
            Inner::Scripted(script) => script.complete(conversation),
        }
    }

    /// For logs and reports, e.g. `openai gpt-4o at https://api.openai.com/v1`; never the key.
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Http(http) => http.describe(),
            Inner::Scripted(script) => script.describe(),
        }
    }

    /// Whether the server answers at all (any HTTP status; no model call): the status.
    pub async fn reachable(&self) -> Result<u16, String> {
        match &self.inner {
            Inner::Http(http) => http.reachable().await,
            Inner::Scripted(_) => Ok(0),
        }
    }

    /// Whether a configured seed is sent (Anthropic Messages and Bedrock Converse have none).
    pub fn sends_seed(&self) -> bool {
        match &self.inner {
            Inner::Http(http) => http.sends_seed(),
            Inner::Scripted(_) => false,
        }
    }

    /// Environment for a separate process that calls this model itself (the edit step):
    /// credentials that come from files (AWS web identity, a Google external account) are
    /// exchanged here for short-lived ones the process can use without the file.
    pub async fn handoff_env(&self) -> Result<Vec<(String, SecretString)>, LlmError> {
        match &self.inner {
            Inner::Http(http) => http.handoff_env().await,
            Inner::Scripted(_) => Ok(Vec::new()),
        }
    }

    /// What this provider learned about its server so far (see [`Learned`]).
    pub fn learned(&self) -> Learned {
        match &self.inner {
            Inner::Http(http) => http.learned(),
            Inner::Scripted(_) => Learned::default(),
        }
    }

    /// Every token the servers reported for this provider's requests so far: answers used or
    /// not (refused, empty, cut off, unparsable), retried attempts and negotiation attempts
    /// included. What a report's usage is made of.
    pub fn spent(&self) -> Usage {
        match &self.inner {
            Inner::Http(http) => http.spent(),
            Inner::Scripted(script) => script.spent(),
        }
    }

    /// Which API this provider speaks.
    pub fn kind(&self) -> ProviderKind {
        match &self.inner {
            Inner::Http(http) => http.kind(),
            Inner::Scripted(_) => ProviderKind::Scripted,
        }
    }
}

/// Reads a recorded answer body of `kind`'s API (for `vertex`, a `claude-*` `model` is
/// Anthropic's shape, others OpenAI's) by the same code [`Provider::complete`] uses, without the
/// HTTP around it: for benchmarks and for replaying recorded responses. `streamed`: the body is
/// streamed (`text/event-stream`; Bedrock's `application/vnd.amazon.eventstream`), given in the
/// chunks it arrived in; else a whole JSON body (its chunks are joined). `format`: the structured
/// output that was asked for (a forced tool's input is the answer).
pub fn read_answer<'a>(
    kind: ProviderKind,
    model: &str,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    streamed: bool,
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    wire::read_recorded(kind, model, chunks, streamed, format)
}
