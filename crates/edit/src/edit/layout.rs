//! The repository's layout: which files are code, derived from what the repository holds, and
//! which files the judges, setup and the dev container read.
//!
//! When `.config/bork.json` sets no `code`, [`derive()`] names the code of each toolchain found
//! (Rust packages' `src/`, `benches/`, `examples/`; Python packages in a src or flat layout; a
//! Node package's `src/`, `lib/`, `app/`; a Go module's `.go` files; shell scripts; C and C++
//! sources) and the root's `src/`, `lib/` and `app/`, with test files left to the `tests` globs. [`read_by_commands`] names the files a
//! command line (the checker, a Verifier step, a setup command) and the scripts it runs name, so
//! that they are never code whatever a glob says. Reads files (bounded, no symlink followed); the
//! classification itself is `edit::code`'s.

use std::collections::BTreeSet;
use std::path::Path;

use super::code::{CodeRules, CodeSource, TEST_GLOBS};

/// At most this many entries are listed.
const MAX_ENTRIES: usize = 1_000_000;
/// A manifest or script larger than this is not read.
const MAX_READ: u64 = 1 << 20;

/// Folders a derivation never looks into.
const SKIPPED: &[&str] = &["node_modules", "target", "vendor", "third_party", ".git"];

/// Source extensions of the toolchains without a manifest of their own.
const C_FAMILY: &str = "{c,h,cc,cpp,cxx,hpp,hh,hxx}";
const NODE: &str = "{js,jsx,ts,tsx,mjs,cjs,mts,cts,vue,svelte}";

/// One entry the repository holds outside what git ignores: its path and whether it is a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub path: String,
    pub is_dir: bool,
}

/// The entries below `repo` that git does not ignore (`.gitignore` files, not
/// `.git/info/exclude` or a global file), `.git` aside, symlinks not followed, in path order.
pub fn listing(repo: &Path) -> std::io::Result<Vec<Listed>> {
    let mut listed = Vec::new();
    let walker = ignore::WalkBuilder::new(repo)
        .hidden(false)
        .ignore(false)
        .git_ignore(true)
        .git_exclude(false)
        .git_global(false)
        .parents(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|entry| !entry.file_name().eq_ignore_ascii_case(".git"))
        .build();
    for entry in walker {
        let entry = entry.map_err(std::io::Error::other)?;
        if entry.depth() == 0 {
            continue;
        }
        if listed.len() >= MAX_ENTRIES {
            return Err(std::io::Error::other(format!(
                "the working tree has more than {MAX_ENTRIES} entries"
            )));
        }
        let Ok(relative) = entry.path().strip_prefix(repo) else {
            continue;
        };
        let Some(path) = relative.to_str() else {
            continue;
        };
        listed.push(Listed {
            path: path.to_owned(),
            is_dir: entry.file_type().is_some_and(|kind| kind.is_dir()),
        });
    }
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(listed)
}

/// The code and tests globs of the repository at `repo`, derived from its layout.
pub fn derive(repo: &Path) -> std::io::Result<CodeRules> {
    let listed = listing(repo)?;
    let files: Vec<&str> = listed
        .iter()
        .filter(|entry| !entry.is_dir)
        .map(|entry| entry.path.as_str())
        .filter(|path| !path.split('/').any(|part| SKIPPED.contains(&part)))
        .collect();
    let mut code = Vec::new();
    for manifest in files.iter().filter(|path| file_name(path) == "Cargo.toml") {
        let dir = parent(manifest);
        let text = read_text(&repo.join(manifest));
        if !text.as_deref().is_some_and(|text| text.contains("[package]")) {
            continue;
        }
        for folder in ["src", "benches", "examples"] {
            code.push(format!("/{}{folder}/**/*.rs", prefix(dir)));
        }
    }
    for package in python_packages(&files) {
        code.push(format!("/{package}/**/*.py"));
    }
    for manifest in files.iter().filter(|path| file_name(path) == "package.json") {
        let dir = prefix(parent(manifest));
        for folder in ["src", "lib", "app"] {
            code.push(format!("/{dir}{folder}/**/*.{NODE}"));
        }
    }
    for manifest in files.iter().filter(|path| file_name(path) == "go.mod") {
        code.push(format!("/{}**/*.go", prefix(parent(manifest))));
    }
    if files
        .iter()
        .any(|path| path.ends_with(".sh") || path.ends_with(".bash"))
    {
        code.push("*.sh".to_owned());
        code.push("*.bash".to_owned());
    }
    // A Makefile alone says nothing of what the code is (it is never code itself).
    let c_family = files.iter().any(|path| {
        [".c", ".h", ".cc", ".cpp", ".cxx", ".hpp"]
            .iter()
            .any(|extension| file_name(path).ends_with(extension))
    });
    if c_family {
        code.push(format!("*.{C_FAMILY}"));
    }
    // The conventional source folders, whatever the toolchain (what in them is never code, a
    // manifest or a top-level module, stays held).
    code.extend(["/src/", "/lib/", "/app/"].map(str::to_owned));
    code.sort();
    code.dedup();
    // Test files are the `tests` globs' (the model may add one, not change an approved one).
    code.extend(TEST_GLOBS.iter().map(|glob| format!("!{glob}")));
    Ok(CodeRules {
        code,
        tests: TEST_GLOBS.iter().map(|glob| (*glob).to_owned()).collect(),
        source: CodeSource::Derived,
        ..CodeRules::default()
    })
}

