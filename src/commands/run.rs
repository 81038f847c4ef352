//! `bork-ci run`: one job from the command line to its report, SARIF, summary and outputs.

use anyhow::{Context, Result};

use super::{load_config, repo_root, sandbox_for, shutdown_signal};
use crate::cli::RunArgs;
use crate::config;
use crate::exit::ExitCode;
use crate::reconcile::{self, RunOptions};
use crate::report;

pub(super) async fn run(mut args: RunArgs, json_logs: bool, env: &config::Env) -> Result<ExitCode> {
    // Flags left off the command line fall back to their variables (`config::env_vars::FLAG_VARS`).
    args.fail_on = args.fail_on_or_env(env)?;
    args.github = crate::delivery::github_flags_from_env(&args.github, env)
        .map_err(anyhow::Error::new)
        .context("reading the GitHub settings")?;
    let repo = repo_root(&args.repo)?;
    let in_actions = env.get("GITHUB_ACTIONS").is_some_and(|value| value == "true");
    // Whether GitHub started this run for a pull request does not depend on the configuration:
    // on such events the checkout's file is not trusted, and the security keys (`github.*`,
    // where bork-ci pushes and what it labels, among them) come from the base branch's file.
    let pull_request = args
        .github
        .github_event_name
        .as_deref()
        .is_some_and(|name| name.starts_with("pull_request"));
    let defaults = config::GithubConfig::default();
    let event = match pull_request {
        true => crate::delivery::github_context(
            &crate::delivery::github_flags(&args.github, &defaults),
            &defaults,
            env,
        )?,
        false => None,
    };
    let resolved = match &event {
        Some(ctx) => crate::delivery::trusted_config(ctx, &repo, &args.repo, &args.flags, env).await?,
        None => load_config(&repo, &args.repo, &args.flags, env)?,
    };
    let github_flags = crate::delivery::github_flags(&args.github, &resolved.config.github);
    let github = crate::delivery::github_context(&github_flags, &resolved.config.github, env)?;
    if in_actions {
        crate::actions::mask_secrets(
            resolved
                .llm_secrets()
                .into_iter()
                .chain(github.as_ref().map(|ctx| &ctx.token)),
        );
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let options = RunOptions {
        repo: repo.clone(),
        run_id: run_id.clone(),
        stop_token: in_actions.then(crate::untrusted::random_token),
        json_logs,
    };

    let skipped = github.as_ref().and_then(|ctx| ctx.untrusted_context());
    let report = if let Some(reason) = skipped {
        tracing::warn!("{reason}; nothing was run");
        let mut report = report::RunReport::new(
            run_id,
            resolved.config.llm.provider_name(),
            resolved.config.llm.model.clone(),
            "none".into(),
            resolved.config.max_iterations,
        );
        report.finish(report::RunStatus::Skipped, reason);
        report
    } else {
        resolved
            .validate_llm()
            .map_err(anyhow::Error::new)
            .context("invalid configuration")?;
        resolved.check_artifact_root(&repo).map_err(anyhow::Error::new)?;
        let sandbox = sandbox_for(&resolved, &repo, &run_id).await?;
        // Everything the loop reads, resolved once.
        let plan = resolved.run_plan(crate::cli::child_logging());
        let work = async {
            match &github {
                Some(ctx) => {
                    let wait = github_flags.wait_for_approval.map(Into::into);
                    let mut delivery = crate::delivery::Github::new(ctx, &resolved, &repo, wait);
                    reconcile::run(&plan, &sandbox, options, &mut delivery).await
                }
                None => reconcile::run(&plan, &sandbox, options, &mut reconcile::Local).await,
            }
        };
        let result = tokio::select! {
            result = work => result,
            signal = shutdown_signal() => {
                tracing::warn!("received {signal}: removing this run's containers and stopping");
                sandbox.cleanup().await;
                crate::blocking::run(|| crate::edit::apply::sweep_temp_files(&repo));
                Err(anyhow::anyhow!("interrupted by {signal}"))
            }
        };
        sandbox.cleanup().await;
        match result {
            Ok(report) => report,
            Err(error) => {
                // Errors before the loop could start: still leave a report and the outputs.
                let mut report = report::RunReport::new(
                    run_id,
                    resolved.config.llm.provider_name(),
                    resolved.config.llm.model.clone(),
                    sandbox.kind().as_str().to_owned(),
                    resolved.config.max_iterations,
                );
                report.error = Some(crate::report::error_text(&error));
                report.finish(report::RunStatus::Error, "error");
                report
            }
        }
    };
    crate::outputs::write(
        &report,
        &crate::outputs::Destinations {
            report: args.report.as_deref(),
            sarif: args.sarif.as_deref(),
            step_summary: github_flags.github_step_summary.as_deref(),
            step_outputs: github_flags.github_output.as_deref(),
        },
        resolved.config.correctness_checker.as_deref(),
    )?;
    let code = crate::cli::run_exit(report.status, &args.fail_on);
    if code != ExitCode::from(report.status) {
        tracing::info!(
            "the run ended {}; --fail-on does not name that outcome, so the process exits 0 (its own exit code is {})",
            report.status.as_str(),
            ExitCode::from(report.status).code()
        );
    }
    Ok(code)
}
