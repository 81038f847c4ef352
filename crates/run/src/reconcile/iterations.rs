//! One round's iterations: each is the edit step, then the judges, then either a stop (clean,
//! a budget, an unchanged failure, edits waiting on approval) or the judges' feedback to the model.

use std::time::Instant;

use anyhow::{Context, Result, anyhow};

use super::judges::{JudgeGuard, Judgement, Judging, judge, review_provider_learned};
use super::options::{Halt, Lessons, RoundOptions};
use super::plan::Plan;
use super::preflight::{Repeats, Unchanged};
use super::step::{StepResult, run_edit_step};
use crate::budget::{Budget, Stop};
use crate::report::{Durations, IterationReport, JudgeStatus, RunReport, RunStatus};
use crate::run_plan::RunPlan;
use bork_ci_core::findings::Findings;
use bork_ci_edit::edit::apply::{Changeset, EditAction};
use bork_ci_edit::prompt::{self, Feedback};
use bork_ci_llm::llm::{self, Conversation, Provider, Role, Turn, Usage};
use bork_ci_sandbox::sandbox::Sandbox;

/// Warns, once a run, that a server reported no usage and the figures (which the budgets count)
/// are estimated; the report and the summary mark them too.
fn warn_if_first_estimate(report: &mut RunReport, added: Usage) {
    let before = report.usage.estimated_answers + report.review_usage.estimated_answers;
    if added.estimated_answers > 0 && before == 0 {
        let message = "the model's server reported no token usage for an answer (or none for its request): bork-ci estimates it (about 4 bytes a token of the request and the answer), the budgets count the estimate, and the report marks it as estimated";
        tracing::warn!("{message}");
        report.warnings.push(message.to_owned());
    }
}

/// One round's iterations: what each reads (the settings, the sandbox, the judges' guard, the
/// budget) and what lasts from one to the next (what the model's and the reviewer's providers
/// learned about their servers). Each iteration is [`Iterations::step`], then
/// [`Iterations::judge`], then [`Iterations::stop`] or the judges' feedback to the model.
pub(super) struct Iterations<'a> {
    pub(super) run_plan: &'a RunPlan,
    pub(super) sandbox: &'a Sandbox,
    pub(super) options: &'a RoundOptions,
    pub(super) plan: &'a Plan,
    pub(super) guard: &'a JudgeGuard,
    pub(super) budget: &'a Budget,
    /// When the round started (for the progress lines).
    pub(super) started: Instant,
    /// What the edit steps' providers learned, passed from step to step (and from round to
    /// round of the job).
    pub(super) learned: llm::Learned,
    /// One reviewer provider for the round, so what it learns about its server lasts.
    pub(super) reviewer: Option<Provider>,
    /// The judges' failures so far, to stop on one the model's edit did not change.
    pub(super) unchanged: Unchanged,
}

/// What the judges made of one iteration's tree.
pub(super) struct IterationEnd {
    /// Clean: no finding, no judge that failed to run (or, without judges, a usable answer).
    pub(super) clean: bool,
    /// A judge failed to run.
    pub(super) failed: bool,
    /// A judge ran, or would have run had the answer been usable.
    pub(super) has_judge: bool,
}

impl<'a> Iterations<'a> {
    /// The round's one reviewer provider, when the reviewer is on, with what earlier jobs
    /// learned about its server.
    pub(super) fn reviewer(
        run_plan: &RunPlan,
        options: &RoundOptions,
        plan: &Plan,
    ) -> Result<Option<Provider>> {
        plan.review_min_severity
            .map(|_| {
                review_provider_learned(&run_plan.review.model, Lessons::read(&options.learned.reviewer))
            })
            .transpose()
    }

