//! The changes under review: the working tree against the merge base with the base branch.
//!
//! It asks git (never through a shell, `--` before paths, `--no-ext-diff --no-textconv
//! --no-color`) which paths changed, committed, staged, unstaged or untracked-not-ignored, and
//! for the diff; it reads each file's contents itself through a `cap_std::fs::Dir` at the
//! repository root, never following a symlink. It never reads `.git` and writes nothing.

use std::io::Read as _;
use std::path::Path;
use std::process::Output;

use anyhow::{Context as _, bail};
use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir, OpenOptions};

use super::prompt::ChangedFile;

/// At most this many bytes of one file are read; longer files are cut (the prompt marks cuts).
pub const MAX_READ_BYTES: u64 = 1024 * 1024;
/// At most this many bytes of contents are read over all files; later files get no contents.
pub const MAX_TOTAL_READ_BYTES: usize = 64 * 1024 * 1024;
/// At most this many bytes of one git command's output are kept (paths, diff).
pub const MAX_GIT_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

/// Collects the files changed in the working tree of `repo_root` since its merge base with
/// `base` (or with `origin/<base>` when `base` does not resolve, as in a fresh clone), and the
/// diff against that merge base.
///
/// With `only`, exactly those paths are reviewed (changed or not), and the diff is limited to
/// them. Paths must be relative, inside the repository, and outside `.git`.
pub fn changed_files(
    repo_root: &Path,
    base: &str,
    only: Option<&[String]>,
) -> anyhow::Result<(Vec<ChangedFile>, String)> {
    let git = Git { root: repo_root };
    let merge_base = git.merge_base(base)?;

    let untracked = split_paths(
        &git.run(&["ls-files", "--others", "--exclude-standard", "-z"], &[0])?
            .stdout,
    );
    let paths: Vec<String> = match only {
        Some(only) => {
            let mut paths = Vec::new();
            for path in only {
                let path = normalize_requested(path)?;
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
            paths
        }
        None => {
            let mut paths = split_paths(
                &git.run(
                    &[
                        "diff",
                        "--name-only",
                        "-z",
                        "--no-renames",
                        "--no-ext-diff",
                        "--no-textconv",
                        "--no-color",
                        &merge_base,
                        "--",
                    ],
                    &[0],
                )?
                .stdout,
            );
            paths.extend(untracked.iter().cloned());
            paths.sort();
            paths.dedup();
            paths
        }
    };

    let mut diff = String::new();
    if !(only.is_some() && paths.is_empty()) {
        let mut args = vec![
            "diff",
            "--no-renames",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            merge_base.as_str(),
            "--",
        ];
        if only.is_some() {
            args.extend(paths.iter().map(String::as_str));
        }
        diff.push_str(&lossy(git.run(&args, &[0])?.stdout));
    }
    // Credential-looking untracked files (`.env`, `*.pem`, `gha-creds-*.json`) are named but
    // never read, as in packing.
    for path in paths
        .iter()
        .filter(|path| untracked.contains(path) && !crate::pack::is_credential_name(path))
    {
        if diff.len() as u64 >= MAX_GIT_OUTPUT_BYTES {
            tracing::warn!("diff cut at {MAX_GIT_OUTPUT_BYTES} bytes: untracked files left out");
            break;
        }
        let output = git.run(
            &[
                "diff",
                "--no-index",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--",
                "/dev/null",
                path,
            ],
            &[0, 1],
        )?;
        diff.push_str(&lossy(output.stdout));
    }

    let root = Dir::open_ambient_dir(repo_root, cap_std::ambient_authority())
        .with_context(|| format!("opening repository root `{}`", repo_root.display()))?;
    let mut read_budget = MAX_TOTAL_READ_BYTES;
    let files = paths
        .into_iter()
        .map(|path| {
            let contents = if crate::pack::is_credential_name(&path) {
                tracing::warn!(%path, "contents not read: the name looks like a credential file");
                None
            } else if read_budget > 0 {
                read_contents(&root, &path)
            } else {
                tracing::warn!(%path, "contents not read: the total read limit is reached");
                None
            };
            read_budget = read_budget.saturating_sub(contents.as_ref().map_or(0, String::len));
            ChangedFile { path, contents }
        })
        .collect();
    Ok((files, diff))
}

/// Runs git in the repository, through `bork_ci_core::git` (its one runner and hardening set).
struct Git<'a> {
    root: &'a Path,
}

