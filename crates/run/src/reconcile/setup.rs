//! Before the first model call: the setup commands fill the dependency cache, and the preflight
//! runs the checker once on the approved tree.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::judges::{run_checker, show_judge_output, with_heartbeat};
use super::options::{RoundOptions, RunError};
use crate::report::JudgeStatus;
use crate::run_plan::RunPlan;
use bork_ci_core::findings::Findings;
use bork_ci_sandbox::checker::{self, Verdict};
use bork_ci_sandbox::sandbox::{Job, JobKind, Outcome, Sandbox};

/// What a job does before its first model call: the checker must exist, the setup commands
/// (`sandbox.setup`) fill the dependency cache, and the checker runs once on the approved tree
/// (`preflight`). A setup command that fails, or a checker that cannot start (see
/// [`super::preflight::cannot_start`]), ends the run here (exit 2) with its output and the likely
/// fix: no model call is paid for a judge no edit can fix. A checker that starts and reports
/// findings or a failure is the run's baseline, which the first prompt shows the model.
pub(super) async fn before_first_call(
    run_plan: &RunPlan,
    sandbox: &Sandbox,
    options: &RoundOptions,
) -> Result<Option<crate::report::Baseline>> {
    let repo = &options.repo;
    let stop_token = options.stop_token.as_deref();
    if let Some(checker) = &run_plan.checker
        && let Some(problem) = bork_ci_core::blocking::run(|| checker::missing(repo, checker))
    {
        return Err(RunError::CheckerUnusable { problem }.into());
    }
    setup_round(run_plan, sandbox, repo, stop_token).await?;
    let Some(checker_path) = run_plan.checker.as_ref().filter(|_| run_plan.preflight) else {
        return Ok(None);
    };
    let warm_or_layer = if bork_ci_core::blocking::run(|| super::plan::code_is_committed(run_plan, repo)) {
        bork_ci_sandbox::sandbox::BuildCache::Warm
    } else {
        tracing::info!(
            "preflight: code in the tree differs from its commit; the warm build cache is read, not written"
        );
        bork_ci_sandbox::sandbox::BuildCache::Layer
    };
    tracing::info!("preflight: running the correctness checker on the approved tree");
    let started = Instant::now();
    let timeout = run_plan.checker_timeout;
    let preflight = run_checker(
        sandbox,
        repo,
        &run_plan.secret_env,
        checker_path,
        // The approved revision, before any model call: the one job that writes the warm cache,
        // when no code in the tree differs from its commit (else it reads it, as judges do).
        (timeout, warm_or_layer),
        stop_token,
        "preflight: ",
    )
    .await?;
    let findings = match &preflight.verdict {
        Verdict::FailedToRun { reason, .. }
            if super::preflight::cannot_start(preflight.outcome, &preflight.stderr_tail) =>
        {
            let fix = checker::likely_fix(
                preflight.outcome,
                &preflight.stderr_tail,
                sandbox.image(JobKind::Checker).as_deref(),
            );
            return Err(RunError::PreflightFailed {
                reason: reason.clone(),
                fix,
                stderr_tail: bork_ci_core::untrusted::tail(&preflight.stderr_tail, 1500),
            }
            .into());
        }
        Verdict::FailedToRun { reason, .. } => {
            // It started and failed (the code does not build, a test module does not import, a
            // timeout): the model may fix that, so it is the baseline, in the first prompt.
            tracing::warn!(
                "preflight: the correctness checker runs but failed on the approved tree ({reason}): the model is asked to fix it, with its output"
            );
            Findings::default()
        }
        Verdict::Clean => Findings::default(),
        Verdict::Findings { findings } => findings.clone(),
    };
    tracing::info!(
        baseline_findings = findings.len(),
        "preflight: the checker runs; {} finding(s) on the approved tree (the baseline)",
        findings.len()
    );
    Ok(Some(crate::report::Baseline {
        checker: JudgeStatus::from(&preflight.verdict),
        findings,
        duration_ms: started.elapsed().as_millis() as u64,
    }))
}

/// What a round does before anything else, on the approved revision (the tree as the round
/// starts: the commit the run started from plus approved edits): computes the dependency
/// cache's key once (`sandbox::deps::key`: the repository, the setup commands, the judges'
/// image id and every file that is not code), makes it the cache its jobs mount (a new key is
/// an empty cache) and runs the setup commands into it, unless they already filled that very
/// cache (the same key is the same inputs; see `Sandbox::setup_done`).
pub(super) async fn setup_round(
    run_plan: &RunPlan,
    sandbox: &Sandbox,
    repo: &Path,
    stop_token: Option<&str>,
) -> Result<()> {
    let key = use_deps_of(run_plan, sandbox, repo).await?;
    if run_plan.setup.commands.is_empty() {
        return Ok(());
    }
    if sandbox.setup_done(repo).await {
        tracing::info!(
            "setup: skipped: the setup commands already filled the dependency cache {key}, and nothing they read has changed since (the cache's key covers the commands, the judges' image and every file that is not code; `bork-ci gc` removes the cache)"
        );
        return Ok(());
    }
    run_setup(run_plan, sandbox, repo, stop_token).await?;
    sandbox.mark_setup_done(repo).await;
    Ok(())
}

