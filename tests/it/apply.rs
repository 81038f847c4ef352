//! Applying hostile edit plans to a real repository: after every case nothing outside the
//! repository and nothing in `.git` has changed, and only the accepted paths differ.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bork_ci::edit::{
    ApplyOptions, Changeset, EditAction, EditPlan, ProposedWrite, Protection, apply, apply_approved, parse,
};
use sha2::{Digest, Sha256};

/// `root/repo` (a real git repository with canaries in `.git` and `.config/bork.json`) and
/// `root/outside` (canaries the repository must never reach).
struct Fixture {
    root: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        let fixture = Self { root };
        let repo = fixture.repo();
        std::fs::create_dir_all(&repo).expect("repo dir");
        let status = Command::new("git")
            .args(["init", "-q", "-b", "main"])
            .arg(&repo)
            .status()
            .expect("git init");
        assert!(status.success());
        std::fs::write(repo.join(".git/canary"), "git canary").expect("git canary");
        std::fs::write(
            repo.join(".git/config"),
            "[http]\n\textraheader = AUTHORIZATION: basic Y2FuYXJ5\n",
        )
        .expect("git config");
        std::fs::create_dir_all(repo.join(".git/hooks")).expect("hooks");
        std::fs::create_dir_all(repo.join(".config")).expect(".config");
        std::fs::write(repo.join(".config/bork.json"), "{\"max-iterations\": 5}\n").expect("config canary");
        std::fs::create_dir_all(repo.join("src")).expect("src");
        std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("main.rs");
        std::fs::create_dir_all(repo.join("specs")).expect("specs");
        std::fs::write(repo.join("specs/a.md"), "# spec\n").expect("spec");
        let outside = fixture.outside();
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("canary"), "outside canary").expect("outside canary");
        fixture
    }

    fn repo(&self) -> PathBuf {
        self.root.path().join("repo")
    }

    fn outside(&self) -> PathBuf {
        self.root.path().join("outside")
    }

    /// Every entry under the root: kind, mode, and contents hash or link target.
    fn snapshot(&self) -> BTreeMap<String, String> {
        let mut entries = BTreeMap::new();
        walk(self.root.path(), self.root.path(), &mut entries);
        entries
    }
}

fn walk(base: &Path, dir: &Path, entries: &mut BTreeMap<String, String>) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in read {
        let entry = entry.expect("entry");
        let path = entry.path();
        let relative = path
            .strip_prefix(base)
            .expect("under base")
            .to_string_lossy()
            .into_owned();
        let metadata = std::fs::symlink_metadata(&path).expect("lstat");
        let kind = metadata.file_type();
        let description = if kind.is_symlink() {
            format!(
                "link -> {}",
                std::fs::read_link(&path).expect("readlink").display()
            )
        } else if kind.is_dir() {
            walk(base, &path, entries);
            format!("dir {:o}", metadata.mode() & 0o7777)
        } else if kind.is_file() {
            let bytes = std::fs::read(&path).expect("read");
            format!(
                "file {:o} {}",
                metadata.mode() & 0o7777,
                hex::encode(Sha256::digest(&bytes))
            )
        } else {
            format!("special {:o}", metadata.mode())
        };
        entries.insert(relative, description);
    }
}

/// Paths whose entry differs between two snapshots.
fn changed(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> BTreeSet<String> {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|key| before.get(*key) != after.get(*key))
        .cloned()
        .collect()
}

fn options() -> ApplyOptions {
    ApplyOptions {
        protection: Protection::new(
            Some("ci/check.sh"),
            &["Cargo.toml".to_owned()],
            &Default::default(),
        )
        .expect("valid globs"),
        not_shown: BTreeSet::new(),
    }
}

fn plan(writes: &[(&str, &str)], deletes: &[&str]) -> EditPlan {
    EditPlan::from_pairs(writes, deletes)
}

