//! The REST client: one octocrab instance pointed at `GITHUB_API_URL`, with bork-ci's own retry
//! policy on top (5xx, secondary rate limits with `retry-after`, primary rate limits until
//! `x-ratelimit-reset`). It speaks raw JSON so that every call sees status and headers; it knows
//! nothing about pull requests or approvals.
//!
//! octocrab is built without its `retry` and `follow-redirect` features, so no request is sent
//! twice behind our back and no redirect carries the `Authorization` header to another host.

use std::time::Duration;

use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use serde_json::Value;

use super::GithubError;

/// How hard the client tries before giving up.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    /// First backoff after a 5xx or a transport error; doubled on each retry.
    pub base: Duration,
    /// Longest single wait for `retry-after` or `x-ratelimit-reset`; a longer wait is an error.
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_secs(1),
            max_wait: Duration::from_secs(15 * 60),
        }
    }
}

/// One answer: status, the `Link` header (for pagination) and the JSON body (`Null` when empty).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub link: Option<String>,
    pub body: Value,
}

impl Answer {
    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// GitHub's `message` field, if any.
    pub fn message(&self) -> String {
        let mut message = self
            .body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(errors) = self.body.get("errors").and_then(Value::as_array) {
            for error in errors {
                let text = error
                    .as_str()
                    .map(str::to_owned)
                    .or_else(|| error.get("message").and_then(Value::as_str).map(str::to_owned))
                    .or_else(|| error.get("code").and_then(Value::as_str).map(str::to_owned));
                if let Some(text) = text {
                    message.push_str(": ");
                    message.push_str(&text);
                }
            }
        }
        message
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Post,
    Patch,
    Put,
    Delete,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Patch => "PATCH",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
        }
    }
}

/// The REST client. Cloning is cheap.
#[derive(Clone)]
pub struct Client {
    octocrab: Octocrab,
    policy: RetryPolicy,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds a client for `api_url` (api.github.com layout or GHES `…/api/v3`).
    pub fn new(api_url: &str, token: &SecretString, policy: RetryPolicy) -> Result<Self, GithubError> {
        let http = crate::net::client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .build()
            .map_err(|error| GithubError::Config(format!("building the GitHub client: {error}")))?;
        let octocrab = Octocrab::builder()
            .base_uri(api_url.trim_end_matches('/'))
            .map_err(|_| GithubError::Config(format!("invalid GitHub API URL `{api_url}`")))?
            .personal_token(token.expose_secret().to_owned())
            .build_with_reqwest(http)
            .map_err(|error| GithubError::Config(format!("building the GitHub client: {error}")))?;
        Ok(Self { octocrab, policy })
    }

    /// `GET route`; `route` may carry a query string.
    pub async fn get(&self, route: &str) -> Result<Answer, GithubError> {
        self.send(Method::Get, route, None).await
    }

    /// `POST route` with a JSON body.
    pub async fn post(&self, route: &str, body: &Value) -> Result<Answer, GithubError> {
        self.send(Method::Post, route, Some(body)).await
    }

    /// `PATCH route` with a JSON body.
    pub async fn patch(&self, route: &str, body: &Value) -> Result<Answer, GithubError> {
        self.send(Method::Patch, route, Some(body)).await
    }

    /// `PUT route` with a JSON body.
    pub async fn put(&self, route: &str, body: &Value) -> Result<Answer, GithubError> {
        self.send(Method::Put, route, Some(body)).await
    }

    /// `DELETE route`.
    pub async fn delete(&self, route: &str) -> Result<Answer, GithubError> {
        self.send(Method::Delete, route, None).await
    }

    /// Every page of a list endpoint, following `rel="next"` links (100 a page).
    pub async fn get_all(&self, route: &str) -> Result<Vec<Value>, GithubError> {
        let separator = if route.contains('?') { '&' } else { '?' };
        let mut next = Some(format!("{route}{separator}per_page=100"));
        let mut items = Vec::new();
        let mut pages = 0;
        while let Some(current) = next.take() {
            pages += 1;
            if pages > 1000 {
                return Err(GithubError::Protocol(format!("too many pages at {route}")));
            }
            let answer = self.get(&current).await?;
            let answer = expect_success(answer, route)?;
            match answer.body {
                Value::Array(page) => items.extend(page),
                _ => return Err(GithubError::Protocol(format!("{route} is not a list"))),
            }
            next = answer
                .link
                .as_deref()
                .and_then(next_link)
                .map(|url| relative(&url));
        }
        Ok(items)
    }