/// Computes the dependency cache's key of the tree at `repo` (the approved revision) and makes
/// it the cache the sandbox's jobs mount from now on; returns the key.
pub async fn use_deps_of(run_plan: &RunPlan, sandbox: &Sandbox, repo: &Path) -> Result<String> {
    let image_id = match sandbox.judge_image_id(repo).await {
        Ok(id) => id,
        Err(error) => {
            // The judges fail with this error where they start; the key still names the image.
            tracing::debug!("the judges' image id: {error}");
            sandbox
                .image(JobKind::Checker)
                .unwrap_or_else(|| "unknown".to_owned())
        }
    };
    let steps = bork_ci_core::blocking::run(|| {
        bork_ci_sandbox::verify::load_steps(repo, &run_plan.verification.steps)
    })
    .context("reading the verification steps")?;
    let judge = bork_ci_core::blocking::run(|| run_plan.judge_rules_in(repo))
        .map_err(anyhow::Error::msg)?
        .matcher()
        .context("compiling the judge files' globs")?;
    let code = super::plan::code_rules(run_plan, repo, &steps)?
        .matcher()
        .map_err(anyhow::Error::msg)
        .context("compiling the code globs")?;
    // Code (and tests) alone leave the key as it is: every judge file, and every other file
    // that is not code, is part of it.
    let is_code = |path: &str| {
        let folded = bork_ci_edit::edit::judge_files::fold(path);
        judge.classify(&folded).is_none()
            && matches!(
                code.kind(&folded),
                bork_ci_edit::edit::code::Kind::Code | bork_ci_edit::edit::code::Kind::Test
            )
    };
    let identity = run_plan.deps_identity(repo);
    let inputs = bork_ci_sandbox::sandbox::deps::KeyInputs {
        identity: &identity,
        setup: &run_plan.setup.commands,
        image_id: &image_id,
    };
    let started = Instant::now();
    let key = bork_ci_core::blocking::run(|| bork_ci_sandbox::sandbox::deps::key(repo, &inputs, &is_code))
        .map_err(anyhow::Error::msg)
        .context("computing the dependency cache's key")?;
    let shared = sandbox.shared().clone();
    bork_ci_core::blocking::run(|| shared.use_deps_key(&key));
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "the dependency cache of this round: {key} (judges' image {image_id})"
    );
    Ok(key)
}

/// Runs the setup commands once, one after another in one job of the judge's image, on the
/// approved revision, with `sandbox.setup-network`; they alone write the dependency cache.
/// The setup commands (`sandbox.setup`) as one job of the judges' image: each command as
/// `sh -c`, all within `sandbox.setup-timeout-secs`, no secret in their environment.
pub fn setup_job(run_plan: &RunPlan) -> (Job, Vec<Vec<String>>) {
    let commands = run_plan
        .setup
        .commands
        .iter()
        .map(|command| vec!["sh".to_owned(), "-c".to_owned(), command.clone()])
        .collect();
    let mut job = Job::new(JobKind::Setup, Vec::new(), run_plan.setup.timeout, 1 << 20);
    job.secret_env = run_plan.secret_env.clone();
    (job, commands)
}

pub(super) async fn run_setup(
    run_plan: &RunPlan,
    sandbox: &Sandbox,
    repo: &Path,
    stop_token: Option<&str>,
) -> Result<()> {
    let (job, commands) = setup_job(run_plan);
    tracing::info!(
        commands = commands.len(),
        network = %run_plan.setup.network,
        "setup: running {} command(s) on the approved revision (network: {})",
        commands.len(),
        run_plan.setup.network
    );
    let outputs = with_heartbeat("the setup commands", sandbox.run_sequence(repo, &job, &commands))
        .await
        .context("running the setup commands (`sandbox.setup`)")?;
    for (command, output) in run_plan.setup.commands.iter().zip(&outputs) {
        let mut printed = bork_ci_core::untrusted::tail_bytes(&output.stdout, 2048);
        printed.push_str(&bork_ci_core::untrusted::tail_bytes(&output.stderr, 4096));
        show_judge_output(
            &format!(
                "setup `{}`: output (last lines)",
                bork_ci_core::untrusted::one_line(command)
            ),
            &printed,
            stop_token,
        );
        if output.outcome != Outcome::Exited(0) {
            return Err(RunError::SetupFailed {
                command: bork_ci_core::untrusted::one_line(command),
                outcome: output.outcome.to_string(),
                tail: bork_ci_core::untrusted::tail(&printed, 1500),
            }
            .into());
        }
    }
    tracing::info!("setup: done");
    Ok(())
}
