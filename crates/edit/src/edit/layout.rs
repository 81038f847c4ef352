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

/// The name of git's per-folder ignore file.
const GITIGNORE: &str = ".gitignore";

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
    walk(repo, true, &mut |seen| {
        if !seen.ignored {
            listed.push(Listed {
                path: seen.path.to_owned(),
                is_dir: seen.is_dir,
            });
        }
        Ok(())
    })?;
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(listed)
}

/// One entry of the working tree as [`walk`] finds it.
pub(crate) struct Seen<'a> {
    /// Its path below the repository (a name that is not UTF-8 read lossily).
    pub(crate) path: &'a str,
    /// Its path on this machine.
    pub(crate) full: &'a Path,
    /// A folder (a symlink is not one: none is followed).
    pub(crate) is_dir: bool,
    /// Whether the `.gitignore` files ignore it (or a folder above it).
    pub(crate) ignored: bool,
}

/// The `.gitignore` of one folder, and those of the folders above it.
struct Ignores {
    gitignore: ignore::gitignore::Gitignore,
    parent: Option<std::rc::Rc<Ignores>>,
}

impl Ignores {
    /// The `.gitignore` file of the folder at `dir` (one whose lines do not all parse keeps
    /// those that do, as git does; one that cannot be read ignores nothing).
    fn of(dir: &Path, parent: Option<std::rc::Rc<Ignores>>) -> Ignores {
        let mut builder = ignore::gitignore::GitignoreBuilder::new(dir);
        let _unparsed = builder.add(dir.join(GITIGNORE));
        Ignores {
            gitignore: builder
                .build()
                .unwrap_or_else(|_| ignore::gitignore::Gitignore::empty()),
            parent,
        }
    }

    /// Whether `full` is ignored: the nearest `.gitignore` with a line for it decides (a `!`
    /// line un-ignores).
    fn ignore(&self, full: &Path, is_dir: bool) -> bool {
        let mut ignores = Some(self);
        while let Some(here) = ignores {
            match here.gitignore.matched(full, is_dir) {
                ignore::Match::Ignore(_) => return true,
                ignore::Match::Whitelist(_) => return false,
                ignore::Match::None => ignores = here.parent.as_deref(),
            }
        }
        false
    }
}

