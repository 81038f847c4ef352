//! `bork-ci gc`: removes what dead runs left on the Docker engine.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::{GC_TTL, load_config, repo_root};
use crate::exit::ExitCode;

pub(super) async fn gc(args: crate::cli::GcArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo).unwrap_or_else(|_| PathBuf::from("."));
    let resolved = load_config(&repo, &args.repo, &crate::cli::ConfigFlags::default())?;
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
        crate::sandbox::docker::gc_caches(&docker)
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
        "removed {} container(s), {} volume(s), {} unused cache volume(s) and {} older runner image(s)",
        report.containers.len(),
        report.volumes.len(),
        caches.len(),
        images.len()
    );
    Ok(ExitCode::Converged)
}
