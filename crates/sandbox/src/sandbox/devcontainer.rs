//! `sandbox.image = "devcontainer"`: the judges run in the repository's dev container.
//!
//! Reads `.devcontainer/devcontainer.json` (else `.devcontainer.json`), JSON with comments and
//! trailing commas as the Dev Container specification allows, and says which image it names:
//! `image` as is, or `build.dockerfile` with its `context`, `args` and `target` (paths relative to
//! the file's folder, kept inside the repository). Building is the Docker backend's
//! (`docker::DockerSandbox::devcontainer_image`); the dev container's files are judge files
//! (`edit::judge_files`), and so is everything its build reads ([`build_inputs`]: the Dockerfile,
//! the context's `.dockerignore`, every source of a `COPY` or `ADD`), so the model cannot change
//! what the judges run in. Pure but for reading files.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The value of `sandbox.image` that asks for the dev container.
pub const IMAGE_VALUE: &str = "devcontainer";

/// Where the specification looks, in order.
pub const FILES: &[&str] = &[".devcontainer/devcontainer.json", ".devcontainer.json"];

/// Largest `devcontainer.json` read.
const MAX_BYTES: u64 = 1 << 20;

/// What the dev container's judges run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DevContainer {
    /// An image by name (`image`).
    Image(String),
    /// An image built from a Dockerfile (`build`), paths relative to the repository root.
    Build {
        dockerfile: PathBuf,
        context: PathBuf,
        args: BTreeMap<String, String>,
        target: Option<String>,
    },
}

/// Reads the repository's dev container. The error says what is missing or wrong, naming the
/// file.
pub fn read(repo: &Path) -> Result<DevContainer, String> {
    let Some(file) = FILES
        .iter()
        .find(|file| std::fs::symlink_metadata(repo.join(file)).is_ok_and(|meta| meta.is_file()))
    else {
        return Err(format!(
            "`sandbox.image` is \"{IMAGE_VALUE}\", but the repository has no {} (a regular file)",
            FILES.join(" or ")
        ));
    };
    let bytes = bork_ci_core::safe_fs::read_regular(&repo.join(file), MAX_BYTES)
        .map_err(|error| format!("reading {file}: {error}"))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("{file} is not UTF-8"))?;
    parse(&text, file)
}

/// Parses the text of the dev container file at `file` (a repository path).
pub fn parse(text: &str, file: &str) -> Result<DevContainer, String> {
    let options = jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        ..Default::default()
    };
    let value = jsonc_parser::parse_to_serde_value::<Option<serde_json::Value>>(text, &options)
        .map_err(|error| format!("{file} is not valid JSON with comments: {error}"))?
        .ok_or_else(|| format!("{file} is empty"))?;
    let folder = Path::new(file).parent().unwrap_or(Path::new(""));
    if let Some(image) = value.get("image") {
        let image = image
            .as_str()
            .filter(|image| !image.trim().is_empty())
            .ok_or_else(|| format!("{file}: `image` must name an image"))?;
        return Ok(DevContainer::Image(image.to_owned()));
    }
    let Some(build) = value.get("build") else {
        if value.get("dockerComposeFile").is_some() {
            return Err(format!(
                "{file} uses `dockerComposeFile`, which bork-ci does not run: give `image` or `build.dockerfile`, or set `sandbox.image` to an image"
            ));
        }
        return Err(format!("{file} has neither `image` nor `build.dockerfile`"));
    };
    let text_of = |key: &str| -> Result<Option<String>, String> {
        match build.get(key) {
            None => Ok(None),
            Some(serde_json::Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(format!("{file}: `build.{key}` must be a string")),
        }
    };
    let dockerfile = text_of("dockerfile")?.ok_or_else(|| format!("{file}: `build` needs `dockerfile`"))?;
    let context = text_of("context")?.unwrap_or_else(|| ".".to_owned());
    let target = text_of("target")?;
    let mut args = BTreeMap::new();
    if let Some(given) = build.get("args") {
        let given = given
            .as_object()
            .ok_or_else(|| format!("{file}: `build.args` must be an object of strings"))?;
        for (name, value) in given {
            let value = value
                .as_str()
                .ok_or_else(|| format!("{file}: `build.args.{name}` must be a string"))?;
            args.insert(name.clone(), value.to_owned());
        }
    }
    let inside = |key: &str, raw: &str| {
        within(&folder.join(raw))
            .ok_or_else(|| format!("{file}: `build.{key}` ({raw}) must stay inside the repository"))
    };
    Ok(DevContainer::Build {
        dockerfile: inside("dockerfile", &dockerfile)?,
        context: inside("context", &context)?,
        args,
        target,
    })
}

