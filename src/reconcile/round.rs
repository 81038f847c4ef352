//! One round of the loop (`loop` is a keyword): pack once, then per iteration ask the model
//! (with one corrected retry for an unusable answer), apply the edits, run the judges (checker,
//! verifier, reviewer), and feed what happened back, until the checks are clean or a budget runs
//! out. The budgets count on from what earlier rounds and jobs spent ([`RoundOptions::spent`]).
//! It does not render or print reports beyond progress lines, and it never touches the
//! repository except through `edit::apply`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use secrecy::ExposeSecret;

use super::plan::Plan;
use super::preflight::{Repeats, Unchanged};
use crate::budget::{Budget, Spent, Stop};
use crate::checker::{self, Verdict};
use crate::config::Resolved;
use crate::edit::apply::{Changeset, EditAction};
use crate::edit::policy::Protection;
use crate::edit_step::{self, EditStepInput, EditStepOutput};
use crate::findings::Findings;
use crate::llm::{self, Conversation, FinishReason, Provider, ResponseFormat, Role, Turn, Usage};
use crate::pack::{self, PackOptions};
use crate::prompt::{self, Feedback};
use crate::report::{Durations, IterationReport, JudgeStatus, RunReport, RunStatus};
use crate::review;
use crate::sandbox::{Job, JobKind, Outcome, Sandbox};

/// Everything one round needs besides the configuration; the run's owner ([`super::run`]) fills
/// it and carries what was spent from round to round.
pub(super) struct RoundOptions {
    pub repo: PathBuf,
    pub run_id: String,
    /// Print held and refused contents between stop-commands markers with this token.
    pub stop_token: Option<String>,
    /// Text appended to the first message (human decisions on held edits, when resuming).
    pub preamble: Option<String>,
    /// Called after each iteration that ran (commits it on bork-ci's branch on GitHub).
    pub after_iteration: Option<IterationHook>,
    /// The edit step logs JSON lines (`--log-format json`).
    pub json_logs: bool,
    /// What earlier rounds and jobs of this run spent: the budgets count it, iterations are
    /// numbered on from it.
    pub spent: Spent,
    /// What the model's and the reviewer's servers turned out not to accept, learned in
    /// earlier rounds of this job; each round starts from it and adds to it.
    pub learned: Lessons,
    /// What the preflight saw on the approved tree (first round only): its output for the first
    /// prompt, and the failure an edit must change.
    pub start: super::preflight::Start,
}

/// What providers learned about their servers (see [`llm::Learned`]), kept for the rest of a job.
#[derive(Debug, Default)]
pub struct Lessons {
    pub model: std::sync::Mutex<llm::Learned>,
    pub reviewer: std::sync::Mutex<llm::Learned>,
}

impl Lessons {
    fn read(lesson: &std::sync::Mutex<llm::Learned>) -> llm::Learned {
        *lesson.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn add(lesson: &std::sync::Mutex<llm::Learned>, learned: llm::Learned) {
        let mut kept = lesson.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *kept = kept.merge(learned);
    }
}

/// Called after each iteration with its report.
pub type IterationHook = Box<dyn Fn(&IterationReport) -> Result<()> + Send + Sync>;

/// A typed error that ends the run before the loop could start, with its own exit code (2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "the packed prompt is about {estimate} tokens, over the context budget of {budget} (`context-budget-tokens`); run `bork-ci pack` to see it, and add what the model need not see to .gitignore"
    )]
    ContextBudget { estimate: u64, budget: u64 },
    #[error("the packed prompt contains the value of {name}; refusing to send a secret to the model")]
    SecretInPrompt { name: String },
    #[error("{problem} (`correctness-checker`); nothing was sent to the model")]
    CheckerUnusable { problem: String },
    #[error(
        "the setup command `{command}` failed ({outcome}); nothing was sent to the model. Its output ends:\n{tail}"
    )]
    SetupFailed {
        command: String,
        outcome: String,
        tail: String,
    },
    #[error(
        "preflight: the correctness checker cannot run on the approved tree: {reason}; nothing was sent to the model.\nLikely fix: {fix}\nIts stderr ends:\n{stderr_tail}"
    )]
    PreflightFailed {
        reason: String,
        fix: String,
        stderr_tail: String,
    },
}

