//! Lexical validation of the paths a model names in its answer.
//!
//! Owns the one rule for what a repository path may look like: a relative, `/`-separated list
//! of normal components with no traversal, no Windows-only spellings and no invisible
//! characters. Paths are rejected, never normalised: `a/../b` is an error, not `b`. This module
//! also owns the folding used to compare names (case, Unicode normalisation, ignorable code
//! points, a few lookalikes). It does no I/O and knows nothing about which names are protected;
//! that is `edit::policy`.

use std::fmt;

use unicode_normalization::UnicodeNormalization;

/// Longest accepted path, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted component, in bytes.
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Most components accepted in one path.
pub const MAX_COMPONENTS: usize = 256;

/// A validated repository path: relative, `/`-separated, every component normal.
///
/// The string is exactly what the model sent (validation rejects instead of rewriting), so it
/// can be shown to a reviewer byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RepoPath(String);

impl RepoPath {
    /// The path as a `/`-separated string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The components, in order; none is empty, `.` or `..`.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// Consumes the path and returns its string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RepoPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Why a path was rejected. Messages never contain the raw control characters of the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathRejection {
    /// The path is the empty string.
    #[error("the path is empty")]
    Empty,
    /// The path starts with `/`.
    #[error("the path is absolute; paths must be relative to the repository root")]
    Absolute,
    /// The path contains a backslash.
    #[error("the path contains a backslash; use `/` as the only separator")]
    Backslash,
    /// The path contains `:` (a drive letter or an alternate data stream).
    #[error("the path contains `:` (drive letters and streams are not allowed)")]
    Colon,
    /// A component is `..`.
    #[error("the path contains a `..` component; traversal is not allowed")]
    ParentComponent,
    /// A component is `.`.
    #[error("the path contains a `.` component; write the path without it")]
    CurrentComponent,
    /// Two separators in a row.
    #[error("the path contains an empty component (`//`)")]
    EmptyComponent,
    /// The path ends with `/`.
    #[error("the path ends with `/`; name a file, not a directory")]
    TrailingSlash,
    /// A C0 or C1 control character, or DEL, or a line/paragraph separator.
    #[error("the path contains the control character {code_point}")]
    ControlCharacter {
        /// The offending code point, as `U+XXXX`.
        code_point: String,
    },
    /// A bidi control, or an invisible or format code point.
    #[error("the path contains the invisible or bidi character {code_point}")]
    InvisibleCharacter {
        /// The offending code point, as `U+XXXX`.
        code_point: String,
    },
    /// A component ends with a dot or a space, which Windows strips.
    #[error("the component `{component}` ends with a dot or a space")]
    TrailingDotOrSpace {
        /// The component, as sent.
        component: String,
    },
    /// A Windows device name, with or without an extension.
    #[error("the component `{component}` is a reserved device name")]
    DeviceName {
        /// The component, as sent.
        component: String,
    },
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("the path is {bytes} bytes long; the limit is {MAX_PATH_BYTES}")]
    TooLong {
        /// Length of the path in bytes.
        bytes: usize,
    },
    /// A component longer than [`MAX_COMPONENT_BYTES`].
    #[error("a component is {bytes} bytes long; the limit is {MAX_COMPONENT_BYTES}")]
    ComponentTooLong {
        /// Length of the component in bytes.
        bytes: usize,
    },
    /// More than [`MAX_COMPONENTS`] components.
    #[error("the path has more than {MAX_COMPONENTS} components")]
    TooManyComponents,
}

impl PathRejection {
    /// A stable, machine-readable code for reports and tests.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Empty => "empty-path",
            Self::Absolute => "absolute-path",
            Self::Backslash => "backslash",
            Self::Colon => "colon",
            Self::ParentComponent => "parent-component",
            Self::CurrentComponent => "current-component",
            Self::EmptyComponent => "empty-component",
            Self::TrailingSlash => "trailing-slash",
            Self::ControlCharacter { .. } => "control-character",
            Self::InvisibleCharacter { .. } => "invisible-character",
            Self::TrailingDotOrSpace { .. } => "trailing-dot-or-space",
            Self::DeviceName { .. } => "device-name",
            Self::TooLong { .. } => "path-too-long",
            Self::ComponentTooLong { .. } => "component-too-long",
            Self::TooManyComponents => "too-many-components",
        }
    }
}

