//! Judge files: the checker and everything that decides what it does.
//!
//! A judge (the checker, the Verifier) runs code the model wrote, but what it *is* must stay
//! what the team approved: its own file and folder, the recipes and tool settings it loads
//! (`Makefile`, `.cargo/config.toml`, `conftest.py`, `.npmrc`, `package.json`'s `scripts`, ...),
//! the Verifier's `agent.yaml`, `.config/`, the dev container, and the `judge-files` globs.
//! This module owns that list ([`DEFAULTS`], [`KEYED`], the root modules that shadow Python's
//! standard library) and two uses of it:
//!
//! - [`JudgeRules`] / [`Matcher`]: which paths are judge files. `edit::policy` holds an edit to
//!   one for approval, like a spec.
//! - [`Baseline`]: the judge files of the approved revision (the tree a round starts from),
//!   by path, kind, mode and content. Before and after the judges of every iteration the tree
//!   is compared with it ([`Baseline::check`]); any difference (a file that slipped past the
//!   classification through an alias, one a judge wrote itself with `--sandbox none`, a new
//!   file in the checker's folder) makes the judge count as failed to run, naming the file. So a
//!   judge only ever runs what the team approved.
//!
//! Out of scope: code under test that detects the test and cheats (the reviewer's and the human
//! review's to catch).

pub use crate::edit::stdlib::STDLIB_SHADOW;
use crate::edit::stdlib::shadows_stdlib;
use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use globset::GlobSet;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The default judge files, gitignore-style (as `edits-require-approval`): a name alone matches at
/// any depth, a trailing `/` is a folder and everything below it. Each can be turned off, with a
/// reason, by naming it in `judge-files-exempt`.
pub const DEFAULTS: &[(&str, &str)] = &[
    ("Makefile", "make's recipes"),
    ("GNUmakefile", "make's recipes"),
    ("*.mk", "make's included recipes"),
    ("justfile", "just's recipes"),
    (".justfile", "just's recipes"),
    ("Taskfile.yml", "Task's recipes"),
    ("Taskfile.yaml", "Task's recipes"),
    (
        "**/.cargo/config.toml",
        "Cargo's settings (runners, rustflags, aliases)",
    ),
    (
        "**/.cargo/config",
        "Cargo's settings (runners, rustflags, aliases)",
    ),
    ("rust-toolchain", "the Rust toolchain"),
    ("rust-toolchain.toml", "the Rust toolchain"),
    ("conftest.py", "pytest's plugins and fixtures"),
    ("pytest.ini", "pytest's settings"),
    (".pytest.ini", "pytest's settings"),
    ("tox.ini", "tox's and pytest's settings"),
    ("noxfile.py", "nox's sessions"),
    ("setup.cfg", "pytest's and setuptools' settings"),
    ("sitecustomize.py", "Python start-up code"),
    ("usercustomize.py", "Python start-up code"),
    (".npmrc", "npm's settings (script-shell, ignore-scripts)"),
    (".yarnrc", "Yarn's settings"),
    (".yarnrc.yml", "Yarn's settings"),
    (".yarn/releases/", "the Yarn release `yarnPath` runs"),
    (".yarn/plugins/", "Yarn's plugins"),
    (".pnpmfile.cjs", "pnpm's hooks"),
    (".devcontainer/", "the dev container the judges run in"),
    (".devcontainer.json", "the dev container the judges run in"),
    (
        ".config/",
        "tool configuration (bork-ci's own file is never edited)",
    ),
];

/// Judge files where only part of the content decides what runs: a change to that part is a
/// judge change, the rest is ordinary code. `(file name, format, key path, rule name)`; the rule
/// name is also what `judge-files-exempt` names.
pub const KEYED: &[(&str, Format, &str, &str)] = &[
    ("package.json", Format::Json, "scripts", "package.json#scripts"),
    (
        "pyproject.toml",
        Format::Toml,
        "tool.pytest",
        "pyproject.toml#tool.pytest",
    ),
    (
        "pyproject.toml",
        Format::Toml,
        "tool.tox",
        "pyproject.toml#tool.tox",
    ),
];

