//! Where a request goes and how it is authenticated, per provider: the URL, the auth and extra
//! headers, the provider-specific touches on the body, and the credentials behind them.
//!
//! One `Endpoint` is built per provider from [`LlmSettings`]; `wire` asks it for the URL, for the
//! headers of each attempt (`Endpoint::request_headers`: static keys, a fresh SigV4 signature for
//! Bedrock, an exchanged token for Vertex) and to finish the body (`Endpoint::finish_body`:
//! Vertex's `anthropic_version`, plain Anthropic strings without prompt caching, `temperature`,
//! `seed`, `llm.extra-body`). It does not send the request, retry, or read answers.
//!
//! | provider | URL | auth |
//! |---|---|---|
//! | `openai` | `{base}/chat/completions` | `Authorization: Bearer` |
//! | `anthropic` | `{base}/v1/messages` (a base ending in `/v1` is not doubled) | `x-api-key` |
//! | `azure` | `{base}/openai/deployments/{model}/chat/completions?api-version=…` | `api-key`, or `Bearer` with `llm.auth = "bearer"` |
//! | `bedrock` | `{base}/model/{model}/converse` | SigV4 (`bedrock`) |
//! | `vertex`, `claude-*` | `{base}/v1/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict` | `Bearer` |
//! | `vertex`, others | `{base}/v1/projects/{p}/locations/{r}/endpoints/openapi/chat/completions` | `Bearer` |
//!
//! Secrets (keys, tokens, AWS secrets, header values read from `${NAME}`) stay in
//! [`SecretString`]s, go out only in headers marked sensitive, and are scrubbed from every error
//! message (`Endpoint::scrub`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Client, Url};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};

use super::{LlmError, LlmSettings, MaxTokensField, ProviderKind};
use super::{anthropic, bedrock, google, openai};

/// The Azure OpenAI data-plane API version used when `llm.api-version` is not set (latest GA).
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";
/// What Vertex wants in the body of an Anthropic request instead of the `anthropic-version` header.
pub(super) const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";
/// Body keys `llm.extra-body` may not set: they carry the conversation or decide how the answer is
/// read.
pub const RESERVED_BODY_KEYS: &[&str] = &[
    "model",
    "messages",
    "system",
    "stream",
    "anthropic_version",
    "inferenceConfig",
    "toolConfig",
];

/// How the key is sent to Azure OpenAI (`llm.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
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
}

impl Credentials {
    fn secret(&self, name: &str) -> Option<&SecretString> {
        self.secrets
            .get(name)
            .filter(|value| !value.expose_secret().trim().is_empty())
    }

    fn plain(&self, name: &str) -> Option<&str> {
        self.plain
            .get(name)
            .map(String::as_str)
            .filter(|value| !value.trim().is_empty())
    }
}

/// The variables a provider's credentials come from: `(secret names, plain names)`.
pub fn credential_env(kind: ProviderKind) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        ProviderKind::Bedrock => (
            &[
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
                "AWS_CONTAINER_AUTHORIZATION_TOKEN",
            ],
            &[
                "AWS_REGION",
                "AWS_DEFAULT_REGION",
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_ROLE_ARN",
                "AWS_ROLE_SESSION_NAME",
                "AWS_PROFILE",
                "AWS_CONFIG_FILE",
                "AWS_SHARED_CREDENTIALS_FILE",
            ],
        ),
        ProviderKind::Vertex => (
            &["GOOGLE_OAUTH_ACCESS_TOKEN"],
            &["GOOGLE_CLOUD_PROJECT", "GOOGLE_APPLICATION_CREDENTIALS"],
        ),
        _ => (&[], &[]),
    }
}

/// The variable a `${NAME}` header value reads, if the value is written that way.
pub fn header_env_name(value: &str) -> Option<&str> {
    let name = value.strip_prefix("${")?.strip_suffix('}')?;
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    valid.then_some(name)
}

/// Endpoint settings beyond the base URL and key; part of [`LlmSettings`].
#[derive(Debug, Clone)]
pub struct EndpointSettings {
    /// Azure: `api-version` (default [`AZURE_DEFAULT_API_VERSION`]).
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

/// Which request and answer shapes the endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WireFormat {
    Openai,
    Anthropic,
    Bedrock,
}

