//! The spec diff: how `specs/` in the working tree differs from where the change began.
//!
//! Where it begins, first match wins:
//! 1. `diff-base` (`--diff-base`, `BORK_DIFF_BASE`): that revision, as given.
//! 2. A push ([`PushEvent`]) whose pushed commit is the base branch itself (`HEAD` is the tip of
//!    `<base>` or `origin/<base>`, or the pushed branch is the base or the default branch): the
//!    commit before the push; for a push that created the branch (`before` all zeros), the empty
//!    tree. A push of any other new branch: its merge base with the default branch.
//! 3. The base branch: `refs/heads/<base>`, else `refs/remotes/origin/<base>` (a fresh clone has
//!    only that), else whatever `<base>` names as a revision (`origin/develop`, a SHA); the diff
//!    runs from the merge base of that commit and `HEAD` (the base itself when there is no
//!    `HEAD` or no common history).
//!
//! The diff always ends at the working tree, so committed, staged and unstaged changes all show.
//! Untracked spec files are not in it; the caller lists them as "newly added". A commit named by
//! 1 or 2 that is not in the clone (a shallow clone) is an error; a missing base branch is not.

use std::path::Path;

use super::{PackError, PackOptions, PushEvent, SpecDiff, git};

/// Git's empty tree: the start of the diff of a push that created the repository's first branch.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// Computes the spec diff; `base_ref: None` when no base is found (not an error).
pub(super) fn spec_diff(repo: &Path, options: &PackOptions) -> Result<SpecDiff, PackError> {
    let base = options.base.as_str();
    if let Some(rev) = options
        .diff_base
        .as_deref()
        .map(str::trim)
        .filter(|rev| !rev.is_empty())
    {
        let commit = commit_of(repo, rev)?.ok_or_else(|| PackError::MissingCommit {
            what: "the diff base (`diff-base`)".into(),
            rev: rev.to_owned(),
        })?;
        tracing::info!(diff_base = rev, "spec diff against the configured diff base");
        return diff_from(repo, &commit, format!("{rev} (diff-base)"), base);
    }
    if let Some(push) = &options.push
        && let Some(diff) = push_diff(repo, base, push)?
    {
        return Ok(diff);
    }
    let Some((base_ref, commit)) = resolve_base(repo, base)? else {
        tracing::info!(base, "no base branch found; the spec diff is empty");
        return Ok(SpecDiff {
            base_ref: None,
            diff: String::new(),
            newly_added: Vec::new(),
            requested_base: base.to_owned(),
            note: None,
        });
    };
    let from = merge_base(repo, &commit)?;
    let mut diff = diff_from(repo, &from, base_ref.clone(), base)?;
    if diff.diff.is_empty() && commit_of(repo, "HEAD")?.is_some_and(|head| head == commit) {
        tracing::warn!(
            base = %base_ref,
            "the checked-out commit is the base branch itself, so the spec diff is empty; set --diff-base (BORK_DIFF_BASE) to the commit before the push"
        );
        diff.note = Some(format!(
            "the checked-out commit is {base_ref} itself, so this diff cannot show what changed; \
             the change to the specs is not known: compare the specs with the code"
        ));
    }
    Ok(diff)
}

/// The diff a push decides, or `None` when the push leaves it to the base branch.
fn push_diff(repo: &Path, base: &str, push: &PushEvent) -> Result<Option<SpecDiff>, PackError> {
    let before = push.before.trim();
    let is_hex = !before.is_empty() && before.bytes().all(|byte| byte.is_ascii_hexdigit());
    if !is_hex {
        return Err(PackError::BadCommitId {
            what: format!("the commit before the push ({})", push.source),
            rev: before.to_owned(),
        });
    }
    let created = before.bytes().all(|byte| byte == b'0');
    let head = commit_of(repo, "HEAD")?;
    let branch_is_base = push
        .branch
        .as_deref()
        .is_some_and(|branch| branch == base || push.default_branch.as_deref() == Some(branch));
    let head_is_base = match &head {
        Some(head) => tips(repo, base)?.iter().any(|tip| tip == head),
        None => false,
    };
    let on_base = branch_is_base || head_is_base;
    if created && on_base {
        let branch = push.branch.as_deref().unwrap_or(base);
        tracing::info!(
            branch,
            "the push created the base branch: spec diff against the empty tree"
        );
        return diff_from(
            repo,
            EMPTY_TREE,
            format!("the empty tree (the push created {branch})"),
            base,
        )
        .map(Some);
    }
    if created {
        let default = push.default_branch.as_deref().unwrap_or(base);
        let Some((default_ref, commit)) = resolve_base(repo, default)? else {
            return Ok(None);
        };
        let from = merge_base(repo, &commit)?;
        tracing::info!(default_branch = %default_ref, "a new branch: spec diff against its merge base with the default branch");
        return diff_from(repo, &from, format!("the merge base with {default_ref}"), base).map(Some);
    }
    if !on_base {
        return Ok(None);
    }
    let commit = commit_of(repo, before)?.ok_or_else(|| PackError::MissingCommit {
        what: format!("the commit before the push ({})", push.source),
        rev: before.to_owned(),
    })?;
    let short: String = before.chars().take(12).collect();
    tracing::info!(before = %short, "the checked-out commit is the base branch: spec diff against the commit before the push");
    diff_from(
        repo,
        &commit,
        format!("{short} (the commit before the push)"),
        base,
    )
    .map(Some)
}

/// `git diff <from> -- specs/` into a [`SpecDiff`] labelled `base_ref`.
fn diff_from(repo: &Path, from: &str, base_ref: String, base: &str) -> Result<SpecDiff, PackError> {
    let stdout = git::run(
        repo,
        &[
            "diff",
            "--no-ext-diff",
            "--no-textconv",
            "--no-color",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            from,
            "--",
            "specs/",
        ],
    )?;
    Ok(SpecDiff {
        base_ref: Some(base_ref),
        diff: String::from_utf8_lossy(&stdout).into_owned(),
        newly_added: Vec::new(),
        requested_base: base.to_owned(),
        note: None,
    })
}

/// The merge base of `commit` and `HEAD`, or `commit` when there is none.
fn merge_base(repo: &Path, commit: &str) -> Result<String, PackError> {
    Ok(match git::run_optional(repo, &["merge-base", commit, "HEAD"])? {
        Some(stdout) => first_line(&stdout).unwrap_or_else(|| commit.to_owned()),
        None => commit.to_owned(),
    })
}

/// The commit a revision names, or `None` when it names none in this clone.
fn commit_of(repo: &Path, rev: &str) -> Result<Option<String>, PackError> {
    if rev.starts_with('-') {
        return Ok(None);
    }
    let spec = format!("{rev}^{{commit}}");
    let args = ["rev-parse", "--verify", "--quiet", "--end-of-options", &spec];
    Ok(git::run_optional(repo, &args)?.and_then(|stdout| first_line(&stdout)))
}

/// The tips of `refs/heads/<base>` and `refs/remotes/origin/<base>` that exist.
fn tips(repo: &Path, base: &str) -> Result<Vec<String>, PackError> {
    if base.is_empty() || base.starts_with('-') {
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    for revision in [
        format!("refs/heads/{base}"),
        format!("refs/remotes/origin/{base}"),
    ] {
        if let Some(commit) = commit_of(repo, &revision)? {
            found.push(commit);
        }
    }
    Ok(found)
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
        if let Some(commit) = commit_of(repo, &revision)? {
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
