//! What the model may change: code, and nothing else.
//!
//! The rule is stated as what is allowed, not as what is dangerous. The `code` globs
//! (`.config/bork.json`'s `code`, or derived from the repository by `edit::layout`) name the files
//! the model may create, change or delete without approval; the `tests` globs name test files,
//! which it may add, while a change to or a deletion of a test the team approved is held (it is
//! part of the judge). Every other path is *not code*: it decides how the code is built, run or
//! judged (manifests, lock files, tool settings, dotfiles, scripts the judges run, what setup
//! installs, the dev container), and an edit to it is held for approval like a spec. Some paths
//! are never code whatever a glob says ([`NEVER_CODE`], and what the checker, the Verifier,
//! setup and the dev container read): they load into the tools themselves.
//!
//! Globs are gitignore-style (as `.gitignore`, `!` negates, the last match wins), matched
//! without case against paths folded the way `edit::path::protected_key` folds them, so a
//! spelling variant of a never-code name is never code. Pure.

use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use serde::{Deserialize, Serialize};

use super::path::protected_key;

/// What a held edit of a path that is not code says.
pub const NOT_CODE: &str = "not code: decides how the code is built, run or judged";
/// What a held change to an approved test says.
pub const APPROVED_TEST: &str = "an approved test: a change to or deletion of it changes the judge";

/// Paths that are never code, whatever the `code` globs say, with the reason shown when an edit
/// to one is held. Gitignore-style; a name alone matches at any depth.
pub const NEVER_CODE: &[(&str, &str)] = &[
    // Dotfiles and dot-folders: tool settings (.gitattributes, .cargo/, .npmrc, .eslintrc, ...).
    (".*", "a dotfile: tool settings"),
    // Build files, manifests and lock files: they decide what is built, installed and run.
    ("Cargo.toml", "Cargo's manifest"),
    ("Cargo.lock", "a lock file"),
    ("build.rs", "a Cargo build script"),
    ("rustfmt.toml", "rustfmt's settings"),
    ("clippy.toml", "Clippy's settings"),
    ("deny.toml", "cargo-deny's settings"),
    ("rust-toolchain", "the Rust toolchain"),
    ("rust-toolchain.toml", "the Rust toolchain"),
    ("*.toml", "a settings file"),
    ("*.lock", "a lock file"),
    ("*.ini", "a settings file"),
    ("*.cfg", "a settings file"),
    ("*.config.*", "a tool's settings"),
    ("Makefile", "make's recipes"),
    ("makefile", "make's recipes"),
    ("GNUmakefile", "make's recipes"),
    ("*.mk", "make's recipes"),
    ("justfile", "just's recipes"),
    ("Taskfile.yml", "Task's recipes"),
    ("Taskfile.yaml", "Task's recipes"),
    ("CMakeLists.txt", "CMake's build"),
    ("*.cmake", "CMake's build"),
    ("meson.build", "Meson's build"),
    ("BUILD", "a Bazel build file"),
    ("BUILD.bazel", "a Bazel build file"),
    ("WORKSPACE", "a Bazel workspace"),
    ("*.bzl", "Bazel's rules"),
    ("Dockerfile", "a container build"),
    ("Dockerfile.*", "a container build"),
    ("*.Dockerfile", "a container build"),
    ("Containerfile", "a container build"),
    ("docker-compose*.yml", "a container set-up"),
    ("docker-compose*.yaml", "a container set-up"),
    ("compose.yml", "a container set-up"),
    ("compose.yaml", "a container set-up"),
    ("package.json", "npm's manifest (scripts, dependencies)"),
    ("package-lock.json", "a lock file"),
    ("npm-shrinkwrap.json", "a lock file"),
    ("pnpm-lock.yaml", "a lock file"),
    ("pnpm-workspace.yaml", "pnpm's workspace"),
    ("tsconfig*.json", "TypeScript's settings"),
    ("jsconfig.json", "JavaScript's settings"),
    ("jest.setup.*", "jest's set-up"),
    ("vitest.setup.*", "vitest's set-up"),
    ("setupTests.*", "the test runner's set-up"),
    ("go.mod", "Go's module file"),
    ("go.sum", "Go's checksums"),
    ("go.work", "Go's workspace"),
    ("go.work.sum", "Go's checksums"),
    ("pyproject.toml", "Python's project file"),
    ("setup.py", "Python's build"),
    ("requirements*.txt", "Python's requirements"),
    ("requirements/", "Python's requirements"),
    ("constraints*.txt", "Python's constraints"),
    ("Pipfile", "Python's requirements"),
    ("MANIFEST.in", "Python's build"),
    ("conftest.py", "pytest's plugins and fixtures"),
    ("noxfile.py", "nox's sessions"),
    ("sitecustomize.py", "Python start-up code"),
    ("usercustomize.py", "Python start-up code"),
    ("*.pth", "Python start-up code"),
    (
        "*.dist-info",
        "an installed package's metadata (entry points, plugins)",
    ),
    (
        "*.egg-info",
        "an installed package's metadata (entry points, plugins)",
    ),
    ("*.egg-link", "an installed package's link"),
    // Modules named like a test runner or its plugins: imported instead of the real one.
    ("pytest.py", "named like the test runner"),
    ("pytest", "named like the test runner"),
    ("_pytest", "named like the test runner"),
    ("pytest_*", "named like a test runner's plugin"),
    ("py.py", "named like a test runner's module"),
    ("pluggy.py", "named like a test runner's module"),
    ("pluggy", "named like a test runner's module"),
    ("unittest.py", "named like the test runner"),
    ("nose.py", "named like the test runner"),
    ("nose2.py", "named like the test runner"),
    ("hypothesis.py", "named like a test library"),
    ("coverage.py", "named like a test tool"),
    // Root modules: `python -m` and scripts run from the root import them before any package.
    ("/*.py", "a root module: imported by every tool run from the root"),
    (
        "/*.pyc",
        "a root module: imported by every tool run from the root",
    ),
    ("/*.so", "a root module: imported by every tool run from the root"),
    (
        "/*.pyd",
        "a root module: imported by every tool run from the root",
    ),
    ("Gemfile", "Ruby's dependencies"),
    ("Gemfile.lock", "a lock file"),
    ("*.gemspec", "Ruby's package"),
    ("Rakefile", "rake's tasks"),
    ("pom.xml", "Maven's build"),
    ("build.gradle*", "Gradle's build"),
    ("settings.gradle*", "Gradle's build"),
    ("gradlew", "Gradle's wrapper"),
    ("gradle/", "Gradle's wrapper"),
    ("mvnw", "Maven's wrapper"),
    ("*.csproj", "a .NET project"),
    ("*.sln", "a .NET solution"),
    ("Directory.Build.*", "MSBuild's settings"),
    ("*.nix", "Nix's build"),
    ("flake.lock", "a lock file"),
    ("vendor/", "vendored dependencies"),
    ("third_party/", "vendored dependencies"),
    ("node_modules/", "installed dependencies"),
];