/// Largest Dockerfile read.
const MAX_DOCKERFILE_BYTES: u64 = 1 << 20;

/// What building the repository's dev container reads, as anchored gitignore-style globs
/// relative to the repository root (`/Dockerfile`, `/src/`): the dev container file, and for a
/// `build` its Dockerfile, the `.dockerignore` files that shape its context and every source of
/// its `COPY` and `ADD` instructions (and `RUN --mount=type=bind`). A source that is the whole
/// context (`.`), names a variable, leaves the context or cannot be parsed stands for the whole
/// context; `notes` says so. No dev container: an empty list. An error names a file that exists
/// but cannot be read or parsed.
pub fn build_inputs(repo: &Path) -> Result<BuildInputs, String> {
    let Some(file) = FILES
        .iter()
        .find(|file| std::fs::symlink_metadata(repo.join(file)).is_ok_and(|meta| meta.is_file()))
    else {
        return Ok(BuildInputs::default());
    };
    let mut inputs = BuildInputs {
        globs: vec![format!("/{}", globset::escape(file))],
        notes: Vec::new(),
    };
    let DevContainer::Build {
        dockerfile, context, ..
    } = read(repo)?
    else {
        return Ok(inputs);
    };
    let dockerfile_text = dockerfile.to_string_lossy().into_owned();
    inputs.globs.push(anchored(&dockerfile_text));
    let ignore = context.join(".dockerignore").to_string_lossy().into_owned();
    inputs.globs.push(anchored(&ignore));
    inputs
        .globs
        .push(anchored(&format!("{dockerfile_text}.dockerignore")));
    let text = match bork_ci_core::safe_fs::read_regular(&repo.join(&dockerfile), MAX_DOCKERFILE_BYTES) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(format!("reading {dockerfile_text}: {error}")),
    };
    let whole = || {
        let context = context.to_string_lossy();
        if context.is_empty() {
            "/**".to_owned()
        } else {
            format!("/{}/", globset::escape(&context))
        }
    };
    for source in dockerfile_sources(&text) {
        match source {
            Source::Path(path) => match within(&context.join(&path)) {
                Some(inside) if !inside.as_os_str().is_empty() && inside != context => {
                    // The source's own wildcards stay wildcards; the context's path is literal.
                    let relative = inside
                        .strip_prefix(&context)
                        .map(|rest| rest.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let prefix = context.to_string_lossy();
                    inputs.globs.push(if prefix.is_empty() {
                        format!("/{relative}")
                    } else {
                        format!("/{}/{relative}", globset::escape(&prefix))
                    });
                }
                _ => {
                    inputs.notes.push(format!(
                        "{dockerfile_text} reads `{path}`, the whole build context: every file in it is held"
                    ));
                    inputs.globs.push(whole());
                }
            },
            Source::Whole(why) => {
                inputs.notes.push(format!(
                    "{dockerfile_text}: {why}, so the whole build context counts as read: every file in it is held"
                ));
                inputs.globs.push(whole());
            }
        }
    }
    inputs.globs.dedup();
    Ok(inputs)
}

/// What the dev container's build reads (see [`build_inputs`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildInputs {
    /// Anchored gitignore-style globs relative to the repository root.
    pub globs: Vec<String>,
    /// Why a glob stands for the whole context, for the log.
    pub notes: Vec<String>,
}

fn anchored(path: &str) -> String {
    format!("/{}", globset::escape(path))
}

/// One thing a Dockerfile reads from its build context.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    /// A path or wildcard relative to the context.
    Path(String),
    /// The whole context, and why.
    Whole(String),
}

/// The context sources of a Dockerfile's `COPY`, `ADD` and `RUN --mount=type=bind`
/// instructions; sources of another stage or image (`--from`), URLs and here-documents read
/// nothing of the context.
fn dockerfile_sources(text: &str) -> Vec<Source> {
    let escape = text
        .lines()
        .take_while(|line| line.trim_start().starts_with('#'))
        .find_map(|line| {
            let directive = line.trim_start().trim_start_matches('#').trim();
            let (name, value) = directive.split_once('=')?;
            (name.trim().eq_ignore_ascii_case("escape")).then(|| value.trim().chars().next())?
        })
        .unwrap_or('\\');
    let mut sources = Vec::new();
    let mut logical = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        // Comments and empty lines, also inside a continued instruction, are dropped.
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix(escape) {
            logical.push_str(body);
            logical.push(' ');
            continue;
        }
        logical.push_str(trimmed);
        sources.extend(instruction_sources(&std::mem::take(&mut logical)));
    }
    if !logical.is_empty() {
        sources.extend(instruction_sources(&logical));
    }
    sources
}