/// Packs the repository and renders the constant part of the conversation.
pub fn initial_prompt(repo: &Path, resolved: &Resolved) -> Result<(Conversation, pack::RepoSnapshot)> {
    let snapshot = pack::snapshot(
        repo,
        &PackOptions {
            base: resolved.config.base.clone(),
            max_file_bytes: resolved.config.max_file_bytes,
            diff_base: resolved.config.diff_base.clone(),
            push: resolved.push.clone(),
        },
    )
    .with_context(|| format!("packing the repository at {}", repo.display()))?;
    let conversation = Conversation {
        system: prompt::system(),
        prefix: {
            let mut prefix = String::with_capacity(snapshot.text_bytes() as usize + 64 * 1024);
            prompt::prefix_into(
                &mut prefix,
                |out| snapshot.render_files_into(out),
                |out| snapshot.render_spec_diff_into(out),
            );
            prefix
        },
        turns: Vec::new(),
    };
    Ok((conversation, snapshot))
}

/// Token estimate of the constant part of the conversation.
pub fn estimate(conversation: &Conversation) -> u64 {
    pack::estimate_tokens(&conversation.system) + pack::estimate_tokens(&conversation.prefix)
}

/// The name of the first secret whose value the constant part of the conversation holds: the
/// LLM key, or the value in `env` of any variable [`Resolved::secret_env_names`] lists (the
/// `*_URL` ones are endpoints, not secrets). Values under 8 bytes are too short to match safely.
pub fn secret_in_prompt(
    resolved: &Resolved,
    conversation: &Conversation,
    env: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let holds = |value: &str| {
        let value = value.trim();
        value.len() >= 8 && (conversation.prefix.contains(value) || conversation.system.contains(value))
    };
    if let Some(key) = &resolved.api_key
        && holds(key.expose_secret())
    {
        return Some(resolved.config.llm.key_env());
    }
    for credentials in [&resolved.llm_credentials, &resolved.review_llm_credentials] {
        if let Some((name, _)) = credentials
            .secrets
            .iter()
            .find(|(_, value)| holds(value.expose_secret()))
        {
            return Some(name.clone());
        }
    }
    resolved
        .secret_env_names()
        .into_iter()
        .filter(|name| !name.ends_with("_URL"))
        .find(|name| env.get(name).is_some_and(|value| holds(value)))
}

/// What one edit step produced.
struct StepResult {
    apply_ms: u64,
    changeset: Changeset,
    answer_error: Option<String>,
    parse_retries: u32,
    /// Every token the step's model calls cost, also when the step failed.
    usage: Usage,
    /// The step itself failed (model unreachable, bad settings).
    error: Option<String>,
    out_of_time: bool,
}

