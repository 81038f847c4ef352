//! Shared fixtures: real git repositories in temp dirs, and the `bork-ci` binary with a clean
//! environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// A git repository in a temp dir whose `main` holds the initial files.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    /// Creates the repository with `files` committed on `main`.
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        for (path, contents) in files {
            repo.write(path, contents);
        }
        repo.commit("initial");
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating directories); `#!` files become executable.
    pub fn write(&self, path: &str, contents: &str) {
        let full = self.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(&full, contents).expect("write");
        if contents.starts_with("#!") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.path().join(path)).unwrap_or_else(|_| "<absent>".into())
    }

    pub fn git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(["-c", "user.name=test", "-c", "user.email=test@example.invalid"])
            .args(args)
            .current_dir(self.path())
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn commit(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
    }

    /// A hash of every file under `.git`, to show it was not touched.
    pub fn git_dir_hash(&self) -> String {
        tree_hash(&self.path().join(".git"))
    }
}

/// sha256 over the paths, modes and contents of every entry below `root` (links not followed).
pub fn tree_hash(root: &Path) -> String {
    let mut entries = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let key = path
                .strip_prefix(root)
                .expect("prefix")
                .to_string_lossy()
                .into_owned();
            if meta.is_dir() {
                stack.push(path);
                entries.insert(key, b"dir".to_vec());
            } else if meta.file_type().is_symlink() {
                entries.insert(
                    key,
                    std::fs::read_link(&path)
                        .expect("link")
                        .to_string_lossy()
                        .as_bytes()
                        .to_vec(),
                );
            } else {
                entries.insert(key, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut hasher = Sha256::new();
    for (key, value) in entries {
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(&value);
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// The `bork-ci` binary with an environment cleared of anything that could change its behaviour.
pub fn bork() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bork-ci"));
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy().into_owned();
        if name.starts_with("BORK_") || name.starts_with("GITHUB_") || name.ends_with("_API_KEY") {
            command.env_remove(name);
        }
    }
    command.env("BORK_SANDBOX_KIND", "none");
    command
}

/// Writes a scripted-model file with these answers and returns its path.
pub fn script(dir: &Path, answers: &[serde_json::Value]) -> PathBuf {
    let path = dir.join("answers.json");
    std::fs::write(&path, serde_json::json!({ "answers": answers }).to_string()).expect("write script");
    path
}

/// A checker that is clean when `file` contains `needle`, and reports a finding otherwise.
pub fn checker_wanting(file: &str, needle: &str) -> String {
    format!(
        "#!/bin/sh\nif grep -q '{needle}' '{file}' 2>/dev/null; then\n  echo '{{\"per_file_findings\":[],\"overall_findings\":[]}}'\n  exit 0\nfi\necho '{{\"per_file_findings\":[{{\"provenance\":\"code-review\",\"file\":\"{file}\",\"finding\":\"{file} lacks {needle}\"}}],\"overall_findings\":[]}}'\nexit 1\n"
    )
}

/// Reads the JSON report at `path`.
pub fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written")).expect("report is JSON")
}