/// Headers computed per attempt.
#[derive(Debug)]
enum DynamicAuth {
    None,
    Aws(Box<bedrock::AwsAuth>),
    Google(google::TokenSource),
}

/// A provider's resolved endpoint.
#[derive(Debug)]
pub(super) struct Endpoint {
    kind: ProviderKind,
    pub(super) format: WireFormat,
    pub(super) url: Url,
    /// Vertex Claude: `:streamRawPredict`, where streamed requests go.
    stream_url: Option<Url>,
    /// The base URL as shown to people: no user info, no query.
    pub(super) shown_base: String,
    headers: HeaderMap,
    dynamic: DynamicAuth,
    /// Every secret value, to scrub from messages.
    secrets: Vec<SecretString>,
    vertex_anthropic: bool,
    vertex_model: Option<String>,
    prompt_caching: bool,
    temperature: Option<f64>,
    seed: Option<i64>,
    extra_body: serde_json::Map<String, Value>,
}

impl Endpoint {
    pub(super) fn new(settings: &LlmSettings) -> Result<Self, LlmError> {
        let kind = settings.provider;
        let extra = &settings.endpoint;
        let settings_error = |message: String| LlmError::Settings {
            provider: kind,
            message,
        };
        let mut secrets: Vec<SecretString> = extra.credentials.secrets.values().cloned().collect();
        let key = match kind {
            ProviderKind::Openai | ProviderKind::Anthropic | ProviderKind::Azure => match &settings.api_key {
                Some(key) if !key.expose_secret().trim().is_empty() => {
                    secrets.push(key.clone());
                    Some(key.clone())
                }
                _ => {
                    let env = if settings.api_key_env.is_empty() {
                        kind.default_api_key_env().to_owned()
                    } else {
                        settings.api_key_env.clone()
                    };
                    return Err(LlmError::MissingApiKey { provider: kind, env });
                }
            },
            _ => None,
        };
        let region = match kind {
            ProviderKind::Bedrock => Some(
                extra
                    .region
                    .clone()
                    .filter(|region| !region.trim().is_empty())
                    .or_else(|| extra.credentials.plain("AWS_REGION").map(str::to_owned))
                    .or_else(|| extra.credentials.plain("AWS_DEFAULT_REGION").map(str::to_owned))
                    .ok_or_else(|| {
                        settings_error(
                            "no region: set llm.region or the environment variable AWS_REGION".to_owned(),
                        )
                    })?,
            ),
            ProviderKind::Vertex => Some(
                extra
                    .region
                    .clone()
                    .filter(|region| !region.trim().is_empty())
                    .ok_or_else(|| {
                        settings_error("no region: set llm.region (e.g. us-east5 or global)".to_owned())
                    })?,
            ),
            _ => None,
        };
        if let Some(region) = &region
            && !region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(settings_error(format!(
                "llm.region `{region}` is not a region name (letters, digits and `-`)"
            )));
        }
        if settings.model.chars().any(char::is_control) {
            return Err(settings_error("llm.model contains control characters".to_owned()));
        }
        let base = match (&settings.base_url, kind, region.as_deref()) {
            (Some(base), ..) => base.clone(),
            (None, ProviderKind::Bedrock, Some(region)) => {
                format!("https://bedrock-runtime.{region}.amazonaws.com")
            }
            (None, ProviderKind::Vertex, Some("global")) => "https://aiplatform.googleapis.com".to_owned(),
            (None, ProviderKind::Vertex, Some(region)) => {
                format!("https://{region}-aiplatform.googleapis.com")
            }
            (None, ProviderKind::Azure, _) => {
                return Err(settings_error(
                    "llm.base-url must be set to the resource endpoint, e.g. https://NAME.openai.azure.com"
                        .to_owned(),
                ));
            }
            (None, ..) => kind.default_base_url().to_owned(),
        };
        let base_url = parse_base(kind, &base)?;
        let root = base_url.path().trim_end_matches('/').to_owned();
        let model = settings.model.trim();
        let vertex_anthropic = kind == ProviderKind::Vertex && model.starts_with("claude");
        let (format, path) = match kind {
            ProviderKind::Anthropic => {
                let path = match root.strip_suffix("/v1") {
                    Some(stem) => format!("{stem}{}", anthropic::PATH),
                    None => format!("{root}{}", anthropic::PATH),
                };
                (WireFormat::Anthropic, path)
            }
            ProviderKind::Azure => (
                WireFormat::Openai,
                format!(
                    "{root}/openai/deployments/{}/chat/completions",
                    encode_segment(model)
                ),
            ),
            ProviderKind::Bedrock => (
                WireFormat::Bedrock,
                format!("{root}/model/{}/converse", encode_segment(model)),
            ),
            ProviderKind::Vertex => {
                let project = extra
                    .project
                    .clone()
                    .filter(|project| !project.trim().is_empty())
                    .or_else(|| extra.credentials.plain("GOOGLE_CLOUD_PROJECT").map(str::to_owned))
                    .ok_or_else(|| {
                        settings_error(
                            "no project: set llm.project or the environment variable GOOGLE_CLOUD_PROJECT"
                                .to_owned(),
                        )
                    })?;
                let region = region.as_deref().unwrap_or_default();
                let prefix = format!(
                    "{root}/v1/projects/{}/locations/{}",
                    encode_segment(&project),
                    encode_segment(region)
                );
                if vertex_anthropic {
                    (
                        WireFormat::Anthropic,
                        format!(
                            "{prefix}/publishers/anthropic/models/{}:rawPredict",
                            encode_segment(model)
                        ),
                    )
                } else {
                    (
                        WireFormat::Openai,
                        format!("{prefix}/endpoints/openapi/chat/completions"),
                    )
                }
            }
            _ => (WireFormat::Openai, format!("{root}{}", openai::PATH)),
        };
        let mut url = base_url.clone();
        url.set_path(&path);
        if kind == ProviderKind::Azure {
            let version = extra
                .api_version
                .clone()
                .filter(|version| !version.trim().is_empty())
                .unwrap_or_else(|| AZURE_DEFAULT_API_VERSION.to_owned());
            url.query_pairs_mut().append_pair("api-version", version.trim());
        }

