//! `pack::snapshot` against real git repositories in temp dirs: the file set equals git's, no
//! symlink is followed, nothing from `.git` is packed, special files never block, and the spec
//! diff covers committed, staged, unstaged and untracked changes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use bork_ci::pack::{self, FileKind, PackError, PackOptions, RepoSnapshot};
use proptest::prelude::*;

use crate::support::git_bytes as git;

const CANARY: &str = "CANARY-7f3a9c1e-do-not-pack";

/// Runs git in `dir` with a config isolated from the machine's.
fn init_repo(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "commit.gpgsign", "false"]);
}

fn write(root: &Path, path: &str, contents: impl AsRef<[u8]>) {
    let full = root.join(path);
    if let Some(parent) = full.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(full, contents).expect("write");
}

fn commit_all(dir: &Path, message: &str) {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", message]);
}

/// What git selects, minus tracked files missing from disk (the pack shows the working tree).
fn git_selection(dir: &Path) -> BTreeSet<String> {
    let split = |bytes: Vec<u8>| -> BTreeSet<String> {
        bytes
            .split(|byte| *byte == 0)
            .filter(|record| !record.is_empty())
            .map(|record| String::from_utf8_lossy(record).into_owned())
            .collect()
    };
    let listed = split(git(
        dir,
        &[
            "-c",
            "core.quotepath=off",
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
    ));
    let deleted = split(git(
        dir,
        &["-c", "core.quotepath=off", "ls-files", "-z", "--deleted"],
    ));
    listed.difference(&deleted).cloned().collect()
}

fn packed_paths(snapshot: &RepoSnapshot) -> BTreeSet<String> {
    snapshot.files.iter().map(|file| file.path.clone()).collect()
}

fn snap(dir: &Path) -> RepoSnapshot {
    pack::snapshot(dir, &PackOptions::default()).expect("snapshot")
}

fn kind_of<'a>(snapshot: &'a RepoSnapshot, path: &str) -> &'a FileKind {
    &snapshot
        .files
        .iter()
        .find(|file| file.path == path)
        .unwrap_or_else(|| panic!("{path} not packed"))
        .kind
}

#[test]
fn file_set_equals_git_on_a_matrix_of_ignore_rules() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(&repo, ".gitignore", "*.log\n!keep.log\nbuild/\n/rootonly.txt\n");
    write(&repo, "a.log", "ignored");
    write(&repo, "keep.log", "negated back in");
    write(&repo, "build/out.txt", "ignored dir");
    write(&repo, "rootonly.txt", "anchored ignore");
    write(&repo, "sub/rootonly.txt", "anchored rule does not reach here");
    write(&repo, "sub/.gitignore", "*.tmp\n!important.tmp\nnested/\n");
    write(&repo, "sub/x.tmp", "ignored by nested rule");
    write(&repo, "sub/important.tmp", "negated in nested");
    write(&repo, "sub/nested/deep.txt", "ignored nested dir");
    write(&repo, "sub/deeper/.gitignore", "!*.log\n");
    write(&repo, "sub/deeper/back.log", "re-included deeper");
    write(&repo, ".git/info/exclude", "excluded-by-info.txt\n");
    write(&repo, "excluded-by-info.txt", "x");
    let global = temp.path().join("global-ignore");
    write(temp.path(), "global-ignore", "*.global\n");
    git(
        &repo,
        &["config", "core.excludesFile", global.to_str().expect("utf8")],
    );
    write(&repo, "file.global", "excluded by core.excludesFile");
    write(&repo, "src/main.rs", "fn main() {}\n");
    write(&repo, "héllo wörld.txt", "unicode name");
    write(&repo, "to-delete.txt", "tracked then deleted");
    commit_all(&repo, "initial");
    // Tracked, then matched by a .gitignore: git still lists it.
    write(&repo, "tracked.ignored", "tracked but ignored");
    git(&repo, &["add", "-f", "tracked.ignored"]);
    write(
        &repo,
        ".gitignore",
        "*.log\n!keep.log\nbuild/\n/rootonly.txt\n*.ignored\n",
    );
    write(&repo, "build/forced.txt", "forced into an ignored dir");
    git(&repo, &["add", "-f", "build/forced.txt"]);
    write(&repo, "untracked.txt", "untracked");
    std::fs::remove_file(repo.join("to-delete.txt")).expect("rm");

    let snapshot = snap(&repo);
    let expected = git_selection(&repo);
    assert_eq!(packed_paths(&snapshot), expected);
    for path in ["keep.log", "tracked.ignored", "build/forced.txt", "untracked.txt"] {
        assert!(expected.contains(path), "{path} should be selected");
    }
    for path in [
        "a.log",
        "build/out.txt",
        "file.global",
        "excluded-by-info.txt",
        "to-delete.txt",
    ] {
        assert!(!expected.contains(path), "{path} should not be selected");
    }
    let order: Vec<&str> = snapshot.files.iter().map(|file| file.path.as_str()).collect();
    let mut sorted = order.clone();
    sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(order, sorted, "files are in byte order");
    assert_eq!(snap(&repo).render(), snapshot.render(), "deterministic");
}

