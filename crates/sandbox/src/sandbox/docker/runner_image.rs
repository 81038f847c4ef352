//! The edit step's image when `sandbox.runner-image` is not set: built by bork-ci itself, through
//! the Engine API, from its own executable. No registry, no Dockerfile on disk, no script.
//!
//! The image is one layer loaded through the Engine API (`POST /images/load`, the format
//! `docker save` writes, which Docker and Podman both take): a root filesystem, as a tar held in
//! memory, with the executable at `/usr/local/bin/bork-ci`, `/tmp`, `/repo` and `/state`, and a
//! configuration bork-ci writes itself. A statically linked bork-ci (the release build) needs
//! nothing else. A dynamically linked one (a development build) also gets its ELF interpreter
//! and the shared libraries `ldd` lists, at the paths the executable names them; when they
//! cannot be found the load stops with an error that says so. The layer is byte for byte the
//! same for the same executable, so its digest is known before the engine is asked: an image is
//! used (by id) only when it holds exactly that layer and bork-ci's configuration (see
//! [`ensure`]). The image is tagged `bork-ci-runner:<first 16 hex digits of the executable's
//! sha256>`, labelled, and reused by every later run of the same executable. This module does
//! not run containers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::query_parameters::{ImportImageOptions, ListImagesOptions, RemoveImageOptions};
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::{SandboxError, is_not_found, labels};

/// The repository part of the image's name; the tag is the executable's digest.
pub const REPOSITORY: &str = "bork-ci-runner";
/// Label on every runner image bork-ci builds: the executable's full sha256.
pub const BINARY_LABEL: &str = "bork-ci.binary-sha256";
/// Label marking an image as a runner image bork-ci built.
pub const RUNNER_LABEL: &str = "bork-ci.runner-image";
/// Largest executable read (a debug build is about 100 MB).
const MAX_EXECUTABLE: u64 = 1 << 30;
/// Largest shared library copied into the image.
const MAX_LIBRARY: u64 = 256 << 20;
/// Where the executable lives in the image; `PATH` points there.
pub const BIN_DIR: &str = "/usr/local/bin";

/// The executable this process runs, read once.
pub struct Executable {
    pub bytes: Vec<u8>,
    pub sha256: String,
    /// Where it was read from (for messages and `ldd`).
    pub path: PathBuf,
}

impl Executable {
    /// Reads this process's own executable (`/proc/self/exe`, which still names it when the
    /// file on disk was replaced since it started) and hashes it.
    pub fn current() -> Result<Executable, SandboxError> {
        let path = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let bytes = bork_ci_core::safe_fs::read_regular(Path::new("/proc/self/exe"), MAX_EXECUTABLE)
            .map_err(|source| SandboxError::Prepare {
                what: "bork-ci's own executable (/proc/self/exe) for the edit step's image".into(),
                source,
            })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(Executable { bytes, sha256, path })
    }

    /// Reads the bork-ci executable at `path` (a library user's choice; bork-ci itself uses
    /// [`Executable::current`]).
    pub fn at(path: &Path) -> Result<Executable, SandboxError> {
        let bytes = bork_ci_core::safe_fs::read_regular(path, MAX_EXECUTABLE).map_err(|source| {
            SandboxError::Prepare {
                what: format!(
                    "the bork-ci executable {} for the edit step's image",
                    path.display()
                ),
                source,
            }
        })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(Executable {
            bytes,
            sha256,
            path: path.to_owned(),
        })
    }

    /// `bork-ci-runner:<16 hex>`.
    pub fn tag(&self) -> String {
        tag_of(&self.sha256)
    }
}

/// The runner image's tag for the executable whose sha256 (hex) is `sha256`:
/// `bork-ci-runner:<its first 16 hex digits>`.
fn tag_of(sha256: &str) -> String {
    format!("{REPOSITORY}:{}", &sha256[..16])
}