/// Test files: a path matching one holds only tests (the defaults of the `tests` globs).
pub const TEST_GLOBS: &[&str] = &[
    "tests/",
    "test/",
    "__tests__/",
    "testdata/",
    "__snapshots__/",
    "*.snap",
    "test_*.py",
    "*_test.py",
    "*_test.go",
    "*.test.*",
    "*.spec.js",
    "*.spec.jsx",
    "*.spec.ts",
    "*.spec.tsx",
    "*.spec.mjs",
    "*.spec.cjs",
    "*_spec.rb",
    "spec/",
    "*Test.java",
    "*Tests.java",
    "*Test.kt",
    "*.bats",
    "test_*.sh",
    "*_test.sh",
];

/// Where the `code` globs of a run came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeSource {
    /// `.config/bork.json`'s `code`.
    Configured,
    /// Derived from the repository (`edit::layout`).
    #[default]
    Derived,
}

/// The code rules of one run: resolved once (configured, or derived from the repository),
/// carried into the edit step with the judge rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CodeRules {
    /// Gitignore-style globs of what the model may create, change or delete.
    pub code: Vec<String>,
    /// Gitignore-style globs of test files: the model may add one; a change to or deletion of
    /// one the team approved is held.
    pub tests: Vec<String>,
    /// Paths that are never code beyond [`NEVER_CODE`] (what the judges, setup and the dev
    /// container read), each with its reason; gitignore-style.
    pub never: Vec<(String, String)>,
    /// The names in `judge-files-exempt`: a default judge file the team exempted (with a reason)
    /// is code, its edits need no approval; the same name in [`NEVER_CODE`] is turned off too.
    pub exempt: Vec<String>,
    pub source: CodeSource,
}

