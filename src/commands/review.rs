//! `bork-ci review`: the LLM reviewer once, speaking the checker contract.

use std::io::Write;

use anyhow::{Context, Result};

use super::repo_root;
use crate::cli::ReviewArgs;
use crate::config;
use crate::exit::ExitCode;
use crate::reconcile;

pub(super) async fn review(args: ReviewArgs, env: &config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let mut flags = args.flags.values();
    if let Some(severity) = &args.min_severity {
        flags.push((
            "review.min-severity",
            serde_json::Value::from(severity.clone()),
            "--min-severity",
        ));
    }
    let resolved = config::load(&repo, args.repo.config.as_deref(), env, &flags)
        .map_err(anyhow::Error::new)
        .context("invalid configuration")?;
    resolved
        .validate_llm()
        .map_err(anyhow::Error::new)
        .context("invalid configuration")?;
    let min_severity = resolved.config.review.min_severity;
    let plan = resolved.run_plan(crate::cli::child_logging());
    let (outcome, usage) =
        reconcile::review_once(&plan.review, &plan.pack.base, &repo, args.files.as_deref()).await?;
    let output = crate::review::checker_output(&outcome, min_severity, args.format);
    if let Err(error) = &outcome {
        tracing::error!("the review failed: {error}");
    }
    tracing::info!(
        input_tokens = usage.input_tokens,
        output_tokens = usage.output_tokens,
        cached_input_tokens = usage.cached_input_tokens,
        "review tokens: in {} out {} cached {}",
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens
    );
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(output.stdout.as_bytes())
        .context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    Ok(ExitCode::of_checker_contract(output.exit_code))
}