/// The ELF interpreter an executable names (`PT_INTERP`), or `None` for a static executable.
/// Only 64-bit little-endian ELF is read; anything else is reported as not ELF.
pub fn interpreter(elf: &[u8]) -> Result<Option<String>, String> {
    let field = |offset: usize, len: usize| -> Result<u64, String> {
        let bytes = elf
            .get(offset..offset + len)
            .ok_or_else(|| "the executable is truncated".to_owned())?;
        let mut value = 0u64;
        for (i, byte) in bytes.iter().enumerate() {
            value |= u64::from(*byte) << (8 * i);
        }
        Ok(value)
    };
    if elf.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("the executable is not an ELF file".into());
    }
    if elf.get(4) != Some(&2) || elf.get(5) != Some(&1) {
        return Err("the executable is not a 64-bit little-endian ELF file".into());
    }
    let phoff = field(0x20, 8)? as usize;
    let phentsize = field(0x36, 2)? as usize;
    let phnum = field(0x38, 2)? as usize;
    for index in 0..phnum {
        let header = phoff + index * phentsize;
        const PT_INTERP: u64 = 3;
        if field(header, 4)? != PT_INTERP {
            continue;
        }
        let offset = field(header + 8, 8)? as usize;
        let size = field(header + 32, 8)? as usize;
        let raw = elf
            .get(offset..offset + size)
            .ok_or_else(|| "the executable's interpreter entry is truncated".to_owned())?;
        let name = raw.split(|b| *b == 0).next().unwrap_or_default();
        return String::from_utf8(name.to_vec())
            .map(Some)
            .map_err(|_| "the executable's interpreter path is not UTF-8".to_owned());
    }
    Ok(None)
}

/// Parses `ldd` output into the absolute paths it resolved (`name => /path (0x…)` and
/// `/path (0x…)` lines); `not found` is an error naming the library.
pub fn parse_ldd(output: &str) -> Result<Vec<String>, String> {
    let mut paths = Vec::new();
    for line in output.lines().map(str::trim) {
        if line.is_empty() || line.starts_with("linux-vdso") || line.starts_with("linux-gate") {
            continue;
        }
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(format!("the shared library {} was not found", name.trim()));
                }
                rest
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or_default().trim();
        if path.starts_with('/') {
            paths.push(path.to_owned());
        }
    }
    Ok(paths)
}