/// What one path is to the edit policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind<'a> {
    /// The model may create, change or delete it.
    Code,
    /// A test file: the model may add it; changing or deleting an approved one is held.
    Test,
    /// Not code; `why` says what it is.
    NotCode { why: &'a str },
}

impl CodeRules {
    /// Compiles the rules; an error names the bad glob.
    pub fn matcher(&self) -> Result<CodeMatcher, String> {
        let mut never_rules: Vec<(String, String)> = NEVER_CODE
            .iter()
            .filter(|(glob, _)| !self.exempt.iter().any(|name| name == glob))
            .map(|(glob, why)| ((*glob).to_owned(), (*why).to_owned()))
            .collect();
        never_rules.extend(self.never.iter().cloned());
        let globs: Vec<String> = never_rules.iter().map(|(glob, _)| glob.clone()).collect();
        let never_any = if globs
            .iter()
            .any(|glob| fold_glob(glob).trim_start().starts_with('!'))
        {
            None
        } else {
            // Every glob compiles here, so each compiles alone too, when it is asked for.
            Some(gitignore(&globs)?)
        };
        let mut never = Vec::with_capacity(never_rules.len());
        for (glob, why) in never_rules {
            let set = std::sync::OnceLock::new();
            if never_any.is_none() {
                // Every rule is asked one by one: compiled now, so a bad glob is named now.
                let _ = set.set(gitignore(std::slice::from_ref(&glob))?);
            }
            never.push(NeverRule { glob, why, set });
        }
        let exempt: Vec<String> = self
            .exempt
            .iter()
            .filter(|name| !name.contains('#') && name.as_str() != crate::edit::stdlib::STDLIB_SHADOW)
            .cloned()
            .collect();
        Ok(CodeMatcher {
            code: gitignore(&self.code)?,
            tests: gitignore(&self.tests)?,
            never,
            never_any,
            exempt: gitignore(&exempt)?,
        })
    }
}

/// Compiles gitignore-style globs, folded as paths are.
fn gitignore(globs: &[String]) -> Result<Gitignore, String> {
    let mut builder = GitignoreBuilder::new("/");
    builder
        .case_insensitive(true)
        .map_err(|error| error.to_string())?;
    builder.allow_unclosed_class(false);
    for glob in globs {
        let line = fold_glob(glob);
        if line.trim().is_empty() {
            continue;
        }
        builder
            .add_line(None, &line)
            .map_err(|error| format!("bad glob `{glob}`: {error}"))?;
    }
    builder.build().map_err(|error| error.to_string())
}

/// A glob with each component folded like a path component (`!` and a leading `/` kept).
fn fold_glob(glob: &str) -> String {
    let (negated, body) = match glob.strip_prefix('!') {
        Some(body) => ("!", body),
        None => ("", glob),
    };
    let body = body
        .strip_prefix("./")
        .map_or(body.to_owned(), |rest| format!("/{rest}"));
    let folded: Vec<String> = body.split('/').map(protected_key).collect();
    format!("{negated}{}", folded.join("/"))
}

/// One never-code rule: its glob, its reason, and its own set, compiled the first time a path
/// is asked about it (about a hundred rules: compiling each for every matcher cost more than
/// the rest of a run's rules together, and most paths never get past `never_any`).
#[derive(Debug, Clone)]
struct NeverRule {
    glob: String,
    why: String,
    set: std::sync::OnceLock<Gitignore>,
}

impl NeverRule {
    fn selects(&self, folded: &str) -> bool {
        let set = self.set.get_or_init(|| {
            // `CodeRules::matcher` compiled every glob of `never_any`, this one among them.
            gitignore(std::slice::from_ref(&self.glob)).unwrap_or_else(|_| Gitignore::empty())
        });
        matches(set, folded)
    }
}

