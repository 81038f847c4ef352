//! The judges of an iteration: the checker and the Verifier as sandbox jobs, the reviewer
//! in-process, the guard that the judges' files did not drift, and one `Judgement` of them all.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::options::Halt;
use super::plan::Plan;
use crate::budget::Budget;
use crate::report::JudgeStatus;
use crate::run_plan::{Model, Review, RunPlan};
use bork_ci_core::findings::Findings;
use bork_ci_edit::review;
use bork_ci_llm::llm::{self, Conversation, FinishReason, Provider, ResponseFormat, Usage};
use bork_ci_sandbox::checker::{self, Verdict};
use bork_ci_sandbox::sandbox::Sandbox;

/// What the judges said about the tree after an iteration.
pub(super) struct Judgement {
    pub(super) checker: JudgeStatus,
    pub(super) verifier: Option<JudgeStatus>,
    pub(super) verify_ms: u64,
    pub(super) reviewer: Option<JudgeStatus>,
    pub(super) findings: Findings,
    pub(super) failures: Vec<(String, String, String)>,
    pub(super) check_ms: u64,
    pub(super) review_ms: u64,
    pub(super) review_usage: Usage,
    pub(super) warnings: Vec<String>,
}

/// The reviewer's model provider (`review.llm` over `llm`).
pub fn review_provider(model: &Model) -> Result<Provider> {
    review_provider_learned(model, llm::Learned::default())
}

/// [`review_provider`] starting from what earlier rounds learned about the reviewer's server.
pub(super) fn review_provider_learned(model: &Model, learned: llm::Learned) -> Result<Provider> {
    let mut settings = model.settings();
    learned.apply(&mut settings);
    Provider::new(settings).context("setting up the reviewer's model provider")
}

/// What the reviewer answered: a parsed review, or why its answer could not be used.
pub type ReviewAnswer = std::result::Result<review::ReviewResult, review::ReviewError>;

/// Asks the reviewer about the working tree's changes against `base`; `files` restricts the
/// review to those paths. Returns the parsed result and the tokens it used.
pub async fn review_once(
    reviewer: &Review,
    base: &str,
    repo: &Path,
    files: Option<&[String]>,
) -> Result<(ReviewAnswer, Usage)> {
    let provider = review_provider(&reviewer.model)?;
    review_with(&provider, reviewer, base, repo, files).await
}

/// [`review_once`] with a provider that lives across reviews (what it learns about its server
/// lasts for the run).
pub async fn review_with(
    provider: &Provider,
    reviewer: &Review,
    base: &str,
    repo: &Path,
    files: Option<&[String]>,
) -> Result<(ReviewAnswer, Usage)> {
    let (changed, diff) =
        review::changed_files(repo, base, files).context("collecting the changes to review")?;
    let policy = review::VersionPolicy {
        allow_prompt_patch_drift: reviewer.allow_prompt_patch_drift,
    };
    let before = provider.spent();
    let format = ResponseFormat {
        name: "review_result".into(),
        schema: review::request_schema(),
    };
    let ask = |system: String, user: String| {
        let format = &format;
        async move {
            let conversation = Conversation {
                system,
                prefix: user,
                turns: Vec::new(),
            };
            let completion = provider
                .complete(&conversation, Some(format))
                .await
                .with_context(|| format!("asking the reviewer, {}", provider.describe()))?;
            if completion.finish == FinishReason::Length {
                bail!("the reviewer's answer was cut off at the output token limit");
            }
            Ok(completion.text)
        }
    };
    let outcome = review::review(&changed, &diff, ask, &policy).await;
    // Every token of the review's calls, also of answers that could not be used.
    let usage = provider.spent().since(before);
    Ok((outcome, usage))
}

/// The judge files of the approved revision, which every judge of the round is held to (see
/// `judge_files`).
pub(super) struct JudgeGuard {
    pub(super) matcher: bork_ci_edit::edit::judge_files::Matcher,
    pub(super) baseline: bork_ci_edit::edit::judge_files::Baseline,
}