    /// Runs iterations until the checks are clean, a budget or `max-iterations` runs out, or
    /// an error; the report says which.
    pub(super) async fn run(
        mut self,
        conversation: &mut Conversation,
        report: &mut RunReport,
    ) -> Result<(), Halt> {
        let first = self.options.spent.iterations;
        let max = first.saturating_add(self.plan.max_iterations);
        for number in first.saturating_add(1)..=max {
            let iteration_started = Instant::now();
            if let Err(stop) = self.budget.time_left() {
                report.finish(RunStatus::NeedsHuman, stop.to_string());
                return Ok(());
            }
            let llm_started = Instant::now();
            let step = self.step(conversation, report, number, max).await?;
            let llm_ms = llm_started.elapsed().as_millis() as u64;
            let mut iteration = IterationReport {
                number,
                applied: step.changeset.applied.clone(),
                refused: step.changeset.refused.clone(),
                pending: step.changeset.pending.clone(),
                unchanged: step.changeset.unchanged.clone(),
                answer_error: step.answer_error.clone(),
                parse_retries: step.parse_retries,
                usage: step.usage,
                ..IterationReport::default()
            };
            let mut feedback = feedback_of(&step, number, max);
            let judged = match self.judge(&step).await {
                Ok(judged) => judged,
                Err(Halt::Budget(stop)) => {
                    iteration.durations = durations(llm_ms, step.apply_ms, 0, iteration_started);
                    report.iterations.push(iteration);
                    report.finish(RunStatus::NeedsHuman, stop.to_string());
                    return Ok(());
                }
                Err(halt) => return Err(halt),
            };
            let repeats = judged
                .as_ref()
                .and_then(|judgement| self.unchanged.observe(&judgement.failures));
            let verdict = IterationEnd {
                has_judge: judged.is_some() || (step.answer_error.is_some() && self.plan.has_judges()),
                clean: match &judged {
                    Some(judgement) => judgement.findings.is_empty() && judgement.failures.is_empty(),
                    None => step.answer_error.is_none(),
                },
                failed: judged
                    .as_ref()
                    .is_some_and(|judgement| !judgement.failures.is_empty()),
            };
            match judged {
                Some(judgement) => {
                    iteration.checker = Some(judgement.checker.clone());
                    iteration.reviewer = judgement.reviewer.clone();
                    iteration.verifier = judgement.verifier.clone();
                    iteration.review_usage = judgement.review_usage;
                    warn_if_first_estimate(report, judgement.review_usage);
                    report.review_usage += judgement.review_usage;
                    report.warnings.extend(judgement.warnings.iter().cloned());
                    iteration.findings = judgement.findings.clone();
                    feedback.findings = judgement.findings;
                    feedback.failures = judgement.failures;
                    iteration.durations =
                        durations(llm_ms, step.apply_ms, judgement.check_ms, iteration_started);
                    iteration.durations.review_ms = judgement.review_ms;
                    iteration.durations.verify_ms = judgement.verify_ms;
                    tracing::info!(
                        iteration = number,
                        max_iterations = max,
                        findings = iteration.findings.len(),
                        judge_failed = verdict.failed,
                        check_ms = judgement.check_ms,
                        "iteration {number} of {max}: {} finding(s){}",
                        iteration.findings.len(),
                        if verdict.failed {
                            ", a judge failed to run"
                        } else {
                            ""
                        }
                    );
                    for line in super::held::finding_lines(&iteration.findings) {
                        tracing::info!(iteration = number, "  {line}");
                    }
                }
                None => {
                    let skipped = step.answer_error.is_some();
                    iteration.checker = Some(if skipped {
                        JudgeStatus::Skipped
                    } else {
                        JudgeStatus::Absent
                    });
                    iteration.durations = durations(llm_ms, step.apply_ms, 0, iteration_started);
                }
            }
            report.findings_left = match &step.answer_error {
                Some(error) => Findings {
                    per_file_findings: Vec::new(),
                    overall_findings: vec![bork_ci_core::findings::Finding::CodeReview {
                        file: None,
                        finding: format!("the model's answer could not be used: {error}"),
                    }],
                },
                None => iteration.findings.clone(),
            };
            if let Some(hook) = &self.options.after_iteration {
                hook(&iteration).with_context(|| format!("recording iteration {number}"))?;
            }
            report.iterations.push(iteration);
            if let Some(repeats) = repeats {
                let (status, reason) = unchanged_failure(&feedback.failures, repeats, report);
                report.finish(status, reason);
                return Ok(());
            }
            if let Some((status, reason)) = self.stop(&verdict, &step, &feedback, report, number, max) {
                report.finish(status, reason);
                return Ok(());
            }
            conversation.turns.push(Turn {
                role: Role::User,
                text: prompt::feedback(&feedback),
            });
        }
        Ok(())
    }