/// Lists the shared libraries of `executable` with `ldd`.
#[expect(
    clippy::disallowed_methods,
    reason = "the sandbox: ldd on bork-ci's own executable"
)]
fn libraries(executable: &Path) -> Result<Vec<String>, String> {
    let output = std::process::Command::new("ldd")
        .arg(executable)
        .env("LC_ALL", "C")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|error| format!("running `ldd`: {error}"))?;
    if !output.status.success() {
        return Err(format!(
            "`ldd {}` failed: {}",
            executable.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    parse_ldd(&String::from_utf8_lossy(&output.stdout))
}

/// The image's one layer: a root filesystem as a tar held in memory, byte for byte the same for
/// the same executable (sorted entries, owner root, mtime 0), so its digest is known before the
/// engine is asked.
pub fn layer(executable: &Executable) -> Result<Vec<u8>, SandboxError> {
    let failed = |reason: String| SandboxError::RunnerImage {
        image: executable.tag(),
        reason,
    };
    // Files of the root filesystem: absolute path in the image → content and mode.
    // The executable's bytes are borrowed: the layer is their one copy.
    let mut files: BTreeMap<String, (std::borrow::Cow<'_, [u8]>, u32)> = BTreeMap::new();
    files.insert(
        format!("{BIN_DIR}/bork-ci"),
        (std::borrow::Cow::Borrowed(&executable.bytes[..]), 0o755),
    );
    if let Some(interpreter) = interpreter(&executable.bytes).map_err(failed)? {
        let mut needed = libraries(&executable.path).map_err(|reason| {
            failed(format!(
                "{} is dynamically linked (interpreter {interpreter}) and its libraries could not be listed: {reason}",
                executable.path.display()
            ))
        })?;
        needed.push(interpreter);
        for library in needed {
            let bytes =
                bork_ci_core::safe_fs::read_regular(Path::new(&library), MAX_LIBRARY).map_err(|error| {
                    failed(format!(
                        "{} is dynamically linked and its library {library} could not be read: {error}",
                        executable.path.display()
                    ))
                })?;
            files.insert(library, (std::borrow::Cow::Owned(bytes), 0o755));
        }
    }
    let mut builder = tar::Builder::new(Vec::new());
    let result = (|| -> std::io::Result<()> {
        for dir in ["tmp", "repo", "state"] {
            let mode = if dir == "tmp" { 0o1777 } else { 0o755 };
            append(&mut builder, dir, &[], mode, tar::EntryType::Directory)?;
        }
        let mut dirs: Vec<String> = Vec::new();
        for (path, (bytes, mode)) in &files {
            let mut parent = String::new();
            for component in Path::new(path)
                .parent()
                .into_iter()
                .flat_map(Path::components)
                .skip(1)
            {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(&component.as_os_str().to_string_lossy());
                if !dirs.contains(&parent) {
                    append(&mut builder, &parent, &[], 0o755, tar::EntryType::Directory)?;
                    dirs.push(parent.clone());
                }
            }
            append(
                &mut builder,
                path.trim_start_matches('/'),
                bytes,
                *mode,
                tar::EntryType::Regular,
            )?;
        }
        Ok(())
    })();
    result.map_err(|error| failed(format!("writing the image's layer: {error}")))?;
    builder
        .into_inner()
        .map_err(|error| failed(format!("writing the image's layer: {error}")))
}

/// What names a [`tool_layout`] without reading its files: each file's place and, for a file of
/// this host, its [`stamp`] (a file replaced or rewritten gets another), for text the text.
pub fn tool_key(layout: &[(String, ToolFile)]) -> String {
    let mut key = String::new();
    for (inside, file) in layout {
        key.push_str(inside);
        key.push('\0');
        match file {
            ToolFile::Host(path) => {
                key.push_str(&path.display().to_string());
                key.push('\0');
                key.push_str(&stamp(path).unwrap_or_default());
            }
            ToolFile::Text(text) => key.push_str(text),
        }
        key.push('\0');
    }
    key
}

/// Where judge containers find bork-ci itself (a read-only volume), so that a checker or a
/// Verifier step can run `bork-ci check`; the model cannot edit it, it is not in the repository.
pub const TOOL_DIR: &str = "/opt/bork-ci";
/// The folder put first on a judge's `PATH`; `bork-ci` in it runs bork-ci.
pub const TOOL_BIN: &str = "/opt/bork-ci/bin";

/// One file of the folder mounted at [`TOOL_DIR`]: a file of this host, or text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolFile {
    Host(PathBuf),
    Text(String),
}

/// The folder mounted at [`TOOL_DIR`] in judge containers: paths inside it and their files. A
/// static executable is `bin/bork-ci` itself. A dynamically linked one (a development build) is
/// `libexec/bork-ci` with its ELF interpreter and the libraries `ldd` lists in `lib/`, and
/// `bin/bork-ci` is a `/bin/sh` script that starts it through that interpreter with that
/// library path, so that it runs in an image whose C library differs or is absent (busybox).
pub fn tool_layout(executable: &Path) -> Result<Vec<(String, ToolFile)>, SandboxError> {
    let failed = |reason: String| SandboxError::Prepare {
        what: format!("bork-ci's own executable {} for the judges", executable.display()),
        source: std::io::Error::other(reason),
    };
    // The ELF header and program headers are at the start; the interpreter's name follows them.
    let head =
        bork_ci_core::safe_fs::read_prefix(executable, 1 << 20).map_err(|error| failed(error.to_string()))?;
    let Some(interpreter) = interpreter(&head).map_err(failed)? else {
        return Ok(vec![(
            "bin/bork-ci".to_owned(),
            ToolFile::Host(executable.to_owned()),
        )]);
    };
    let mut needed = libraries(executable).map_err(failed)?;
    needed.push(interpreter.clone());
    let name_of = |path: &str| {
        Path::new(path)
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut layout = vec![(
        "libexec/bork-ci".to_owned(),
        ToolFile::Host(executable.to_owned()),
    )];
    for library in needed {
        let inside = format!("lib/{}", name_of(&library));
        if !layout.iter().any(|(known, _)| *known == inside) {
            layout.push((inside, ToolFile::Host(PathBuf::from(library))));
        }
    }
    let loader = name_of(&interpreter);
    layout.push((
        "bin/bork-ci".to_owned(),
        ToolFile::Text(format!(
            "#!/bin/sh\nexec {TOOL_DIR}/lib/{loader} --library-path {TOOL_DIR}/lib {TOOL_DIR}/libexec/bork-ci \"$@\"\n"
        )),
    ));
    layout.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(layout)
}

/// [`tool_layout`] as a tar, for a volume (over `copy`, where host files cannot be mounted).
pub fn tool_folder(layout: &[(String, ToolFile)]) -> Result<Vec<u8>, SandboxError> {
    let failed = |reason: String| SandboxError::Prepare {
        what: "bork-ci's own folder for the judges".to_owned(),
        source: std::io::Error::other(reason),
    };
    let mut builder = tar::Builder::new(Vec::new());
    for dir in ["bin", "lib", "libexec"] {
        append(&mut builder, dir, &[], 0o755, tar::EntryType::Directory)
            .map_err(|error| failed(error.to_string()))?;
    }
    for (path, file) in layout {
        let bytes = match file {
            ToolFile::Host(host) => bork_ci_core::safe_fs::read_regular(host, MAX_EXECUTABLE)
                .map_err(|error| failed(format!("reading {}: {error}", host.display())))?,
            ToolFile::Text(text) => text.clone().into_bytes(),
        };
        append(&mut builder, path, &bytes, 0o755, tar::EntryType::Regular)
            .map_err(|error| failed(error.to_string()))?;
    }
    builder.into_inner().map_err(|error| failed(error.to_string()))
}

/// One entry of a deterministic tar: owner root, mtime 0.
fn append(
    builder: &mut tar::Builder<Vec<u8>>,
    path: &str,
    bytes: &[u8],
    mode: u32,
    kind: tar::EntryType,
) -> std::io::Result<()> {
    let mut header = header_of(bytes.len() as u64, mode, kind);
    builder.append_data(&mut header, path, bytes)
}

/// The header of a deterministic entry of `size` bytes (owner root, mtime 0), its path not set.
fn header_of(size: u64, mode: u32, kind: tar::EntryType) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(size);
    header
}

/// The runner's environment, working folder and command: all of its configuration that a
/// container sees.
const ENV: [&str; 2] = ["PATH=/usr/local/bin", "HOME=/tmp"];
const WORKDIR: &str = "/repo";
const CMD: [&str; 2] = ["bork-ci", "--version"];

/// The platform the image says it is for, in the engine's (Go's) names.
fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The image's configuration (the OCI/Docker image config): one layer `layer_digest`, the
/// runner's environment, labels for `gc` and people.
pub fn config(executable: &Executable, layer_digest: &str, created: u64) -> Vec<u8> {
    let labels = serde_json::json!({
        labels::MARK: "1",
        RUNNER_LABEL: "1",
        BINARY_LABEL: executable.sha256,
        labels::CREATED: created.to_string(),
    });
    let when = time::OffsetDateTime::from_unix_timestamp(i64::try_from(created).unwrap_or(0))
        .ok()
        .and_then(|at| at.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned());
    let config = serde_json::json!({
        "architecture": architecture(),
        "os": "linux",
        "created": when,
        "config": {
            "Env": ENV,
            "Cmd": CMD,
            "WorkingDir": WORKDIR,
            "Labels": labels,
        },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
        "history": [{ "created": when, "created_by": "bork-ci (its own executable)" }],
    });
    serde_json::to_vec(&config).unwrap_or_default()
}

/// The image as `docker save` writes it (the format `POST /images/load` takes on every engine):
/// `manifest.json`, the configuration and the one layer, tagged `tag`.
pub fn archive(tag: &str, config: &[u8], layer: &[u8]) -> std::io::Result<Vec<u8>> {
    let chunks = archive_chunks(tag, config, bytes::Bytes::copy_from_slice(layer))?;
    Ok(chunks.concat())
}

/// [`archive`] as the chunks of one stream, the layer's bytes one of them, shared rather than
/// copied (it holds the whole executable).
pub fn archive_chunks(tag: &str, config: &[u8], layer: bytes::Bytes) -> std::io::Result<Vec<bytes::Bytes>> {
    let config_name = format!("{}.json", hex::encode(Sha256::digest(config)));
    let layer_dir = hex::encode(Sha256::digest(&layer));
    let layer_name = format!("{layer_dir}/layer.tar");
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [tag],
        "Layers": [layer_name],
    }]);
    // The folder's entry and the layer's header, as `append` writes them; then the layer; then
    // the padding to a whole block.
    let mut head = Vec::with_capacity(1024);
    for (path, size, mode, kind) in [
        (layer_dir.as_str(), 0, 0o755, tar::EntryType::Directory),
        (
            layer_name.as_str(),
            layer.len() as u64,
            0o644,
            tar::EntryType::Regular,
        ),
    ] {
        let mut header = header_of(size, mode, kind);
        header.set_path(path)?;
        header.set_cksum();
        head.extend_from_slice(header.as_bytes());
    }
    let padding = vec![0u8; (512 - layer.len() % 512) % 512];
    let mut builder = tar::Builder::new(padding);
    append(&mut builder, &config_name, config, 0o644, tar::EntryType::Regular)?;
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    append(
        &mut builder,
        "manifest.json",
        &manifest,
        0o644,
        tar::EntryType::Regular,
    )?;
    Ok(vec![head.into(), layer, builder.into_inner()?.into()])
}

