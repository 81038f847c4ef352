//! `bork-ci gc`: removes what dead runs left on the Docker engine and under the artifact root:
//! their build caches, and dependency and warm build caches no run has used for the TTL (a key no longer
//! current, see `sandbox::deps`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{GC_TTL, load_config, repo_root};
use crate::exit::ExitCode;

pub(super) async fn gc(args: crate::cli::GcArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo).unwrap_or_else(|_| PathBuf::from("."));
    let resolved = load_config(&repo, &args.repo, &crate::cli::ConfigFlags::default(), env)?;
    let ttl = std::time::Duration::from_secs(args.older_than_secs.unwrap_or(GC_TTL.as_secs()));
    // The host's folders first: a `--sandbox none` user may have no Docker engine.
    let builds = crate::blocking::run(|| stale_folders(&resolved.artifact_root().join("build"), ttl));
    let deps = if args.keep_caches {
        0
    } else {
        crate::blocking::run(|| {
            stale_folders(&resolved.artifact_root().join("deps"), ttl)
                + stale_folders(&resolved.artifact_root().join("warm"), ttl)
        })
    };
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let docker = crate::sandbox::docker::DockerSandbox::connect(
        resolved.docker_settings().map_err(anyhow::Error::new)?,
        &run_id,
    )
    .await
    .map_err(anyhow::Error::new)
    .context("connecting to the Docker engine")?;
    let report = crate::sandbox::docker::gc(&docker, ttl)
        .await
        .map_err(anyhow::Error::new)
        .context("removing leftovers")?;
    let caches = if args.keep_caches {
        Vec::new()
    } else {
        crate::sandbox::docker::gc_caches(&docker, ttl)
            .await
            .map_err(anyhow::Error::new)
            .context("removing unused cache volumes")?
    };
    let images = if args.keep_caches {
        Vec::new()
    } else {
        crate::sandbox::docker::gc_runner_images(&docker)
            .await
            .map_err(anyhow::Error::new)
            .context("removing older runner images")?
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "removed {} container(s), {} volume(s), {} unused cache volume(s), {} older runner image(s), {} build cache folder(s) of killed runs and {} dependency or warm build cache folder(s) unused for the TTL",
        report.containers.len(),
        report.volumes.len(),
        caches.len(),
        images.len(),
        builds,
        deps
    );
    Ok(ExitCode::Converged)
}

/// Removes the folders in `parent` untouched for longer than `ttl`; returns how many went.
/// `build/<run>`: the build caches a killed run left (a run removes its own at its end).
/// `deps/<key>`: dependency caches no run has used for that long (each round stamps the one it
/// uses, `SharedDirs::use_deps_key`), such as those of keys no longer current; `warm/<key>`
/// likewise, the warm build caches (stamped by each job that writes or copies one).
fn stale_folders(parent: &std::path::Path, ttl: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return 0;
    };
    let now = std::time::SystemTime::now();
    entries
        .filter_map(Result::ok)
        .filter(|entry| {
            entry.path().symlink_metadata().is_ok_and(|meta| {
                meta.is_dir()
                    && meta
                        .modified()
                        .ok()
                        .and_then(|modified| now.duration_since(modified).ok())
                        .is_some_and(|age| age > ttl)
            })
        })
        .filter(|entry| std::fs::remove_dir_all(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "the test lays out its folders")]
mod tests {
    #[test]
    fn only_folders_unused_for_the_ttl_go() {
        let root = tempfile::tempdir().expect("tempdir");
        let day = std::time::Duration::from_secs(24 * 3600);
        for (name, age) in [("old", 3 * day), ("fresh", day / 2)] {
            let folder = root.path().join(name);
            std::fs::create_dir_all(folder.join("cargo-home")).expect("mkdir");
            let stamp = std::time::SystemTime::now() - age;
            std::fs::File::open(&folder)
                .and_then(|file| file.set_modified(stamp))
                .expect("stamp");
        }
        std::fs::write(root.path().join("a-file"), "x").expect("write");
        assert_eq!(super::stale_folders(root.path(), day), 1);
        assert!(!root.path().join("old").exists());
        assert!(root.path().join("fresh").exists());
        assert!(root.path().join("a-file").exists());
    }
}