#[cfg(test)]
thread_local! {
    /// How many folders [`walk`] has read on this thread.
    pub(crate) static FOLDERS_READ: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Visits every entry below `repo` once, reading each folder once: `.git` (in any case) is
/// never entered, symlinks are not followed, and ignored folders are entered too (what git
/// ignores is still on disk for a judge that runs without a sandbox). With `ignores`, each entry
/// says whether git's `.gitignore` files ignore it, as `git ls-files --others --exclude-standard`
/// decides (not `.git/info/exclude` or a global file; the repository's folders alone, nested
/// repositories' included); without, nothing is read for that and no entry is ignored.
pub(crate) fn walk(
    repo: &Path,
    ignores: bool,
    visit: &mut dyn FnMut(Seen<'_>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    use std::rc::Rc;
    // A folder to read: its path below the repository, and the `.gitignore`s above it (`None`:
    // ignored, or not asked).
    let mut stack: Vec<(String, Option<Rc<Ignores>>)> = vec![(String::new(), None)];
    let mut seen = 0usize;
    while let Some((dir, above)) = stack.pop() {
        let full = if dir.is_empty() {
            repo.to_owned()
        } else {
            repo.join(&dir)
        };
        #[cfg(test)]
        FOLDERS_READ.with(|read| read.set(read.get() + 1));
        let items = std::fs::read_dir(&full)?.collect::<std::io::Result<Vec<_>>>()?;
        // An ignored folder's own `.gitignore` cannot un-ignore what lies below it.
        let here = if ignores && (dir.is_empty() || above.is_some()) {
            let has_file = items.iter().any(|item| item.file_name() == GITIGNORE);
            Some(if has_file {
                Rc::new(Ignores::of(&full, above))
            } else {
                match above {
                    Some(above) => above,
                    None => Rc::new(Ignores {
                        gitignore: ignore::gitignore::Gitignore::empty(),
                        parent: None,
                    }),
                }
            })
        } else {
            None
        };
        for item in items {
            seen += 1;
            if seen > MAX_ENTRIES {
                return Err(std::io::Error::other(format!(
                    "the working tree has more than {MAX_ENTRIES} entries"
                )));
            }
            let name = item.file_name();
            if name.eq_ignore_ascii_case(".git") {
                continue;
            }
            let name = name.to_string_lossy();
            let path = if dir.is_empty() {
                name.into_owned()
            } else {
                format!("{dir}/{name}")
            };
            // The kind from the folder's listing: a symlink is a symlink, as `lstat` says.
            let is_dir = item.file_type()?.is_dir();
            let entry_full = item.path();
            let ignored = ignores && here.as_ref().is_none_or(|here| here.ignore(&entry_full, is_dir));
            visit(Seen {
                path: &path,
                full: &entry_full,
                is_dir,
                ignored,
            })?;
            if is_dir {
                let below = if ignored { None } else { here.clone() };
                stack.push((path, below));
            }
        }
    }
    Ok(())
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

    /// What the `ignore` crate's own walker leaves when it honours `.gitignore` files alone: the
    /// reference [`listing`] is held to.
    fn reference_listing(repo: &Path) -> Vec<Listed> {
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
        let mut listed: Vec<Listed> = walker
            .map(|entry| entry.expect("walks"))
            .filter(|entry| entry.depth() > 0)
            .map(|entry| Listed {
                path: entry
                    .path()
                    .strip_prefix(repo)
                    .expect("below")
                    .to_str()
                    .expect("UTF-8")
                    .to_owned(),
                is_dir: entry.file_type().is_some_and(|kind| kind.is_dir()),
            })
            .collect();
        listed.sort_by(|a, b| a.path.cmp(&b.path));
        listed
    }

    fn ignoring_tree() -> tempfile::TempDir {
        let repo = tree(&[
            (
                ".gitignore",
                "*.log\n/build/\nnode_modules\ncache/\n!keep.log\n/root-only.txt\ndocs/*.tmp\n[unclosed\n",
            ),
            ("a.log", ""),
            ("keep.log", ""),
            ("root-only.txt", ""),
            ("src/root-only.txt", ""),
            ("src/main.rs", ""),
            ("src/x.log", ""),
            ("src/.gitignore", "!x.log\ngen/\n"),
            ("src/gen/out.rs", ""),
            ("src/gen/.gitignore", "!out.rs\n"),
            ("build/out.o", ""),
            ("sub/build/kept.o", ""),
            ("node_modules/pkg/index.js", ""),
            ("web/node_modules/pkg/conftest.py", ""),
            ("cache/x", ""),
            ("docs/a.tmp", ""),
            ("docs/deep/a.tmp", ""),
            ("vendor/lib/.gitignore", "*\n!.gitignore\n"),
            ("vendor/lib/code.c", ""),
            ("nested/.gitignore", "inner.txt\n"),
            ("nested/inner.txt", ""),
            ("nested/other.txt", ""),
            (".GIT/config", ""),
        ]);
        // A repository of its own inside: git stops there, the `.gitignore` files still apply.
        let status = std::process::Command::new("git")
            .args(["init", "-q", "nested"])
            .current_dir(repo.path())
            .status()
            .expect("git runs");
        assert!(status.success());
        std::fs::create_dir_all(repo.path().join("empty/cache")).expect("mkdir");
        std::os::unix::fs::symlink("src", repo.path().join("link-to-src")).expect("symlink");
        std::os::unix::fs::symlink("a.log", repo.path().join("link.log")).expect("symlink");
        repo
    }

    #[test]
    fn the_listing_leaves_what_the_gitignore_files_ignore_as_the_ignore_crate_does() {
        let repo = ignoring_tree();
        let listed = listing(repo.path()).expect("lists");
        assert_eq!(listed, reference_listing(repo.path()));
        let paths: Vec<&str> = listed.iter().map(|listed| listed.path.as_str()).collect();
        for kept in [
            "keep.log",
            "src/root-only.txt",
            "src/x.log",
            "sub/build/kept.o",
            "docs/deep/a.tmp",
            "nested/other.txt",
            "vendor/lib/.gitignore",
        ] {
            assert!(paths.contains(&kept), "{kept} is listed: {paths:?}");
        }
        for left in [
            "a.log",
            "root-only.txt",
            "build",
            "build/out.o",
            "src/gen/out.rs",
            "node_modules",
            "web/node_modules/pkg/conftest.py",
            "cache",
            "empty/cache",
            "docs/a.tmp",
            "vendor/lib/code.c",
            "nested/inner.txt",
            "nested/.git/HEAD",
            ".GIT/config",
            "link.log",
        ] {
            assert!(!paths.contains(&left), "{left} is left out: {paths:?}");
        }
    }

    #[test]
    fn the_listing_is_what_git_lists_where_git_reads_only_gitignore_files() {
        let repo = ignoring_tree();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "core.excludesFile=/dev/null"])
                .args(args)
                .current_dir(repo.path())
                .output()
                .expect("git runs");
            assert!(out.status.success(), "git {args:?}");
            out.stdout
        };
        git(&["init", "-q"]);
        let listed_by_git = git(&["ls-files", "-z", "--others", "--exclude-standard"]);
        // Git stops at a nested repository and takes `.GIT` for a folder like any other: those
        // aside, the two agree.
        let aside = |path: &&str| !path.starts_with("nested/") && !path.starts_with(".GIT/");
        let mut by_git: Vec<&str> = listed_by_git
            .split(|byte| *byte == 0)
            .filter(|path| !path.is_empty())
            .map(|path| std::str::from_utf8(path).expect("UTF-8"))
            .filter(aside)
            .collect();
        by_git.sort_unstable();
        let listed = listing(repo.path()).expect("lists");
        let files: Vec<&str> = listed
            .iter()
            .filter(|listed| !listed.is_dir)
            .map(|listed| listed.path.as_str())
            .filter(aside)
            .collect();
        assert_eq!(files, by_git);
        assert!(by_git.len() > 5, "{by_git:?}");
    }

    #[test]
    fn the_walk_reads_each_folder_once_and_enters_ignored_ones() {
        let repo = ignoring_tree();
        let mut folders = 1;
        let mut ignored = Vec::new();
        FOLDERS_READ.with(|read| read.set(0));
        walk(repo.path(), true, &mut |seen| {
            folders += usize::from(seen.is_dir);
            if seen.ignored {
                ignored.push(seen.path.to_owned());
            }
            Ok(())
        })
        .expect("walks");
        assert_eq!(FOLDERS_READ.with(std::cell::Cell::get), folders);
        assert!(ignored.contains(&"web/node_modules/pkg/conftest.py".to_owned()));
        assert!(ignored.contains(&"build/out.o".to_owned()));
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
