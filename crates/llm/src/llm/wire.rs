//! The HTTP exchange shared by the vendors: client, headers, attempts and retries, error bodies.
//!
//! Owns the reqwest client (redirects off), the key header (marked sensitive, never in a URL), the
//! attempt loop with [`RetryPolicy`], reading answers whole or as they stream (the vendor's
//! [`Decoder`]: server-sent events, or Bedrock's event-stream frames) under two clocks
//! (`llm.timeout-secs`: the longest silence, no bytes at all; `llm.max-request-secs`: the whole
//! request), progress lines during a long answer, and turning a failed response into an
//! [`LlmError`] whose text is short and holds no key and no URL query. It does not know any
//! vendor: `endpoint` picks one, and the vendor (see `vendor`) builds the bodies and reads the
//! answers and stream events.
//!
//! It also negotiates what the server accepts: a request whose structured-output mode the server
//! rejects (HTTP 400, 422 or 500 naming `response_format`, `json_schema`, a tool or the schema) is
//! sent again at once with the next weaker mode; a 400 that states the model's output maximum is
//! sent again once with it; a 400 naming `stream`, a 404 from a stream URL of its own (Bedrock's
//! `converse-stream`, Vertex's `:streamRawPredict`), or a whole answer (not the vendor's stream
//! media type) to a streamed request, turns streaming off (before a weaker structured output, when
//! a 400 names both). The provider keeps what it learned (`Shape`, shared by every call) and
//! reports it as [`Learned`], so other processes of the run start from it.

use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use bork_ci_core::net::reqwest::Client;
use secrecy::SecretString;

use super::address::shown_url;
use super::data::{Completion, Conversation, Learned, LlmError, LlmSettings, ProviderKind, ResponseFormat};
use super::data::{MaxTokensField, StructuredOutput, Usage};
use super::endpoint::{self, Endpoint};
use super::retry::{self, RetryPolicy};
use super::vendor::{Ask, Decoder, StreamProblem, error_excerpt};

/// A response body larger than this is refused rather than buffered.
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;
/// How much of an error body is read to tell which feature a server refused.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A provider that speaks HTTP, to whichever vendor its endpoint picked.
#[derive(Debug)]
pub(super) struct HttpProvider {
    kind: ProviderKind,
    model: String,
    /// URL, authentication and body touches (see `endpoint`).
    endpoint: Endpoint,
    client: Client,
    /// The longest silence (no bytes) allowed while waiting for or reading an answer.
    timeout: Duration,
    /// The longest one attempt may take, streamed or not.
    max_request: Duration,
    /// How often a long answer's progress is logged.
    progress_interval: Duration,
    max_retries: u32,
    pub(super) retry: RetryPolicy,
    /// What the next request asks for (weakened on rejections, shared by every call).
    shape: Mutex<Shape>,
    /// What was learned about the server so far.
    learned: Mutex<Learned>,
    /// Every token the server reported, over all calls and attempts.
    spent: Mutex<Usage>,
}

/// What a request asks for beyond the conversation: the configured values, weakened when the
/// server refuses them (and remembered for the rest of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    mode: StructuredOutput,
    max_output_tokens: u32,
    /// OpenAI-compatible bodies: the field the cap goes in.
    max_tokens_field: MaxTokensField,
    /// Ask for server-sent events.
    stream: bool,
}

/// A feature the server refused, and what to ask for instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    StructuredOutput(StructuredOutput),
    /// The cap is over the model's maximum, which the error states.
    OutputCap(u32),
    /// The server does not stream.
    Stream,
}

/// What one request (with its retries) came to.
enum Exchange {
    Done(Result<Completion, LlmError>),
    /// The server refused a feature of the request; `message` names the status and its text.
    Rejected {
        rejection: Rejection,
        message: String,
    },
}

/// What one attempt produced: an answer read (usable or not), or a failure to retry or report.
enum Attempt {
    Answer(Result<Completion, LlmError>),
    Failed(Failure),
}

/// Why reading a stream stopped before its end.
enum StreamStop {
    Problem(StreamProblem),
    /// More than [`MAX_RESPONSE_BYTES`].
    TooLarge,
}

/// What a stream that ends before its answer is complete is called.
const INCOMPLETE_STREAM: &str = "the event stream ended before the answer was complete";

/// Reads a streamed answer chunk by chunk as it arrives; no I/O, so the same code serves the
/// HTTP exchange and recorded streams ([`read_recorded`]).
struct StreamReader {
    stream: Box<dyn Decoder>,
    received: usize,
}