/// Applies `plan` and checks the invariants that hold for every case: nothing outside changed,
/// `.git` and the config are byte-identical, and every changed entry is an applied path (or a
/// directory created on the way to one).
fn run(fixture: &Fixture, plan: &EditPlan) -> Changeset {
    let before = fixture.snapshot();
    let changeset = apply(&fixture.repo(), plan, &options()).expect("apply");
    let after = fixture.snapshot();
    let applied: BTreeSet<String> = changeset
        .applied
        .iter()
        .map(|edit| format!("repo/{}", edit.path))
        .collect();
    for path in changed(&before, &after) {
        assert!(!path.starts_with("outside"), "{path} outside changed");
        assert!(!path.starts_with("repo/.git/"), "{path} in .git changed");
        assert_ne!(path, "repo/.config/bork.json", "config changed");
        let is_applied = applied.contains(&path);
        let is_parent_of_applied = applied
            .iter()
            .any(|a| a.starts_with(&format!("{path}/")) && !before.contains_key(&path));
        let is_parent_dir = applied.iter().any(|a| a.starts_with(&format!("{path}/")));
        assert!(
            is_applied || is_parent_of_applied || is_parent_dir,
            "{path} changed but was not applied; changeset: {changeset:#?}"
        );
    }
    assert!(
        !after.keys().any(|k| k.contains(".bork-tmp-")),
        "temporary file left behind"
    );
    changeset
}

fn refused_codes(changeset: &Changeset) -> Vec<&str> {
    changeset.refused.iter().map(|r| r.code.as_str()).collect()
}

#[test]
fn traversal_and_absolute_paths_are_refused() {
    let fixture = Fixture::new();
    let absolute = fixture.outside().join("canary");
    let absolute = absolute.to_string_lossy().into_owned();
    let changeset = run(
        &fixture,
        &plan(
            &[
                ("../outside/x", "pwn"),
                ("a/../../outside/canary", "pwn"),
                ("src/../README.md", "pwn"),
                (&absolute, "pwn"),
                ("/etc/x", "pwn"),
                ("C:\\x", "pwn"),
                ("a\\..\\..\\x", "pwn"),
                ("src//main.rs", "pwn"),
                ("./src/main.rs", "pwn"),
                ("src/", "pwn"),
                ("", "pwn"),
                ("a\u{0}b", "pwn"),
            ],
            &["../outside/canary", "/etc/x", "", ".", "a\\b"],
        ),
    );
    assert!(changeset.applied.is_empty());
    assert_eq!(changeset.refused.len(), 17);
    assert!(
        changeset.refused[..12]
            .iter()
            .all(|r| r.contents.as_deref() == Some("pwn"))
    );
    assert!(!fixture.repo().join("C:\\x").exists());
    assert!(!fixture.repo().join("a").exists());
}

#[test]
fn git_variants_are_refused_without_contents() {
    let fixture = Fixture::new();
    let changeset = run(
        &fixture,
        &plan(
            &[
                (".git/config", "pwn"),
                (".GIT/config", "pwn"),
                (".Git/hooks/pre-commit", "pwn"),
                (".git", "pwn"),
                ("sub/.git/config", "pwn"),
                ("git~1/config", "pwn"),
                (".git./config", "pwn"),
                (".g\u{200c}it/config", "pwn"),
                ("specs/../.git/hooks/pre-commit", "pwn"),
            ],
            &[".git", ".git/index", ".GIT/HEAD", "sub/.git"],
        ),
    );
    assert!(changeset.applied.is_empty() && changeset.pending.is_empty());
    assert_eq!(changeset.refused.len(), 13);
    for refusal in &changeset.refused {
        assert_eq!(refusal.code, "git-dir");
        assert_eq!(refusal.contents, None);
    }
    assert!(!fixture.repo().join(".GIT").exists());
    assert!(!fixture.repo().join("sub").exists());
}

#[test]
fn config_variants_are_refused_with_contents() {
    let fixture = Fixture::new();
    let changeset = run(
        &fixture,
        &plan(
            &[
                (".config/bork.json", "{}"),
                ("./.config/bork.json", "{}"),
                (".config//bork.json", "{}"),
                (".config/./bork.json", "{}"),
                (".CONFIG/Bork.JSON", "{}"),
            ],
            &[".config/bork.json"],
        ),
    );
    assert_eq!(refused_codes(&changeset), vec!["config-file"; 6]);
    assert_eq!(changeset.refused[0].contents.as_deref(), Some("{}"));
    assert_eq!(changeset.refused[5].action, EditAction::Delete);
}

