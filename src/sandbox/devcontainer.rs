//! `sandbox.image = "devcontainer"`: the judges run in the repository's dev container.
//!
//! Reads `.devcontainer/devcontainer.json` (else `.devcontainer.json`), JSON with comments and
//! trailing commas as the Dev Container specification allows, and says which image it names:
//! `image` as is, or `build.dockerfile` with its `context`, `args` and `target` (paths relative to
//! the file's folder, kept inside the repository). Building is the Docker backend's
//! (`docker::DockerSandbox::devcontainer_image`); the dev container's files are judge files
//! (`edit::judge_files`), so the model cannot change what the judges run in. Pure but for reading
//! the file.

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
    let bytes = crate::safe_fs::read_regular(&repo.join(file), MAX_BYTES)
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