impl StreamReader {
    fn new(stream: Box<dyn Decoder>) -> Self {
        Self { stream, received: 0 }
    }

    /// Reads the next chunk of the body.
    fn push(&mut self, chunk: &[u8]) -> Result<(), StreamStop> {
        self.received += chunk.len();
        if self.received > MAX_RESPONSE_BYTES {
            return Err(StreamStop::TooLarge);
        }
        self.stream.push(chunk).map_err(StreamStop::Problem)
    }

    /// Whether the stream's end marker came: nothing more to read.
    fn is_ended(&self) -> bool {
        self.stream.partial().is_ended()
    }

    fn usage(&self) -> Usage {
        self.stream.partial().usage()
    }

    /// The answer's tokens so far, estimated from its bytes (4 per token).
    fn tokens_so_far(&self) -> u64 {
        u64::try_from(self.stream.partial().text_bytes().div_ceil(4)).unwrap_or(u64::MAX)
    }

    /// The answer, or `None` when the stream ended before it was complete.
    fn finish(
        self,
        model: &str,
        tool_format: Option<&ResponseFormat>,
    ) -> Option<Result<Completion, LlmError>> {
        let answer = self.stream.into_partial();
        if !answer.is_complete() {
            return None;
        }
        Some(answer.finish(model, tool_format))
    }
}

/// Reads a recorded answer body of `kind`'s API without the HTTP around it (see
/// [`super::read_answer`]).
pub(super) fn read_recorded<'a>(
    kind: ProviderKind,
    model: &str,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    streamed: bool,
    format: Option<&ResponseFormat>,
) -> Result<Completion, LlmError> {
    let answers = endpoint::answers_for(kind, model)?;
    let invalid = |message: String| LlmError::InvalidResponse {
        provider: kind,
        model: model.to_owned(),
        message,
    };
    let Some(decoder) = answers.decoder().filter(|_| streamed) else {
        let body: Vec<u8> = chunks.into_iter().flatten().copied().collect();
        return answers.read(model, &body, format);
    };
    let mut reader = StreamReader::new(decoder);
    for chunk in chunks {
        match reader.push(chunk) {
            Ok(()) => {}
            Err(StreamStop::TooLarge) => {
                return Err(invalid(format!(
                    "the body is larger than {MAX_RESPONSE_BYTES} bytes"
                )));
            }
            Err(StreamStop::Problem(StreamProblem::Server { message, .. })) => {
                return Err(invalid(format!(
                    "the server ended the stream with an error: {message}"
                )));
            }
            Err(StreamStop::Problem(StreamProblem::Invalid(message))) => return Err(invalid(message)),
        }
        if reader.is_ended() {
            break;
        }
    }
    reader
        .finish(model, format)
        .unwrap_or_else(|| Err(invalid(INCOMPLETE_STREAM.to_owned())))
}

/// When the next progress line is due.
struct Progress {
    started: Instant,
    next: tokio::time::Instant,
    interval: Duration,
}

/// How a wait ended.
enum Waited<T> {
    Done(T),
    /// No byte within `llm.timeout-secs`.
    Silent,
    /// The attempt's `llm.max-request-secs` ran out.
    TooLong,
}

/// A failed attempt, before deciding whether to try again.
enum Failure {
    Status {
        status: u16,
        retry_after: Option<Duration>,
        message: String,
        /// The error body as text (lossy, cut at [`MAX_ERROR_BODY`]), to tell what was refused.
        body: String,
    },
    Redirect {
        status: u16,
        location: String,
    },
    /// No byte within `llm.timeout-secs`.
    Timeout,
    /// The attempt took longer than `llm.max-request-secs`.
    TooLong,
    /// The server reported an error inside a stream.
    Stream {
        message: String,
        retryable: bool,
    },
    Transport {
        message: String,
        retryable: bool,
    },
    TooLarge,
    /// Signing or fetching a token failed (already a final error).
    Credentials(LlmError),
}

