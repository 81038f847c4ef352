//! Applying an [`EditPlan`] to the target repository: the only code that writes the model's edits
//! to it (git, run by `github`, checks out, merges and commits; `bork-ci init` writes its files).
//!
//! Every edit is classified by `edit::policy` before the first write. Allowed edits are then
//! carried out through one `cap_std::fs::Dir` opened at the repository root, walking one
//! component at a time without following any symlink (`open_dir_nofollow`), whether it points
//! outside the repository or inside it. The final component is checked with `symlink_metadata`:
//! a symlink, a directory or a special file is refused. A write goes to a fresh temporary file
//! in the held directory, is synced, then renamed over the final name, which breaks hardlinks
//! and replaces (never follows) a symlink swapped in at the last moment. Deleting a symlink
//! removes the link; deleting a directory is refused.
//!
//! Refusals are per edit: one refused or gated edit does not stop the others (a parse error, by
//! contrast, rejects the whole answer before anything gets here). Gated edits are not written;
//! they come back as [`PendingApproval`]s; [`apply_approved`] (for library users approving without
//! GitHub) writes one with exactly the bytes a human approved. This module does not print: the caller renders refusals.

use std::collections::BTreeSet;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::parse::EditPlan;
use super::path::{self, RepoPath};
use super::policy::{self, Disposition, Protection};

/// Removes the temporary files an interrupted apply left (`.bork-tmp-*`, regular files only),
/// anywhere in the working tree but `.git`, without following any symlink. Returns how many.
pub fn sweep_temp_files(repo_root: &Path) -> usize {
    let mut removed = 0;
    let mut stack = vec![repo_root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            // DirEntry::file_type does not follow a symlink.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && path::protected_key(name) != ".git" {
                stack.push(entry.path());
            } else if kind.is_file()
                && name.starts_with(TEMP_PREFIX)
                && std::fs::remove_file(entry.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed
}

/// Mode of newly created files (the umask still applies).
const NEW_FILE_MODE: u32 = 0o644;
/// Prefix of the temporary files a write goes through.
const TEMP_PREFIX: &str = ".bork-tmp-";

/// Code of an update to an existing file that the model never saw.
pub const CODE_NOT_SHOWN: &str = "not-shown-to-model";
/// Code of an edit that would go through a symlinked directory.
pub const CODE_SYMLINK_COMPONENT: &str = "symlink-component";
/// Code of an edit whose target is itself a symlink (writes only; deletes remove the link).
pub const CODE_SYMLINK: &str = "symlink";
/// Code of an edit whose target is a directory.
pub const CODE_DIRECTORY: &str = "directory";
/// Code of an edit that would need a file to be a directory.
pub const CODE_NOT_A_DIRECTORY: &str = "not-a-directory";
/// Code of an edit whose target is a FIFO, socket or device.
pub const CODE_SPECIAL_FILE: &str = "special-file";
/// Code of an edit that failed on an I/O error.
pub const CODE_IO_ERROR: &str = "io-error";

/// Whether an edit writes or deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EditAction {
    /// Create or replace the file.
    Write,
    /// Delete the file.
    Delete,
}

/// An edit that changed the repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct AppliedEdit {
    /// The path, relative to the repository root.
    pub path: String,
    /// What was done.
    pub action: EditAction,
    /// sha256 (hex) of the written contents; `None` for a delete.
    pub sha256: Option<String>,
}

/// An edit that was not made and never will be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RefusedEdit {
    /// The raw path, as the model sent it.
    pub path: String,
    /// What the model asked for.
    pub action: EditAction,
    /// Stable code: a path rejection code, `git-dir`, `config-file`, or one of this module's.
    pub code: String,
    /// A sentence saying why.
    pub reason: String,
    /// The attempted contents, when they may be printed (never for `.git`, never for deletes).
    pub contents: Option<String>,
}

/// A gated edit waiting for a human.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PendingApproval {
    /// The path, relative to the repository root.
    pub path: String,
    /// What the model asked for.
    pub action: EditAction,
    /// The proposed contents; `None` for a delete.
    pub contents: Option<String>,
    /// sha256 (hex) of `contents`; `None` for a delete.
    pub sha256: Option<String>,
    /// The rule that gated it.
    pub rule: String,
    /// The findings of the checks that wait on it, when the round ended for it (one line
    /// each, bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<String>,
}