/// Validates a raw path from the model. Never rewrites it: the accepted path is the input.
pub fn validate(raw: &str) -> Result<RepoPath, PathRejection> {
    // Limits first, so that nothing below runs on an unbounded input.
    if raw.len() > MAX_PATH_BYTES {
        return Err(PathRejection::TooLong { bytes: raw.len() });
    }
    if raw.is_empty() {
        return Err(PathRejection::Empty);
    }
    // Characters before structure: a control character must be reported as such, never echoed.
    for c in raw.chars() {
        if is_control(c) {
            return Err(PathRejection::ControlCharacter {
                code_point: code_point(c),
            });
        }
    }
    for c in raw.chars() {
        if is_invisible(c) {
            return Err(PathRejection::InvisibleCharacter {
                code_point: code_point(c),
            });
        }
    }
    if raw.starts_with('/') {
        return Err(PathRejection::Absolute);
    }
    if raw.contains('\\') {
        return Err(PathRejection::Backslash);
    }
    if raw.contains(':') {
        return Err(PathRejection::Colon);
    }
    if raw.ends_with('/') {
        return Err(PathRejection::TrailingSlash);
    }
    let mut count = 0usize;
    for component in raw.split('/') {
        count += 1;
        if count > MAX_COMPONENTS {
            return Err(PathRejection::TooManyComponents);
        }
        check_component(component)?;
    }
    Ok(RepoPath(raw.to_owned()))
}

fn check_component(component: &str) -> Result<(), PathRejection> {
    match component {
        "" => return Err(PathRejection::EmptyComponent),
        "." => return Err(PathRejection::CurrentComponent),
        ".." => return Err(PathRejection::ParentComponent),
        _ => {}
    }
    if component.len() > MAX_COMPONENT_BYTES {
        return Err(PathRejection::ComponentTooLong {
            bytes: component.len(),
        });
    }
    if component.ends_with(|c: char| c == '.' || c.is_whitespace()) {
        return Err(PathRejection::TrailingDotOrSpace {
            component: component.to_owned(),
        });
    }
    if is_device_name(component) {
        return Err(PathRejection::DeviceName {
            component: component.to_owned(),
        });
    }
    Ok(())
}

/// `U+XXXX` for a character, for messages that must not carry the raw character.
pub(crate) fn code_point(c: char) -> String {
    format!("U+{:04X}", u32::from(c))
}

/// C0, DEL, C1, and the Unicode line and paragraph separators.
pub(crate) fn is_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// Bidi controls, zero-width and other invisible or format code points, including the ones
/// HFS+ ignores when comparing names (git's `is_hfs_dotgit` list) and variation selectors.
pub(crate) fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Windows device names (`CON`, `NUL`, `COM1`, `LPT¹`, …), with any extension and any trailing
/// spaces before it, in any case: the list cap-std tests against.
fn is_device_name(component: &str) -> bool {
    let stem = component.split('.').next().unwrap_or(component);
    let stem = stem.trim_end_matches(|c: char| c == ' ' || c.is_whitespace());
    let upper = stem.to_uppercase();
    match upper.as_str() {
        "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$" | "CLOCK$" => true,
        _ => {
            let rest = upper.strip_prefix("COM").or_else(|| upper.strip_prefix("LPT"));
            match rest {
                Some(digit) => {
                    let mut chars = digit.chars();
                    matches!(
                        (chars.next(), chars.next()),
                        (Some('0'..='9' | '¹' | '²' | '³'), None)
                    )
                }
                None => false,
            }
        }
    }
}

/// The key under which two names count as the same file on a case-insensitive or
/// normalising filesystem: NFC, then full-ish case folding (upper, then lower, so `ſ` is `s`).
/// Used to detect colliding paths within one answer.
pub(crate) fn collision_key(name: &str) -> String {
    let nfc: String = name.nfc().collect();
    nfc.to_uppercase().to_lowercase()
}

/// The key under which a component is compared with a protected name. Broader than
/// [`collision_key`] on purpose: it also drops ignorable code points and combining
/// diacritics, and maps a few well-known lookalikes, so that `.gİt`, `.g\u{200c}it`, `ſpecs`
/// and `.gіt` (Cyrillic `і`) all compare equal to their ASCII targets. Over-matching here only
/// ever makes an edit stricter.
pub(crate) fn protected_key(name: &str) -> String {
    // ASCII has no ignorable, combining or lookalike code point, and folds to its lower case:
    // the Unicode path below gives exactly this (a test holds them equal), at a fraction of
    // the cost that a walk over every path of a large tree pays.
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    unicode_protected_key(name)
}

/// [`protected_key`] for any name, by the Unicode rules.
fn unicode_protected_key(name: &str) -> String {
    let folded = name.to_uppercase().to_lowercase();
    let stripped: String = folded
        .nfkd()
        .filter(|c| !is_invisible(*c) && !('\u{0300}'..='\u{036F}').contains(c))
        .map(lookalike)
        .collect();
    stripped.nfc().collect()
}

