//! Local git: one commit per iteration under bork-ci's identity, single-change commits for
//! approval pull requests (built with plumbing, without touching the working tree), fetch and
//! push over HTTPS. No shell is used; paths always come after `--` with literal pathspecs.
//! Commit messages come in rendered (`render`); this module only runs git.
//!
//! The token reaches git only through the environment (`GIT_CONFIG_COUNT` with an
//! `http.extraheader` of `Authorization: Basic …`), never on the command line or in a URL.

use std::path::Path;
use std::process::Command;

use base64::Engine;
use secrecy::{ExposeSecret, SecretString};

use super::data::{GithubError, redact_urls};

/// Who bork-ci's commits are by.
#[derive(Debug, Clone)]
pub struct Identity {
    pub name: String,
    pub email: String,
}

/// `git` in `repo` through `bork_ci_core::git` (its hardening set).
fn base_command(repo: &Path) -> Command {
    bork_ci_core::git::command(repo)
}

fn with_identity(command: &mut Command, identity: &Identity) {
    command
        .env("GIT_AUTHOR_NAME", &identity.name)
        .env("GIT_AUTHOR_EMAIL", &identity.email)
        .env("GIT_COMMITTER_NAME", &identity.name)
        .env("GIT_COMMITTER_EMAIL", &identity.email);
}

/// Hands the token to git in the environment: the first entry clears extra headers set by
/// the checkout step, the second sends ours.
fn with_token(command: &mut Command, token: &SecretString) {
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", token.expose_secret()));
    command
        .env("GIT_CONFIG_COUNT", "3")
        .env("GIT_CONFIG_KEY_0", "http.extraheader")
        .env("GIT_CONFIG_VALUE_0", "")
        .env("GIT_CONFIG_KEY_1", "http.extraheader")
        .env("GIT_CONFIG_VALUE_1", format!("Authorization: Basic {basic}"))
        .env("GIT_CONFIG_KEY_2", "credential.helper")
        .env("GIT_CONFIG_VALUE_2", "");
}

fn run(command: Command, action: &str) -> Result<String, GithubError> {
    let output = bork_ci_core::git::output(command, action).map_err(|error| GithubError::Git {
        action: action.to_owned(),
        detail: error.detail,
    })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim_end().to_owned())
    } else {
        Err(GithubError::Git {
            action: action.to_owned(),
            detail: redact_urls(String::from_utf8_lossy(&output.stderr).trim()),
        })
    }
}

fn git(repo: &Path, args: &[&str], action: &str) -> Result<String, GithubError> {
    let mut command = base_command(repo);
    command.args(args);
    run(command, action)
}

/// `git rev-parse --verify <rev>^{commit}`.
pub fn rev_parse(repo: &Path, rev: &str) -> Result<String, GithubError> {
    git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--end-of-options",
            &format!("{rev}^{{commit}}"),
        ],
        "rev-parse",
    )
}

/// Fetches `branch` from `url` into `FETCH_HEAD`; `Ok(None)` when the branch does not exist.
pub fn fetch_branch(
    repo: &Path,
    url: &str,
    token: &SecretString,
    branch: &str,
) -> Result<Option<String>, GithubError> {
    let refname = format!("refs/heads/{branch}");
    let mut probe = base_command(repo);
    with_token(&mut probe, token);
    probe.args(["ls-remote", "--end-of-options", url, &refname]);
    let listed = run(probe, "ls-remote")?;
    if listed.trim().is_empty() {
        return Ok(None);
    }
    fetch_ref(repo, url, token, &refname)?;
    rev_parse(repo, "FETCH_HEAD").map(Some)
}

/// Fetches one ref from `url` into `FETCH_HEAD`.
pub fn fetch_ref(repo: &Path, url: &str, token: &SecretString, refname: &str) -> Result<(), GithubError> {
    let mut command = base_command(repo);
    with_token(&mut command, token);
    command.args(["fetch", "--no-tags", "--quiet", "--end-of-options", url, refname]);
    run(command, "fetch").map(|_| ())
}

