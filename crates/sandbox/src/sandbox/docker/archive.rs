//! Tar archives for the `copy` transport: what goes into a container through the Engine API and
//! what comes back out. Pure file work, no engine calls (those are in `transport`).
//!
//! In: the working tree as git selects it (tracked files and untracked ones that are not
//! ignored, which is what the run packs), the git metadata a checker may read with the
//! credential-stripped config in place of the real one, directory skeletons for `/artifacts` and
//! `/cache`, and the edit step's state files. Out: a job's artifacts and the edit step's result,
//! read from a container that ran model-written code, so extraction is bounded and accepts only
//! plain directories and regular files at plain relative paths, never a link, never outside the
//! destination.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Entries of `.git` never copied: hooks run nothing in a checker, `FETCH_HEAD` can carry
/// remote URLs, LFS objects can be huge, and sockets or FIFOs are not files.
const GIT_SKIPPED: &[&str] = &["hooks", "FETCH_HEAD", "lfs", "fsmonitor--daemon.ipc"];
/// Largest single file put into a tree archive (larger ones are left out, with a warning).
const MAX_TREE_FILE: u64 = 2 << 30;

/// Limits on what is copied back out of a container.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub bytes: u64,
    pub entries: u64,
}

/// What an extraction did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Extracted {
    pub files: u64,
    pub bytes: u64,
    /// Entries left out: links, devices, unsafe paths, or past the limits.
    pub skipped: u64,
    pub truncated: bool,
}

fn header(kind: tar::EntryType, mode: u32, size: u64, mtime: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header.set_size(size);
    header
}

/// Reads `path` without following a symlink at its last component, without blocking on a FIFO,
/// at most `limit` bytes; `None` when it is not a regular file any more.
fn read_file(path: &Path, limit: u64) -> std::io::Result<Option<(Vec<u8>, std::fs::Metadata)>> {
    let file = match bork_ci_core::safe_fs::open_no_follow(path) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Ok(None);
        }
        Err(error)
            if matches!(
                error.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::InvalidInput
            ) =>
        {
            return Ok(None);
        }
        Err(error) => return Err(error),
    };
    let metadata = file.metadata()?;
    if metadata.len() > limit {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(Some((bytes, metadata)))
}

/// What one path of the tree is, with what tells a change (the engine's copy is replaced when
/// it differs): kind, mode, size, modification time and inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stamp {
    Dir,
    File {
        mode: u32,
        size: u64,
        mtime_ns: i128,
        ino: u64,
    },
    Symlink {
        target: PathBuf,
    },
    /// A git config, copied credential-stripped.
    Config {
        size: u64,
        mtime_ns: i128,
        ino: u64,
    },
}

/// The tree as it is to be copied: relative path → stamp, parents before children.
pub type Manifest = std::collections::BTreeMap<String, Stamp>;

fn mtime_ns(metadata: &std::fs::Metadata) -> i128 {
    i128::from(metadata.mtime()) * 1_000_000_000 + i128::from(metadata.mtime_nsec())
}

fn add_parents(manifest: &mut Manifest, path: &str) {
    let mut prefix = String::new();
    let components: Vec<&str> = path.split('/').collect();
    for component in components.iter().take(components.len().saturating_sub(1)) {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(component);
        manifest.entry(prefix.clone()).or_insert(Stamp::Dir);
    }
}

fn stamp_of(full: &Path, config: bool) -> Option<Stamp> {
    let metadata = std::fs::symlink_metadata(full).ok()?;
    if metadata.file_type().is_symlink() {
        return std::fs::read_link(full)
            .ok()
            .map(|target| Stamp::Symlink { target });
    }
    if !metadata.is_file() {
        return None;
    }
    if config {
        return Some(Stamp::Config {
            size: metadata.len(),
            mtime_ns: mtime_ns(&metadata),
            ino: metadata.ino(),
        });
    }
    let mode = if metadata.mode() & 0o111 != 0 {
        0o755
    } else {
        0o644
    };
    Some(Stamp::File {
        mode,
        size: metadata.len(),
        mtime_ns: mtime_ns(&metadata),
        ino: metadata.ino(),
    })
}

/// The manifest of the working tree at `repo`: the `paths` given (relative, as git lists
/// them; missing ones, directories and anything not a file or link are left out), then `.git`
/// without hooks and the like, its `config` (and each submodule's) marked for stripping. A
/// `.git` file (a worktree's pointer) is taken as it is.
pub fn manifest(repo: &Path, paths: &[String]) -> Manifest {
    let mut manifest = Manifest::new();
    for relative in paths {
        if relative == ".git" || relative.starts_with(".git/") || !plain_relative(relative) {
            continue;
        }
        if let Some(stamp) = stamp_of(&repo.join(relative), false) {
            add_parents(&mut manifest, relative);
            manifest.insert(relative.clone(), stamp);
        }
    }
    match std::fs::symlink_metadata(repo.join(".git")) {
        Ok(metadata) if metadata.is_dir() => git_manifest(repo, ".git", &mut manifest),
        Ok(metadata) if metadata.is_file() => {
            if let Some(stamp) = stamp_of(&repo.join(".git"), false) {
                manifest.insert(".git".to_owned(), stamp);
            }
        }
        _ => {}
    }
    manifest
}

fn git_manifest(repo: &Path, relative: &str, manifest: &mut Manifest) {
    manifest.insert(relative.to_owned(), Stamp::Dir);
    let Ok(entries) = std::fs::read_dir(repo.join(relative)) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if GIT_SKIPPED.contains(&name.as_str()) {
            continue;
        }
        let child = format!("{relative}/{name}");
        let Ok(metadata) = std::fs::symlink_metadata(repo.join(&child)) else {
            continue;
        };
        if metadata.is_dir() {
            git_manifest(repo, &child, manifest);
        } else if let Some(stamp) = stamp_of(&repo.join(&child), name == "config" && metadata.is_file()) {
            // `.git/config` and `.git/modules/<name>/config`: credentials live there.
            manifest.insert(child, stamp);
        }
    }
}

/// What changed from `old` to `new`: the paths to write (new or different) and the paths to
/// remove first (gone, or of another kind now).
pub fn changes(old: &Manifest, new: &Manifest) -> (Vec<String>, Vec<String>) {
    let kind = |stamp: &Stamp| std::mem::discriminant(stamp);
    changes_by(old, new, |previous, stamp| {
        if previous == stamp {
            None
        } else {
            Some(kind(previous) != kind(stamp) || matches!(stamp, Stamp::Symlink { .. }))
        }
    })
}

/// Whether the tree path `path` is inside the folder `folder` (not the folder itself).
pub fn below(path: &str, folder: &str) -> bool {
    path.starts_with(folder) && path.as_bytes().get(folder.len()) == Some(&b'/')
}

