//! `bork-ci init`: what a repository needs to start, from the toolchains it uses.
//!
//! [`detect`] reads the repository's root for the files each toolchain keeps there (`Cargo.toml`,
//! `pyproject.toml`, `package.json`, `go.mod`, a `Makefile` with a `check` or `test` target);
//! [`plan`] renders `.config/bork.json`, a correctness checker that follows the checker contract
//! for that toolchain (`checks/bork-check`: the toolchain's test command, its failures turned into
//! a `command` finding), and, when asked, the CI system's pipeline file from the templates this
//! project ships. Pure but for reading the root's file names and the Makefile; writing (never
//! over an existing file without `--force`) is the command's.

use std::path::Path;

use serde_json::json;

/// A toolchain `init` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Toolchain {
    Rust,
    Python,
    Node,
    Go,
    Make,
}

impl Toolchain {
    /// Its name, as `--toolchain` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Toolchain::Rust => "rust",
            Toolchain::Python => "python",
            Toolchain::Node => "node",
            Toolchain::Go => "go",
            Toolchain::Make => "make",
        }
    }
}

/// The CI system whose pipeline file `init --ci` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ci {
    Github,
    Gitlab,
    Buildkite,
    Jenkins,
}

/// The checker `init` writes, relative to the repository root.
pub const CHECKER: &str = "checks/bork-check";

/// The toolchains the repository at `repo` uses, most specific first.
pub fn detect(repo: &Path) -> Vec<Toolchain> {
    let has = |name: &str| std::fs::symlink_metadata(repo.join(name)).is_ok_and(|meta| meta.is_file());
    let mut found = Vec::new();
    if has("Cargo.toml") {
        found.push(Toolchain::Rust);
    }
    if [
        "pyproject.toml",
        "setup.py",
        "setup.cfg",
        "requirements.txt",
        "pytest.ini",
        "tox.ini",
    ]
    .iter()
    .any(|name| has(name))
    {
        found.push(Toolchain::Python);
    }
    if has("package.json") {
        found.push(Toolchain::Node);
    }
    if has("go.mod") {
        found.push(Toolchain::Go);
    }
    if make_target(repo).is_some() {
        found.push(Toolchain::Make);
    }
    found
}

/// `check` or `test`, whichever the root `Makefile` (or `GNUmakefile`, `makefile`) defines first.
fn make_target(repo: &Path) -> Option<&'static str> {
    let text = ["GNUmakefile", "makefile", "Makefile"]
        .iter()
        .find_map(|name| crate::safe_fs::read_regular(&repo.join(name), 1 << 20).ok())?;
    let text = String::from_utf8_lossy(&text);
    ["check", "test"]
        .into_iter()
        .find(|target| text.lines().any(|line| line.starts_with(&format!("{target}:"))))
}

/// One file `init` writes: its path in the repository, its text, whether it is executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub path: String,
    pub text: String,
    pub executable: bool,
}

/// The files for `toolchain` (`None`: a checker for the team to fill in) and `ci`.
pub fn plan(repo: &Path, toolchain: Option<Toolchain>, ci: Option<Ci>) -> Vec<File> {
    let (image, setup, command, note): (&str, Vec<&str>, String, &str) = match toolchain {
        Some(Toolchain::Rust) => (
            "rust:1-bookworm",
            vec!["cargo fetch --locked"],
            "cargo test --offline --quiet".to_owned(),
            "cargo test, offline: `sandbox.setup` fetched the crates into the dependency cache",
        ),
        Some(Toolchain::Python) => (
            "python:3.12-bookworm",
            vec![
                "if python3 -c 'import pytest' 2>/dev/null && [ ! -f requirements.txt ]; then exit 0; fi; python3 -m pip install --quiet --target \"$BORK_DEPS_DIR/site\" pytest $( [ -f requirements.txt ] && echo -r requirements.txt )",
            ],
            "PYTHONPATH=\"$BORK_DEPS_DIR/site${PYTHONPATH:+:$PYTHONPATH}\" python3 -m pytest -q -p no:cacheprovider".to_owned(),
            "pytest, with the packages `sandbox.setup` installed into the dependency cache",
        ),
        Some(Toolchain::Node) => (
            "node:20-bookworm",
            Vec::new(),
            "npm test --silent".to_owned(),
            "npm test: run `npm ci` in the CI job before bork-ci, so that node_modules is in the checkout",
        ),
        Some(Toolchain::Go) => (
            "golang:1.22-bookworm",
            vec!["GOMODCACHE=\"$BORK_DEPS_DIR/go-mod\" go mod download"],
            "GOMODCACHE=\"$BORK_DEPS_DIR/go-mod\" GOCACHE=\"$BORK_BUILD_CACHE/go-build\" GOFLAGS=-mod=readonly GOPROXY=off go test ./...".to_owned(),
            "go test, offline: `sandbox.setup` downloaded the modules into the dependency cache",
        ),
        Some(Toolchain::Make) => (
            "buildpack-deps:bookworm",
            Vec::new(),
            format!("make {}", make_target(repo).unwrap_or("check")),
            "the Makefile's own target",
        ),
        None => (
            "debian:bookworm-slim",
            Vec::new(),
            "echo 'checks/bork-check: no test command yet: edit this file to run your tests' >&2; exit 127".to_owned(),
            "no toolchain found: edit the command below",
        ),
    };
    let mut sandbox = json!({"kind": "docker", "image": image, "network": "none"});
    if !setup.is_empty() {
        sandbox["setup"] = json!(setup);
        sandbox["setup-network"] = json!("bridge");
    }
    let mut config = json!({
        "correctness-checker": CHECKER,
        "max-iterations": 5,
        "llm": {"provider": "openai"},
        "sandbox": sandbox,
    });
    // What the model may change without approval, as bork-ci derives it today: written out so
    // the team sees it and can widen or narrow it.
    if let Ok(rules) = crate::edit::layout::derive(repo) {
        config["code"] = json!(rules.code);
    }
    let mut files = vec![
        File {
            path: crate::config::CONFIG_PATH.to_owned(),
            text: format!("{:#}\n", config),
            executable: false,
        },
        File {
            path: CHECKER.to_owned(),
            text: checker_script(&command, note),
            executable: true,
        },
    ];
    if let Some(ci) = ci {
        let (path, text) = match ci {
            Ci::Github => (
                ".github/workflows/bork-ci.yml",
                include_str!("../ci/workflows/bork-ci.yml"),
            ),
            Ci::Gitlab => (".gitlab-ci.yml", include_str!("../ci/gitlab-ci.yml")),
            Ci::Buildkite => (".buildkite/pipeline.yml", include_str!("../ci/buildkite.yml")),
            Ci::Jenkins => ("Jenkinsfile", include_str!("../ci/Jenkinsfile")),
        };
        files.push(File {
            path: path.to_owned(),
            text: text.to_owned(),
            executable: false,
        });
    }
    files
}