/// The runner image a run uses: its tag (for people) and its id (what containers are created
/// from, so that a tag moved after the check changes nothing).
#[derive(Debug, Clone)]
pub struct RunnerImage {
    pub tag: String,
    pub id: String,
    /// The digest of its one layer (`sha256:…`).
    pub layer_digest: String,
}

/// What an executable's runner image is, remembered per executable on disk so that a later run
/// of the same file learns it without reading the file: the executable's sha256 (its tag) and
/// the digest of the layer built from it. Kept in `<artifact root>/cache/runner-image/`, one
/// small file per executable, named by the executable's [`stamp`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Known {
    pub sha256: String,
    pub layer_digest: String,
}

/// Largest remembered-identity file read.
const MAX_KNOWN: u64 = 4096;

/// An executable's identity from `stat` alone: device, inode, size, and the modification and
/// change times in nanoseconds. Replacing or rewriting the file changes it (the change time moves
/// even when a writer restores the modification time), so a remembered [`Known`] is used only for
/// the very file it was computed from. `/proc/self/exe` stats the running executable, even when
/// the path it was started from now names another file.
pub fn stamp(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    meta.is_file().then(|| {
        format!(
            "{}:{}:{}:{}.{}:{}.{}",
            meta.dev(),
            meta.ino(),
            meta.size(),
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec()
        )
    })
}

