//! Reading the selected paths, in parallel, without ever following a symlink.
//!
//! The sorted paths are cut into chunks that worker threads take in turn. Within a chunk, each
//! directory is opened once, relative to a descriptor of the repository root, with `openat2` and
//! `RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH` (or, where `openat2` is unavailable, component by
//! component with `O_NOFOLLOW`), so a symlink at any directory component (`vendor -> /usr/share`
//! with a stale tracked `vendor/x`) fails the open instead of being resolved. Each file is then
//! opened relative to that directory with `O_NOFOLLOW`, so a link as the last component
//! (`leak -> /proc/self/environ`) is named, never read. When a directory cannot be opened that way,
//! each of its paths takes the slower route that says why (a link, something beyond a link, gone).
//! Files are opened `O_NONBLOCK` and `fstat`ed before any read, so a FIFO never blocks and a
//! device is never read; a file is read with one `read` when its size did not change.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rustix::buffer::spare_capacity;
use rustix::fs::{FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::git::Listed;
use super::{
    BINARY_SNIFF_BYTES, FileKind, PackError, PackedFile, SPEC_SIZE_FACTOR, is_credential_name, is_spec_path,
};

/// Set once `openat2` turns out to be unavailable, so the fallback is taken at once afterwards.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// Paths per chunk a worker takes at once: large enough that a directory is opened about once,
/// small enough that the threads finish together.
const CHUNK: usize = 64;

/// A descriptor of the repository root, for reading paths below it.
pub(super) struct Reader {
    root: OwnedFd,
    git: GitInodes,
}

/// The (device, inode) pairs of the multiply linked files under `.git`, gathered on first need
/// by `lstat` alone (nothing under `.git` is opened or read): a working-tree file that is a
/// hardlink of one of them (`.git/config` holds the checkout's token) is never packed.
pub(super) struct GitInodes {
    git_dir: std::path::PathBuf,
    inodes: std::sync::OnceLock<std::collections::HashSet<(u64, u64)>>,
}

impl GitInodes {
    fn holds(&self, dev: u64, ino: u64) -> bool {
        self.inodes
            .get_or_init(|| {
                use std::os::unix::fs::MetadataExt;
                let mut found = std::collections::HashSet::new();
                let mut stack = vec![self.git_dir.clone()];
                while let Some(dir) = stack.pop() {
                    let Ok(entries) = std::fs::read_dir(&dir) else {
                        continue;
                    };
                    for entry in entries.flatten() {
                        let Ok(meta) = entry.metadata() else {
                            continue;
                        };
                        if meta.is_dir() {
                            stack.push(entry.path());
                        } else if meta.nlink() > 1 {
                            found.insert((meta.dev(), meta.ino()));
                        }
                    }
                }
                found
            })
            .contains(&(dev, ino))
    }
}

impl Reader {
    pub(super) fn open(repo_root: &Path) -> Result<Self, PackError> {
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
        Ok(Self {
            root,
            git: GitInodes {
                git_dir: repo_root.join(".git"),
                inodes: std::sync::OnceLock::new(),
            },
        })
    }

    /// Reads every listed path (sorted); returns one entry per path, in the same order: `None`
    /// for a tracked path missing from the working tree (the pack shows the working tree).
    pub(super) fn read_all(&self, listed: &[Listed], max_file_bytes: u64) -> Vec<Option<PackedFile>> {
        let chunks = listed.len().div_ceil(CHUNK);
        let threads = std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .clamp(1, 16)
            .min(chunks.max(1));
        let next = AtomicUsize::new(0);
        let work = || {
            let mut done: Vec<(usize, Vec<Option<PackedFile>>)> = Vec::new();
            loop {
                let chunk = next.fetch_add(1, Ordering::Relaxed);
                if chunk >= chunks {
                    break done;
                }
                let start = chunk * CHUNK;
                let end = (start + CHUNK).min(listed.len());
                done.push((chunk, self.read_chunk(&listed[start..end], max_file_bytes)));
            }
        };
        let mut parts: Vec<(usize, Vec<Option<PackedFile>>)> = if threads <= 1 {
            work()
        } else {
            std::thread::scope(|scope| {
                let workers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
                let mut parts = work();
                for worker in workers {
                    match worker.join() {
                        Ok(done) => parts.extend(done),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
                parts
            })
        };
        parts.sort_unstable_by_key(|(chunk, _)| *chunk);
        let mut files = Vec::with_capacity(listed.len());
        for (_, part) in parts {
            files.extend(part);
        }
        files
    }

    /// Reads consecutive paths, opening each directory once for a run of paths that share it.
    fn read_chunk(&self, listed: &[Listed], max_file_bytes: u64) -> Vec<Option<PackedFile>> {
        let root = self.root.as_fd();
        let git = &self.git;
        // The directory of the previous path: its bytes and its descriptor, or `None` when it
        // could not be opened without following a link (its paths then take the slow route).
        let mut current: Option<(&[u8], Option<OwnedFd>)> = None;
        let mut out = Vec::with_capacity(listed.len());
        for entry in listed {
            let raw = entry.raw.as_slice();
            let Some((parent, name)) = split_parent(raw) else {
                out.push(pack_one(root, raw, max_file_bytes, git));
                continue;
            };
            let packed = match parent {
                None => pack_in(root, name, raw, max_file_bytes, git),
                Some(parent) => {
                    if current.as_ref().is_none_or(|(dir, _)| *dir != parent) {
                        current = Some((parent, open_dir_no_follow(root, parent).ok()));
                    }
                    match current.as_ref().and_then(|(_, fd)| fd.as_ref()) {
                        Some(dir) => pack_in(dir.as_fd(), name, raw, max_file_bytes, git),
                        None => pack_one(root, raw, max_file_bytes, git),
                    }
                }
            };
            out.push(packed);
        }
        out
    }
}

/// Splits `dir/name` into the directory (`None` at the top) and a plain name; `None` when the
/// path ends with `/` (an untracked nested repository) or its name is empty, `.` or `..`, which
/// the slow route handles (and refuses).
fn split_parent(raw: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (parent, name) = match raw.iter().rposition(|byte| *byte == b'/') {
        Some(slash) => (Some(&raw[..slash]), &raw[slash + 1..]),
        None => (None, raw),
    };
    if name.is_empty() || name == b"." || name == b".." || parent.is_some_and(<[u8]>::is_empty) {
        return None;
    }
    Some((parent, name))
}

/// Packs `name` inside the already opened (link-free) directory `dir`; `raw` is its full path.
fn pack_in(
    dir: BorrowedFd<'_>,
    name: &[u8],
    raw: &[u8],
    max_file_bytes: u64,
    git: &GitInodes,
) -> Option<PackedFile> {
    let path = String::from_utf8_lossy(raw).into_owned();
    let cap = cap_for(&path, max_file_bytes);
    let kind = match rustix::fs::openat(dir, name, file_flags(), Mode::empty()) {
        Ok(fd) => read_open(fd, &path, cap, git),
        Err(Errno::LOOP) => match rustix::fs::readlinkat(dir, name, Vec::new()) {
            Ok(target) => FileKind::Symlink {
                target: String::from_utf8_lossy(target.as_bytes()).into_owned(),
            },
            Err(_) => FileKind::NotRegular,
        },
        Err(errno) => return classify_open_error(errno, path),
    };
    Some(PackedFile { path, kind })
}

fn cap_for(path: &str, max_file_bytes: u64) -> u64 {
    if is_spec_path(path) {
        max_file_bytes.saturating_mul(SPEC_SIZE_FACTOR)
    } else {
        max_file_bytes
    }
}

/// What a failed open (other than a link) means for the pack.
fn classify_open_error(errno: Errno, path: String) -> Option<PackedFile> {
    let kind = match errno {
        Errno::NOENT | Errno::NOTDIR => {
            tracing::debug!(path, "listed by git but missing from the working tree");
            return None;
        }
        // A socket cannot be opened; `ENXIO` is its answer.
        Errno::NXIO => FileKind::NotRegular,
        errno => FileKind::Unreadable {
            error: std::io::Error::from(errno).to_string(),
        },
    };
    Some(PackedFile { path, kind })
}

/// Packs one path opened from the root (the slow route), or `None` when it no longer exists.
fn pack_one(root: BorrowedFd<'_>, raw: &[u8], max_file_bytes: u64, git: &GitInodes) -> Option<PackedFile> {
    let path = String::from_utf8_lossy(raw).into_owned();
    // Untracked nested repositories are listed by git as `dir/`; they are never entered.
    if raw.ends_with(b"/") {
        return Some(PackedFile {
            path,
            kind: FileKind::NotRegular,
        });
    }
    let cap = cap_for(&path, max_file_bytes);
    let kind = match open_no_follow(root, raw) {
        Ok(fd) => read_open(fd, &path, cap, git),
        Err(Errno::LOOP) => symlink_or_beyond(root, raw),
        Err(errno) => return classify_open_error(errno, path),
    };
    Some(PackedFile { path, kind })
}

fn read_open(fd: OwnedFd, path: &str, cap: u64, git: &GitInodes) -> FileKind {
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
    if stat.st_nlink > 1 && git.holds(widen(stat.st_dev), widen(stat.st_ino)) {
        tracing::warn!(path, "not packed: it is a hardlink of a file under .git");
        return FileKind::Credential { size };
    }
    if size > cap {
        return FileKind::TooLarge { size };
    }
    let buffer = match read_bounded(&fd, size, cap.saturating_add(1)) {
        Ok(buffer) => buffer,
        Err(errno) => {
            return FileKind::Unreadable {
                error: std::io::Error::from(errno).to_string(),
            };
        }
    };
    let read = buffer.len() as u64;
    if read > cap {
        return FileKind::TooLarge { size: read.max(size) };
    }
    let sniff = &buffer[..buffer.len().min(BINARY_SNIFF_BYTES)];
    if memchr::memchr(0, sniff).is_some() {
        return FileKind::Binary { size: read };
    }
    let text = match String::from_utf8(buffer) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    };
    if let Some(name) = bork_ci_core::secrets::find(&text) {
        tracing::warn!(
            path,
            "not packed: it holds the value of {name} (or an encoding of it)"
        );
        return FileKind::Credential { size };
    }
    FileKind::Text(text)
}

/// Reads a regular file of `size` bytes (as `fstat` saw it), at most `limit` bytes in all, so a
/// file that grows while it is read stays bounded. The buffer has room for one byte more than
/// `size`: a read that stops short once `size` bytes are in is the end of the file, so an
/// unchanged file takes one `read`, with no second one to see the end.
fn read_bounded(fd: &OwnedFd, size: u64, limit: u64) -> Result<Vec<u8>, Errno> {
    const GROWTH: u64 = 64 * 1024;
    let first = usize::try_from(size.saturating_add(1).min(limit)).unwrap_or(0);
    let mut buffer: Vec<u8> = Vec::with_capacity(first);
    loop {
        let len = buffer.len() as u64;
        if len >= limit {
            break;
        }
        if buffer.len() == buffer.capacity() {
            buffer.reserve_exact(usize::try_from((limit - len).min(GROWTH)).unwrap_or(0));
        }
        let wanted = buffer.capacity() - buffer.len();
        let read = match rustix::io::read(fd, spare_capacity(&mut buffer)) {
            Ok(read) => read,
            Err(Errno::INTR) => continue,
            Err(errno) => return Err(errno),
        };
        if read == 0 || (read < wanted && buffer.len() as u64 == size) {
            break;
        }
    }
    Ok(buffer)
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

/// A device or inode number as `u64`: they are `u64` on some targets and narrower on others,
/// which a cast or `u64::from` at the call would be a lint on one of them.
fn widen<T: Into<u64>>(number: T) -> u64 {
    number.into()
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    fn no_git() -> GitInodes {
        GitInodes {
            git_dir: "/nonexistent/.git".into(),
            inodes: std::sync::OnceLock::new(),
        }
    }

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
            read_open(fd, "real/file", 100, &no_git()),
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
        let pack = |name: &str| pack_one(root.as_fd(), name.as_bytes(), 10, &no_git()).map(|file| file.kind);
        assert_eq!(pack("bin"), Some(FileKind::Binary { size: 5 }));
        assert_eq!(pack("big"), Some(FileKind::TooLarge { size: 11 }));
        assert_eq!(pack("deploy.pem"), Some(FileKind::Credential { size: 3 }));
        assert_eq!(pack("missing"), None);
    }

    #[test]
    fn reads_whole_files_and_stays_bounded_when_the_size_is_stale() {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::write(temp.path().join("ten"), "0123456789").expect("write");
        std::fs::write(temp.path().join("empty"), "").expect("write");
        let root = root(temp.path());
        let open =
            |name: &str| rustix::fs::openat(root.as_fd(), name, file_flags(), Mode::empty()).expect("open");
        // Size as `fstat` saw it, then a file that grew or shrank since.
        assert_eq!(read_bounded(&open("ten"), 10, 1000), Ok(b"0123456789".to_vec()));
        assert_eq!(read_bounded(&open("ten"), 4, 1000), Ok(b"0123456789".to_vec()));
        assert_eq!(read_bounded(&open("ten"), 40, 1000), Ok(b"0123456789".to_vec()));
        assert_eq!(read_bounded(&open("ten"), 4, 6), Ok(b"012345".to_vec()));
        assert_eq!(read_bounded(&open("empty"), 0, 1000), Ok(Vec::new()));
    }

    #[test]
    fn splits_paths_and_leaves_odd_names_to_the_slow_route() {
        assert_eq!(
            split_parent(b"a/b/c"),
            Some((Some(b"a/b".as_slice()), b"c".as_slice()))
        );
        assert_eq!(split_parent(b"top"), Some((None, b"top".as_slice())));
        for odd in [b"sub/".as_slice(), b"a/..", b"a/.", b"/x", b""] {
            assert_eq!(split_parent(odd), None, "{}", String::from_utf8_lossy(odd));
        }
    }

    #[test]
    fn directory_route_names_links_and_reads_files() {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(temp.path().join("d")).expect("mkdir");
        std::fs::write(temp.path().join("d/file"), "hello").expect("write");
        std::os::unix::fs::symlink("/proc/self/environ", temp.path().join("d/link")).expect("symlink");
        let root = root(temp.path());
        let dir = open_dir_no_follow(root.as_fd(), b"d").expect("open dir");
        let pack = |name: &str| {
            pack_in(
                dir.as_fd(),
                name.as_bytes(),
                format!("d/{name}").as_bytes(),
                100,
                &no_git(),
            )
            .map(|file| file.kind)
        };
        assert_eq!(pack("file"), Some(FileKind::Text("hello".to_owned())));
        assert_eq!(
            pack("link"),
            Some(FileKind::Symlink {
                target: "/proc/self/environ".to_owned()
            })
        );
        assert_eq!(pack("missing"), None);
    }
}
