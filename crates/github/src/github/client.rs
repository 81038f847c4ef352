//! The REST client: one octocrab instance pointed at `GITHUB_API_URL`, with bork-ci's own retry
//! policy on top (5xx, secondary rate limits with `retry-after`, primary rate limits until
//! `x-ratelimit-reset`), run by `backon`: exponential backoff, adjusted to what the server asks.
//! Pagination (`Link: rel="next"`) is [`Client::get_all`]; retries and pagination live here
//! alone. Every call sees status and headers ([`Answer`]); [`Answer::json`] and
//! [`Client::get_all`] read the body into the caller's own `Deserialize` shape. It knows nothing
//! about pull requests or approvals.
//!
//! octocrab is built without its `retry` and `follow-redirect` features, so no request is sent
//! twice behind our back and no redirect carries the `Authorization` header to another host.

use std::time::Duration;

use backon::Retryable;
use octocrab::Octocrab;
use secrecy::{ExposeSecret, SecretString};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::data::{GithubError, RetryPolicy, redact_urls};

/// One answer: status, the `Link` header (for pagination), the rate-limit headers and the JSON
/// body (`Null` when empty).
#[derive(Debug, Clone)]
pub struct Answer {
    /// The request's method (`GET`, `POST`, ...), for the error that names it.
    pub method: &'static str,
    pub status: u16,
    pub link: Option<String>,
    pub rate: RateHeaders,
    pub body: Value,
}

/// The headers GitHub uses to say when to come back.
#[derive(Debug, Clone, Default)]
pub struct RateHeaders {
    pub retry_after: Option<String>,
    pub remaining: Option<String>,
    pub reset: Option<String>,
}

/// What to do after one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The answer stands (success, or an error not worth repeating).
    Done,
    /// Try again after the policy's next backoff.
    Backoff,
    /// Try again after the policy's next backoff, but not sooner than this.
    AtLeast(Duration),
    /// Try again after exactly this long (`retry-after`, `x-ratelimit-reset`).
    After(Duration),
}

/// An attempt worth repeating, and what it got.
struct Again {
    outcome: Result<Answer, GithubError>,
    next: Next,
}

/// How an attempt failed, for `backon`.
enum Failure {
    Final(GithubError),
    Again(Box<Again>),
}

impl Answer {
    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body read as `T`; an answer of another shape is [`GithubError::Protocol`], naming
    /// `route` (without its query).
    pub fn json<T: DeserializeOwned>(&self, route: &str) -> Result<T, GithubError> {
        T::deserialize(&self.body)
            .map_err(|error| GithubError::Protocol(format!("{}: {error}", strip_query(route))))
    }

    /// GitHub's `message` field, if any.
    pub fn message(&self) -> String {
        let mut message = match &self.body {
            // Not JSON (a proxy's HTML page): its beginning is the message.
            Value::String(text) => bork_ci_core::untrusted::head(text.trim(), 300).to_owned(),
            body => body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        };
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
        Self::with_token(api_url, Some(token), policy)
    }