/// The file that remembers the executable of `stamp`.
fn known_file(cache: &Path, stamp: &str) -> PathBuf {
    let name = hex::encode(&Sha256::digest(stamp.as_bytes())[..16]);
    cache.join(format!("{name}.json"))
}

/// What was remembered for the executable of `stamp`, if it was and still reads as such.
pub fn recall(cache: &Path, stamp: &str) -> Option<Known> {
    let bytes = bork_ci_core::safe_fs::read_regular(&known_file(cache, stamp), MAX_KNOWN).ok()?;
    let known: Known = serde_json::from_slice(&bytes).ok()?;
    let hex64 = |text: &str| text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit());
    (hex64(&known.sha256) && known.layer_digest.strip_prefix("sha256:").is_some_and(hex64)).then_some(known)
}

/// Remembers `known` for the executable of `stamp`; a failure only costs the next run the read.
pub fn remember(cache: &Path, stamp: &str, known: &Known) {
    let written = std::fs::create_dir_all(cache).and_then(|()| {
        let bytes = serde_json::to_vec(known).map_err(std::io::Error::other)?;
        bork_ci_core::safe_fs::write_atomic(&known_file(cache, stamp), &bytes)
    });
    if let Err(error) = written {
        tracing::debug!(%error, "the runner image's identity is not remembered");
    }
}

/// The runner image of the executable at `source` (`/proc/self/exe` when `None`), reading the
/// executable only when it must: when `cache` remembers this very file's identity ([`recall`])
/// and the engine holds exactly that image, nothing is read, hashed or built. Otherwise the
/// executable is read and [`ensure`]d, and its identity remembered for the next run.
pub async fn ensure_cached(
    docker: &Docker,
    source: Option<PathBuf>,
    cache: &Path,
) -> Result<RunnerImage, SandboxError> {
    let stat_path = source.clone().unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
    let before = stamp(&stat_path);
    if let Some(known) = before.as_deref().and_then(|before| recall(cache, before)) {
        let tag = tag_of(&known.sha256);
        if let Ok(image) = docker.inspect_image(&tag).await
            && let Ok(id) = checked(&image, &known.layer_digest)
        {
            return Ok(RunnerImage {
                tag,
                id,
                layer_digest: known.layer_digest,
            });
        }
    }
    let executable = tokio::task::spawn_blocking(move || match source {
        Some(path) => Executable::at(&path),
        None => Executable::current(),
    })
    .await
    .map_err(|e| SandboxError::Backend(e.to_string()))??;
    let built = ensure(docker, &executable).await?;
    // Remembered under the stamp taken before the read: a file replaced meanwhile gets a new
    // stamp, so what is remembered never names another file's image.
    if let Some(before) = before.filter(|before| Some(before) == stamp(&stat_path).as_ref()) {
        remember(
            cache,
            &before,
            &Known {
                sha256: executable.sha256.clone(),
                layer_digest: built.layer_digest.clone(),
            },
        );
    }
    Ok(built)
}