/// Rule name of the checker's own folder.
pub const CHECKER_FOLDER: &str = "correctness-checker's folder";

/// How a keyed file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Json,
    Toml,
}

/// A keyed judge file larger than this is not parsed (its section reads as unreadable).
const MAX_KEYED_BYTES: u64 = 16 << 20;

/// One keyed rule, as resolved for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedRule {
    /// The file name it applies to, at any depth (`package.json`).
    pub file: String,
    pub format: Format,
    /// Dotted key path inside the file (`scripts`, `tool.pytest`).
    pub key: String,
    /// Rule name, for reports and `judge-files-exempt`.
    pub rule: String,
}

/// The judge files of one run: resolved once from the configuration, carried into the edit step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgeRules {
    /// Gitignore-style globs and the rule each reports.
    pub globs: Vec<(String, String)>,
    pub keyed: Vec<KeyedRule>,
    /// Whether root modules named like Python's standard library are judge files.
    pub stdlib_shadow: bool,
    /// What is code (`edit::code`): every other path is held, and compared with the approved
    /// revision before and after each judge. `None` (library callers): judge files only.
    #[serde(default)]
    pub code: Option<crate::edit::code::CodeRules>,
}

impl JudgeRules {
    /// The defaults less those `exempt` names, the checker's folder (not the root), and the
    /// user's `judge-files` globs. The checker itself and `agent.yaml` are gated by
    /// `edit::policy` already. An exemption that names no default is an error (its message).
    pub fn resolve(
        checker: Option<&str>,
        user: &[String],
        exempt: &BTreeMap<String, String>,
    ) -> Result<JudgeRules, String> {
        for (name, reason) in exempt {
            let known = DEFAULTS.iter().any(|(glob, _)| glob == name)
                || KEYED.iter().any(|(_, _, _, rule)| rule == name)
                || name == STDLIB_SHADOW;
            if !known {
                return Err(format!(
                    "`{name}` is not a default judge file; the defaults are: {}",
                    default_names().join(", ")
                ));
            }
            if reason.trim().is_empty() {
                return Err(format!(
                    "`{name}` needs a reason (why its edits need no approval)"
                ));
            }
        }
        let kept = |name: &str| !exempt.contains_key(name);
        let mut globs: Vec<(String, String)> = DEFAULTS
            .iter()
            .filter(|(glob, _)| kept(glob))
            .map(|(glob, _)| ((*glob).to_owned(), (*glob).to_owned()))
            .collect();
        if let Some(folder) = checker
            .map(crate::edit::glob::normalize_path)
            .and_then(|checker| checker.rsplit_once('/').map(|(folder, _)| folder.to_owned()))
            .filter(|folder| !folder.is_empty())
        {
            globs.push((
                format!("/{}/", globset::escape(&folder)),
                CHECKER_FOLDER.to_owned(),
            ));
        }
        globs.extend(user.iter().map(|glob| (glob.clone(), glob.clone())));
        let keyed = KEYED
            .iter()
            .filter(|(_, _, _, rule)| kept(rule))
            .map(|(file, format, key, rule)| KeyedRule {
                file: (*file).to_owned(),
                format: *format,
                key: (*key).to_owned(),
                rule: (*rule).to_owned(),
            })
            .collect();
        Ok(JudgeRules {
            globs,
            keyed,
            stdlib_shadow: kept(STDLIB_SHADOW),
            code: None,
        })
    }

    /// Compiles the rules.
    pub fn matcher(&self) -> Result<Matcher, crate::edit::glob::RuleError> {
        let mut builder = globset::GlobSetBuilder::new();
        let mut rules = Vec::new();
        for (glob, rule) in &self.globs {
            crate::edit::glob::add_rule(
                &mut builder,
                &mut rules,
                &crate::edit::glob::normalize_glob(glob),
                rule,
            )?;
        }
        let code = match &self.code {
            Some(code) => Some(code.matcher().map_err(crate::edit::glob::RuleError)?),
            None => None,
        };
        Ok(Matcher {
            set: builder.build()?,
            rules,
            keyed: self.keyed.clone(),
            stdlib_shadow: self.stdlib_shadow,
            code,
            excluded: Vec::new(),
        })
    }
}

