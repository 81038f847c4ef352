//! What packing asks git (through `bork_ci_core::git`, its one runner): the tracked and the untracked
//! paths, as bytes.

use std::path::Path;

use super::PackError;

/// One path git selected, as raw bytes, and whether git tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Listed {
    pub raw: Vec<u8>,
    pub tracked: bool,
}

/// Runs `git <args>` in `repo` (through `bork_ci_core::git`) and returns stdout, or the error with
/// stderr.
pub(super) fn run(repo: &Path, args: &[&str]) -> Result<Vec<u8>, PackError> {
    bork_ci_core::git::run(repo, args).map_err(|error| pack_error(repo, error))
}

/// Like [`run`], but a failing exit is `Ok(None)` (for `rev-parse --verify` and `merge-base`).
pub(super) fn run_optional(repo: &Path, args: &[&str]) -> Result<Option<Vec<u8>>, PackError> {
    bork_ci_core::git::run_optional(repo, args).map_err(|error| pack_error(repo, error))
}

fn pack_error(repo: &Path, error: bork_ci_core::git::GitError) -> PackError {
    if error.is_not_a_repository() {
        return PackError::NotAGitRepo {
            path: repo.to_path_buf(),
        };
    }
    PackError::Git {
        command: error.action,
        path: repo.to_path_buf(),
        stderr: error.detail,
    }
}

/// The tracked paths (`git ls-files --cached`), sorted. Together with [`list_untracked`] this is
/// exactly the set `git ls-files --cached --others --exclude-standard` selects; the two are asked
/// separately so that the index, read at once, can be packed while git walks the tree for the
/// untracked paths.
pub(super) fn list_tracked(repo: &Path) -> Result<Vec<Listed>, PackError> {
    let stdout = run(repo, &["ls-files", "-z", "--cached"])?;
    Ok(parse_ls_files(&stdout, true))
}

/// The untracked, not ignored paths (`git ls-files --others --exclude-standard`), sorted; an
/// untracked nested repository is one path ending with `/`.
pub(super) fn list_untracked(repo: &Path) -> Result<Vec<Listed>, PackError> {
    let stdout = run(repo, &["ls-files", "-z", "--others", "--exclude-standard"])?;
    Ok(parse_ls_files(&stdout, false))
}

/// Parses `ls-files -z` records, sorted by bytes, without duplicates (an unmerged path is listed
/// once per stage). Paths with a `.git` component (any case) are dropped defensively: git never
/// lists them from the index, and nothing inside a repository's metadata may be packed.
fn parse_ls_files(stdout: &[u8], tracked: bool) -> Vec<Listed> {
    let mut listed: Vec<Listed> = stdout
        .split(|byte| *byte == 0)
        .filter(|raw| !raw.is_empty() && !has_dot_git_component(raw))
        .map(|raw| Listed {
            raw: raw.to_vec(),
            tracked,
        })
        .collect();
    // Git lists in this order already; sorting a sorted list is one pass.
    listed.sort_unstable_by(|a, b| a.raw.cmp(&b.raw));
    listed.dedup_by(|a, b| a.raw == b.raw);
    listed
}

fn has_dot_git_component(raw: &[u8]) -> bool {
    raw.split(|byte| *byte == b'/')
        .any(|component| component.eq_ignore_ascii_case(b".git"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sorts_dedups_and_drops_git_metadata() {
        let stdout = b"b\0a\0c\0c\0sub/\0x/.GIT/config\0.git\0z\0";
        let listed = parse_ls_files(stdout, false);
        let paths: Vec<String> = listed
            .iter()
            .map(|entry| String::from_utf8_lossy(&entry.raw).into_owned())
            .collect();
        assert_eq!(paths, ["a", "b", "c", "sub/", "z"]);
        assert!(listed.iter().all(|entry| !entry.tracked));
        assert!(parse_ls_files(b"a\0", true).iter().all(|entry| entry.tracked));
    }
}
