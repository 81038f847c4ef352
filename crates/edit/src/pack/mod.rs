//! Packing: turns a repository's working tree and its spec changes into a [`RepoSnapshot`], the
//! input of the first prompt (edit-loop seed, "Initial input format").
//!
//! This module owns which files are packed (exactly the set `git ls-files --cached --others
//! --exclude-standard` selects), how each one is read (never following a symlink, never opening a
//! FIFO, socket or device, never reading inside `.git`), the spec diff against the base branch,
//! and the text rendering of both. It does not build the prompt around them (`prompt`), enforce a
//! context budget (`reconcile`), or write anything.
//!
//! Git is asked for what a directory walk cannot know cheaply and exactly (the tracked set, every
//! ignore rule git honours, including `core.excludesFile` from any config scope), in two calls: the
//! tracked paths come from the index at once and are read while git walks the tree for the
//! untracked ones. Files are read in parallel straight from the working tree, each directory opened
//! once relative to the repository root with symlink resolution refused on every component, each
//! file relative to it with `O_NOFOLLOW` (see `read`). Rendering allocates the prompt once. A
//! walk with the `ignore` crate was the alternative; it cannot see `core.excludesFile` set in the
//! repository's own config or through `GIT_CONFIG_GLOBAL`, so its set could differ from git's, and
//! reading the files dominates the time either way.
//!
//! Decisions where the set and the prompt differ on purpose:
//! - a tracked file missing from the working tree is left out (the pack shows the tree);
//! - credential-like names ([`is_credential_name`]) are named but never read;
//! - `specs/` files get [`SPEC_SIZE_FACTOR`] times the size cap; a spec file that git ignores is
//!   not packed, like any other ignored file.

mod diff;
mod git;
mod read;
mod render;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use render::{FILE_FORMAT, fence_for};

/// The default base branch of the spec diff.
pub const DEFAULT_BASE: &str = "main";
/// The default size cap: files over it are named but not inlined.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 256 * 1024;
/// Files under `specs/` may be this many times larger than the cap and still be inlined: the
/// specs are the point of the run, so they are cut only when absurdly large.
pub const SPEC_SIZE_FACTOR: u64 = 4;
/// How much of a file's start is searched for a NUL byte to call it binary (git's own rule).
pub const BINARY_SNIFF_BYTES: usize = 8 * 1024;

/// What to pack and against what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PackOptions {
    /// Base branch of the spec diff (`--base`); `origin/<base>` is used when only that exists.
    pub base: String,
    /// Files larger than this are named but not inlined (`specs/` files get [`SPEC_SIZE_FACTOR`]
    /// times as much).
    pub max_file_bytes: u64,
    /// The revision the diff is taken against, overriding `base` and `push` (`--diff-base`).
    #[serde(default)]
    pub diff_base: Option<String>,
    /// The push the run was started by, if any: it decides the diff when `HEAD` is the base.
    #[serde(default)]
    pub push: Option<PushEvent>,
}

impl Default for PackOptions {
    fn default() -> Self {
        Self {
            base: DEFAULT_BASE.to_owned(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            diff_base: None,
            push: None,
        }
    }
}

/// A push, as the CI describes it.
///
/// When the checked-out commit is the base branch itself (its tip, or the pushed branch is the
/// base or the default branch), the spec diff is taken against `before`, the commit the branch
/// pointed at before the push. A `before` of all zeros means the push created the branch: the
/// diff is then taken against its merge base with the default branch (or against the empty tree
/// when the new branch is the default branch itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PushEvent {
    /// The commit the branch pointed at before the push; all zeros for a new branch.
    pub before: String,
    /// Where `before` came from, for messages.
    pub source: String,
    /// The pushed branch, without `refs/heads/`, when known.
    pub branch: Option<String>,
    /// The repository's default branch, when the CI says.
    pub default_branch: Option<String>,
}

/// The packed repository: every selected file, sorted by path bytes, and the spec diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RepoSnapshot {
    /// Sorted by path (byte order), no duplicates.
    pub files: Vec<PackedFile>,
    /// The specs' changes against the base branch.
    pub spec_diff: SpecDiff,
    /// The size cap the snapshot was taken with, for the rendering.
    pub max_file_bytes: u64,
}

/// One selected path and what was recorded for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PackedFile {
    /// Path relative to the repository root, `/`-separated, as git spells it (non-UTF-8 bytes
    /// replaced by U+FFFD).
    pub path: String,
    pub kind: FileKind,
}