/// A checker following the contract around one shell command: exit 0 and no findings when the
/// command passes; exit 1 and one `command` finding (its exit code, stdout and stderr) when it
/// fails; exit 2 when it cannot run (exit 126 or 127: the toolchain is missing).
fn checker_script(command: &str, note: &str) -> String {
    format!(
        r#"#!/bin/sh
# The correctness checker bork-ci runs (see its checker contract): {note}.
# Exit 0 with no findings when the tests pass, 1 with a `command` finding when they fail, 2 when
# they cannot run. Written by `bork-ci init`; it is a judge file: model edits to it wait for you.
set -u
command='{quoted}'
scratch=$(mktemp -d "${{TMPDIR:-/tmp}}/bork-check.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT
status=0
sh -c "$command" >"$scratch/out" 2>"$scratch/err" || status=$?
if [ "$status" -eq 0 ]; then
  printf '{{"per_file_findings":[],"overall_findings":[]}}\n'
  exit 0
fi
if [ "$status" -eq 126 ] || [ "$status" -eq 127 ]; then
  cat "$scratch/err" >&2
  echo "checks/bork-check: the test command could not run (exit $status): is the toolchain in the judge image?" >&2
  exit 2
fi
# A JSON string of the file $1: its last 400 lines, escaped.
json() {{
  tail -n 400 "$1" | LC_ALL=C tr -d '\000-\010\013-\037' |
    LC_ALL=C sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e "s/$(printf '\t')/\\\\t/g" |
    awk 'BEGIN {{ printf "\"" }} NR > 1 {{ printf "\\n" }} {{ printf "%s", $0 }} END {{ printf "\"" }}'
}}
printf '{{"per_file_findings":[],"overall_findings":[{{"provenance":"command","command":"%s","exit-code":%d,"stdout":%s,"stderr":%s}}]}}\n' \
  "$(printf '%s' "$command" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g')" "$status" "$(json "$scratch/out")" "$(json "$scratch/err")"
exit 1
"#,
        quoted = command.replace('\'', r"'\''"),
    )
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    #[test]
    fn toolchains_are_found_by_their_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(detect(dir.path()).is_empty());
        std::fs::write(dir.path().join("Cargo.toml"), "[package]\n").expect("write");
        std::fs::write(dir.path().join("requirements.txt"), "").expect("write");
        std::fs::write(dir.path().join("Makefile"), "all:\n\ttrue\ntest:\n\ttrue\n").expect("write");
        assert_eq!(
            detect(dir.path()),
            [Toolchain::Rust, Toolchain::Python, Toolchain::Make]
        );
        let files = plan(dir.path(), Some(Toolchain::Make), Some(Ci::Gitlab));
        let paths: Vec<&str> = files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, [".config/bork.json", CHECKER, ".gitlab-ci.yml"]);
        assert!(files[1].text.contains("command='make test'"), "{}", files[1].text);
        let config: serde_json::Value = serde_json::from_str(&files[0].text).expect("JSON");
        assert_eq!(config["correctness-checker"], CHECKER);
        let code: Vec<&str> = config["code"]
            .as_array()
            .expect("code written out")
            .iter()
            .filter_map(|glob| glob.as_str())
            .collect();
        assert!(code.contains(&"/src/**/*.rs"), "{code:?}");
        assert!(code.contains(&"!tests/"), "{code:?}");
    }
}
