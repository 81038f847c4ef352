//! The edit step's image when `sandbox.runner-image` is not set: built by bork-ci itself, through
//! the Engine API, from its own executable. No registry, no Dockerfile on disk, no script.
//!
//! The build context is a tar held in memory: a `Dockerfile` (`FROM scratch`, one `COPY`) and a
//! root filesystem with the executable at `/usr/local/bin/bork-ci`, `/tmp`, `/repo` and
//! `/state`. A statically linked bork-ci (the release build) needs nothing else. A dynamically
//! linked one (a development build) also gets its ELF interpreter and the shared libraries
//! `ldd` lists, at the paths the executable names them; when they cannot be found the build
//! stops with an error that says so. The image is tagged
//! `bork-ci-runner:<first 16 hex digits of the executable's sha256>`, labelled, and reused by
//! every later run of the same executable. This module does not run containers.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use bollard::Docker;
use bollard::query_parameters::{BuildImageOptions, ListImagesOptions, RemoveImageOptions};
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
    #[allow(clippy::disallowed_methods)] // the sandbox: bork-ci's own executable
    pub fn current() -> Result<Executable, SandboxError> {
        let path = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
        let bytes =
            crate::safe_fs::read_regular(Path::new("/proc/self/exe"), MAX_EXECUTABLE).map_err(|source| {
                SandboxError::Prepare {
                    what: "bork-ci's own executable (/proc/self/exe) for the edit step's image".into(),
                    source,
                }
            })?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(Executable { bytes, sha256, path })
    }

    /// Reads the bork-ci executable at `path` (a library user's choice; bork-ci itself uses
    /// [`Executable::current`]).
    pub fn at(path: &Path) -> Result<Executable, SandboxError> {
        let bytes =
            crate::safe_fs::read_regular(path, MAX_EXECUTABLE).map_err(|source| SandboxError::Prepare {
                what: format!(
                    "the bork-ci executable {} for the edit step's image",
                    path.display()
                ),
                source,
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
        format!("{REPOSITORY}:{}", &self.sha256[..16])
    }
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
#[allow(clippy::disallowed_methods)] // the sandbox: `ldd` on bork-ci's own executable
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

/// The build context: `Dockerfile` and `rootfs/`, as one tar in memory.
pub fn context(executable: &Executable) -> Result<Vec<u8>, SandboxError> {
    let failed = |reason: String| SandboxError::RunnerImage {
        image: executable.tag(),
        reason,
    };
    // Files of the root filesystem: absolute path in the image → content and mode.
    let mut files: BTreeMap<String, (Vec<u8>, u32)> = BTreeMap::new();
    files.insert(format!("{BIN_DIR}/bork-ci"), (executable.bytes.clone(), 0o755));
    if let Some(interpreter) = interpreter(&executable.bytes).map_err(failed)? {
        let mut needed = libraries(&executable.path).map_err(|reason| {
            failed(format!(
                "{} is dynamically linked (interpreter {interpreter}) and its libraries could not be listed: {reason}",
                executable.path.display()
            ))
        })?;
        needed.push(interpreter);
        for library in needed {
            let bytes = crate::safe_fs::read_regular(Path::new(&library), MAX_LIBRARY).map_err(|error| {
                failed(format!(
                    "{} is dynamically linked and its library {library} could not be read: {error}",
                    executable.path.display()
                ))
            })?;
            files.insert(library, (bytes, 0o755));
        }
    }
    let dockerfile = format!(
        "FROM scratch\nCOPY rootfs/ /\nENV PATH={BIN_DIR} HOME=/tmp\nWORKDIR /repo\nCMD [\"bork-ci\", \"--version\"]\n"
    );
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |path: &str, bytes: &[u8], mode: u32, kind: tar::EntryType| -> std::io::Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(0);
        header.set_gid(0);
        header.set_mtime(0);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, path, bytes)
    };
    let result = (|| -> std::io::Result<()> {
        add(
            "Dockerfile",
            dockerfile.as_bytes(),
            0o644,
            tar::EntryType::Regular,
        )?;
        for dir in ["rootfs/tmp", "rootfs/repo", "rootfs/state"] {
            let mode = if dir == "rootfs/tmp" { 0o1777 } else { 0o755 };
            add(dir, &[], mode, tar::EntryType::Directory)?;
        }
        let mut dirs: Vec<String> = Vec::new();
        for (path, (bytes, mode)) in &files {
            let mut parent = String::from("rootfs");
            for component in Path::new(path)
                .parent()
                .into_iter()
                .flat_map(Path::components)
                .skip(1)
            {
                parent.push('/');
                parent.push_str(&component.as_os_str().to_string_lossy());
                if !dirs.contains(&parent) {
                    add(&parent, &[], 0o755, tar::EntryType::Directory)?;
                    dirs.push(parent.clone());
                }
            }
            add(&format!("rootfs{path}"), bytes, *mode, tar::EntryType::Regular)?;
        }
        Ok(())
    })();
    result.map_err(|error| failed(format!("writing the build context: {error}")))?;
    builder
        .into_inner()
        .map_err(|error| failed(format!("writing the build context: {error}")))
}