/// Runs the edit step through the sandbox (see `edit_step`) and appends the model's turns.
#[expect(
    clippy::too_many_arguments,
    reason = "the round's parts the step reads and the lessons it updates"
)]
async fn run_edit_step(
    sandbox: &Sandbox,
    resolved: &Resolved,
    options: &RoundOptions,
    conversation: &mut Conversation,
    plan: &Plan,
    guard: &JudgeGuard,
    budget: &Budget,
    learned: &mut llm::Learned,
) -> Result<StepResult, Halt> {
    let config = &resolved.config;
    let remaining = budget.time_left()?;
    let state = tempfile::Builder::new()
        .prefix("bork-ci-step-")
        .tempdir()
        .context("creating the edit step's state directory")?;
    // Chooses the transport first: where the step sees its state depends on it.
    let mode = sandbox
        .edit_step_mode(&options.repo)
        .await
        .context("choosing how the edit step reaches the working tree")?;
    let mut llm_config = config.llm.clone();
    llm_config.apply_learned(learned);
    if let Some(script) = &llm_config.script {
        let bytes = crate::safe_fs::read_regular(Path::new(script), crate::llm::scripted::MAX_SCRIPT_BYTES)
            .with_context(|| {
            format!("reading the scripted model's answers from {script} (`llm.script`)")
        })?;
        crate::safe_fs::write_atomic(&state.path().join(edit_step::SCRIPT), &bytes)
            .context("copying the scripted model's answers")?;
        llm_config.script = Some(format!(
            "{}/{}",
            sandbox.state_path(state.path()),
            edit_step::SCRIPT
        ));
    }
    if let Some(name) = conversation.secret_name() {
        return Err(Halt::Error(RunError::SecretInPrompt { name }.into()));
    }
    let repo = options.repo.clone();
    let aliases = tokio::task::spawn_blocking(move || crate::edit::identity::scan(&repo))
        .await
        .context("looking for symlinks and hardlinks in the working tree")?
        .context("looking for symlinks and hardlinks in the working tree")?;
    let input = EditStepInput {
        apply_in_step: mode.apply_in_step,
        umask: mode.umask,
        aliases,
        conversation: conversation.clone(),
        llm: llm_config,
        checker: config.correctness_checker.clone(),
        edits_require_approval: config.edits_require_approval.clone(),
        judge_files: plan.judge_rules.clone(),
        not_shown: plan.not_shown.clone(),
        approved_tests: guard.approved_tests().clone(),
        timeout_secs: remaining.as_secs().max(1),
    };
    edit_step::write_json(state.path(), edit_step::INPUT, &input)?;
    let key_env = config.llm.key_env();
    let program = sandbox.edit_step_program().map_err(anyhow::Error::from)?;
    let log_format = if options.json_logs { "json" } else { "text" };
    let mut argv = vec![program, "--log-format".into(), log_format.into()];
    let logging = crate::cli::child_logging();
    if matches!(sandbox, Sandbox::None(_)) {
        argv.extend(logging.args);
    }
    argv.extend([
        "edit-step".into(),
        "--state".into(),
        sandbox.state_path(state.path()),
    ]);
    // Grace past the budget so the step can write what it did before it is killed.
    let mut job = Job::new(
        JobKind::EditStep,
        argv,
        remaining + Duration::from_secs(15),
        1 << 20,
    );
    job.state_dir = Some(state.path().to_owned());
    // The step's log lines (progress during a long answer among them) appear as they come.
    job.live_stderr = true;
    if let Some(filter) = logging.filter {
        job.env.push(("BORK_LOG".to_owned(), filter));
    }
    if let Some(key) = &resolved.api_key {
        job.env.push((key_env.clone(), key.expose_secret().to_owned()));
    }
    job.env.extend(edit_step_credentials(resolved).await?);
    job.secret_env = plan
        .secret_env
        .iter()
        .filter(|name| **name != key_env && !job.env.iter().any(|(passed, _)| passed == *name))
        .cloned()
        .collect();
    let ran = sandbox
        .run(&options.repo, &job)
        .await
        .context("running the edit step")?;
    let output: EditStepOutput = match edit_step::read_json(state.path(), edit_step::OUTPUT) {
        Ok(output) => output,
        Err(_) if ran.outcome == Outcome::TimedOut => return Err(Halt::Budget(Stop::Time)),
        Err(error) => {
            return Err(Halt::Error(error.context(format!(
                "the edit step ended ({}) without a result; its stderr: {}",
                ran.outcome,
                crate::untrusted::tail_bytes(&ran.stderr, 2000)
            ))));
        }
    };
    *learned = learned.merge(output.learned);
    // An answer that echoes a secret (an endpoint that repeats the key) is kept redacted, so the
    // next request does not carry it back.
    conversation
        .turns
        .extend(output.turns.into_iter().map(|mut turn| {
            turn.text = crate::secrets::redact(&turn.text).into_owned();
            turn
        }));
    // The step returned the plan as data: this process applies it, the one writer of the tree.
    let (changeset, apply_ms) = match output.plan {
        Some(plan) if !input.apply_in_step => {
            let repo = options.repo.clone();
            let (result, apply_ms) =
                tokio::task::spawn_blocking(move || edit_step::apply_plan(&input, &repo, &plan))
                    .await
                    .context("applying the model's edits")?;
            (result.map_err(anyhow::Error::msg)?, apply_ms)
        }
        Some(_) => {
            return Err(anyhow!("the edit step returned a plan although it was told to apply it").into());
        }
        None => (output.changeset, output.apply_ms),
    };
    Ok(StepResult {
        apply_ms,
        changeset,
        answer_error: output.answer_error,
        parse_retries: output.parse_retries,
        usage: output.usage,
        error: output.error,
        out_of_time: output.out_of_time,
    })
}

/// The model credentials the edit step needs besides the key, as variables: those read from the
/// environment, except credential files (they may not be reachable from the step), which are
/// exchanged here for short-lived credentials instead.
async fn edit_step_credentials(resolved: &Resolved) -> Result<Vec<(String, String)>> {
    let credentials = &resolved.llm_credentials;
    let mut env: Vec<(String, String)> = credentials
        .secrets
        .iter()
        .map(|(name, value)| (name.clone(), value.expose_secret().to_owned()))
        .collect();
    env.extend(
        credentials
            .plain
            .iter()
            .filter(|(name, _)| {
                !matches!(
                    name.as_str(),
                    "AWS_WEB_IDENTITY_TOKEN_FILE" | "AWS_ROLE_ARN" | "GOOGLE_APPLICATION_CREDENTIALS"
                )
            })
            .map(|(name, value)| (name.clone(), value.clone())),
    );
    let needs_exchange = credentials.plain.contains_key("AWS_WEB_IDENTITY_TOKEN_FILE")
        || credentials.plain.contains_key("GOOGLE_APPLICATION_CREDENTIALS");
    if needs_exchange {
        let provider = Provider::new(
            resolved
                .config
                .llm
                .settings(resolved.api_key.clone(), credentials.clone()),
        )
        .context("setting up the model provider")?;
        for (name, value) in provider
            .handoff_env()
            .await
            .context("getting short-lived credentials for the edit step")?
        {
            env.retain(|(existing, _)| *existing != name);
            env.push((name, value.expose_secret().to_owned()));
        }
    }
    Ok(env)
}

