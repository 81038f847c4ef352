//! Where a request goes and how it is authenticated, per provider: this module resolves the
//! settings (key, region, project, base URL, extra headers) and picks the vendor that speaks the
//! provider's API (`openai::Chat`, `anthropic::Messages`, `bedrock::Converse`). It is the one place
//! a [`ProviderKind`] becomes a vendor (`vendor`, and `answers_for` for recorded answers).
//!
//! One `Endpoint` is built per provider from [`LlmSettings`]; `wire` asks it for the URL, for the
//! headers of each attempt (`Endpoint::request_headers`: static keys and extra headers, plus what
//! the vendor adds: a fresh SigV4 signature for Bedrock, an exchanged token for Vertex) and for
//! the body (`Endpoint::request_body`: the vendor's body with its touches, then `llm.extra-body`).
//! It does not send the request, retry, or read answers.
//!
//! | provider | URL | auth |
//! |---|---|---|
//! | `openai` | `{base}/chat/completions` | `Authorization: Bearer` |
//! | `anthropic` | `{base}/v1/messages` (a base ending in `/v1` is not doubled) | `x-api-key` |
//! | `azure` | `{base}/openai/deployments/{model}/chat/completions?api-version=…` | `api-key`, or `Bearer` with `llm.auth = "bearer"` |
//! | `bedrock` | `{base}/model/{model}/converse`, streamed `…/converse-stream` | SigV4 (`bedrock`) |
//! | `vertex`, `claude-*` | `{base}/v1/projects/{p}/locations/{r}/publishers/anthropic/models/{model}:rawPredict` | `Bearer` |
//! | `vertex`, others | `{base}/v1/projects/{p}/locations/{r}/endpoints/openapi/chat/completions` | `Bearer` |
//!
//! Secrets (keys, tokens, AWS secrets, header values read from `${NAME}`) stay in
//! [`SecretString`]s, go out only in headers marked sensitive, and are scrubbed from every error
//! message (`Endpoint::scrub`).

use bork_ci_core::net::reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use bork_ci_core::net::reqwest::{Client, Url};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::address::{encode_segment, shown_url, shown_url_text};
use super::bedrock::{self, AwsAuth};
use super::data::{AuthMode, LlmError, LlmSettings, MaxTokensField, ProviderKind};
use super::google::TokenSource;
use super::vendor::{Answers, Ask, Vendor};
use super::{anthropic, openai};

/// The Azure OpenAI data-plane API version used when `llm.api-version` is not set (latest GA).
pub const AZURE_DEFAULT_API_VERSION: &str = "2024-10-21";
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

/// A provider's resolved endpoint: its vendor, the static headers and what to scrub.
#[derive(Debug)]
pub(super) struct Endpoint {
    vendor: Box<dyn Vendor>,
    /// The base URL as shown to people: no user info, no query.
    pub(super) shown_base: String,
    /// Sent with every attempt: the key, a version, `llm.extra-headers`.
    headers: HeaderMap,
    /// Every secret value, to scrub from messages.
    secrets: Vec<SecretString>,
    extra_body: serde_json::Map<String, Value>,
}

/// A vendor as `vendor` builds it, with the base URL and the headers of every request.
struct Picked {
    vendor: Box<dyn Vendor>,
    base: Url,
    headers: HeaderMap,
    key: Option<SecretString>,
}

/// The vendor `settings.provider` speaks, its settings resolved: the one place a provider kind
/// becomes a vendor. Each kind's settings are checked in the same order: key, region, model, base
/// URL, the rest of the URL, headers, credentials.
fn vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    match settings.provider {
        ProviderKind::Openai => openai_vendor(settings),
        ProviderKind::Azure => azure_vendor(settings),
        ProviderKind::Anthropic => anthropic_vendor(settings),
        ProviderKind::Bedrock => bedrock_vendor(settings),
        ProviderKind::Vertex => vertex_vendor(settings),
        ProviderKind::Scripted => Err(settings_error(
            settings,
            "the scripted model has no endpoint".to_owned(),
        )),
    }
}