/// The outcome of applying one plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Changeset {
    /// Edits made.
    pub applied: Vec<AppliedEdit>,
    /// Edits refused.
    pub refused: Vec<RefusedEdit>,
    /// Edits waiting for approval.
    pub pending: Vec<PendingApproval>,
    /// Paths left as they were: identical contents, or a delete of an absent file.
    pub unchanged: Vec<String>,
}

impl Changeset {
    /// Whether the repository changed.
    pub fn changed(&self) -> bool {
        !self.applied.is_empty()
    }
}

/// What [`apply`] needs besides the plan.
#[derive(Debug, Clone)]
pub struct ApplyOptions {
    /// The approval rules.
    pub protection: Protection,
    /// Existing files the model never saw (binary or too large): updating or deleting them is
    /// refused with [`CODE_NOT_SHOWN`]; creating a new file at such a path is not affected.
    pub not_shown: BTreeSet<String>,
}

/// Failures that stop [`apply`] or [`apply_approved`] as a whole.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The repository root could not be opened.
    #[error("opening the repository root {}: {source}", path.display())]
    OpenRoot {
        /// The root given.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// An approved edit is refused (invalid or protected path, symlink, directory, …).
    #[error("the approved edit of {path:?} is refused ({code}): {reason}")]
    Refused {
        /// The path.
        path: String,
        /// Stable code, as in [`RefusedEdit::code`].
        code: String,
        /// Why.
        reason: String,
    },
    /// The approved contents do not hash to the recorded sha256.
    #[error("the contents of the approved edit of {path:?} do not match the sha256 that was approved")]
    HashMismatch {
        /// The path.
        path: String,
    },
    /// An approved write without contents or without a hash.
    #[error("the approved write of {path:?} carries no contents or no sha256")]
    MissingContents {
        /// The path.
        path: String,
    },
}

/// sha256 of `bytes`, as lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// One edit that passed the policy, waiting to be carried out.
enum Staged<'a> {
    Write { path: RepoPath, contents: &'a str },
    Delete { path: RepoPath },
}

/// Applies a plan: writes, then deletes, each in answer order. Every edit is classified before
/// the first write; refusals and gated edits do not stop the others.
pub fn apply(repo_root: &Path, plan: &EditPlan, options: &ApplyOptions) -> Result<Changeset, ApplyError> {
    let mut changeset = Changeset::default();
    let mut staged = Vec::new();
    let requests = plan
        .writes
        .iter()
        .map(|write| (write.path.as_str(), Some(write.contents.as_str())))
        .chain(plan.deletes.iter().map(|path| (path.as_str(), None)));
    for (raw, contents) in requests {
        let action = match contents {
            Some(_) => EditAction::Write,
            None => EditAction::Delete,
        };
        let disposition = match policy::classify(raw, &options.protection) {
            Disposition::Allow => keyed_judge_change(repo_root, raw, contents, &options.protection)
                .map_or(Disposition::Allow, |rule| Disposition::NeedsApproval { rule }),
            other => other,
        };
        match disposition {
            Disposition::Allow => match path::validate(raw) {
                Ok(path) => staged.push(match contents {
                    Some(contents) => Staged::Write { path, contents },
                    None => Staged::Delete { path },
                }),
                Err(rejection) => refuse(
                    &mut changeset,
                    raw,
                    action,
                    rejection.code(),
                    rejection.to_string(),
                    contents,
                ),
            },
            Disposition::NeedsApproval { .. } if already_in_place(repo_root, raw, contents) => {
                // An approved change the model proposes again, or a delete of what is gone:
                // nothing for a human to decide (C14).
                changeset.unchanged.push(raw.to_owned());
            }
            Disposition::NeedsApproval { rule } => {
                tracing::info!(path = %raw.escape_debug(), %rule, "edit waits for approval");
                changeset.pending.push(PendingApproval {
                    path: raw.to_owned(),
                    action,
                    contents: contents.map(str::to_owned),
                    sha256: contents.map(|c| sha256_hex(c.as_bytes())),
                    rule,
                    waiting: Vec::new(),
                });
            }
            Disposition::Refuse(refusal) => {
                let shown = if refusal.print_contents { contents } else { None };
                refuse(&mut changeset, raw, action, refusal.code, refusal.message, shown);
            }
        }
    }
    if staged.is_empty() {
        return Ok(changeset);
    }
    let root = open_root(repo_root)?;
    for edit in staged {
        let (path, action, contents, outcome) = match edit {
            Staged::Write { path, contents } => {
                let outcome = write_file(&root, &path, contents, Some(&options.not_shown));
                (path, EditAction::Write, Some(contents), outcome)
            }
            Staged::Delete { path } => {
                let outcome = delete_file(&root, &path, Some(&options.not_shown));
                (path, EditAction::Delete, None, outcome)
            }
        };
        match outcome {
            Outcome::Applied { sha256 } => {
                tracing::debug!(path = %path, ?action, "applied edit");
                changeset.applied.push(AppliedEdit {
                    path: path.into_string(),
                    action,
                    sha256,
                });
            }
            Outcome::Unchanged => changeset.unchanged.push(path.into_string()),
            Outcome::Refused { code, reason } => {
                refuse(&mut changeset, path.as_str(), action, code, reason, contents);
            }
        }
    }
    Ok(changeset)
}