impl JudgeGuard {
    /// Records the judge files of the tree at `repo`, the approved revision of this round.
    pub(super) fn capture(plan: &Plan, repo: &Path, artifact_root: &Path) -> Result<JudgeGuard> {
        let mut matcher = plan
            .judge_rules
            .matcher()
            .context("compiling the judge files' globs")?;
        // An artifact root inside the repository is the runner's, not the approved revision's.
        let root = std::fs::canonicalize(artifact_root).unwrap_or_else(|_| artifact_root.to_owned());
        let top = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.to_owned());
        if let Ok(inside) = root.strip_prefix(&top)
            && let Some(inside) = inside.to_str().filter(|inside| !inside.is_empty())
        {
            matcher = matcher.excluding(inside.to_owned());
        }
        let started = Instant::now();
        let baseline = bork_ci_core::blocking::run(|| {
            bork_ci_edit::edit::judge_files::Baseline::capture(repo, &matcher)
        })
        .context("recording the judge files of the approved revision")?;
        tracing::debug!(
            judge_files = baseline.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recorded the approved judge files"
        );
        Ok(JudgeGuard { matcher, baseline })
    }

    /// The test files of the approved revision.
    pub(super) fn approved_tests(&self) -> &std::collections::BTreeSet<String> {
        self.baseline.tests()
    }

    /// Why the judges may not run on the tree as it is now: a judge file differs from the
    /// approved revision.
    pub(super) fn drift(&self, repo: &Path) -> Option<String> {
        let started = Instant::now();
        let checked = bork_ci_core::blocking::run(|| self.baseline.check(repo, &self.matcher));
        tracing::debug!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compared the judge files with the approved revision"
        );
        match checked {
            Ok(Ok(())) => None,
            Ok(Err(drift)) => Some(drift.to_string()),
            Err(error) => Some(format!(
                "the judge files could not be compared with the approved revision: {error}"
            )),
        }
    }
}

/// Runs the checker once (`limits`: its timeout, and the build cache it works in), with a
/// heartbeat while it runs, and shows its stderr afterwards; `label` prefixes what
/// is said about it (`preflight: `).
pub(super) async fn run_checker(
    sandbox: &Sandbox,
    repo: &Path,
    secret_env: &[String],
    checker_path: &str,
    (timeout, build): (Duration, bork_ci_sandbox::sandbox::BuildCache),
    stop_token: Option<&str>,
    label: &str,
) -> Result<checker::CheckerRun> {
    let run = with_heartbeat(
        &format!("{label}the correctness checker"),
        checker::run(sandbox, repo, checker_path, timeout, secret_env, build),
    )
    .await
    .with_context(|| format!("{label}running the correctness checker"))?;
    show_judge_output(
        &format!("{label}correctness checker `{checker_path}`: stderr (last lines)"),
        &run.stderr_tail,
        stop_token,
    );
    Ok(run)
}

/// How often a line says that a judge is still running.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(30);

/// Runs `work`, logging a line every [`HEARTBEAT`] while it runs.
pub(super) async fn with_heartbeat<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    let started = Instant::now();
    let mut work = std::pin::pin!(work);
    let mut beat = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = beat.tick() => tracing::info!(
                elapsed_secs = started.elapsed().as_secs(),
                "{what} is still running ({}s)",
                started.elapsed().as_secs()
            ),
        }
    }
}

/// Prints what a judge wrote on stderr (its tail, already redacted) for people: folded in a
/// group under GitHub Actions, its lines inside a stop-commands block.
pub(super) fn show_judge_output(title: &str, tail: &str, stop_token: Option<&str>) {
    if tail.trim().is_empty() {
        return;
    }
    let text = crate::report::judge_output_block(title, tail, stop_token);
    let stderr = std::io::stderr();
    let mut lock = bork_ci_core::secrets::Redacting(stderr.lock());
    let _ = std::io::Write::write_all(&mut lock, text.as_bytes());
}

/// How the judges of one iteration run.
#[derive(Clone, Copy)]
pub(super) struct Judging<'a> {
    /// The round's settings: which judges, their limits, the secrets kept from them.
    pub(super) plan: &'a Plan,
    /// The approved judge files they are held to.
    pub(super) guard: &'a JudgeGuard,
    /// Under GitHub Actions: the stop-commands token for their output.
    pub(super) stop_token: Option<&'a str>,
    /// The build cache they work in: each a throwaway layer over the warm cache of approved
    /// builds (`confirm-clean`), or the run's shared one.
    pub(super) build: bork_ci_sandbox::sandbox::BuildCache,
}