    async fn send(&self, method: Method, route: &str, body: Option<&Value>) -> Result<Answer, GithubError> {
        // Pull-request bodies, comments and commits never carry a registered secret.
        let redacted = body.map(|body| {
            let text = body.to_string();
            match crate::secrets::redact(&text) {
                std::borrow::Cow::Borrowed(_) => body.clone(),
                std::borrow::Cow::Owned(text) => serde_json::from_str(&text).unwrap_or_else(|_| body.clone()),
            }
        });
        let body = redacted.as_ref();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = self.send_once(method, route, body).await;
            let wait = match &outcome {
                Ok(answer) => match retry_wait(answer, &self.policy, attempt)? {
                    Some(wait) => wait,
                    None => return outcome,
                },
                Err(GithubError::Transport(_)) => backoff(&self.policy, attempt),
                Err(_) => return outcome,
            };
            if attempt >= self.policy.max_attempts {
                return match outcome {
                    Ok(answer) => Err(GithubError::Api {
                        method: method.as_str(),
                        route: strip_query(route),
                        status: answer.status,
                        message: answer.message(),
                    }),
                    Err(error) => Err(error),
                };
            }
            tracing::warn!(
                method = method.as_str(),
                route = %strip_query(route),
                attempt,
                wait_ms = wait.as_millis() as u64,
                "retrying GitHub request"
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn send_once(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
    ) -> Result<Answer, GithubError> {
        let route = if route.starts_with('/') {
            route.to_owned()
        } else {
            format!("/{route}")
        };
        let response = match method {
            Method::Get => self.octocrab._get(route.as_str()).await,
            Method::Post => self.octocrab._post(route.as_str(), body).await,
            Method::Patch => self.octocrab._patch(route.as_str(), body).await,
            Method::Put => self.octocrab._put(route.as_str(), body).await,
            Method::Delete => self.octocrab._delete(route.as_str(), body).await,
        }
        .map_err(|error| GithubError::Transport(redact_error(&error)))?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        };
        let link = header("link");
        let retry_after = header("retry-after");
        let remaining = header("x-ratelimit-remaining");
        let reset = header("x-ratelimit-reset");
        let text = self
            .octocrab
            .body_to_string(response)
            .await
            .map_err(|error| GithubError::Transport(redact_error(&error)))?;
        let mut body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        // The rate-limit headers travel with the body so that `retry_wait` stays a pure function.
        if !(200..300).contains(&status) {
            if let Value::Object(map) = &mut body {
                map.insert("__retry_after".into(), retry_after.into());
                map.insert("__remaining".into(), remaining.into());
                map.insert("__reset".into(), reset.into());
            } else {
                body = serde_json::json!({
                    "message": body,
                    "__retry_after": retry_after,
                    "__remaining": remaining,
                    "__reset": reset,
                });
            }
        }
        Ok(Answer { status, link, body })
    }
}

/// Turns a non-2xx answer into [`GithubError::Api`].
pub fn expect_success(answer: Answer, route: &str) -> Result<Answer, GithubError> {
    if answer.is_success() {
        Ok(answer)
    } else {
        Err(GithubError::Api {
            method: "",
            route: strip_query(route),
            status: answer.status,
            message: answer.message(),
        })
    }
}

fn strip_query(route: &str) -> String {
    route.split('?').next().unwrap_or(route).to_owned()
}

/// How long to wait before retrying this answer, `None` when it is final.
pub(crate) fn retry_wait(
    answer: &Answer,
    policy: &RetryPolicy,
    attempt: u32,
) -> Result<Option<Duration>, GithubError> {
    let field = |name: &str| answer.body.get(name).and_then(Value::as_str);
    let status = answer.status;
    if status == 403 || status == 429 {
        if let Some(seconds) = field("__retry_after").and_then(|s| s.trim().parse::<u64>().ok()) {
            let wait = Duration::from_secs(seconds);
            if wait > policy.max_wait {
                return Err(GithubError::RateLimited { wait });
            }
            return Ok(Some(wait));
        }
        if field("__remaining") == Some("0") {
            let reset = field("__reset").and_then(|s| s.trim().parse::<i64>().ok());
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let seconds = reset.map(|reset| (reset - now).max(0) as u64 + 1).unwrap_or(60);
            let wait = Duration::from_secs(seconds);
            if wait > policy.max_wait {
                return Err(GithubError::RateLimited { wait });
            }
            return Ok(Some(wait));
        }
        let message = answer.message().to_ascii_lowercase();
        if message.contains("secondary rate limit") || status == 429 {
            return Ok(Some(
                backoff(policy, attempt).max(Duration::from_secs(60).min(policy.max_wait)),
            ));
        }
        return Ok(None);
    }
    if matches!(status, 500 | 502 | 503 | 504) {
        return Ok(Some(backoff(policy, attempt)));
    }
    Ok(None)
}

fn backoff(policy: &RetryPolicy, attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(10);
    policy.base.saturating_mul(factor).min(policy.max_wait)
}

/// The URL of `rel="next"` in a `Link` header.
fn next_link(link: &str) -> Option<String> {
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        if params.contains("rel=\"next\"") {
            Some(
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_owned(),
            )
        } else {
            None
        }
    })
}