impl Git<'_> {
    /// Runs `git args`; at most [`MAX_GIT_OUTPUT_BYTES`] of stdout are kept, and past that
    /// git is stopped and the cut output returned as is.
    fn run(&self, args: &[&str], ok_codes: &[i32]) -> anyhow::Result<Output> {
        let bounded = bork_ci_core::git::run_bounded(self.root, args, MAX_GIT_OUTPUT_BYTES, ok_codes)?;
        if bounded.cut {
            let name = args.first().copied().unwrap_or("");
            tracing::warn!(command = name, "git output cut at {MAX_GIT_OUTPUT_BYTES} bytes");
        }
        Ok(bounded.output)
    }

    /// Resolves `reference` to a commit id, or `None` when it names no commit.
    fn commit(&self, reference: &str) -> anyhow::Result<Option<String>> {
        let spec = format!("{reference}^{{commit}}");
        let output = self.run(
            &["rev-parse", "--verify", "--quiet", "--end-of-options", &spec],
            &[0, 1, 128],
        )?;
        if output.status.success() {
            Ok(Some(lossy(output.stdout).trim().to_owned()))
        } else {
            Ok(None)
        }
    }

    fn merge_base(&self, base: &str) -> anyhow::Result<String> {
        if base.is_empty() || base.starts_with('-') {
            bail!("base `{base}` is not a valid branch name");
        }
        let base_commit = match self.commit(base)? {
            Some(commit) => commit,
            None => match self.commit(&format!("origin/{base}"))? {
                Some(commit) => commit,
                None => bail!("neither `{base}` nor `origin/{base}` names a commit"),
            },
        };
        let head = self
            .commit("HEAD")?
            .context("the repository has no commit at HEAD")?;
        let output = self
            .run(&["merge-base", &base_commit, &head], &[0])
            .with_context(|| {
                format!("finding the merge base of HEAD and `{base}` (a shallow clone needs more history)")
            })?;
        Ok(lossy(output.stdout).trim().to_owned())
    }
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into())
}

/// Splits NUL-separated git paths, skipping non-UTF-8 ones and untracked directories (nested
/// repositories show as `dir/`).
fn split_paths(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|byte| *byte == 0)
        .filter(|path| !path.is_empty())
        .filter_map(|path| match std::str::from_utf8(path) {
            Ok(path) => Some(path.to_owned()),
            Err(_) => {
                tracing::warn!(
                    path = %String::from_utf8_lossy(path),
                    "skipping a changed path that is not UTF-8"
                );
                None
            }
        })
        .filter(|path| !path.ends_with('/'))
        .collect()
}

/// Checks a path given with `only`: relative, no `..`, not in `.git`; drops leading `./`.
fn normalize_requested(path: &str) -> anyhow::Result<String> {
    let cleaned = path.replace('\\', "/");
    let mut parts = Vec::new();
    for part in cleaned.split('/') {
        match part {
            "" | "." => {}
            ".." => bail!("path `{path}` leaves the repository"),
            _ if part.eq_ignore_ascii_case(".git") => bail!("path `{path}` is inside `.git`"),
            _ => parts.push(part),
        }
    }
    if cleaned.starts_with('/') {
        bail!("path `{path}` is absolute");
    }
    if parts.is_empty() {
        bail!("path `{path}` names no file");
    }
    Ok(parts.join("/"))
}

/// Reads a file's text, or `None` when it is missing, not a regular file, reached through a
/// symlink at any component, binary (NUL byte) or not UTF-8.
fn read_contents(root: &Dir, path: &str) -> Option<String> {
    let mut prefix = std::path::PathBuf::new();
    for part in path.split('/') {
        prefix.push(part);
        let metadata = root.symlink_metadata(&prefix).ok()?;
        if metadata.file_type().is_symlink() {
            return None;
        }
    }
    let mut options = OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    let file = root.open_with(path, &options).ok()?;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES).read_to_end(&mut bytes).ok()?;
    if bytes.contains(&0) {
        return None;
    }
    match String::from_utf8(bytes) {
        Ok(text) => Some(text),
        Err(error) if error.as_bytes().len() as u64 == MAX_READ_BYTES => {
            // Cut inside a character by the read limit: keep the valid prefix.
            let valid = error.utf8_error().valid_up_to();
            let mut bytes = error.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).ok()
        }
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requested_paths_are_checked() {
        assert_eq!(
            normalize_requested("./src/a.rs").ok(),
            Some("src/a.rs".to_owned())
        );
        assert_eq!(normalize_requested("src\\a.rs").ok(), Some("src/a.rs".to_owned()));
        for bad in [
            "",
            ".",
            "/etc/passwd",
            "../x",
            "a/../../x",
            ".git/config",
            "a/.GIT/x",
        ] {
            assert!(normalize_requested(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn split_skips_directories_and_empty() {
        assert_eq!(
            split_paths(b"a.rs\0nested/\0b c.rs\0"),
            vec!["a.rs".to_owned(), "b c.rs".to_owned()]
        );
        assert!(split_paths(b"\xff\xfe\0").is_empty());
    }
}
