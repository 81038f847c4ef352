//! `bork-ci init`: what a repository needs to start, from the toolchains it uses.
//!
//! [`detect`] reads the repository's root for the files each toolchain keeps there (`Cargo.toml`,
//! `pyproject.toml`, `package.json`, `go.mod`, a `Makefile` with a `check` or `test` target);
//! [`plan`] renders `.config/bork.json`, a correctness checker that follows the checker contract
//! for that toolchain (`checks/bork-check`: `exec bork-ci check -- <the toolchain's test
//! command>`, one finding per failing test), and, when asked, the CI system's pipeline file from the templates this
//! project ships. Pure but for reading the root's file names and the Makefile; writing (never
//! over a file that differs without `--force`) is the command's.

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

/// Python's setup: into `$BORK_DEPS_DIR/site` (never the project itself, whose code the judges
/// read from the tree), `requirements.txt`, the `[project]` dependencies of `pyproject.toml` with
/// its test extras (`test`, `tests`, `testing`, `dev`), and pytest when the image has none.
const PYTHON_SETUP: &str = concat!(
    "want=''; [ -f requirements.txt ] && want='-r requirements.txt'; ",
    "if [ -f pyproject.toml ]; then python3 -c 'import tomllib; p = tomllib.load(open(\"pyproject.toml\", \"rb\")).get(\"project\", {}); o = p.get(\"optional-dependencies\", {}); ",
    "print(\"\\n\".join(p.get(\"dependencies\", []) + [d for k in (\"test\", \"tests\", \"testing\", \"dev\") for d in o.get(k, [])]))' > \"$BORK_DEPS_DIR/pyproject-requirements.txt\" || exit 1; ",
    "grep -q . \"$BORK_DEPS_DIR/pyproject-requirements.txt\" && want=\"$want -r $BORK_DEPS_DIR/pyproject-requirements.txt\"; fi; ",
    "python3 -c 'import pytest' 2>/dev/null || want=\"$want pytest\"; ",
    "[ -n \"$want\" ] || exit 0; ",
    "python3 -m pip install --quiet --disable-pip-version-check --target \"$BORK_DEPS_DIR/site\" $want"
);

/// Node's setup: `npm ci` (or `npm install` without a lock file) of the project's manifest in
/// `$BORK_DEPS_DIR` (never in the checkout, which judges read as it is); the checker finds the
/// packages through `NODE_PATH` and their commands through `PATH`.
const NODE_SETUP: &str = concat!(
    "export npm_config_cache=\"$BORK_DEPS_DIR/npm-cache\"; ",
    "cp package.json \"$BORK_DEPS_DIR/\" || exit 1; ",
    "for file in package-lock.json npm-shrinkwrap.json .npmrc; do [ ! -f \"$file\" ] || cp \"$file\" \"$BORK_DEPS_DIR/\" || exit 1; done; ",
    "cd \"$BORK_DEPS_DIR\" || exit 1; ",
    "if [ -f package-lock.json ] || [ -f npm-shrinkwrap.json ]; then exec npm ci --no-audit --no-fund; fi; ",
    "exec npm install --no-audit --no-fund --no-package-lock"
);

/// A src layout: the package's folder (one holding `__init__.py`) is under `src/`, so the tests
/// import it with `src` on the path.
fn python_src_layout(repo: &Path) -> bool {
    std::fs::read_dir(repo.join("src")).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|entry| entry.path().join("__init__.py").is_file())
    })
}

