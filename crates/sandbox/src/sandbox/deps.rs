//! The dependency cache's key: which `/deps` a round's setup commands fill and its judges read.
//!
//! A key names everything the cache can depend on: the repository (its identity and base
//! branch, because installed packages may point back at its path), the setup commands, the id
//! of the image the judges run in, and the path, mode and content of every file of the tree that
//! is not code (what git selects: tracked, and untracked but not ignored). Any change to one of
//! them is a new key, and a new key starts with an empty cache: nothing an earlier cache holds
//! (a package a model-edited requirement installed, since reverted) is ever carried over.
//! Caches of keys no run uses any more are removed by `bork-ci gc` once unused for its TTL.
//! Reads files and asks git for the list; writes nothing.

use std::path::Path;

use sha2::Digest as _;

/// Largest listing of paths read from git.
const MAX_LISTING: u64 = 256 << 20;
/// Most bytes of file content hashed for one key (past that the key is an error).
const MAX_CONTENT: u64 = 8 << 30;

/// What goes into a key besides the tree's files.
#[derive(Debug, Clone)]
pub struct KeyInputs<'a> {
    /// The repository's identity and base branch (`config::Resolved::deps_identity`).
    pub identity: &'a str,
    /// `sandbox.setup`, in order.
    pub setup: &'a [String],
    /// The id of the judges' image (`local` for the `none` backend).
    pub image_id: &'a str,
}

/// The key of the dependency cache for the tree at `repo`: 24 hex digits of a SHA-256 over
/// `inputs` and the path, mode and content of every file git selects for which `is_code` (of
/// its repository-relative path) is false. Symlinks count by their target's text, files git
/// lists but the tree lacks as absent. The error names what could not be read.
pub fn key(repo: &Path, inputs: &KeyInputs<'_>, is_code: &dyn Fn(&str) -> bool) -> Result<String, String> {
    let listing = bork_ci_core::git::run_bounded(
        repo,
        &["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        MAX_LISTING,
        &[0],
    )
    .map_err(|error| format!("listing the files of the tree: {error}"))?;
    if listing.cut {
        return Err(format!("the tree lists more than {MAX_LISTING} bytes of paths"));
    }
    let mut paths: Vec<&str> = listing
        .output
        .stdout
        .split(|byte| *byte == 0)
        .filter(|raw| !raw.is_empty())
        .filter_map(|raw| std::str::from_utf8(raw).ok())
        .collect();
    paths.sort_unstable();
    paths.dedup();
    let mut hasher = sha2::Sha256::new();
    let mut field = |bytes: &[u8]| {
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(b"bork-ci deps 1");
    field(inputs.identity.as_bytes());
    field(inputs.image_id.as_bytes());
    field(&(inputs.setup.len() as u64).to_le_bytes());
    for command in inputs.setup {
        field(command.as_bytes());
    }
    let mut budget = MAX_CONTENT;
    for path in paths.into_iter().filter(|path| !is_code(path)) {
        field(path.as_bytes());
        let full = repo.join(path);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                field(b"absent");
                continue;
            }
            Err(error) => return Err(format!("reading {path}: {error}")),
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&full).map_err(|error| format!("reading {path}: {error}"))?;
            field(b"link");
            field(target.as_os_str().as_encoded_bytes());
        } else if meta.is_file() {
            let executable = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0;
            field(if executable { b"file+x" } else { b"file" });
            let mut content = sha2::Sha256::new();
            let read = bork_ci_core::safe_fs::stream_regular(&full, budget, |piece| content.update(piece))
                .map_err(|error| format!("reading {path}: {error}"))?;
            budget -= read;
            field(&content.finalize());
        } else {
            // A folder (a submodule) or something that is no file: its kind alone.
            field(if meta.is_dir() { b"folder" } else { b"other" });
        }
    }
    Ok(hex::encode(hasher.finalize())[..24].to_owned())
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "the tests lay out their trees")]
mod tests {
    use super::*;

    fn git(repo: &Path, args: &[&str]) {
        bork_ci_core::git::run(repo, args).expect("git");
    }

    #[test]
    fn the_key_follows_every_non_code_file_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path();
        git(repo, &["init", "-q"]);
        std::fs::write(repo.join("requirements.txt"), "pytest\n").expect("write");
        std::fs::write(repo.join("app.py"), "print(1)\n").expect("write");
        std::fs::write(repo.join(".gitignore"), "/build\n").expect("write");
        std::fs::create_dir(repo.join("build")).expect("mkdir");
        let setup = vec!["pip install -r requirements.txt".to_owned()];
        let inputs = KeyInputs {
            identity: "repo\nmain",
            setup: &setup,
            image_id: "sha256:aaa",
        };
        let is_code = |path: &str| path.ends_with(".py");
        let key_now = |inputs: &KeyInputs<'_>| key(repo, inputs, &is_code).expect("key");
        let first = key_now(&inputs);
        assert_eq!(first.len(), 24);
        assert_eq!(key_now(&inputs), first, "the same tree, the same key");

        // Code and ignored files do not move it.
        std::fs::write(repo.join("app.py"), "print(2)\n").expect("write");
        std::fs::write(repo.join("build/out.txt"), "x").expect("write");
        assert_eq!(key_now(&inputs), first);

        // A non-code file's content, mode, a new one, a link: each is a new key.
        let mut seen = vec![first.clone()];
        let mut changed = |what: &str, key: String| {
            assert!(!seen.contains(&key), "{what} kept an earlier key");
            seen.push(key);
        };
        std::fs::write(repo.join("requirements.txt"), "pytest\n./plugin\n").expect("write");
        changed("a requirement", key_now(&inputs));
        std::fs::set_permissions(
            repo.join("requirements.txt"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        changed("the mode", key_now(&inputs));
        std::fs::write(repo.join("setup.cfg"), "[x]\n").expect("write");
        changed("a new file", key_now(&inputs));
        std::os::unix::fs::symlink("requirements.txt", repo.join("constraints.txt")).expect("link");
        changed("a link", key_now(&inputs));
        // So are the setup commands and the image.
        let other_setup = vec!["pip install .".to_owned()];
        changed(
            "the setup",
            key_now(&KeyInputs {
                setup: &other_setup,
                ..inputs.clone()
            }),
        );
        changed(
            "the image",
            key_now(&KeyInputs {
                image_id: "sha256:bbb",
                ..inputs.clone()
            }),
        );
    }

    #[test]
    fn a_fifo_among_the_files_never_hangs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = dir.path();
        git(repo, &["init", "-q"]);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            repo.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let inputs = KeyInputs {
            identity: "r",
            setup: &[],
            image_id: "local",
        };
        // Git does not list a FIFO; a FIFO under a listed name is refused when read.
        assert!(key(repo, &inputs, &|_| false).is_ok());
        std::fs::write(repo.join("data"), "x").expect("write");
        git(repo, &["add", "data"]);
        std::fs::remove_file(repo.join("data")).expect("rm");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            repo.join("data"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let started = std::time::Instant::now();
        let result = key(repo, &inputs, &|_| false);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(result.is_ok(), "{result:?}");
    }
}
