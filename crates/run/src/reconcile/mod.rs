//! The one owner of a run: it orders every stage, from a resumed run's saved state through each
//! approval round to the final report, and owns the run's budgets and final status.
//!
//! A run is: [`Delivery::resume`] (what earlier jobs of the run spent, and any human decisions
//! since), then rounds. A round (`round.rs`) packs the repository and iterates (model, apply,
//! judges) until the checks are clean or a budget runs out; the report so far goes to
//! [`Delivery::publish`]; when the round ended waiting for approval, [`Delivery::decisions`] may
//! bring new human decisions, which start the next round. Where results go (GitHub pull
//! requests, or nowhere for a local run) is the [`Delivery`]'s business; the order is decided
//! here only.
//!
//! The budgets are run-level (see [`crate::budget`]): tokens, cost and time are counted from the
//! run's first job and never reset; a human decision on a held edit grants up to
//! `max-iterations` new iterations, numbered on from the earlier ones.

pub mod held;
mod iterations;
mod judges;
mod options;
mod plan;
pub mod preflight;
mod round;
mod setup;
mod step;

use std::future::Future;
use std::path::PathBuf;

use anyhow::{Context, Result};

pub use judges::{ReviewAnswer, review_once, review_provider, review_with};
pub use options::{IterationHook, RunError};
pub use setup::{setup_job, use_deps_of};
pub use step::{estimate, initial_prompt, secret_in_prompt};

use crate::budget::{self, Spent};
use crate::report::{RunReport, RunStatus};
use crate::run_plan::RunPlan;
use bork_ci_sandbox::sandbox::Sandbox;
use options::{Lessons, RoundOptions};

/// What the caller gives a run besides its plan, the sandbox and the delivery.
pub struct RunOptions {
    pub repo: PathBuf,
    pub run_id: String,
    /// Print held and refused contents between stop-commands markers with this token.
    pub stop_token: Option<String>,
    /// The edit step logs JSON lines (`--log-format json`).
    pub json_logs: bool,
}

/// Where a run starts from, as the delivery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The run's first job.
    Fresh,
    /// A later job of a run: what the earlier ones spent, and the human decisions on held edits
    /// rendered for the model (`None`: nothing new to tell it).
    Continue { spent: Spent, decisions: Option<String> },
    /// Held edits still wait for a human and nothing new was decided: there is nothing to do.
    StillWaiting { spent: Spent },
}

/// Where a run's results go besides the report. The owner ([`run`]) calls `resume` once, then
/// `iteration_hook`, then per round `publish`, and `decisions` after a round that ended waiting
/// for approval.
pub trait Delivery {
    /// Opens the delivery and reads what earlier jobs of this run left.
    fn resume(&mut self) -> impl Future<Output = Result<Resume>>;
    /// Called after each iteration that ran (GitHub: commits it on bork-ci's branch).
    fn iteration_hook(&self) -> Option<IterationHook>;
    /// Publishes the report of every round so far; may add pull requests and warnings to it.
    fn publish(&mut self, report: &mut RunReport) -> impl Future<Output = Result<()>>;
    /// Adds the pull requests earlier jobs published to a report that published nothing.
    fn link(&self, report: &mut RunReport);
    /// After a round that ended waiting for approval: new human decisions rendered for the
    /// model, or `None` to stop (nothing new, or no waiting asked for).
    fn decisions(&mut self) -> impl Future<Output = Result<Option<String>>>;
}

/// A run whose results are its report alone.
pub struct Local;

impl Delivery for Local {
    async fn resume(&mut self) -> Result<Resume> {
        Ok(Resume::Fresh)
    }

    fn iteration_hook(&self) -> Option<IterationHook> {
        None
    }

    async fn publish(&mut self, _report: &mut RunReport) -> Result<()> {
        Ok(())
    }

    fn link(&self, _report: &mut RunReport) {}

    async fn decisions(&mut self) -> Result<Option<String>> {
        Ok(None)
    }
}

/// Runs a whole run: resume, rounds, publishing, waiting for decisions. Errors before the first
/// iteration of the first round are returned as errors (exit 2); errors later end the report,
/// which still holds every earlier round, with status `error`.
pub async fn run(
    run_plan: &RunPlan,
    sandbox: &Sandbox,
    options: RunOptions,
    delivery: &mut impl Delivery,
) -> Result<RunReport> {
    let resume = delivery.resume().await?;
    let mut round = RoundOptions {
        repo: options.repo,
        run_id: options.run_id,
        stop_token: options.stop_token,
        preamble: None,
        after_iteration: delivery.iteration_hook(),
        json_logs: options.json_logs,
        spent: Spent::default(),
        learned: Lessons::default(),
        start: preflight::Start::default(),
    };
    match resume {
        Resume::Fresh => {}
        Resume::Continue { spent, decisions } => {
            if let Some(decisions) = &decisions {
                tracing::info!("resuming a run with new decisions on held edits");
                round.preamble = Some(decisions.clone());
            }
            round.spent = spent;
        }
        Resume::StillWaiting { spent } => {
            let mut report = RunReport::new(
                round.run_id.clone(),
                run_plan.model.llm.provider_name(),
                run_plan.model.llm.model.clone(),
                sandbox.kind().as_str().to_owned(),
                run_plan.max_iterations,
            );
            report.run_totals = spent;
            report.finish(
                RunStatus::AwaitingApproval,
                "edits held for approval have no decision yet",
            );
            delivery.link(&mut report);
            return Ok(report);
        }
    }

    let mut baseline = Some(setup::before_first_call(run_plan, sandbox, &round).await?);
    if let Some(Some(seen)) = &baseline {
        round.start = preflight::Start::of(&seen.checker, &seen.findings);
    }
    let mut whole: Option<RunReport> = None;
    for index in 0..budget::MAX_ROUNDS {
        // Each round's setup runs on its approved revision (the first's ran before the
        // preflight); approved edits may have changed what the dependency cache is keyed by.
        let this = if index == 0 {
            round::round(run_plan, sandbox, &round).await
        } else {
            match setup::setup_round(run_plan, sandbox, &round.repo, round.stop_token.as_deref()).await {
                Ok(()) => round::round(run_plan, sandbox, &round).await,
                Err(error) => Err(error),
            }
        };
        let mut report = match (this, whole.take()) {
            (Ok(this), None) => this,
            (Ok(this), Some(mut earlier)) => {
                earlier.absorb(this);
                earlier
            }
            (Err(error), None) => return Err(error),
            (Err(error), Some(mut earlier)) => {
                // A later round could not start (say the approved edits grew the prompt past
                // its budget): the earlier rounds still count, and the report says why.
                earlier.error = Some(crate::report::error_text(&error));
                earlier.finish(RunStatus::Error, "error");
                earlier
            }
        };
        if let Some(baseline) = baseline.take() {
            report.baseline = baseline;
        }
        // The approved tree's verdict is the first round's: a later round starts from edits
        // approved since.
        round.start = preflight::Start::default();
        round.spent = report.run_totals;
        if let Err(error) = delivery.publish(&mut report).await {
            // The run's record stays whole (its iterations, tokens, the pushed branch): only
            // the delivery failed.
            report.error = Some(crate::report::error_text(&error));
            report.finish(RunStatus::Error, "delivering the result on GitHub failed");
            return Ok(report);
        }
        let waiting = report.status == RunStatus::AwaitingApproval;
        whole = Some(report);
        if !waiting {
            break;
        }
        match delivery.decisions().await? {
            Some(decisions) => round.preamble = Some(decisions),
            None => break,
        }
    }
    whole.context("the run ran no round")
}