/// The top folders of the Python packages: a folder with `__init__.py` whose parent has none,
/// outside test folders.
fn python_packages(files: &[&str]) -> Vec<String> {
    let inits: BTreeSet<&str> = files
        .iter()
        .filter(|path| file_name(path) == "__init__.py")
        .map(|path| parent(path))
        .filter(|dir| !dir.is_empty())
        .collect();
    inits
        .iter()
        .filter(|dir| !inits.contains(parent(dir)))
        .filter(|dir| {
            !dir.split('/')
                .any(|part| matches!(part, "tests" | "test" | "docs" | "examples" | "specs"))
        })
        .map(|dir| (*dir).to_owned())
        .collect()
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// `dir/` for a folder, nothing for the root.
fn prefix(dir: &str) -> String {
    if dir.is_empty() {
        String::new()
    } else {
        format!("{}/", globset::escape(dir))
    }
}

fn read_text(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let bytes = bork_ci_core::safe_fs::read_regular(path, MAX_READ).ok()?;
    String::from_utf8(bytes).ok()
}

/// The repository paths that the command lines `commands` (with what each is, for the reason)
/// name: never code, whatever a glob says. A file is named as it is (a Verifier step's script,
/// a requirements file setup installs from); a folder (other than the root) only with
/// `folders`, whole (a local package setup installs, with its build files). What a named
/// script runs in turn is not followed: a checker's script runs the code under test.
pub fn read_by_commands(repo: &Path, commands: &[(String, String)], folders: bool) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    let mut seen = BTreeSet::new();
    for (text, what) in commands {
        for token in path_tokens(text) {
            let Ok(path) = super::path::validate(&token) else {
                continue;
            };
            let path = path.as_str().to_owned();
            let full = repo.join(&path);
            let Ok(meta) = std::fs::symlink_metadata(&full) else {
                continue;
            };
            if (meta.is_dir() && !folders) || !seen.insert(path.clone()) {
                continue;
            }
            let glob = format!(
                "/{}{}",
                globset::escape(&path),
                if meta.is_dir() { "/" } else { "" }
            );
            found.push((glob, format!("read by {what}")));
        }
    }
    found.sort();
    found
}

