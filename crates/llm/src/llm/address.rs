//! URLs as shown to people and as sent: a path segment percent-encoded, a URL with its user
//! info and query hidden. No I/O; it names no other room.

use bork_ci_core::net::reqwest::Url;

/// A model, project or region as one URL path segment (`:` of Bedrock model ids becomes `%3A`).
pub(super) fn encode_segment(text: &str) -> String {
    bork_ci_core::url_text::encode(text.trim(), bork_ci_core::url_text::Keep::At)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_hide_user_info_and_query() {
        let url = Url::parse("https://user:pw@llm.example/v1/?key=sk-secret#x").expect("url");
        assert_eq!(shown_url(&url), "https://llm.example/v1/?[redacted]");
        assert_eq!(shown_url_text("htp:/user:pw@x?key=sk-secret"), "[redacted]@x");
    }
}