/// The files for `toolchain` (`None`: a checker for the team to fill in) and `ci`.
pub fn plan(
    repo: &Path,
    toolchain: Option<Toolchain>,
    ci: Option<Ci>,
    provider: Option<String>,
) -> Vec<File> {
    let (image, setup, command, note): (&str, Vec<&str>, String, &str) = match toolchain {
        Some(Toolchain::Rust) => (
            "rust:1-bookworm",
            vec!["cargo fetch --locked"],
            "cargo test --offline".to_owned(),
            "cargo test, offline: `sandbox.setup` fetched the crates into the dependency cache",
        ),
        Some(Toolchain::Python) => (
            "python:3.12-bookworm",
            vec![PYTHON_SETUP],
            format!(
                "env PYTHONPATH=\"{}$BORK_DEPS_DIR/site${{PYTHONPATH:+:$PYTHONPATH}}\" bork-ci check -- python3 -m pytest -q -p no:cacheprovider",
                if python_src_layout(repo) { "src:" } else { "" }
            ),
            "pytest, with the packages `sandbox.setup` installed into the dependency cache",
        ),
        Some(Toolchain::Node) => (
            "node:lts-bookworm",
            vec![NODE_SETUP],
            "env NODE_PATH=\"$BORK_DEPS_DIR/node_modules\" PATH=\"$BORK_DEPS_DIR/node_modules/.bin:$PATH\" npm_config_cache=\"$BORK_DEPS_DIR/npm-cache\" bork-ci check -- npm test --silent".to_owned(),
            "npm test, with the packages `sandbox.setup` installed (`npm ci`) into the dependency cache",
        ),
        Some(Toolchain::Go) => (
            "golang:1-bookworm",
            vec!["GOMODCACHE=\"$BORK_DEPS_DIR/go-mod\" go mod download"],
            "env GOMODCACHE=\"$BORK_DEPS_DIR/go-mod\" GOCACHE=\"$BORK_BUILD_CACHE/go-build\" GOFLAGS=-mod=readonly GOPROXY=off bork-ci check -- go test ./...".to_owned(),
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
            "bork-ci check -- sh -c \"echo 'checks/bork-check: no test command yet: edit this file to run your tests' >&2; exit 127\"".to_owned(),
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
        "llm": {"provider": provider.as_deref().unwrap_or("openai")},
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
            // The checker `init` writes runs in the toolchain image through the Docker sandbox:
            // on GitLab that is a Docker-in-Docker service (bork-ci's own image has no
            // toolchain for `--sandbox none`). See `ci_note`.
            Ci::Gitlab => (".gitlab-ci.yml", include_str!("../ci/gitlab-ci-dind.yml")),
            Ci::Buildkite => (".buildkite/pipeline.yml", include_str!("../ci/buildkite.yml")),
            Ci::Jenkins => ("Jenkinsfile", include_str!("../ci/Jenkinsfile")),
        };
        let text = match ci {
            Ci::Github => with_action_ref(text, &Pin::Tag),
            _ => text.to_owned(),
        };
        files.push(File {
            path: path.to_owned(),
            text,
            executable: false,
        });
        // Buildkite's and Jenkins' steps run in the toolchain image with bork-ci copied in.
        if matches!(ci, Ci::Buildkite | Ci::Jenkins) {
            files.push(File {
                path: TOOLCHAIN_DOCKERFILE.to_owned(),
                text: toolchain_dockerfile(image),
                executable: false,
            });
        }
    }
    files
}

/// Where `init --ci buildkite|jenkins` writes the image their steps run in.
pub const TOOLCHAIN_DOCKERFILE: &str = ".config/bork-ci.Dockerfile";

/// `ci/toolchain.Dockerfile` for `image`: the toolchain image with bork-ci copied in.
fn toolchain_dockerfile(image: &str) -> String {
    include_str!("../ci/toolchain.Dockerfile").replace("FROM TOOLCHAIN_IMAGE", &format!("FROM {image}"))
}

/// The action this bork-ci belongs to, and its own version.
pub const ACTION: &str = "bork-ci/bork-ci";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// How a workflow names the action: by this version's release tag, or by the commit that tag
/// points at (`--pin`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pin {
    Tag,
    Commit(String),
}

/// `text` with every `uses: bork-ci/bork-ci@<ref>` line naming the action as `pin` says:
/// `@v<version>`, or `@<commit> # v<version>`. Never a placeholder.
pub fn with_action_ref(text: &str, pin: &Pin) -> String {
    let prefix = format!("uses: {ACTION}@");
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match line.find(&prefix) {
            Some(at) => {
                let ending = if line.ends_with('\n') { "\n" } else { "" };
                let reference = match pin {
                    Pin::Tag => format!("v{VERSION}"),
                    Pin::Commit(sha) => format!("{sha} # v{VERSION}"),
                };
                out.push_str(&line[..at]);
                out.push_str(&prefix);
                out.push_str(&reference);
                out.push_str(ending);
            }
            None => out.push_str(line),
        }
    }
    out
}