/// The words of a command line or script that may name a repository path: split at blanks and
/// shell punctuation, quotes dropped, an option's `=value` and a leading `./` taken off.
fn path_tokens(text: &str) -> Vec<String> {
    const LIMIT: usize = 10_000;
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                ';' | '|' | '&' | '(' | ')' | '<' | '>' | '`' | '"' | '\'' | ','
            )
    })
    .filter(|word| !word.is_empty())
    .take(LIMIT)
    .filter_map(|word| {
        let word = word.rsplit_once('=').map_or(word, |(_, value)| value);
        let word = word
            .strip_prefix("-r")
            .filter(|rest| !rest.is_empty())
            .unwrap_or(word);
        let word = word.trim_start_matches("./").trim_end_matches('/');
        (!word.is_empty() && word != "." && !word.starts_with('-') && !word.starts_with('$'))
            .then(|| word.to_owned())
    })
    .collect()
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;
    use crate::edit::code::{Kind, fold};

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, text).expect("write");
        }
        dir
    }

    fn kinds(rules: &CodeRules, paths: &[(&str, &str)]) {
        let matcher = rules.matcher().expect("compiles");
        for (path, want) in paths {
            let got = match matcher.kind(&fold(path)) {
                Kind::Code => "code",
                Kind::Test => "test",
                Kind::NotCode { .. } => "not code",
            };
            assert_eq!(got, *want, "{path} under {:?}", rules.code);
        }
    }

    #[test]
    fn rust_packages_are_their_sources() {
        let repo = tree(&[
            ("Cargo.toml", "[package]\nname = \"a\"\n"),
            ("src/lib.rs", ""),
            ("tests/count.rs", ""),
            ("crates/b/Cargo.toml", "[package]\nname = \"b\"\n"),
            ("crates/b/src/main.rs", ""),
        ]);
        let rules = derive(repo.path()).expect("derives");
        kinds(
            &rules,
            &[
                ("src/lib.rs", "code"),
                ("src/new/mod.rs", "code"),
                ("benches/b.rs", "code"),
                ("crates/b/src/main.rs", "code"),
                ("tests/count.rs", "test"),
                ("tests/new.rs", "test"),
                ("build.rs", "not code"),
                ("crates/b/build.rs", "not code"),
                ("Cargo.toml", "not code"),
                ("rustfmt.toml", "not code"),
                (".cargo/config.toml", "not code"),
                ("src/data.txt", "code"),
                ("src/json.py", "not code"),
                ("src/app.py", "code"),
                ("README.md", "not code"),
            ],
        );
    }

    #[test]
    fn python_packages_in_src_and_flat_layouts() {
        let repo = tree(&[
            ("pyproject.toml", "[project]\nname = \"d\"\n"),
            ("src/durations/__init__.py", ""),
            ("src/durations/parse.py", ""),
            ("flat/__init__.py", ""),
            ("tests/test_durations.py", ""),
            ("tests/__init__.py", ""),
            ("durations_cli.py", ""),
        ]);
        let rules = derive(repo.path()).expect("derives");
        kinds(
            &rules,
            &[
                ("src/durations/parse.py", "code"),
                ("src/durations/new.py", "code"),
                ("flat/x.py", "code"),
                ("src/durations/test_parse.py", "test"),
                ("tests/test_durations.py", "test"),
                ("tests/test_new.py", "test"),
                ("durations_cli.py", "not code"),
                ("pytest.py", "not code"),
                ("conftest.py", "not code"),
                ("tests/conftest.py", "not code"),
                ("src/durations/conftest.py", "not code"),
                ("src/pytest_plugin/__init__.py", "not code"),
                ("evil.dist-info/entry_points.txt", "not code"),
                ("requirements.txt", "not code"),
                ("pyproject.toml", "not code"),
            ],
        );
    }

    #[test]
    fn node_go_shell_and_no_toolchain() {
        let node = tree(&[("package.json", "{}"), ("src/index.ts", "")]);
        kinds(
            &derive(node.path()).expect("derives"),
            &[
                ("src/index.ts", "code"),
                ("src/a.test.ts", "test"),
                ("jest.config.js", "not code"),
                ("package.json", "not code"),
                ("index.js", "not code"),
            ],
        );
        let go = tree(&[("go.mod", "module x\n"), ("half.go", "")]);
        kinds(
            &derive(go.path()).expect("derives"),
            &[
                ("half.go", "code"),
                ("cmd/x/main.go", "code"),
                ("half_test.go", "test"),
                ("go.mod", "not code"),
                ("vendor/y/y.go", "not code"),
            ],
        );
        let make = tree(&[("Makefile", "check:\n"), ("src/answer.txt", "")]);
        kinds(
            &derive(make.path()).expect("derives"),
            &[
                ("src/answer.txt", "code"),
                ("Makefile", "not code"),
                ("answer.txt", "not code"),
            ],
        );
        let shell = tree(&[("src/slugify.sh", ""), ("checks/run", "")]);
        kinds(
            &derive(shell.path()).expect("derives"),
            &[("src/slugify.sh", "code"), ("Makefile", "not code")],
        );
        let none = tree(&[("src/app.txt", "")]);
        kinds(
            &derive(none.path()).expect("derives"),
            &[("src/app.txt", "code"), ("app.txt", "not code")],
        );
    }

    #[test]
    fn commands_name_their_scripts_and_setup_its_packages() {
        let repo = tree(&[
            (
                "scripts/lint.sh",
                "#!/bin/sh\nexec sh src/app.sh --rules=cfg/rules.txt\n",
            ),
            ("src/app.sh", ""),
            ("cfg/rules.txt", ""),
            ("requirements-dev.txt", ""),
            ("plugins/p/setup.py", ""),
        ]);
        let steps = read_by_commands(
            repo.path(),
            &[(
                "sh scripts/lint.sh src/ --config=cfg/rules.txt".to_owned(),
                "the Verifier's step `lint`".to_owned(),
            )],
            false,
        );
        let globs: Vec<&str> = steps.iter().map(|(glob, _)| glob.as_str()).collect();
        assert_eq!(globs, ["/cfg/rules.txt", "/scripts/lint.sh"]);
        let setup = read_by_commands(
            repo.path(),
            &[(
                "pip install -r requirements-dev.txt ./plugins/p -e .".to_owned(),
                "setup".to_owned(),
            )],
            true,
        );
        let globs: Vec<&str> = setup.iter().map(|(glob, _)| glob.as_str()).collect();
        assert_eq!(globs, ["/plugins/p/", "/requirements-dev.txt"]);
    }
}