/// Writes (or deletes) a gated edit after a human approved it. The path is validated again and
/// the hard refusals still hold; the walk is as safe as in [`apply`]; the contents must still
/// hash to `pending.sha256`. Identical contents on disk count as applied.
pub fn apply_approved(repo_root: &Path, pending: &PendingApproval) -> Result<AppliedEdit, ApplyError> {
    let refused = |code: &str, reason: String| ApplyError::Refused {
        path: pending.path.clone(),
        code: code.to_owned(),
        reason,
    };
    let path = path::validate(&pending.path).map_err(|r| refused(r.code(), r.to_string()))?;
    let defaults =
        Protection::new(None, &[], &Default::default()).map_err(|e| refused(CODE_IO_ERROR, e.to_string()))?;
    if let Disposition::Refuse(refusal) = policy::classify(&pending.path, &defaults) {
        return Err(refused(refusal.code, refusal.message));
    }
    let root = open_root(repo_root)?;
    let outcome = match pending.action {
        EditAction::Write => {
            let (Some(contents), Some(expected)) = (&pending.contents, &pending.sha256) else {
                return Err(ApplyError::MissingContents {
                    path: pending.path.clone(),
                });
            };
            if !sha256_hex(contents.as_bytes()).eq_ignore_ascii_case(expected) {
                return Err(ApplyError::HashMismatch {
                    path: pending.path.clone(),
                });
            }
            write_file(&root, &path, contents, None)
        }
        EditAction::Delete => delete_file(&root, &path, None),
    };
    let sha256 = match pending.action {
        EditAction::Write => pending.contents.as_ref().map(|c| sha256_hex(c.as_bytes())),
        EditAction::Delete => None,
    };
    match outcome {
        Outcome::Applied { .. } | Outcome::Unchanged => Ok(AppliedEdit {
            path: path.into_string(),
            action: pending.action,
            sha256,
        }),
        Outcome::Refused { code, reason } => Err(refused(code, reason)),
    }
}

fn open_root(repo_root: &Path) -> Result<Dir, ApplyError> {
    Dir::open_ambient_dir(repo_root, cap_std::ambient_authority()).map_err(|source| ApplyError::OpenRoot {
        path: repo_root.to_owned(),
        source,
    })
}

fn refuse(
    changeset: &mut Changeset,
    raw: &str,
    action: EditAction,
    code: &str,
    reason: String,
    contents: Option<&str>,
) {
    tracing::warn!(path = %raw.escape_debug(), code, %reason, "refused edit");
    changeset.refused.push(RefusedEdit {
        path: raw.to_owned(),
        action,
        code: code.to_owned(),
        reason,
        contents: contents.map(str::to_owned),
    });
}

