//! The one registry of secret values: the LLM keys, the review key, the GitHub token (under any
//! variable name it was read from), and the value of every variable a `*-env` setting names.
//!
//! Each value is registered once, at the start of a run, with its common encodings: base64
//! (standard and URL-safe alphabets, with and without padding, and at each of the three byte
//! alignments it can have inside a longer base64 string) and URL-encoding (either hex case).
//! Everything that leaves the process as text is passed through [`redact`] before any cutting:
//! job output as it comes back from the sandbox, log lines, the report, SARIF, the summary and
//! outputs files, pull-request bodies and comments. Everything that would go to a model is
//! checked with [`find`] first: a hit stops that content (the name of the secret is given, the
//! value never).

use std::borrow::Cow;
use std::sync::RwLock;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};

/// Values shorter than this are not registered: too short to match without false hits.
pub const MIN_SECRET_BYTES: usize = 8;
/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

struct Entry {
    name: String,
    /// The value and its encodings, longest first.
    needles: Vec<String>,
}

static REGISTRY: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

/// The value and the encodings it is looked for under.
pub fn encodings(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut needles = vec![value.to_owned()];
    for engine in [STANDARD_NO_PAD, URL_SAFE_NO_PAD] {
        let padded = base64::engine::general_purpose::STANDARD.encode(bytes);
        needles.push(padded);
        for offset in 0..3usize {
            // The characters fully determined by the value's bits when it starts `offset`
            // bytes into a 3-byte group: present whatever surrounds it.
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            let start = (8 * offset).div_ceil(6);
            let end = (8 * (offset + bytes.len())) / 6;
            if let Some(core) = encoded.get(start..end)
                && core.len() >= MIN_SECRET_BYTES
            {
                needles.push(core.to_owned());
            }
        }
    }
    let mut upper = String::new();
    let mut lower = String::new();
    for byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(byte) {
            upper.push(*byte as char);
            lower.push(*byte as char);
        } else {
            upper.push_str(&format!("%{byte:02X}"));
            lower.push_str(&format!("%{byte:02x}"));
        }
    }
    needles.push(upper);
    needles.push(lower);
    needles.sort_by_key(|needle| std::cmp::Reverse(needle.len()));
    needles.dedup();
    needles
}

/// Registers `value` under `name` (a variable name, or a description such as `the GitHub
/// token`). Blank and short values are ignored; registering twice is harmless.
pub fn register(name: &str, value: &str) {
    let value = value.trim();
    if value.len() < MIN_SECRET_BYTES {
        return;
    }
    let mut registry = REGISTRY.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    if registry
        .iter()
        .any(|entry| entry.needles.iter().any(|needle| needle == value))
    {
        return;
    }
    registry.push(Entry {
        name: name.to_owned(),
        needles: encodings(value),
    });
}

/// The name of the first registered secret that `text` holds under any encoding.
pub fn find(text: &str) -> Option<String> {
    let registry = REGISTRY.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    registry
        .iter()
        .find(|entry| entry.needles.iter().any(|needle| text.contains(needle.as_str())))
        .map(|entry| entry.name.clone())
}

/// `text` with every registered secret, under any encoding, replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let registry = REGISTRY.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Cow::Borrowed(text);
    for entry in registry.iter() {
        for needle in &entry.needles {
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), REDACTED));
            }
        }
    }
    out
}

/// [`redact`] for bytes that may not be UTF-8.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    let registry = REGISTRY.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut out = Cow::Borrowed(bytes);
    for entry in registry.iter() {
        for needle in &entry.needles {
            let finder = memchr::memmem::Finder::new(needle.as_bytes());
            if finder.find(&out).is_none() {
                continue;
            }
            let mut replaced = Vec::with_capacity(out.len());
            let mut rest: &[u8] = &out;
            while let Some(at) = finder.find(rest) {
                replaced.extend_from_slice(&rest[..at]);
                replaced.extend_from_slice(REDACTED.as_bytes());
                rest = &rest[at + needle.len()..];
            }
            replaced.extend_from_slice(rest);
            out = Cow::Owned(replaced);
        }
    }
    out
}

/// A writer that redacts each write before passing it on (log lines are written whole).
pub struct Redacting<W>(pub W);

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write_all(&redact_bytes(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
mod tests {
    use super::*;

    #[test]
    fn every_encoding_is_found_and_redacted() {
        let secret = "sk-unit-test-secret-0123456789/+=&?";
        register("UNIT_TEST_KEY", secret);
        let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
        for prefix in ["", "a", "ab", "abc"] {
            let embedded = base64::engine::general_purpose::STANDARD.encode(format!("{prefix}{secret}tail"));
            assert_eq!(find(&embedded).as_deref(), Some("UNIT_TEST_KEY"), "{prefix:?}");
            assert!(find(&redact(&embedded)).is_none(), "{prefix:?}");
        }
        for text in [
            format!("x {secret} y"),
            format!("x {b64} y"),
            format!("x {} y", b64.trim_end_matches('=')),
            format!("x {url} y"),
            "sk-unit-test-secret-0123456789%2F%2B%3D%26%3F".to_owned(),
            "sk-unit-test-secret-0123456789%2f%2b%3d%26%3f".to_owned(),
        ] {
            assert_eq!(find(&text).as_deref(), Some("UNIT_TEST_KEY"), "{text}");
            let redacted = redact(&text);
            assert!(find(&redacted).is_none(), "{redacted}");
            assert!(redacted.contains(REDACTED));
            assert!(find(&String::from_utf8_lossy(&redact_bytes(text.as_bytes()))).is_none());
        }
        assert!(find("nothing here").is_none());
    }
}