/// How `kind`'s answers are read (for `vertex`, a `claude-*` `model` is Anthropic's shape, others
/// OpenAI's), for answers recorded without their endpoint.
pub(super) fn answers_for(kind: ProviderKind, model: &str) -> Result<Box<dyn Answers>, LlmError> {
    match kind {
        ProviderKind::Anthropic => Ok(Box::new(anthropic::Reader)),
        ProviderKind::Vertex if vertex_speaks_anthropic(model) => Ok(Box::new(anthropic::Reader)),
        ProviderKind::Bedrock => Ok(Box::new(bedrock::Reader)),
        ProviderKind::Openai | ProviderKind::Azure | ProviderKind::Vertex => {
            Ok(Box::new(openai::Reader { kind }))
        }
        ProviderKind::Scripted => Err(LlmError::Settings {
            provider: kind,
            message: "the scripted model has no wire format".to_owned(),
        }),
    }
}

/// Vertex serves Claude through Anthropic's Messages (`rawPredict`), other models through its
/// OpenAI-compatible endpoint.
fn vertex_speaks_anthropic(model: &str) -> bool {
    model.trim().starts_with("claude")
}

fn openai_vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    let key = api_key(settings)?;
    checked_model(settings)?;
    let base = base_url(settings, |kind| Ok(kind.default_base_url().to_owned()))?;
    let url = joined(&base, &format!("{}{}", root(&base), openai::PATH));
    let mut headers = key_header(settings, &key, AUTHORIZATION, |key| format!("Bearer {key}"))?;
    extra_headers(settings, &mut headers)?;
    // OpenAI's own API reads `max_completion_tokens`; other servers may ignore it.
    let openai_host = url.host_str().is_some_and(|host| {
        host.eq_ignore_ascii_case("api.openai.com")
            || host.to_ascii_lowercase().ends_with(".openai.azure.com")
    });
    let cap_field = if openai_host {
        MaxTokensField::MaxCompletionTokens
    } else {
        MaxTokensField::MaxTokens
    };
    let chat = openai::Chat::keyed(settings, url, cap_field);
    Ok(Picked {
        vendor: Box::new(chat),
        base,
        headers,
        key: Some(key),
    })
}

fn azure_vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    let key = api_key(settings)?;
    let model = checked_model(settings)?;
    let base = base_url(settings, |_| {
        Err(settings_error(
            settings,
            "llm.base-url must be set to the resource endpoint, e.g. https://NAME.openai.azure.com"
                .to_owned(),
        ))
    })?;
    let path = format!(
        "{}/openai/deployments/{}/chat/completions",
        root(&base),
        encode_segment(model)
    );
    let mut url = joined(&base, &path);
    let version = settings
        .endpoint
        .api_version
        .clone()
        .filter(|version| !version.trim().is_empty())
        .unwrap_or_else(|| AZURE_DEFAULT_API_VERSION.to_owned());
    url.query_pairs_mut().append_pair("api-version", version.trim());
    let mut headers = match settings.endpoint.auth {
        AuthMode::Key => key_header(settings, &key, HeaderName::from_static("api-key"), str::to_owned)?,
        AuthMode::Bearer => key_header(settings, &key, AUTHORIZATION, |key| format!("Bearer {key}"))?,
    };
    extra_headers(settings, &mut headers)?;
    // Azure OpenAI reads OpenAI's current field.
    let chat = openai::Chat::keyed(settings, url, MaxTokensField::MaxCompletionTokens);
    Ok(Picked {
        vendor: Box::new(chat),
        base,
        headers,
        key: Some(key),
    })
}

fn anthropic_vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    let key = api_key(settings)?;
    checked_model(settings)?;
    let base = base_url(settings, |kind| Ok(kind.default_base_url().to_owned()))?;
    let root = root(&base);
    let path = match root.strip_suffix("/v1") {
        Some(stem) => format!("{stem}{}", anthropic::PATH),
        None => format!("{root}{}", anthropic::PATH),
    };
    let url = joined(&base, &path);
    let mut headers = key_header(
        settings,
        &key,
        HeaderName::from_static("x-api-key"),
        str::to_owned,
    )?;
    headers.insert(
        HeaderName::from_static("anthropic-version"),
        HeaderValue::from_static(anthropic::VERSION),
    );
    extra_headers(settings, &mut headers)?;
    let messages = anthropic::Messages {
        url,
        stream_url: None,
        google: None,
        prompt_caching: settings.endpoint.prompt_caching,
        temperature: settings.endpoint.temperature,
    };
    Ok(Picked {
        vendor: Box::new(messages),
        base,
        headers,
        key: Some(key),
    })
}

