//! Versions of the reviewer's contract: the prompt version and the `ReviewResult` schema version
//! this build speaks, and the compatibility policy applied to the versions a response declares.
//!
//! This module only reads version strings and compares them; it does not look at findings.

use serde::{Deserialize, Serialize};

/// The version of the reviewer's instruction text (`major.minor.patch`).
pub const PROMPT_VERSION: &str = "1.0.0";

/// The version of the `ReviewResult` JSON schema (`major.minor`).
pub const SCHEMA_VERSION: &str = "1.0";

/// How strict the parser is about the `prompt_version` a response declares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct VersionPolicy {
    /// Accept a `prompt_version` with the same major and minor as [`PROMPT_VERSION`] but another
    /// patch. Off by default: the prompt version must then match exactly.
    #[serde(default)]
    pub allow_prompt_patch_drift: bool,
}

/// A parsed `major.minor` schema version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SchemaVersion {
    pub major: u64,
    pub minor: u64,
}

/// A parsed `major.minor[.patch]` prompt version; a missing patch reads as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PromptVersion {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

/// Why a version string was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VersionProblem {
    /// The string does not match the schema's pattern.
    Malformed,
    /// Well formed, but outside what this build accepts.
    Incompatible(String),
}

/// True when `part` is one or more ASCII digits (the schema's `[0-9]+`).
fn is_digits(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|byte| byte.is_ascii_digit())
}

/// Parses the digits of one version segment; a segment too large for `u64` is incompatible,
/// since no version this build knows has one.
fn segment(part: &str) -> Result<u64, VersionProblem> {
    part.parse::<u64>()
        .map_err(|_| VersionProblem::Incompatible(format!("segment `{part}` is out of range")))
}

/// Parses a `schema_version` against the pattern `^[0-9]+\.[0-9]+$`.
pub(crate) fn parse_schema(text: &str) -> Result<SchemaVersion, VersionProblem> {
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 2 || !parts.iter().all(|part| is_digits(part)) {
        return Err(VersionProblem::Malformed);
    }
    Ok(SchemaVersion {
        major: segment(parts[0])?,
        minor: segment(parts[1])?,
    })
}

/// Parses a `prompt_version` against the pattern `^[0-9]+\.[0-9]+(\.[0-9]+)?$`.
pub(crate) fn parse_prompt(text: &str) -> Result<PromptVersion, VersionProblem> {
    let parts: Vec<&str> = text.split('.').collect();
    if !(parts.len() == 2 || parts.len() == 3) || !parts.iter().all(|part| is_digits(part)) {
        return Err(VersionProblem::Malformed);
    }
    Ok(PromptVersion {
        major: segment(parts[0])?,
        minor: segment(parts[1])?,
        patch: match parts.get(2) {
            Some(part) => segment(part)?,
            None => 0,
        },
    })
}

/// The schema version this build speaks, parsed.
fn ours_schema() -> SchemaVersion {
    // The constant is a literal; a failure here would be caught by the tests.
    parse_schema(SCHEMA_VERSION).unwrap_or(SchemaVersion { major: 1, minor: 0 })
}

/// The prompt version this build speaks, parsed.
fn ours_prompt() -> PromptVersion {
    parse_prompt(PROMPT_VERSION).unwrap_or(PromptVersion {
        major: 1,
        minor: 0,
        patch: 0,
    })
}

/// Checks a declared `schema_version`: the same major as ours and an equal or newer minor.
/// Returns whether it is newer than ours (read-compat mode).
pub(crate) fn check_schema(text: &str) -> Result<bool, VersionProblem> {
    let theirs = parse_schema(text)?;
    let ours = ours_schema();
    if theirs.major != ours.major {
        return Err(VersionProblem::Incompatible(format!(
            "schema_version `{text}` has another major version than {SCHEMA_VERSION}"
        )));
    }
    if theirs.minor < ours.minor {
        return Err(VersionProblem::Incompatible(format!(
            "schema_version `{text}` is older than {SCHEMA_VERSION}"
        )));
    }
    Ok(theirs.minor > ours.minor)
}

/// Checks a declared `prompt_version`: equal to ours (`1.0` reads as `1.0.0`), or, when the
/// policy allows patch drift, any patch of the same major and minor.
pub(crate) fn check_prompt(text: &str, policy: &VersionPolicy) -> Result<(), VersionProblem> {
    let theirs = parse_prompt(text)?;
    let ours = ours_prompt();
    if theirs == ours {
        return Ok(());
    }
    if policy.allow_prompt_patch_drift && theirs.major == ours.major && theirs.minor == ours.minor {
        return Ok(());
    }
    let allowed = if policy.allow_prompt_patch_drift {
        format!("{}.{}.x", ours.major, ours.minor)
    } else {
        PROMPT_VERSION.to_owned()
    };
    Err(VersionProblem::Incompatible(format!(
        "prompt_version `{text}` is not {allowed}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_constants_parse() {
        assert!(parse_schema(SCHEMA_VERSION).is_ok());
        assert!(parse_prompt(PROMPT_VERSION).is_ok());
    }

    #[test]
    fn schema_versions() {
        let cases: &[(&str, Result<bool, ()>)] = &[
            ("1.0", Ok(false)),
            ("1.1", Ok(true)),
            ("1.42", Ok(true)),
            ("01.0", Ok(false)),
            ("2.0", Err(())),
            ("0.9", Err(())),
            ("99999999999999999999.0", Err(())),
        ];
        for (text, expected) in cases {
            let got = check_schema(text).map_err(|_| ());
            assert_eq!(&got, expected, "{text}");
        }
        for malformed in [
            "", "1", "1.0.0", "v1.0", "1.x", "1..0", " 1.0", "1.0 ", "-1.0", "+1.0",
        ] {
            assert_eq!(
                check_schema(malformed),
                Err(VersionProblem::Malformed),
                "{malformed}"
            );
        }
    }

    #[test]
    fn prompt_versions() {
        let strict = VersionPolicy::default();
        let drift = VersionPolicy {
            allow_prompt_patch_drift: true,
        };
        let cases: &[(&str, bool, bool)] = &[
            // text, accepted strictly, accepted with patch drift
            ("1.0.0", true, true),
            ("1.0", true, true),
            ("1.0.1", false, true),
            ("1.0.17", false, true),
            ("1.1.0", false, false),
            ("1.1", false, false),
            ("2.0.0", false, false),
            ("0.0.0", false, false),
        ];
        for (text, strictly, drifting) in cases {
            assert_eq!(check_prompt(text, &strict).is_ok(), *strictly, "{text}");
            assert_eq!(check_prompt(text, &drift).is_ok(), *drifting, "{text}");
        }
        for malformed in ["", "1", "1.0.0.0", "1.0.", "v1.0.0", "1.0.0-rc1", "1,0"] {
            assert_eq!(
                check_prompt(malformed, &drift),
                Err(VersionProblem::Malformed),
                "{malformed}"
            );
        }
    }
}