/// What the judges said about the tree after an iteration.
struct Judgement {
    checker: JudgeStatus,
    verifier: Option<JudgeStatus>,
    verify_ms: u64,
    reviewer: Option<JudgeStatus>,
    findings: Findings,
    failures: Vec<(String, String, String)>,
    check_ms: u64,
    review_ms: u64,
    review_usage: Usage,
    warnings: Vec<String>,
}

/// The reviewer's model provider (`review.llm` over `llm`).
pub fn review_provider(resolved: &Resolved) -> Result<Provider> {
    review_provider_learned(resolved, llm::Learned::default())
}

/// [`review_provider`] starting from what earlier rounds learned about the reviewer's server.
fn review_provider_learned(resolved: &Resolved, learned: llm::Learned) -> Result<Provider> {
    let llm_config = resolved.review_llm();
    let mut settings = llm_config.settings(
        resolved.review_api_key.clone(),
        resolved.review_llm_credentials.clone(),
    );
    learned.apply(&mut settings);
    Provider::new(settings).context("setting up the reviewer's model provider")
}

/// What the reviewer answered: a parsed review, or why its answer could not be used.
pub type ReviewAnswer = std::result::Result<review::ReviewResult, review::ReviewError>;

/// Asks the reviewer about the working tree's changes against the base; `files`
/// restricts the review to those paths. Returns the parsed result and the tokens it used.
pub async fn review_once(
    resolved: &Resolved,
    repo: &Path,
    files: Option<&[String]>,
) -> Result<(ReviewAnswer, Usage)> {
    let provider = review_provider(resolved)?;
    review_with(&provider, resolved, repo, files).await
}