/// What was recorded for a path. Only [`FileKind::Text`] puts file contents into the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileKind {
    /// The contents (invalid UTF-8 sequences replaced by U+FFFD).
    Text(String),
    /// A NUL byte in the first [`BINARY_SNIFF_BYTES`] bytes: named, not inlined.
    Binary { size: u64 },
    /// Over the size cap: named, not inlined.
    TooLarge { size: u64 },
    /// A symbolic link: never followed; its target text is recorded.
    Symlink { target: String },
    /// A FIFO, socket, device, directory (a submodule or nested repository) or a path that lies
    /// beyond a symlinked directory: never opened for reading.
    NotRegular,
    /// A name that usually holds credentials (`.env`, `*.pem`, `id_rsa`, `gha-creds-*.json`, ...):
    /// named, never read. See [`is_credential_name`].
    Credential { size: u64 },
    /// The file could not be opened or read (permissions, a race with a writer).
    Unreadable { error: String },
}

/// The specs' changes against the base branch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct SpecDiff {
    /// The ref the diff is against, e.g. `main` or `origin/main`; `None` when no base was found.
    pub base_ref: Option<String>,
    /// Unified diff of `specs/` from the merge base (or the base itself) to the working tree:
    /// committed, staged and unstaged changes together.
    pub diff: String,
    /// Untracked new files under `specs/`: listed by path only, their contents are in the files.
    pub newly_added: Vec<String>,
    /// The base that was asked for (`PackOptions::base`), for the rendering of a missing base.
    pub requested_base: String,
    /// Said instead of "no changes" when the diff is empty for a reason other than unchanged
    /// specs (the checked-out commit is the base itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Why packing failed. A missing base branch is not an error (see [`SpecDiff::base_ref`]).
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// The directory is not inside a git work tree.
    #[error("`{}` is not a git repository", path.display())]
    NotAGitRepo { path: PathBuf },
    /// The commit the diff should start from is not in the clone (shallow, or never fetched).
    #[error(
        "{what} `{rev}` is not in this clone, so the spec diff cannot be taken against it; fetch the whole history (`fetch-depth: 0` with actions/checkout, `GIT_DEPTH: 0` on GitLab) or set --diff-base / BORK_DIFF_BASE to a commit that is"
    )]
    MissingCommit { what: String, rev: String },
    /// The commit id a CI variable gives is not a commit id.
    #[error(
        "{what} is {rev:?}, which is not a commit id; set --diff-base / BORK_DIFF_BASE to choose the start of the spec diff"
    )]
    BadCommitId { what: String, rev: String },
    /// A git command failed.
    #[error("git {command} failed in `{}`: {stderr}", path.display())]
    Git {
        command: String,
        path: PathBuf,
        stderr: String,
    },
    /// Git could not be started, or the repository root could not be opened.
    #[error("{action} `{}`", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl RepoSnapshot {
    /// Paths whose contents were not inlined: binary, too large, symlinks, not regular files,
    /// credential-like names and unreadable files.
    pub fn not_shown(&self) -> BTreeSet<String> {
        self.files
            .iter()
            .filter(|file| !matches!(file.kind, FileKind::Text(_)))
            .map(|file| file.path.clone())
            .collect()
    }

    /// The concatenation of every file, each delimited by its path (see [`FILE_FORMAT`]).
    pub fn render_files(&self) -> String {
        render::files(self)
    }

    /// The spec-diff section: the diff, then the "newly added" paths (listed, not repeated).
    pub fn render_spec_diff(&self) -> String {
        render::spec_diff(&self.spec_diff)
    }

    /// Appends [`Self::render_files`] to `out`, reserving the room first: a caller that builds a
    /// larger text around the pack copies the contents once instead of twice.
    pub fn render_files_into(&self, out: &mut String) {
        render::files_append(out, self);
    }

    /// Appends [`Self::render_spec_diff`] to `out`.
    pub fn render_spec_diff_into(&self, out: &mut String) {
        render::spec_diff_append(out, &self.spec_diff);
    }

    /// [`Self::render_files`] followed by [`Self::render_spec_diff`]: what `bork-ci pack` prints
    /// inside the prompt.
    pub fn render(&self) -> String {
        render::all(self)
    }

    /// Total bytes of inlined contents.
    pub fn text_bytes(&self) -> u64 {
        self.files
            .iter()
            .map(|file| match &file.kind {
                FileKind::Text(text) => text.len() as u64,
                _ => 0,
            })
            .sum()
    }
}