/// Every name `judge-files-exempt` accepts.
pub fn default_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = DEFAULTS.iter().map(|(glob, _)| *glob).collect();
    names.extend(KEYED.iter().map(|(_, _, _, rule)| *rule));
    names.push(STDLIB_SHADOW);
    names
}

/// What a path is to the judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgeMatch<'a> {
    /// The whole file decides what a judge does; `rule` names why.
    Whole { rule: &'a str },
    /// Only the sections of these keyed rules do.
    Keyed,
}

/// Compiled [`JudgeRules`].
#[derive(Debug, Clone)]
pub struct Matcher {
    set: GlobSet,
    rules: Vec<String>,
    keyed: Vec<KeyedRule>,
    stdlib_shadow: bool,
    /// What is code: with it, every path that is not code belongs to the approved revision too.
    code: Option<crate::edit::code::CodeMatcher>,
    /// Folders below the repository that are the runner's own (an artifact root inside it).
    excluded: Vec<String>,
}

impl Matcher {
    /// The compiled code rules, when the run states them.
    pub(crate) fn code_matcher(&self) -> Option<&crate::edit::code::CodeMatcher> {
        self.code.as_ref()
    }

    /// Leaves out of the comparison a folder below the repository that is bork-ci's own (the
    /// artifact root, when it lies inside the repository).
    pub fn excluding(mut self, folder: String) -> Self {
        self.excluded.push(folder);
        self
    }

    fn is_excluded(&self, path: &str) -> bool {
        self.excluded.iter().any(|folder| {
            path == folder
                || path
                    .strip_prefix(folder.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// What `folded` is to the judges: `folded` is a repository path whose components went
    /// through `edit::path::protected_key` (so case and lookalike spellings meet the rules).
    pub fn classify(&self, folded: &str) -> Option<JudgeMatch<'_>> {
        // Most paths match no rule: the one-pass test first, the list of rules only for a match.
        if self.set.is_match(folded)
            && let Some(index) = self.set.matches(folded).into_iter().min()
        {
            return self.rules.get(index).map(|rule| JudgeMatch::Whole { rule });
        }
        if self.stdlib_shadow && shadows_stdlib(folded) {
            return Some(JudgeMatch::Whole { rule: STDLIB_SHADOW });
        }
        let name = folded.rsplit('/').next().unwrap_or(folded);
        if self.keyed.iter().any(|rule| rule.file == name) {
            return Some(JudgeMatch::Keyed);
        }
        None
    }

    /// The first keyed rule of `folded` whose section differs between `old` and `new` (a file
    /// that is absent is `None`; one that cannot be read counts as different).
    pub fn keyed_change(&self, folded: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> Option<&str> {
        let name = folded.rsplit('/').next().unwrap_or(folded);
        self.keyed
            .iter()
            .filter(|rule| rule.file == name)
            .find(|rule| section(rule, old) != section(rule, new))
            .map(|rule| rule.rule.as_str())
    }

    fn keyed_sections(&self, folded: &str, bytes: Option<&[u8]>) -> String {
        let name = folded.rsplit('/').next().unwrap_or(folded);
        self.keyed
            .iter()
            .filter(|rule| rule.file == name)
            .map(|rule| format!("{}={:?}\n", rule.rule, section(rule, bytes)))
            .collect()
    }
}

/// Folds a repository path the way `edit::policy` does before matching.
pub use crate::edit::code::fold;

/// The section `rule` names in `bytes`, canonical; `None` when the file or the key is absent,
/// `Some("<unreadable>")` when the file does not parse.
fn section(rule: &KeyedRule, bytes: Option<&[u8]>) -> Option<String> {
    const UNREADABLE: &str = "<unreadable>";
    let bytes = bytes?;
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Some(UNREADABLE.to_owned());
    };
    let value: serde_json::Value = match rule.format {
        Format::Json => match serde_json::from_str(text) {
            Ok(value) => value,
            Err(_) => return Some(UNREADABLE.to_owned()),
        },
        Format::Toml => match toml::from_str::<toml::Value>(text) {
            Ok(value) => match serde_json::to_value(value) {
                Ok(value) => value,
                Err(_) => return Some(UNREADABLE.to_owned()),
            },
            Err(_) => return Some(UNREADABLE.to_owned()),
        },
    };
    let mut node = &value;
    for part in rule.key.split('.') {
        node = node.get(part)?;
    }
    Some(node.to_string())
}

/// One judge file as the approved revision has it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        mode: u32,
        sha256: String,
    },
    /// A keyed file: only its sections count.
    Sections(String),
    Symlink {
        target: String,
        resolved: Option<String>,
    },
    Folder,
    Other {
        mode: u32,
    },
}

/// The judge files of the approved revision, by path, and (with code rules) every path that
/// is not code.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Baseline {
    entries: BTreeMap<String, Entry>,
    /// The regular files' identity and change time at capture: unchanged, they are not hashed
    /// again.
    stats: BTreeMap<String, Stat>,
    /// The test files of the approved revision (`edit::code`'s tests).
    tests: std::collections::BTreeSet<String>,
}