fn bedrock_vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    let extra = &settings.endpoint;
    let region = extra
        .region
        .clone()
        .filter(|region| !region.trim().is_empty())
        .or_else(|| extra.credentials.plain("AWS_REGION").map(str::to_owned))
        .or_else(|| extra.credentials.plain("AWS_DEFAULT_REGION").map(str::to_owned))
        .ok_or_else(|| {
            settings_error(
                settings,
                "no region: set llm.region or the environment variable AWS_REGION".to_owned(),
            )
        })?;
    checked_region(settings, &region)?;
    let model = checked_model(settings)?;
    let base = base_url(settings, |_| {
        Ok(format!("https://bedrock-runtime.{region}.amazonaws.com"))
    })?;
    let path = format!("{}/model/{}/converse", root(&base), encode_segment(model));
    let url = joined(&base, &path);
    let stream_url = joined(&base, &format!("{path}-stream"));
    let mut headers = HeaderMap::new();
    extra_headers(settings, &mut headers)?;
    let aws = AwsAuth::new(region, extra.sts_url.clone(), &extra.credentials)?;
    let converse = bedrock::Converse {
        url,
        stream_url,
        aws,
        temperature: extra.temperature,
    };
    Ok(Picked {
        vendor: Box::new(converse),
        base,
        headers,
        key: None,
    })
}

fn vertex_vendor(settings: &LlmSettings) -> Result<Picked, LlmError> {
    let extra = &settings.endpoint;
    let region = extra
        .region
        .clone()
        .filter(|region| !region.trim().is_empty())
        .ok_or_else(|| {
            settings_error(
                settings,
                "no region: set llm.region (e.g. us-east5 or global)".to_owned(),
            )
        })?;
    checked_region(settings, &region)?;
    let model = checked_model(settings)?;
    let base = base_url(settings, |_| {
        Ok(match region.as_str() {
            "global" => "https://aiplatform.googleapis.com".to_owned(),
            region => format!("https://{region}-aiplatform.googleapis.com"),
        })
    })?;
    let project = vertex_project(settings)?;
    let prefix = format!(
        "{}/v1/projects/{}/locations/{}",
        root(&base),
        encode_segment(&project),
        encode_segment(&region)
    );
    let claude = vertex_speaks_anthropic(model);
    let url = if claude {
        joined(
            &base,
            &format!(
                "{prefix}/publishers/anthropic/models/{}:rawPredict",
                encode_segment(model)
            ),
        )
    } else {
        joined(&base, &format!("{prefix}/endpoints/openapi/chat/completions"))
    };
    let mut headers = HeaderMap::new();
    extra_headers(settings, &mut headers)?;
    let google = TokenSource::new(&extra.credentials)?;
    Ok(Picked {
        vendor: vertex_speaker(settings, model, url, google),
        base,
        headers,
        key: None,
    })
}

/// `llm.project`, else `GOOGLE_CLOUD_PROJECT`.
fn vertex_project(settings: &LlmSettings) -> Result<String, LlmError> {
    let extra = &settings.endpoint;
    extra
        .project
        .clone()
        .filter(|project| !project.trim().is_empty())
        .or_else(|| extra.credentials.plain("GOOGLE_CLOUD_PROJECT").map(str::to_owned))
        .ok_or_else(|| {
            settings_error(
                settings,
                "no project: set llm.project or the environment variable GOOGLE_CLOUD_PROJECT".to_owned(),
            )
        })
}

