//! The edit step of an iteration, seen from the loop: the first prompt (the pack and the secrets
//! check), the step as a sandbox job with its input, credentials and output, and its result.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use secrecy::ExposeSecret;

use super::judges::JudgeGuard;
use super::options::{Halt, RoundOptions, RunError};
use super::plan::Plan;
use crate::budget::{Budget, Stop};
use crate::edit_step::{self, EditStepInput, EditStepOutput};
use crate::run_plan::{Model, RunPlan};
use bork_ci_edit::edit::apply::Changeset;
use bork_ci_edit::pack::{self, PackOptions};
use bork_ci_edit::prompt::{self};
use bork_ci_llm::llm::{self, Conversation, Provider, Usage};
use bork_ci_sandbox::sandbox::{Job, JobKind, Outcome, Sandbox};

/// Packs the repository and renders the constant part of the conversation.
pub fn initial_prompt(repo: &Path, options: &PackOptions) -> Result<(Conversation, pack::RepoSnapshot)> {
    let snapshot = pack::snapshot(repo, options)
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
/// LLM key, the model's or the reviewer's other credentials, or the value in `env` of any
/// variable [`RunPlan::secret_env`] lists (the `*_URL` ones are endpoints, not secrets). Values
/// under 8 bytes are too short to match safely.
pub fn secret_in_prompt(
    run_plan: &RunPlan,
    conversation: &Conversation,
    env: &std::collections::BTreeMap<String, String>,
) -> Option<String> {
    let holds = |value: &str| {
        let value = value.trim();
        value.len() >= 8 && (conversation.prefix.contains(value) || conversation.system.contains(value))
    };
    if let Some(key) = &run_plan.model.api_key
        && holds(key.expose_secret())
    {
        return Some(run_plan.model.llm.key_env());
    }
    for credentials in [&run_plan.model.credentials, &run_plan.review.model.credentials] {
        if let Some((name, _)) = credentials
            .secrets
            .iter()
            .find(|(_, value)| holds(value.expose_secret()))
        {
            return Some(name.clone());
        }
    }
    run_plan
        .secret_env
        .iter()
        .filter(|name| !name.ends_with("_URL"))
        .find(|name| env.get(*name).is_some_and(|value| holds(value)))
        .cloned()
}

/// What one edit step produced.
pub(super) struct StepResult {
    pub(super) apply_ms: u64,
    pub(super) changeset: Changeset,
    pub(super) answer_error: Option<String>,
    pub(super) parse_retries: u32,
    /// Every token the step's model calls cost, also when the step failed.
    pub(super) usage: Usage,
    /// The step itself failed (model unreachable, bad settings).
    pub(super) error: Option<String>,
    pub(super) out_of_time: bool,
}

/// Runs the edit step through the sandbox (see `edit_step`) and appends the model's turns.
#[expect(
    clippy::too_many_arguments,
    reason = "the round's parts the step reads and the lessons it updates"
)]
pub(super) async fn run_edit_step(
    sandbox: &Sandbox,
    run_plan: &RunPlan,
    options: &RoundOptions,
    conversation: &mut Conversation,
    plan: &Plan,
    guard: &JudgeGuard,
    budget: &Budget,
    learned: &mut llm::Learned,
) -> Result<StepResult, Halt> {
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
    let mut llm_config = run_plan.model.llm.clone();
    llm_config.apply_learned(learned);
    if let Some(script) = &llm_config.script {
        let bytes = bork_ci_core::safe_fs::read_regular(
            Path::new(script),
            bork_ci_llm::llm::scripted::MAX_SCRIPT_BYTES,
        )
        .with_context(|| format!("reading the scripted model's answers from {script} (`llm.script`)"))?;
        bork_ci_core::safe_fs::write_atomic(&state.path().join(edit_step::SCRIPT), &bytes)
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
    let aliases = tokio::task::spawn_blocking(move || bork_ci_edit::edit::identity::scan(&repo))
        .await
        .context("looking for symlinks and hardlinks in the working tree")?
        .context("looking for symlinks and hardlinks in the working tree")?;
    // The conversation goes into the step's input file and straight back: the prompt, the
    // largest thing a run holds, is never copied for the step.
    let mut input = EditStepInput {
        apply_in_step: mode.apply_in_step,
        umask: mode.umask,
        aliases,
        conversation: std::mem::take(conversation),
        llm: llm_config,
        checker: run_plan.checker.clone(),
        edits_require_approval: run_plan.approval.edits_require_approval.clone(),
        judge_files: plan.judge_rules.clone(),
        not_shown: plan.not_shown.clone(),
        approved_tests: guard.approved_tests().clone(),
        timeout_secs: remaining.as_secs().max(1),
    };
    let written = edit_step::write_json(state.path(), edit_step::INPUT, &input);
    *conversation = std::mem::take(&mut input.conversation);
    written?;
    let key_env = run_plan.model.llm.key_env();
    let program = sandbox.edit_step_program().map_err(anyhow::Error::from)?;
    let log_format = if options.json_logs { "json" } else { "text" };
    let mut argv = vec![program, "--log-format".into(), log_format.into()];
    let logging = &run_plan.logging;
    if matches!(sandbox, Sandbox::None(_)) {
        argv.extend(logging.args.iter().cloned());
    }
    argv.extend([
        "edit-step".into(),
        "--state".into(),
        sandbox.state_path(state.path()),
    ]);
    if mode.state_over_stdio {
        argv.push("--stdio".into());
    }
    // Grace past the budget so the step can write what it did before it is killed.
    let mut job = Job::new(
        JobKind::EditStep,
        argv,
        remaining + Duration::from_secs(15),
        1 << 20,
    );
    job.state_dir = Some(state.path().to_owned());
    job.state_over_stdio = mode.state_over_stdio;
    // The step's log lines (progress during a long answer among them) appear as they come.
    job.live_stderr = true;
    if let Some(filter) = &logging.filter {
        job.env.push(("BORK_LOG".to_owned(), filter.clone()));
    }
    if let Some(key) = &run_plan.model.api_key {
        job.env.push((key_env.clone(), key.expose_secret().to_owned()));
    }
    job.env.extend(edit_step_credentials(&run_plan.model).await?);
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
                bork_ci_core::untrusted::tail_bytes(&ran.stderr, 2000)
            ))));
        }
    };
    *learned = learned.merge(output.learned);
    // An answer that echoes a secret (an endpoint that repeats the key) is kept redacted, so the
    // next request does not carry it back.
    conversation
        .turns
        .extend(output.turns.into_iter().map(|mut turn| {
            turn.text = bork_ci_core::secrets::redact(&turn.text).into_owned();
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
pub(super) async fn edit_step_credentials(model: &Model) -> Result<Vec<(String, String)>> {
    let credentials = &model.credentials;
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
        let provider = Provider::new(model.settings()).context("setting up the model provider")?;
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
