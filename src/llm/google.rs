//! Google access tokens for Vertex AI.
//!
//! In order: `GOOGLE_OAUTH_ACCESS_TOKEN` (used as is), else the credential file
//! `GOOGLE_APPLICATION_CREDENTIALS` of type `external_account` (workload identity federation, as
//! written by `google-github-actions/auth` or `gcloud iam workload-identity-pools
//! create-cred-config`): the subject token is read from `credential_source.file`, or fetched
//! from `credential_source.url` with its `headers` (what `google-github-actions/auth` writes for
//! GitHub's OIDC token), as text or JSON with `credential_source.format.subject_token_field_name`,
//! exchanged at the file's `token_url`
//! (Google STS, RFC 8693 token exchange), and, when the file names a
//! `service_account_impersonation_url`, exchanged once more there for the service account's
//! token. Tokens are cached until shortly before they expire. Not supported: service-account
//! key files (`type: service_account`, which need a signed JWT), `authorized_user` files,
//! `credential_source.executable`, and the metadata server.

use std::time::{Duration, Instant};

use reqwest::{Client, Url};
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::endpoint::Credentials;
use super::{LlmError, ProviderKind};

const PROVIDER: ProviderKind = ProviderKind::Vertex;
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";

#[derive(Debug, Deserialize)]
struct ExternalAccount {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    audience: String,
    #[serde(default)]
    subject_token_type: String,
    #[serde(default)]
    token_url: String,
    #[serde(default)]
    service_account_impersonation_url: Option<String>,
    #[serde(default)]
    credential_source: Option<CredentialSource>,
}

#[derive(Debug, Deserialize)]
struct CredentialSource {
    #[serde(default)]
    file: Option<String>,
    /// A URL the subject token is fetched from (GET), with these headers.
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    format: Option<SourceFormat>,
}

#[derive(Debug, Deserialize)]
struct SourceFormat {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    subject_token_field_name: Option<String>,
}

#[derive(Debug)]
enum Source {
    Fixed(SecretString),
    External {
        path: String,
        account: Box<ExternalAccount>,
    },
}

/// Where Vertex's bearer token comes from.
#[derive(Debug)]
pub(super) struct TokenSource {
    source: Source,
    cached: Mutex<Option<(SecretString, Instant)>>,
    fetched: std::sync::Mutex<Vec<SecretString>>,
}

fn settings_error(message: String) -> LlmError {
    LlmError::Settings {
        provider: PROVIDER,
        message,
    }
}