/// How an update that removes `remove` and writes `write` (paths of `manifest`) can go in as
/// one archive through the engine's archive API, which writes but does not remove: each
/// removed path's folder is replaced whole. The archive first puts an empty file where the
/// folder is (an engine removes whatever is at a path the archive puts something else at,
/// folders with all they hold), then makes the folder again with all `manifest` has in it.
/// Returns those folders (none inside another) and every path to write, in `manifest`'s order;
/// `None` when a removed path is at the tree's top (the top is the volume's mount) or its
/// folder is not one in `manifest`, or when there would be more than `limit` paths to write.
pub fn replacing_folders(
    manifest: &Manifest,
    write: &[String],
    remove: &[String],
    limit: usize,
) -> Option<(Vec<String>, Vec<String>)> {
    let mut folders = std::collections::BTreeSet::new();
    for gone in remove {
        let (folder, _) = gone.rsplit_once('/')?;
        if manifest.get(folder) != Some(&Stamp::Dir) {
            return None;
        }
        folders.insert(folder);
    }
    let within = |path: &str, folder: &str| path == folder || below(path, folder);
    let outermost: Vec<String> = folders
        .iter()
        .filter(|folder| {
            !folders
                .iter()
                .any(|other| other != *folder && within(folder, other))
        })
        .map(|folder| (*folder).to_owned())
        .collect();
    let written: std::collections::BTreeSet<&str> = write.iter().map(String::as_str).collect();
    let mut paths = Vec::new();
    for path in manifest.keys() {
        if written.contains(path.as_str()) || outermost.iter().any(|folder| within(path, folder)) {
            if paths.len() == limit {
                return None;
            }
            paths.push(path.clone());
        }
    }
    Some((outermost, paths))
}

/// What a path of a tree volume holds, told by content: how a tree kept across runs
/// ([`content_manifest`]) is compared with a new checkout, whose files all have new times.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Content {
    Dir,
    File {
        mode: u32,
        sha256: String,
    },
    Symlink {
        target: String,
    },
    /// Not known (a file left out, or unreadable): removed and written again.
    Unknown,
}

/// A tree by content: relative path → [`Content`].
pub type ContentManifest = std::collections::BTreeMap<String, Content>;

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// `manifest`'s paths by content, read from `repo` as [`write_tree`] would send them (git
/// configs through `strip`).
pub fn content_manifest(repo: &Path, manifest: &Manifest, strip: &dyn Fn(&str) -> String) -> ContentManifest {
    content_manifest_reusing(repo, manifest, strip, None)
}

/// A tree's [`content_manifest`] beside the [`manifest`] it was read with: what a later reading
/// of the same tree may take for a path whose stamp has not changed since.
#[derive(Debug, Clone, Default)]
pub struct Hashed {
    pub manifest: Manifest,
    pub content: ContentManifest,
}

/// [`content_manifest`], taking from `earlier` the content of each path whose stamp there is
/// the one in `manifest` (the same size, time, inode and mode: what tells a later iteration's
/// changes, [`changes`]) and reading the others.
pub fn content_manifest_reusing(
    repo: &Path,
    manifest: &Manifest,
    strip: &dyn Fn(&str) -> String,
    earlier: Option<&Hashed>,
) -> ContentManifest {
    manifest
        .iter()
        .map(|(relative, stamp)| {
            let known = earlier
                .filter(|earlier| earlier.manifest.get(relative) == Some(stamp))
                .and_then(|earlier| earlier.content.get(relative));
            let content = match (known, stamp) {
                (Some(content), _) => content.clone(),
                (None, Stamp::Dir) => Content::Dir,
                (None, Stamp::Symlink { target }) => symlink_content(target),
                (None, Stamp::File { mode, .. }) => match read_file(&repo.join(relative), MAX_TREE_FILE) {
                    Ok(Some((bytes, _))) => Content::File {
                        mode: *mode,
                        sha256: sha256_hex(&bytes),
                    },
                    _ => Content::Unknown,
                },
                (None, Stamp::Config { .. }) => match read_file(&repo.join(relative), 16 << 20) {
                    Ok(Some((bytes, _))) => {
                        config_content(strip(&String::from_utf8_lossy(&bytes)).as_bytes())
                    }
                    _ => Content::Unknown,
                },
            };
            (relative.clone(), content)
        })
        .collect()
}

fn config_content(stripped: &[u8]) -> Content {
    Content::File {
        mode: 0o644,
        sha256: sha256_hex(stripped),
    }
}

fn symlink_content(target: &Path) -> Content {
    target
        .to_str()
        .map_or(Content::Unknown, |target| Content::Symlink {
            target: target.to_owned(),
        })
}

/// [`changes`] by content: what turns a tree volume holding `old` into `new`. A path whose
/// content is not known is removed and written again.
pub fn content_changes(old: &ContentManifest, new: &ContentManifest) -> (Vec<String>, Vec<String>) {
    let kind = |content: &Content| std::mem::discriminant(content);
    changes_by(old, new, |previous, content| {
        let unknown = matches!(previous, Content::Unknown) || matches!(content, Content::Unknown);
        if previous == content && !unknown {
            None
        } else {
            Some(unknown || kind(previous) != kind(content) || matches!(content, Content::Symlink { .. }))
        }
    })
}

/// `old` after an update that removed `removed` (each with all below it) and wrote `written`.
pub fn updated_content(old: &mut ContentManifest, removed: &[String], written: Vec<(String, Content)>) {
    if !removed.is_empty() {
        old.retain(|path, _| !removed.iter().any(|gone| path == gone || below(path, gone)));
    }
    old.extend(written);
}

/// The paths to write and to remove first from `old` to `new`; `differs(old, new)` is `None`
/// for the same entry, else whether the old one must be removed before the new is written.
fn changes_by<T>(
    old: &std::collections::BTreeMap<String, T>,
    new: &std::collections::BTreeMap<String, T>,
    differs: impl Fn(&T, &T) -> Option<bool>,
) -> (Vec<String>, Vec<String>) {
    let mut write = Vec::new();
    let mut remove = Vec::new();
    for (path, entry) in new {
        match old.get(path) {
            Some(previous) => match differs(previous, entry) {
                None => {}
                Some(replace) => {
                    if replace {
                        remove.push(path.clone());
                    }
                    write.push(path.clone());
                }
            },
            None => write.push(path.clone()),
        }
    }
    for path in old.keys() {
        let covered = remove.iter().any(|removed| below(path, removed));
        if !new.contains_key(path) && !covered {
            remove.push(path.clone());
        }
    }
    (write, remove)
}

