//! `bork-ci gc`: removes what dead runs left on the Docker engine.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{GC_TTL, load_config, repo_root};
use crate::exit::ExitCode;

pub(super) async fn gc(args: crate::cli::GcArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo).unwrap_or_else(|_| PathBuf::from("."));
    let resolved = load_config(&repo, &args.repo, &crate::cli::ConfigFlags::default(), env)?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let docker = crate::sandbox::docker::DockerSandbox::connect(
        resolved.docker_settings().map_err(anyhow::Error::new)?,
        &run_id,
    )
    .await
    .map_err(anyhow::Error::new)
    .context("connecting to the Docker engine")?;
    let ttl = std::time::Duration::from_secs(args.older_than_secs.unwrap_or(GC_TTL.as_secs()));
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
    let builds = crate::blocking::run(|| stale_build_caches(&resolved.artifact_root(), ttl));
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "removed {} container(s), {} volume(s), {} unused cache volume(s), {} older runner image(s) and {} build cache folder(s) of killed runs",
        report.containers.len(),
        report.volumes.len(),
        caches.len(),
        images.len(),
        builds
    );
    Ok(ExitCode::Converged)
}

/// Removes the build caches (`<artifact root>/build/<run>`) a killed run left, those untouched
/// for longer than `ttl` (a run removes its own at its end); returns how many went.
fn stale_build_caches(root: &std::path::Path, ttl: std::time::Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(root.join("build")) else {
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