/// What proves a regular file unchanged without reading it: the change time cannot be set
/// back by a process, and any write or rename moves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    dev: u64,
    ino: u64,
    size: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
}

impl Stat {
    fn of(meta: &std::fs::Metadata) -> Stat {
        Stat {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mtime: (meta.mtime(), meta.mtime_nsec()),
        }
    }
}

/// A judge file in the tree that is not what the approved revision has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the judge file `{path}` {how} since the approved revision ({rule}); a judge runs only what the team approved, so it was not run (revert the change, or propose it as an edit, which is held for approval)"
)]
pub struct Drift {
    pub path: String,
    pub how: &'static str,
    pub rule: String,
}

impl Baseline {
    /// Records the judge files of the tree at `repo` as they are now.
    pub fn capture(repo: &Path, matcher: &Matcher) -> std::io::Result<Baseline> {
        let mut entries = BTreeMap::new();
        let mut stats = BTreeMap::new();
        let mut tests = std::collections::BTreeSet::new();
        visit_judged(repo, matcher, None, &mut |found| {
            if found.test {
                tests.insert(found.path.clone());
            }
            if let Some(stat) = found.stat {
                stats.insert(found.path.clone(), stat);
            }
            entries.insert(found.path, found.entry);
        })?;
        Ok(Baseline {
            entries,
            stats,
            tests,
        })
    }

    /// The test files of the approved revision: a change to or a deletion of one is held.
    pub fn tests(&self) -> &std::collections::BTreeSet<String> {
        &self.tests
    }

    /// How many judge files the approved revision has.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the approved revision has no judge file.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Compares the tree at `repo` with the approved revision: the same paths, of the same kind,
    /// mode and content. Returns the first difference, in path order.
    pub fn check(&self, repo: &Path, matcher: &Matcher) -> std::io::Result<Result<(), Drift>> {
        let mut now: BTreeMap<String, (Entry, String)> = BTreeMap::new();
        visit_judged(repo, matcher, Some(self), &mut |found| {
            // A new test file is the model's to add (a judge file never is).
            if found.test && !found.judge && !self.entries.contains_key(&found.path) {
                return;
            }
            now.insert(found.path, (found.entry, found.rule));
        })?;
        let mut drifts = Vec::new();
        for (path, (entry, rule)) in &now {
            match self.entries.get(path) {
                None => drifts.push(Drift {
                    path: path.clone(),
                    how: "was added",
                    rule: rule.clone(),
                }),
                Some(approved) if approved != entry => drifts.push(Drift {
                    path: path.clone(),
                    how: describe_change(approved, entry),
                    rule: rule.clone(),
                }),
                Some(_) => {}
            }
        }
        for path in self.entries.keys() {
            if !now.contains_key(path) {
                let rule = matcher
                    .classify(&fold(path))
                    .map(|found| match found {
                        JudgeMatch::Whole { rule } => rule.to_owned(),
                        JudgeMatch::Keyed => "keyed judge file".to_owned(),
                    })
                    .unwrap_or_else(|| {
                        if self.tests.contains(path) {
                            crate::edit::code::APPROVED_TEST.to_owned()
                        } else {
                            crate::edit::code::NOT_CODE.to_owned()
                        }
                    });
                drifts.push(Drift {
                    path: path.clone(),
                    how: "was removed",
                    rule,
                });
            }
        }
        drifts.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(match drifts.into_iter().next() {
            Some(drift) => Err(drift),
            None => Ok(()),
        })
    }
}

