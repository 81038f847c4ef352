//! The spec diff: how `specs/` in the working tree differs from the base branch.
//!
//! The base is `refs/heads/<base>`, else `refs/remotes/origin/<base>` (a fresh clone has only
//! that), else whatever `<base>` names as a revision (`origin/develop`, a SHA). The diff runs from
//! the merge base of that commit and `HEAD` (the base itself when there is no `HEAD` or no common
//! history) to the working tree, so committed, staged and unstaged changes all show. Untracked
//! spec files are not in it; the caller lists them as "newly added".

use std::path::Path;

use super::{PackError, SpecDiff, git};

/// Computes the spec diff; `base_ref: None` when no base is found (not an error).
pub(super) fn spec_diff(repo: &Path, base: &str) -> Result<SpecDiff, PackError> {
    let Some((base_ref, commit)) = resolve_base(repo, base)? else {
        tracing::info!(base, "no base branch found; the spec diff is empty");
        return Ok(SpecDiff {
            base_ref: None,
            diff: String::new(),
            newly_added: Vec::new(),
            requested_base: base.to_owned(),
        });
    };
    let from = match git::run_optional(repo, &["merge-base", &commit, "HEAD"])? {
        Some(stdout) => first_line(&stdout).unwrap_or(commit),
        None => commit,
    };
    let stdout = git::run(
        repo,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            &from,
            "--",
            "specs/",
        ],
    )?;
    Ok(SpecDiff {
        base_ref: Some(base_ref),
        diff: String::from_utf8_lossy(&stdout).into_owned(),
        newly_added: Vec::new(),
        requested_base: base.to_owned(),
    })
}

/// The display name and commit id of the base, or `None`.
fn resolve_base(repo: &Path, base: &str) -> Result<Option<(String, String)>, PackError> {
    if base.is_empty() || base.starts_with('-') {
        return Ok(None);
    }
    let candidates = [
        (format!("refs/heads/{base}"), base.to_owned()),
        (format!("refs/remotes/origin/{base}"), format!("origin/{base}")),
        (base.to_owned(), base.to_owned()),
    ];
    for (revision, display) in candidates {
        let spec = format!("{revision}^{{commit}}");
        let args = ["rev-parse", "--verify", "--quiet", "--end-of-options", &spec];
        if let Some(stdout) = git::run_optional(repo, &args)?
            && let Some(commit) = first_line(&stdout)
        {
            return Ok(Some((display, commit)));
        }
    }
    Ok(None)
}

fn first_line(stdout: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_owned())
}