        let mut headers = HeaderMap::new();
        if let Some(key) = &key {
            let not_a_header = || {
                settings_error(format!(
                    "the API key in {} contains characters that cannot be sent in an HTTP header",
                    settings.api_key_env
                ))
            };
            let key = key.expose_secret().trim();
            let (name, text) = match (kind, extra.auth) {
                (ProviderKind::Anthropic, _) => (HeaderName::from_static("x-api-key"), key.to_owned()),
                (ProviderKind::Azure, AuthMode::Key) => (HeaderName::from_static("api-key"), key.to_owned()),
                _ => (reqwest::header::AUTHORIZATION, format!("Bearer {key}")),
            };
            let mut value = HeaderValue::from_str(&text).map_err(|_| not_a_header())?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        if kind == ProviderKind::Anthropic {
            headers.insert(
                HeaderName::from_static("anthropic-version"),
                HeaderValue::from_static(anthropic::VERSION),
            );
        }
        for (name, template) in &extra.extra_headers {
            let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                settings_error(format!("llm.extra-headers: `{name}` is not an HTTP header name"))
            })?;
            let mut value = match header_env_name(template) {
                Some(env) => {
                    let secret = extra.credentials.secret(env).ok_or_else(|| {
                        settings_error(format!(
                            "llm.extra-headers.{name} reads the environment variable {env}, which is not set"
                        ))
                    })?;
                    let mut value = HeaderValue::from_str(secret.expose_secret().trim()).map_err(|_| {
                        settings_error(format!(
                            "the value of {env} (llm.extra-headers.{name}) cannot be sent in an HTTP header"
                        ))
                    })?;
                    value.set_sensitive(true);
                    value
                }
                None => HeaderValue::from_str(template).map_err(|_| {
                    settings_error(format!(
                        "llm.extra-headers.{name}: the value cannot be sent in an HTTP header"
                    ))
                })?,
            };
            if header_env_name(template).is_some() {
                value.set_sensitive(true);
            }
            headers.insert(header, value);
        }

        let dynamic = match kind {
            ProviderKind::Bedrock => DynamicAuth::Aws(Box::new(bedrock::AwsAuth::new(
                region.clone().unwrap_or_default(),
                extra.sts_url.clone(),
                &extra.credentials,
            )?)),
            ProviderKind::Vertex => DynamicAuth::Google(google::TokenSource::new(&extra.credentials)?),
            _ => DynamicAuth::None,
        };
        let vertex_model = (kind == ProviderKind::Vertex && !vertex_anthropic).then(|| {
            if model.contains('/') {
                model.to_owned()
            } else {
                format!("google/{model}")
            }
        });
        let stream_url = vertex_anthropic.then(|| {
            let mut stream_url = url.clone();
            let path = url.path().replacen(":rawPredict", ":streamRawPredict", 1);
            stream_url.set_path(&path);
            stream_url
        });
        Ok(Self {
            kind,
            format,
            shown_base: shown_url(&base_url),
            stream_url,
            url,
            headers,
            dynamic,
            secrets,
            vertex_anthropic,
            vertex_model,
            prompt_caching: extra.prompt_caching,
            temperature: extra.temperature,
            seed: extra.seed,
            extra_body: extra.extra_body.clone(),
        })
    }

    /// The field an OpenAI-compatible server reads the output cap from when
    /// `llm.max-tokens-field` is not set: `max_completion_tokens` for OpenAI's own API and Azure
    /// OpenAI, `max_tokens` for every other endpoint (vLLM, llama.cpp, Ollama, LiteLLM, Vertex's
    /// OpenAI-compatible endpoint), which read it and may ignore the newer name.
    pub(super) fn default_max_tokens_field(&self) -> MaxTokensField {
        let openai_host = self.url.host_str().is_some_and(|host| {
            host.eq_ignore_ascii_case("api.openai.com")
                || host.to_ascii_lowercase().ends_with(".openai.azure.com")
        });
        match self.kind {
            ProviderKind::Azure => MaxTokensField::MaxCompletionTokens,
            ProviderKind::Openai if openai_host => MaxTokensField::MaxCompletionTokens,
            _ => MaxTokensField::MaxTokens,
        }
    }

    /// Whether `llm.seed` reaches the server (only OpenAI-compatible bodies have a seed).
    pub(super) fn sends_seed(&self) -> bool {
        self.format == WireFormat::Openai
    }

    /// Whether this endpoint can answer with server-sent events (every one but Bedrock, whose
    /// stream is AWS's binary event-stream framing).
    pub(super) fn streams(&self) -> bool {
        self.format != WireFormat::Bedrock
    }

    /// Where a request goes: Vertex streams Claude from `:streamRawPredict`, everything else
    /// streams from the same URL.
    pub(super) fn url_for(&self, stream: bool) -> &Url {
        match &self.stream_url {
            Some(url) if stream => url,
            _ => &self.url,
        }
    }

    /// The URL a request (streamed or not) goes to, as shown in messages: scheme, host, port,
    /// path and the query's names (values hidden unless they are an `api-version`); never user
    /// info.
    pub(super) fn shown_url_for(&self, stream: bool) -> String {
        self.shown(self.url_for(stream))
    }

    fn shown(&self, url: &Url) -> String {
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_fragment(None);
        if shown.query().is_some() {
            let pairs: Vec<(String, String)> = url
                .query_pairs()
                .map(|(name, value)| {
                    let value = if name == "api-version" {
                        value.into_owned()
                    } else {
                        "[redacted]".to_owned()
                    };
                    (name.into_owned(), value)
                })
                .collect();
            shown.set_query(None);
            let mut query = shown.query_pairs_mut();
            for (name, value) in &pairs {
                query.append_pair(name, value);
            }
            drop(query);
        }
        shown.as_str().replace("%5Bredacted%5D", "[redacted]")
    }

    /// The headers of one attempt with `body`: static ones plus a fresh signature or token.
    pub(super) async fn request_headers(&self, client: &Client, body: &[u8]) -> Result<HeaderMap, LlmError> {
        let mut headers = self.headers.clone();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        match &self.dynamic {
            DynamicAuth::None => {}
            DynamicAuth::Aws(aws) => aws.sign(client, &self.url, &mut headers, body).await?,
            DynamicAuth::Google(google) => {
                let token = google.token().await?;
                let mut value = HeaderValue::from_str(&format!("Bearer {}", token.expose_secret().trim()))
                    .map_err(|_| LlmError::Settings {
                        provider: self.kind,
                        message: "the Google access token cannot be sent in an HTTP header".to_owned(),
                    })?;
                value.set_sensitive(true);
                headers.insert(reqwest::header::AUTHORIZATION, value);
            }
        }
        Ok(headers)
    }

    /// Provider touches on a body built by `openai`, `anthropic` or `bedrock`.
    pub(super) fn finish_body(&self, body: &mut Value) {
        let Some(object) = body.as_object_mut() else {
            return;
        };
        if self.vertex_anthropic {
            object.remove("model");
            object.insert("anthropic_version".into(), json!(VERTEX_ANTHROPIC_VERSION));
        }
        if let Some(model) = &self.vertex_model {
            object.insert("model".into(), json!(model));
        }
        if self.format == WireFormat::Anthropic && !self.prompt_caching {
            anthropic::plain_content(object);
        }
        if let Some(temperature) = self.temperature {
            match self.format {
                WireFormat::Bedrock => {
                    if let Some(config) = object.get_mut("inferenceConfig").and_then(Value::as_object_mut) {
                        config.insert("temperature".into(), json!(temperature));
                    }
                }
                _ => {
                    object.insert("temperature".into(), json!(temperature));
                }
            }
        }
        if let Some(seed) = self.seed
            && self.format == WireFormat::Openai
        {
            object.insert("seed".into(), json!(seed));
        }
        for (key, value) in &self.extra_body {
            if !RESERVED_BODY_KEYS.contains(&key.as_str()) {
                object.insert(key.clone(), value.clone());
            }
        }
    }

    /// Environment for a process that calls this endpoint on its own (the edit step): the
    /// credentials as they are, except that files (web identity token, external account) are
    /// exchanged here for short-lived credentials the process can use without the file.
    pub(super) async fn handoff_env(&self, client: &Client) -> Result<Vec<(String, SecretString)>, LlmError> {
        let mut env = Vec::new();
        match &self.dynamic {
            DynamicAuth::None => {}
            DynamicAuth::Aws(aws) => env.extend(aws.handoff_env(client).await?),
            DynamicAuth::Google(google) => {
                env.push(("GOOGLE_OAUTH_ACCESS_TOKEN".to_owned(), google.token().await?));
            }
        }
        Ok(env)
    }

    /// Removes every secret and the URL's query values from a message.
    pub(super) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            let value = secret.expose_secret().trim();
            if value.len() >= 4 {
                text = text.replace(value, "[redacted]");
            }
        }
        match &self.dynamic {
            DynamicAuth::Aws(aws) => text = aws.scrub(&text),
            DynamicAuth::Google(google) => text = google.scrub(&text),
            DynamicAuth::None => {}
        }
        for (name, value) in self.url.query_pairs() {
            if name != "api-version" && value.len() >= 4 {
                text = text.replace(value.as_ref(), "[redacted]");
            }
        }
        text
    }
}