/// The vendor Vertex serves `model` (trimmed) through at `url`, with a Google token.
fn vertex_speaker(settings: &LlmSettings, model: &str, url: Url, google: TokenSource) -> Box<dyn Vendor> {
    let extra = &settings.endpoint;
    if vertex_speaks_anthropic(model) {
        let mut stream_url = url.clone();
        stream_url.set_path(&url.path().replacen(":rawPredict", ":streamRawPredict", 1));
        Box::new(anthropic::Messages {
            url,
            stream_url: Some(stream_url),
            google: Some(google),
            prompt_caching: extra.prompt_caching,
            temperature: extra.temperature,
        })
    } else {
        Box::new(openai::Chat {
            reader: openai::Reader {
                kind: settings.provider,
            },
            url,
            model_override: Some(if model.contains('/') {
                model.to_owned()
            } else {
                format!("google/{model}")
            }),
            google: Some(google),
            temperature: extra.temperature,
            seed: extra.seed,
            // What Vertex's OpenAI-compatible endpoint reads.
            cap_field: MaxTokensField::MaxTokens,
        })
    }
}

fn settings_error(settings: &LlmSettings, message: String) -> LlmError {
    LlmError::Settings {
        provider: settings.provider,
        message,
    }
}

/// The key, or which variable to set.
fn api_key(settings: &LlmSettings) -> Result<SecretString, LlmError> {
    match &settings.api_key {
        Some(key) if !key.expose_secret().trim().is_empty() => Ok(key.clone()),
        _ => {
            let kind = settings.provider;
            let env = if settings.api_key_env.is_empty() {
                kind.default_api_key_env().to_owned()
            } else {
                settings.api_key_env.clone()
            };
            Err(LlmError::MissingApiKey { provider: kind, env })
        }
    }
}

/// A region must be a name, so it cannot move the host.
fn checked_region(settings: &LlmSettings, region: &str) -> Result<(), LlmError> {
    if region.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        Ok(())
    } else {
        Err(settings_error(
            settings,
            format!("llm.region `{region}` is not a region name (letters, digits and `-`)"),
        ))
    }
}

/// The model, trimmed, as it goes in a URL.
fn checked_model(settings: &LlmSettings) -> Result<&str, LlmError> {
    if settings.model.chars().any(char::is_control) {
        return Err(settings_error(
            settings,
            "llm.model contains control characters".to_owned(),
        ));
    }
    Ok(settings.model.trim())
}

/// `llm.base-url`, else the provider's default, parsed and checked.
fn base_url(
    settings: &LlmSettings,
    default: impl FnOnce(ProviderKind) -> Result<String, LlmError>,
) -> Result<Url, LlmError> {
    let base = match &settings.base_url {
        Some(base) => base.clone(),
        None => default(settings.provider)?,
    };
    let base_url = Url::parse(base.trim()).map_err(|error| {
        settings_error(
            settings,
            format!("llm.base-url `{}` is not a URL: {error}", shown_url_text(&base)),
        )
    })?;
    if !matches!(base_url.scheme(), "http" | "https") || base_url.host_str().is_none() {
        return Err(settings_error(
            settings,
            format!(
                "llm.base-url `{}` must be an http or https URL with a host",
                shown_url(&base_url)
            ),
        ));
    }
    Ok(base_url)
}

/// The base URL's path without its trailing `/`, where a vendor's path goes.
fn root(base: &Url) -> String {
    base.path().trim_end_matches('/').to_owned()
}

/// `base` with `path`.
fn joined(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_path(path);
    url
}

/// The key in header `name` (its value `text` of the trimmed key), marked sensitive.
fn key_header(
    settings: &LlmSettings,
    key: &SecretString,
    name: HeaderName,
    text: impl FnOnce(&str) -> String,
) -> Result<HeaderMap, LlmError> {
    let mut value = HeaderValue::from_str(&text(key.expose_secret().trim())).map_err(|_| {
        settings_error(
            settings,
            format!(
                "the API key in {} contains characters that cannot be sent in an HTTP header",
                settings.api_key_env
            ),
        )
    })?;
    value.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(name, value);
    Ok(headers)
}