#[test]
fn symlinks_are_named_never_followed() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(temp.path(), "outside/secret", CANARY);
    write(temp.path(), "outside/dir/inner.txt", CANARY);
    write(&repo, "README.md", "hello\n");
    git(
        &repo,
        &[
            "config",
            "remote.origin.url",
            &format!("https://x:{CANARY}@example.com/r"),
        ],
    );
    let secret = temp.path().join("outside/secret");
    std::os::unix::fs::symlink(&secret, repo.join("leak.txt")).expect("symlink");
    std::os::unix::fs::symlink("../outside/secret", repo.join("leak2.txt")).expect("symlink");
    std::os::unix::fs::symlink("/proc/self/environ", repo.join("environ")).expect("symlink");
    std::os::unix::fs::symlink(".git/config", repo.join("cfg.txt")).expect("symlink");
    std::os::unix::fs::symlink(temp.path().join("outside/dir"), repo.join("vendor")).expect("symlink");
    // A tracked file whose directory is later swapped for a symlink to the outside.
    write(&repo, "lib/inner.txt", "tracked");
    commit_all(&repo, "initial");
    std::fs::remove_dir_all(repo.join("lib")).expect("rm");
    std::os::unix::fs::symlink(temp.path().join("outside/dir"), repo.join("lib")).expect("symlink");

    let snapshot = snap(&repo);
    let rendered = snapshot.render();
    assert!(!rendered.contains(CANARY), "canary leaked:\n{rendered}");
    assert_eq!(
        kind_of(&snapshot, "leak2.txt"),
        &FileKind::Symlink {
            target: "../outside/secret".to_owned()
        }
    );
    assert_eq!(
        kind_of(&snapshot, "environ"),
        &FileKind::Symlink {
            target: "/proc/self/environ".to_owned()
        }
    );
    assert_eq!(
        kind_of(&snapshot, "cfg.txt"),
        &FileKind::Symlink {
            target: ".git/config".to_owned()
        }
    );
    assert!(matches!(kind_of(&snapshot, "vendor"), FileKind::Symlink { .. }));
    assert!(
        !packed_paths(&snapshot)
            .iter()
            .any(|path| path.starts_with("vendor/"))
    );
    // The stale tracked path beyond the symlinked directory is named, not read.
    assert_eq!(kind_of(&snapshot, "lib/inner.txt"), &FileKind::NotRegular);
    assert!(rendered.contains("===== SYMLINK: environ -> /proc/self/environ (not followed) ====="));
    let not_shown = snapshot.not_shown();
    for path in [
        "leak.txt",
        "leak2.txt",
        "environ",
        "cfg.txt",
        "vendor",
        "lib/inner.txt",
    ] {
        assert!(not_shown.contains(path), "{path}");
    }
}