    /// A client that sends `token` when there is one, else asks anonymously (public reads).
    pub fn with_token(
        api_url: &str,
        token: Option<&SecretString>,
        policy: RetryPolicy,
    ) -> Result<Self, GithubError> {
        let http = bork_ci_core::net::client_builder()
            .redirect(bork_ci_core::net::reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .build()
            .map_err(|error| GithubError::Config(format!("building the GitHub client: {error}")))?;
        let builder = Octocrab::builder()
            .base_uri(api_url.trim_end_matches('/'))
            .map_err(|_| GithubError::Config(format!("invalid GitHub API URL `{api_url}`")))?;
        let builder = match token {
            Some(token) => builder.personal_token(token.expose_secret().to_owned()),
            None => builder,
        };
        let octocrab = builder
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

    /// `GET route`, which must succeed, read as `T`.
    pub async fn get_json<T: DeserializeOwned>(&self, route: &str) -> Result<T, GithubError> {
        expect_success(self.get(route).await?, route)?.json(route)
    }

    /// Every page of a list endpoint, following `rel="next"` links (100 a page), each item read
    /// as `T`.
    pub async fn get_all<T: DeserializeOwned>(&self, route: &str) -> Result<Vec<T>, GithubError> {
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
            if !answer.body.is_array() {
                return Err(GithubError::Protocol(format!("{route} is not a list")));
            }
            let page: Vec<T> = answer.json(route)?;
            items.extend(page);
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
            match bork_ci_core::secrets::redact(&text) {
                std::borrow::Cow::Borrowed(_) => body.clone(),
                std::borrow::Cow::Owned(text) => serde_json::from_str(&text).unwrap_or_else(|_| body.clone()),
            }
        });
        let body = redacted.as_ref();
        let attempt = || async {
            let outcome = self.send_once(method, route, body).await;
            let next = match &outcome {
                Ok(answer) => retry_next(answer, &self.policy).map_err(Failure::Final)?,
                Err(GithubError::Transport(_)) => Next::Backoff,
                Err(_) => Next::Done,
            };
            match next {
                Next::Done => outcome.map_err(Failure::Final),
                next => Err(Failure::Again(Box::new(Again { outcome, next }))),
            }
        };
        let backoff = backon::ExponentialBuilder::default()
            .with_min_delay(self.policy.base)
            .with_max_delay(self.policy.max_wait)
            .with_factor(2.0)
            .with_max_times(self.policy.max_attempts.saturating_sub(1) as usize);
        let result = attempt
            .retry(backoff)
            .sleep(tokio::time::sleep)
            .when(|failure| matches!(failure, Failure::Again(_)))
            .adjust(|failure, planned| match (failure, planned) {
                (Failure::Again(again), Some(planned)) => Some(match again.next {
                    Next::After(wait) => wait,
                    Next::AtLeast(floor) => planned.max(floor),
                    Next::Backoff | Next::Done => planned,
                }),
                _ => None,
            })
            .notify(|_, wait| {
                tracing::warn!(
                    method = method.as_str(),
                    route = %strip_query(route),
                    wait_ms = wait.as_millis() as u64,
                    "retrying GitHub request"
                );
            })
            .await;
        match result {
            Ok(answer) => Ok(answer),
            Err(Failure::Final(error)) => Err(error),
            Err(Failure::Again(again)) => match again.outcome {
                Ok(answer) => Err(GithubError::api(
                    method.as_str(),
                    strip_query(route),
                    answer.status,
                    answer.message(),
                )),
                Err(error) => Err(error),
            },
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
        let rate = RateHeaders {
            retry_after: header("retry-after"),
            remaining: header("x-ratelimit-remaining"),
            reset: header("x-ratelimit-reset"),
        };
        let text = self
            .octocrab
            .body_to_string(response)
            .await
            .map_err(|error| GithubError::Transport(redact_error(&error)))?;
        let body = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        Ok(Answer {
            method: method.as_str(),
            status,
            link,
            rate,
            body,
        })
    }
}

/// Turns a non-2xx answer into [`GithubError::Api`].
pub fn expect_success(answer: Answer, route: &str) -> Result<Answer, GithubError> {
    if answer.is_success() {
        Ok(answer)
    } else {
        Err(GithubError::api(
            answer.method,
            strip_query(route),
            answer.status,
            answer.message(),
        ))
    }
}

fn strip_query(route: &str) -> String {
    route.split('?').next().unwrap_or(route).to_owned()
}

/// What to do after this answer: nothing more, or another attempt and when. A server asking
/// for a longer wait than the policy allows is an error.
pub(crate) fn retry_next(answer: &Answer, policy: &RetryPolicy) -> Result<Next, GithubError> {
    let status = answer.status;
    let bounded = |wait: Duration| {
        if wait > policy.max_wait {
            Err(GithubError::RateLimited { wait })
        } else {
            Ok(Next::After(wait))
        }
    };
    if status == 403 || status == 429 {
        let rate = &answer.rate;
        if let Some(seconds) = rate
            .retry_after
            .as_deref()
            .and_then(|s| s.trim().parse::<u64>().ok())
        {
            return bounded(Duration::from_secs(seconds));
        }
        if rate.remaining.as_deref() == Some("0") {
            let reset = rate.reset.as_deref().and_then(|s| s.trim().parse::<i64>().ok());
            let now = time::OffsetDateTime::now_utc().unix_timestamp();
            let seconds = reset.map(|reset| (reset - now).max(0) as u64 + 1).unwrap_or(60);
            return bounded(Duration::from_secs(seconds));
        }
        let message = answer.message().to_ascii_lowercase();
        if message.contains("secondary rate limit") || status == 429 {
            return Ok(Next::AtLeast(Duration::from_secs(60).min(policy.max_wait)));
        }
        return Ok(Next::Done);
    }
    if matches!(status, 500 | 502 | 503 | 504) {
        return Ok(Next::Backoff);
    }
    Ok(Next::Done)
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

/// Percent-encodes one path segment or query value (`bork:needs-human` stays readable).
pub fn encode(segment: &str) -> String {
    bork_ci_core::url_text::encode(segment, bork_ci_core::url_text::Keep::Colon)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value, rate: RateHeaders) -> Answer {
        Answer {
            method: "GET",
            status,
            link: None,
            rate,
            body,
        }
    }

    #[test]
    fn retries_5xx_with_backoff_and_not_4xx() {
        let policy = RetryPolicy::default();
        let none = RateHeaders::default;
        let next = retry_next(&answer(502, serde_json::json!({}), none()), &policy).expect("ok");
        assert_eq!(next, Next::Backoff);
        let next = retry_next(&answer(404, serde_json::json!({}), none()), &policy).expect("ok");
        assert_eq!(next, Next::Done);
        let forbidden = serde_json::json!({"message": "Resource not accessible by integration"});
        assert_eq!(
            retry_next(&answer(403, forbidden, none()), &policy).expect("ok"),
            Next::Done
        );
        let secondary = serde_json::json!({"message": "You have exceeded a secondary rate limit"});
        assert_eq!(
            retry_next(&answer(403, secondary, none()), &policy).expect("ok"),
            Next::AtLeast(Duration::from_secs(60))
        );
    }

    #[test]
    fn honours_retry_after_and_reset() {
        let policy = RetryPolicy::default();
        let empty = serde_json::json!({});
        let secondary = RateHeaders {
            retry_after: Some("3".into()),
            ..RateHeaders::default()
        };
        assert_eq!(
            retry_next(&answer(403, empty.clone(), secondary), &policy).expect("ok"),
            Next::After(Duration::from_secs(3))
        );
        let reset = time::OffsetDateTime::now_utc().unix_timestamp() + 5;
        let primary = RateHeaders {
            remaining: Some("0".into()),
            reset: Some(reset.to_string()),
            ..RateHeaders::default()
        };
        let Next::After(wait) = retry_next(&answer(403, empty.clone(), primary), &policy).expect("ok") else {
            panic!("a wait until the reset");
        };
        assert!(
            wait >= Duration::from_secs(4) && wait <= Duration::from_secs(7),
            "{wait:?}"
        );
        let far = RateHeaders {
            retry_after: Some("999999".into()),
            ..RateHeaders::default()
        };
        assert!(matches!(
            retry_next(&answer(429, empty, far), &policy),
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
    fn encodes_path_segments() {
        assert_eq!(encode("bork:needs-human"), "bork:needs-human");
        assert_eq!(encode("needs human/now"), "needs%20human%2Fnow");
    }

    #[test]
    fn reads_answers_into_the_callers_shape() {
        #[derive(Debug, serde::Deserialize, PartialEq)]
        struct Pull {
            number: u64,
        }
        let good = answer(
            200,
            serde_json::json!({"number": 7, "other": true}),
            RateHeaders::default(),
        );
        assert_eq!(good.json::<Pull>("/x?page=2").expect("ok"), Pull { number: 7 });
        let bad = answer(
            200,
            serde_json::json!({"number": "seven"}),
            RateHeaders::default(),
        );
        let error = bad
            .json::<Pull>("/x?page=2")
            .expect_err("a string is not a number");
        assert!(
            matches!(&error, GithubError::Protocol(text) if text.starts_with("/x: ")),
            "{error}"
        );
    }
}