#[test]
fn symlinked_directories_are_never_walked() {
    let fixture = Fixture::new();
    let repo = fixture.repo();
    symlink(fixture.outside(), repo.join("link")).expect("outward link");
    symlink("../outside", repo.join("rel")).expect("relative link");
    symlink(".git", repo.join("docs")).expect("docs -> .git");
    symlink(".config", repo.join("cfg")).expect("cfg -> .config");
    symlink("specs", repo.join("notes")).expect("notes -> specs");
    symlink("loop", repo.join("loop")).expect("loop");
    std::fs::create_dir(repo.join("a")).expect("a");
    symlink("/", repo.join("a/b")).expect("a/b -> /");
    let changeset = run(
        &fixture,
        &plan(
            &[
                ("link/x", "pwn"),
                ("rel/canary", "pwn"),
                ("docs/config", "pwn"),
                ("docs/hooks/pre-commit", "pwn"),
                ("cfg/bork.json", "pwn"),
                ("notes/a.md", "pwn"),
                ("loop/x", "pwn"),
                ("a/b/tmp/x", "pwn"),
            ],
            &["link/canary", "docs/canary", "rel/canary"],
        ),
    );
    assert!(changeset.applied.is_empty(), "{changeset:#?}");
    assert_eq!(
        refused_codes(&changeset),
        vec!["symlink-component"; 11],
        "{changeset:#?}"
    );
    assert!(!fixture.outside().join("x").exists());
    assert!(fixture.outside().join("canary").exists());
}

#[test]
fn final_component_symlinks_and_special_files_are_refused() {
    let fixture = Fixture::new();
    let repo = fixture.repo();
    symlink(fixture.outside().join("canary"), repo.join("README.md")).expect("readme link");
    std::fs::write(repo.join("b.txt"), "b").expect("b");
    symlink("b.txt", repo.join("a.txt")).expect("inner link");
    symlink("../outside/new.txt", repo.join("new.txt")).expect("dangling");
    let status = Command::new("mkfifo")
        .arg(repo.join("fifo"))
        .status()
        .expect("mkfifo");
    assert!(status.success());
    let started = Instant::now();
    let changeset = run(
        &fixture,
        &plan(
            &[
                ("README.md", "pwn"),
                ("a.txt", "pwn"),
                ("new.txt", "pwn"),
                ("fifo", "pwn"),
                ("src", "pwn"),
                ("specs", "pwn"),
            ],
            &["src"],
        ),
    );
    assert!(started.elapsed() < Duration::from_secs(5), "blocked on the FIFO");
    assert_eq!(
        refused_codes(&changeset),
        [
            "symlink",
            "symlink",
            "symlink",
            "special-file",
            "directory",
            "directory"
        ]
    );
    // `specs` is gated (the name of a gated directory), never written as a file.
    assert_eq!(changeset.pending.len(), 1);
    assert_eq!(changeset.pending[0].path, "specs");
    assert!(!fixture.outside().join("new.txt").exists());
    assert_eq!(std::fs::read_to_string(repo.join("b.txt")).expect("b"), "b");
}

#[test]
fn hardlink_to_outside_is_broken_not_written_through() {
    let fixture = Fixture::new();
    let repo = fixture.repo();
    std::fs::hard_link(fixture.outside().join("canary"), repo.join("hl.txt")).expect("hardlink");
    std::fs::hard_link(fixture.outside().join("canary"), repo.join("hl2.txt")).expect("hardlink");
    let changeset = run(&fixture, &plan(&[("hl.txt", "new")], &["hl2.txt"]));
    assert_eq!(changeset.applied.len(), 2);
    assert_eq!(std::fs::read_to_string(repo.join("hl.txt")).expect("hl"), "new");
    assert!(!repo.join("hl2.txt").exists());
    assert_eq!(
        std::fs::read_to_string(fixture.outside().join("canary")).expect("canary"),
        "outside canary"
    );
}