#[test]
fn fifo_is_skipped_without_blocking() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(&repo, "a.txt", "a\n");
    // Git lists no untracked FIFO, but a tracked file replaced by one is listed and opened.
    write(&repo, "tracked-pipe", "was a file\n");
    commit_all(&repo, "initial");
    std::fs::remove_file(repo.join("tracked-pipe")).expect("rm");
    for name in ["pipe", "tracked-pipe"] {
        let status = Command::new("mkfifo")
            .arg(repo.join(name))
            .status()
            .expect("mkfifo");
        assert!(status.success());
    }
    let (sender, receiver) = mpsc::channel();
    let root = repo.clone();
    std::thread::spawn(move || {
        let _ = sender.send(pack::snapshot(&root, &PackOptions::default()));
    });
    let snapshot = receiver
        .recv_timeout(Duration::from_secs(30))
        .expect("packing must not block on a FIFO")
        .expect("snapshot");
    assert_eq!(kind_of(&snapshot, "tracked-pipe"), &FileKind::NotRegular);
    assert_eq!(packed_paths(&snapshot), git_selection(&repo));
    assert_eq!(kind_of(&snapshot, "a.txt"), &FileKind::Text("a\n".to_owned()));
}

#[test]
fn binary_and_oversize_are_named_not_inlined_and_specs_get_more_room() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    let mut binary = b"PNG".to_vec();
    binary.push(0);
    binary.extend_from_slice(CANARY.as_bytes());
    write(&repo, "logo.png", &binary);
    write(&repo, "big.txt", format!("{CANARY}{}", "x".repeat(2000)));
    write(&repo, "specs/long.md", format!("# Spec\n{}\n", "y".repeat(2000)));
    write(&repo, "specs/huge.md", "z".repeat(5000));
    write(&repo, "small.txt", "fits\n");
    let options = PackOptions {
        max_file_bytes: 1024,
        ..PackOptions::default()
    };
    let snapshot = pack::snapshot(&repo, &options).expect("snapshot");
    let rendered = snapshot.render_files();
    assert!(!rendered.contains(CANARY));
    assert_eq!(
        kind_of(&snapshot, "logo.png"),
        &FileKind::Binary {
            size: binary.len() as u64
        }
    );
    assert_eq!(
        kind_of(&snapshot, "big.txt"),
        &FileKind::TooLarge {
            size: 2000 + CANARY.len() as u64
        }
    );
    assert!(matches!(kind_of(&snapshot, "specs/long.md"), FileKind::Text(_)));
    assert_eq!(
        kind_of(&snapshot, "specs/huge.md"),
        &FileKind::TooLarge { size: 5000 }
    );
    assert!(rendered.contains("===== FILE: logo.png (binary, "));
    assert!(rendered.contains("===== FILE: small.txt =====\nfits\n===== END FILE: small.txt =====\n"));
    let not_shown = snapshot.not_shown();
    assert_eq!(
        not_shown,
        ["big.txt", "logo.png", "specs/huge.md"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    );
}

#[test]
fn nothing_from_git_metadata_or_nested_repositories_is_packed() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(&repo, "a.txt", "a\n");
    write(&repo, ".git/canary", CANARY);
    git(&repo, &["config", "user.secret", CANARY]);
    // An untracked nested repository, and a worktree-style `.git` file.
    init_repo(&repo.join("nested"));
    write(&repo, "nested/inner.txt", CANARY);
    write(&repo.join("nested"), ".git/canary", CANARY);
    write(&repo, "wt/.git", format!("gitdir: {CANARY}\n"));
    write(&repo, "wt/file.txt", "worktree file\n");
    let snapshot = snap(&repo);
    let rendered = snapshot.render();
    assert!(!rendered.contains(CANARY), "{rendered}");
    assert!(
        packed_paths(&snapshot)
            .iter()
            .all(|path| !path.split('/').any(|c| c == ".git"))
    );
    assert_eq!(packed_paths(&snapshot), git_selection(&repo));
}

