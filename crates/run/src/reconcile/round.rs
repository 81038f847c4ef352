//! One round of the loop (`loop` is a keyword): pack once, then per iteration ask the model
//! (with one corrected retry for an unusable answer), apply the edits, run the judges (checker,
//! verifier, reviewer), and feed what happened back, until the checks are clean or a budget runs
//! out. The budgets count on from what earlier rounds and jobs spent ([`RoundOptions::spent`]).
//! It does not render or print reports beyond progress lines, and it never touches the
//! repository except through `edit::apply`.

use std::time::Instant;

use anyhow::{Context, Result};

use super::iterations::Iterations;
use super::judges::JudgeGuard;
use super::options::{Halt, Lessons, RoundOptions, RunError};
use super::plan::Plan;
use super::preflight::Unchanged;
use super::step::{estimate, initial_prompt, secret_in_prompt};
use crate::budget::Budget;
use crate::report::{RunReport, RunStatus};
use crate::run_plan::RunPlan;
use bork_ci_edit::edit::policy::Protection;
use bork_ci_llm::llm::Provider;
use bork_ci_sandbox::checker::{self};
use bork_ci_sandbox::sandbox::Sandbox;

/// Runs the loop to its end and returns the report; errors before the first iteration are
/// returned as errors (exit 2), errors later end the report with status `error`.
pub(super) async fn round(
    run_plan: &RunPlan,
    sandbox: &Sandbox,
    options: &RoundOptions,
) -> Result<RunReport> {
    let started = Instant::now();
    let repo = &options.repo;

    let swept = bork_ci_core::blocking::run(|| bork_ci_edit::edit::apply::sweep_temp_files(repo));
    if swept > 0 {
        tracing::warn!("removed {swept} temporary file(s) an interrupted run left in the working tree");
    }
    if let Some(checker) = &run_plan.checker
        && let Some(problem) = bork_ci_core::blocking::run(|| checker::missing(repo, checker))
    {
        return Err(RunError::CheckerUnusable { problem }.into());
    }
    // What the judges are held to: the judge files as this round starts (the approved revision:
    // the commit the run started from, plus approved edits; an earlier round could only end
    // clean with the tree's judge files unchanged).
    let (mut conversation, snapshot) = bork_ci_core::blocking::run(|| initial_prompt(repo, &run_plan.pack))?;
    // The snapshot's contents are in the prompt now: only its file count is kept.
    let (packed_files, not_shown) = (snapshot.files.len(), snapshot.not_shown());
    drop(snapshot);
    let plan = Plan::resolve(run_plan, repo, not_shown)?;
    let guard = JudgeGuard::capture(&plan, repo, &run_plan.artifact_root)?;
    let budget = Budget::start(plan.limits, options.spent, started);
    if let Some(preamble) = &options.preamble {
        conversation.prefix.push('\n');
        conversation.prefix.push_str(preamble);
    }
    if let Some(note) = &options.start.note {
        conversation.prefix.push_str(note);
    }
    let estimate = estimate(&conversation);
    if estimate > run_plan.context_budget_tokens {
        return Err(RunError::ContextBudget {
            estimate,
            budget: run_plan.context_budget_tokens,
        }
        .into());
    }
    if let Some(window) = run_plan.model.llm.context_window
        && estimate > window
    {
        tracing::warn!(
            "the packed prompt is about {estimate} tokens, over the model's context window of {window} (`llm.context-window`); the server may refuse it or silently drop its start"
        );
    }
    if let Some(name) = secret_in_prompt(run_plan, &conversation, &run_plan.env) {
        return Err(RunError::SecretInPrompt { name }.into());
    }
    let provider = Provider::new(run_plan.model.settings()).context("setting up the model provider")?;
    if run_plan.model.llm.seed.is_some() && !provider.sends_seed() {
        tracing::warn!(
            "llm.seed is set, but {} has no seed parameter; it is not sent",
            provider.describe()
        );
    }
    // Checked here so that bad globs end the run before any model call.
    Protection::new(
        run_plan.checker.as_deref(),
        &run_plan.approval.edits_require_approval,
        &plan.judge_rules,
    )
    .context("building the approval rules")?;

    let mut report = RunReport::new(
        options.run_id.clone(),
        provider.describe(),
        run_plan.model.llm.model.clone(),
        sandbox.kind().as_str().to_owned(),
        run_plan.max_iterations,
    );
    report.prompt_tokens_estimate = estimate;
    tracing::info!(
        files = packed_files,
        tokens_estimate = estimate,
        model = %provider.describe(),
        "packed {} files, about {estimate} tokens; model: {}",
        packed_files,
        provider.describe()
    );

    let outcome = if let Some(stop) = budget.exhausted(report.usage, report.review_usage) {
        report.finish(RunStatus::NeedsHuman, stop.to_string());
        Ok(())
    } else {
        match Iterations::reviewer(run_plan, options, &plan).map_err(Halt::Error) {
            Ok(reviewer) => {
                let iterations = Iterations {
                    run_plan,
                    sandbox,
                    options,
                    plan: &plan,
                    guard: &guard,
                    budget: &budget,
                    started,
                    learned: Lessons::read(&options.learned.model),
                    reviewer,
                    unchanged: Unchanged::new(options.start.failure.clone()),
                };
                iterations.run(&mut conversation, &mut report).await
            }
            Err(error) => Err(error),
        }
    };
    match outcome {
        Ok(()) => {}
        Err(Halt::Budget(stop)) => report.finish(RunStatus::NeedsHuman, stop.to_string()),
        Err(Halt::Error(error)) => {
            report.error = Some(crate::report::error_text(&error));
            report.finish(RunStatus::Error, "error");
        }
    }
    report.cost_usd = budget.cost(report.usage);
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.run_totals = options.spent.plus(report.spent());
    Ok(report)
}