/// What `init` says of the pipeline file it wrote for `ci`: which variant, the image the
/// checker runs in, and why; `image` is the toolchain image the config names.
pub fn ci_note(ci: Ci, image: &str) -> Option<String> {
    match ci {
        Ci::Github => None,
        Ci::Gitlab => Some(format!(
            "GitLab: the Docker-in-Docker variant (ci/gitlab-ci-dind.yml), so the checker runs in {image} through the Docker sandbox (bork-ci's own image has no toolchain); it needs a runner that allows privileged services. Without one, use ci/gitlab-ci.yml with a toolchain image that has bork-ci copied in (COPY --from=ghcr.io/bork-ci/bork-ci:{VERSION} /usr/local/bin/bork-ci /usr/local/bin/bork-ci) and set sandbox.kind to none"
        )),
        Ci::Buildkite | Ci::Jenkins => Some(format!(
            "{}: the step builds {TOOLCHAIN_DOCKERFILE} ({image}, the toolchain image, with bork-ci {VERSION} copied in from its release image) on the agent, which needs Docker, and runs bork-ci there with --sandbox none, so the checker finds its toolchain; keep that file's second FROM equal to sandbox.image",
            if ci == Ci::Buildkite {
                "Buildkite"
            } else {
                "Jenkins"
            }
        )),
    }
}

/// A checker following the contract through `bork-ci check`, which runs the test command and
/// reports each failure (file, line, test) as a finding, exit 2 when the tool cannot start.
/// `command` is what follows `exec ` (`bork-ci check -- …` is added unless it is there).
fn checker_script(command: &str, note: &str) -> String {
    let command = if command.contains("bork-ci check -- ") {
        command.to_owned()
    } else {
        format!("bork-ci check -- {command}")
    };
    format!(
        "#!/bin/sh\n# The correctness checker bork-ci runs: {note}. Written by `bork-ci init`; a judge file.\nexec {command}\n"
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
        let files = plan(dir.path(), Some(Toolchain::Make), Some(Ci::Gitlab), None);
        let paths: Vec<&str> = files.iter().map(|file| file.path.as_str()).collect();
        assert_eq!(paths, [".config/bork.json", CHECKER, ".gitlab-ci.yml"]);
        // The checker runs in the toolchain image: on GitLab through a Docker-in-Docker service.
        assert!(files[2].text.contains("--sandbox docker") && files[2].text.contains("dind"));
        let note = ci_note(Ci::Gitlab, "buildpack-deps:bookworm").expect("a note");
        assert!(note.contains("buildpack-deps:bookworm") && note.contains("Docker-in-Docker"));
        let note = ci_note(Ci::Jenkins, "rust:1-bookworm").expect("a note");
        assert!(note.contains("rust:1-bookworm") && note.contains(TOOLCHAIN_DOCKERFILE));
        let jenkins = plan(dir.path(), Some(Toolchain::Rust), Some(Ci::Jenkins), None);
        let dockerfile = jenkins.last().expect("a Dockerfile");
        assert_eq!(dockerfile.path, TOOLCHAIN_DOCKERFILE);
        assert!(
            dockerfile.text.contains("\nFROM rust:1-bookworm\n")
                && dockerfile
                    .text
                    .contains("COPY --from=bork-ci /usr/local/bin/bork-ci"),
            "{}",
            dockerfile.text
        );
        assert!(jenkins[2].text.contains("dir '.config'"), "{}", jenkins[2].text);
        assert!(
            files[1].text.ends_with("\nexec bork-ci check -- make test\n"),
            "{}",
            files[1].text
        );
        let python = plan(dir.path(), Some(Toolchain::Python), None, None);
        assert!(
            python[1]
                .text
                .ends_with(" bork-ci check -- python3 -m pytest -q -p no:cacheprovider\n"),
            "{}",
            python[1].text
        );
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