/// Writes into `out` a tar of the `paths` of `manifest` (all when `None`) read from `repo`,
/// owned by root, files with git's modes, git configs through `strip`. The archive's root
/// entry is `./` with mode 0755. A path that changed into something else since the manifest
/// was taken is written as it is now, or left out when it is gone. `first` is written before
/// everything else, each entry a regular file (the list [`unpack_tree`] reads; the files that
/// make an engine replace a folder, [`replacing_folders`]).
pub fn write_tree<W: Write>(
    out: W,
    first: &[(&str, &[u8])],
    repo: &Path,
    manifest: &Manifest,
    paths: Option<&[String]>,
    strip: &dyn Fn(&str) -> String,
    mut record: Option<&mut Vec<(String, Content)>>,
) -> std::io::Result<W> {
    let mut builder = tar::Builder::new(out);
    let recording = record.is_some();
    let mut note = |relative: &str, content: Content| {
        if let Some(record) = record.as_deref_mut() {
            record.push((relative.to_owned(), content));
        }
    };
    builder.follow_symlinks(false);
    for &(name, bytes) in first {
        let mut entry = header(tar::EntryType::Regular, 0o600, bytes.len() as u64, 0);
        builder.append_data(&mut entry, name, bytes)?;
    }
    let mut root = header(tar::EntryType::Directory, 0o755, 0, 0);
    builder.append_data(&mut root, "./", std::io::empty())?;
    let all: Vec<String>;
    let paths = match paths {
        Some(paths) => paths,
        None => {
            all = manifest.keys().cloned().collect();
            &all
        }
    };
    for relative in paths {
        let Some(stamp) = manifest.get(relative) else {
            continue;
        };
        let full = repo.join(relative);
        let mtime = |ns: i128| u64::try_from(ns / 1_000_000_000).unwrap_or(0);
        match stamp {
            Stamp::Dir => {
                let mut dir = header(tar::EntryType::Directory, 0o755, 0, 0);
                builder.append_data(&mut dir, format!("{relative}/"), std::io::empty())?;
                note(relative, Content::Dir);
            }
            Stamp::Symlink { target } => {
                let mut link = header(tar::EntryType::Symlink, 0o777, 0, 0);
                builder.append_link(&mut link, relative, target)?;
                note(relative, symlink_content(target));
            }
            Stamp::File { mode, mtime_ns, .. } => match read_file(&full, MAX_TREE_FILE)? {
                Some((bytes, _)) => {
                    let mut file = header(
                        tar::EntryType::Regular,
                        *mode,
                        bytes.len() as u64,
                        mtime(*mtime_ns),
                    );
                    builder.append_data(&mut file, relative, bytes.as_slice())?;
                    if recording {
                        note(
                            relative,
                            Content::File {
                                mode: *mode,
                                sha256: sha256_hex(&bytes),
                            },
                        );
                    }
                }
                None => {
                    tracing::warn!(
                        "{relative} is not copied into the sandbox (not a regular file, or over 2 GiB)"
                    );
                    note(relative, Content::Unknown);
                }
            },
            Stamp::Config { mtime_ns, .. } => {
                let original = read_file(&full, 16 << 20)?
                    .map(|(bytes, _)| bytes)
                    .unwrap_or_default();
                let stripped = strip(&String::from_utf8_lossy(&original)).into_bytes();
                let mut file = header(
                    tar::EntryType::Regular,
                    0o644,
                    stripped.len() as u64,
                    mtime(*mtime_ns),
                );
                builder.append_data(&mut file, relative, stripped.as_slice())?;
                if recording {
                    note(relative, config_content(&stripped));
                }
            }
        }
    }
    builder.into_inner()
}

/// True for a relative path of plain components (no `..`, no root, no `.`).
pub fn plain_relative(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|component| matches!(component, Component::Normal(_)))
}

/// A tar of empty directories: the root (`./`) with `root_mode`, then each `(name, mode)`.
/// Extracting it over existing directories resets their modes (and owner: root, unless
/// `owner` is given); the engine leaves the directory it extracts into as it is.
pub fn skeleton(root_mode: u32, dirs: &[(&str, u32)], owner: Option<(u64, u64)>) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut add = |name: String, mode: u32| {
        let mut dir = header(tar::EntryType::Directory, mode, 0, 0);
        if let Some((uid, gid)) = owner {
            dir.set_uid(uid);
            dir.set_gid(gid);
        }
        builder.append_data(&mut dir, name, std::io::empty())
    };
    add("./".to_owned(), root_mode)?;
    for (name, mode) in dirs {
        add(format!("{name}/"), *mode)?;
    }
    builder.into_inner()
}

/// A tar of the folder `dir` for an image build: regular files, folders and symlinks (as
/// links, never followed), `.git` left out, in a stable order with zeroed times and owners, so
/// that the same files give the same bytes. At most `limit` bytes of content.
pub fn context(dir: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::MetadataExt;
    let mut paths = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(dir.join(&rel))?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name())
            .filter(|name| name != ".git")
            .collect();
        names.sort();
        for name in names {
            let path = rel.join(name);
            let meta = std::fs::symlink_metadata(dir.join(&path))?;
            if meta.is_dir() {
                stack.push(path.clone());
            }
            paths.push((path, meta));
        }
    }
    paths.sort_by(|a, b| a.0.cmp(&b.0));
    let mut builder = tar::Builder::new(Vec::new());
    let mut total = 0u64;
    for (path, meta) in paths {
        let kind = meta.file_type();
        if kind.is_dir() {
            let mut entry = header(tar::EntryType::Directory, meta.mode() & 0o7777, 0, 0);
            builder.append_data(&mut entry, format!("{}/", path.display()), std::io::empty())?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(dir.join(&path))?;
            let mut entry = header(tar::EntryType::Symlink, 0o777, 0, 0);
            builder.append_link(&mut entry, &path, target)?;
        } else if kind.is_file() {
            total += meta.len();
            if total > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("more than {limit} bytes"),
                ));
            }
            let Some((bytes, _)) = read_file(&dir.join(&path), limit)? else {
                continue;
            };
            let mut entry = header(
                tar::EntryType::Regular,
                meta.mode() & 0o7777,
                bytes.len() as u64,
                0,
            );
            builder.append_data(&mut entry, &path, bytes.as_slice())?;
        }
    }
    builder.into_inner()
}

/// [`skeleton`] (owned by root) with one regular file (0644) inside one of the directories.
pub fn skeleton_with_file(
    root_mode: u32,
    dirs: &[(&str, u32)],
    file: Option<(&str, &[u8])>,
) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut dir = header(tar::EntryType::Directory, root_mode, 0, 0);
    builder.append_data(&mut dir, "./", std::io::empty())?;
    for (name, mode) in dirs {
        let mut dir = header(tar::EntryType::Directory, *mode, 0, 0);
        builder.append_data(&mut dir, format!("{name}/"), std::io::empty())?;
    }
    if let Some((name, bytes)) = file {
        let mut entry = header(tar::EntryType::Regular, 0o644, bytes.len() as u64, 0);
        builder.append_data(&mut entry, name, bytes)?;
    }
    builder.into_inner()
}

/// A tar of the directory `name` holding the regular files directly in `dir` (the edit step's
/// state), all owned by `uid:gid`: the directory 0700, the files 0600. (The root entry of an
/// archive does not change the directory it is extracted into, hence the named directory.)
pub fn state(dir: &Path, name: &str, uid: u64, gid: u64) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut root = header(tar::EntryType::Directory, 0o700, 0, 0);
    root.set_uid(uid);
    root.set_gid(gid);
    builder.append_data(&mut root, format!("{name}/"), std::io::empty())?;
    let mut names: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|entry| entry.file_name())
        .collect();
    names.sort();
    for file_name in names {
        let Some(file_name) = file_name.to_str() else {
            continue;
        };
        let Some((bytes, _)) = read_file(&dir.join(file_name), 1 << 30)? else {
            continue;
        };
        let mut file = header(tar::EntryType::Regular, 0o600, bytes.len() as u64, 0);
        file.set_uid(uid);
        file.set_gid(gid);
        builder.append_data(&mut file, format!("{name}/{file_name}"), bytes.as_slice())?;
    }
    builder.into_inner()
}