/// Compiled [`CodeRules`].
#[derive(Debug, Clone)]
pub struct CodeMatcher {
    code: Gitignore,
    tests: Gitignore,
    never: Vec<NeverRule>,
    /// Every never-code glob in one set, when none is a negation: a path it does not select is
    /// selected by no rule of `never`, which then need not be asked one by one (and whose sets
    /// need not be compiled; most paths are code).
    never_any: Option<Gitignore>,
    exempt: Gitignore,
}

impl CodeMatcher {
    /// What `folded` (a repository path whose components went through
    /// `edit::path::protected_key`) is: an exempted judge file is code; then never-code rules,
    /// then `code`, then `tests`.
    pub fn kind(&self, folded: &str) -> Kind<'_> {
        self.kind_in(folded, &mut None)
    }

    /// [`Self::kind`], the decisions about `folded`'s folder kept in `memo` for the next path
    /// in the same folder (a walk asks about a folder's files one after the other; each folder
    /// above a path is otherwise asked again for every file in it).
    pub fn kind_in(&self, folded: &str, memo: &mut Option<FolderMemo>) -> Kind<'_> {
        let folder = folded.rsplit_once('/').map_or("", |(folder, _)| folder);
        let memo = match memo {
            Some(memo) if memo.folder == folder => memo,
            _ => memo.insert(FolderMemo {
                folder: folder.to_owned(),
                exempt: Above::of(&self.exempt, folder),
                never_any: self.never_any.as_ref().map(|any| Above::of(any, folder)),
                code: Above::of(&self.code, folder),
                tests: Above::of(&self.tests, folder),
            }),
        };
        if memo.exempt.matches(&self.exempt, folded) {
            return Kind::Code;
        }
        let never = match (&self.never_any, memo.never_any) {
            (Some(any), Some(above)) if !above.matches(any, folded) => None,
            _ => self.never_rule(folded),
        };
        if let Some(why) = never {
            return Kind::NotCode { why };
        }
        // `src/` is on the import path of a src layout: a top-level module there named like the
        // standard library is imported instead of it, by the tools too.
        if let Some(module) = folded.strip_prefix("src/")
            && crate::edit::stdlib::shadows_stdlib(module)
        {
            return Kind::NotCode {
                why: "a top-level module of a src layout named like the standard library",
            };
        }
        if memo.code.matches(&self.code, folded) {
            return Kind::Code;
        }
        if memo.tests.matches(&self.tests, folded) {
            return Kind::Test;
        }
        Kind::NotCode { why: NOT_CODE }
    }

    /// The reason `folded` is never code, if it is.
    pub fn never_code(&self, folded: &str) -> Option<&str> {
        if let Some(any) = &self.never_any
            && !matches(any, folded)
        {
            return None;
        }
        self.never_rule(folded)
    }

    /// The first never-code rule that selects `folded`, asked one by one.
    fn never_rule(&self, folded: &str) -> Option<&str> {
        self.never
            .iter()
            .find(|rule| rule.selects(folded))
            .map(|rule| rule.why.as_str())
    }
}

/// What [`CodeMatcher::kind_in`] decided about one folder, for the paths in it.
#[derive(Debug, Clone)]
pub struct FolderMemo {
    folder: String,
    exempt: Above,
    never_any: Option<Above>,
    code: Above,
    tests: Above,
}

/// What one rule set says of the folders above a path (see [`matches`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Above {
    /// A negation matched one of them: nothing below is selected.
    Unselected,
    /// Whether a rule selected one of them.
    Open { selected: bool },
}

impl Above {
    /// Asks `rules` about `folder` and each folder above it.
    fn of(rules: &Gitignore, folder: &str) -> Above {
        if rules.is_empty() || folder.is_empty() {
            return Above::Open { selected: false };
        }
        let mut selected = false;
        let mut end = 0;
        loop {
            let next = folder[end..].find('/').map(|at| end + at);
            let prefix = &folder[..next.unwrap_or(folder.len())];
            match rules.matched(std::path::Path::new(prefix), true) {
                Match::Ignore(_) => selected = true,
                Match::Whitelist(_) => return Above::Unselected,
                Match::None => {}
            }
            match next {
                Some(at) => end = at + 1,
                None => return Above::Open { selected },
            }
        }
    }