/// Makes sure the runner image of this executable exists and holds exactly what bork-ci would
/// load: one layer whose digest is the sha256 of [`layer`] (every engine checks a loaded layer
/// against the digest its configuration names, and a built one is named by its content), and
/// the configuration of [`config`]. An image under the tag that does not (a co-tenant of a
/// shared engine can tag anything) is never used: bork-ci's own is loaded again and the tag
/// moved to it. Loading one layer through the Engine API (`POST /images/load`) costs a
/// fraction of a second, so no lock is taken: two runs loading at once load the same content.
pub async fn ensure(docker: &Docker, executable: &Executable) -> Result<RunnerImage, SandboxError> {
    let tag = executable.tag();
    let layer = bytes::Bytes::from(bork_ci_core::blocking::run(|| layer(executable))?);
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&layer)));
    match docker.inspect_image(&tag).await {
        Ok(image) => match checked(&image, &digest) {
            Ok(id) => {
                return Ok(RunnerImage {
                    tag,
                    id,
                    layer_digest: digest,
                });
            }
            Err(problem) => tracing::warn!(
                "the image tagged {tag} is not the one bork-ci loads ({problem}); loading it again"
            ),
        },
        Err(error) if is_not_found(&error) => {}
        Err(error) => {
            return Err(SandboxError::Docker {
                operation: "inspect image",
                reason: error.to_string(),
            });
        }
    }
    load(docker, executable, &tag, &digest, layer).await?;
    let failed = |reason: String| SandboxError::RunnerImage {
        image: tag.clone(),
        reason,
    };
    let image = docker
        .inspect_image(&tag)
        .await
        .map_err(|error| failed(format!("inspecting the image just loaded: {error}")))?;
    let id = checked(&image, &digest).map_err(|problem| {
        failed(format!(
            "the engine's image under this tag is not what bork-ci loaded ({problem}); refusing to give it the key"
        ))
    })?;
    Ok(RunnerImage {
        tag,
        id,
        layer_digest: digest,
    })
}

/// The image's id when it is exactly the runner image: the one layer `digest`, the
/// configuration bork-ci loads, nothing that runs first or changes where requests go.
pub fn checked(image: &bollard::models::ImageInspect, digest: &str) -> Result<String, String> {
    let layers = image
        .root_fs
        .as_ref()
        .and_then(|root| root.layers.clone())
        .unwrap_or_default();
    if layers != [digest] {
        return Err(format!("its layers are {layers:?}, not [{digest}]"));
    }
    let config = image.config.clone().unwrap_or_default();
    let env = config.env.unwrap_or_default();
    if env != ENV {
        return Err(format!("its environment is {env:?}"));
    }
    if config.entrypoint.is_some_and(|entrypoint| !entrypoint.is_empty()) {
        return Err("it has an entrypoint".into());
    }
    if config.user.is_some_and(|user| !user.is_empty()) {
        return Err("it names a user".into());
    }
    if config.working_dir.as_deref() != Some(WORKDIR) {
        return Err(format!("its working folder is {:?}", config.working_dir));
    }
    if config.cmd.unwrap_or_default() != CMD {
        return Err("its command differs".into());
    }
    if config.volumes.is_some_and(|volumes| !volumes.is_empty())
        || config.on_build.is_some_and(|on_build| !on_build.is_empty())
        || config.shell.is_some_and(|shell| !shell.is_empty())
        || config.healthcheck.is_some()
        || config.stop_signal.is_some_and(|signal| !signal.is_empty())
    {
        return Err("it declares volumes, ONBUILD steps, a shell, a stop signal or a health check".into());
    }
    image
        .id
        .clone()
        .filter(|id| id.starts_with("sha256:"))
        .ok_or_else(|| "the engine gave no image id".to_owned())
}

