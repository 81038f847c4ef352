//! Google access tokens for Vertex AI.
//!
//! In order: `GOOGLE_OAUTH_ACCESS_TOKEN` (used as is), else the credential file
//! `GOOGLE_APPLICATION_CREDENTIALS`, read through `safe_fs` and handed to Google's own
//! `google-cloud-auth`: `external_account` (workload identity federation as written by
//! `google-github-actions/auth` or `gcloud iam workload-identity-pools create-cred-config`, with a
//! `credential_source` that is a `file`, a `url` with `headers`, or an `executable`, which Google's
//! rules run only when `GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES=1`), `service_account` keys,
//! `authorized_user` (`gcloud auth application-default login`), `impersonated_service_account`
//! and `external_account_authorized_user`. The crate caches and refreshes the token; a subject
//! token file is checked to be a small regular file before every refresh (a FIFO never blocks).

use std::path::PathBuf;
use std::time::Duration;

use google_cloud_auth::credentials::{
    AccessTokenCredentials, external_account, external_account_authorized_user, impersonated,
    service_account, user_account,
};
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use bork_ci_core::net::reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};

use super::data::{Credentials, LlmError, ProviderKind, error_chain};

const PROVIDER: ProviderKind = ProviderKind::Vertex;
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Largest credential or subject token file read.
const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Longest a token fetch (exchange, impersonation, executable) may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug)]
enum Source {
    Fixed(SecretString),
    File {
        /// `GOOGLE_APPLICATION_CREDENTIALS`, for messages.
        path: String,
        /// `credential_source.file`, checked before each refresh.
        subject_file: Option<PathBuf>,
        credentials: AccessTokenCredentials,
    },
}

/// Where Vertex's bearer token comes from.
#[derive(Debug)]
pub(super) struct TokenSource {
    source: Source,
    fetched: std::sync::Mutex<Vec<SecretString>>,
}

fn settings_error(message: String) -> LlmError {
    LlmError::Settings {
        provider: PROVIDER,
        message,
    }
}

