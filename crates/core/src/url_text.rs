//! Percent-encoding of the text bork-ci puts into URLs and URI references (RFC 3986), on one
//! set of unreserved characters (ALPHA DIGIT `-` `.` `_` `~`, section 2.3), which stay as they
//! are; every other byte becomes `%XX` with upper-case hex. A component may keep one more
//! character that RFC 3986 allows in it ([`Keep`]). Pure: no I/O. Does not decode.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// Every byte but the unreserved characters is encoded.
const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What a component keeps besides the unreserved characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Nothing: the strictest form, valid in any component (a query value, a form field).
    Unreserved,
    /// `/`: a relative path whose segments are encoded, where `:` is encoded so the first
    /// segment can never read as a scheme (RFC 3986, section 4.2).
    Slash,
    /// `:`, which a path segment allows (`pchar`): GitHub labels and `owner:branch` stay
    /// readable (`bork:needs-human`).
    Colon,
    /// `@`, which a path segment allows (`pchar`): a model id with its version
    /// (`model@2024-06-20`), `:` encoded as SigV4's canonical path expects.
    At,
}

/// `text` percent-encoded: unreserved characters and what `keep` names as they are, every
/// other byte `%XX`.
pub fn encode(text: &str, keep: Keep) -> String {
    const SLASH: &AsciiSet = &UNRESERVED.remove(b'/');
    const COLON: &AsciiSet = &UNRESERVED.remove(b':');
    const AT: &AsciiSet = &UNRESERVED.remove(b'@');
    let set = match keep {
        Keep::Unreserved => UNRESERVED,
        Keep::Slash => SLASH,
        Keep::Colon => COLON,
        Keep::At => AT,
    };
    utf8_percent_encode(text, set).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-by-byte definition: RFC 3986's unreserved characters and the kept one as they
    /// are, everything else `%XX`.
    fn by_hand(text: &str, kept: &[u8]) -> String {
        let mut out = String::new();
        for byte in text.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) || kept.contains(&byte) {
                out.push(byte as char);
            } else {
                out.push_str(&format!("%{byte:02X}"));
            }
        }
        out
    }

    #[test]
    fn unreserved_characters_are_exactly_rfc_3986s() {
        let every_ascii: String = (0u8..128).map(char::from).collect();
        assert_eq!(
            encode(&every_ascii, Keep::Unreserved)
                .split('%')
                .next()
                .map(str::len),
            Some(0),
            "NUL is encoded first"
        );
        let kept: String = every_ascii
            .chars()
            .filter(|c| encode(&c.to_string(), Keep::Unreserved) == c.to_string())
            .collect();
        assert_eq!(
            kept,
            "-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~"
        );
    }

    #[test]
    fn each_component_keeps_its_one_character() {
        let text = "a b/c:d@e~f.g-h_i%j?k#l&m=n+o!é";
        assert_eq!(encode(text, Keep::Unreserved), by_hand(text, b""));
        assert_eq!(encode(text, Keep::Slash), by_hand(text, b"/"));
        assert_eq!(encode(text, Keep::Colon), by_hand(text, b":"));
        assert_eq!(encode(text, Keep::At), by_hand(text, b"@"));
        assert_eq!(encode("bork:needs-human", Keep::Colon), "bork:needs-human");
        assert_eq!(encode("needs human/now", Keep::Colon), "needs%20human%2Fnow");
        assert_eq!(encode("src/a b:c.rs", Keep::Slash), "src/a%20b%3Ac.rs");
        assert_eq!(encode("anthropic.claude:0", Keep::At), "anthropic.claude%3A0");
        assert_eq!(encode("é", Keep::Unreserved), "%C3%A9");
    }

    proptest::proptest! {
        #[test]
        fn agrees_with_the_byte_by_byte_definition(text in "\\PC{0,40}") {
            for (keep, kept) in [
                (Keep::Unreserved, &b""[..]),
                (Keep::Slash, b"/"),
                (Keep::Colon, b":"),
                (Keep::At, b"@"),
            ] {
                proptest::prop_assert_eq!(encode(&text, keep), by_hand(&text, kept));
            }
        }
    }
}
