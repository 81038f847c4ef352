//! `bork-ci verify`: the Verifier pipeline once, its result as JSON.

use std::io::Write;

use anyhow::{Context, Result};

use super::{load_config, repo_root, sandbox_for};
use crate::exit::ExitCode;

pub(super) async fn verify(args: crate::cli::VerifyArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags, env)?;
    let steps = crate::verify::load_steps(&repo, &resolved.verification_steps())
        .context("reading the verification steps")?;
    if steps.is_empty() {
        anyhow::bail!(
            "no verification steps: set `verification.steps` in .config/bork.json or add agent.yaml"
        );
    }
    resolved.check_artifact_root(&repo).map_err(anyhow::Error::new)?;
    let run_id = crate::verify::new_run_id();
    let sandbox = sandbox_for(&resolved, &repo, &run_id).await?;
    let mut options = crate::verify::VerifyOptions::new(resolved.artifact_root());
    options.timeout = std::time::Duration::from_secs(resolved.config.verification.timeout_secs);
    options.run_id = Some(run_id);
    options.secret_env = resolved.secret_env_names();
    let result = crate::verify::run(&sandbox, &repo, &steps, &options).await;
    sandbox.cleanup().await;
    let result = result.context("running the verifier")?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(result.to_json().as_bytes())
        .context("writing to stdout")?;
    stdout.write_all(b"\n").context("writing to stdout")?;
    Ok(ExitCode::from(result.status))
}