/// `llm.extra-headers`, a `${NAME}` value read from the credentials and marked sensitive.
fn extra_headers(settings: &LlmSettings, headers: &mut HeaderMap) -> Result<(), LlmError> {
    let extra = &settings.endpoint;
    for (name, template) in &extra.extra_headers {
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            settings_error(
                settings,
                format!("llm.extra-headers: `{name}` is not an HTTP header name"),
            )
        })?;
        let mut value = match header_env_name(template) {
            Some(env) => {
                let secret = extra.credentials.secret(env).ok_or_else(|| {
                    settings_error(
                        settings,
                        format!(
                            "llm.extra-headers.{name} reads the environment variable {env}, which is not set"
                        ),
                    )
                })?;
                let mut value = HeaderValue::from_str(secret.expose_secret().trim()).map_err(|_| {
                    settings_error(
                        settings,
                        format!(
                            "the value of {env} (llm.extra-headers.{name}) cannot be sent in an HTTP header"
                        ),
                    )
                })?;
                value.set_sensitive(true);
                value
            }
            None => HeaderValue::from_str(template).map_err(|_| {
                settings_error(
                    settings,
                    format!("llm.extra-headers.{name}: the value cannot be sent in an HTTP header"),
                )
            })?,
        };
        if header_env_name(template).is_some() {
            value.set_sensitive(true);
        }
        headers.insert(header, value);
    }
    Ok(())
}

impl Endpoint {
    pub(super) fn new(settings: &LlmSettings) -> Result<Self, LlmError> {
        let picked = vendor(settings)?;
        let mut secrets: Vec<SecretString> =
            settings.endpoint.credentials.secrets.values().cloned().collect();
        secrets.extend(picked.key);
        Ok(Self {
            vendor: picked.vendor,
            shown_base: shown_url(&picked.base),
            headers: picked.headers,
            secrets,
            extra_body: settings.endpoint.extra_body.clone(),
        })
    }

    /// The vendor requests go to.
    pub(super) fn vendor(&self) -> &dyn Vendor {
        self.vendor.as_ref()
    }

    /// The field an OpenAI-compatible server reads the output cap from when
    /// `llm.max-tokens-field` is not set: `max_completion_tokens` for OpenAI's own API and Azure
    /// OpenAI, `max_tokens` for every other endpoint (vLLM, llama.cpp, Ollama, LiteLLM, Vertex's
    /// OpenAI-compatible endpoint), which read it and may ignore the newer name.
    pub(super) fn default_max_tokens_field(&self) -> MaxTokensField {
        self.vendor.cap_field().unwrap_or(MaxTokensField::MaxTokens)
    }

    /// Whether this endpoint's answers can stream (server-sent events; Bedrock's AWS
    /// event-stream frames).
    pub(super) fn streams(&self) -> bool {
        self.vendor.answers().decoder().is_some()
    }

    /// Where a request goes: Vertex streams Claude from `:streamRawPredict`, Bedrock from
    /// `converse-stream`, everything else streams from the same URL.
    pub(super) fn url_for(&self, stream: bool) -> &Url {
        self.vendor.url(stream)
    }