fn parse_base(kind: ProviderKind, base: &str) -> Result<Url, LlmError> {
    let settings_error = |message: String| LlmError::Settings {
        provider: kind,
        message,
    };
    let base_url = Url::parse(base.trim()).map_err(|error| {
        settings_error(format!(
            "llm.base-url `{}` is not a URL: {error}",
            shown_url_text(base)
        ))
    })?;
    if !matches!(base_url.scheme(), "http" | "https") || base_url.host_str().is_none() {
        return Err(settings_error(format!(
            "llm.base-url `{}` must be an http or https URL with a host",
            shown_url(&base_url)
        )));
    }
    Ok(base_url)
}

/// A model, project or region as one URL path segment (`:` of Bedrock model ids becomes `%3A`).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.trim().bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~@".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A URL as shown to people: scheme, host, port and path; no user info, no query, no fragment.
pub(super) fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    if shown.query().is_some() {
        shown.set_query(Some("[redacted]"));
    }
    shown.set_fragment(None);
    shown.as_str().trim_end_matches('/').to_owned()
}

/// An unparsable URL as shown to people: everything before any `?` or `@`.
pub(super) fn shown_url_text(text: &str) -> String {
    let before_query = text.split(['?', '#']).next().unwrap_or_default();
    match before_query.rsplit_once('@') {
        Some((_, rest)) => format!("[redacted]@{rest}"),
        None => before_query.to_owned(),
    }
}