    /// Whether `rules` select `folded`, a path in the folder this was asked about.
    fn matches(self, rules: &Gitignore, folded: &str) -> bool {
        if rules.is_empty() || folded.is_empty() {
            return false;
        }
        match self {
            Above::Unselected => false,
            Above::Open { selected } => match rules.matched(std::path::Path::new(folded), false) {
                Match::Ignore(_) => true,
                Match::Whitelist(_) => false,
                Match::None => selected,
            },
        }
    }
}

/// Whether the gitignore-style `rules` select `folded` or a folder above it. A negation that
/// matches the path or a folder above it always unselects (the stricter reading: `!gen/`
/// takes everything below `gen/` out, whatever else matches).
fn matches(rules: &Gitignore, folded: &str) -> bool {
    // Every prefix is a folder: a rule naming a folder covers everything below it.
    let folder = folded.rsplit_once('/').map_or("", |(folder, _)| folder);
    Above::of(rules, folder).matches(rules, folded)
}

/// Folds a repository path the way the policy matches it.
pub fn fold(path: &str) -> String {
    // An ASCII path folds component by component to its ASCII lower case (see
    // `protected_key`), and `/` stays: one allocation for the common case.
    if path.is_ascii() {
        return path.to_ascii_lowercase();
    }
    path.split('/').map(protected_key).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules asked about every folder of the path and the path itself, one by one.
    fn matches_by_prefixes(rules: &Gitignore, folded: &str) -> bool {
        if rules.is_empty() || folded.is_empty() {
            return false;
        }
        // Every prefix is a folder: a rule naming a folder covers everything below it.
        let mut selected = false;
        let mut prefix = String::new();
        let parts: Vec<&str> = folded.split('/').collect();
        for (index, part) in parts.iter().enumerate() {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            let is_dir = index + 1 < parts.len();
            match rules.matched(std::path::Path::new(&prefix), is_dir) {
                Match::Ignore(_) => selected = true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        selected
    }

    /// [`CodeMatcher::kind`] asked rule set by rule set, every folder of the path each time.
    fn kind_by_prefixes<'a>(matcher: &'a CodeMatcher, folded: &str) -> Kind<'a> {
        if matches_by_prefixes(&matcher.exempt, folded) {
            return Kind::Code;
        }
        if let Some(why) = matcher.never_code(folded) {
            return Kind::NotCode { why };
        }
        if let Some(module) = folded.strip_prefix("src/")
            && crate::edit::stdlib::shadows_stdlib(module)
        {
            return Kind::NotCode {
                why: "a top-level module of a src layout named like the standard library",
            };
        }
        if matches_by_prefixes(&matcher.code, folded) {
            return Kind::Code;
        }
        if matches_by_prefixes(&matcher.tests, folded) {
            return Kind::Test;
        }
        Kind::NotCode { why: NOT_CODE }
    }

    mod memo {
        use super::*;
        use proptest::prelude::*;

        const PARTS: &[&str] = &[
            "src",
            "tests",
            "gen",
            "lib",
            "node_modules",
            ".config",
            "vendor",
            "a",
            "Makefile",
            "conftest.py",
            "json.py",
            "test_a.py",
            "x.rs",
            "x.snap",
            "requirements.txt",
            "keep.rs",
        ];

        proptest! {
            #[test]
            fn the_folder_memo_decides_as_every_folder_asked_again(
                paths in proptest::collection::vec(
                    proptest::collection::vec(0..PARTS.len(), 1..5), 1..40),
                negations in any::<bool>(),
            ) {
                let mut code = vec!["src/".to_owned(), "lib/".to_owned(), "*.rs".to_owned()];
                let mut never = vec![("gen/".to_owned(), "generated".to_owned())];
                if negations {
                    code.extend(["!src/gen/".to_owned(), "!*.snap".to_owned()]);
                    never.push(("!vendor/a/".to_owned(), "not vendored".to_owned()));
                }
                let matcher = CodeRules {
                    code,
                    tests: TEST_GLOBS.iter().map(|glob| (*glob).to_owned()).collect(),
                    never,
                    exempt: vec!["Makefile".to_owned()],
                    source: CodeSource::Configured,
                }
                .matcher()
                .expect("compiles");
                let mut memo = None;
                for parts in paths {
                    let path: Vec<&str> = parts.iter().map(|index| PARTS[*index]).collect();
                    let folded = fold(&path.join("/"));
                    prop_assert_eq!(
                        matcher.kind_in(&folded, &mut memo),
                        kind_by_prefixes(&matcher, &folded),
                        "{}", folded
                    );
                }
            }
        }
    }

    fn rules(code: &[&str], tests: &[&str]) -> CodeMatcher {
        CodeRules {
            code: code.iter().map(|glob| (*glob).to_owned()).collect(),
            tests: tests.iter().map(|glob| (*glob).to_owned()).collect(),
            ..CodeRules::default()
        }
        .matcher()
        .expect("compiles")
    }

    fn kind(matcher: &CodeMatcher, path: &str) -> &'static str {
        match matcher.kind(&fold(path)) {
            Kind::Code => "code",
            Kind::Test => "test",
            Kind::NotCode { .. } => "not code",
        }
    }

    #[test]
    fn the_one_set_of_never_code_globs_finds_what_the_rules_one_by_one_find() {
        let mut rules = CodeRules {
            code: vec!["src/**".to_owned(), "*.py".to_owned()],
            ..CodeRules::default()
        };
        rules.never = vec![
            ("tools/gen/".to_owned(), "read by a setup command".to_owned()),
            ("build.sh".to_owned(), "the Verifier's step".to_owned()),
        ];
        let matcher = rules.matcher().expect("compiles");
        assert!(matcher.never_any.is_some());
        let one_by_one = |folded: &str| {
            matcher
                .never
                .iter()
                .find(|rule| {
                    matches(
                        &gitignore(std::slice::from_ref(&rule.glob)).expect("compiles"),
                        folded,
                    )
                })
                .map(|rule| rule.why.as_str())
        };
        for path in [
            "src/main.rs",
            "src/deep/x/y.rs",
            ".github/workflows/ci.yml",
            "src/.env",
            "Cargo.toml",
            "sub/Cargo.lock",
            "tools/gen/run.py",
            "tools/other.py",
            "build.sh",
            "a/build.sh",
            "pytest.ini",
            "node_modules/x/index.js",
            "README.md",
        ] {
            let folded = fold(path);
            assert_eq!(matcher.never_code(&folded), one_by_one(&folded), "{path}");
        }
    }

    #[test]
    fn a_never_code_rule_is_compiled_only_when_a_path_reaches_it() {
        let matcher = CodeRules {
            code: vec!["src/**".to_owned()],
            ..CodeRules::default()
        }
        .matcher()
        .expect("compiles");
        let compiled = |matcher: &CodeMatcher| {
            matcher
                .never
                .iter()
                .filter(|rule| rule.set.get().is_some())
                .count()
        };
        assert!(matcher.never.len() > 50);
        assert_eq!(compiled(&matcher), 0);
        assert_eq!(kind(&matcher, "src/main.rs"), "code");
        assert_eq!(compiled(&matcher), 0, "a code path asks no rule one by one");
        assert_eq!(kind(&matcher, "Cargo.toml"), "not code");
        let after_one = compiled(&matcher);
        assert!(after_one >= 1 && after_one < matcher.never.len(), "{after_one}");

        // With a negation among them, every rule is asked one by one: all compiled at once, and
        // a bad glob is named by `matcher`.
        let negated = CodeRules {
            never: vec![("!keep.txt".to_owned(), "kept".to_owned())],
            ..CodeRules::default()
        }
        .matcher()
        .expect("compiles");
        assert_eq!(compiled(&negated), negated.never.len());
        let bad = CodeRules {
            never: vec![
                ("!x".to_owned(), "x".to_owned()),
                ("a[".to_owned(), "bad".to_owned()),
            ],
            ..CodeRules::default()
        };
        assert!(bad.matcher().is_err());
    }

    #[test]
    fn an_ascii_path_folds_as_its_components_do() {
        for path in ["src/Main.RS", "A/B/C", ".Git/HEAD", "/x//Y/", "a b/\u{7f}Z"] {
            let by_component = path
                .split('/')
                .map(crate::edit::path::protected_key)
                .collect::<Vec<_>>()
                .join("/");
            assert_eq!(fold(path), by_component, "{path:?}");
        }
    }

    #[test]
    fn code_globs_select_and_never_code_wins() {
        let m = rules(
            &["src/**/*.rs", "src/**/*.py", "!src/generated/", "*.sh"],
            &["tests/", "test_*.py"],
        );
        for (path, want) in [
            ("src/lib.rs", "code"),
            ("src/a/b/c.rs", "code"),
            ("SRC/Lib.RS", "code"),
            ("src/generated/x.rs", "not code"),
            ("src/build.rs", "not code"),
            ("src/conftest.py", "not code"),
            ("src/pytest.py", "not code"),
            ("src/pytest_evil/__init__.py", "not code"),
            ("src/x.dist-info/entry_points.txt", "not code"),
            ("src/.cargo/config.toml", "not code"),
            ("src/hook.pth", "not code"),
            ("Cargo.toml", "not code"),
            ("crates/a/Cargo.toml", "not code"),
            ("rustfmt.toml", "not code"),
            (".gitattributes", "not code"),
            ("Dockerfile", "not code"),
            ("requirements.txt", "not code"),
            ("requirements-dev.txt", "not code"),
            ("vitest.config.ts", "not code"),
            ("pytest.py", "not code"),
            ("other.py", "not code"),
            ("scripts/lint.sh", "code"),
            ("tests/count.rs", "test"),
            ("pkg/test_a.py", "test"),
            ("README.md", "not code"),
            ("docs/x.md", "not code"),
        ] {
            assert_eq!(kind(&m, path), want, "{path}");
        }
    }

    #[test]
    fn a_lookalike_or_a_case_variant_of_a_never_code_name_is_never_code() {
        let m = rules(&["**"], &[]);
        for path in [
            "CARGO.TOML",
            "Cargo.t\u{043e}ml",
            "src/Conftest.py",
            "PyTest.py",
            "src/x.DIST-INFO/RECORD",
            ".GITATTRIBUTES",
            "x/Makefile",
        ] {
            assert_eq!(kind(&m, path), "not code", "{path}");
        }
        assert_eq!(kind(&m, "src/main.rs"), "code");
    }

    #[test]
    fn an_exempt_default_and_an_added_rule() {
        let m = CodeRules {
            code: vec!["**".to_owned()],
            never: vec![("scripts/lint.sh".to_owned(), "a Verifier step".to_owned())],
            exempt: vec!["*.cfg".to_owned()],
            ..CodeRules::default()
        }
        .matcher()
        .expect("compiles");
        assert_eq!(kind(&m, "app.cfg"), "code");
        let exempted = CodeRules {
            code: vec!["/src/".to_owned()],
            exempt: vec!["setup.cfg".to_owned(), "package.json#scripts".to_owned()],
            ..CodeRules::default()
        }
        .matcher()
        .expect("compiles");
        assert_eq!(
            kind(&exempted, "setup.cfg"),
            "code",
            "an exempted judge file is code"
        );
        assert_eq!(kind(&exempted, "tox.ini"), "not code");
        assert_eq!(kind(&exempted, "package.json"), "not code");
        assert_eq!(
            m.kind(&fold("scripts/lint.sh")),
            Kind::NotCode {
                why: "a Verifier step"
            }
        );
    }

    #[test]
    fn bad_globs_are_errors() {
        assert!(
            CodeRules {
                code: vec!["src/[".to_owned()],
                ..CodeRules::default()
            }
            .matcher()
            .is_err()
        );
    }

    #[test]
    fn default_test_globs_name_test_files() {
        let tests: Vec<&str> = TEST_GLOBS.to_vec();
        let m = rules(&[], &tests);
        for path in [
            "tests/a.rs",
            "crates/x/tests/y.rs",
            "pkg/test_x.py",
            "pkg/x_test.py",
            "cmd/x_test.go",
            "web/a.test.ts",
            "web/a.spec.tsx",
            "src/__tests__/a.js",
            "go/testdata/golden.txt",
            "src/snapshots/x.snap",
        ] {
            assert_eq!(kind(&m, path), "test", "{path}");
        }
        assert_eq!(kind(&m, "src/latest.rs"), "not code");
    }
}