    /// The URL a request (streamed or not) goes to, as shown in messages: scheme, host, port,
    /// path and the query's names (values hidden unless they are an `api-version`); never user
    /// info.
    pub(super) fn shown_url_for(&self, stream: bool) -> String {
        let url = self.url_for(stream);
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

    /// Where an OpenAI-compatible or Anthropic server lists its models (the request URL with
    /// `/models` in place of the chat path), with the headers of every request (the key): what
    /// `doctor` asks without paying for a call. `None` for a URL of another shape.
    pub(super) fn models_probe(&self) -> Option<(Url, HeaderMap)> {
        let url = self.vendor.url(false);
        let path = url.path();
        let models = if let Some(stem) = path.strip_suffix(super::openai::PATH) {
            format!("{stem}/models")
        } else if let Some(stem) = path.strip_suffix(super::anthropic::PATH) {
            format!("{stem}/v1/models")
        } else {
            return None;
        };
        let mut url = url.clone();
        url.set_path(&models);
        url.set_query(None);
        Some((url, self.headers.clone()))
    }

    /// The headers of one attempt with `body` to `url`: static ones plus a fresh signature or
    /// token.
    pub(super) async fn request_headers(
        &self,
        client: &Client,
        url: &Url,
        body: &[u8],
    ) -> Result<HeaderMap, LlmError> {
        let mut headers = self.headers.clone();
        headers.insert(
            bork_ci_core::net::reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        self.vendor.authorize(client, url, &mut headers, body).await?;
        Ok(headers)
    }

    /// The body of a request for `ask`: the vendor's, then `llm.extra-body` (never a reserved
    /// key), then the fields that ask for a stream.
    pub(super) fn request_body(&self, ask: &Ask<'_>, stream: bool) -> Value {
        let mut body = self.vendor.body(ask);
        if let Some(object) = body.as_object_mut() {
            for (key, value) in &self.extra_body {
                if !RESERVED_BODY_KEYS.contains(&key.as_str()) {
                    object.insert(key.clone(), value.clone());
                }
            }
            if stream {
                self.vendor.ask_for_stream(object);
            }
        }
        body
    }

    /// Environment for a process that calls this endpoint on its own (the edit step): the
    /// credentials as they are, except that files (web identity token, external account) are
    /// exchanged here for short-lived credentials the process can use without the file.
    pub(super) async fn handoff_env(&self, client: &Client) -> Result<Vec<(String, SecretString)>, LlmError> {
        self.vendor.handoff_env(client).await
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
        text = self.vendor.scrub(&text);
        for (name, value) in self.url_for(false).query_pairs() {
            if name != "api-version" && value.len() >= 4 {
                text = text.replace(value.as_ref(), "[redacted]");
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::data::{Conversation, StructuredOutput};
    use serde_json::json;

    /// The body of a request with `conversation`, not streamed.
    fn body_of(endpoint: &Endpoint, model: &str, conversation: &Conversation) -> Value {
        let ask = Ask {
            model,
            conversation,
            format: None,
            mode: StructuredOutput::JsonSchema,
            max_output_tokens: 100,
            max_tokens_field: endpoint.default_max_tokens_field(),
        };
        endpoint.request_body(&ask, false)
    }

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
                endpoint.url_for(false).as_str(),
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
        assert_eq!(
            gateway.url_for(false).as_str(),
            "https://gw.example/anthropic/v1/messages"
        );
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
            endpoint.url_for(false).as_str(),
            "https://res.openai.azure.com/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21"
        );
        assert_eq!(endpoint.shown_url_for(true), endpoint.url_for(false).as_str());
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
            endpoint.url_for(false).as_str(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
        );
        assert_eq!(
            endpoint.url_for(true).as_str(),
            "https://bedrock-runtime.eu-west-1.amazonaws.com/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
        );
        let ask = Ask {
            model: "m",
            conversation: &Conversation::default(),
            format: None,
            mode: StructuredOutput::JsonSchema,
            max_output_tokens: 100,
            max_tokens_field: endpoint.default_max_tokens_field(),
        };
        assert!(endpoint.request_body(&ask, true).get("stream").is_none());
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
            endpoint.url_for(false).as_str(),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict"
        );
        assert_eq!(
            endpoint.url_for(true).as_str(),
            "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict"
        );
        let body = body_of(&endpoint, "claude-sonnet-4@20250514", &Conversation::default());
        assert!(body.get("model").is_none());
        assert_eq!(body["anthropic_version"], anthropic::VERTEX_ANTHROPIC_VERSION);

        let mut gemini = claude.clone();
        gemini.model = "gemini-2.0-flash".into();
        gemini.endpoint.region = Some("global".into());
        let endpoint = Endpoint::new(&gemini).expect("builds");
        assert_eq!(
            endpoint.url_for(false).as_str(),
            "https://aiplatform.googleapis.com/v1/projects/proj/locations/global/endpoints/openapi/chat/completions"
        );
        let body = body_of(&endpoint, "gemini-2.0-flash", &Conversation::default());
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
        let conversation = Conversation {
            prefix: "x".into(),
            ..Conversation::default()
        };
        let body = body_of(&endpoint, "m", &conversation);
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