/// Maps a handful of Cyrillic and Greek letters to the Latin letter they imitate.
fn lookalike(c: char) -> char {
    match c {
        'а' => 'a',
        'с' => 'c',
        'е' => 'e',
        'һ' => 'h',
        'і' => 'i',
        'ј' => 'j',
        'о' | 'ο' => 'o',
        'р' | 'ρ' => 'p',
        'ѕ' => 's',
        'ԁ' => 'd',
        'ɡ' => 'g',
        'х' => 'x',
        'у' => 'y',
        'ι' => 'i',
        'κ' => 'k',
        'ν' => 'v',
        'τ' => 't',
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, expect: Result<(), &str>) {
        let got = validate(raw).map(|_| ()).map_err(|e| e.code());
        assert_eq!(got, expect, "validate({raw:?})");
    }

    #[test]
    fn accepts_normal_paths() {
        for raw in [
            "a",
            "src/main.rs",
            "specs/café.md",
            "docs/日本語.md",
            ".github/workflows/ci.yml",
            "a.b.c",
            "--exec=evil.sh",
            "-rf",
            ".config/bork.json",
            ".git/config",
            "console/x",
            "conx.txt",
            "COM10",
            "aux_",
        ] {
            check(raw, Ok(()));
        }
    }

    #[test]
    fn threat_model_path_cases() {
        let long = "a".repeat(4097);
        let component = format!("{}/x", "b".repeat(256));
        let deep = vec!["a"; 10_000].join("/");
        let many = vec!["a"; 257].join("/");
        let table: Vec<(&str, &str)> = vec![
            // P01-P03: traversal, never normalised.
            ("../x", "parent-component"),
            ("a/../../x", "parent-component"),
            ("a/../b", "parent-component"),
            // P04-P05: absolute.
            ("/etc/x", "absolute-path"),
            ("//x", "absolute-path"),
            ("///x", "absolute-path"),
            ("//server/share/x", "absolute-path"),
            // P06-P11: Windows spellings.
            ("C:\\x", "backslash"),
            ("C:x", "colon"),
            ("C:/x", "colon"),
            ("c:", "colon"),
            ("\\\\server\\share\\x", "backslash"),
            ("\\\\?\\C:\\x", "backslash"),
            ("\\\\.\\pipe\\x", "backslash"),
            ("\\??\\C:\\x", "backslash"),
            ("a\\..\\..\\x", "backslash"),
            ("a/b\\c", "backslash"),
            // P12-P13: control characters.
            ("a\u{0}b", "control-character"),
            ("a\u{1}b", "control-character"),
            ("a\nb", "control-character"),
            ("a\u{7f}b", "control-character"),
            ("a\u{9b}b", "control-character"),
            ("a\u{1b}[31mb", "control-character"),
            ("a\u{2028}b", "control-character"),
            // P14-P18: empty and non-canonical.
            ("", "empty-path"),
            (".", "current-component"),
            ("./", "trailing-slash"),
            ("..", "parent-component"),
            ("src/", "trailing-slash"),
            ("src//main.rs", "empty-component"),
            ("./src/main.rs", "current-component"),
            // P19: limits.
            (&long, "path-too-long"),
            (&component, "component-too-long"),
            (&deep, "path-too-long"),
            (&many, "too-many-components"),
            // P25-P26: trailing dot/space, streams, ignorables.
            (".git./config", "trailing-dot-or-space"),
            (".git /config", "trailing-dot-or-space"),
            (".git::$INDEX_ALLOCATION/config", "colon"),
            (".git:x/config", "colon"),
            (".g\u{200c}it/config", "invisible-character"),
            ("\u{feff}.git/config", "invisible-character"),
            (".git\u{200d}/hooks/x", "invisible-character"),
            (".g\u{202e}it/x", "invisible-character"),
            // P32: bidi.
            ("docs/\u{202e}gpj.exe", "invisible-character"),
            ("\u{2066}x\u{2069}", "invisible-character"),
            ("a\u{00ad}b", "invisible-character"),
            ("a\u{e0041}b", "invisible-character"),
            // P33: device names.
            ("CON", "device-name"),
            ("nul.txt", "device-name"),
            ("src/aux.rs", "device-name"),
            ("COM1.tar.gz", "device-name"),
            ("LPT¹", "device-name"),
            ("com³.txt", "device-name"),
            ("con .txt", "device-name"),
            ("conin$", "device-name"),
            ("con.d/x", "device-name"),
            // P35-P38: config and specs spellings.
            ("./.config/bork.json", "current-component"),
            (".config//bork.json", "empty-component"),
            (".config/./bork.json", "current-component"),
            (".config/bork.json/", "trailing-slash"),
            (".config/x/../bork.json", "parent-component"),
            (".config/bork.json.", "trailing-dot-or-space"),
            (".config/bork.json::$DATA", "colon"),
            ("specs/../.git/hooks/pre-commit", "parent-component"),
            ("specs/../src/main.rs", "parent-component"),
            ("./Cargo.toml", "current-component"),
            ("a/b ", "trailing-dot-or-space"),
            ("a/b\u{3000}", "trailing-dot-or-space"),
        ];
        for (raw, code) in table {
            check(raw, Err(code));
        }
    }

    #[test]
    fn exactly_at_the_limits_is_accepted() {
        let component = "c".repeat(MAX_COMPONENT_BYTES);
        check(&component, Ok(()));
        let many = vec!["a"; MAX_COMPONENTS].join("/");
        check(&many, Ok(()));
        let long = vec!["abcdefghijklmno"; MAX_COMPONENTS].join("/");
        assert_eq!(long.len(), 4095);
        check(&long, Ok(()));
    }

    #[test]
    fn messages_never_carry_raw_control_characters() {
        let err = validate("a\u{1b}]8;;http://x\u{7}").err();
        let message = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("U+001B"), "{message}");
        assert!(!message.chars().any(char::is_control));
    }

    #[test]
    fn accepted_path_keeps_its_bytes_and_components() {
        let path = validate("a/b/c.txt").expect("valid");
        assert_eq!(path.as_str(), "a/b/c.txt");
        assert_eq!(path.components().collect::<Vec<_>>(), ["a", "b", "c.txt"]);
        assert_eq!(path.file_name(), "c.txt");
    }

    #[test]
    fn the_ascii_protected_key_is_the_unicode_one() {
        let mut names: Vec<String> = (0u8..128).map(|byte| char::from(byte).to_string()).collect();
        names.extend(
            [
                ".GIT",
                "Specs",
                "README.md",
                "src/Main.RS",
                "a-B_c.D~e",
                "\t\u{7f}x",
            ]
            .iter()
            .map(|name| (*name).to_owned()),
        );
        for name in names {
            assert_eq!(protected_key(&name), unicode_protected_key(&name), "{name:?}");
        }
    }

    #[test]
    fn protected_key_folds_lookalikes() {
        for (raw, key) in [
            (".GIT", ".git"),
            (".gİt", ".git"),
            (".gıt", ".git"),
            (".g\u{200c}it", ".git"),
            ("ſpecs", "specs"),
            ("ѕpecs", "specs"),
            (".gіthub", ".github"),
            ("SPECS", "specs"),
        ] {
            assert_eq!(protected_key(raw), key, "{raw:?}");
        }
    }

    #[test]
    fn collision_key_joins_nfc_nfd_and_case() {
        assert_eq!(collision_key("café.md"), collision_key("cafe\u{301}.md"));
        assert_eq!(collision_key("README.md"), collision_key("readme.md"));
        assert_ne!(collision_key("café.md"), collision_key("cafe.md"));
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn token() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("/".to_owned()),
                Just("\\".to_owned()),
                Just(".".to_owned()),
                Just("..".to_owned()),
                Just(":".to_owned()),
                Just("\u{0}".to_owned()),
                Just("\u{9b}".to_owned()),
                Just(" ".to_owned()),
                Just(".git".to_owned()),
                Just("GIT~1".to_owned()),
                Just(".config".to_owned()),
                Just("bork.json".to_owned()),
                Just("specs".to_owned()),
                Just("\u{200c}".to_owned()),
                Just("\u{202e}".to_owned()),
                Just("ſ".to_owned()),
                Just("ı".to_owned()),
                Just("e\u{301}".to_owned()),
                Just("CON".to_owned()),
                Just("a".to_owned()),
                "[a-zA-Z0-9_-]{1,8}",
                any::<char>().prop_map(String::from),
            ]
        }

        proptest! {
            #[test]
            fn validate_never_panics(raw in ".*") {
                let _ = validate(&raw);
            }

            #[test]
            fn accepted_paths_are_canonical(tokens in proptest::collection::vec(token(), 1..12)) {
                let raw = tokens.concat();
                if let Ok(path) = validate(&raw) {
                    prop_assert_eq!(path.as_str(), raw.as_str());
                    prop_assert!(!raw.contains('\\') && !raw.contains(':'));
                    prop_assert!(!raw.chars().any(|c| is_control(c) || is_invisible(c)));
                    prop_assert!(raw.len() <= MAX_PATH_BYTES);
                    let parts: Vec<&str> = path.components().collect();
                    prop_assert!(parts.len() <= MAX_COMPONENTS);
                    for part in &parts {
                        prop_assert!(!part.is_empty() && *part != "." && *part != "..");
                        prop_assert!(part.len() <= MAX_COMPONENT_BYTES);
                    }
                    prop_assert_eq!(parts.join("/"), raw);
                }
            }
        }
    }
}