fn describe_change(approved: &Entry, now: &Entry) -> &'static str {
    match (approved, now) {
        (Entry::File { sha256: a, .. }, Entry::File { sha256: b, .. }) if a == b => "changed its mode",
        (Entry::File { .. }, Entry::File { .. }) => "changed",
        (Entry::Sections(_), Entry::Sections(_)) => "changed a section judges read",
        (Entry::Symlink { .. }, Entry::Symlink { .. }) => "points elsewhere",
        _ => "changed its kind",
    }
}

/// A path the judges' comparison looks at, as [`visit_judged`] finds it.
struct Found {
    path: String,
    entry: Entry,
    /// The rule that makes it a judge file, or why it is not code.
    rule: String,
    /// A judge file (its entry is what the judges read of it).
    judge: bool,
    /// A test file (`edit::code`'s tests) git does not ignore.
    test: bool,
    /// A regular file that is not code and not a judge file: its identity and change time.
    stat: Option<Stat>,
}

/// Visits, in one walk of the tree below `repo` (`layout::walk`: never entering `.git` or
/// following a symlink), every judge file, ignored or not, and, when the rules state what code
/// is, every file git does not ignore that is not code (tests included). `approved`, when
/// given, lends the hash of a file that is not code whose identity and change time are those it
/// recorded.
fn visit_judged(
    repo: &Path,
    matcher: &Matcher,
    approved: Option<&Baseline>,
    visit: &mut dyn FnMut(Found),
) -> std::io::Result<()> {
    use crate::edit::code::{APPROVED_TEST, Kind};
    let code = matcher.code.as_ref();
    // A folder's entries come one after the other: what the code rules say of it is kept.
    let mut memo = None;
    crate::edit::layout::walk(repo, code.is_some(), &mut |seen| {
        let folded = fold(seen.path);
        let judge = matcher.classify(&folded);
        let not_code = match code {
            Some(code) if !seen.ignored && !seen.is_dir && !matcher.is_excluded(seen.path) => {
                match code.kind_in(&folded, &mut memo) {
                    Kind::Code => None,
                    Kind::Test => Some((APPROVED_TEST, true)),
                    Kind::NotCode { why } => Some((why, false)),
                }
            }
            _ => None,
        };
        // Gone between the folder's listing and now (`None`): the comparison sees it missing.
        let lstat = || match seen.full.symlink_metadata() {
            Ok(meta) => Ok(Some(meta)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        };
        let test = not_code.is_some_and(|(_, test)| test);
        let found = match (judge, not_code) {
            (None, None) => return Ok(()),
            (Some(found), _) => {
                let Some(meta) = lstat()? else {
                    return Ok(());
                };
                Found {
                    path: seen.path.to_owned(),
                    entry: match found {
                        JudgeMatch::Keyed if meta.is_file() => {
                            let bytes =
                                bork_ci_core::safe_fs::read_no_follow(seen.full, MAX_KEYED_BYTES).ok();
                            Entry::Sections(matcher.keyed_sections(&folded, bytes.as_deref()))
                        }
                        _ => entry_of(repo, seen.path, seen.full, &meta),
                    },
                    rule: match found {
                        JudgeMatch::Whole { rule } => rule.to_owned(),
                        JudgeMatch::Keyed => "keyed judge file".to_owned(),
                    },
                    judge: true,
                    test,
                    stat: None,
                }
            }
            (None, Some((why, _))) => {
                let Some(meta) = lstat()? else {
                    return Ok(());
                };
                let stat = meta.is_file().then(|| Stat::of(&meta));
                let known = approved.and_then(|baseline| {
                    let recorded = baseline.stats.get(seen.path)?;
                    (Some(*recorded) == stat).then(|| baseline.entries.get(seen.path).cloned())?
                });
                let entry = match known {
                    Some(entry) if matches!(entry, Entry::File { mode, .. } if mode == meta.mode() & 0o7777) => {
                        entry
                    }
                    _ => entry_of(repo, seen.path, seen.full, &meta),
                };
                Found {
                    path: seen.path.to_owned(),
                    entry,
                    rule: why.to_owned(),
                    judge: false,
                    test,
                    stat,
                }
            }
        };
        visit(found);
        Ok(())
    })
}

fn entry_of(repo: &Path, rel: &str, full: &Path, meta: &std::fs::Metadata) -> Entry {
    let mode = meta.mode() & 0o7777;
    let kind = meta.file_type();
    if kind.is_dir() {
        Entry::Folder
    } else if kind.is_symlink() {
        let target = std::fs::read_link(full)
            .map(|target| target.to_string_lossy().into_owned())
            .unwrap_or_default();
        // What it names inside the repository decides what runs: its content counts too.
        let resolved =
            crate::edit::identity::resolve(repo, rel).and_then(|inside| hash_file(&repo.join(inside)).ok());
        Entry::Symlink { target, resolved }
    } else if kind.is_file() {
        Entry::File {
            mode,
            sha256: hash_file(full).unwrap_or_else(|error| format!("<unreadable: {error}>")),
        }
    } else {
        Entry::Other { mode }
    }
}

/// sha256 of a regular file's content, streamed.
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut file = bork_ci_core::safe_fs::open_no_follow(path)?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = file.read(&mut buffer)?;
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    Ok(hex::encode(hasher.finalize()))
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    fn rules(checker: Option<&str>) -> Matcher {
        JudgeRules::resolve(checker, &["tools/gen/".to_owned()], &BTreeMap::new())
            .expect("resolves")
            .matcher()
            .expect("compiles")
    }

    fn is_judge(matcher: &Matcher, path: &str) -> bool {
        matches!(matcher.classify(&fold(path)), Some(JudgeMatch::Whole { .. }))
    }

    #[test]
    fn defaults_cover_the_toolchains() {
        let m = rules(Some("checks/run.sh"));
        for path in [
            "Makefile",
            "sub/dir/Makefile",
            "GNUmakefile",
            "MAKEFILE",
            "rules/common.mk",
            "justfile",
            "Taskfile.yml",
            ".cargo/config.toml",
            "crates/a/.cargo/config",
            "rust-toolchain.toml",
            "rust-toolchain",
            "conftest.py",
            "tests/unit/conftest.py",
            "pytest.ini",
            "tox.ini",
            "noxfile.py",
            "setup.cfg",
            ".npmrc",
            "web/.npmrc",
            ".yarnrc",
            ".yarnrc.yml",
            ".yarn/releases/yarn-4.cjs",
            ".devcontainer/devcontainer.json",
            ".devcontainer/Dockerfile",
            ".devcontainer.json",
            ".config/other.toml",
            "checks/run.sh",
            "checks/lib/helpers.sh",
            "checks/json.py",
            "tools/gen/x.py",
            "json.py",
            "os/__init__.py",
            "Json.py",
            "ssl.cpython-311-x86_64-linux-gnu.so",
        ] {
            assert!(is_judge(&m, path), "{path} should be a judge file");
        }
        for path in [
            "src/main.rs",
            "Cargo.toml",
            "src/json.py",
            "os/path.py",
            "tests/test_app.py",
            "README.md",
            "checksum.txt",
            "mymodule.py",
        ] {
            assert!(!is_judge(&m, path), "{path} should not be a judge file");
        }
        assert_eq!(m.classify("package.json"), Some(JudgeMatch::Keyed));
        assert_eq!(m.classify("web/pyproject.toml"), Some(JudgeMatch::Keyed));
    }

    #[test]
    fn a_root_checker_has_no_folder_rule() {
        let m = rules(Some("check.sh"));
        assert!(!is_judge(&m, "src/lib.sh"));
        assert!(!is_judge(&m, "anything.sh"));
    }

    #[test]
    fn exemptions_need_a_known_name_and_a_reason() {
        let exempt = |name: &str, reason: &str| {
            JudgeRules::resolve(None, &[], &BTreeMap::from([(name.to_owned(), reason.to_owned())]))
        };
        let rules = exempt("setup.cfg", "only flake8 settings live there").expect("known");
        let m = rules.matcher().expect("compiles");
        assert!(!is_judge(&m, "setup.cfg"));
        assert!(is_judge(&m, "tox.ini"));
        assert!(exempt("setup.cfg", "  ").is_err());
        assert!(
            exempt("nonsense.txt", "why")
                .unwrap_err()
                .contains("not a default")
        );
        let rules = exempt("package.json#scripts", "no scripts run").expect("known");
        assert_eq!(rules.matcher().expect("compiles").classify("package.json"), None);
        let rules = exempt(STDLIB_SHADOW, "no Python here").expect("known");
        assert!(!is_judge(&rules.matcher().expect("compiles"), "json.py"));
    }

    #[test]
    fn keyed_sections_decide() {
        let m = rules(None);
        let old = br#"{"name":"a","scripts":{"test":"node test.js"},"dependencies":{}}"#;
        let deps = br#"{"name":"a","scripts":{"test":"node test.js"},"dependencies":{"x":"1"}}"#;
        let scripts = br#"{"name":"a","scripts":{"test":"true"}}"#;
        assert_eq!(m.keyed_change("package.json", Some(old), Some(deps)), None);
        assert_eq!(
            m.keyed_change("package.json", Some(old), Some(scripts)),
            Some("package.json#scripts")
        );
        assert_eq!(
            m.keyed_change("package.json", Some(old), Some(b"not json")),
            Some("package.json#scripts")
        );
        assert_eq!(
            m.keyed_change("package.json", Some(old), None),
            Some("package.json#scripts")
        );
        assert_eq!(m.keyed_change("package.json", None, Some(b"{}")), None);
        let toml_old = b"[project]\nname='a'\n[tool.pytest.ini_options]\naddopts='-q'\n";
        let toml_new = b"[project]\nname='a'\n[tool.pytest.ini_options]\naddopts='-p evil'\n";
        assert_eq!(
            m.keyed_change("pyproject.toml", Some(toml_old), Some(toml_new)),
            Some("pyproject.toml#tool.pytest")
        );
    }

    #[test]
    fn baseline_sees_changes_additions_removals_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("checks")).expect("mkdir");
        std::fs::write(root.join("checks/run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::write(root.join("Makefile"), "check:\n\ttrue\n").expect("write");
        std::fs::write(root.join("package.json"), r#"{"scripts":{"test":"x"}}"#).expect("write");
        std::fs::write(root.join("main.py"), "print(1)\n").expect("write");
        let m = rules(Some("checks/run.sh"));
        let baseline = Baseline::capture(root, &m).expect("captures");
        assert!(baseline.check(root, &m).expect("walks").is_ok());
        // Ordinary code and non-script parts of package.json are not judge files.
        std::fs::write(root.join("main.py"), "print(2)\n").expect("write");
        std::fs::write(
            root.join("package.json"),
            r#"{"scripts":{"test":"x"},"dependencies":{"a":"1"}}"#,
        )
        .expect("write");
        assert!(baseline.check(root, &m).expect("walks").is_ok());
        std::fs::write(root.join("checks/json.py"), "").expect("write");
        let drift = baseline.check(root, &m).expect("walks").unwrap_err();
        assert_eq!((drift.path.as_str(), drift.how), ("checks/json.py", "was added"));
        std::fs::remove_file(root.join("checks/json.py")).expect("rm");
        std::fs::set_permissions(root.join("Makefile"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let drift = baseline.check(root, &m).expect("walks").unwrap_err();
        assert_eq!((drift.path.as_str(), drift.how), ("Makefile", "changed its mode"));
        std::fs::set_permissions(root.join("Makefile"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        std::fs::write(root.join("Makefile"), "check:\n\tfalse\n").expect("write");
        assert_eq!(
            baseline.check(root, &m).expect("walks").unwrap_err().how,
            "changed"
        );
        std::fs::write(root.join("Makefile"), "check:\n\ttrue\n").expect("write");
        std::fs::set_permissions(root.join("Makefile"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        std::fs::write(root.join("package.json"), r#"{"scripts":{"test":"true"}}"#).expect("write");
        assert_eq!(
            baseline.check(root, &m).expect("walks").unwrap_err().path,
            "package.json"
        );
        std::fs::write(root.join("package.json"), r#"{"scripts":{"test":"x"}}"#).expect("write");
        std::fs::remove_file(root.join("checks/run.sh")).expect("rm");
        std::fs::write(root.join("src.sh"), "#!/bin/sh\nexit 0\n").expect("write");
        std::os::unix::fs::symlink("../src.sh", root.join("checks/run.sh")).expect("symlink");
        assert_eq!(
            baseline.check(root, &m).expect("walks").unwrap_err().how,
            "changed its kind"
        );
    }

    #[test]
    fn one_walk_compares_judge_files_ignored_or_not_and_what_git_keeps_that_is_not_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for (path, text) in [
            (".gitignore", "build/\nnode_modules/\n"),
            ("src/app.py", "print(1)\n"),
            ("requirements.txt", "pytest==8\n"),
            ("tests/test_app.py", "def test(): pass\n"),
            ("build/notes.txt", "scratch\n"),
            ("web/node_modules/pkg/conftest.py", "approved\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().expect("parent")).expect("mkdir");
            std::fs::write(root.join(path), text).expect("write");
        }
        let mut rules = JudgeRules::resolve(None, &[], &BTreeMap::new()).expect("resolves");
        rules.code = Some(crate::edit::code::CodeRules {
            code: vec!["src/".to_owned()],
            tests: vec!["tests/".to_owned()],
            ..Default::default()
        });
        let m = rules.matcher().expect("compiles");
        // Seven folders: the root, src, tests, build, web, web/node_modules, .../pkg.
        let folders = 7;
        let reads = |run: &mut dyn FnMut()| {
            crate::edit::layout::FOLDERS_READ.with(|read| read.set(0));
            run();
            crate::edit::layout::FOLDERS_READ.with(std::cell::Cell::get)
        };
        let mut baseline = Baseline::default();
        assert_eq!(
            reads(&mut || baseline = Baseline::capture(root, &m).expect("captures")),
            folders
        );
        assert!(baseline.tests().contains("tests/test_app.py"));
        assert_eq!(
            reads(&mut || assert!(baseline.check(root, &m).expect("walks").is_ok())),
            folders
        );
        // Code, a new test and what git ignores (not a judge file) are the model's.
        std::fs::write(root.join("src/app.py"), "print(2)\n").expect("write");
        std::fs::write(root.join("tests/test_new.py"), "def test(): pass\n").expect("write");
        std::fs::write(root.join("build/notes.txt"), "other\n").expect("write");
        assert!(baseline.check(root, &m).expect("walks").is_ok());
        // A judge file is compared even where git ignores it.
        std::fs::write(root.join("web/node_modules/pkg/conftest.py"), "evil\n").expect("write");
        let drift = baseline.check(root, &m).expect("walks").unwrap_err();
        assert_eq!(
            (drift.path.as_str(), drift.how),
            ("web/node_modules/pkg/conftest.py", "changed")
        );
        std::fs::write(root.join("web/node_modules/pkg/conftest.py"), "approved\n").expect("write");
        // What is not code, and an approved test, are the approved revision's.
        std::fs::write(root.join("requirements.txt"), "pytest-evil==1\n").expect("write");
        let drift = baseline.check(root, &m).expect("walks").unwrap_err();
        assert_eq!((drift.path.as_str(), drift.how), ("requirements.txt", "changed"));
        std::fs::write(root.join("requirements.txt"), "pytest==8\n").expect("write");
        std::fs::remove_file(root.join("tests/test_app.py")).expect("rm");
        let drift = baseline.check(root, &m).expect("walks").unwrap_err();
        assert_eq!(
            (drift.path.as_str(), drift.how),
            ("tests/test_app.py", "was removed")
        );
    }
}