impl TokenSource {
    pub(super) fn new(credentials: &Credentials) -> Result<Self, LlmError> {
        let fixed = credentials
            .secrets
            .get("GOOGLE_OAUTH_ACCESS_TOKEN")
            .filter(|token| !token.expose_secret().trim().is_empty());
        let source = match (fixed, credentials.plain.get("GOOGLE_APPLICATION_CREDENTIALS")) {
            (Some(token), _) => Source::Fixed(token.clone()),
            (None, Some(path)) if !path.trim().is_empty() => {
                let text = std::fs::read_to_string(path).map_err(|error| {
                    settings_error(format!(
                        "reading {path} (GOOGLE_APPLICATION_CREDENTIALS): {error}"
                    ))
                })?;
                let account: ExternalAccount = serde_json::from_str(&text).map_err(|error| {
                    settings_error(format!(
                        "{path} (GOOGLE_APPLICATION_CREDENTIALS) is not a credential file: {error}"
                    ))
                })?;
                if account.kind != "external_account" {
                    return Err(settings_error(format!(
                        "{path} (GOOGLE_APPLICATION_CREDENTIALS) is of type `{}`; only `external_account` (workload identity federation) is supported: set GOOGLE_OAUTH_ACCESS_TOKEN for other kinds (e.g. `gcloud auth print-access-token`)",
                        account.kind
                    )));
                }
                if account.token_url.trim().is_empty()
                    || account
                        .credential_source
                        .as_ref()
                        .is_none_or(|source| source.file.is_none() && source.url.is_none())
                {
                    return Err(settings_error(format!(
                        "{path} (GOOGLE_APPLICATION_CREDENTIALS) needs `token_url` and `credential_source.file` or `credential_source.url`; `executable` sources are not supported"
                    )));
                }
                Source::External {
                    path: path.clone(),
                    account: Box::new(account),
                }
            }
            _ => {
                return Err(settings_error(
                    "no Google credentials: set GOOGLE_OAUTH_ACCESS_TOKEN, or GOOGLE_APPLICATION_CREDENTIALS to an external_account (workload identity) file".to_owned(),
                ));
            }
        };
        Ok(Self {
            source,
            cached: Mutex::new(None),
            fetched: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The bearer token for the next request.
    pub(super) async fn token(&self, client: &Client) -> Result<SecretString, LlmError> {
        let (path, account) = match &self.source {
            Source::Fixed(token) => return Ok(token.clone()),
            Source::External { path, account } => (path, account),
        };
        let mut cached = self.cached.lock().await;
        if let Some((token, until)) = cached.as_ref()
            && Instant::now() < *until
        {
            return Ok(token.clone());
        }
        let subject = read_subject_token(client, path, account).await?;
        let mut scrub = vec![subject.clone()];
        let result = exchange(client, account, &subject, &mut scrub).await;
        if let Ok(mut fetched) = self.fetched.lock() {
            fetched.extend(scrub);
        }
        let (token, lifetime) = result?;
        *cached = Some((token.clone(), super::endpoint::refresh_at(lifetime)));
        Ok(token)
    }

    pub(super) fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        if let Ok(fetched) = self.fetched.lock() {
            for secret in fetched.iter() {
                let value = secret.expose_secret().trim();
                if value.len() >= 4 {
                    text = text.replace(value, "[redacted]");
                }
            }
        }
        text
    }
}

/// Largest subject token answer read from a `credential_source.url`.
const MAX_SUBJECT_BYTES: usize = 64 * 1024;

async fn read_subject_token(
    client: &Client,
    path: &str,
    account: &ExternalAccount,
) -> Result<SecretString, LlmError> {
    let source = account.credential_source.as_ref();
    let (text, from) = match source.and_then(|source| source.url.as_deref()) {
        Some(url) => {
            let headers = source.map(|source| &source.headers);
            let shown = super::endpoint::shown_url_text(url);
            let parsed = Url::parse(url).map_err(|error| {
                settings_error(format!("credential_source.url of {path} is not a URL: {error}"))
            })?;
            let mut request = client.get(parsed);
            for (name, value) in headers.into_iter().flatten() {
                request = request.header(name.as_str(), value.as_str());
            }
            let response = request.send().await.map_err(|error| {
                settings_error(format!(
                    "fetching the subject token from {shown} (credential_source.url of {path}): {}",
                    error.without_url()
                ))
            })?;
            let status = response.status();
            let bytes = response.bytes().await.map_err(|error| {
                settings_error(format!(
                    "reading the subject token from {shown}: {}",
                    error.without_url()
                ))
            })?;
            if !status.is_success() {
                return Err(settings_error(format!(
                    "fetching the subject token from {shown} (credential_source.url of {path}) answered HTTP {}",
                    status.as_u16()
                )));
            }
            if bytes.len() > MAX_SUBJECT_BYTES {
                return Err(settings_error(format!(
                    "the subject token from {shown} is larger than {MAX_SUBJECT_BYTES} bytes"
                )));
            }
            (String::from_utf8_lossy(&bytes).into_owned(), shown)
        }
        None => {
            let file = source
                .and_then(|source| source.file.as_deref())
                .unwrap_or_default();
            let text = crate::safe_fs::read_regular(std::path::Path::new(file), MAX_SUBJECT_BYTES as u64)
                .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
                .map_err(|error| {
                    settings_error(format!(
                        "reading the subject token file {file} (credential_source.file of {path}): {error}"
                    ))
                })?;
            (text, format!("the subject token file {file}"))
        }
    };
    let token = match source.and_then(|source| source.format.as_ref()) {
        Some(format) if format.kind == "json" => {
            let field = format.subject_token_field_name.as_deref().unwrap_or_default();
            serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|value| value.get(field)?.as_str().map(str::to_owned))
                .ok_or_else(|| {
                    settings_error(format!(
                        "{from} has no string field `{field}` (credential_source.format of {path})"
                    ))
                })?
        }
        _ => text.trim().to_owned(),
    };
    if token.is_empty() {
        return Err(settings_error(format!("{from} gave an empty subject token")));
    }
    Ok(SecretString::from(token))
}

#[derive(Deserialize)]
struct StsAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImpersonationAnswer {
    access_token: String,
}

async fn post(
    client: &Client,
    url: &str,
    content_type: &str,
    bearer: Option<&SecretString>,
    body: String,
    scrub: &[SecretString],
) -> Result<Vec<u8>, LlmError> {
    let parsed = Url::parse(url)
        .map_err(|error| settings_error(format!("`{url}` in the credential file is not a URL: {error}")))?;
    let shown = super::endpoint::shown_url(&parsed);
    let clean = |text: String| {
        let mut text = text;
        for secret in scrub {
            let value = secret.expose_secret().trim();
            if value.len() >= 4 {
                text = text.replace(value, "[redacted]");
            }
        }
        text
    };
    let mut request = client
        .post(parsed)
        .header(reqwest::header::CONTENT_TYPE, content_type)
        .body(body);
    if let Some(token) = bearer {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.expose_secret()))
            .map_err(|_| settings_error("the STS token cannot be sent in an HTTP header".to_owned()))?;
        value.set_sensitive(true);
        request = request.header(reqwest::header::AUTHORIZATION, value);
    }
    let failed = |message: String| LlmError::Transport {
        provider: PROVIDER,
        model: "(token exchange)".to_owned(),
        attempts: 1,
        message: clean(message),
    };
    let response = request
        .send()
        .await
        .map_err(|error| failed(format!("POST {shown}: {}", error.without_url())))?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|error| failed(format!("POST {shown}: {}", error.without_url())))?;
    if !status.is_success() {
        let value: Option<Value> = serde_json::from_slice(&bytes).ok();
        let message = value
            .as_ref()
            .and_then(|value| {
                let error = value.get("error")?;
                match error.as_str() {
                    Some(code) => Some(format!(
                        "{code}: {}",
                        value
                            .get("error_description")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                    )),
                    None => error.get("message").and_then(Value::as_str).map(str::to_owned),
                }
            })
            .unwrap_or_else(|| super::wire::error_excerpt(&bytes));
        return Err(LlmError::Status {
            provider: PROVIDER,
            model: "(token exchange)".to_owned(),
            status: status.as_u16(),
            attempts: 1,
            message: clean(format!("POST {shown}: {message}")),
        });
    }
    Ok(bytes.to_vec())
}

