//! Reads and writes of files that are not the target repository's working tree (that is
//! `edit::apply`'s): the configuration, credential files, the event payload, the scripted
//! model's file, the report, SARIF, the step summary and the outputs file. `clippy.toml` bans
//! the raw calls elsewhere; the few other writers (the sandbox's scratch and artifact folders,
//! the Verifier's artifacts, the edit step's state) say why where they are.
//!
//! Reads open non-blocking and accept only a regular file, bounded, so that a FIFO or a device
//! is an error and never a hang. Whole-file writes go to a temporary file in the same folder,
//! then a rename over the final name: a symlink or a hardlink at the final name is replaced,
//! never followed. Appends (the files the CI runner hands over) open with `O_NOFOLLOW` and
//! accept only a regular file. Nothing is ever written inside a `.git` folder, and every write
//! is redacted of registered secrets (`secrets`).

#![expect(
    clippy::disallowed_methods,
    reason = "this module is where files outside the working tree are opened, read and written"
)]

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::OFlags;

fn flags(extra: OFlags) -> i32 {
    (OFlags::NONBLOCK | OFlags::CLOEXEC | extra).bits() as i32
}

/// Reads the regular file at `path` (a symlink to one is followed), at most `limit` bytes. A
/// FIFO, socket, device or directory is an `InvalidInput` error; so is a larger file.
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_bounded(open_regular(path, OFlags::empty())?, limit)
}

/// Opens `path` for reading with `extra` flags (always non-blocking); anything but a regular
/// file is an `InvalidInput` error.
fn open_regular(path: &Path, extra: OFlags) -> io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags(extra))
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device, socket or folder is never read)",
        ));
    }
    Ok(file)
}

/// All of `file`, at most `limit` bytes: a larger one is an `InvalidInput` error.
fn read_bounded(file: std::fs::File, limit: u64) -> io::Result<Vec<u8>> {
    if file.metadata()?.len() > limit {
        return Err(too_large(limit));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(limit));
    }
    Ok(bytes)
}

/// Opens the regular file at `path` for reading, never through a symlink at its last component
/// (`O_NOFOLLOW`: `ELOOP`), never blocking on a FIFO. A FIFO, socket, device or folder is an
/// `InvalidInput` error. Where the other side of a folder may be a container holding
/// model-written code (the edit step's state, the judges' tree), this is how a file is opened.
pub fn open_no_follow(path: &Path) -> io::Result<std::fs::File> {
    open_regular(path, OFlags::NOFOLLOW)
}

/// [`open_no_follow`], refused when larger than `limit` bytes (`InvalidInput`), and read through
/// a reader that stops after `limit` bytes even if the file grows: for a reader that parses as
/// it reads instead of holding the bytes.
pub fn open_no_follow_within(path: &Path, limit: u64) -> io::Result<io::Take<std::fs::File>> {
    let file = open_no_follow(path)?;
    if file.metadata()?.len() > limit {
        return Err(too_large(limit));
    }
    Ok(file.take(limit))
}

/// [`open_no_follow`], then at most `limit` bytes: a larger file is an `InvalidInput` error.
pub fn read_no_follow(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    read_bounded(open_no_follow(path)?, limit)
}

/// The first `limit` bytes of the regular file at `path` (a symlink to one is followed; fewer
/// when the file is shorter): an executable's headers, say.
pub fn read_prefix(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_regular(path, OFlags::empty())?
        .take(limit)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Stamps the folder at `path` as modified now (what `bork-ci gc` goes by); best effort.
pub fn touch_folder(path: &Path) {
    if let Ok(folder) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags(OFlags::DIRECTORY | OFlags::NOFOLLOW))
        .open(path)
    {
        let _ = folder.set_modified(std::time::SystemTime::now());
    }
}

/// The lock file at `path` (created empty if absent, never truncated, never through a symlink),
/// open for `flock`.
pub fn lock_file(path: &Path) -> io::Result<std::fs::File> {
    refuse_git(path, &parent_of(path))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o644)
        .custom_flags(flags(OFlags::NOFOLLOW))
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    Ok(file)
}

/// Passes the regular file at `path` (not a symlink: `O_NOFOLLOW`) to `each` in pieces, at most
/// `limit` bytes; returns how many there were. A FIFO, socket, device, folder or link is an
/// `InvalidInput` error (a link `ELOOP`); so is a larger file. Nothing is held in memory but one
/// piece.
pub fn stream_regular(path: &Path, limit: u64, mut each: impl FnMut(&[u8])) -> io::Result<u64> {
    let file = open_no_follow(path)?;
    let mut reader = file.take(limit + 1);
    let mut buffer = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        let read = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        total += read as u64;
        if total > limit {
            return Err(too_large(limit));
        }
        each(&buffer[..read]);
    }
    Ok(total)
}