/// Form-encodes `pairs` (`application/x-www-form-urlencoded`).
pub(super) fn form(pairs: &[(&str, &str)]) -> String {
    let mut url = Url::parse("http://form.invalid/").expect("a constant URL parses");
    {
        let mut query = url.query_pairs_mut();
        for (name, value) in pairs {
            query.append_pair(name, value);
        }
    }
    url.query().unwrap_or_default().to_owned()
}

/// How long a fetched token is trusted before it is fetched again: its lifetime less a margin.
pub(super) fn refresh_at(lifetime: Duration) -> Instant {
    Instant::now()
        + lifetime
            .saturating_sub(Duration::from_secs(300))
            .max(Duration::from_secs(30))
}

/// Seconds since the epoch, for lifetimes given as dates.
pub(super) fn until(when: SystemTime) -> Duration {
    when.duration_since(SystemTime::now()).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(kind: ProviderKind, model: &str, base: Option<&str>) -> LlmSettings {
        let mut settings = LlmSettings::new(kind, model);
        settings.base_url = base.map(str::to_owned);
        settings.api_key = Some("key-1234".into());
        settings
    }

    #[test]
    fn anthropic_base_with_or_without_v1() {
        for base in [
            "https://api.anthropic.com",
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1",
            "https://api.anthropic.com/v1/",
        ] {
            let endpoint =
                Endpoint::new(&settings(ProviderKind::Anthropic, "claude", Some(base))).expect("builds");
            assert_eq!(
                endpoint.url.as_str(),
                "https://api.anthropic.com/v1/messages",
                "{base}"
            );
        }
        let gateway = Endpoint::new(&settings(
            ProviderKind::Anthropic,
            "claude",
            Some("https://gw.example/anthropic"),
        ))
        .expect("builds");
        assert_eq!(gateway.url.as_str(), "https://gw.example/anthropic/v1/messages");
    }

    #[test]
    fn azure_path_query_and_header() {
        let endpoint = Endpoint::new(&settings(
            ProviderKind::Azure,
            "my-gpt4o",
            Some("https://res.openai.azure.com/"),
        ))
        .expect("builds");
        assert_eq!(
            endpoint.url.as_str(),
            "https://res.openai.azure.com/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(endpoint.shown_url_for(true), endpoint.url.as_str());
        assert!(endpoint.headers.contains_key("api-key"));
        assert!(!endpoint.headers.contains_key("authorization"));
    }

    #[test]
    fn bedrock_model_ids_are_encoded() {
        let mut settings = settings(
            ProviderKind::Bedrock,
            "anthropic.claude-3-5-sonnet-20240620-v1:0",
            None,
        );
        settings.endpoint.region = Some("eu-west-1".into());
        settings
            .endpoint
            .credentials
            .secrets
            .insert("AWS_ACCESS_KEY_ID".into(), "AKIDEXAMPLE".into());
        settings
            .endpoint
            .credentials
            .secrets
            .insert("AWS_SECRET_ACCESS_KEY".into(), "secret".into());
        let endpoint = Endpoint::new(&settings).expect("builds");
        assert_eq!(
            endpoint.url.as_str(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
        );
    }

    #[test]
    fn vertex_chooses_the_api_by_model() {
        let mut claude = settings(ProviderKind::Vertex, "claude-sonnet-4@20250514", None);
        claude.endpoint.region = Some("us-east5".into());
        claude.endpoint.project = Some("proj".into());
        claude
            .endpoint
            .credentials
            .secrets
            .insert("GOOGLE_OAUTH_ACCESS_TOKEN".into(), "ya29.token".into());
        let endpoint = Endpoint::new(&claude).expect("builds");
        assert_eq!(
            endpoint.url.as_str(),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"
        );
        assert_eq!(
            endpoint.url_for(true).as_str(),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict"
        );
        let mut body = json!({"model": "claude-sonnet-4@20250514", "messages": []});
        endpoint.finish_body(&mut body);
        assert!(body.get("model").is_none());
        assert_eq!(body["anthropic_version"], VERTEX_ANTHROPIC_VERSION);

        let mut gemini = claude.clone();
        gemini.model = "gemini-2.0-flash".into();
        gemini.endpoint.region = Some("global".into());
        let endpoint = Endpoint::new(&gemini).expect("builds");
        assert_eq!(
            endpoint.url.as_str(),
            "https://aiplatform.googleapis.com/v1/projects/proj/locations/global/endpoints/openapi/chat/completions"
        );
        let mut body = json!({"model": "gemini-2.0-flash", "messages": []});
        endpoint.finish_body(&mut body);
        assert_eq!(body["model"], "google/gemini-2.0-flash");
    }

    #[test]
    fn the_cap_field_follows_the_endpoint() {
        let field = |kind, base: Option<&str>| {
            let mut settings = settings(kind, "m", base);
            if kind == ProviderKind::Vertex {
                settings.endpoint.region = Some("us-east5".into());
                settings.endpoint.project = Some("p".into());
                settings
                    .endpoint
                    .credentials
                    .secrets
                    .insert("GOOGLE_OAUTH_ACCESS_TOKEN".into(), "ya29.token".into());
            }
            Endpoint::new(&settings)
                .expect("builds")
                .default_max_tokens_field()
        };
        assert_eq!(
            field(ProviderKind::Openai, None),
            MaxTokensField::MaxCompletionTokens
        );
        assert_eq!(
            field(ProviderKind::Openai, Some("https://API.openai.com/v1")),
            MaxTokensField::MaxCompletionTokens
        );
        assert_eq!(
            field(
                ProviderKind::Azure,
                Some("https://res.cognitiveservices.azure.com")
            ),
            MaxTokensField::MaxCompletionTokens
        );
        for base in [
            "http://127.0.0.1:8000/v1",
            "http://localhost:11434/v1",
            "https://llm.internal.example/v1",
            "https://api.openai.com.evil.example/v1",
        ] {
            assert_eq!(
                field(ProviderKind::Openai, Some(base)),
                MaxTokensField::MaxTokens,
                "{base}"
            );
        }
        assert_eq!(field(ProviderKind::Vertex, None), MaxTokensField::MaxTokens);
    }

    #[test]
    fn extra_body_cannot_replace_the_conversation() {
        let mut settings = settings(ProviderKind::Openai, "m", None);
        settings.endpoint.extra_body.insert("messages".into(), json!([]));
        settings.endpoint.extra_body.insert("top_k".into(), json!(5));
        settings.endpoint.temperature = Some(0.2);
        settings.endpoint.seed = Some(7);
        let endpoint = Endpoint::new(&settings).expect("builds");
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        endpoint.finish_body(&mut body);
        assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
        assert_eq!(body["top_k"], 5);
        assert_eq!(body["temperature"], 0.2);
        assert_eq!(body["seed"], 7);
    }

    #[test]
    fn a_region_cannot_move_the_host() {
        for region in ["x.evil.example/", "us-east-1@evil.example", "eu west"] {
            let mut settings = settings(ProviderKind::Bedrock, "m", None);
            settings.endpoint.region = Some(region.into());
            settings
                .endpoint
                .credentials
                .secrets
                .insert("AWS_ACCESS_KEY_ID".into(), "AKIDEXAMPLE".into());
            settings
                .endpoint
                .credentials
                .secrets
                .insert("AWS_SECRET_ACCESS_KEY".into(), "secret".into());
            assert!(Endpoint::new(&settings).is_err(), "{region}");
        }
    }

    #[test]
    fn header_env_names() {
        assert_eq!(header_env_name("${GATEWAY_TOKEN}"), Some("GATEWAY_TOKEN"));
        assert_eq!(header_env_name("Bearer ${X}"), None);
        assert_eq!(header_env_name("${}"), None);
        assert_eq!(header_env_name("${A-B}"), None);
    }
}