async fn exchange(
    client: &Client,
    account: &ExternalAccount,
    subject: &SecretString,
    scrub: &mut Vec<SecretString>,
) -> Result<(SecretString, Duration), LlmError> {
    let body = super::endpoint::form(&[
        ("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange"),
        ("audience", &account.audience),
        ("scope", SCOPE),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("subject_token_type", &account.subject_token_type),
        ("subject_token", subject.expose_secret()),
    ]);
    let bytes = post(
        client,
        &account.token_url,
        "application/x-www-form-urlencoded",
        None,
        body,
        scrub,
    )
    .await?;
    let answer: StsAnswer = serde_json::from_slice(&bytes).map_err(|error| LlmError::InvalidResponse {
        provider: PROVIDER,
        model: "(token exchange)".to_owned(),
        message: format!("the STS answer has no access_token: {error}"),
    })?;
    let sts_token = SecretString::from(answer.access_token);
    scrub.push(sts_token.clone());
    let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(3600));
    let Some(url) = account
        .service_account_impersonation_url
        .as_deref()
        .filter(|url| !url.trim().is_empty())
    else {
        return Ok((sts_token, lifetime));
    };
    let body = json!({"scope": [SCOPE], "lifetime": "3600s"}).to_string();
    let bytes = post(client, url, "application/json", Some(&sts_token), body, scrub).await?;
    let answer: ImpersonationAnswer =
        serde_json::from_slice(&bytes).map_err(|error| LlmError::InvalidResponse {
            provider: PROVIDER,
            model: "(token exchange)".to_owned(),
            message: format!("the impersonation answer has no accessToken: {error}"),
        })?;
    let token = SecretString::from(answer.access_token);
    scrub.push(token.clone());
    Ok((token, lifetime.min(Duration::from_secs(3600))))
}