/// Pushes `commit` to `branch`. With `lease`, the remote must still be at that commit (or
/// absent when `lease` is empty); without it, only a fast-forward is accepted.
pub fn push(
    repo: &Path,
    url: &str,
    token: &SecretString,
    commit: &str,
    branch: &str,
    lease: Option<&str>,
) -> Result<(), GithubError> {
    let mut command = base_command(repo);
    with_token(&mut command, token);
    command.args(["push", "--quiet", "--porcelain"]);
    if let Some(lease) = lease {
        command.arg(format!("--force-with-lease=refs/heads/{branch}:{lease}"));
    }
    command.args(["--end-of-options", url, &format!("{commit}:refs/heads/{branch}")]);
    let output = bork_ci_core::git::output(command, "push").map_err(|error| GithubError::Git {
        action: "push".to_owned(),
        detail: error.detail,
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(GithubError::PushRejected {
        branch: branch.to_owned(),
        detail: redact_urls(&push_refusal(
            &String::from_utf8_lossy(&output.stdout),
            &String::from_utf8_lossy(&output.stderr),
        )),
    })
}

/// Why a push was refused, as the server said it: the status of each rejected ref from
/// `--porcelain`'s stdout (`!<TAB>src:dst<TAB>[remote rejected] (reason)`, where GitHub puts its
/// refusals), the server's `remote:` lines, then git's own last line.
fn push_refusal(stdout: &str, stderr: &str) -> String {
    let mut said: Vec<String> = stdout
        .lines()
        .filter(|line| line.starts_with('!'))
        .map(|line| line.rsplit('\t').next().unwrap_or(line).trim().to_owned())
        .filter(|status| !status.is_empty())
        .collect();
    said.extend(
        stderr
            .lines()
            .filter_map(|line| line.strip_prefix("remote:"))
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .map(str::to_owned),
    );
    if let Some(last) = stderr.lines().rev().map(str::trim).find(|line| !line.is_empty()) {
        said.push(last.to_owned());
    }
    said.dedup();
    said.join("; ")
}

/// Checks out `branch` at `commit`, keeping local changes git can carry.
pub fn checkout(repo: &Path, branch: &str, commit: &str) -> Result<(), GithubError> {
    git(
        repo,
        &["checkout", "--quiet", "-B", branch, commit, "--"],
        "checkout",
    )
    .map(|_| ())
}

/// Fast-forwards the current branch to `rev`.
pub fn fast_forward(repo: &Path, rev: &str) -> Result<(), GithubError> {
    git(repo, &["merge", "--ff-only", "--quiet", rev], "merge --ff-only").map(|_| ())
}

/// Merges `rev` into the current branch with bork-ci's identity; aborts on conflict.
pub fn merge(repo: &Path, identity: &Identity, rev: &str, message: &str) -> Result<(), GithubError> {
    let mut command = base_command(repo);
    with_identity(&mut command, identity);
    command.args(["merge", "--no-edit", "--quiet", "-m", message, rev]);
    let result = run(command, "merge");
    if result.is_err() {
        let _ = git(repo, &["merge", "--abort"], "merge --abort");
    }
    result.map(|_| ())
}

/// True when `ancestor` is an ancestor of `commit`.
pub fn is_ancestor(repo: &Path, ancestor: &str, commit: &str) -> bool {
    let mut command = base_command(repo);
    command.args(["merge-base", "--is-ancestor", ancestor, commit]);
    bork_ci_core::git::output(command, "merge-base").is_ok_and(|output| output.status.success())
}

/// Author emails of the commits in `from..to`.
pub fn author_emails(repo: &Path, from: &str, to: &str) -> Result<Vec<String>, GithubError> {
    let out = git(
        repo,
        &["log", "--format=%ae", &format!("{from}..{to}"), "--"],
        "log",
    )?;
    Ok(out.lines().map(str::to_owned).collect())
}

/// Number of commits in `from..to`.
pub fn count_between(repo: &Path, from: &str, to: &str) -> Result<u64, GithubError> {
    let out = git(
        repo,
        &["rev-list", "--count", &format!("{from}..{to}"), "--"],
        "rev-list",
    )?;
    out.trim()
        .parse()
        .map_err(|_| GithubError::Protocol("rev-list count".into()))
}

/// Stages `applied` (written) and `deleted` paths and commits them with `message`; `None` when
/// nothing changed.
pub fn commit_paths(
    repo: &Path,
    identity: &Identity,
    applied: &[String],
    deleted: &[String],
    message: &str,
) -> Result<Option<String>, GithubError> {
    if applied.is_empty() && deleted.is_empty() {
        return Ok(None);
    }
    if !applied.is_empty() {
        let mut add = base_command(repo);
        add.args(["add", "--all", "--"]).args(applied);
        run(add, "add")?;
    }
    if !deleted.is_empty() {
        let mut remove = base_command(repo);
        remove
            .args(["rm", "--cached", "--quiet", "--ignore-unmatch", "-r", "--"])
            .args(deleted);
        run(remove, "rm")?;
    }
    let mut staged = base_command(repo);
    staged.args(["diff", "--cached", "--quiet", "--"]);
    let unchanged = bork_ci_core::git::output(staged, "diff")
        .map_err(|error| GithubError::Git {
            action: "diff".into(),
            detail: error.detail,
        })?
        .status
        .success();
    if unchanged {
        return Ok(None);
    }
    let mut commit = base_command(repo);
    with_identity(&mut commit, identity);
    commit.args(["commit", "--quiet", "--no-verify", "--file", "-"]);
    let output =
        bork_ci_core::git::output_with_input(commit, message.as_bytes(), "commit").map_err(|error| {
            GithubError::Git {
                action: "commit".into(),
                detail: error.detail,
            }
        })?;
    if !output.status.success() {
        return Err(GithubError::Git {
            action: "commit".into(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    rev_parse(repo, "HEAD").map(Some)
}

/// Builds a commit on `parent` that changes only `path` (to `contents`, or deletes it), using
/// a private index so the working tree and the real index are untouched.
pub fn single_change_commit(
    repo: &Path,
    identity: &Identity,
    parent: &str,
    path: &str,
    contents: Option<&[u8]>,
    message: &str,
) -> Result<String, GithubError> {
    let index = tempfile::NamedTempFile::new().map_err(|error| GithubError::Git {
        action: "temporary index".into(),
        detail: error.to_string(),
    })?;
    let index_path = index.path().to_path_buf();
    // git wants to create the index itself.
    drop(index);
    let with_index = |args: &[&str], action: &str| {
        let mut command = base_command(repo);
        command.env("GIT_INDEX_FILE", &index_path).args(args);
        run(command, action)
    };
    with_index(&["read-tree", parent], "read-tree")?;
    match contents {
        Some(bytes) => {
            let blob = hash_object(repo, bytes)?;
            let mode = existing_mode(repo, parent, path).unwrap_or_else(|| "100644".to_owned());
            with_index(
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("{mode},{blob},{path}"),
                ],
                "update-index",
            )?;
        }
        None => {
            with_index(&["update-index", "--force-remove", "--", path], "update-index")?;
        }
    }
    let tree = with_index(&["write-tree"], "write-tree")?;
    let _ = std::fs::remove_file(&index_path);
    commit_tree(repo, identity, &tree, parent, message)
}

/// A commit on `parent` with `parent`'s tree (no file change).
pub fn single_change_commit_empty(
    repo: &Path,
    identity: &Identity,
    parent: &str,
    message: &str,
) -> Result<String, GithubError> {
    let tree = git(repo, &["rev-parse", &format!("{parent}^{{tree}}")], "rev-parse")?;
    commit_tree(repo, identity, &tree, parent, message)
}

fn commit_tree(
    repo: &Path,
    identity: &Identity,
    tree: &str,
    parent: &str,
    message: &str,
) -> Result<String, GithubError> {
    let mut command = base_command(repo);
    with_identity(&mut command, identity);
    command.args(["commit-tree", tree, "-p", parent, "-F", "-"]);
    let output = bork_ci_core::git::output_with_input(command, message.as_bytes(), "commit-tree").map_err(
        |error| GithubError::Git {
            action: "commit-tree".into(),
            detail: error.detail,
        },
    )?;
    if !output.status.success() {
        return Err(GithubError::Git {
            action: "commit-tree".into(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

fn existing_mode(repo: &Path, commit: &str, path: &str) -> Option<String> {
    let out = git(repo, &["ls-tree", commit, "--", path], "ls-tree").ok()?;
    let mode = out.split_whitespace().next()?.to_owned();
    (mode == "100644" || mode == "100755").then_some(mode)
}

fn hash_object(repo: &Path, bytes: &[u8]) -> Result<String, GithubError> {
    let mut command = base_command(repo);
    command.args(["hash-object", "-w", "--stdin"]);
    let output = bork_ci_core::git::output_with_input(command, bytes, "hash-object").map_err(|error| {
        GithubError::Git {
            action: "hash-object".into(),
            detail: error.detail,
        }
    })?;
    if !output.status.success() {
        return Err(GithubError::Git {
            action: "hash-object".into(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// The bytes of `path` at `commit`; `None` when it does not exist there.
pub fn file_at(repo: &Path, commit: &str, path: &str) -> Result<Option<Vec<u8>>, GithubError> {
    let listed = git(repo, &["ls-tree", commit, "--", path], "ls-tree")?;
    if listed.trim().is_empty() {
        return Ok(None);
    }
    let mut command = base_command(repo);
    command.args(["cat-file", "blob", &format!("{commit}:{path}")]);
    let output = bork_ci_core::git::output(command, "cat-file").map_err(|error| GithubError::Git {
        action: "cat-file".into(),
        detail: error.detail,
    })?;
    if !output.status.success() {
        return Err(GithubError::Git {
            action: "cat-file".into(),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(Some(output.stdout))
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_is_read_from_the_refs_status_and_the_remote_lines() {
        let stdout = "To http://127.0.0.1:1/acme/widgets.git\n!\tabc:refs/heads/bork/approve-x\t[remote rejected] (refusing to allow a GitHub App to create or update workflow `.github/workflows/ci.yml` without `workflows` permission)\nDone\n";
        let stderr = "error: failed to push some refs to 'http://127.0.0.1:1/acme/widgets.git'\n";
        let said = push_refusal(stdout, stderr);
        assert!(
            said.starts_with("[remote rejected] (refusing to allow a GitHub App"),
            "{said}"
        );
        assert!(
            said.ends_with("error: failed to push some refs to 'http://127.0.0.1:1/acme/widgets.git'"),
            "{said}"
        );
        let said = push_refusal(
            "",
            "remote: error: GH006: Protected branch update failed for refs/heads/main.\nerror: failed to push some refs\n",
        );
        assert_eq!(
            said,
            "error: GH006: Protected branch update failed for refs/heads/main.; error: failed to push some refs"
        );
    }

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        git(dir.path(), &["init", "--quiet", "-b", "main"], "init").expect("init");
        std::fs::write(dir.path().join("a.txt"), "a\n").expect("write");
        let identity = Identity {
            name: "t".into(),
            email: "t@example.com".into(),
        };
        commit_paths(dir.path(), &identity, &["a.txt".into()], &[], "first\n")
            .expect("commit")
            .expect("some");
        dir
    }

    #[test]
    fn commits_one_iteration_with_the_identity_and_odd_paths() {
        let dir = repo();
        let odd = "--help $(id);x.txt";
        std::fs::write(dir.path().join(odd), "x\n").expect("write");
        std::fs::remove_file(dir.path().join("a.txt")).expect("remove");
        let identity = Identity {
            name: "bork-ci".into(),
            email: "bork-ci@users.noreply.github.com".into(),
        };
        let applied = [odd.to_owned()];
        let deleted = ["a.txt".to_owned()];
        let message = "bork-ci: iteration 2\n\nsecond line\n";
        let sha = commit_paths(dir.path(), &identity, &applied, &deleted, message)
            .expect("commit")
            .expect("some");
        let log = git(dir.path(), &["log", "-1", "--format=%an <%ae>%n%B", &sha], "log").expect("log");
        assert_eq!(
            log,
            "bork-ci <bork-ci@users.noreply.github.com>\nbork-ci: iteration 2\n\nsecond line"
        );
        assert_eq!(
            file_at(dir.path(), &sha, odd).expect("ok").as_deref(),
            Some(&b"x\n"[..])
        );
        assert_eq!(file_at(dir.path(), &sha, "a.txt").expect("ok"), None);
        assert_eq!(
            commit_paths(dir.path(), &identity, &applied, &deleted, message).expect("ok"),
            None,
            "nothing left to commit"
        );
    }

    #[test]
    fn single_change_commit_leaves_the_tree_alone() {
        let dir = repo();
        let identity = Identity {
            name: "bork-ci".into(),
            email: "b@example.com".into(),
        };
        let head = rev_parse(dir.path(), "HEAD").expect("head");
        let commit = single_change_commit(
            dir.path(),
            &identity,
            &head,
            "specs/new.md",
            Some(b"spec\r\n"),
            "msg",
        )
        .expect("commit");
        assert_eq!(
            file_at(dir.path(), &commit, "specs/new.md")
                .expect("ok")
                .as_deref(),
            Some(&b"spec\r\n"[..])
        );
        assert_eq!(
            file_at(dir.path(), &commit, "a.txt").expect("ok").as_deref(),
            Some(&b"a\n"[..])
        );
        assert!(!dir.path().join("specs").exists());
        assert_eq!(rev_parse(dir.path(), "HEAD").expect("head"), head);
        let deletion = single_change_commit(dir.path(), &identity, &head, "a.txt", None, "rm").expect("rm");
        assert_eq!(file_at(dir.path(), &deletion, "a.txt").expect("ok"), None);
    }
}
