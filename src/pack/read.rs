//! Reading the selected paths, in parallel, without ever following a symlink.
//!
//! Every path is opened relative to a descriptor of the repository root with `openat2` and
//! `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`, so a symlink at any component (`vendor -> /usr/share`
//! with a stale tracked `vendor/x`, `leak -> /proc/self/environ`) fails the open instead of being
//! resolved. Where `openat2` is unavailable (old kernels, some seccomp profiles) each component is
//! opened with `O_NOFOLLOW` instead. Files are opened `O_NONBLOCK` and `fstat`ed before any read,
//! so a FIFO never blocks and a device is never read.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::git::Listed;
use super::{
    BINARY_SNIFF_BYTES, FileKind, PackError, PackedFile, SPEC_SIZE_FACTOR, is_credential_name, is_spec_path,
};

/// Set once `openat2` turns out to be unavailable, so the fallback is taken at once afterwards.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Reads every listed path; returns the packed files (same order as `listed`, which is sorted)
/// and the untracked paths under `specs/`. Tracked paths missing from the working tree are left
/// out: the pack shows the working tree.
pub(super) fn read_all(
    repo_root: &Path,
    listed: Vec<Listed>,
    max_file_bytes: u64,
) -> Result<(Vec<PackedFile>, Vec<String>), PackError> {
    let root = rustix::fs::open(
        repo_root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| PackError::Io {
        action: "opening the repository root",
        path: repo_root.to_path_buf(),
        source: errno.into(),
    })?;

    let slots: Vec<Mutex<Option<PackedFile>>> = listed.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let threads = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, 16)
        .min(listed.len().div_ceil(64).max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    // Small batches keep the threads busy without contending on the counter.
                    let start = next.fetch_add(32, Ordering::Relaxed);
                    if start >= listed.len() {
                        break;
                    }
                    let end = (start + 32).min(listed.len());
                    for index in start..end {
                        let entry = &listed[index];
                        let packed = pack_one(root.as_fd(), &entry.raw, max_file_bytes);
                        if let Ok(mut slot) = slots[index].lock() {
                            *slot = packed;
                        }
                    }
                }
            });
        }
    });

    let mut untracked_specs = Vec::new();
    let mut files = Vec::with_capacity(listed.len());
    for (slot, entry) in slots.into_iter().zip(&listed) {
        let packed = slot.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(packed) = packed {
            if !entry.tracked && is_spec_path(&packed.path) {
                untracked_specs.push(packed.path.clone());
            }
            files.push(packed);
        }
    }
    Ok((files, untracked_specs))
}

/// Packs one path, or `None` when it no longer exists (a tracked file deleted from the tree).
fn pack_one(root: BorrowedFd<'_>, raw: &[u8], max_file_bytes: u64) -> Option<PackedFile> {
    let path = String::from_utf8_lossy(raw).into_owned();
    // Untracked nested repositories are listed by git as `dir/`; they are never entered.
    if raw.ends_with(b"/") {
        return Some(PackedFile {
            path,
            kind: FileKind::NotRegular,
        });
    }
    let cap = if is_spec_path(&path) {
        max_file_bytes.saturating_mul(SPEC_SIZE_FACTOR)
    } else {
        max_file_bytes
    };
    let kind = match open_no_follow(root, raw) {
        Ok(fd) => read_open(fd, &path, cap),
        Err(Errno::LOOP) => symlink_or_beyond(root, raw),
        Err(Errno::NOENT) | Err(Errno::NOTDIR) => {
            tracing::debug!(path, "listed by git but missing from the working tree");
            return None;
        }
        // A socket cannot be opened; `ENXIO` is its answer.
        Err(Errno::NXIO) => FileKind::NotRegular,
        Err(errno) => FileKind::Unreadable {
            error: std::io::Error::from(errno).to_string(),
        },
    };
    Some(PackedFile { path, kind })
}

fn read_open(fd: OwnedFd, path: &str, cap: u64) -> FileKind {
    let stat = match rustix::fs::fstat(&fd) {
        Ok(stat) => stat,
        Err(errno) => {
            return FileKind::Unreadable {
                error: std::io::Error::from(errno).to_string(),
            };
        }
    };
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return FileKind::NotRegular;
    }
    let size = u64::try_from(stat.st_size).unwrap_or(0);
    if is_credential_name(path) {
        return FileKind::Credential { size };
    }
    if size > cap {
        return FileKind::TooLarge { size };
    }
    let mut buffer = Vec::with_capacity(usize::try_from(size).unwrap_or(0).saturating_add(1));
    // `take` bounds a file that grows while it is read.
    if let Err(error) = File::from(fd)
        .take(cap.saturating_add(1))
        .read_to_end(&mut buffer)
    {
        return FileKind::Unreadable {
            error: error.to_string(),
        };
    }
    let read = buffer.len() as u64;
    if read > cap {
        return FileKind::TooLarge { size: read.max(size) };
    }
    let sniff = &buffer[..buffer.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return FileKind::Binary { size: read };
    }
    match String::from_utf8(buffer) {
        Ok(text) => FileKind::Text(text),
        Err(error) => FileKind::Text(String::from_utf8_lossy(error.as_bytes()).into_owned()),
    }
}