    /// The iteration's edit step: asks the model, applies what it may, records what it cost
    /// and what was refused or held; a step that failed or ran out of time is an error.
    pub(super) async fn step(
        &mut self,
        conversation: &mut Conversation,
        report: &mut RunReport,
        number: u32,
        max: u32,
    ) -> Result<StepResult, Halt> {
        tracing::info!(
            iteration = number,
            max_iterations = max,
            elapsed_ms = self.started.elapsed().as_millis() as u64,
            "iteration {number} of {max}: asking the model ({}s elapsed)",
            self.started.elapsed().as_secs()
        );
        let step = run_edit_step(
            self.sandbox,
            self.run_plan,
            self.options,
            conversation,
            self.plan,
            self.guard,
            self.budget,
            &mut self.learned,
        )
        .await?;
        Lessons::add(&self.options.learned.model, self.learned);
        // Counted before anything else, so a step that failed still adds what it cost.
        warn_if_first_estimate(report, step.usage);
        report.usage += step.usage;
        if let Some(error) = &step.error {
            return Err(anyhow!("{error}").into());
        }
        if step.out_of_time {
            return Err(Halt::Budget(Stop::Time));
        }
        report.refused.extend(step.changeset.refused.iter().cloned());
        for held in &step.changeset.pending {
            report
                .pending_approvals
                .retain(|earlier| earlier.path != held.path);
            report.pending_approvals.push(held.clone());
        }
        {
            let stdout = std::io::stdout();
            let mut lock = bork_ci_core::secrets::Redacting(stdout.lock());
            let _ = crate::report::print_edits(
                &mut lock,
                number,
                &step.changeset.refused,
                &step.changeset.pending,
                self.options.stop_token.as_deref(),
            );
        }
        tracing::info!(
            iteration = number,
            max_iterations = max,
            applied = step.changeset.applied.len(),
            refused = step.changeset.refused.len(),
            held = step.changeset.pending.len(),
            unchanged = step.changeset.unchanged.len(),
            input_tokens = step.usage.input_tokens,
            output_tokens = step.usage.output_tokens,
            cached_input_tokens = step.usage.cached_input_tokens,
            "iteration {number} of {max}: {} applied, {} refused, {} held for approval, {} unchanged; tokens in {} out {} cached {}",
            step.changeset.applied.len(),
            step.changeset.refused.len(),
            step.changeset.pending.len(),
            step.changeset.unchanged.len(),
            step.usage.input_tokens,
            step.usage.output_tokens,
            step.usage.cached_input_tokens,
        );
        Ok(step)
    }

    /// The judges on the tree the step left (none when the answer could not be used).
    pub(super) async fn judge(&self, step: &StepResult) -> Result<Option<Judgement>, Halt> {
        if step.answer_error.is_some() {
            return Ok(None);
        }
        let judged = judge(
            self.sandbox,
            &self.options.repo,
            self.run_plan,
            self.reviewer.as_ref(),
            self.budget,
            self.judging(),
        )
        .await;
        if let Some(reviewer) = &self.reviewer {
            Lessons::add(&self.options.learned.reviewer, reviewer.learned());
        }
        judged
    }