#[test]
fn deleting_a_symlink_removes_the_link_only() {
    let fixture = Fixture::new();
    let repo = fixture.repo();
    symlink(fixture.outside().join("canary"), repo.join("link")).expect("link");
    symlink(fixture.outside(), repo.join("dir")).expect("dir link");
    let changeset = run(&fixture, &plan(&[], &["link", "dir/canary"]));
    assert_eq!(changeset.applied.len(), 1);
    assert_eq!(changeset.applied[0].path, "link");
    assert_eq!(refused_codes(&changeset), ["symlink-component"]);
    assert!(std::fs::symlink_metadata(repo.join("link")).is_err());
    assert!(fixture.outside().join("canary").exists());
}

#[test]
fn gated_edits_are_pending_and_not_written() {
    let fixture = Fixture::new();
    let changeset = run(
        &fixture,
        &plan(
            &[
                ("specs/b.md", "new spec"),
                ("SPECS/c.md", "x"),
                (".github/workflows/ci.yml", "on: push"),
                ("ci/check.sh", "exit 0"),
                ("cargo.toml", "[package]"),
                ("src/lib.rs", "pub fn f() {}"),
            ],
            &["specs/a.md"],
        ),
    );
    assert_eq!(changeset.applied.len(), 1);
    assert_eq!(changeset.applied[0].path, "src/lib.rs");
    let rules: Vec<(&str, &str)> = changeset
        .pending
        .iter()
        .map(|p| (p.path.as_str(), p.rule.as_str()))
        .collect();
    assert_eq!(
        rules,
        [
            ("specs/b.md", "specs/**"),
            ("SPECS/c.md", "specs/**"),
            (".github/workflows/ci.yml", ".github/workflows/**"),
            ("ci/check.sh", "correctness-checker"),
            ("cargo.toml", "Cargo.toml"),
            ("specs/a.md", "specs/**"),
        ]
    );
    assert_eq!(changeset.pending[5].action, EditAction::Delete);
    assert!(fixture.repo().join("specs/a.md").exists());
    assert!(!fixture.repo().join("specs/b.md").exists());

    // After approval, exactly the approved bytes are written, still without following links.
    let before = fixture.snapshot();
    let applied = apply_approved(&fixture.repo(), &changeset.pending[0]).expect("approved");
    assert_eq!(applied.sha256, changeset.pending[0].sha256);
    let after = fixture.snapshot();
    assert_eq!(
        changed(&before, &after),
        BTreeSet::from(["repo/specs/b.md".to_owned()])
    );
    symlink(fixture.outside(), fixture.repo().join("specs/out")).expect("link");
    let mut through_link = changeset.pending[0].clone();
    through_link.path = "specs/out/x.md".to_owned();
    assert!(apply_approved(&fixture.repo(), &through_link).is_err());
    assert!(!fixture.outside().join("x.md").exists());
}

#[test]
fn a_parse_error_rejects_the_whole_answer() {
    // Refusals are per edit, but a malformed answer never reaches apply: nothing is written.
    let answer = r#"{"create-or-update":{"ok.txt":"a","ok.txt":"b"}}"#;
    assert!(parse(answer, &Default::default()).is_err());
}

mod confinement {
    use super::*;
    use proptest::prelude::*;

    fn segment() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just(".."),
            Just("."),
            Just(""),
            Just(".git"),
            Just(".GIT"),
            Just("link"),
            Just("docs"),
            Just("hl.txt"),
            Just("fifo"),
            Just("src"),
            Just("specs"),
            Just("new"),
            Just("x.txt"),
            Just("canary"),
            Just("a\\b"),
            Just("/"),
            Just(".config"),
            Just("bork.json"),
        ]
    }

    fn raw_path() -> impl Strategy<Value = String> {
        proptest::collection::vec(segment(), 1..5).prop_map(|parts| parts.join("/"))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// PT1: whatever the edit set, only applied paths change, never `.git`, the config or
        /// anything outside the repository.
        #[test]
        fn random_edit_sets_stay_confined(
            writes in proptest::collection::btree_map(raw_path(), "[a-z]{0,8}", 0..8),
            deletes in proptest::collection::btree_set(raw_path(), 0..4),
        ) {
            let fixture = Fixture::new();
            let repo = fixture.repo();
            symlink(fixture.outside(), repo.join("link")).expect("link");
            symlink(".git", repo.join("docs")).expect("docs");
            std::fs::hard_link(fixture.outside().join("canary"), repo.join("hl.txt"))
                .expect("hardlink");
            let status = Command::new("mkfifo").arg(repo.join("fifo")).status().expect("mkfifo");
            prop_assert!(status.success());
            let deletes: Vec<String> =
                deletes.into_iter().filter(|d| !writes.contains_key(d)).collect();
            let plan = EditPlan {
                writes: writes
                    .into_iter()
                    .map(|(path, contents)| ProposedWrite { path, contents })
                    .collect(),
                deletes,
            };
            let changeset = run(&fixture, &plan);
            let total = changeset.applied.len()
                + changeset.refused.len()
                + changeset.pending.len()
                + changeset.unchanged.len();
            prop_assert_eq!(total, plan.writes.len() + plan.deletes.len());
        }
    }
}

