//! When to try a request again and how long to wait first.
//!
//! Owns the retry decision for a status, exponential backoff with full jitter, and reading a
//! server's `retry-after` (seconds or an HTTP date) or `retry-after-ms`. It does not send anything
//! (`wire` loops over attempts) and knows nothing about a run's overall deadline (`reconcile`).

use std::time::{Duration, SystemTime};

use bork_ci_core::net::reqwest::header::HeaderMap;

/// Retry timing. The number of retries comes from `LlmSettings::max_retries`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first retry waits up to this long; each later one doubles the ceiling.
    pub base: Duration,
    /// Ceiling of a computed backoff.
    pub max_backoff: Duration,
    /// Longest `retry-after` honoured; a server asking for more ends the retries at once, since
    /// sleeping through it in CI helps nobody.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            base: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): uniform in `[0, min(max, base * 2^(retry-1))]`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponent = retry.saturating_sub(1).min(31);
        let ceiling = self.base.saturating_mul(1u32 << exponent).min(self.max_backoff);
        let ceiling_micros = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::random_range(0..=ceiling_micros))
    }
}

/// Statuses worth another attempt: 429, every 5xx (529 "overloaded" included).
pub fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// The delay a response asks for: `retry-after-ms`, else `retry-after` as seconds or as an HTTP
/// date (relative to `now`; a date in the past means no wait). `None` when absent or unreadable.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(millis) = headers
        .get("retry-after-ms")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse::<f64>().ok())
        .filter(|millis| millis.is_finite() && *millis >= 0.0)
    {
        return Some(Duration::from_secs_f64(millis / 1000.0));
    }
    let text = headers.get("retry-after")?.to_str().ok()?.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    if let Ok(seconds) = text.parse::<f64>()
        && seconds.is_finite()
        && seconds >= 0.0
    {
        return Some(Duration::from_secs_f64(seconds));
    }
    let when = httpdate::parse_http_date(text).ok()?;
    Some(when.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bork_ci_core::net::reqwest::header::HeaderValue;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_str(value).expect("header value"));
        map
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date");
        assert_eq!(
            retry_after(&headers("retry-after", "2"), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT"), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(&headers("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&headers("retry-after-ms", "250"), now),
            Some(Duration::from_millis(250))
        );
        assert_eq!(retry_after(&headers("retry-after", "soon"), now), None);
        assert_eq!(retry_after(&headers("retry-after", "-3"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn backoff_stays_under_its_exponential_ceiling() {
        let policy = RetryPolicy {
            base: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            max_retry_after: Duration::from_secs(1),
        };
        for _ in 0..200 {
            assert!(policy.backoff(1) <= Duration::from_millis(100));
            assert!(policy.backoff(2) <= Duration::from_millis(200));
            assert!(policy.backoff(3) <= Duration::from_millis(350));
            assert!(policy.backoff(40) <= Duration::from_millis(350));
        }
        // Full jitter: the waits are spread, not all at the ceiling.
        let waits: std::collections::BTreeSet<_> = (0..50).map(|_| policy.backoff(3)).collect();
        assert!(waits.len() > 10);
    }

    #[test]
    fn retryable_statuses() {
        for status in [429, 500, 502, 503, 504, 529] {
            assert!(is_retryable_status(status), "{status}");
        }
        for status in [200, 307, 400, 401, 403, 404, 413, 422] {
            assert!(!is_retryable_status(status), "{status}");
        }
    }
}