impl HttpProvider {
    pub(super) fn new(settings: LlmSettings) -> Result<Self, LlmError> {
        let kind = settings.provider;
        let settings_error = |message: String| LlmError::Settings {
            provider: kind,
            message,
        };
        if settings.model.trim().is_empty() {
            return Err(settings_error("no model is set (llm.model)".to_owned()));
        }
        if settings.timeout.is_zero() {
            return Err(settings_error(
                "the request timeout must be more than zero (llm.timeout-secs)".to_owned(),
            ));
        }
        if settings.max_request.is_zero() {
            return Err(settings_error(
                "the request limit must be more than zero (llm.max-request-secs)".to_owned(),
            ));
        }
        let endpoint = Endpoint::new(&settings)?;
        let max_tokens_field = settings
            .max_tokens_field
            .unwrap_or_else(|| endpoint.default_max_tokens_field());
        let stream = settings.stream && endpoint.streams();

        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = bork_ci_core::net::client_builder()
            .redirect(bork_ci_core::net::reqwest::redirect::Policy::none())
            // A safety net behind the attempt's own clocks, which fire first.
            .timeout(settings.max_request + Duration::from_secs(5))
            .connect_timeout(settings.timeout.min(Duration::from_secs(30)))
            .user_agent(concat!("bork-ci/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| settings_error(format!("cannot build the HTTP client: {error}")))?;

        Ok(Self {
            kind,
            model: settings.model,
            endpoint,
            client,
            timeout: settings.timeout,
            max_request: settings.max_request,
            progress_interval: settings.progress_interval.max(Duration::from_millis(10)),
            max_retries: settings.max_retries,
            retry: RetryPolicy::default(),
            shape: Mutex::new(Shape {
                mode: settings.structured_output,
                max_output_tokens: settings.max_output_tokens,
                max_tokens_field,
                stream,
            }),
            learned: Mutex::new(Learned::default()),
            spent: Mutex::new(Usage::default()),
        })
    }

    pub(super) fn kind(&self) -> ProviderKind {
        self.kind
    }

    pub(super) fn describe(&self) -> String {
        format!("{} {} at {}", self.kind, self.model, self.endpoint.shown_base)
    }

    pub(super) fn sends_seed(&self) -> bool {
        self.endpoint.vendor().sends_seed()
    }

    /// Whether the endpoint's server answers at all: a GET of its root without credentials;
    /// any HTTP status counts (no model is called, nothing is paid). The status, or why not.
    pub(super) async fn reachable(&self) -> Result<u16, String> {
        // OpenAI-compatible servers and Anthropic list their models: a 404 there is a wrong
        // base URL, a 401 or 403 a refused key, and neither costs a call.
        if matches!(self.kind, ProviderKind::Openai | ProviderKind::Anthropic)
            && let Some((url, headers)) = self.endpoint.models_probe()
        {
            let limit = self.timeout.min(Duration::from_secs(15));
            let shown = format!(
                "{}://{}{}",
                url.scheme(),
                url.host_str().unwrap_or_default(),
                url.port().map(|port| format!(":{port}")).unwrap_or_default()
            ) + url.path();
            return match tokio::time::timeout(limit, self.client.get(url).headers(headers).send()).await {
                Ok(Ok(response)) => match response.status().as_u16() {
                    404 => Err(format!(
                        "GET {shown} answered HTTP 404: no API at this base URL (an OpenAI-compatible one usually ends in /v1)"
                    )),
                    status @ (401 | 403) => Err(format!(
                        "GET {shown} answered HTTP {status}: the key is refused (llm.api-key-env names the variable that holds it)"
                    )),
                    status => Ok(status),
                },
                Ok(Err(error)) => Err(format!(
                    "a network error reaching {shown}: {}",
                    bork_ci_core::secrets::redact(&error.without_url().to_string())
                )),
                Err(_) => Err(format!("no answer from {shown} within {} s", limit.as_secs())),
            };
        }
        let mut url = self.endpoint.url_for(false).clone();
        url.set_path("/");
        url.set_query(None);
        url.set_fragment(None);
        let _ = url.set_username("");
        let _ = url.set_password(None);
        let limit = self.timeout.min(Duration::from_secs(15));
        match tokio::time::timeout(limit, self.client.get(url).send()).await {
            Ok(Ok(response)) => Ok(response.status().as_u16()),
            Ok(Err(error)) => {
                Err(bork_ci_core::secrets::redact(&error.without_url().to_string()).into_owned())
            }
            Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
        }
    }

    pub(super) async fn handoff_env(&self) -> Result<Vec<(String, SecretString)>, LlmError> {
        self.endpoint
            .handoff_env(&self.client)
            .await
            .map_err(|error| self.scrub_error(error))
    }

    /// What the next request asks for: the configured shape, as weakened so far.
    fn shape(&self) -> Shape {
        *self.shape.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn spent(&self) -> Usage {
        *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Counts what an answer cost, whether it could be used or not.
    fn count(&self, usage: Usage) {
        *self.spent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) += usage;
    }

    pub(super) fn learned(&self) -> Learned {
        *self
            .learned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn learn(&self, lesson: Learned) {
        let mut learned = self
            .learned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *learned = learned.merge(lesson);
        let mut shape = self.shape.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(mode) = lesson.structured_output {
            shape.mode = shape.mode.max(mode);
        }
        if let Some(cap) = lesson.max_output_tokens {
            shape.max_output_tokens = shape.max_output_tokens.min(cap);
        }
        if lesson.stream == Some(false) {
            shape.stream = false;
        }
    }

    /// The request body for `shape`, shared by every attempt without a copy (it holds the whole
    /// prompt).
    fn encode(
        &self,
        conversation: &Conversation,
        format: Option<&ResponseFormat>,
        shape: &Shape,
    ) -> Result<bytes::Bytes, LlmError> {
        let ask = Ask {
            model: &self.model,
            conversation,
            format,
            mode: shape.mode,
            max_output_tokens: shape.max_output_tokens,
            max_tokens_field: shape.max_tokens_field,
        };
        let body = self.endpoint.request_body(&ask, shape.stream);
        serde_json::to_vec(&body)
            .map(bytes::Bytes::from)
            .map_err(|error| LlmError::Settings {
                provider: self.kind,
                message: format!("cannot encode the request: {error}"),
            })
    }

    /// The next weaker structured-output mode this endpoint can use after `mode` was rejected
    /// (a forced tool has no JSON mode between it and none).
    fn weaker(&self, mode: StructuredOutput) -> Option<StructuredOutput> {
        self.endpoint.vendor().weaker(mode)
    }

    /// What the server refused in a failed attempt, when it is something a changed request can
    /// avoid (a lower output cap, once per call; a weaker structured-output mode) and that change
    /// is still possible.
    fn rejection(
        &self,
        failure: &Failure,
        shape: &Shape,
        format: Option<&ResponseFormat>,
        cap_retried: bool,
    ) -> Option<Rejection> {
        let Failure::Status { status, body, .. } = failure else {
            return None;
        };
        let text = body.to_lowercase();
        if matches!(status, 400 | 422)
            && !cap_retried
            && let Some(maximum) =
                stated_maximum(&text).filter(|max| *max > 0 && *max < shape.max_output_tokens)
        {
            return Some(Rejection::OutputCap(maximum));
        }
        // Streaming goes first when the error names it: turning it off costs only the progress
        // lines, a weaker structured output costs the answer's shape (Bedrock: "This model
        // doesn't support tool use in streaming mode").
        if shape.stream && matches!(status, 400 | 422) && text.contains("stream") {
            return Some(Rejection::Stream);
        }
        let format_sent = format.is_some() && self.weaker(shape.mode).is_some();
        if format_sent
            && matches!(status, 400 | 422 | 500)
            && ["response_format", "json_schema", "tool", "schema"]
                .iter()
                .any(|word| text.contains(word))
        {
            return self.weaker(shape.mode).map(Rejection::StructuredOutput);
        }
        // A stream URL of its own that is not there: the server answers only whole requests.
        if shape.stream && *status == 404 && self.endpoint.url_for(true) != self.endpoint.url_for(false) {
            return Some(Rejection::Stream);
        }
        None
    }

    pub(super) async fn complete(
        &self,
        conversation: &Conversation,
        format: Option<&ResponseFormat>,
    ) -> Result<Completion, LlmError> {
        let mut cap_retried = false;
        loop {
            let shape = self.shape();
            let body = self.encode(conversation, format, &shape)?;
            match self.exchange(&body, format, &shape, cap_retried).await {
                Exchange::Done(result) => {
                    if let Ok(completion) = &result
                        && completion.usage.output_tokens > u64::from(shape.max_output_tokens)
                    {
                        tracing::warn!(
                            provider = %self.kind,
                            model = %self.model,
                            output_tokens = completion.usage.output_tokens,
                            max_output_tokens = shape.max_output_tokens,
                            "{} reported {} output tokens, more than the cap of {} (llm.max-output-tokens){}",
                            self.describe(),
                            completion.usage.output_tokens,
                            shape.max_output_tokens,
                            match self.endpoint.vendor().cap_field() {
                                Some(_) => format!(
                                    "; the server may not read `{}` (llm.max-tokens-field)",
                                    shape.max_tokens_field.as_str()
                                ),
                                None => String::new(),
                            }
                        );
                    }
                    return result;
                }
                Exchange::Rejected { rejection, message } => match rejection {
                    Rejection::OutputCap(maximum) => {
                        cap_retried = true;
                        tracing::warn!(
                            provider = %self.kind,
                            model = %self.model,
                            max_output_tokens = maximum,
                            "{} allows at most {maximum} output tokens, not {} ({}); using {maximum} for the rest of the run (llm.max-output-tokens)",
                            self.describe(),
                            shape.max_output_tokens,
                            message
                        );
                        self.learn(Learned {
                            max_output_tokens: Some(maximum),
                            ..Learned::default()
                        });
                    }
                    Rejection::Stream => {
                        tracing::warn!(
                            provider = %self.kind,
                            model = %self.model,
                            "{} rejected a streamed request ({}); not streaming for the rest of the run (llm.stream)",
                            self.describe(),
                            message
                        );
                        self.learn(Learned {
                            stream: Some(false),
                            ..Learned::default()
                        });
                    }
                    Rejection::StructuredOutput(next) => {
                        tracing::warn!(
                            provider = %self.kind,
                            model = %self.model,
                            structured_output = next.as_str(),
                            "{} rejected structured output `{}` ({}); using `{next}` for the rest of the run (llm.structured-output)",
                            self.describe(),
                            shape.mode,
                            message
                        );
                        self.learn(Learned {
                            structured_output: Some(next),
                            ..Learned::default()
                        });
                    }
                },
            }
        }
    }

    /// One request with its retries: an answer, a final error, or a rejection the caller can
    /// avoid by changing the request.
    async fn exchange(
        &self,
        body: &bytes::Bytes,
        format: Option<&ResponseFormat>,
        shape: &Shape,
        cap_retried: bool,
    ) -> Exchange {
        let tool_format = format.filter(|_| shape.mode == StructuredOutput::JsonSchema);
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let failure = match self.attempt(body, shape, tool_format).await {
                Attempt::Answer(result) => {
                    let mut result = result.map_err(|error| self.scrub_error(error));
                    // A server that reports no usage (llama.cpp's ignores
                    // `stream_options.include_usage`), or no input tokens, must not make the
                    // budgets blind.
                    if let Ok(completion) = &mut result {
                        completion.usage = completion.usage.filled_in(body.len(), completion.text.len());
                    }
                    self.count(match &result {
                        Ok(completion) => completion.usage,
                        Err(error) => error.usage(),
                    });
                    return Exchange::Done(result);
                }
                Attempt::Failed(failure) => failure,
            };
            if let Some(rejection) = self.rejection(&failure, shape, format, cap_retried) {
                let message = match &failure {
                    Failure::Status { status, message, .. } => {
                        format!(
                            "HTTP {status} from POST {}: {}",
                            self.endpoint.shown_url_for(shape.stream),
                            self.scrub(message)
                        )
                    }
                    _ => self.failure_summary(&failure),
                };
                return Exchange::Rejected { rejection, message };
            }
            let retryable = match &failure {
                Failure::Status { status, .. } => retry::is_retryable_status(*status),
                Failure::Timeout => true,
                Failure::Transport { retryable, .. } | Failure::Stream { retryable, .. } => *retryable,
                // An answer that took the whole of llm.max-request-secs would take it again.
                Failure::Redirect { .. } | Failure::TooLarge | Failure::TooLong => false,
                Failure::Credentials(error) => error.is_transient(),
            };
            let asked = match &failure {
                Failure::Status { retry_after, .. } => *retry_after,
                _ => None,
            };
            let too_long = asked.is_some_and(|delay| delay > self.retry.max_retry_after);
            if !retryable || attempts > self.max_retries || too_long {
                return Exchange::Done(Err(self.final_error(failure, attempts, shape.stream)));
            }
            let delay = asked.unwrap_or_else(|| self.retry.backoff(attempts));
            tracing::warn!(
                provider = %self.kind,
                model = %self.model,
                attempt = attempts,
                max_retries = self.max_retries,
                delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "{}; trying again",
                self.failure_summary(&failure)
            );
            tokio::time::sleep(delay).await;
        }
    }

    /// One attempt, bounded by `llm.max-request-secs` (the clocks inside `send` fire first and
    /// count what a stream already reported; this one also covers fetching credentials).
    async fn attempt(
        &self,
        body: &bytes::Bytes,
        shape: &Shape,
        tool_format: Option<&ResponseFormat>,
    ) -> Attempt {
        let limit = self.max_request + Duration::from_secs(1);
        match tokio::time::timeout(limit, self.send(body, shape, tool_format)).await {
            Ok(attempt) => attempt,
            Err(_) => Attempt::Failed(Failure::TooLong),
        }
    }

    /// Waits for `future` until it is done, no byte came for `llm.timeout-secs`, or `deadline`
    /// passed, logging progress on the way (`tokens`: the answer's estimated tokens so far, when
    /// it is streamed).
    async fn wait<F: Future>(
        &self,
        future: F,
        deadline: tokio::time::Instant,
        progress: &mut Progress,
        tokens: Option<u64>,
    ) -> Waited<F::Output> {
        let silent_at = tokio::time::Instant::now() + self.timeout;
        tokio::pin!(future);
        loop {
            tokio::select! {
                biased;
                output = &mut future => return Waited::Done(output),
                () = tokio::time::sleep_until(silent_at.min(deadline)) => {
                    return if silent_at <= deadline { Waited::Silent } else { Waited::TooLong };
                }
                () = tokio::time::sleep_until(progress.next) => {
                    progress.next += progress.interval;
                    let elapsed = progress.started.elapsed().as_secs();
                    match tokens {
                        Some(tokens) => tracing::info!(
                            provider = %self.kind,
                            model = %self.model,
                            elapsed_s = elapsed,
                            output_tokens_estimate = tokens,
                            "{}: receiving the answer, about {tokens} tokens so far ({elapsed}s)",
                            self.describe()
                        ),
                        None => tracing::info!(
                            provider = %self.kind,
                            model = %self.model,
                            elapsed_s = elapsed,
                            "{}: waiting for the answer ({elapsed}s)",
                            self.describe()
                        ),
                    }
                }
            }
        }
    }

    async fn send(
        &self,
        body: &bytes::Bytes,
        shape: &Shape,
        tool_format: Option<&ResponseFormat>,
    ) -> Attempt {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.max_request;
        let mut progress = Progress {
            started,
            next: tokio::time::Instant::now() + self.progress_interval,
            interval: self.progress_interval,
        };
        let url = self.endpoint.url_for(shape.stream);
        let headers = match self.endpoint.request_headers(&self.client, url, body).await {
            Ok(headers) => headers,
            Err(error) => return Attempt::Failed(Failure::Credentials(error)),
        };
        let request = self.client.post(url.clone()).headers(headers).body(body.clone());
        let mut response = match self.wait(request.send(), deadline, &mut progress, None).await {
            Waited::Done(Ok(response)) => response,
            Waited::Done(Err(error)) => return Attempt::Failed(transport_failure(error)),
            Waited::Silent => return Attempt::Failed(Failure::Timeout),
            Waited::TooLong => return Attempt::Failed(Failure::TooLong),
        };
        let status = response.status();
        let headers = response.headers().clone();
        let content_type = headers
            .get(bork_ci_core::net::reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(|value| value.trim().to_ascii_lowercase())
            .unwrap_or_default();
        let answers = self.endpoint.vendor().answers();
        if status.is_success()
            && let Some(decoder) = answers.decoder()
            && content_type.starts_with(decoder.media_type())
        {
            return self
                .read_stream(decoder, &mut response, deadline, &mut progress, tool_format)
                .await;
        }
        if status.is_success() && shape.stream {
            tracing::info!(
                provider = %self.kind,
                model = %self.model,
                "{} answered a streamed request whole; not asking for a stream again in this run (llm.stream)",
                self.describe()
            );
            self.learn(Learned {
                stream: Some(false),
                ..Learned::default()
            });
        }
        let mut bytes = Vec::new();
        loop {
            match self.wait(response.chunk(), deadline, &mut progress, None).await {
                Waited::Done(Ok(Some(chunk))) => {
                    if bytes.len() + chunk.len() > MAX_RESPONSE_BYTES {
                        return Attempt::Failed(Failure::TooLarge);
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Waited::Done(Ok(None)) => break,
                Waited::Done(Err(error)) => return Attempt::Failed(transport_failure(error)),
                Waited::Silent => return Attempt::Failed(Failure::Timeout),
                Waited::TooLong => return Attempt::Failed(Failure::TooLong),
            }
        }
        if status.is_success() {
            return Attempt::Answer(answers.read(&self.model, &bytes, tool_format));
        }
        if status.is_redirection() {
            let location = headers
                .get(bork_ci_core::net::reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(|text| match url.join(text) {
                    Ok(url) => shown_url(&url),
                    Err(_) => "an unreadable location".to_owned(),
                })
                .unwrap_or_else(|| "nowhere".to_owned());
            return Attempt::Failed(Failure::Redirect {
                status: status.as_u16(),
                location,
            });
        }
        Attempt::Failed(Failure::Status {
            status: status.as_u16(),
            retry_after: retry::retry_after(&headers, SystemTime::now()),
            message: error_excerpt(&bytes),
            body: String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_ERROR_BODY)]).into_owned(),
        })
    }

    /// Reads a streamed answer as it arrives. Whatever usage the stream reported is counted also
    /// when it breaks off; a stream that ends before its answer is complete is a failure worth
    /// retrying.
    async fn read_stream(
        &self,
        decoder: Box<dyn Decoder>,
        response: &mut bork_ci_core::net::reqwest::Response,
        deadline: tokio::time::Instant,
        progress: &mut Progress,
        tool_format: Option<&ResponseFormat>,
    ) -> Attempt {
        let mut reader = StreamReader::new(decoder);
        let failed = |reader: &StreamReader, failure: Failure| {
            self.count(reader.usage());
            Attempt::Failed(failure)
        };
        while !reader.is_ended() {
            let tokens = Some(reader.tokens_so_far());
            let chunk = match self.wait(response.chunk(), deadline, progress, tokens).await {
                Waited::Done(Ok(Some(chunk))) => chunk,
                Waited::Done(Ok(None)) => break,
                Waited::Done(Err(error)) => return failed(&reader, transport_failure(error)),
                Waited::Silent => return failed(&reader, Failure::Timeout),
                Waited::TooLong => return failed(&reader, Failure::TooLong),
            };
            match reader.push(&chunk) {
                Ok(()) => {}
                Err(StreamStop::TooLarge) => return failed(&reader, Failure::TooLarge),
                Err(StreamStop::Problem(StreamProblem::Server { message, retryable })) => {
                    return failed(&reader, Failure::Stream { message, retryable });
                }
                Err(StreamStop::Problem(StreamProblem::Invalid(message))) => {
                    self.count(reader.usage());
                    return Attempt::Answer(Err(LlmError::InvalidResponse {
                        provider: self.kind,
                        model: self.model.clone(),
                        message,
                    }));
                }
            }
        }
        let usage = reader.usage();
        match reader.finish(&self.model, tool_format) {
            Some(answer) => Attempt::Answer(answer),
            None => {
                self.count(usage);
                Attempt::Failed(Failure::Transport {
                    message: INCOMPLETE_STREAM.to_owned(),
                    retryable: true,
                })
            }
        }
    }

    fn failure_summary(&self, failure: &Failure) -> String {
        match failure {
            Failure::Status { status, .. } => format!("HTTP {status}"),
            Failure::Timeout => format!("no bytes for {}s (llm.timeout-secs)", self.timeout.as_secs_f64()),
            Failure::TooLong => format!(
                "no complete answer within {}s (llm.max-request-secs)",
                self.max_request.as_secs_f64()
            ),
            Failure::Stream { message, .. } => {
                format!(
                    "the server ended the stream with an error: {}",
                    self.scrub(message)
                )
            }
            Failure::Transport { message, .. } => self.scrub(message),
            Failure::Redirect { status, .. } => format!("HTTP {status}"),
            Failure::TooLarge => "response too large".to_owned(),
            Failure::Credentials(error) => self.scrub(&error.to_string()),
        }
    }

    fn final_error(&self, failure: Failure, attempts: u32, streamed: bool) -> LlmError {
        let provider = self.kind;
        let model = self.model.clone();
        let shown_url = self.endpoint.shown_url_for(streamed);
        match failure {
            Failure::Status {
                status: 429,
                retry_after,
                message,
                ..
            } => LlmError::RateLimited {
                provider,
                model,
                status: 429,
                attempts,
                retry_after,
                message: format!("POST {shown_url}: {}", self.scrub(&message)),
            },
            Failure::Status { status, message, .. } => LlmError::Status {
                provider,
                model,
                status,
                attempts,
                message: format!("POST {shown_url}: {}", self.scrub(&message)),
            },
            Failure::Redirect { status, location } => LlmError::Redirect {
                provider,
                model,
                status,
                location: self.scrub(&location),
            },
            Failure::Timeout => LlmError::Timeout {
                provider,
                model,
                timeout: self.timeout,
                attempts,
            },
            Failure::TooLong => LlmError::TooLong {
                provider,
                model,
                limit: self.max_request,
                attempts,
            },
            Failure::Stream { message, .. } => LlmError::Transport {
                provider,
                model,
                attempts,
                message: format!(
                    "POST {shown_url}: the server ended the stream with an error: {}",
                    self.scrub(&message)
                ),
            },
            Failure::Transport { message, .. } => LlmError::Transport {
                provider,
                model,
                attempts,
                message: format!("POST {shown_url}: {}", self.scrub(&message)),
            },
            Failure::Credentials(error) => self.scrub_error(error),
            Failure::TooLarge => LlmError::InvalidResponse {
                provider,
                model,
                message: format!("the body is larger than {MAX_RESPONSE_BYTES} bytes"),
            },
        }
    }

    /// Removes every secret and the endpoint's query values from a message.
    fn scrub(&self, text: &str) -> String {
        self.endpoint.scrub(text)
    }

    fn scrub_error(&self, error: LlmError) -> LlmError {
        match error {
            LlmError::InvalidResponse {
                provider,
                model,
                message,
            } => LlmError::InvalidResponse {
                provider,
                model,
                message: self.scrub(&message),
            },
            LlmError::Refused {
                provider,
                model,
                message,
                usage,
            } => LlmError::Refused {
                provider,
                model,
                message: self.scrub(&message),
                usage,
            },
            other => other,
        }
    }
}

/// The model's output maximum stated by an error body (lower case) that names the cap, if any:
///
/// - OpenAI: "max_tokens is too large: 32000. This model supports at most 16384 completion
///   tokens, whereas you provided 32000."
/// - Anthropic: "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens
///   for claude-3-5-sonnet-20241022"
/// - vLLM: "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum
///   context length is 8192 tokens and your request has 1000 input tokens (32000 > 8192 -
///   1000)", and older: "This model's maximum context length is 4096 tokens. However, you
///   requested 33000 tokens (1000 in the messages, 32000 in the completion)" (also
///   llama-cpp-python's wording): the context less the input.
fn stated_maximum(text: &str) -> Option<u32> {
    let names_cap = [
        "max_tokens",
        "max_completion_tokens",
        "maxtokens",
        "max_output_tokens",
        "output tokens",
        "completion tokens",
        "in the completion",
    ]
    .iter()
    .any(|name| text.contains(name));
    if !names_cap {
        return None;
    }
    let number_after = |marker: &str| -> Option<u64> {
        let start = text.find(marker)? + marker.len();
        let digits: String = text[start..]
            .trim_start()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    };
    let maximum = if let Some(at_most) = number_after("at most ") {
        Some(at_most)
    } else if let Some(index) = text.find(", which is the maximum") {
        let before = &text[..index];
        let digits: String = before
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        digits.parse().ok()
    } else {
        let context = number_after("maximum context length is ")?;
        let input = number_after("your request has ").or_else(|| {
            let index = text.find(" in the messages")?;
            let digits: String = text[..index]
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            digits.parse().ok()
        })?;
        context.checked_sub(input)
    };
    maximum.and_then(|maximum| u32::try_from(maximum).ok())
}

/// A transport error as text without the URL (it may carry a query with a key), with its causes.
fn transport_failure(error: bork_ci_core::net::reqwest::Error) -> Failure {
    if error.is_timeout() {
        // The client's own deadline sits behind llm.max-request-secs; a connect timeout is silence.
        return if error.is_connect() {
            Failure::Timeout
        } else {
            Failure::TooLong
        };
    }
    let retryable = error.is_connect() || error.is_request() || error.is_body();
    let kind = if error.is_connect() {
        "cannot connect"
    } else if error.is_body() {
        "the response body broke off"
    } else {
        "the request failed"
    };
    let mut message = kind.to_owned();
    let error = error.without_url();
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    Failure::Transport { message, retryable }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stated_maximums_of_real_servers() {
        let cases = [
            (
                "max_tokens is too large: 32000. This model supports at most 16384 completion tokens, whereas you provided 32000.",
                Some(16384),
            ),
            (
                "max_tokens: 32000 > 8192, which is the maximum allowed number of output tokens for claude-3-5-sonnet-20241022",
                Some(8192),
            ),
            (
                "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 8192 tokens and your request has 1000 input tokens (32000 > 8192 - 1000).",
                Some(7192),
            ),
            (
                "This model's maximum context length is 4096 tokens. However, you requested 33000 tokens (1000 in the messages, 32000 in the completion). Please reduce the length of the messages or completion.",
                Some(3096),
            ),
            ("Invalid 'messages': at most 5 items", None),
            ("max_tokens must be a positive integer", None),
            (
                "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.",
                None,
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(stated_maximum(&text.to_lowercase()), expected, "{text}");
        }
    }
}
