//! Which edits the model may make, which need a human, and which are never made.
//!
//! Owns the classification of one raw path into [`Disposition`]: hard refusals (`.git` and its
//! aliases, `.config/bork.json`, lexically invalid paths), gated paths that wait for approval
//! (`specs/**`, the checker, CI files, user globs), and everything else. Protected names are
//! compared after folding (case, NFC, ignorable code points, lookalikes) so that a spelling
//! variant never slips past a rule. Protection is by identity too: given the tree's aliases
//! (`edit::identity`: symlinks resolving inside the repository, hardlinks), an edit is also
//! classified under every other path that names the same file or folder, and the stricter class
//! wins. Pure: the filesystem checks (symlinks, directories) are `edit::apply`'s.

use globset::{GlobSet, GlobSetBuilder};

use super::glob::{RuleError, add_rule, normalize_glob, normalize_path};
use serde::Serialize;

use super::identity::Alias;
use super::path::{self, protected_key};

/// At most this many other spellings of one edit's path are classified.
const MAX_SPELLINGS: usize = 64;

/// Rules gated by default, besides `specs/**` and the checker (gitignore-style).
pub const DEFAULT_GATED: &[&str] = &[
    ".github/workflows/",
    ".github/actions/",
    "agent.yaml",
    ".gitmodules",
];

/// The compiled approval rules.
#[derive(Debug, Clone)]
pub struct Protection {
    set: GlobSet,
    /// The rule to report for each glob in `set`, by index.
    rules: Vec<String>,
    /// Pairs of paths naming the same thing, as folded components, with their spelling.
    aliases: Vec<(Vec<String>, String)>,
    /// The judge files (`judge_files`): gated too, some by a section of their content.
    judge: crate::edit::judge_files::Matcher,
    /// What is code (`edit::code`), when the run states it: every other path is gated.
    code: Option<crate::edit::code::CodeMatcher>,
    /// The test files the approved revision has (folded): a change to or a deletion of one is
    /// gated; a new test file is not.
    approved_tests: std::collections::BTreeSet<String>,
}

impl Protection {
    /// Builds the rules: `specs/**` always, the defaults in [`DEFAULT_GATED`], the configured
    /// checker path (if any), the user's `edits-require-approval` globs, and the judge files.
    ///
    /// Globs are gitignore-style: a leading `/` or a `/` inside anchors the glob at the root,
    /// otherwise it matches at any depth; a trailing `/` means the directory and everything
    /// below it; a glob that names a file also covers everything below a directory of that
    /// name. `*` does not cross `/`, `**` does. Matching ignores case and the lookalikes
    /// that [`classify`] folds.
    pub fn new(
        checker: Option<&str>,
        user_globs: &[String],
        judge: &crate::edit::judge_files::JudgeRules,
    ) -> Result<Self, RuleError> {
        let mut builder = GlobSetBuilder::new();
        let mut rules = Vec::new();
        add_rule(&mut builder, &mut rules, "/specs/", "specs/**")?;
        for rule in DEFAULT_GATED {
            add_rule(&mut builder, &mut rules, rule, &display_rule(rule))?;
        }
        if let Some(checker) = checker {
            let checker = normalize_path(checker);
            let checker = checker.as_str();
            let literal = format!("/{}", globset::escape(checker));
            add_rule(&mut builder, &mut rules, &literal, "correctness-checker")?;
        }
        for glob in user_globs {
            add_rule(&mut builder, &mut rules, &normalize_glob(glob), glob)?;
        }
        // The code rules are compiled once, for the judge files and for the edits.
        let judge = judge.matcher().map_err(|error| RuleError(error.to_string()))?;
        let code = judge.code_matcher().cloned();
        Ok(Self {
            set: builder.build()?,
            rules,
            aliases: Vec::new(),
            judge,
            code,
            approved_tests: std::collections::BTreeSet::new(),
        })
    }