#[test]
fn credential_files_are_named_not_read() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(&repo, ".gitignore", ".env\n");
    write(&repo, ".env", CANARY);
    write(&repo, "gha-creds-1234.json", CANARY);
    write(&repo, "deploy.pem", CANARY);
    git(&repo, &["add", "deploy.pem"]);
    let snapshot = snap(&repo);
    assert!(!snapshot.render().contains(CANARY));
    assert!(!packed_paths(&snapshot).contains(".env"));
    assert!(matches!(
        kind_of(&snapshot, "deploy.pem"),
        FileKind::Credential { .. }
    ));
    assert!(matches!(
        kind_of(&snapshot, "gha-creds-1234.json"),
        FileKind::Credential { .. }
    ));
}

#[test]
fn not_a_git_repository_is_a_typed_error() {
    let temp = tempfile::tempdir().expect("tempdir");
    let error = pack::snapshot(temp.path(), &PackOptions::default()).expect_err("not a repo");
    assert!(matches!(error, PackError::NotAGitRepo { .. }), "{error:?}");
}

/// A repository on a feature branch: `main` has `specs/a.md` v1; the branch commits a change,
/// stages another, leaves one unstaged and one untracked.
fn feature_repo(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    init_repo(&repo);
    write(&repo, "specs/a.md", "# A\nversion one\n");
    write(&repo, "specs/b.md", "# B\n");
    write(&repo, "specs/c.md", "# C\n");
    write(&repo, "src/lib.rs", "// code\n");
    commit_all(&repo, "base");
    git(&repo, &["checkout", "-q", "-b", "feature"]);
    write(&repo, "specs/a.md", "# A\nversion two (committed)\n");
    commit_all(&repo, "committed spec change");
    write(&repo, "specs/b.md", "# B\nstaged line\n");
    git(&repo, &["add", "specs/b.md"]);
    write(&repo, "specs/c.md", "# C\nunstaged line\n");
    write(&repo, "specs/new.md", "# New\nbrand new spec\n");
    write(&repo, "src/lib.rs", "// code changed, not a spec\n");
    repo
}

#[test]
fn spec_diff_has_committed_staged_unstaged_and_newly_added() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = feature_repo(temp.path());
    let snapshot = snap(&repo);
    let diff = &snapshot.spec_diff;
    assert_eq!(diff.base_ref.as_deref(), Some("main"));
    assert!(diff.diff.contains("+version two (committed)"), "{}", diff.diff);
    assert!(diff.diff.contains("+staged line"));
    assert!(diff.diff.contains("+unstaged line"));
    assert!(
        !diff.diff.contains("brand new spec"),
        "untracked content is not in the diff"
    );
    assert!(!diff.diff.contains("src/lib.rs"));
    assert_eq!(diff.newly_added, vec!["specs/new.md".to_owned()]);
    let rendered = snapshot.render();
    assert_eq!(
        rendered.matches("brand new spec").count(),
        1,
        "new spec shown once"
    );
    assert!(rendered.contains("- specs/new.md (newly added)"));
    assert!(rendered.contains("===== SPEC DIFF: specs/ against main ====="));
}

#[test]
fn spec_diff_uses_origin_main_in_a_fresh_clone() {
    let temp = tempfile::tempdir().expect("tempdir");
    let upstream = feature_repo(temp.path());
    git(&upstream, &["add", "-A"]);
    git(&upstream, &["commit", "-q", "-m", "everything"]);
    let clone = temp.path().join("clone");
    let output = Command::new("git")
        .args(["clone", "-q", "--branch", "feature"])
        .arg(&upstream)
        .arg(&clone)
        .output()
        .expect("clone");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let branches = String::from_utf8_lossy(&git(&clone, &["branch", "--list"])).into_owned();
    assert!(!branches.contains("main"), "only origin/main exists: {branches}");
    let snapshot = snap(&clone);
    assert_eq!(snapshot.spec_diff.base_ref.as_deref(), Some("origin/main"));
    assert!(snapshot.spec_diff.diff.contains("+brand new spec"));
    assert!(snapshot.spec_diff.newly_added.is_empty());
}

