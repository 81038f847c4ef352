//! Running git: never through a shell, always with `--no-pager`, `core.quotepath=off`, no
//! fsmonitor hook, no optional locks and the C locale, so its output is bytes we can parse.

use std::path::Path;
use std::process::{Command, Stdio};

use super::PackError;

/// One path git selected, as raw bytes, and whether git tracks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Listed {
    pub raw: Vec<u8>,
    pub tracked: bool,
}

/// Runs `git <args>` in `repo` and returns stdout, or the error with stderr.
pub(super) fn run(repo: &Path, args: &[&str]) -> Result<Vec<u8>, PackError> {
    let output = command(repo)
        .args(args)
        .output()
        .map_err(|source| PackError::Io {
            action: "starting git in",
            path: repo.to_path_buf(),
            source,
        })?;
    if output.status.success() {
        return Ok(output.stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if stderr.contains("not a git repository") {
        return Err(PackError::NotAGitRepo {
            path: repo.to_path_buf(),
        });
    }
    Err(PackError::Git {
        command: args.first().copied().unwrap_or_default().to_owned(),
        path: repo.to_path_buf(),
        stderr,
    })
}

/// Like [`run`], but a failing exit is `Ok(None)` (for `rev-parse --verify` and `merge-base`).
pub(super) fn run_optional(repo: &Path, args: &[&str]) -> Result<Option<Vec<u8>>, PackError> {
    match run(repo, args) {
        Ok(stdout) => Ok(Some(stdout)),
        Err(PackError::Git { .. }) => Ok(None),
        Err(other) => Err(other),
    }
}

fn command(repo: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .arg("-C")
        .arg(repo)
        .args([
            "--no-pager",
            "-c",
            "core.quotepath=off",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "color.ui=false",
        ])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env_remove("GIT_EXTERNAL_DIFF")
        .env_remove("GIT_PAGER")
        .stdin(Stdio::null());
    command
}

/// Every path `git ls-files --cached --others --exclude-standard` selects, with its tracked flag.
/// Paths with a `.git` component (any case) are dropped defensively: git never lists them from
/// the index, and nothing inside a repository's metadata may be packed.
pub(super) fn list_files(repo: &Path) -> Result<Vec<Listed>, PackError> {
    let stdout = run(
        repo,
        &[
            "ls-files",
            "-z",
            "-t",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    )?;
    Ok(parse_ls_files(&stdout))
}

/// Parses `ls-files -z -t` records: a one-byte tag, a space, the path. `?` marks an untracked
/// path; every other tag (`H`, `S`, `M`, ...) a tracked one.
fn parse_ls_files(stdout: &[u8]) -> Vec<Listed> {
    let mut listed: Vec<Listed> = stdout
        .split(|byte| *byte == 0)
        .filter_map(|record| {
            let (tag, rest) = record.split_first()?;
            let raw = rest.strip_prefix(b" ")?;
            if raw.is_empty() || has_dot_git_component(raw) {
                return None;
            }
            Some(Listed {
                raw: raw.to_vec(),
                tracked: *tag != b'?',
            })
        })
        .collect();
    listed.sort_unstable_by(|a, b| a.raw.cmp(&b.raw));
    // Unmerged paths are listed once per stage.
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
    fn parses_tags_sorts_and_drops_git_metadata() {
        let stdout = b"? b\0H a\0M c\0M c\0? sub/\0H x/.GIT/config\0S z\0";
        let listed = parse_ls_files(stdout);
        let summary: Vec<(String, bool)> = listed
            .iter()
            .map(|entry| (String::from_utf8_lossy(&entry.raw).into_owned(), entry.tracked))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("a".to_owned(), true),
                ("b".to_owned(), false),
                ("c".to_owned(), true),
                ("sub/".to_owned(), false),
                ("z".to_owned(), true),
            ]
        );
    }
}