    /// Adds the test files of the approved revision (repository paths): a change to or a
    /// deletion of one is gated.
    pub fn with_approved_tests<'p>(mut self, paths: impl IntoIterator<Item = &'p String>) -> Self {
        self.approved_tests
            .extend(paths.into_iter().map(|path| crate::edit::code::fold(path)));
        self
    }

    /// Adds the tree's aliases (both directions): an edit is then also classified under every
    /// path that names the same file or folder.
    pub fn with_aliases(mut self, aliases: &[Alias]) -> Self {
        for alias in aliases {
            for (from, to) in [(&alias.path, &alias.same_as), (&alias.same_as, &alias.path)] {
                let key: Vec<String> = from.split('/').map(protected_key).collect();
                self.aliases.push((key, to.clone()));
            }
        }
        self
    }

    /// Other spellings of `path` through the aliases (not `path` itself), bounded.
    fn spellings(&self, path: &path::RepoPath) -> Vec<String> {
        if self.aliases.is_empty() {
            return Vec::new();
        }
        let start: Vec<String> = path.components().map(str::to_owned).collect();
        let mut seen: Vec<Vec<String>> = vec![start.iter().map(|c| protected_key(c)).collect()];
        let mut queue = vec![start];
        let mut found = Vec::new();
        while let Some(components) = queue.pop() {
            let folded: Vec<String> = components.iter().map(|c| protected_key(c)).collect();
            for (prefix, other) in &self.aliases {
                if folded.len() < prefix.len() || folded[..prefix.len()] != prefix[..] {
                    continue;
                }
                let mut next: Vec<String> = other.split('/').map(str::to_owned).collect();
                next.extend(components[prefix.len()..].iter().cloned());
                let key: Vec<String> = next.iter().map(|c| protected_key(c)).collect();
                if seen.contains(&key) {
                    continue;
                }
                if found.len() >= MAX_SPELLINGS {
                    return found;
                }
                seen.push(key);
                found.push(next.join("/"));
                queue.push(next);
            }
        }
        found
    }

    /// The rule that gates `path`, if any (the first in the order given to [`Protection::new`],
    /// then the judge files, then whatever is not code).
    fn gate(&self, path: &path::RepoPath) -> Option<String> {
        let folded: Vec<String> = path.components().map(protected_key).collect();
        let candidate = folded.join("/");
        let named = self
            .set
            .matches(candidate.as_str())
            .into_iter()
            .min()
            .and_then(|index| self.rules.get(index))
            .map(String::as_str)
            .or_else(|| match self.judge.classify(&candidate) {
                Some(crate::edit::judge_files::JudgeMatch::Whole { rule }) => Some(rule),
                _ => None,
            });
        if let Some(rule) = named {
            return Some(rule.to_owned());
        }
        use crate::edit::code::{APPROVED_TEST, Kind, NOT_CODE};
        match self.code.as_ref()?.kind(&candidate) {
            Kind::Code => None,
            Kind::Test => self
                .approved_tests
                .contains(&candidate)
                .then(|| APPROVED_TEST.to_owned()),
            Kind::NotCode { why } if why == NOT_CODE => Some(NOT_CODE.to_owned()),
            Kind::NotCode { why } => Some(format!("{NOT_CODE} ({why})")),
        }
    }

    /// Whether any spelling of `raw` has a keyed judge rule (`package.json`, ...).
    pub fn may_be_keyed(&self, raw: &str) -> bool {
        let Ok(path) = path::validate(raw) else {
            return false;
        };
        let mut spellings = vec![path.as_str().to_owned()];
        spellings.extend(self.spellings(&path));
        spellings.iter().any(|spelling| {
            matches!(
                self.judge.classify(&crate::edit::judge_files::fold(spelling)),
                Some(crate::edit::judge_files::JudgeMatch::Keyed)
            )
        })
    }

    /// For a write or delete that the path rules allow: the keyed judge rule (`package.json`'s
    /// `scripts`, ...) whose section differs between the file's `old` and `new` content, if any.
    /// Checked under every spelling of the path.
    pub fn keyed_change(&self, raw: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> Option<String> {
        let path = path::validate(raw).ok()?;
        let mut spellings = vec![path.as_str().to_owned()];
        spellings.extend(self.spellings(&path));
        spellings.iter().find_map(|spelling| {
            let folded = crate::edit::judge_files::fold(spelling);
            self.judge.keyed_change(&folded, old, new).map(str::to_owned)
        })
    }
}