/// [`review_once`] with a provider that lives across reviews (what it learns about its server
/// lasts for the run).
pub async fn review_with(
    provider: &Provider,
    resolved: &Resolved,
    repo: &Path,
    files: Option<&[String]>,
) -> Result<(ReviewAnswer, Usage)> {
    let (changed, diff) = review::changed_files(repo, &resolved.config.base, files)
        .context("collecting the changes to review")?;
    let policy = review::VersionPolicy {
        allow_prompt_patch_drift: resolved.config.review.allow_prompt_patch_drift,
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
    matcher: crate::edit::judge_files::Matcher,
    baseline: crate::edit::judge_files::Baseline,
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
        let baseline = crate::blocking::run(|| crate::edit::judge_files::Baseline::capture(repo, &matcher))
            .context("recording the judge files of the approved revision")?;
        tracing::debug!(judge_files = baseline.len(), "recorded the approved judge files");
        Ok(JudgeGuard { matcher, baseline })
    }

    /// The test files of the approved revision.
    pub(super) fn approved_tests(&self) -> &std::collections::BTreeSet<String> {
        self.baseline.tests()
    }

    /// Why the judges may not run on the tree as it is now: a judge file differs from the
    /// approved revision.
    fn drift(&self, repo: &Path) -> Option<String> {
        match crate::blocking::run(|| self.baseline.check(repo, &self.matcher)) {
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
async fn run_checker(
    sandbox: &Sandbox,
    repo: &Path,
    secret_env: &[String],
    checker_path: &str,
    (timeout, build): (Duration, crate::sandbox::BuildCache),
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
const HEARTBEAT: Duration = Duration::from_secs(30);

/// Runs `work`, logging a line every [`HEARTBEAT`] while it runs.
async fn with_heartbeat<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
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
fn show_judge_output(title: &str, tail: &str, stop_token: Option<&str>) {
    if tail.trim().is_empty() {
        return;
    }
    let text = crate::report::judge_output_block(title, tail, stop_token);
    let stderr = std::io::stderr();
    let mut lock = crate::secrets::Redacting(stderr.lock());
    let _ = std::io::Write::write_all(&mut lock, text.as_bytes());
}

/// How the judges of one iteration run.
#[derive(Clone, Copy)]
struct Judging<'a> {
    /// The round's settings: which judges, their limits, the secrets kept from them.
    plan: &'a Plan,
    /// The approved judge files they are held to.
    guard: &'a JudgeGuard,
    /// Under GitHub Actions: the stop-commands token for their output.
    stop_token: Option<&'a str>,
    /// The build cache they work in: each a throwaway layer over the warm cache of approved
    /// builds (`confirm-clean`), or the run's shared one.
    build: crate::sandbox::BuildCache,
}

async fn judge(
    sandbox: &Sandbox,
    repo: &Path,
    resolved: &Resolved,
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
    if let Some(checker_path) = &plan.checker {
        // A checker that was there at the start and is gone now failed to run: never "no checker".
        any = true;
        let started = Instant::now();
        let remaining = budget.time_left()?;
        let timeout = plan.checker_timeout.min(remaining);
        let verdict = match guard.drift(repo) {
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
        let mut options = crate::verify::VerifyOptions::new(resolved.artifact_root());
        options.timeout = plan.verifier_timeout.min(remaining);
        options.secret_env = plan.secret_env.clone();
        options.build = build;
        let ran = match guard.drift(repo) {
            Some(reason) => Err(anyhow::anyhow!(reason)),
            None => with_heartbeat("the verifier", crate::verify::run(sandbox, repo, steps, &options))
                .await
                .map_err(anyhow::Error::new),
        };
        if let Ok(result) = &ran
            && result.status != crate::verify::Status::Pass
        {
            show_judge_output(
                &format!("verifier run {}: log (last lines)", result.run_id),
                &result.tail_log,
                stop_token,
            );
        }
        match ran {
            Ok(result) => {
                let findings = crate::verify::to_findings(&result);
                judgement.verifier = Some(match result.status {
                    crate::verify::Status::Pass if findings.is_empty() => JudgeStatus::Clean,
                    _ => JudgeStatus::Findings {
                        count: findings.len().max(1),
                    },
                });
                if result.status == crate::verify::Status::Fail && findings.is_empty() {
                    // Fail closed: a FAIL always reaches the model, even without a failed step.
                    judgement
                        .findings
                        .overall_findings
                        .push(crate::findings::Finding::CodeReview {
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
    if any && let Some(reason) = guard.drift(repo) {
        judgement
            .failures
            .push(("judge files".into(), reason, String::new()));
    }
    if let (Some(reviewer), Some(min_severity)) = (reviewer, plan.review_min_severity) {
        any = true;
        let started = Instant::now();
        let (outcome, usage) = review_with(reviewer, resolved, repo, None).await?;
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

/// Runs the loop to its end and returns the report; errors before the first iteration are
/// returned as errors (exit 2), errors later end the report with status `error`.
pub(super) async fn round(
    resolved: &Resolved,
    sandbox: &Sandbox,
    options: &RoundOptions,
) -> Result<RunReport> {
    let config = &resolved.config;
    let started = Instant::now();
    let repo = &options.repo;

    let swept = crate::blocking::run(|| crate::edit::apply::sweep_temp_files(repo));
    if swept > 0 {
        tracing::warn!("removed {swept} temporary file(s) an interrupted run left in the working tree");
    }
    if let Some(checker) = &config.correctness_checker
        && let Some(problem) = crate::blocking::run(|| checker::missing(repo, checker))
    {
        return Err(RunError::CheckerUnusable { problem }.into());
    }
    // What the judges are held to: the judge files as this round starts (the approved revision:
    // the commit the run started from, plus approved edits; an earlier round could only end
    // clean with the tree's judge files unchanged).
    let (mut conversation, snapshot) = crate::blocking::run(|| initial_prompt(repo, resolved))?;
    let plan = Plan::resolve(resolved, repo, snapshot.not_shown())?;
    let guard = JudgeGuard::capture(&plan, repo, &resolved.artifact_root())?;
    let budget = Budget::start(plan.limits, options.spent, started);
    if let Some(preamble) = &options.preamble {
        conversation.prefix.push('\n');
        conversation.prefix.push_str(preamble);
    }
    if let Some(note) = &options.start.note {
        conversation.prefix.push_str(note);
    }
    let estimate = estimate(&conversation);
    if estimate > config.context_budget_tokens {
        return Err(RunError::ContextBudget {
            estimate,
            budget: config.context_budget_tokens,
        }
        .into());
    }
    if let Some(window) = config.llm.context_window
        && estimate > window
    {
        tracing::warn!(
            "the packed prompt is about {estimate} tokens, over the model's context window of {window} (`llm.context-window`); the server may refuse it or silently drop its start"
        );
    }
    if let Some(name) = secret_in_prompt(resolved, &conversation, &resolved.env) {
        return Err(RunError::SecretInPrompt { name }.into());
    }
    let provider = Provider::new(
        config
            .llm
            .settings(resolved.api_key.clone(), resolved.llm_credentials.clone()),
    )
    .context("setting up the model provider")?;
    if config.llm.seed.is_some() && !provider.sends_seed() {
        tracing::warn!(
            "llm.seed is set, but {} has no seed parameter; it is not sent",
            provider.describe()
        );
    }
    // Checked here so that bad globs end the run before any model call.
    Protection::new(
        config.correctness_checker.as_deref(),
        &config.edits_require_approval,
        &plan.judge_rules,
    )
    .context("building the approval rules")?;

    let mut report = RunReport::new(
        options.run_id.clone(),
        provider.describe(),
        config.llm.model.clone(),
        sandbox.kind().as_str().to_owned(),
        config.max_iterations,
    );
    report.prompt_tokens_estimate = estimate;
    tracing::info!(
        files = snapshot.files.len(),
        tokens_estimate = estimate,
        model = %provider.describe(),
        "packed {} files, about {estimate} tokens; model: {}",
        snapshot.files.len(),
        provider.describe()
    );

    let outcome = if let Some(stop) = budget.exhausted(report.usage, report.review_usage) {
        report.finish(RunStatus::NeedsHuman, stop.to_string());
        Ok(())
    } else {
        match Iterations::reviewer(resolved, options, &plan).map_err(Halt::Error) {
            Ok(reviewer) => {
                let iterations = Iterations {
                    resolved,
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

/// Why an iteration ended before its end: a budget ran out (the round ends as needs-human with
/// the budget's message), or an error (the round ends in error).
#[derive(Debug)]
enum Halt {
    Budget(Stop),
    Error(anyhow::Error),
}

impl From<Stop> for Halt {
    fn from(stop: Stop) -> Self {
        Halt::Budget(stop)
    }
}

impl From<anyhow::Error> for Halt {
    fn from(error: anyhow::Error) -> Self {
        Halt::Error(error)
    }
}

/// One round's iterations: what each reads (the settings, the sandbox, the judges' guard, the
/// budget) and what lasts from one to the next (what the model's and the reviewer's providers
/// learned about their servers). Each iteration is [`Iterations::step`], then
/// [`Iterations::judge`], then [`Iterations::stop`] or the judges' feedback to the model.
struct Iterations<'a> {
    resolved: &'a Resolved,
    sandbox: &'a Sandbox,
    options: &'a RoundOptions,
    plan: &'a Plan,
    guard: &'a JudgeGuard,
    budget: &'a Budget,
    /// When the round started (for the progress lines).
    started: Instant,
    /// What the edit steps' providers learned, passed from step to step (and from round to
    /// round of the job).
    learned: llm::Learned,
    /// One reviewer provider for the round, so what it learns about its server lasts.
    reviewer: Option<Provider>,
    /// The judges' failures so far, to stop on one the model's edit did not change.
    unchanged: Unchanged,
}

/// What the judges made of one iteration's tree.
struct IterationEnd {
    /// Clean: no finding, no judge that failed to run (or, without judges, a usable answer).
    clean: bool,
    /// A judge failed to run.
    failed: bool,
    /// A judge ran, or would have run had the answer been usable.
    has_judge: bool,
}

impl<'a> Iterations<'a> {
    /// The round's one reviewer provider, when the reviewer is on, with what earlier jobs
    /// learned about its server.
    fn reviewer(resolved: &Resolved, options: &RoundOptions, plan: &Plan) -> Result<Option<Provider>> {
        plan.review_min_severity
            .map(|_| review_provider_learned(resolved, Lessons::read(&options.learned.reviewer)))
            .transpose()
    }

    /// Runs iterations until the checks are clean, a budget or `max-iterations` runs out, or
    /// an error; the report says which.
    async fn run(mut self, conversation: &mut Conversation, report: &mut RunReport) -> Result<(), Halt> {
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
                    overall_findings: vec![crate::findings::Finding::CodeReview {
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
    async fn step(
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
            self.resolved,
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
            let mut lock = crate::secrets::Redacting(stdout.lock());
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
    async fn judge(&self, step: &StepResult) -> Result<Option<Judgement>, Halt> {
        if step.answer_error.is_some() {
            return Ok(None);
        }
        let judged = judge(
            self.sandbox,
            &self.options.repo,
            self.resolved,
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
    fn judging(&self) -> Judging<'a> {
        Judging {
            plan: self.plan,
            guard: self.guard,
            stop_token: self.options.stop_token.as_deref(),
            build: if self.plan.confirm_clean {
                crate::sandbox::BuildCache::Layer
            } else {
                crate::sandbox::BuildCache::Run
            },
        }
    }

    /// Why the round ends awaiting approval after an unclean iteration, if it does: the checks
    /// wait on held edits (the model proposed one again, or a finding names one). Each such
    /// edit records the findings that wait on it, for its approval pull request.
    fn waits_on_held(
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
    fn stop(
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
fn unchanged_failure(
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
fn feedback_of(step: &StepResult, number: u32, max: u32) -> Feedback {
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

/// What a job does before its first model call: the checker must exist, the setup commands
/// (`sandbox.setup`) fill the dependency cache, and the checker runs once on the approved tree
/// (`preflight`). A setup command that fails, or a checker that cannot start (see
/// [`super::preflight::cannot_start`]), ends the run here (exit 2) with its output and the likely
/// fix: no model call is paid for a judge no edit can fix. A checker that starts and reports
/// findings or a failure is the run's baseline, which the first prompt shows the model.
pub(super) async fn before_first_call(
    resolved: &Resolved,
    sandbox: &Sandbox,
    options: &RoundOptions,
) -> Result<Option<crate::report::Baseline>> {
    let config = &resolved.config;
    let repo = &options.repo;
    let stop_token = options.stop_token.as_deref();
    if let Some(checker) = &config.correctness_checker
        && let Some(problem) = crate::blocking::run(|| checker::missing(repo, checker))
    {
        return Err(RunError::CheckerUnusable { problem }.into());
    }
    setup_round(resolved, sandbox, repo, stop_token).await?;
    let Some(checker_path) = config.correctness_checker.as_ref().filter(|_| config.preflight) else {
        return Ok(None);
    };
    let warm_or_layer = if crate::blocking::run(|| super::plan::code_is_committed(resolved, repo)) {
        crate::sandbox::BuildCache::Warm
    } else {
        tracing::info!(
            "preflight: code in the tree differs from its commit; the warm build cache is read, not written"
        );
        crate::sandbox::BuildCache::Layer
    };
    tracing::info!("preflight: running the correctness checker on the approved tree");
    let started = Instant::now();
    let timeout = Duration::from_secs(config.checker_timeout_secs);
    let run = run_checker(
        sandbox,
        repo,
        &resolved.secret_env_names(),
        checker_path,
        // The approved revision, before any model call: the one job that writes the warm cache,
        // when no code in the tree differs from its commit (else it reads it, as judges do).
        (timeout, warm_or_layer),
        stop_token,
        "preflight: ",
    )
    .await?;
    let findings = match &run.verdict {
        Verdict::FailedToRun { reason, .. }
            if super::preflight::cannot_start(run.outcome, &run.stderr_tail) =>
        {
            let fix = checker::likely_fix(
                run.outcome,
                &run.stderr_tail,
                sandbox.image(JobKind::Checker).as_deref(),
            );
            return Err(RunError::PreflightFailed {
                reason: reason.clone(),
                fix,
                stderr_tail: crate::untrusted::tail(&run.stderr_tail, 1500),
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
        checker: JudgeStatus::from(&run.verdict),
        findings,
        duration_ms: started.elapsed().as_millis() as u64,
    }))
}

/// What a round does before anything else, on the approved revision (the tree as the round
/// starts: the commit the run started from plus approved edits): computes the dependency
/// cache's key once (`sandbox::deps::key`: the repository, the setup commands, the judges'
/// image id and every file that is not code), makes it the cache its jobs mount (a new key is
/// an empty cache) and runs the setup commands into it.
pub(super) async fn setup_round(
    resolved: &Resolved,
    sandbox: &Sandbox,
    repo: &Path,
    stop_token: Option<&str>,
) -> Result<()> {
    use_deps_of(resolved, sandbox, repo).await?;
    if !resolved.config.sandbox.setup.is_empty() {
        run_setup(resolved, sandbox, repo, stop_token).await?;
    }
    Ok(())
}

/// Computes the dependency cache's key of the tree at `repo` (the approved revision) and makes
/// it the cache the sandbox's jobs mount from now on; returns the key.
pub async fn use_deps_of(resolved: &Resolved, sandbox: &Sandbox, repo: &Path) -> Result<String> {
    let config = &resolved.config;
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
    let steps = crate::blocking::run(|| crate::verify::load_steps(repo, &resolved.verification_steps()))
        .context("reading the verification steps")?;
    let judge = crate::blocking::run(|| resolved.judge_rules_in(repo))
        .map_err(anyhow::Error::msg)?
        .matcher()
        .context("compiling the judge files' globs")?;
    let code = super::plan::code_rules(resolved, repo, &steps)?
        .matcher()
        .map_err(anyhow::Error::msg)
        .context("compiling the code globs")?;
    // Code (and tests) alone leave the key as it is: every judge file, and every other file
    // that is not code, is part of it.
    let is_code = |path: &str| {
        let folded = crate::edit::judge_files::fold(path);
        judge.classify(&folded).is_none()
            && matches!(
                code.kind(&folded),
                crate::edit::code::Kind::Code | crate::edit::code::Kind::Test
            )
    };
    let identity = resolved.deps_identity(repo);
    let inputs = crate::sandbox::deps::KeyInputs {
        identity: &identity,
        setup: &config.sandbox.setup,
        image_id: &image_id,
    };
    let key = crate::blocking::run(|| crate::sandbox::deps::key(repo, &inputs, &is_code))
        .map_err(anyhow::Error::msg)
        .context("computing the dependency cache's key")?;
    let shared = sandbox.shared().clone();
    crate::blocking::run(|| shared.use_deps_key(&key));
    tracing::info!("the dependency cache of this round: {key} (judges' image {image_id})");
    Ok(key)
}

/// Runs the setup commands once, one after another in one job of the judge's image, on the
/// approved revision, with `sandbox.setup-network`; they alone write the dependency cache.
/// The setup commands (`sandbox.setup`) as one job of the judges' image: each command as
/// `sh -c`, all within `sandbox.setup-timeout-secs`, no secret in their environment.
pub fn setup_job(resolved: &Resolved) -> (Job, Vec<Vec<String>>) {
    let commands = resolved
        .config
        .sandbox
        .setup
        .iter()
        .map(|command| vec!["sh".to_owned(), "-c".to_owned(), command.clone()])
        .collect();
    let mut job = Job::new(
        JobKind::Setup,
        Vec::new(),
        Duration::from_secs(resolved.config.sandbox.setup_timeout_secs),
        1 << 20,
    );
    job.secret_env = resolved.secret_env_names();
    (job, commands)
}

async fn run_setup(
    resolved: &Resolved,
    sandbox: &Sandbox,
    repo: &Path,
    stop_token: Option<&str>,
) -> Result<()> {
    let config = &resolved.config;
    let (job, commands) = setup_job(resolved);
    tracing::info!(
        commands = commands.len(),
        network = %config.sandbox.setup_network,
        "setup: running {} command(s) on the approved revision (network: {})",
        commands.len(),
        config.sandbox.setup_network
    );
    let outputs = with_heartbeat("the setup commands", sandbox.run_sequence(repo, &job, &commands))
        .await
        .context("running the setup commands (`sandbox.setup`)")?;
    for (command, output) in config.sandbox.setup.iter().zip(&outputs) {
        let mut printed = crate::untrusted::tail_bytes(&output.stdout, 2048);
        printed.push_str(&crate::untrusted::tail_bytes(&output.stderr, 4096));
        show_judge_output(
            &format!(
                "setup `{}`: output (last lines)",
                crate::untrusted::one_line(command)
            ),
            &printed,
            stop_token,
        );
        if output.outcome != Outcome::Exited(0) {
            return Err(RunError::SetupFailed {
                command: crate::untrusted::one_line(command),
                outcome: output.outcome.to_string(),
                tail: crate::untrusted::tail(&printed, 1500),
            }
            .into());
        }
    }
    tracing::info!("setup: done");
    Ok(())
}

fn written(changeset: &Changeset, action: EditAction) -> Vec<String> {
    changeset
        .applied
        .iter()
        .filter(|edit| std::mem::discriminant(&edit.action) == std::mem::discriminant(&action))
        .map(|edit| edit.path.clone())
        .collect()
}

fn durations(step_ms: u64, apply_ms: u64, check_ms: u64, started: Instant) -> Durations {
    Durations {
        llm_ms: step_ms.saturating_sub(apply_ms),
        apply_ms,
        check_ms,
        total_ms: started.elapsed().as_millis() as u64,
        ..Durations::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_known_secret_in_the_prompt_is_found_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env: std::collections::BTreeMap<String, String> = [
            ("OPENAI_API_KEY", "sk-key-value-1234"),
            ("GITHUB_TOKEN", "ghs_token_value_5678"),
            ("ACTIONS_RESULTS_URL", "https://results.example/"),
            ("GH_TOKEN", "short"),
        ]
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
        let resolved = crate::config::load(dir.path(), None, &env, &vec![]).expect("loads");
        let with = |prefix: &str| Conversation {
            system: "instructions".into(),
            prefix: prefix.into(),
            turns: Vec::new(),
        };
        let found = |prefix: &str| secret_in_prompt(&resolved, &with(prefix), &env);
        assert_eq!(found("a sk-key-value-1234 b").as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(found("x ghs_token_value_5678").as_deref(), Some("GITHUB_TOKEN"));
        assert_eq!(found("see https://results.example/ and short"), None);
        assert_eq!(found("nothing secret here"), None);
    }
}