    /// How this round's judges run.
    pub(super) fn judging(&self) -> Judging<'a> {
        Judging {
            plan: self.plan,
            guard: self.guard,
            stop_token: self.options.stop_token.as_deref(),
            build: if self.plan.confirm_clean {
                bork_ci_sandbox::sandbox::BuildCache::Layer
            } else {
                bork_ci_sandbox::sandbox::BuildCache::Run
            },
        }
    }

    /// Why the round ends awaiting approval after an unclean iteration, if it does: the checks
    /// wait on held edits (the model proposed one again, or a finding names one). Each such
    /// edit records the findings that wait on it, for its approval pull request.
    pub(super) fn waits_on_held(
        &self,
        step: &StepResult,
        feedback: &Feedback,
        report: &mut RunReport,
        number: u32,
    ) -> Option<String> {
        let first = self.options.spent.iterations;
        let held_before: std::collections::BTreeSet<String> = report
            .iterations
            .iter()
            .filter(|iteration| iteration.number > first && iteration.number < number)
            .flat_map(|iteration| iteration.pending.iter().map(|edit| edit.path.clone()))
            .collect();
        let waiting = super::held::waiting(
            &report.pending_approvals,
            &step.changeset.pending,
            &held_before,
            &feedback.findings,
        );
        if waiting.is_empty() {
            return None;
        }
        let paths: Vec<String> = waiting.iter().map(|(path, _)| format!("`{path}`")).collect();
        for (path, findings) in waiting {
            if let Some(edit) = report.pending_approvals.iter_mut().find(|edit| edit.path == path) {
                edit.waiting = findings;
            }
        }
        Some(format!(
            "the checks wait on held edit(s) {}: approve or reject them to go on",
            paths.join(", ")
        ))
    }

    /// Whether the round ends after this iteration, and how: clean, an unusable answer with no
    /// judge, a token or cost budget spent, or the last iteration. (Time is checked as the next
    /// iteration starts.)
    pub(super) fn stop(
        &self,
        verdict: &IterationEnd,
        step: &StepResult,
        feedback: &Feedback,
        report: &mut RunReport,
        number: u32,
        max: u32,
    ) -> Option<(RunStatus, String)> {
        if verdict.clean {
            let status = if report.pending_approvals.is_empty() {
                RunStatus::Converged
            } else {
                RunStatus::AwaitingApproval
            };
            let reason = if verdict.has_judge {
                "the checks are clean"
            } else {
                "no correctness checker: one iteration"
            };
            return Some((status, reason.to_owned()));
        }
        if let Some(reason) = self.waits_on_held(step, feedback, report, number) {
            return Some((RunStatus::AwaitingApproval, reason));
        }
        if !verdict.has_judge && step.answer_error.is_some() {
            return Some((
                RunStatus::NeedsHuman,
                "no correctness checker, and the model's answer could not be used".to_owned(),
            ));
        }
        if let Some(stop @ (Stop::Tokens | Stop::Cost)) =
            self.budget.exhausted(report.usage, report.review_usage)
        {
            return Some((RunStatus::NeedsHuman, stop.to_string()));
        }
        if number < max {
            return None;
        }
        if verdict.failed {
            report.error = feedback
                .failures
                .first()
                .map(|(judge, reason, _)| format!("the {judge} failed to run: {reason}"));
            return Some((
                RunStatus::Error,
                "the last iteration ended on a judge that failed to run".to_owned(),
            ));
        }
        Some((
            RunStatus::NeedsHuman,
            format!("{max} iterations without converging"),
        ))
    }
}

/// How a round ends on a judge failure the edit did not change: an error (exit 2) that says
/// so, or awaiting approval when edits are held (one of them may be the fix).
pub(super) fn unchanged_failure(
    failures: &[(String, String, String)],
    repeats: Repeats,
    report: &mut RunReport,
) -> (RunStatus, String) {
    let message = super::preflight::unchanged_message(failures, repeats);
    tracing::warn!("{message}");
    if report.pending_approvals.is_empty() {
        report.error = Some(message);
        (
            RunStatus::Error,
            "the edit did not change the judge's failure".to_owned(),
        )
    } else {
        report.warnings.push(message);
        (
            RunStatus::AwaitingApproval,
            "the judge's failure is unchanged; edits are held for approval".to_owned(),
        )
    }
}

/// What the model is told about its own answer (the judges' part is added once they ran).
pub(super) fn feedback_of(step: &StepResult, number: u32, max: u32) -> Feedback {
    Feedback {
        iteration: number,
        max_iterations: max,
        applied: written(&step.changeset, EditAction::Write),
        deleted: written(&step.changeset, EditAction::Delete),
        unchanged: step.changeset.unchanged.clone(),
        refused: step
            .changeset
            .refused
            .iter()
            .map(|edit| (edit.path.clone(), edit.reason.clone()))
            .collect(),
        pending: step
            .changeset
            .pending
            .iter()
            .map(|edit| (edit.path.clone(), edit.rule.clone()))
            .collect(),
        answer_error: step.answer_error.clone(),
        ..Feedback::default()
    }
}

pub(super) fn written(changeset: &Changeset, action: EditAction) -> Vec<String> {
    changeset
        .applied
        .iter()
        .filter(|edit| std::mem::discriminant(&edit.action) == std::mem::discriminant(&action))
        .map(|edit| edit.path.clone())
        .collect()
}

pub(super) fn durations(step_ms: u64, apply_ms: u64, check_ms: u64, started: Instant) -> Durations {
    Durations {
        llm_ms: step_ms.saturating_sub(apply_ms),
        apply_ms,
        check_ms,
        total_ms: started.elapsed().as_millis() as u64,
        ..Durations::default()
    }
}