fn display_rule(rule: &str) -> String {
    match rule.strip_suffix('/') {
        Some(dir) => format!("{dir}/**"),
        None => rule.to_owned(),
    }
}

/// What to do with one proposed edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Disposition {
    /// Apply it.
    Allow,
    /// Keep it for a human to approve; `rule` names the rule that gated it.
    NeedsApproval {
        /// The rule, e.g. `specs/**`, `correctness-checker` or a user glob.
        rule: String,
    },
    /// Never apply it.
    Refuse(Refusal),
}

/// Why an edit is never applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Refusal {
    /// Stable, machine-readable code (`git-dir`, `config-file`, or a path rejection code).
    pub code: &'static str,
    /// A sentence for humans and for the model.
    pub message: String,
    /// Whether the attempted contents may be printed (false for `.git`: a log line only).
    pub print_contents: bool,
}

/// Code of a refused `.git` edit.
pub const CODE_GIT_DIR: &str = "git-dir";
/// Code of a refused `.config/bork.json` edit.
pub const CODE_CONFIG_FILE: &str = "config-file";
/// Code of a refused edit to an NTFS short name of `.gitmodules`.
pub const CODE_GITMODULES_ALIAS: &str = "gitmodules-alias";

/// Classifies a raw path from the model. Runs [`path::validate`] first, except that `.git`
/// and `.config/bork.json` are recognised under any spelling (even an invalid one) so they
/// get their own code. Then every other path naming the same file or folder (the aliases given
/// to [`Protection::with_aliases`]) is classified too, and the strictest class wins.
pub fn classify(raw: &str, protection: &Protection) -> Disposition {
    let own = classify_spelling(raw, protection);
    if matches!(own, Disposition::Refuse(_)) {
        return own;
    }
    let Ok(path) = path::validate(raw) else {
        return own;
    };
    let mut strictest = own;
    for other in protection.spellings(&path) {
        let disposition = match classify_spelling(&other, protection) {
            Disposition::Refuse(mut refusal) => {
                refusal.message = format!("{} (`{raw}` names the same file as `{other}`)", refusal.message);
                return Disposition::Refuse(refusal);
            }
            disposition => disposition,
        };
        if matches!(strictest, Disposition::Allow) {
            strictest = disposition;
        }
    }
    strictest
}

/// Classifies one spelling, without aliases.
fn classify_spelling(raw: &str, protection: &Protection) -> Disposition {
    // Bound the work on hostile input; validate() rejects anything this long anyway.
    if raw.len() <= path::MAX_PATH_BYTES {
        if raw.split(['/', '\\']).any(is_git_alias) {
            return Disposition::Refuse(Refusal {
                code: CODE_GIT_DIR,
                message: "edits inside `.git` are never made".to_owned(),
                print_contents: false,
            });
        }
        if resolves_to_config(raw) {
            return Disposition::Refuse(Refusal {
                code: CODE_CONFIG_FILE,
                message: "`.config/bork.json` (and the `.config` folder that holds it) configures bork-ci and is never edited".to_owned(),
                print_contents: true,
            });
        }
        if raw.split(['/', '\\']).any(is_gitmodules_alias) {
            return Disposition::Refuse(Refusal {
                code: CODE_GITMODULES_ALIAS,
                message: "the path is a short-name alias of `.gitmodules`".to_owned(),
                print_contents: true,
            });
        }
    }
    let path = match path::validate(raw) {
        Ok(path) => path,
        Err(rejection) => {
            return Disposition::Refuse(Refusal {
                code: rejection.code(),
                message: rejection.to_string(),
                print_contents: true,
            });
        }
    };
    match protection.gate(&path) {
        Some(rule) => Disposition::NeedsApproval { rule },
        None => Disposition::Allow,
    }
}

/// The folded form of a component with what Windows strips removed: the part from the first
/// `:` (streams), then trailing dots and spaces.
fn windows_key(component: &str) -> String {
    let key = protected_key(component);
    let key = key.split(':').next().unwrap_or_default();
    key.trim_end_matches(|c: char| c == '.' || c.is_whitespace())
        .to_owned()
}