mod races {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Swaps two directory entries atomically, in a loop, until told to stop.
    fn racer(
        dir: PathBuf,
        a: &'static str,
        b: &'static str,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<u64> {
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let result = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    dir.join(a),
                    rustix::fs::CWD,
                    dir.join(b),
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                if result.is_ok() {
                    swaps += 1;
                }
            }
            swaps
        })
    }

    /// S11: `dir` and a symlink to `outside/` trade places while `dir/f` is written.
    #[test]
    fn directory_swapped_for_a_symlink_never_leaks_a_write() {
        let fixture = Fixture::new();
        let repo = fixture.repo();
        std::fs::create_dir(repo.join("dir")).expect("dir");
        symlink(fixture.outside(), repo.join("alt")).expect("alt");
        let stop = Arc::new(AtomicBool::new(false));
        let handle = racer(repo.clone(), "dir", "alt", Arc::clone(&stop));
        let mut applied = 0;
        for round in 0..500 {
            let plan = plan(&[("dir/f", &format!("round {round}"))], &[]);
            let changeset = apply(&repo, &plan, &options()).expect("apply");
            applied += changeset.applied.len();
            assert!(
                !fixture.outside().join("f").exists(),
                "write escaped in round {round}"
            );
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = handle.join().expect("racer");
        assert!(swaps > 0, "the racer never swapped");
        assert!(applied > 0, "no write ever landed");
        let outside: Vec<_> = std::fs::read_dir(fixture.outside())
            .expect("outside")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(outside, ["canary"]);
    }

    /// S12 and D13: the final name (or the parent of a delete) trades places with a symlink to
    /// the outside canary; the canary is never modified or removed.
    #[test]
    fn final_component_swapped_for_a_symlink_never_reaches_the_canary() {
        let fixture = Fixture::new();
        let repo = fixture.repo();
        std::fs::write(repo.join("f"), "start").expect("f");
        symlink(fixture.outside().join("canary"), repo.join("alt")).expect("alt");
        let stop = Arc::new(AtomicBool::new(false));
        let handle = racer(repo.clone(), "f", "alt", Arc::clone(&stop));
        for round in 0..500 {
            let plan = plan(&[("f", &format!("round {round}"))], &[]);
            apply(&repo, &plan, &options()).expect("apply");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(handle.join().expect("racer") > 0, "the racer never swapped");
        assert_eq!(
            std::fs::read_to_string(fixture.outside().join("canary")).expect("canary"),
            "outside canary"
        );
    }

    #[test]
    fn parent_swapped_during_delete_never_removes_outside_files() {
        let fixture = Fixture::new();
        let repo = fixture.repo();
        std::fs::create_dir(repo.join("dir")).expect("dir");
        symlink(fixture.outside(), repo.join("alt")).expect("alt");
        let stop = Arc::new(AtomicBool::new(false));
        let handle = racer(repo.clone(), "dir", "alt", Arc::clone(&stop));
        for _ in 0..500 {
            let plan = plan(&[], &["dir/canary"]);
            apply(&repo, &plan, &options()).expect("apply");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(handle.join().expect("racer") > 0, "the racer never swapped");
        assert!(fixture.outside().join("canary").exists());
    }
}