/// The relative path of an entry of a downloaded archive, without its first component (the
/// engine names entries after the directory asked for: `artifacts/tmp/x`), or `None` when it
/// is the root itself or not a plain relative path.
fn inner_path(path: &Path) -> Option<PathBuf> {
    let mut components = path.components().filter(|c| !matches!(c, Component::CurDir));
    components.next()?;
    let rest: PathBuf = components.clone().collect();
    if rest.as_os_str().is_empty() {
        return None;
    }
    components
        .all(|component| matches!(component, Component::Normal(_)))
        .then_some(rest)
}

/// Extracts a downloaded archive (`reader`) into `dest`, which must exist: directories and
/// regular files only, at most `limits`, never through a link (everything goes through a
/// `cap_std` directory handle), never into a top-level name listed in `skip_top`.
pub fn extract_into<R: Read>(
    reader: R,
    dest: &Path,
    limits: Limits,
    skip_top: &[&str],
) -> std::io::Result<Extracted> {
    extract_selected(reader, dest, limits, &|relative: &Path| {
        let top = relative
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        (!skip_top.contains(&top.as_str())).then(|| relative.to_owned())
    })
}

/// As [`extract_into`], only what is below the top-level folder `top`, without that folder:
/// `artifacts/tmp/x` of a download of `/artifacts` lands at `dest/x` for `top` = `tmp`.
pub fn extract_under<R: Read>(
    reader: R,
    dest: &Path,
    limits: Limits,
    top: &str,
) -> std::io::Result<Extracted> {
    extract_selected(reader, dest, limits, &|relative: &Path| {
        relative
            .strip_prefix(top)
            .ok()
            .filter(|rest| !rest.as_os_str().is_empty())
            .map(Path::to_owned)
    })
}

/// Extracts each entry whose relative path `select` maps to a destination (relative to
/// `dest`); the others are skipped.
fn extract_selected<R: Read>(
    reader: R,
    dest: &Path,
    limits: Limits,
    select: &dyn Fn(&Path) -> Option<PathBuf>,
) -> std::io::Result<Extracted> {
    use cap_std::fs::{Dir, OpenOptions};
    let root = Dir::open_ambient_dir(dest, cap_std::ambient_authority())?;
    let mut archive = tar::Archive::new(reader);
    let mut done = Extracted::default();
    let mut entries_seen = 0u64;
    for entry in archive.entries()? {
        let mut entry = entry?;
        entries_seen += 1;
        if entries_seen > limits.entries {
            done.truncated = true;
            break;
        }
        let path = entry.path()?.into_owned();
        let Some(relative) = inner_path(&path) else {
            continue;
        };
        let Some(relative) = select(&relative) else {
            done.skipped += 1;
            continue;
        };
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                if root.create_dir_all(&relative).is_err() {
                    done.skipped += 1;
                }
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size()?;
                if done.bytes + size > limits.bytes {
                    done.truncated = true;
                    break;
                }
                let write = |entry: &mut tar::Entry<'_, R>| -> std::io::Result<u64> {
                    if let Some(parent) = relative.parent().filter(|p| !p.as_os_str().is_empty()) {
                        root.create_dir_all(parent)?;
                    }
                    // Replace, never write through what is there (a link left by anything).
                    match root.symlink_metadata(&relative) {
                        Ok(meta) if meta.is_dir() => {
                            return Err(std::io::Error::other("a directory is in the way"));
                        }
                        Ok(_) => root.remove_file(&relative)?,
                        Err(_) => {}
                    }
                    let mut options = OpenOptions::new();
                    options.write(true).create_new(true);
                    let mut file = root.open_with(&relative, &options)?;
                    std::io::copy(&mut entry.take(size), &mut file)
                };
                match write(&mut entry) {
                    Ok(copied) => {
                        done.bytes += copied;
                        done.files += 1;
                    }
                    Err(error) => {
                        tracing::debug!("artifact {} not copied back: {error}", relative.display());
                        done.skipped += 1;
                    }
                }
            }
            _ => done.skipped += 1,
        }
    }
    Ok(done)
}

/// Reads the one regular file named `name` from a downloaded archive, at most `limit` bytes.
pub fn read_single<R: Read>(reader: R, name: &str, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries()? {
        let entry = entry?;
        let path = entry.path()?.into_owned();
        let matches =
            path.file_name().and_then(|n| n.to_str()) == Some(name) && path.components().count() == 1;
        if !matches {
            continue;
        }
        if entry.header().entry_type() != tar::EntryType::Regular || entry.header().size()? > limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{name} is not a regular file of at most {limit} bytes"),
            ));
        }
        let mut bytes = Vec::new();
        entry.take(limit).read_to_end(&mut bytes)?;
        return Ok(Some(bytes));
    }
    Ok(None)
}

/// Largest list of paths to remove that `sandbox-unpack` reads.
const MAX_REMOVE_LIST_BYTES: u64 = 256 * 1024 * 1024;

/// The name of the entry that, first in a tree archive, lists the paths to remove: named by
/// the call's `token`, so no file of a tree is taken for it.
pub fn remove_list_entry(token: &str) -> String {
    format!(".bork-ci-remove-{token}")
}

/// Files written side by side when a tree is unpacked: creating a file costs far more than
/// reading it from the archive. Measured (docs/performance.md): about twice as fast as one
/// writer into a folder of an engine's filesystem; no faster where creating a file is itself
/// the floor (a fuse-overlayfs engine's volumes folder, 0.5-0.75 ms a file).
const UNPACK_WRITERS: usize = 4;
/// Largest file handed to a writer (read whole into memory first); larger ones are written
/// as they are read.
const UNPACK_SMALL_FILE: u64 = 1 << 20;
/// Files read ahead of the writers at most.
const UNPACK_QUEUE: usize = 64;

/// A regular file of the tree, read whole, for a writer.
struct SmallFile {
    path: PathBuf,
    bytes: Vec<u8>,
    mode: u32,
    mtime: u64,
}