/// What happened to one allowed edit on disk.
enum Outcome {
    Applied { sha256: Option<String> },
    Unchanged,
    Refused { code: &'static str, reason: String },
}

fn refused(code: &'static str, reason: impl Into<String>) -> Outcome {
    Outcome::Refused {
        code,
        reason: reason.into(),
    }
}

fn io_refusal(action: &str, error: &io::Error) -> Outcome {
    refused(CODE_IO_ERROR, format!("{action}: {error}"))
}

/// The directory that holds the final component, or `None` if a parent is missing and
/// `create` is false.
fn open_parent(root: &Dir, path: &RepoPath, create: bool) -> Result<Option<Dir>, Outcome> {
    let components: Vec<&str> = path.components().collect();
    let parents = components.split_last().map(|(_, p)| p).unwrap_or_default();
    let mut dir = root
        .try_clone()
        .map_err(|e| io_refusal("opening the repository root", &e))?;
    let mut walked = String::new();
    for component in parents {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        match dir.symlink_metadata(component) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                return Err(refused(
                    CODE_SYMLINK_COMPONENT,
                    format!("`{walked}` is a symbolic link; edits never go through one"),
                ));
            }
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => {
                return Err(refused(
                    CODE_NOT_A_DIRECTORY,
                    format!("`{walked}` is not a directory"),
                ));
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                if !create {
                    return Ok(None);
                }
                match dir.create_dir(component) {
                    Ok(()) => {}
                    // Someone made it in the meantime; the no-follow open below decides.
                    Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(error) => {
                        return Err(io_refusal(&format!("creating `{walked}`"), &error));
                    }
                }
            }
            Err(error) => return Err(io_refusal(&format!("inspecting `{walked}`"), &error)),
        }
        // No-follow: a symlink swapped in since the check above makes this fail.
        dir = dir.open_dir_nofollow(component).map_err(|error| {
            refused(
                CODE_SYMLINK_COMPONENT,
                format!("`{walked}` could not be opened as a plain directory: {error}"),
            )
        })?;
    }
    Ok(Some(dir))
}

/// For an edit the path rules allow: the keyed judge rule (`package.json`'s `scripts`, ...)
/// whose section the edit changes, if any. A current file that cannot be read safely (a
/// symlink, a special file, too large) is taken as absent, so any section the edit writes counts
/// as a change.
fn keyed_judge_change(
    repo_root: &Path,
    raw: &str,
    contents: Option<&str>,
    protection: &Protection,
) -> Option<String> {
    // Nothing to compare for most paths: only keyed file names are read.
    if !protection.may_be_keyed(raw) {
        return None;
    }
    let current = current_contents(repo_root, raw);
    protection.keyed_change(raw, current.as_deref(), contents.map(str::as_bytes))
}

/// The bytes of the regular file at `raw`, read without following links; `None` when absent or
/// not safely readable.
fn current_contents(repo_root: &Path, raw: &str) -> Option<Vec<u8>> {
    const LIMIT: u64 = 16 << 20;
    let path = path::validate(raw).ok()?;
    let root = open_root(repo_root).ok()?;
    let dir = open_parent(&root, &path, false).ok()??;
    let metadata = inspect_target(&dir, &path).ok()??;
    if !metadata.is_file() || metadata.len() > LIMIT {
        return None;
    }
    read_regular(&dir, path.file_name(), usize::try_from(metadata.len()).ok()?)
        .ok()
        .flatten()
}

/// True when the tree already holds what a held edit asks for: the same bytes for a write, no
/// entry for a delete. Read without following links; any doubt answers false.
fn already_in_place(repo_root: &Path, raw: &str, contents: Option<&str>) -> bool {
    let Ok(path) = path::validate(raw) else {
        return false;
    };
    let Ok(root) = open_root(repo_root) else {
        return false;
    };
    let dir = match open_parent(&root, &path, false) {
        Ok(Some(dir)) => dir,
        Ok(None) => return contents.is_none(),
        Err(_) => return false,
    };
    match (inspect_target(&dir, &path), contents) {
        (Ok(None), None) => true,
        (Ok(Some(metadata)), Some(contents)) if metadata.is_file() => {
            matches!(read_regular(&dir, path.file_name(), contents.len()), Ok(Some(current)) if current == contents.as_bytes())
        }
        _ => false,
    }
}