fn build(path: &str, json: Value) -> Result<AccessTokenCredentials, LlmError> {
    let scopes = [SCOPE];
    let kind = json
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let built = match kind.as_str() {
        "external_account" => external_account::Builder::new(json)
            .with_scopes(scopes)
            .build_access_token_credentials(),
        "service_account" => service_account::Builder::new(json)
            .with_access_specifier(service_account::AccessSpecifier::from_scopes(scopes))
            .build_access_token_credentials(),
        "authorized_user" => user_account::Builder::new(json)
            .with_scopes(scopes)
            .build_access_token_credentials(),
        "impersonated_service_account" => impersonated::Builder::new(json)
            .with_scopes(scopes)
            .build_access_token_credentials(),
        "external_account_authorized_user" => {
            external_account_authorized_user::Builder::new(json).build_access_token_credentials()
        }
        other => {
            return Err(settings_error(format!(
                "{path} (GOOGLE_APPLICATION_CREDENTIALS) is of type `{}`; supported: external_account, service_account, authorized_user, impersonated_service_account, external_account_authorized_user",
                bork_ci_core::untrusted::excerpt(other, 60)
            )));
        }
    };
    built.map_err(|error| {
        settings_error(format!(
            "{path} (GOOGLE_APPLICATION_CREDENTIALS) is not a usable `{kind}` credential file: {error}"
        ))
    })
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
                let bytes = bork_ci_core::safe_fs::read_regular(std::path::Path::new(path), MAX_FILE_BYTES)
                    .map_err(|error| {
                    settings_error(format!(
                        "reading {path} (GOOGLE_APPLICATION_CREDENTIALS): {error}"
                    ))
                })?;
                let json: Value = serde_json::from_slice(&bytes).map_err(|error| {
                    settings_error(format!(
                        "{path} (GOOGLE_APPLICATION_CREDENTIALS) is not a credential file: {error}"
                    ))
                })?;
                let subject_file = json
                    .pointer("/credential_source/file")
                    .and_then(Value::as_str)
                    .map(PathBuf::from);
                // Checked before the crate sees it: building may start a refresh that reads it.
                if let Some(file) = &subject_file {
                    check_subject_token(path, file)?;
                }
                let credentials = build(path, json)?;
                Source::File {
                    path: path.clone(),
                    subject_file,
                    credentials,
                }
            }
            _ => {
                return Err(settings_error(
                    "no Google credentials: set GOOGLE_OAUTH_ACCESS_TOKEN, or GOOGLE_APPLICATION_CREDENTIALS to a credential file (external_account from workload identity federation, or a service account key)".to_owned(),
                ));
            }
        };
        Ok(Self {
            source,
            fetched: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// The bearer token for the next request.
    pub(super) async fn token(&self) -> Result<SecretString, LlmError> {
        let (path, credentials) = match &self.source {
            Source::Fixed(token) => return Ok(token.clone()),
            Source::File {
                path, credentials, ..
            } => (path, credentials),
        };
        if let Source::File {
            subject_file: Some(file),
            ..
        } = &self.source
        {
            check_subject_token(path, file)?;
        }
        let token = tokio::time::timeout(FETCH_TIMEOUT, credentials.access_token())
            .await
            .map_err(|_| LlmError::Transport {
                provider: PROVIDER,
                model: "(token exchange)".to_owned(),
                attempts: 1,
                message: format!(
                    "no access token for {path} (GOOGLE_APPLICATION_CREDENTIALS) within {}s",
                    FETCH_TIMEOUT.as_secs()
                ),
            })?
            .map_err(|error| LlmError::Transport {
                provider: PROVIDER,
                model: "(token exchange)".to_owned(),
                attempts: 1,
                message: self.scrub(&format!(
                    "getting an access token for {path} (GOOGLE_APPLICATION_CREDENTIALS): {}",
                    error_chain(&error)
                )),
            })?;
        let token = SecretString::from(token.token);
        if let Ok(mut fetched) = self.fetched.lock()
            && !fetched
                .iter()
                .any(|seen| seen.expose_secret() == token.expose_secret())
        {
            fetched.push(token.clone());
        }
        Ok(token)
    }

    /// Adds `Authorization: Bearer` with the token for the next request, marked sensitive.
    pub(super) async fn authorize(&self, headers: &mut HeaderMap) -> Result<(), LlmError> {
        let token = self.token().await?;
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", token.expose_secret().trim())).map_err(|_| {
                settings_error("the Google access token cannot be sent in an HTTP header".to_owned())
            })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
        Ok(())
    }

    /// The token for a separate process, which needs no credential file then.
    pub(super) async fn handoff_env(&self) -> Result<Vec<(String, SecretString)>, LlmError> {
        Ok(vec![(
            "GOOGLE_OAUTH_ACCESS_TOKEN".to_owned(),
            self.token().await?,
        )])
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

/// What each attempt of a vendor that is reached through Vertex or directly adds to its headers:
/// a fresh Google bearer token, or nothing.
pub(super) async fn authorize_with(
    google: Option<&TokenSource>,
    headers: &mut HeaderMap,
) -> Result<(), LlmError> {
    match google {
        Some(google) => google.authorize(headers).await,
        None => Ok(()),
    }
}

/// What a vendor that is reached through Vertex or directly removes from a message: the Google
/// tokens fetched so far, when it has a token source.
pub(super) fn scrub_with(google: Option<&TokenSource>, text: &str) -> String {
    match google {
        Some(google) => google.scrub(text),
        None => text.to_owned(),
    }
}

/// The credentials a separate process gets from a vendor that is reached through Vertex or
/// directly: a fresh Google token, or none.
pub(super) async fn handoff_with(
    google: Option<&TokenSource>,
) -> Result<Vec<(String, SecretString)>, LlmError> {
    match google {
        Some(google) => google.handoff_env().await,
        None => Ok(Vec::new()),
    }
}

/// A subject token file must stay a small regular file: the crate reads it with a plain read.
fn check_subject_token(path: &str, file: &std::path::Path) -> Result<(), LlmError> {
    bork_ci_core::safe_fs::read_regular(file, MAX_FILE_BYTES)
        .map(drop)
        .map_err(|error| {
            settings_error(format!(
                "reading the subject token file {} (credential_source.file of {path}): {error}",
                file.display()
            ))
        })
}
