//! `bork-ci config`: the resolved configuration and where each value came from.

use std::io::Write;

use anyhow::{Context, Result};

use super::{load_config, repo_root};
use crate::cli::ConfigArgs;
use crate::exit::ExitCode;

pub(super) fn show_config(args: ConfigArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags, env)?;
    let text = match args.format {
        crate::cli::ConfigFormat::Text => resolved.explain(),
        crate::cli::ConfigFormat::Json => format!("{:#}\n", resolved.explain_json()),
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes()).context("writing to stdout")?;
    // A provider chosen without the address only the file can give (Azure's endpoint) is an
    // error here too, after the values are shown; what the environment or `llm.script` may
    // still bring is the run's to check.
    resolved
        .validate_provider_address()
        .map_err(anyhow::Error::new)
        .context("invalid configuration")?;
    Ok(ExitCode::Converged)
}