fn too_large(limit: u64) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("larger than {limit} bytes"))
}

/// Refuses a path inside a `.git` folder (by its own spelling, and once its folder is
/// resolved).
fn refuse_git(path: &Path, parent: &Path) -> io::Result<()> {
    let in_git = |p: &Path| {
        p.components().any(|component| match component {
            Component::Normal(name) => name.to_string_lossy().eq_ignore_ascii_case(".git"),
            _ => false,
        })
    };
    let resolved = std::fs::canonicalize(parent).unwrap_or_else(|_| parent.to_path_buf());
    if in_git(path) || in_git(&resolved) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "refusing to write inside a .git folder",
        ));
    }
    Ok(())
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Writes `bytes` to `path` as a whole: a temporary file in the same folder, synced, then
/// renamed over `path`. A symlink at `path` is replaced, not followed; a folder is an error.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = parent_of(path);
    refuse_git(path, &parent)?;
    if std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "is a folder"));
    }
    let mut temporary = tempfile::Builder::new()
        .prefix(".bork-out-")
        .tempfile_in(&parent)?;
    temporary.write_all(&crate::secrets::redact_bytes(bytes))?;
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|error| error.error)?;
    Ok(())
}

/// Appends `bytes` to the regular file at `path` (created if absent), never through a symlink
/// at the final component, never blocking on a FIFO.
pub fn append(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let parent = parent_of(path);
    refuse_git(path, &parent)?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o644)
        .custom_flags(flags(OFlags::NOFOLLOW))
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file"));
    }
    file.write_all(&crate::secrets::redact_bytes(bytes))
}

/// Copies the tree at `from` to `to` (which must not exist), for a judge's own copy of the warm
/// build cache (`sandbox::build_cache`): folders, regular files with their
/// modification and access times, symbolic links as links; nothing else. With `widen`, every
/// folder and file is made writable by any user (a container's user other than this one).
pub fn copy_tree(from: &Path, to: &Path, widen: bool) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Never into a `.git` folder, as every write here; one inside the tree is not copied.
    refuse_git(to, to.parent().unwrap_or(to))?;
    std::fs::create_dir(to)?;
    let dir_mode = |mode: u32| if widen { 0o777 } else { mode & 0o7777 };
    std::fs::set_permissions(
        to,
        std::fs::Permissions::from_mode(dir_mode(std::fs::metadata(from)?.permissions().mode())),
    )?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let source = entry.path();
        if entry.file_name().to_string_lossy().eq_ignore_ascii_case(".git") {
            continue;
        }
        let target = to.join(entry.file_name());
        let meta = entry.metadata()?;
        let kind = meta.file_type();
        if kind.is_dir() {
            copy_tree(&source, &target, widen)?;
        } else if kind.is_file() {
            // `copy` uses the kernel's copy (a reflink where the file system has them).
            #[expect(
                clippy::disallowed_methods,
                reason = "this module is where files outside the tree are written"
            )]
            std::fs::copy(&source, &target)?;
            let mode = meta.permissions().mode() & 0o777;
            let mode = if widen { mode | 0o666 } else { mode };
            let file = std::fs::OpenOptions::new().write(true).open(&target)?;
            file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            file.set_times(
                std::fs::FileTimes::new()
                    .set_modified(meta.modified()?)
                    .set_accessed(meta.accessed()?),
            )?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn reads_refuse_fifos_and_large_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, rustix::fs::Mode::from_raw_mode(0o600)).expect("mkfifo");
        let error = read_regular(&fifo, 10).expect_err("fifo");
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        let big = dir.path().join("big");
        std::fs::write(&big, "0123456789x").expect("write");
        assert!(read_regular(&big, 10).is_err());
        assert_eq!(read_regular(&big, 11).expect("fits"), b"0123456789x");
    }

    #[test]
    fn writes_replace_symlinks_and_refuse_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let canary = dir.path().join("canary");
        std::fs::write(&canary, "untouched").expect("write");
        let link = dir.path().join("out.sarif");
        symlink(&canary, &link).expect("link");
        write_atomic(&link, b"new").expect("write");
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "untouched");
        assert_eq!(std::fs::read_to_string(&link).expect("read"), "new");
        let appended = dir.path().join("summary");
        symlink(&canary, &appended).expect("link");
        assert!(append(&appended, b"x").is_err());
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "untouched");
        std::fs::create_dir(dir.path().join(".git")).expect("mkdir");
        assert!(write_atomic(&dir.path().join(".git/config"), b"x").is_err());
        symlink(dir.path().join(".git"), dir.path().join("g")).expect("link");
        assert!(write_atomic(&dir.path().join("g/config"), b"x").is_err());
        assert!(append(&dir.path().join("g/config"), b"x").is_err());
    }
}