/// Checks the final component of an edit; `Ok(None)` when it does not exist.
fn inspect_target(dir: &Dir, path: &RepoPath) -> Result<Option<cap_std::fs::Metadata>, Outcome> {
    match dir.symlink_metadata(path.file_name()) {
        Ok(metadata) => Ok(Some(metadata)),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(io_refusal(&format!("inspecting `{path}`"), &error)),
    }
}

fn write_file(root: &Dir, path: &RepoPath, contents: &str, not_shown: Option<&BTreeSet<String>>) -> Outcome {
    let dir = match open_parent(root, path, true) {
        Ok(Some(dir)) => dir,
        Ok(None) => return refused(CODE_IO_ERROR, "the parent directory vanished"),
        Err(outcome) => return outcome,
    };
    let name = path.file_name();
    let existing = match inspect_target(&dir, path) {
        Ok(existing) => existing,
        Err(outcome) => return outcome,
    };
    let mut mode = NEW_FILE_MODE;
    let mut keep_mode = false;
    if let Some(metadata) = &existing {
        let file_type = metadata.file_type();
        if file_type.is_symlink() {
            return refused(
                CODE_SYMLINK,
                format!("`{path}` is a symbolic link; it is never written through"),
            );
        }
        if file_type.is_dir() {
            return refused(CODE_DIRECTORY, format!("`{path}` is a directory"));
        }
        if !file_type.is_file() {
            return refused(CODE_SPECIAL_FILE, format!("`{path}` is a FIFO, socket or device"));
        }
        if not_shown.is_some_and(|set| set.contains(path.as_str())) {
            return refused(
                CODE_NOT_SHOWN,
                format!("`{path}` exists but was not shown to the model (binary or too large)"),
            );
        }
        match read_regular(&dir, name, contents.len()) {
            Ok(Some(current)) if current == contents.as_bytes() => return Outcome::Unchanged,
            Ok(_) => {}
            Err(outcome) => return outcome,
        }
        // Keep the permissions, without setuid and setgid.
        mode = metadata.mode() & 0o7777 & !0o6000;
        keep_mode = true;
    }
    let (temp_name, mut file) = match create_temp(&dir) {
        Ok(created) => created,
        Err(error) => return io_refusal("creating a temporary file", &error),
    };
    let written = (|| -> io::Result<()> {
        if keep_mode {
            file.set_permissions(Permissions::from_mode(mode))?;
        } else {
            // The umask already applied at creation; this only makes the mode explicit.
            let created = file.metadata()?.mode() & 0o777;
            file.set_permissions(Permissions::from_mode(created & NEW_FILE_MODE))?;
        }
        file.write_all(contents.as_bytes())?;
        file.sync_all()?;
        drop(file);
        dir.rename(&temp_name, &dir, name)
    })();
    if let Err(error) = written {
        let _ = dir.remove_file(&temp_name);
        return io_refusal(&format!("writing `{path}`"), &error);
    }
    Outcome::Applied {
        sha256: Some(sha256_hex(contents.as_bytes())),
    }
}

/// Reads a file known (by `symlink_metadata`) to be regular, without following a symlink and
/// without blocking on a FIFO swapped in meanwhile. `Ok(None)` when the size already differs
/// from `expected_len`.
fn read_regular(dir: &Dir, name: &str, expected_len: usize) -> Result<Option<Vec<u8>>, Outcome> {
    let mut options = OpenOptions::new();
    options.read(true);
    options.follow(FollowSymlinks::No);
    options.custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32);
    let mut file = dir
        .open_with(name, &options)
        .map_err(|e| io_refusal(&format!("opening `{name}`"), &e))?;
    let metadata = file
        .metadata()
        .map_err(|e| io_refusal(&format!("inspecting `{name}`"), &e))?;
    if !metadata.is_file() {
        return Err(refused(
            CODE_SPECIAL_FILE,
            format!("`{name}` is not a regular file"),
        ));
    }
    if usize::try_from(metadata.len()).ok() != Some(expected_len) {
        return Ok(None);
    }
    let mut current = Vec::with_capacity(expected_len);
    Read::by_ref(&mut file)
        .take(expected_len as u64 + 1)
        .read_to_end(&mut current)
        .map_err(|e| io_refusal(&format!("reading `{name}`"), &e))?;
    Ok(Some(current))
}