/// Loads the runner image (`layer`, whose digest is `digest`) under `tag`.
async fn load(
    docker: &Docker,
    executable: &Executable,
    tag: &str,
    digest: &str,
    layer: bytes::Bytes,
) -> Result<(), SandboxError> {
    let failed = |reason: String| SandboxError::RunnerImage {
        image: tag.to_owned(),
        reason,
    };
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let config = config(executable, digest, created);
    let archive = bork_ci_core::blocking::run(|| archive_chunks(tag, &config, layer))
        .map_err(|error| failed(format!("writing the image archive: {error}")))?;
    tracing::info!(
        "loading the edit step's image {tag} from {}",
        executable.path.display()
    );
    let options = ImportImageOptions {
        quiet: true,
        ..Default::default()
    };
    // In slices: the HTTP client copies each chunk into its write buffer before sending it, so
    // a whole-layer chunk would be held twice.
    const SLICE: usize = 256 << 10;
    let slices = archive.into_iter().flat_map(|chunk| {
        (0..chunk.len().div_ceil(SLICE))
            .map(move |index| chunk.slice(index * SLICE..chunk.len().min((index + 1) * SLICE)))
    });
    let body = bollard::body_stream(futures_util::stream::iter(slices));
    let mut progress = docker.import_image(options, body, None);
    while let Some(item) = progress.next().await {
        match item {
            Ok(info) => {
                if let Some(message) = info.error_detail.and_then(|detail| detail.message) {
                    return Err(failed(message));
                }
                if let Some(stream) = info.stream.filter(|s| !s.trim().is_empty()) {
                    tracing::debug!("image load: {}", stream.trim());
                }
            }
            Err(error) => return Err(failed(error.to_string())),
        }
    }
    Ok(())
}