/// The runner image a run uses: its tag, and the name containers are created from.
#[derive(Debug, Clone)]
pub struct RunnerImage {
    pub tag: String,
    pub id: String,
}

/// Makes sure the runner image of this executable exists, building it when it does not.
pub async fn ensure(docker: &Docker, executable: &Executable) -> Result<RunnerImage, SandboxError> {
    let tag = ensure_tag(docker, executable).await?;
    Ok(RunnerImage { id: tag.clone(), tag })
}

async fn ensure_tag(docker: &Docker, executable: &Executable) -> Result<String, SandboxError> {
    let tag = executable.tag();
    match docker.inspect_image(&tag).await {
        Ok(_) => return Ok(tag),
        Err(error) if is_not_found(&error) => {}
        Err(error) => {
            return Err(SandboxError::Docker {
                operation: "inspect image",
                reason: error.to_string(),
            });
        }
    }
    // Runs on one host build one image at a time: the second finds the first's.
    let lock = tokio::task::spawn_blocking({
        let sha = executable.sha256.clone();
        move || build_lock(&sha)
    })
    .await
    .map_err(|e| SandboxError::Backend(e.to_string()))?;
    if docker.inspect_image(&tag).await.is_ok() {
        return Ok(tag);
    }
    let built = build(docker, executable, &tag).await;
    drop(lock);
    built
}

/// An exclusive lock on `$TMPDIR/bork-ci-runner-<sha>.lock` (none when it cannot be had: the
/// build then just runs).
fn build_lock(sha: &str) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::env::temp_dir().join(format!("bork-ci-runner-{}.lock", &sha[..16]));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags((rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32)
        .open(path)
        .ok()?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive).ok()?;
    Some(file)
}

async fn build(docker: &Docker, executable: &Executable, tag: &str) -> Result<String, SandboxError> {
    let tag = tag.to_owned();
    let context = context(executable)?;
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let options = BuildImageOptions {
        t: Some(tag.clone()),
        rm: true,
        forcerm: true,
        labels: Some(HashMap::from([
            (labels::MARK.to_owned(), "1".to_owned()),
            (RUNNER_LABEL.to_owned(), "1".to_owned()),
            (BINARY_LABEL.to_owned(), executable.sha256.clone()),
            (labels::CREATED.to_owned(), created.to_string()),
        ])),
        ..Default::default()
    };
    tracing::info!(
        "building the edit step's image {tag} from {}",
        executable.path.display()
    );
    let mut progress = docker.build_image(options, None, Some(bollard::body_full(context.into())));
    let failed = |reason: String| SandboxError::RunnerImage {
        image: tag.clone(),
        reason,
    };
    while let Some(item) = progress.next().await {
        match item {
            Ok(info) => {
                if let Some(message) = info.error_detail.and_then(|detail| detail.message) {
                    return Err(failed(message));
                }
                if let Some(stream) = info.stream.filter(|s| !s.trim().is_empty()) {
                    tracing::debug!("image build: {}", stream.trim());
                }
            }
            Err(error) => return Err(failed(error.to_string())),
        }
    }
    match docker.inspect_image(&tag).await {
        Ok(_) => Ok(tag),
        Err(error) => Err(failed(format!("the engine reported no error, but: {error}"))),
    }
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
    #[expect(clippy::disallowed_methods, reason = "reads its own executable as a fixture")]
    fn this_executable_is_elf() {
        let bytes = std::fs::read("/proc/self/exe").expect("own executable");
        // Either answer is fine; it must not be an error.
        interpreter(&bytes).expect("an ELF file");
        assert!(interpreter(b"#!/bin/sh\n").is_err());
        assert!(interpreter(b"\x7fELF").is_err());
    }
}