pub(super) async fn judge(
    sandbox: &Sandbox,
    repo: &Path,
    run_plan: &RunPlan,
    reviewer: Option<&Provider>,
    budget: &Budget,
    how: Judging<'_>,
) -> Result<Option<Judgement>, Halt> {
    let Judging {
        plan,
        guard,
        stop_token,
        build,
    } = how;
    let mut judgement = Judgement {
        checker: JudgeStatus::Absent,
        verifier: None,
        verify_ms: 0,
        reviewer: None,
        findings: Findings::default(),
        failures: Vec::new(),
        check_ms: 0,
        review_ms: 0,
        review_usage: Usage::default(),
        warnings: Vec::new(),
    };
    let mut any = false;
    // The comparison with the approved revision walks the whole tree. Where no judge can write
    // the tree (the Docker sandbox), one comparison before the first judge holds for them all;
    // with local processes each judge is compared before it runs, and the tree after the last.
    let fixed = sandbox.judges_leave_the_tree_as_it_is();
    let first_drift = std::cell::OnceCell::new();
    let drift = || -> Option<String> {
        if fixed {
            first_drift.get_or_init(|| guard.drift(repo)).clone()
        } else {
            guard.drift(repo)
        }
    };
    if let Some(checker_path) = &plan.checker {
        // A checker that was there at the start and is gone now failed to run: never "no checker".
        any = true;
        let started = Instant::now();
        let remaining = budget.time_left()?;
        let timeout = plan.checker_timeout.min(remaining);
        let verdict = match drift() {
            Some(reason) => Verdict::FailedToRun {
                reason,
                stderr_tail: String::new(),
            },
            None => {
                let run = run_checker(
                    sandbox,
                    repo,
                    &plan.secret_env,
                    checker_path,
                    (timeout, build),
                    stop_token,
                    "",
                )
                .await?;
                run.verdict
            }
        };
        judgement.checker = JudgeStatus::from(&verdict);
        judgement.check_ms = started.elapsed().as_millis() as u64;
        match verdict {
            Verdict::Clean => {}
            Verdict::Findings { findings } => judgement.findings.extend(findings),
            Verdict::FailedToRun { reason, stderr_tail } => {
                judgement
                    .failures
                    .push(("correctness checker".into(), reason, stderr_tail))
            }
        }
    }
    let steps = &plan.verifier_steps;
    if !steps.is_empty() {
        any = true;
        let started = Instant::now();
        let remaining = budget.time_left()?;
        let mut options = bork_ci_sandbox::verify::VerifyOptions::new(run_plan.artifact_root.clone());
        options.timeout = plan.verifier_timeout.min(remaining);
        options.secret_env = plan.secret_env.clone();
        options.build = build;
        let ran = match drift() {
            Some(reason) => Err(anyhow::anyhow!(reason)),
            None => with_heartbeat(
                "the verifier",
                bork_ci_sandbox::verify::run(sandbox, repo, steps, &options),
            )
            .await
            .map_err(anyhow::Error::new),
        };
        if let Ok(result) = &ran
            && result.status != bork_ci_sandbox::verify::Status::Pass
        {
            show_judge_output(
                &format!("verifier run {}: log (last lines)", result.run_id),
                &result.tail_log,
                stop_token,
            );
        }
        match ran {
            Ok(result) => {
                let findings = bork_ci_sandbox::verify::to_findings(&result);
                judgement.verifier = Some(match result.status {
                    bork_ci_sandbox::verify::Status::Pass if findings.is_empty() => JudgeStatus::Clean,
                    _ => JudgeStatus::Findings {
                        count: findings.len().max(1),
                    },
                });
                if result.status == bork_ci_sandbox::verify::Status::Fail && findings.is_empty() {
                    // Fail closed: a FAIL always reaches the model, even without a failed step.
                    judgement
                        .findings
                        .overall_findings
                        .push(bork_ci_core::findings::Finding::CodeReview {
                            file: None,
                            finding: format!(
                                "the verifier failed (run {}):\n{}",
                                result.run_id, result.tail_log
                            ),
                        });
                }
                judgement.findings.extend(findings);
            }
            Err(error) => {
                let reason = crate::report::error_text(&error);
                judgement.verifier = Some(JudgeStatus::FailedToRun {
                    reason: reason.clone(),
                    stderr_tail: String::new(),
                });
                judgement
                    .failures
                    .push(("verifier".into(), reason, String::new()));
            }
        }
        judgement.verify_ms = started.elapsed().as_millis() as u64;
    }
    // A judge that wrote a judge file itself (possible with `--sandbox none`) must not leave it
    // for the next iteration, nor end the run clean on it.
    if any && let Some(reason) = drift() {
        judgement
            .failures
            .push(("judge files".into(), reason, String::new()));
    }
    if let (Some(reviewer), Some(min_severity)) = (reviewer, plan.review_min_severity) {
        any = true;
        let started = Instant::now();
        let (outcome, usage) =
            review_with(reviewer, &run_plan.review, &run_plan.pack.base, repo, None).await?;
        judgement.review_usage = usage;
        judgement.review_ms = started.elapsed().as_millis() as u64;
        match outcome {
            Ok(result) => {
                let findings = review::to_findings(&result, min_severity);
                judgement.reviewer = Some(if findings.is_empty() {
                    JudgeStatus::Clean
                } else {
                    JudgeStatus::Findings {
                        count: findings.len(),
                    }
                });
                for diagnostic in &result.diagnostics {
                    if diagnostic.level != review::DiagnosticLevel::Info {
                        judgement
                            .warnings
                            .push(format!("reviewer: {} ({})", diagnostic.message, diagnostic.code));
                    }
                }
                judgement.findings.extend(findings);
            }
            Err(error) => {
                let reason = error.to_string();
                tracing::warn!("the reviewer failed to run: {reason}");
                judgement.reviewer = Some(JudgeStatus::FailedToRun {
                    reason: reason.clone(),
                    stderr_tail: String::new(),
                });
                judgement
                    .failures
                    .push(("reviewer".into(), reason, String::new()));
            }
        }
    }
    Ok(any.then_some(judgement))
}
