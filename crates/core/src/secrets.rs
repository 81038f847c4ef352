//! The one registry of secret values: the LLM keys, the review key, the GitHub token (under any
//! variable name it was read from), and the value of every variable a `*-env` setting names.
//!
//! Each value is registered once, at the start of a run, with its common encodings: base64
//! (standard and URL-safe alphabets, with and without padding, and at each of the three byte
//! alignments it can have inside a longer base64 string), base32 (RFC 4648, either case, at each
//! of its five alignments), hex and URL-encoding (either case), the value reversed, its JSON
//! `\u` escapes, and a long prefix (three quarters of a value of 24 bytes or more). A value split
//! across lines is found too: each text is also searched in a view without whitespace, quotes,
//! `+`, line continuations, escaped newlines, quotes and backslashes, with `\uXXXX` escapes decoded, and a hit there
//! redacts the whole stretch of the original it came from.
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
    for offset in 0..5usize {
        // As for base64: the characters a 5-byte group's alignment cannot change.
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(bytes);
        let encoded = base32(&shifted);
        let start = (8 * offset).div_ceil(5);
        let end = (8 * (offset + bytes.len())) / 5;
        if let Some(core) = encoded.get(start..end)
            && core.len() >= MIN_SECRET_BYTES
        {
            needles.push(core.to_owned());
            needles.push(core.to_ascii_lowercase());
        }
    }
    let hex = hex::encode(bytes);
    needles.push(hex.to_ascii_uppercase());
    needles.push(hex);
    needles.push(value.chars().rev().collect());
    let escaped: String = value
        .encode_utf16()
        .map(|unit| format!("\\u{unit:04x}"))
        .collect();
    needles.push(escaped.to_ascii_uppercase().replace("\\U", "\\u"));
    needles.push(escaped);
    if value.len() >= 24 {
        let mut end = value.len() * 3 / 4;
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        needles.push(value[..end].to_owned());
    }
    let upper = crate::url_text::encode(value, crate::url_text::Keep::Unreserved);
    let lower = lower_hex(&upper);
    needles.push(upper);
    needles.push(lower);
    needles.sort_by_key(|needle| std::cmp::Reverse(needle.len()));
    needles.dedup();
    needles
}

/// Percent-encoded text with lower-case hex digits (`%c3%a9`), as some encoders write it.
fn lower_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut hex_left = 0;
    for c in encoded.chars() {
        if hex_left > 0 {
            out.push(c.to_ascii_lowercase());
            hex_left -= 1;
        } else {
            if c == '%' {
                hex_left = 2;
            }
            out.push(c);
        }
    }
    out
}