/// The open failed on a symlink: the last component is a link (record its target) or the path
/// lies beyond a symlinked directory (never entered).
fn symlink_or_beyond(root: BorrowedFd<'_>, raw: &[u8]) -> FileKind {
    let (parent, name) = match raw.iter().rposition(|byte| *byte == b'/') {
        Some(slash) => (Some(&raw[..slash]), &raw[slash + 1..]),
        None => (None, raw),
    };
    let parent_fd = match parent {
        Some(parent) => match open_dir_no_follow(root, parent) {
            Ok(fd) => Some(fd),
            Err(_) => return FileKind::NotRegular,
        },
        None => None,
    };
    let dir = parent_fd.as_ref().map_or(root, |fd| fd.as_fd());
    match rustix::fs::readlinkat(dir, name, Vec::new()) {
        Ok(target) => FileKind::Symlink {
            target: String::from_utf8_lossy(target.as_bytes()).into_owned(),
        },
        Err(_) => FileKind::NotRegular,
    }
}

fn file_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Opens a file below `root` with no symlink resolved on any component.
fn open_no_follow(root: BorrowedFd<'_>, raw: &[u8]) -> Result<OwnedFd, Errno> {
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match rustix::fs::openat2(root, raw, file_flags(), Mode::empty(), resolve_flags()) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            other => return other,
        }
    }
    open_by_components(root, raw, file_flags())
}

/// Opens a directory below `root` (as an `O_PATH` handle) with no symlink resolved.
fn open_dir_no_follow(root: BorrowedFd<'_>, raw: &[u8]) -> Result<OwnedFd, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        match rustix::fs::openat2(root, raw, flags, Mode::empty(), resolve_flags()) {
            Err(Errno::NOSYS) | Err(Errno::PERM) => NO_OPENAT2.store(true, Ordering::Relaxed),
            other => return other,
        }
    }
    open_by_components(root, raw, flags)
}

/// The fallback: every directory component opened with `O_NOFOLLOW`, then the last one with
/// `flags`. `.` and `..` components are refused (git never lists them).
fn open_by_components(root: BorrowedFd<'_>, raw: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    let components: Vec<&[u8]> = raw.split(|byte| *byte == b'/').collect();
    let Some((last, parents)) = components.split_last() else {
        return Err(Errno::INVAL);
    };
    let mut current: Option<OwnedFd> = None;
    for component in parents.iter().chain(std::iter::once(last)) {
        if component.is_empty() || *component == b"." || *component == b".." {
            return Err(Errno::INVAL);
        }
    }
    for component in parents {
        let dir = current.as_ref().map_or(root, |fd| fd.as_fd());
        let next = rustix::fs::openat(
            dir,
            *component,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| {
            if errno == Errno::NOTDIR {
                Errno::LOOP
            } else {
                errno
            }
        })?;
        current = Some(next);
    }
    let dir = current.as_ref().map_or(root, |fd| fd.as_fd());
    rustix::fs::openat(dir, *last, flags, Mode::empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root(dir: &Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("open root")
    }

    #[test]
    fn fallback_refuses_symlinked_directories_and_reads_files() {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(temp.path().join("real")).expect("mkdir");
        std::fs::write(temp.path().join("real/file"), "hello").expect("write");
        std::os::unix::fs::symlink("real", temp.path().join("link")).expect("symlink");
        let root = root(temp.path());
        let fd = open_by_components(root.as_fd(), b"real/file", file_flags()).expect("open");
        assert_eq!(
            read_open(fd, "real/file", 100),
            FileKind::Text("hello".to_owned())
        );
        assert_eq!(
            open_by_components(root.as_fd(), b"link/file", file_flags()).err(),
            Some(Errno::LOOP)
        );
        assert_eq!(
            open_by_components(root.as_fd(), b"link", file_flags()).err(),
            Some(Errno::LOOP)
        );
        assert_eq!(
            open_by_components(root.as_fd(), b"real/../real/file", file_flags()).err(),
            Some(Errno::INVAL)
        );
    }

    #[test]
    fn classifies_binary_oversize_and_credentials() {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::write(temp.path().join("bin"), b"ab\0cd").expect("write");
        std::fs::write(temp.path().join("big"), vec![b'x'; 11]).expect("write");
        std::fs::write(temp.path().join("deploy.pem"), "KEY").expect("write");
        let root = root(temp.path());
        let pack = |name: &str| pack_one(root.as_fd(), name.as_bytes(), 10).map(|file| file.kind);
        assert_eq!(pack("bin"), Some(FileKind::Binary { size: 5 }));
        assert_eq!(pack("big"), Some(FileKind::TooLarge { size: 11 }));
        assert_eq!(pack("deploy.pem"), Some(FileKind::Credential { size: 3 }));
        assert_eq!(pack("missing"), None);
    }
}