#[test]
fn missing_base_is_a_note_not_an_error() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(&repo, "specs/a.md", "# A\n");
    let snapshot = pack::snapshot(
        &repo,
        &PackOptions {
            base: "trunk".to_owned(),
            ..PackOptions::default()
        },
    )
    .expect("snapshot without a base");
    assert_eq!(snapshot.spec_diff.base_ref, None);
    assert!(
        snapshot
            .render_spec_diff()
            .contains("no base branch found (neither `trunk` nor `origin/trunk`)")
    );
    assert!(matches!(kind_of(&snapshot, "specs/a.md"), FileKind::Text(_)));
}

#[test]
fn base_option_selects_another_branch_and_rejects_option_injection() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = feature_repo(temp.path());
    git(&repo, &["branch", "develop", "feature"]);
    let options = PackOptions {
        base: "develop".to_owned(),
        ..PackOptions::default()
    };
    let snapshot = pack::snapshot(&repo, &options).expect("snapshot");
    assert_eq!(snapshot.spec_diff.base_ref.as_deref(), Some("develop"));
    assert!(
        !snapshot.spec_diff.diff.contains("version two"),
        "committed change is in develop"
    );
    assert!(snapshot.spec_diff.diff.contains("+staged line"));
    let hostile = PackOptions {
        base: "--output=/tmp/x".to_owned(),
        ..PackOptions::default()
    };
    let snapshot = pack::snapshot(&repo, &hostile).expect("snapshot");
    assert_eq!(snapshot.spec_diff.base_ref, None);
}

#[derive(Debug, Clone)]
struct Tree {
    files: Vec<String>,
    ignores: Vec<(usize, Vec<String>)>,
    tracked: Vec<usize>,
}