/// Creates a new, empty temporary file with a random name in `dir`.
fn create_temp(dir: &Dir) -> io::Result<(String, cap_std::fs::File)> {
    let mut last_error = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..16 {
        let name = format!("{TEMP_PREFIX}{:016x}", rand::random::<u64>());
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        options.follow(FollowSymlinks::No);
        options.mode(NEW_FILE_MODE);
        match dir.open_with(&name, &options) {
            Ok(file) => return Ok((name, file)),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => last_error = error,
            Err(error) => return Err(error),
        }
    }
    Err(last_error)
}

fn delete_file(root: &Dir, path: &RepoPath, not_shown: Option<&BTreeSet<String>>) -> Outcome {
    let dir = match open_parent(root, path, false) {
        Ok(Some(dir)) => dir,
        Ok(None) => return Outcome::Unchanged,
        Err(outcome) => return outcome,
    };
    let metadata = match inspect_target(&dir, path) {
        Ok(Some(metadata)) => metadata,
        Ok(None) => return Outcome::Unchanged,
        Err(outcome) => return outcome,
    };
    let file_type = metadata.file_type();
    if file_type.is_dir() {
        return refused(
            CODE_DIRECTORY,
            format!("`{path}` is a directory; directories are never deleted"),
        );
    }
    if file_type.is_file() && not_shown.is_some_and(|set| set.contains(path.as_str())) {
        return refused(
            CODE_NOT_SHOWN,
            format!("`{path}` exists but was not shown to the model (binary or too large)"),
        );
    }
    // unlinkat on the final name: a symlink is removed, its target is not touched.
    match dir.remove_file(path.file_name()) {
        Ok(()) => Outcome::Applied { sha256: None },
        Err(error) if error.kind() == io::ErrorKind::NotFound => Outcome::Unchanged,
        Err(error) => io_refusal(&format!("deleting `{path}`"), &error),
    }
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    fn options() -> ApplyOptions {
        ApplyOptions {
            protection: Protection::new(Some("check.sh"), &[], &Default::default()).expect("valid"),
            not_shown: BTreeSet::from(["big.bin".to_owned()]),
        }
    }

    fn plan(writes: &[(&str, &str)], deletes: &[&str]) -> EditPlan {
        EditPlan::from_pairs(writes, deletes)
    }

    #[test]
    fn writes_new_files_and_directories() {
        let root = tempfile::tempdir().expect("tempdir");
        let changeset = apply(
            root.path(),
            &plan(&[("a/b/c.txt", "hello\r\n"), ("top.txt", "x")], &[]),
            &options(),
        )
        .expect("apply");
        assert_eq!(changeset.applied.len(), 2);
        assert_eq!(
            changeset.applied[0].sha256.as_deref(),
            Some(sha256_hex(b"hello\r\n").as_str())
        );
        let written = std::fs::read(root.path().join("a/b/c.txt")).expect("read");
        assert_eq!(written, b"hello\r\n");
        let mode = std::fs::metadata(root.path().join("top.txt"))
            .expect("meta")
            .permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7022, 0);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(root.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.to_string_lossy().starts_with(TEMP_PREFIX))
        );
    }

    #[test]
    fn identical_content_and_absent_delete_are_unchanged() {
        let root = tempfile::tempdir().expect("tempdir");
        std::fs::write(root.path().join("same.txt"), "same").expect("write");
        let changeset = apply(
            root.path(),
            &plan(&[("same.txt", "same")], &["absent.txt", "no/such/dir.txt"]),
            &options(),
        )
        .expect("apply");
        assert!(changeset.applied.is_empty());
        assert_eq!(changeset.unchanged, ["same.txt", "absent.txt", "no/such/dir.txt"]);
        assert!(!root.path().join("no").exists());
    }

    #[test]
    fn keeps_mode_without_setuid() {
        use std::os::unix::fs::PermissionsExt as _;
        let root = tempfile::tempdir().expect("tempdir");
        let script = root.path().join("run.sh");
        std::fs::write(&script, "old").expect("write");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o4755)).expect("chmod");
        apply(root.path(), &plan(&[("run.sh", "new")], &[]), &options()).expect("apply");
        let mode = std::fs::metadata(&script).expect("meta").permissions().mode();
        assert_eq!(mode & 0o7777, 0o755);
        assert_eq!(std::fs::read_to_string(&script).expect("read"), "new");
    }

    #[test]
    fn not_shown_files_are_refused_but_may_be_created() {
        let root = tempfile::tempdir().expect("tempdir");
        let changeset = apply(root.path(), &plan(&[("big.bin", "x")], &[]), &options()).expect("apply");
        assert_eq!(changeset.applied.len(), 1, "creating is fine");
        std::fs::write(root.path().join("big.bin"), [0u8, 1, 2]).expect("write");
        let changeset = apply(root.path(), &plan(&[("big.bin", "y")], &[]), &options()).expect("apply");
        assert_eq!(changeset.refused[0].code, CODE_NOT_SHOWN);
        let changeset = apply(root.path(), &plan(&[], &["big.bin"]), &options()).expect("apply");
        assert_eq!(changeset.refused[0].code, CODE_NOT_SHOWN);
        assert_eq!(
            std::fs::read(root.path().join("big.bin")).expect("read"),
            [0u8, 1, 2]
        );
    }

    #[test]
    fn refusals_are_per_edit() {
        let root = tempfile::tempdir().expect("tempdir");
        let changeset = apply(
            root.path(),
            &plan(
                &[
                    ("../x", "a"),
                    ("ok.txt", "b"),
                    (".git/config", "c"),
                    ("specs/s.md", "d"),
                ],
                &[],
            ),
            &options(),
        )
        .expect("apply");
        assert_eq!(changeset.applied.len(), 1);
        assert_eq!(changeset.applied[0].path, "ok.txt");
        let codes: Vec<_> = changeset.refused.iter().map(|r| r.code.as_str()).collect();
        assert_eq!(codes, ["parent-component", "git-dir"]);
        assert_eq!(changeset.refused[0].contents.as_deref(), Some("a"));
        assert_eq!(changeset.refused[1].contents, None);
        assert_eq!(changeset.pending.len(), 1);
        assert_eq!(changeset.pending[0].rule, "specs/**");
        assert!(!root.path().join("specs").exists());
    }

    #[test]
    fn approved_edits_are_written_only_with_the_approved_bytes() {
        let root = tempfile::tempdir().expect("tempdir");
        let changeset =
            apply(root.path(), &plan(&[("specs/s.md", "approved")], &[]), &options()).expect("apply");
        let mut pending = changeset.pending[0].clone();
        let applied = apply_approved(root.path(), &pending).expect("approved");
        assert_eq!(applied.sha256, pending.sha256);
        assert_eq!(
            std::fs::read_to_string(root.path().join("specs/s.md")).expect("read"),
            "approved"
        );
        pending.contents = Some("tampered".to_owned());
        assert!(matches!(
            apply_approved(root.path(), &pending),
            Err(ApplyError::HashMismatch { .. })
        ));
        pending.path = ".git/config".to_owned();
        assert!(matches!(
            apply_approved(root.path(), &pending),
            Err(ApplyError::Refused { .. })
        ));
    }

    #[test]
    fn changeset_serialises_in_kebab_case() {
        let changeset = Changeset {
            pending: vec![PendingApproval {
                path: "specs/x.md".to_owned(),
                action: EditAction::Delete,
                contents: None,
                sha256: None,
                rule: "specs/**".to_owned(),
                waiting: Vec::new(),
            }],
            ..Changeset::default()
        };
        let json = serde_json::to_value(&changeset).expect("serialise");
        assert_eq!(json["pending"][0]["action"], "delete");
        let back: Changeset = serde_json::from_value(json).expect("deserialise");
        assert_eq!(back, changeset);
    }
}