/// `.git` under any spelling that some filesystem resolves to it: case, ignorable code points,
/// lookalikes, trailing dots or spaces, streams, and 8.3 short names (`GIT~1`, `.git~1`).
fn is_git_alias(component: &str) -> bool {
    let key = windows_key(component);
    if key == ".git" {
        return true;
    }
    let short = key.strip_prefix('.').unwrap_or(&key);
    short
        .strip_prefix("git~")
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// NTFS short names of `.gitmodules`: `GITMOD~N` and git's hashed `GI7EBA~N`.
fn is_gitmodules_alias(component: &str) -> bool {
    let key = windows_key(component);
    ["gitmod~", "gi7eba~"].iter().any(|prefix| {
        key.strip_prefix(prefix)
            .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Whether a lexical resolution of `raw` (empty and `.` components dropped, `..` popped,
/// either slash a separator, folded) names `.config/bork.json` or the `.config` folder that
/// holds it (deleting or writing over the folder would remove the file).
fn resolves_to_config(raw: &str) -> bool {
    let mut stack: Vec<String> = Vec::new();
    for component in raw.split(['/', '\\']) {
        match component {
            "" | "." => {}
            ".." => {
                stack.pop();
            }
            other => stack.push(windows_key(other)),
        }
    }
    match stack.as_slice() {
        [folder] => folder == ".config",
        [folder, file] => folder == ".config" && file == "bork.json",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protection() -> Protection {
        Protection::new(
            Some("ci/check.sh"),
            &[
                "Cargo.toml".to_owned(),
                "ci/*.sh".to_owned(),
                ".github/".to_owned(),
                "/build.rs".to_owned(),
            ],
            &Default::default(),
        )
        .expect("valid globs")
    }

    /// `Ok(None)` = allow, `Ok(Some(rule))` = gated, `Err((code, printed))` = refused.
    fn check(raw: &str, expect: Result<Option<&str>, (&str, bool)>) {
        let got = match classify(raw, &protection()) {
            Disposition::Allow => Ok(None),
            Disposition::NeedsApproval { rule } => Ok(Some(rule)),
            Disposition::Refuse(refusal) => Err((refusal.code, refusal.print_contents)),
        };
        let expect = expect.map(|rule| rule.map(str::to_owned));
        assert_eq!(got, expect, "classify({raw:?})");
    }

    #[test]
    fn git_aliases_are_refused_silently() {
        for raw in [
            ".git",
            ".git/config",
            ".GIT/config",
            ".Git/hooks/pre-commit",
            ".gIT/HEAD",
            "sub/.git/config",
            "vendor/x/.GIT/hooks/post-checkout",
            "git~1/config",
            "GIT~1/hooks/x",
            ".git~1/x",
            ".git./config",
            ".git /config",
            ".git::$INDEX_ALLOCATION/config",
            ".git:x/config",
            ".g\u{200c}it/config",
            "\u{feff}.git/config",
            ".git\u{200d}/hooks/x",
            ".g\u{202e}it/x",
            ".gıt/config",
            ".gİt/config",
            ".gіt/config",
            "specs/../.git/hooks/pre-commit",
            "a\\.git\\x",
            "../.git",
        ] {
            check(raw, Err((CODE_GIT_DIR, false)));
        }
    }

    #[test]
    fn config_spellings_are_refused_with_contents() {
        for raw in [
            ".config/bork.json",
            "./.config/bork.json",
            ".config//bork.json",
            ".config/./bork.json",
            ".config/bork.json/",
            ".CONFIG/Bork.JSON",
            ".config/x/../bork.json",
            ".config/bork.json.",
            ".config/bork.json::$DATA",
            ".config\\bork.json",
            ".config",
            "./.config",
            ".config/",
            ".CONFIG",
            ".Config.",
            ".config/x/..",
            ".conf\u{200c}ig",
        ] {
            check(raw, Err((CODE_CONFIG_FILE, true)));
        }
    }

    #[test]
    fn invalid_paths_are_refused_with_contents() {
        for (raw, code) in [
            ("../x", "parent-component"),
            ("/etc/x", "absolute-path"),
            ("C:\\x", "backslash"),
            ("a\u{0}b", "control-character"),
            ("", "empty-path"),
            ("specs/../src/main.rs", "parent-component"),
            ("./Cargo.toml", "current-component"),
            ("CON", "device-name"),
            ("docs/\u{202e}gpj.exe", "invisible-character"),
        ] {
            check(raw, Err((code, true)));
        }
        check("GITMOD~1", Err((CODE_GITMODULES_ALIAS, true)));
    }

    #[test]
    fn gated_paths() {
        for (raw, rule) in [
            ("specs/x.md", "specs/**"),
            ("specs/core/deep/x.md", "specs/**"),
            ("SPECS/x.md", "specs/**"),
            ("Specs/x.md", "specs/**"),
            ("ſpecs/x.md", "specs/**"),
            ("ѕpecs/x.md", "specs/**"),
            ("specs", "specs/**"),
            ("specs/[a].md", "specs/**"),
            ("specs/*", "specs/**"),
            (".github/workflows/ci.yml", ".github/workflows/**"),
            (".github/actions/x/action.yml", ".github/actions/**"),
            ("agent.yaml", "agent.yaml"),
            ("sub/agent.yaml", "agent.yaml"),
            (".gitmodules", ".gitmodules"),
            ("ci/check.sh", "correctness-checker"),
            ("CI/Check.sh", "correctness-checker"),
            ("cargo.toml", "Cargo.toml"),
            ("crates/x/Cargo.toml", "Cargo.toml"),
            ("ci/other.sh", "ci/*.sh"),
            (".github/dependabot.yml", ".github/"),
            ("build.rs", "/build.rs"),
            (".gіthub/workflows/x.yml", ".github/workflows/**"),
        ] {
            check(raw, Ok(Some(rule)));
        }
    }

    #[test]
    fn ordinary_paths_are_allowed() {
        for raw in [
            "src/main.rs",
            "README.md",
            "docs/specs/x.md",
            "ci/sub/x.sh",
            "src/build.rs",
            "--exec=evil.sh",
            "-rf",
            ".config/bork.json~",
            ".config/bork.local.json",
            ".config/other.json",
            ".config/sub/bork.json",
            "sub/.config",
            ".configs",
            ".gitignore",
            ".github-pages/x",
            "github/workflows/x.yml",
            "git~/x",
            "specsheet.md",
        ] {
            check(raw, Ok(None));
        }
    }

    #[test]
    fn glob_metacharacters_in_a_checker_path_are_literal() {
        let protection = Protection::new(Some("./ci/[x]*.sh"), &[], &Default::default())
            .expect("escaped checker path compiles");
        assert_eq!(
            classify("ci/[x]*.sh", &protection),
            Disposition::NeedsApproval {
                rule: "correctness-checker".to_owned()
            }
        );
        assert_eq!(classify("ci/xa.sh", &protection), Disposition::Allow);
    }

    #[test]
    fn bad_user_glob_is_an_error() {
        assert!(Protection::new(None, &["a/[".to_owned()], &Default::default()).is_err());
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn classify_never_panics(raw in ".*") {
                let _ = classify(&raw, &Protection::new(None, &[], &Default::default()).expect("defaults compile"));
            }

            /// F2-style differential: any path whose folded components contain `.git` is
            /// never allowed.
            #[test]
            fn git_lookalikes_never_allowed(
                prefix in "[a-z]{0,3}",
                spelling in prop_oneof![
                    Just(".git"), Just(".GIT"), Just(".Git"), Just(".gıt"), Just(".gİt"),
                    Just(".g\u{200c}it"), Just(".git."), Just(".git "), Just("git~1"),
                    Just("GIT~12"), Just(".ǵit"),
                ],
                suffix in "[a-z]{1,3}",
            ) {
                let protection = Protection::new(None, &[], &Default::default()).expect("defaults compile");
                for raw in [
                    format!("{spelling}/{suffix}"),
                    format!("{prefix}/{spelling}/{suffix}"),
                    spelling.to_owned(),
                ] {
                    let disposition = classify(&raw, &protection);
                    prop_assert!(
                        matches!(disposition, Disposition::Refuse(_)),
                        "{:?} -> {:?}", raw, disposition
                    );
                }
            }
        }
    }
}