/// RFC 4648 base32, without padding.
fn base32(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut out = String::with_capacity(bytes.len() * 8 / 5 + 1);
    let mut buffer: u64 = 0;
    let mut bits = 0;
    for byte in bytes {
        buffer = (buffer << 8) | u64::from(*byte);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(ALPHABET[((buffer >> bits) & 31) as usize] as char);
        }
        buffer &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(ALPHABET[((buffer << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// A text with what can split or disguise a value taken out (whitespace, quotes, `+`, line
/// continuations, escaped newlines and tabs), `\uXXXX` escapes decoded, and for each byte of it
/// the stretch of the original it came from.
struct View {
    text: String,
    origin: Vec<(usize, usize)>,
}

impl View {
    fn of(text: &str) -> View {
        let mut view = View {
            text: String::with_capacity(text.len()),
            origin: Vec::with_capacity(text.len()),
        };
        let mut at = 0;
        while let Some(c) = text[at..].chars().next() {
            let rest = &text[at..];
            let skip = if c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '+') {
                c.len_utf8()
            } else if let Some(after) = rest.strip_prefix('\\') {
                if after.starts_with("\r\n") {
                    3
                } else if after.starts_with(['\n', 'n', 'r', 't', '"', '\'', '\\']) {
                    // A line continuation, an escaped newline or tab, an escaped quote, an
                    // escaped backslash (a continuation once the text is decoded).
                    2
                } else if let Some((decoded, used)) = unicode_escape(rest) {
                    view.push(decoded, at, at + used);
                    at += used;
                    continue;
                } else {
                    0
                }
            } else {
                0
            };
            if skip > 0 {
                at += skip;
                continue;
            }
            view.push(c, at, at + c.len_utf8());
            at += c.len_utf8();
        }
        view
    }

    fn push(&mut self, c: char, start: usize, end: usize) {
        self.text.push(c);
        for _ in 0..c.len_utf8() {
            self.origin.push((start, end));
        }
    }

    /// The stretches of the original where `needle` occurs in the view.
    fn spans(&self, needle: &str) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        let mut from = 0;
        while let Some(found) = self.text[from..].find(needle) {
            let first = from + found;
            let last = first + needle.len() - 1;
            spans.push((self.origin[first].0, self.origin[last].1));
            from = first + needle.len();
        }
        spans
    }
}

/// `\uXXXX` (a surrogate pair as two) at the start of `text`: the character and the bytes used.
fn unicode_escape(text: &str) -> Option<(char, usize)> {
    let unit = |at: usize| -> Option<u16> {
        let digits = text.get(at..at + 6)?.strip_prefix("\\u")?;
        u16::from_str_radix(digits, 16).ok()
    };
    let high = unit(0)?;
    if (0xd800..0xdc00).contains(&high) {
        let low = unit(6)?;
        let c = char::decode_utf16([high, low]).next()?.ok()?;
        return Some((c, 12));
    }
    Some((char::from_u32(u32::from(high))?, 6))
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
    if registry.is_empty() {
        return None;
    }
    if let Some(entry) = registry
        .iter()
        .find(|entry| entry.needles.iter().any(|needle| text.contains(needle.as_str())))
    {
        return Some(entry.name.clone());
    }
    let view = View::of(text);
    registry
        .iter()
        .find(|entry| {
            entry
                .needles
                .iter()
                .any(|needle| view.text.contains(needle.as_str()))
        })
        .map(|entry| entry.name.clone())
}

/// `text` with every registered secret, under any encoding, replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let registry = REGISTRY.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    if registry.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = Cow::Borrowed(text);
    for entry in registry.iter() {
        for needle in &entry.needles {
            if out.contains(needle.as_str()) {
                out = Cow::Owned(out.replace(needle.as_str(), REDACTED));
            }
        }
    }
    // What is left split across lines or escaped: whole stretches of the original.
    let view = View::of(&out);
    let mut spans: Vec<(usize, usize)> = registry
        .iter()
        .flat_map(|entry| entry.needles.iter())
        .flat_map(|needle| view.spans(needle))
        .collect();
    if spans.is_empty() {
        return out;
    }
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (start, end) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut redacted = String::with_capacity(out.len());
    let mut at = 0;
    for (start, end) in merged {
        redacted.push_str(&out[at..start]);
        redacted.push_str(REDACTED);
        at = end;
    }
    redacted.push_str(&out[at..]);
    Cow::Owned(redacted)
}

/// [`redact`] for bytes that may not be UTF-8.
pub fn redact_bytes(bytes: &[u8]) -> Cow<'_, [u8]> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return match redact(text) {
            Cow::Borrowed(_) => Cow::Borrowed(bytes),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        };
    }
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

    #[test]
    fn hex_base32_reversed_escaped_split_and_prefix_forms_are_found_and_redacted() {
        let secret = "sk-enc-TEST-9f8e7d6c5b4a3210zyxw";
        register("ENCODED_TEST_KEY", secret);
        let hex = hex::encode(secret);
        let escaped: String = secret.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
        let mixed: String = secret
            .chars()
            .enumerate()
            .map(|(i, c)| {
                if i % 3 == 0 {
                    format!("\\u{:04X}", c as u32)
                } else {
                    c.to_string()
                }
            })
            .collect();
        let (head, tail) = secret.split_at(13);
        let mut texts = vec![
            format!("hex {hex} end"),
            format!("HEX {} end", hex.to_ascii_uppercase()),
            format!("rev {} end", secret.chars().rev().collect::<String>()),
            format!("{{\"key\": \"{escaped}\"}}"),
            format!("{{\"key\": \"{mixed}\"}}"),
            format!("key = \"{head}\"\n      \"{tail}\"\n"),
            format!("KEY={head}\\\n{tail}\n"),
            format!("{{\"k\": \"{head}\\n{tail}\"}}"),
            format!("k = '{head}' + '{tail}'"),
            format!("truncated {}...", &secret[..secret.len() * 3 / 4]),
        ];
        for offset in 0..5 {
            let padding = "x".repeat(offset);
            texts.push(format!(
                "b32 {} end",
                base32(format!("{padding}{secret}tail").as_bytes())
            ));
            texts.push(format!(
                "b32 {} end",
                base32(format!("{padding}{secret}").as_bytes()).to_ascii_lowercase()
            ));
        }
        for text in &texts {
            assert_eq!(find(text).as_deref(), Some("ENCODED_TEST_KEY"), "{text}");
            let redacted = redact(text);
            assert!(find(&redacted).is_none(), "{text} -> {redacted}");
            assert!(redacted.contains(REDACTED), "{redacted}");
            let bytes = redact_bytes(text.as_bytes());
            assert!(find(&String::from_utf8_lossy(&bytes)).is_none(), "{text}");
        }
        // Text around a split value stays.
        let redacted = redact(&texts[5]);
        assert!(redacted.starts_with("key = "), "{redacted}");
        assert!(find("an ordinary line, \"quoted\" + more").is_none());
    }

    #[test]
    fn base32_is_rfc_4648() {
        assert_eq!(base32(b""), "");
        assert_eq!(base32(b"f"), "MY");
        assert_eq!(base32(b"fo"), "MZXQ");
        assert_eq!(base32(b"foo"), "MZXW6");
        assert_eq!(base32(b"foob"), "MZXW6YQ");
        assert_eq!(base32(b"fooba"), "MZXW6YTB");
        assert_eq!(base32(b"foobar"), "MZXW6YTBOI");
    }
}