/// Unpacks the tree archive read from `reader` (one `write_tree` made) into `dest`, keeping
/// modes and modification times; when its first entry is `remove_list_entry` of `token`,
/// the paths it lists (NUL-separated, relative) are removed from `dest` first. Read as it
/// arrives (the helper container's stdin): the archive is never a file in the volume. Small
/// files are written by `UNPACK_WRITERS` threads side by side, each inside `dest` only
/// (`cap_std`: no path, link or `..` leads out) and replacing, never writing through, what is
/// there; the rest by `tar`, which checks each path too. Folders are made as their files need
/// them and given their modes last, the deepest first (as `tar::Archive::unpack` does). Runs
/// inside a helper container.
pub fn unpack_tree(reader: impl Read, token: &str, dest: &Path) -> std::io::Result<()> {
    // Files are opened relative to this handle: no lookup goes through the container's root
    // filesystem (a FUSE mount on some engines) for each file.
    let root = cap_std::fs::Dir::open_ambient_dir(dest, cap_std::ambient_authority())?;
    let (queue, taken) = std::sync::mpsc::sync_channel::<SmallFile>(UNPACK_QUEUE);
    let taken = std::sync::Mutex::new(taken);
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..UNPACK_WRITERS)
            .map(|_| scope.spawn(|| write_small_files(&root, &taken)))
            .collect();
        read_tree_entries(reader, token, dest, &root, queue, writers)
    })
}

/// The reading side of [`unpack_tree`]: removes what the list names, hands small files to
/// `queue` (taken by `writers`), writes the rest, then, once the writers are done, gives the
/// folders their modes and times.
fn read_tree_entries(
    reader: impl Read,
    token: &str,
    here: &Path,
    root: &cap_std::fs::Dir,
    queue: std::sync::mpsc::SyncSender<SmallFile>,
    writers: Vec<std::thread::ScopedJoinHandle<'_, std::io::Result<()>>>,
) -> std::io::Result<()> {
    let list_name = remove_list_entry(token);
    let mut unpacker = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, reader));
    unpacker.set_preserve_permissions(true);
    unpacker.set_preserve_mtime(true);
    unpacker.set_overwrite(true);
    let mut folders = Vec::new();
    let mut made: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    for (index, entry) in unpacker.entries()?.enumerate() {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        if index == 0 && kind == tar::EntryType::Regular && *entry.path_bytes() == *list_name.as_bytes() {
            let mut listed = Vec::new();
            (&mut entry)
                .take(MAX_REMOVE_LIST_BYTES + 1)
                .read_to_end(&mut listed)?;
            if listed.len() as u64 > MAX_REMOVE_LIST_BYTES {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "the list of paths to remove is too long",
                ));
            }
            for raw in listed.split(|b| *b == 0).filter(|raw| !raw.is_empty()) {
                let Ok(relative) = std::str::from_utf8(raw) else {
                    continue;
                };
                if plain_relative(relative) {
                    remove_listed(root, Path::new(relative))?;
                }
            }
            continue;
        }
        let size = entry.header().size()?;
        let small = kind == tar::EntryType::Regular && size <= UNPACK_SMALL_FILE;
        let path = entry.path()?.into_owned();
        match tree_relative(&path) {
            Some(relative) if small => {
                if let Some(parent) = relative
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty() && !made.contains(*p))
                {
                    root.create_dir_all(parent)?;
                    made.insert(parent.to_owned());
                }
                let mut bytes = Vec::with_capacity(size as usize);
                (&mut entry).take(size).read_to_end(&mut bytes)?;
                let small = SmallFile {
                    path: relative,
                    bytes,
                    mode: entry.header().mode()? & 0o7777,
                    mtime: entry.header().mtime()?,
                };
                if queue.send(small).is_err() {
                    // Every writer stopped: the first one's error, below, is the answer.
                    break;
                }
            }
            _ if kind == tar::EntryType::Directory => folders.push(entry),
            _ => {
                entry.unpack_in(here)?;
            }
        }
    }
    // Every file written before the folders get their modes and times.
    drop(queue);
    for writer in writers {
        writer
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("a writer panicked")))?;
    }
    folders.sort_by(|a, b| b.path_bytes().cmp(&a.path_bytes()));
    for mut folder in folders {
        folder.unpack_in(here)?;
    }
    Ok(())
}

/// A path of a tree archive as a plain relative one (`./` dropped); `None` for the root or a
/// path with `..` or a root in it.
fn tree_relative(path: &Path) -> Option<PathBuf> {
    let mut relative = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::Normal(part) => relative.push(part),
            _ => return None,
        }
    }
    (!relative.as_os_str().is_empty()).then_some(relative)
}

/// A writer of [`unpack_tree`]: writes the files it takes until the queue ends; stops at the
/// first error (and so, once all have stopped, does the reader).
fn write_small_files(
    root: &cap_std::fs::Dir,
    taken: &std::sync::Mutex<std::sync::mpsc::Receiver<SmallFile>>,
) -> std::io::Result<()> {
    use cap_std::fs::OpenOptionsExt as _;
    loop {
        let next = match taken.lock() {
            Ok(receiver) => receiver.recv(),
            Err(_) => return Err(std::io::Error::other("a writer panicked")),
        };
        let Ok(file) = next else { return Ok(()) };
        let mut options = cap_std::fs::OpenOptions::new();
        // `O_EXCL`: never opens what is there, a link included; that is replaced instead.
        options.write(true).create_new(true).mode(file.mode);
        let created = match root.open_with(&file.path, &options) {
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                if root.symlink_metadata(&file.path)?.is_dir() {
                    root.remove_dir_all(&file.path)?;
                } else {
                    root.remove_file(&file.path)?;
                }
                root.open_with(&file.path, &options)
            }
            created => created,
        };
        let mut written = created?.into_std();
        written.write_all(&file.bytes)?;
        // The mode as archived, whatever the umask took from it.
        written.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(file.mode))?;
        let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(file.mtime);
        written.set_times(std::fs::FileTimes::new().set_modified(mtime).set_accessed(mtime))?;
    }
}