/// Removes runner images bork-ci built that are older than `current` (by their `created`
/// label) and that no container uses; returns their tags. Nothing is removed when `current`
/// does not exist yet.
pub async fn remove_stale(docker: &Docker, current: &str) -> Result<Vec<String>, SandboxError> {
    let created_of = |labels: &HashMap<String, String>| {
        labels
            .get(labels::CREATED)
            .and_then(|c| c.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let current_created = match docker.inspect_image(current).await {
        Ok(image) => image
            .config
            .and_then(|config| config.labels)
            .map(|labels| created_of(&labels))
            .unwrap_or(0),
        Err(_) => return Ok(Vec::new()),
    };
    let options = ListImagesOptions {
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("{RUNNER_LABEL}=1")],
        )])),
        ..Default::default()
    };
    let images = docker
        .list_images(Some(options))
        .await
        .map_err(|error| SandboxError::Docker {
            operation: "list images",
            reason: error.to_string(),
        })?;
    let mut removed = Vec::new();
    for image in images {
        if image.repo_tags.iter().any(|tag| tag == current) || created_of(&image.labels) >= current_created {
            continue;
        }
        let options = RemoveImageOptions {
            force: false,
            noprune: false,
            ..Default::default()
        };
        match docker.remove_image(&image.id, Some(options), None).await {
            Ok(_) => removed.extend(image.repo_tags.clone()),
            Err(error) => tracing::debug!(image = image.id, %error, "keeping a runner image"),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_archive_streamed_in_chunks_is_one_tar_with_the_layer_whole() {
        for size in [0usize, 1, 511, 512, 513, 70_000] {
            let layer: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            let chunks = archive_chunks(
                "bork-ci-runner:t",
                b"{\"c\":1}",
                bytes::Bytes::from(layer.clone()),
            )
            .expect("chunks");
            assert_eq!(chunks[1].len(), size, "the layer is one chunk, as it is");
            let whole = chunks.concat();
            assert_eq!(whole.len() % 512, 0);
            let mut entries = Vec::new();
            let mut archive = tar::Archive::new(&whole[..]);
            for entry in archive.entries().expect("entries") {
                let mut entry = entry.expect("entry");
                let path = entry.path().expect("path").to_string_lossy().into_owned();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut entry, &mut bytes).expect("read");
                entries.push((path, bytes));
            }
            let digest = hex::encode(Sha256::digest(&layer));
            let names: Vec<&str> = entries.iter().map(|(path, _)| path.as_str()).collect();
            assert_eq!(names.len(), 4, "{names:?}");
            assert_eq!(names[0].trim_end_matches('/'), digest);
            assert_eq!(names[1], format!("{digest}/layer.tar"));
            assert_eq!(entries[1].1, layer);
            assert_eq!(entries[2].1, b"{\"c\":1}");
            assert_eq!(names[3], "manifest.json");
            let manifest: serde_json::Value = serde_json::from_slice(&entries[3].1).expect("json");
            assert_eq!(manifest[0]["RepoTags"][0], "bork-ci-runner:t");
            assert_eq!(manifest[0]["Layers"][0], format!("{digest}/layer.tar"));
        }
    }

    #[test]
    fn ldd_lines() {
        let output = "\tlinux-vdso.so.1 (0x00007ffd)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n";
        assert_eq!(
            parse_ldd(output).expect("parses"),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert!(
            parse_ldd("\tlibfoo.so => not found\n")
                .expect_err("missing")
                .contains("libfoo.so")
        );
    }

    #[test]
    fn the_judges_folder_brings_a_dynamic_executables_loader_and_libraries() {
        let executable = std::env::current_exe().expect("own executable");
        let layout = tool_layout(&executable).expect("a layout");
        let paths: Vec<&str> = layout.iter().map(|(path, _)| path.as_str()).collect();
        assert!(paths.contains(&"bin/bork-ci"), "{paths:?}");
        let head = bork_ci_core::safe_fs::read_prefix(&executable, 1 << 20).expect("read");
        match interpreter(&head).expect("ELF") {
            None => assert_eq!(layout, [("bin/bork-ci".to_owned(), ToolFile::Host(executable))]),
            Some(loader) => {
                let loader = Path::new(&loader)
                    .file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned();
                assert!(paths.contains(&"libexec/bork-ci"), "{paths:?}");
                assert!(paths.contains(&format!("lib/{loader}").as_str()), "{paths:?}");
                assert!(
                    paths.iter().any(|path| path.starts_with("lib/libc.so")),
                    "{paths:?}"
                );
                let script = layout
                    .iter()
                    .find_map(|(path, file)| match file {
                        ToolFile::Text(text) if path == "bin/bork-ci" => Some(text.clone()),
                        _ => None,
                    })
                    .expect("a script");
                assert_eq!(
                    script,
                    format!(
                        "#!/bin/sh\nexec /opt/bork-ci/lib/{loader} --library-path /opt/bork-ci/lib /opt/bork-ci/libexec/bork-ci \"$@\"\n"
                    )
                );
            }
        }
        let folder = tool_folder(&layout).expect("a tar");
        let mut archive = tar::Archive::new(folder.as_slice());
        let names: Vec<String> = archive
            .entries()
            .expect("entries")
            .map(|entry| entry.expect("entry").path().expect("path").display().to_string())
            .collect();
        assert!(names.contains(&"bin/bork-ci".to_owned()), "{names:?}");
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "reads its own executable as a fixture")]
    fn this_executable_is_elf() {
        let bytes = std::fs::read("/proc/self/exe").expect("own executable");
        // Either answer is fine; it must not be an error.
        interpreter(&bytes).expect("an ELF file");
        assert!(interpreter(b"#!/bin/sh\n").is_err());
        assert!(interpreter(b"\x7fELF").is_err());
    }

    #[test]
    fn an_executables_identity_is_remembered_for_that_very_file_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = dir.path().join("cache");
        let file = dir.path().join("bork-ci");
        bork_ci_core::safe_fs::write_atomic(&file, b"one").expect("write");
        let first = stamp(&file).expect("a file has a stamp");
        let known = Known {
            sha256: "a".repeat(64),
            layer_digest: format!("sha256:{}", "b".repeat(64)),
        };
        assert_eq!(recall(&cache, &first), None, "nothing remembered yet");
        remember(&cache, &first, &known);
        assert_eq!(recall(&cache, &first), Some(known.clone()));
        // Replaced by another file of the same size: another stamp, nothing recalled.
        bork_ci_core::safe_fs::write_atomic(&file, b"two").expect("replace");
        let second = stamp(&file).expect("stamp");
        assert_ne!(first, second);
        assert_eq!(recall(&cache, &second), None);
        // What does not read as an identity is not one.
        bork_ci_core::safe_fs::write_atomic(
            &known_file(&cache, &first),
            b"{\"sha256\": \"../x\", \"layer-digest\": \"y\"}",
        )
        .expect("write");
        assert_eq!(recall(&cache, &first), None);
        assert_eq!(stamp(dir.path()), None, "a folder has no stamp");
    }
}