/// Packs the repository at `repo_root` (the top of a git work tree).
///
/// Three things run at once: the spec diff, git's walk for the untracked paths, and the reading
/// of the tracked paths (listed from the index, which is quick); the untracked paths are read
/// once the walk is done. Files are read in parallel.
pub fn snapshot(repo_root: &Path, options: &PackOptions) -> Result<RepoSnapshot, PackError> {
    let (files, spec_diff) = std::thread::scope(|scope| {
        let diff_job = scope.spawn(|| diff::spec_diff(repo_root, options));
        let untracked_job = scope.spawn(|| git::list_untracked(repo_root));
        let files = read::Reader::open(repo_root).and_then(|reader| {
            let tracked = git::list_tracked(repo_root)?;
            let tracked_files = reader.read_all(&tracked, options.max_file_bytes);
            let untracked = join(untracked_job)?;
            let untracked_files = reader.read_all(&untracked, options.max_file_bytes);
            Ok(merge(tracked, tracked_files, untracked, untracked_files))
        });
        (files, join(diff_job))
    });
    let (files, untracked_specs) = files?;
    let mut spec_diff = spec_diff?;
    if spec_diff.base_ref.is_some() {
        spec_diff.newly_added = untracked_specs;
    } else {
        // Without a base there is nothing to be "new" against; the files are in the pack anyway.
        spec_diff.newly_added = Vec::new();
    }
    Ok(RepoSnapshot {
        files,
        spec_diff,
        max_file_bytes: options.max_file_bytes,
    })
}

fn join<T>(job: std::thread::ScopedJoinHandle<'_, T>) -> T {
    match job.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// Merges the tracked and the untracked files (each sorted by raw path bytes, one entry per
/// listed path) into one list sorted the same way, and collects the untracked paths under
/// `specs/`. Paths missing from the working tree (`None`) are left out.
fn merge(
    tracked: Vec<git::Listed>,
    tracked_files: Vec<Option<PackedFile>>,
    untracked: Vec<git::Listed>,
    untracked_files: Vec<Option<PackedFile>>,
) -> (Vec<PackedFile>, Vec<String>) {
    let mut files = Vec::with_capacity(tracked.len() + untracked.len());
    let mut untracked_specs = Vec::new();
    let mut left = tracked.into_iter().zip(tracked_files).peekable();
    let mut right = untracked.into_iter().zip(untracked_files).peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some((a, _)), Some((b, _))) => match a.raw.cmp(&b.raw) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Greater => false,
                // Listed as both (it cannot be): tracked wins, once.
                std::cmp::Ordering::Equal => {
                    right.next();
                    true
                }
            },
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_left { left.next() } else { right.next() };
        let Some((listed, Some(packed))) = next else {
            continue;
        };
        if !listed.tracked && is_spec_path(&packed.path) {
            untracked_specs.push(packed.path.clone());
        }
        files.push(packed);
    }
    (files, untracked_specs)
}

/// Token estimate of a text: UTF-8 bytes divided by 4, rounded up. Tokenizers of current models
/// average 3.5 to 4.5 bytes per token on code and English prose; this errs on the side of more.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// True for file names that usually hold credentials and are never read into a prompt, even
/// when git selects them (threat model X03): `.env` and `.env.*` (except `.example`, `.sample`,
/// `.template`, `.dist`), `*.pem`, `*.key`, `*.p12`, `*.pfx`, `*.jks`, `*.keystore`, `*.kdbx`,
/// private SSH keys (`id_rsa`, `id_dsa`, `id_ecdsa`, `id_ed25519`), `gha-creds-*.json`,
/// `.netrc`, `_netrc`, `.pypirc`, `.npmrc` and `.git-credentials`.
pub fn is_credential_name(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    if name == ".env" {
        return true;
    }
    if let Some(rest) = name.strip_prefix(".env.") {
        return !matches!(rest, "example" | "sample" | "template" | "dist");
    }
    const EXACT: [&str; 9] = [
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        ".netrc",
        "_netrc",
        ".pypirc",
        ".npmrc",
        ".git-credentials",
    ];
    const SUFFIXES: [&str; 7] = [".pem", ".key", ".p12", ".pfx", ".jks", ".keystore", ".kdbx"];
    EXACT.contains(&name.as_str())
        || SUFFIXES.iter().any(|suffix| name.ends_with(suffix))
        || (name.starts_with("gha-creds-") && name.ends_with(".json"))
}

/// True when `path` lies under `specs/`.
pub fn is_spec_path(path: &str) -> bool {
    path.starts_with("specs/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_up() {
        assert_eq!(estimate_tokens(""), 0);
        assert_eq!(estimate_tokens("a"), 1);
        assert_eq!(estimate_tokens("abcd"), 1);
        assert_eq!(estimate_tokens("abcde"), 2);
    }

    #[test]
    fn credential_names() {
        for name in [
            ".env",
            "app/.env.production",
            "deploy.pem",
            "gha-creds-1234.json",
            "home/.ssh/id_rsa",
            "x/.git-credentials",
        ] {
            assert!(is_credential_name(name), "{name}");
        }
        for name in [
            ".env.example",
            "id_rsa.pub",
            "src/keys.rs",
            "gha-creds.md",
            "README.md",
        ] {
            assert!(!is_credential_name(name), "{name}");
        }
    }
}