fn tree_strategy() -> impl Strategy<Value = Tree> {
    let dirs = prop::sample::select(vec!["", "a/", "a/b/", "c/", "a/c/"]);
    let names = prop::sample::select(vec!["x.txt", "y.log", "z.tmp", "keep.log", "b", "c.txt"]);
    let file = (dirs.clone(), names).prop_map(|(dir, name)| format!("{dir}{name}"));
    let rule = prop::sample::select(vec![
        "*.log",
        "!keep.log",
        "b/",
        "/x.txt",
        "c",
        "*.tmp",
        "!z.tmp",
        "a/b",
        "**/c.txt",
        "!*",
        "*",
        "!a/",
        "x.*",
        "#comment",
        "a/**/z.tmp",
    ]);
    (
        prop::collection::vec(file, 1..14),
        prop::collection::vec(
            (
                0usize..3,
                prop::collection::vec(rule.prop_map(String::from), 0..4),
            ),
            0..4,
        ),
        prop::collection::vec(0usize..14, 0..4),
    )
        .prop_map(|(files, ignores, tracked)| Tree {
            files,
            ignores,
            tracked,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn generated_trees_match_git(tree in tree_strategy()) {
        let temp = tempfile::tempdir().expect("tempdir");
        let repo = temp.path().join("repo");
        init_repo(&repo);
        let mut written = Vec::new();
        for path in &tree.files {
            // A name used both as a file and as a directory would fail to write; skip it.
            if written.iter().any(|other: &String| other.starts_with(&format!("{path}/")) || path.starts_with(&format!("{other}/"))) {
                continue;
            }
            write(&repo, path, path.as_bytes());
            written.push(path.clone());
        }
        let ignore_dirs = ["", "a/", "a/b/"];
        for (dir, rules) in &tree.ignores {
            let dir = ignore_dirs[*dir];
            if written.iter().any(|path| format!("{path}/") == dir || dir.starts_with(&format!("{path}/"))) {
                continue;
            }
            write(&repo, &format!("{dir}.gitignore"), rules.join("\n"));
        }
        for index in &tree.tracked {
            if let Some(path) = written.get(*index) {
                git(&repo, &["add", "-f", "--", path]);
            }
        }
        let snapshot = snap(&repo);
        prop_assert_eq!(packed_paths(&snapshot), git_selection(&repo));
    }
}

/// Files are read through one descriptor per directory; links inside subdirectories, a directory
/// swapped for a link (to the outside or into `.git`) and directories larger than a reader's
/// chunk must come out exactly as from the root, with nothing read through a link.
#[test]
fn links_below_the_top_are_named_and_large_directories_read_whole() {
    let temp = tempfile::tempdir().expect("tempdir");
    let repo = temp.path().join("repo");
    init_repo(&repo);
    write(temp.path(), "outside/secret", CANARY);
    write(temp.path(), "outside/dir/inner.txt", CANARY);
    for index in 0..300 {
        write(&repo, &format!("big/f{index:03}.txt"), format!("file {index}\n"));
    }
    write(&repo, "deep/a/b/tracked.txt", "tracked");
    write(&repo, "docs/config", "tracked docs");
    write(&repo, "sub/plain.txt", "plain\n");
    commit_all(&repo, "initial");
    std::os::unix::fs::symlink("../../outside/secret", repo.join("sub/leak.txt")).expect("symlink");
    std::os::unix::fs::symlink(temp.path().join("outside/dir"), repo.join("sub/vendor")).expect("symlink");
    std::os::unix::fs::symlink("../outside/secret", repo.join("big/f150.link")).expect("symlink");
    // Directories swapped for links after the commit: one to the outside, one into `.git`.
    std::fs::remove_dir_all(repo.join("deep/a")).expect("rm");
    std::os::unix::fs::symlink(temp.path().join("outside"), repo.join("deep/a")).expect("symlink");
    std::fs::create_dir_all(temp.path().join("outside/b")).expect("mkdir");
    std::fs::write(temp.path().join("outside/b/tracked.txt"), CANARY).expect("write");
    std::fs::remove_dir_all(repo.join("docs")).expect("rm");
    std::os::unix::fs::symlink(".git", repo.join("docs")).expect("symlink");

    let snapshot = snap(&repo);
    let rendered = snapshot.render();
    assert!(!rendered.contains(CANARY), "canary leaked");
    assert!(!rendered.contains("[core]"), ".git/config leaked");
    assert_eq!(packed_paths(&snapshot), git_selection(&repo));
    assert_eq!(
        kind_of(&snapshot, "sub/leak.txt"),
        &FileKind::Symlink {
            target: "../../outside/secret".to_owned()
        }
    );
    assert!(matches!(
        kind_of(&snapshot, "sub/vendor"),
        FileKind::Symlink { .. }
    ));
    assert!(matches!(
        kind_of(&snapshot, "big/f150.link"),
        FileKind::Symlink { .. }
    ));
    assert_eq!(kind_of(&snapshot, "deep/a/b/tracked.txt"), &FileKind::NotRegular);
    assert_eq!(kind_of(&snapshot, "docs/config"), &FileKind::NotRegular);
    assert_eq!(
        kind_of(&snapshot, "sub/plain.txt"),
        &FileKind::Text("plain\n".to_owned())
    );
    for index in (0..300).filter(|index| *index != 150) {
        assert_eq!(
            kind_of(&snapshot, &format!("big/f{index:03}.txt")),
            &FileKind::Text(format!("file {index}\n"))
        );
    }
    let paths: Vec<&str> = snapshot.files.iter().map(|file| file.path.as_str()).collect();
    let mut sorted = paths.clone();
    sorted.sort_unstable();
    assert_eq!(paths, sorted, "sorted by path");
    assert_eq!(snap(&repo).render(), rendered, "deterministic");
}