/// Removes `relative` (a file, a symlink, or a folder with everything in it) under `root`,
/// never following a symlink at any component: each folder on the way is opened with
/// `O_NOFOLLOW`, and a symlink on the way means the listed path is not there (nothing is
/// removed through it).
fn remove_listed(root: &cap_std::fs::Dir, relative: &Path) -> std::io::Result<()> {
    use cap_fs_ext::DirExt;
    let mut parts: Vec<&std::ffi::OsStr> = relative.iter().collect();
    let Some(last) = parts.pop() else {
        return Ok(());
    };
    let mut folder = root.try_clone()?;
    for part in parts {
        match folder.open_dir_nofollow(part) {
            Ok(next) => folder = next,
            // Absent, not a folder, or a symlink: the listed path is not in the tree.
            Err(_) => return Ok(()),
        }
    }
    match folder.symlink_metadata(last) {
        Ok(metadata) if metadata.is_dir() => folder.remove_dir_all(last),
        Ok(_) => folder.remove_file(last),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// Rewinds a spooled archive for reading.
pub fn rewind(mut file: std::fs::File) -> std::io::Result<std::fs::File> {
    file.flush()?;
    file.rewind()?;
    Ok(file)
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {

    #[test]
    fn a_kept_tree_is_compared_by_content_and_its_record_follows_each_update() {
        use super::{
            Content, ContentManifest, content_changes, content_manifest, updated_content, write_tree,
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("dir")).expect("mkdir");
        std::fs::write(root.join("same.txt"), "same\n").expect("write");
        std::fs::write(root.join("dir/inner.txt"), "inner\n").expect("write");
        let paths = ["same.txt".to_owned(), "dir/inner.txt".to_owned()];
        let first = manifest(root, &paths);
        let mut sent = Vec::new();
        write_tree(
            Vec::new(),
            &[],
            root,
            &first,
            None,
            &|t| t.to_owned(),
            Some(&mut sent),
        )
        .expect("tar");
        let mut kept = ContentManifest::new();
        updated_content(&mut kept, &[], sent);
        assert_eq!(
            kept,
            content_manifest(root, &first, &|t| t.to_owned()),
            "sent is what is read"
        );
        // New times only: nothing to send.
        let file = std::fs::File::options()
            .write(true)
            .open(root.join("same.txt"))
            .expect("open");
        file.set_modified(std::time::UNIX_EPOCH).expect("mtime");
        let again = manifest(root, &paths);
        assert_ne!(first, again, "the stamps differ");
        assert_eq!(
            content_changes(&kept, &content_manifest(root, &again, &|t| t.to_owned())),
            (vec![], vec![])
        );
        // A change, a folder turned file, a file that cannot be read.
        std::fs::write(root.join("same.txt"), "changed\n").expect("write");
        std::fs::remove_dir_all(root.join("dir")).expect("rm");
        std::fs::write(root.join("dir"), "a file\n").expect("write");
        let now = manifest(root, &["same.txt".to_owned(), "dir".to_owned()]);
        let mut here = content_manifest(root, &now, &|t| t.to_owned());
        let (write, remove) = content_changes(&kept, &here);
        assert_eq!(write, vec!["dir".to_owned(), "same.txt".to_owned()]);
        assert_eq!(
            remove,
            vec!["dir".to_owned()],
            "the folder goes first, with what is in it"
        );
        updated_content(
            &mut kept,
            &remove,
            vec![
                ("dir".into(), here["dir"].clone()),
                ("same.txt".into(), here["same.txt"].clone()),
            ],
        );
        assert_eq!(
            kept, here,
            "nothing below the removed folder is left in the record"
        );
        here.insert("same.txt".into(), Content::Unknown);
        let (write, remove) = content_changes(&kept, &here);
        assert_eq!(
            (write.as_slice(), remove.as_slice()),
            (
                ["same.txt".to_owned()].as_slice(),
                ["same.txt".to_owned()].as_slice()
            ),
            "unknown: removed, written again"
        );
    }

    #[test]
    fn a_removal_below_the_top_replaces_its_folder_with_all_it_holds() {
        use super::{Stamp, replacing_folders};
        let file = || Stamp::File {
            mode: 0o644,
            size: 1,
            mtime_ns: 1,
            ino: 1,
        };
        let manifest: Manifest = [
            ("README.md", file()),
            (".git", Stamp::Dir),
            (".git/objects", Stamp::Dir),
            (".git/objects/pack", Stamp::Dir),
            (".git/objects/pack/pack-new.idx", file()),
            (".git/objects/pack/pack-new.pack", file()),
            (".git/refs", Stamp::Dir),
            (".git/refs/heads", Stamp::Dir),
            (".git/refs/heads/main", file()),
            ("src", Stamp::Dir),
            ("src/a", Stamp::Dir),
            ("src/a/one.rs", file()),
            ("src/two.rs", file()),
        ]
        .into_iter()
        .map(|(path, stamp)| (path.to_owned(), stamp))
        .collect();
        let owned = |paths: &[&str]| paths.iter().map(|path| (*path).to_owned()).collect::<Vec<_>>();
        // A new checkout's pack: the old one's files go, their folder is sent whole.
        let write = owned(&[
            ".git/objects/pack/pack-new.idx",
            ".git/objects/pack/pack-new.pack",
            ".git/refs/heads/main",
        ]);
        let remove = owned(&[
            ".git/objects/pack/pack-old.idx",
            ".git/objects/pack/pack-old.pack",
        ]);
        assert_eq!(
            replacing_folders(&manifest, &write, &remove, 512),
            Some((
                owned(&[".git/objects/pack"]),
                owned(&[
                    ".git/objects/pack",
                    ".git/objects/pack/pack-new.idx",
                    ".git/objects/pack/pack-new.pack",
                    ".git/refs/heads/main"
                ])
            ))
        );
        // A folder inside another replaced one is not replaced again.
        let remove = owned(&["src/a/gone.rs", "src/gone"]);
        assert_eq!(
            replacing_folders(&manifest, &[], &remove, 512),
            Some((
                owned(&["src"]),
                owned(&["src", "src/a", "src/a/one.rs", "src/two.rs"])
            ))
        );
        assert_eq!(
            replacing_folders(&manifest, &[], &remove, 3),
            None,
            "past the limit"
        );
        // At the top (the volume's mount), or a folder the tree no longer has: not this way.
        assert_eq!(
            replacing_folders(&manifest, &[], &owned(&["gone.txt"]), 512),
            None
        );
        assert_eq!(
            replacing_folders(&manifest, &[], &owned(&["lib/gone.rs"]), 512),
            None
        );
        assert_eq!(
            replacing_folders(&manifest, &[], &owned(&["README.md/x"]), 512),
            None
        );
    }

    #[test]
    fn an_earlier_hashing_is_taken_only_for_paths_whose_stamp_is_unchanged() {
        use super::{Content, Hashed, content_manifest, content_manifest_reusing};
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for name in ["kept.txt", "edited.txt", "gone.txt"] {
            std::fs::write(root.join(name), format!("{name}\n")).expect("write");
        }
        let paths = ["kept.txt", "edited.txt", "gone.txt"].map(str::to_owned);
        let strip = |text: &str| text.to_owned();
        let before = manifest(root, &paths);
        let mut earlier = Hashed {
            content: content_manifest(root, &before, &strip),
            manifest: before,
        };
        // A record that is not what the file holds shows which entries were taken, not read.
        let marked = Content::File {
            mode: 0o644,
            sha256: "taken from the earlier hashing".into(),
        };
        for name in ["kept.txt", "edited.txt"] {
            earlier.content.insert(name.into(), marked.clone());
        }
        std::fs::write(root.join("edited.txt"), "a longer text than before\n").expect("write");
        std::fs::remove_file(root.join("gone.txt")).expect("rm");
        std::fs::write(root.join("new.txt"), "new\n").expect("write");
        let now = manifest(root, &["kept.txt", "edited.txt", "new.txt"].map(str::to_owned));
        let here = content_manifest_reusing(root, &now, &strip, Some(&earlier));
        assert_eq!(here["kept.txt"], marked, "an unchanged stamp: taken");
        assert_eq!(
            here["edited.txt"],
            content_manifest(root, &now, &strip)["edited.txt"],
            "a changed file: read again"
        );
        assert_ne!(here["edited.txt"], marked);
        assert_eq!(here["new.txt"], content_manifest(root, &now, &strip)["new.txt"]);
        assert!(!here.contains_key("gone.txt"), "only the paths asked about");
        assert_eq!(
            content_manifest_reusing(root, &now, &strip, None),
            content_manifest(root, &now, &strip),
            "without an earlier hashing: every path read"
        );
    }

    use super::*;

    fn names(tar: &[u8]) -> Vec<(String, tar::EntryType, u32)> {
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .expect("entries")
            .map(|e| {
                let e = e.expect("entry");
                (
                    e.path().expect("path").display().to_string(),
                    e.header().entry_type(),
                    e.header().mode().expect("mode"),
                )
            })
            .collect()
    }

    #[test]
    fn removing_listed_paths_never_follows_a_symlink_at_any_component() {
        let dest = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(outside.path().join("victim"), "keep").expect("write");
        std::fs::create_dir_all(outside.path().join("deep/er")).expect("mkdir");
        std::fs::write(outside.path().join("deep/er/victim"), "keep").expect("write");
        std::os::unix::fs::symlink(outside.path(), dest.path().join("link")).expect("symlink");
        std::fs::create_dir_all(dest.path().join("real/sub")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path().join("deep"), dest.path().join("real/sub/hop"))
            .expect("symlink");
        std::fs::write(dest.path().join("real/gone"), "x").expect("write");
        let root =
            cap_std::fs::Dir::open_ambient_dir(dest.path(), cap_std::ambient_authority()).expect("dir");
        for listed in [
            "link/victim",
            "link/deep",
            "real/sub/hop/er/victim",
            "real/sub/hop/er",
            "real/gone",
        ] {
            remove_listed(&root, Path::new(listed)).expect(listed);
        }
        assert_eq!(
            std::fs::read_to_string(outside.path().join("victim")).expect("kept"),
            "keep"
        );
        assert_eq!(
            std::fs::read_to_string(outside.path().join("deep/er/victim")).expect("kept"),
            "keep"
        );
        assert!(!dest.path().join("real/gone").exists());
        // The symlink itself, when listed, goes; its target stays.
        remove_listed(&root, Path::new("link")).expect("link");
        assert!(std::fs::symlink_metadata(dest.path().join("link")).is_err());
        assert!(outside.path().join("victim").exists());
        // A listed folder goes with its contents, a symlink in it removed, not followed.
        remove_listed(&root, Path::new("real")).expect("real");
        assert!(!dest.path().join("real").exists());
        assert!(outside.path().join("deep/er/victim").exists());
    }

    #[test]
    fn tree_has_listed_files_git_modes_and_a_stripped_config() {
        let repo = tempfile::tempdir().expect("tempdir");
        let root = repo.path();
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git/hooks")).expect("mkdir");
        std::fs::create_dir_all(root.join(".git/refs/heads")).expect("mkdir");
        std::fs::write(root.join("src/a.txt"), "a").expect("write");
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(
            root.join("run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )
        .expect("chmod");
        std::fs::write(root.join("ignored.txt"), "not listed").expect("write");
        std::fs::write(root.join(".git/config"), "[credential]\n\thelper = SECRET\n").expect("write");
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").expect("write");
        std::fs::write(root.join(".git/hooks/pre-commit"), "x").expect("write");
        std::os::unix::fs::symlink("src/a.txt", root.join("link")).expect("symlink");
        let paths = ["link", "run.sh", "src/a.txt", "../escape", "gone.txt"].map(str::to_owned);
        let manifest = manifest(root, &paths);
        let tar = write_tree(
            Vec::new(),
            &[],
            root,
            &manifest,
            None,
            &|_| "[core]\n".to_owned(),
            None,
        )
        .expect("tar");
        let entries = names(&tar);
        let find = |name: &str| {
            entries
                .iter()
                .find(|(n, _, _)| n.trim_end_matches('/') == name)
                .cloned()
        };
        assert_eq!(find("run.sh").expect("run.sh").2, 0o755);
        assert_eq!(find("src/a.txt").expect("a").2, 0o644);
        assert_eq!(find("link").expect("link").1, tar::EntryType::Symlink);
        assert!(find("src").is_some() && find(".git/HEAD").is_some());
        assert!(find("ignored.txt").is_none() && find("gone.txt").is_none());
        assert!(find(".git/hooks").is_none() && find(".git/hooks/pre-commit").is_none());
        let mut archive = tar::Archive::new(tar.as_slice());
        for entry in archive.entries().expect("entries") {
            let mut entry = entry.expect("entry");
            if entry.path().expect("path").as_os_str() == ".git/config" {
                let mut text = String::new();
                entry.read_to_string(&mut text).expect("read");
                assert_eq!(text, "[core]\n");
            }
        }
    }

    #[test]
    fn changes_are_what_differs_and_what_is_gone() {
        let file = |size| Stamp::File {
            mode: 0o644,
            size,
            mtime_ns: 1,
            ino: 1,
        };
        let old: Manifest = [
            ("a".to_owned(), file(1)),
            ("d".to_owned(), Stamp::Dir),
            ("d/x".to_owned(), file(1)),
            ("e".to_owned(), Stamp::Dir),
            ("e/y".to_owned(), file(1)),
            ("same".to_owned(), file(1)),
        ]
        .into();
        let new: Manifest = [
            ("a".to_owned(), file(2)),
            ("d".to_owned(), file(3)),
            ("same".to_owned(), file(1)),
            ("z".to_owned(), file(1)),
        ]
        .into();
        let (write, remove) = changes(&old, &new);
        assert_eq!(write, ["a", "d", "z"]);
        // `d` turned from a folder into a file: removed first, with what was inside it.
        assert_eq!(remove, ["d", "e"]);
    }

    fn archive_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, bytes) in entries {
            let mut h = header(*kind, 0o644, bytes.len() as u64, 0);
            if *kind == tar::EntryType::Symlink {
                h.set_size(0);
                builder.append_link(&mut h, name, "/etc/passwd").expect("link");
            } else {
                // Write the name raw, as a hostile archive would.
                h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
                h.set_cksum();
                builder.append(&h, *bytes).expect("append");
            }
        }
        builder.into_inner().expect("tar")
    }

    #[test]
    fn extraction_takes_plain_files_only_and_stays_inside() {
        let dest = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dest.path().join("tmp")).expect("mkdir");
        std::os::unix::fs::symlink(outside.path(), dest.path().join("tmp/out")).expect("symlink");
        let tar = archive_of(&[
            ("artifacts/", tar::EntryType::Directory, b""),
            ("artifacts/tmp/ok.txt", tar::EntryType::Regular, b"ok"),
            ("artifacts/tmp/link", tar::EntryType::Symlink, b""),
            ("artifacts/../../escape.txt", tar::EntryType::Regular, b"x"),
            ("artifacts/tmp/out/planted.txt", tar::EntryType::Regular, b"x"),
            ("artifacts/logs/runner.log", tar::EntryType::Regular, b"forged"),
            ("artifacts/build/big.bin", tar::EntryType::Regular, &[0u8; 64]),
        ]);
        let limits = Limits {
            bytes: 32,
            entries: 100,
        };
        let done = extract_into(tar.as_slice(), dest.path(), limits, &["logs"]);
        assert_eq!(
            std::fs::read_to_string(dest.path().join("tmp/ok.txt")).expect("extracted"),
            "ok"
        );
        assert!(!dest.path().join("tmp/link").exists());
        assert!(!dest.path().join("logs/runner.log").exists());
        assert!(
            std::fs::read_dir(outside.path())
                .expect("outside")
                .next()
                .is_none()
        );
        let done = done.expect("extracts");
        assert!(done.truncated && done.skipped >= 2, "{done:?}");
    }

    #[test]
    fn one_folder_of_a_download_lands_without_its_name_and_stays_inside() {
        let dest = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(outside.path(), dest.path().join("out")).expect("symlink");
        let tar = archive_of(&[
            ("artifacts/", tar::EntryType::Directory, b""),
            ("artifacts/tmp/", tar::EntryType::Directory, b""),
            ("artifacts/tmp/ok.txt", tar::EntryType::Regular, b"ok"),
            ("artifacts/tmp/deep/x.txt", tar::EntryType::Regular, b"x"),
            ("artifacts/tmp/../../escape.txt", tar::EntryType::Regular, b"x"),
            ("artifacts/tmp/out/planted.txt", tar::EntryType::Regular, b"x"),
            ("artifacts/logs/runner.log", tar::EntryType::Regular, b"not tmp"),
            ("artifacts/tmpfile", tar::EntryType::Regular, b"not tmp either"),
        ]);
        let limits = Limits {
            bytes: 1024,
            entries: 100,
        };
        let done = extract_under(tar.as_slice(), dest.path(), limits, "tmp").expect("extracts");
        let read = |path: &str| std::fs::read_to_string(dest.path().join(path)).ok();
        assert_eq!(read("ok.txt").as_deref(), Some("ok"));
        assert_eq!(read("deep/x.txt").as_deref(), Some("x"));
        assert_eq!(read("runner.log"), None);
        assert_eq!(read("logs/runner.log"), None);
        assert_eq!(read("file"), None);
        assert!(
            std::fs::read_dir(outside.path())
                .expect("outside")
                .next()
                .is_none()
        );
        assert_eq!(done.files, 2, "{done:?}");
    }

    #[test]
    fn single_file_out_of_an_archive() {
        let tar = archive_of(&[("output.json", tar::EntryType::Regular, b"{}")]);
        assert_eq!(
            read_single(tar.as_slice(), "output.json", 10).expect("reads"),
            Some(b"{}".to_vec())
        );
        assert!(read_single(tar.as_slice(), "output.json", 1).is_err());
        assert_eq!(read_single(tar.as_slice(), "other", 10).expect("reads"), None);
    }

    #[test]
    fn unpack_tree_writes_every_file_as_archived_replacing_links_after_removing_the_listed() {
        use std::os::unix::fs::PermissionsExt;
        let source = tempfile::tempdir().expect("tempdir");
        let root = source.path();
        let mut paths = Vec::new();
        for folder in 0..6 {
            std::fs::create_dir_all(root.join(format!("f{folder}/deep"))).expect("mkdir");
            for file in 0..40 {
                let path = format!("f{folder}/deep/{file}.txt");
                std::fs::write(root.join(&path), format!("{folder}-{file}\n")).expect("write");
                paths.push(path);
            }
        }
        std::fs::write(root.join("run.sh"), "#!/bin/sh\n").expect("write");
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Larger than a writer takes: written as it is read.
        std::fs::write(root.join("big.bin"), vec![7u8; (UNPACK_SMALL_FILE + 10) as usize]).expect("write");
        std::os::unix::fs::symlink("run.sh", root.join("link")).expect("symlink");
        paths.extend(["run.sh", "big.bin", "link", "f0", "f0/deep"].map(str::to_owned));
        let manifest = manifest(root, &paths);
        let list_name = remove_list_entry("tok");
        let tar = write_tree(
            Vec::new(),
            &[(list_name.as_str(), b"gone.txt\0old\0../outside.txt\0".as_slice())],
            root,
            &manifest,
            None,
            &|text| text.to_owned(),
            None,
        )
        .expect("tar");
        let place = tempfile::tempdir().expect("tempdir");
        let dest = place.path().join("repo");
        std::fs::create_dir_all(dest.join("old/inner")).expect("mkdir");
        std::fs::create_dir_all(dest.join("f1/deep")).expect("mkdir");
        std::fs::write(dest.join("gone.txt"), "gone").expect("write");
        let outside = place.path().join("outside.txt");
        std::fs::write(&outside, "untouched").expect("write");
        // A link where the tree has a file: replaced, never written through.
        std::os::unix::fs::symlink(&outside, dest.join("f1/deep/3.txt")).expect("symlink");
        // A folder where the tree has a file: replaced too.
        std::fs::create_dir_all(dest.join("f2/deep/5.txt/inner")).expect("mkdir");
        unpack_tree(tar.as_slice(), "tok", &dest).expect("unpacked");
        for path in &paths {
            let (from, to) = (root.join(path), dest.join(path));
            let (a, b) = (
                std::fs::symlink_metadata(&from).expect("source"),
                std::fs::symlink_metadata(&to).unwrap_or_else(|e| panic!("{path}: {e}")),
            );
            assert_eq!(a.file_type().is_symlink(), b.file_type().is_symlink(), "{path}");
            if a.is_file() {
                assert_eq!(
                    std::fs::read(&from).expect("read"),
                    std::fs::read(&to).expect("read"),
                    "{path}"
                );
                assert_eq!(
                    a.permissions().mode() & 0o777,
                    b.permissions().mode() & 0o777,
                    "{path}"
                );
                assert_eq!(
                    a.modified()
                        .expect("mtime")
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("epoch")
                        .as_secs(),
                    b.modified()
                        .expect("mtime")
                        .duration_since(std::time::UNIX_EPOCH)
                        .expect("epoch")
                        .as_secs(),
                    "{path}"
                );
            }
        }
        assert_eq!(
            std::fs::read_link(dest.join("link")).expect("link"),
            Path::new("run.sh")
        );
        assert!(
            !dest.join("gone.txt").exists() && !dest.join("old").exists(),
            "the listed are gone"
        );
        assert!(
            !dest.join(&list_name).exists(),
            "the list is not a file of the tree"
        );
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "untouched");
        assert!(
            !std::fs::symlink_metadata(dest.join("f1/deep/3.txt"))
                .expect("meta")
                .file_type()
                .is_symlink()
        );
        // Without the token the first entry is a file like any other.
        let again = place.path().join("again");
        std::fs::create_dir_all(&again).expect("mkdir");
        unpack_tree(tar.as_slice(), "other", &again).expect("unpacked");
        assert!(again.join(&list_name).is_file());
        // A cut archive is an error, not a half tree called done.
        let cut = place.path().join("cut");
        std::fs::create_dir_all(&cut).expect("mkdir");
        assert!(unpack_tree(&tar[..tar.len() / 2 + 100], "tok", &cut).is_err());
    }
}