/// Path and query of an absolute URL, so octocrab's base URI applies (GHES keeps its prefix).
fn relative(url: &str) -> String {
    let without_scheme = url.split_once("://").map(|(_, rest)| rest).unwrap_or(url);
    let path = without_scheme
        .find('/')
        .map(|index| &without_scheme[index..])
        .unwrap_or("/");
    match path.strip_prefix("/api/v3") {
        Some(rest) if rest.starts_with('/') => rest.to_owned(),
        _ => path.to_owned(),
    }
}

/// An error's text with anything that looks like credentials in a URL removed.
fn redact_error(error: &octocrab::Error) -> String {
    redact_urls(&error.to_string())
}

pub(crate) fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for word in text.split_inclusive(char::is_whitespace) {
        match word.find("://") {
            Some(index) => {
                let (scheme, rest) = word.split_at(index + 3);
                match rest.find('@') {
                    Some(at) if !rest[..at].contains('/') => {
                        out.push_str(scheme);
                        out.push_str("***@");
                        out.push_str(&rest[at + 1..]);
                    }
                    _ => out.push_str(word),
                }
            }
            None => out.push_str(word),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Answer {
        Answer {
            status,
            link: None,
            body,
        }
    }

    #[test]
    fn retries_5xx_with_backoff_and_not_4xx() {
        let policy = RetryPolicy {
            base: Duration::from_millis(10),
            ..RetryPolicy::default()
        };
        let wait = retry_wait(&answer(502, serde_json::json!({})), &policy, 2).expect("ok");
        assert_eq!(wait, Some(Duration::from_millis(20)));
        let none = retry_wait(&answer(404, serde_json::json!({})), &policy, 1).expect("ok");
        assert_eq!(none, None);
        let forbidden = serde_json::json!({"message": "Resource not accessible by integration"});
        assert_eq!(retry_wait(&answer(403, forbidden), &policy, 1).expect("ok"), None);
    }

    #[test]
    fn honours_retry_after_and_reset() {
        let policy = RetryPolicy::default();
        let secondary = serde_json::json!({"message": "secondary", "__retry_after": "3"});
        assert_eq!(
            retry_wait(&answer(403, secondary), &policy, 1).expect("ok"),
            Some(Duration::from_secs(3))
        );
        let reset = time::OffsetDateTime::now_utc().unix_timestamp() + 5;
        let primary = serde_json::json!({"__remaining": "0", "__reset": reset.to_string()});
        let wait = retry_wait(&answer(403, primary), &policy, 1)
            .expect("ok")
            .expect("some");
        assert!(
            wait >= Duration::from_secs(4) && wait <= Duration::from_secs(7),
            "{wait:?}"
        );
        let far = serde_json::json!({"__retry_after": "999999"});
        assert!(matches!(
            retry_wait(&answer(429, far), &policy, 1),
            Err(GithubError::RateLimited { .. })
        ));
    }

    #[test]
    fn follows_next_links_relative_to_the_base() {
        let link = r#"<http://127.0.0.1:9/api/v3/repos/a/b/pulls/1/reviews?per_page=100&page=2>; rel="next", <http://x/y?page=9>; rel="last""#;
        let next = next_link(link).expect("next");
        assert_eq!(relative(&next), "/repos/a/b/pulls/1/reviews?per_page=100&page=2");
        assert_eq!(next_link(r#"<http://x/y?page=1>; rel="prev""#), None);
    }

    #[test]
    fn redacts_credentials_in_urls() {
        assert_eq!(
            redact_urls("error sending to https://x-access-token:s3cr3t@github.com/a/b.git now"),
            "error sending to https://***@github.com/a/b.git now"
        );
    }
}