fn instruction_sources(instruction: &str) -> Vec<Source> {
    let mut words = instruction.split_whitespace();
    let Some(keyword) = words.next() else {
        return Vec::new();
    };
    let keyword = keyword.to_ascii_uppercase();
    let rest: Vec<&str> = words.collect();
    match keyword.as_str() {
        "COPY" | "ADD" => copy_sources(instruction, &rest),
        "RUN" => rest
            .iter()
            .take_while(|word| word.starts_with("--"))
            .filter_map(|word| word.strip_prefix("--mount="))
            .filter_map(bind_source)
            .collect(),
        _ => Vec::new(),
    }
}

fn copy_sources(instruction: &str, words: &[&str]) -> Vec<Source> {
    let flags: Vec<&str> = words
        .iter()
        .copied()
        .take_while(|word| word.starts_with("--"))
        .collect();
    if flags.iter().any(|flag| flag.starts_with("--from")) {
        return Vec::new();
    }
    let rest = words[flags.len()..].join(" ");
    if rest.starts_with("<<") {
        return Vec::new();
    }
    let arguments: Vec<String> = if rest.trim_start().starts_with('[') {
        match serde_json::from_str::<Vec<String>>(rest.trim()) {
            Ok(list) => list,
            Err(_) => {
                return vec![Source::Whole(format!(
                    "`{}` cannot be parsed",
                    bork_ci_core::untrusted::one_line(instruction)
                ))];
            }
        }
    } else {
        words[flags.len()..]
            .iter()
            .map(|word| (*word).to_owned())
            .collect()
    };
    let Some((_, sources)) = arguments.split_last() else {
        return Vec::new();
    };
    sources
        .iter()
        .filter(|source| !is_remote(source))
        .map(|source| source_of(source, instruction))
        .collect()
}

/// The source of a `RUN --mount=type=bind,...`: the context's root unless `source` says
/// otherwise; a bind of another stage or image (`from`) reads nothing of the context.
fn bind_source(options: &str) -> Option<Source> {
    let pairs: Vec<(&str, &str)> = options
        .split(',')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .collect();
    let value = |key: &str| {
        pairs
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| *value)
    };
    if value("type") != Some("bind") || value("from").is_some() {
        return None;
    }
    Some(source_of(
        value("source").or(value("src")).unwrap_or("."),
        &format!("RUN --mount={options}"),
    ))
}

fn is_remote(source: &str) -> bool {
    ["http://", "https://", "git@", "git://"]
        .iter()
        .any(|scheme| source.starts_with(scheme))
}

fn source_of(source: &str, instruction: &str) -> Source {
    let trimmed = source.trim_end_matches('/');
    if source.contains('$') {
        return Source::Whole(format!(
            "`{}` names a variable",
            bork_ci_core::untrusted::one_line(instruction)
        ));
    }
    if trimmed.is_empty() || trimmed == "." || trimmed == "./" || trimmed == "*" {
        return Source::Path(".".to_owned());
    }
    Source::Path(
        trimmed
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_owned(),
    )
}

