//! Gitignore-style globs as bork-ci's rules take them (approval rules, judge files, code and
//! test globs): configured paths and globs normalized, and compiled into `globset` globs that
//! match folded paths (`edit::path::protected_key`), so that a spelling variant of a path meets
//! its rule. The one place both `edit::policy` and `edit::judge_files` compile their rules.

use globset::{GlobBuilder, GlobSetBuilder};

use super::path::protected_key;

/// A glob of the approval rules that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(pub String);

impl From<globset::Error> for RuleError {
    fn from(error: globset::Error) -> Self {
        RuleError(error.to_string())
    }
}

/// A configured repository path with `.` and empty components dropped (`./ci//check.sh` is
/// `ci/check.sh`). `config` refuses `..` and backslashes before this is reached.
pub fn normalize_path(raw: &str) -> String {
    raw.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// A configured glob with `.` and empty components dropped; a leading `./` anchors it at the
/// root like a leading `/`, and a trailing `/` (a directory rule) is kept.
pub fn normalize_glob(raw: &str) -> String {
    let anchored = raw.starts_with('/') || raw.starts_with("./");
    let directory = raw.ends_with('/');
    let body = normalize_path(raw);
    let mut glob = String::new();
    if anchored {
        glob.push('/');
    }
    glob.push_str(&body);
    if directory && !body.is_empty() {
        glob.push('/');
    }
    glob
}

/// Compiles one gitignore-style glob into globset globs, each reporting `rule`.
pub(crate) fn add_rule(
    builder: &mut GlobSetBuilder,
    rules: &mut Vec<String>,
    glob: &str,
    rule: &str,
) -> Result<(), globset::Error> {
    // A trailing `/` (directory rule) compiles like the plain name: the name itself is matched
    // too, so that writing a file over `specs` is never treated as ungated.
    let body = glob.strip_suffix('/').unwrap_or(glob);
    let anchored = body.starts_with('/') || body.contains('/');
    let body = body.trim_start_matches('/');
    // Fold the glob the way paths are folded, so both sides meet in the same alphabet.
    let body: String = body.split('/').map(protected_key).collect::<Vec<_>>().join("/");
    let base = if anchored { body } else { format!("**/{body}") };
    for pattern in [base.clone(), format!("{base}/**")] {
        let compiled = GlobBuilder::new(&pattern)
            .literal_separator(true)
            .case_insensitive(true)
            .backslash_escape(true)
            .build()?;
        builder.add(compiled);
        rules.push(rule.to_owned());
    }
    Ok(())
}
