#![expect(
    clippy::disallowed_methods,
    reason = "a build script reads cargo's variables and asks git for the commit"
)]
//! Build information for `bork-ci --version`: the commit and its date, when the crate is built
//! from its own git checkout. A build from a published package (no `.git` of its own) gets
//! neither, and `--version` prints the version alone.

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(dir).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=BORK_CI_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=BORK_CI_BUILD_DATE");
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".to_owned());
    let dir = Path::new(&manifest_dir);
    // Watched even when absent: a build without `.git` (a package) then reruns this script,
    // so a later build of the checkout in the same target directory finds its commit again.
    println!("cargo:rerun-if-changed={}", dir.join(".git").display());
    // Only the crate's own checkout counts: a package unpacked inside some other repository
    // (a vendor directory, `cargo package`'s verification) must not take that repository's commit.
    let own_checkout = git(dir, &["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .zip(dir.canonicalize().ok())
        .is_some_and(|(top, dir)| top == dir);
    let from_git = |args: &[&str]| own_checkout.then(|| git(dir, args)).flatten();
    let commit = std::env::var("BORK_CI_BUILD_COMMIT")
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| from_git(&["rev-parse", "--short=7", "HEAD"]));
    let date = std::env::var("BORK_CI_BUILD_DATE")
        .ok()
        .filter(|value| !value.is_empty())
        .or_else(|| from_git(&["log", "-1", "--format=%cs", "HEAD"]));
    if own_checkout {
        for path in [
            from_git(&["rev-parse", "--git-path", "HEAD"]),
            from_git(&["rev-parse", "--symbolic-full-name", "HEAD"])
                .and_then(|name| from_git(&["rev-parse", "--git-path", &name])),
            from_git(&["rev-parse", "--git-path", "packed-refs"]),
        ]
        .into_iter()
        .flatten()
        {
            let path = if Path::new(&path).is_absolute() {
                path
            } else {
                dir.join(path).display().to_string()
            };
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    let suffix = match (commit, date) {
        (Some(commit), Some(date)) => format!(" ({commit} {date})"),
        (Some(commit), None) => format!(" ({commit})"),
        _ => String::new(),
    };
    println!("cargo:rustc-env=BORK_CI_VERSION_SUFFIX={suffix}");
}