/// `path` with `.` and `..` resolved lexically, or `None` when it leaves the root (or is
/// absolute).
fn within(path: &Path) -> Option<PathBuf> {
    let mut kept: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => kept.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                kept.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(kept.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_and_build_with_comments_and_trailing_commas() {
        let file = ".devcontainer/devcontainer.json";
        assert_eq!(
            parse("// the team's image\n{\"image\": \"rust:1\", /* x */ }", file),
            Ok(DevContainer::Image("rust:1".into()))
        );
        let built = parse(
            r#"{ "build": { "dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}, "target": "dev", }, }"#,
            file,
        )
        .expect("parses");
        assert_eq!(
            built,
            DevContainer::Build {
                dockerfile: PathBuf::from(".devcontainer/Dockerfile"),
                context: PathBuf::new(),
                args: BTreeMap::from([("V".to_owned(), "1".to_owned())]),
                target: Some("dev".into()),
            }
        );
        let root = parse(
            r#"{"build": {"dockerfile": "ci/Dockerfile"}}"#,
            ".devcontainer.json",
        )
        .expect("parses");
        assert!(matches!(root, DevContainer::Build { ref context, .. } if context == &PathBuf::new()));
    }

    /// A repository with these files.
    #[expect(clippy::disallowed_methods, reason = "the test lays out its fixture")]
    fn repo_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, text) in files {
            let full = dir.path().join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(full, text).expect("write");
        }
        dir
    }

    #[test]
    fn build_inputs_of_the_common_layouts() {
        // The Dockerfile at the root, the root as the context.
        let root = repo_with(&[
            (
                ".devcontainer/devcontainer.json",
                r#"{"build": {"dockerfile": "../Dockerfile", "context": ".."}}"#,
            ),
            (
                "Dockerfile",
                "# syntax=docker/dockerfile:1\nFROM rust:1 AS base\nCOPY requirements.txt tools/*.sh /opt/\n\
                 COPY --chown=1000 --chmod=644 [\"ci/a b.txt\", \"/opt/\"]\nADD https://example.com/x.tgz /opt/\n\
                 COPY --from=base /usr/bin/cargo /usr/bin/\nRUN --mount=type=bind,source=scripts,target=/s sh /s/go \\\n  && true\n\
                 COPY <<EOF /etc/x\nhello\nEOF\nRUN apt-get update \\\n  # a comment\n\n  && apt-get install -y git\n",
            ),
        ]);
        let inputs = build_inputs(root.path()).expect("reads");
        assert_eq!(
            inputs.globs,
            [
                "/.devcontainer/devcontainer.json",
                "/Dockerfile",
                "/.dockerignore",
                "/Dockerfile.dockerignore",
                "/requirements.txt",
                "/tools/*.sh",
                "/ci/a b.txt",
                "/scripts",
            ]
        );
        assert!(inputs.notes.is_empty(), "{:?}", inputs.notes);

        // `COPY . .` reads the whole context: with the root as the context, every file.
        let whole = repo_with(&[
            (
                ".devcontainer/devcontainer.json",
                r#"{"build": {"dockerfile": "../Dockerfile", "context": ".."}}"#,
            ),
            ("Dockerfile", "FROM python:3\nWORKDIR /app\nCOPY . .\n"),
        ]);
        let inputs = build_inputs(whole.path()).expect("reads");
        assert_eq!(inputs.globs.last().map(String::as_str), Some("/**"));
        assert!(
            inputs.notes[0].contains("whole build context"),
            "{:?}",
            inputs.notes
        );

        // A context of its own: the sources are under it, variables stand for all of it.
        let nested = repo_with(&[
            (
                ".devcontainer/devcontainer.json",
                r#"{"build": {"dockerfile": "Dockerfile", "context": "."}}"#,
            ),
            (
                ".devcontainer/Dockerfile",
                "FROM debian\nCOPY setup.sh /\nARG DIR=x\nCOPY $DIR /x\nCOPY ../../etc/passwd /\n",
            ),
        ]);
        let inputs = build_inputs(nested.path()).expect("reads");
        assert_eq!(
            inputs.globs,
            [
                "/.devcontainer/devcontainer.json",
                "/.devcontainer/Dockerfile",
                "/.devcontainer/.dockerignore",
                "/.devcontainer/Dockerfile.dockerignore",
                "/.devcontainer/setup.sh",
                "/.devcontainer/",
            ]
        );
        assert_eq!(inputs.notes.len(), 2, "{:?}", inputs.notes);

        // An image by name reads only its file; no dev container reads nothing.
        let image = repo_with(&[(".devcontainer.json", r#"{"image": "rust:1"}"#)]);
        assert_eq!(
            build_inputs(image.path()).expect("reads").globs,
            ["/.devcontainer.json"]
        );
        let none = repo_with(&[("README.md", "hi")]);
        assert_eq!(build_inputs(none.path()).expect("reads"), BuildInputs::default());
        let broken = repo_with(&[(".devcontainer.json", "{not json")]);
        assert!(build_inputs(broken.path()).is_err());
    }

    #[test]
    fn escapes_and_gaps_are_refused() {
        let file = ".devcontainer/devcontainer.json";
        assert!(parse(r#"{"build": {"dockerfile": "../../etc/Dockerfile"}}"#, file).is_err());
        assert!(parse(r#"{"build": {"dockerfile": "D", "context": "/"}}"#, file).is_err());
        assert!(
            parse(r#"{"dockerComposeFile": "x.yml"}"#, file)
                .unwrap_err()
                .contains("dockerComposeFile")
        );
        assert!(parse("{}", file).is_err());
        assert!(parse(r#"{"image": ""}"#, file).is_err());
        assert!(parse("{not json", file).is_err());
    }
}
