//! The edit step of one iteration as a unit of work that runs where the sandbox puts it: ask the
//! model, parse its answer (one corrected retry), apply the edits. The runner writes an
//! [`EditStepInput`] into a state directory, the sandbox runs `bork-ci edit-step --state DIR`
//! (a local process for `none`, an ephemeral container from the runner image for `docker`, with
//! only the working tree mounted and the LLM key passed to that step alone), and the runner reads
//! the [`EditStepOutput`] back. The loop's state stays with the runner.
//!
//! Where the step may not write the working tree (the `docker` sandbox over the `copy`
//! transport, which never mounts it), [`EditStepInput::apply_in_step`] is false: the step returns
//! the parsed [`EditPlan`] as data and the runner applies it with [`apply_plan`], the same
//! function, refusals and approvals the step would have used.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

use bork_ci_edit::edit::apply::{self, ApplyOptions, Changeset};
use bork_ci_edit::edit::parse::{self, EditPlan, ParseLimits};
use bork_ci_edit::edit::policy::Protection;
use bork_ci_edit::prompt;
use bork_ci_llm::llm::LlmConfig;
use bork_ci_llm::llm::{
    Completion, Conversation, FinishReason, LlmError, Provider, ResponseFormat, Role, Turn, Usage,
};

/// The input file's name in the state directory.
pub const INPUT: &str = "input.json";
/// The output file's name in the state directory (the sandbox copies it back over `copy`).
pub const OUTPUT: &str = bork_ci_sandbox::sandbox::STATE_OUTPUT;
/// The scripted model's answers, copied into the state directory.
pub const SCRIPT: &str = "script.json";
/// Largest output file the runner reads back.
const OUTPUT_CAP: u64 = 256 * 1024 * 1024;

/// What one edit step needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EditStepInput {
    pub conversation: Conversation,
    /// The model settings, without the key (it comes by environment, under `llm.key_env()`).
    pub llm: LlmConfig,
    pub checker: Option<String>,
    pub edits_require_approval: Vec<String>,
    /// The judge files (held for approval like specs; `package.json`'s `scripts` and the like by
    /// their section).
    pub judge_files: bork_ci_edit::edit::judge_files::JudgeRules,
    /// Existing files the model never saw (binary, too large): not to be overwritten.
    pub not_shown: BTreeSet<String>,
    /// The test files of the approved revision: a change to or deletion of one is held.
    #[serde(default)]
    pub approved_tests: BTreeSet<String>,
    /// Paths of the tree that name the same file or folder (symlinks, hardlinks), found by the
    /// runner before the step: an edit is classified under each of its spellings.
    #[serde(default)]
    pub aliases: Vec<bork_ci_edit::edit::identity::Alias>,
    /// Wall-clock budget left for this step.
    pub timeout_secs: u64,
    /// Apply the edits here (the working tree is mounted); when false the plan is returned in
    /// [`EditStepOutput::plan`] and the runner applies it.
    #[serde(default = "yes")]
    pub apply_in_step: bool,
    /// The file mode creation mask for the files the step writes (`0o022` in a container, so
    /// written files get 0644/0755 whatever the image's default); `None` keeps the process's.
    #[serde(default)]
    pub umask: Option<u32>,
}

fn yes() -> bool {
    true
}

/// The options [`apply::apply`] runs with for `input`: the same in the step and in the runner.
pub fn apply_options(input: &EditStepInput) -> std::result::Result<ApplyOptions, String> {
    let protection = Protection::new(
        input.checker.as_deref(),
        &input.edits_require_approval,
        &input.judge_files,
    )
    .map_err(|error| format!("building the approval rules: {error}"))?;
    Ok(ApplyOptions {
        protection: protection
            .with_aliases(&input.aliases)
            .with_approved_tests(&input.approved_tests),
        not_shown: input.not_shown.clone(),
    })
}

/// Applies `plan` to `repo` as the edit step does; returns the changeset or the error text, and
/// the time it took in milliseconds.
pub fn apply_plan(
    input: &EditStepInput,
    repo: &Path,
    plan: &EditPlan,
) -> (std::result::Result<Changeset, String>, u64) {
    let applying = std::time::Instant::now();
    // The runner knows every registered secret (the step only the model's key): a plan that
    // would write one into the tree is refused whole.
    if let Some(name) = plan.writes.iter().find_map(|write| {
        bork_ci_core::secrets::find(&write.path).or_else(|| bork_ci_core::secrets::find(&write.contents))
    }) {
        return (
            Err(format!(
                "the model's edits hold the value of the secret {name}; nothing was applied"
            )),
            applying.elapsed().as_millis() as u64,
        );
    }
    let result = apply_options(input).and_then(|options| {
        bork_ci_core::blocking::run(|| apply::apply(repo, plan, &options))
            .map_err(|error| format!("applying the model's edits: {error}"))
    });
    (result, applying.elapsed().as_millis() as u64)
}

/// What one edit step did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct EditStepOutput {
    /// Turns to append to the conversation: the model's answers (and the retry request).
    pub turns: Vec<Turn>,
    pub changeset: Changeset,
    /// Why the answer could not be used after the corrected retry, if it could not.
    pub answer_error: Option<String>,
    pub parse_retries: u32,
    pub usage: Usage,
    /// The step itself failed (model unreachable, bad settings); the run ends with an error.
    pub error: Option<String>,
    /// The wall-clock budget ran out during the step.
    pub out_of_time: bool,
    /// Time spent applying the edits, in milliseconds.
    pub apply_ms: u64,
    /// What the provider learned about the server (a weaker structured-output mode, a lower
    /// output cap, streaming off); the runner passes it on to the next step.
    #[serde(default)]
    pub learned: bork_ci_llm::llm::Learned,
    /// The parsed answer, when the step did not apply it ([`EditStepInput::apply_in_step`]).
    #[serde(default)]
    pub plan: Option<EditPlan>,
}

/// Checks a completion and parses it into an edit plan.
fn read_answer(completion: &Completion, limits: &ParseLimits) -> std::result::Result<EditPlan, String> {
    match &completion.finish {
        FinishReason::Length => {
            return Err("the answer was cut off at the output token limit (finish reason: length); answer with fewer or smaller files".into());
        }
        FinishReason::Refusal => return Err("the model refused to answer".into()),
        FinishReason::Stop | FinishReason::Other(_) => {}
    }
    // A secret in the answer (an endpoint or a model that echoes the key) would be written into
    // the repository and committed: the whole answer is refused, naming the secret, not its value.
    if let Some(name) = bork_ci_core::secrets::find(&completion.text) {
        return Err(format!(
            "the answer holds the value of the secret {name} (or an encoding of it); nothing of it was applied. Never write credentials into files"
        ));
    }
    parse::parse(&completion.text, limits).map_err(|error| error.to_string())
}

/// Runs the edit step on `repo` with the key given. Never fails: problems are in the output.
/// The conversation moves out of `input` (it is the prompt: one copy of it, not two).
pub async fn run(
    input: &mut EditStepInput,
    repo: &Path,
    api_key: Option<SecretString>,
    credentials: bork_ci_llm::llm::Credentials,
) -> EditStepOutput {
    let mut output = EditStepOutput::default();
    if let Some(key) = &api_key {
        bork_ci_core::secrets::register(&input.llm.key_env(), secrecy::ExposeSecret::expose_secret(key));
    }
    let provider = match Provider::new(input.llm.settings(api_key, credentials)) {
        Ok(provider) => provider,
        Err(error) => {
            output.error = Some(format!("setting up the model provider: {error}"));
            return output;
        }
    };
    if let Err(error) = apply_options(input) {
        output.error = Some(error);
        return output;
    }
    if let Some(mask) = input.umask {
        rustix::process::umask(rustix::fs::Mode::from_bits_truncate(mask));
    }
    let limits = ParseLimits::default();
    let format = ResponseFormat {
        name: "bork_edits".into(),
        schema: prompt::answer_schema(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(input.timeout_secs);
    let mut conversation = std::mem::take(&mut input.conversation);
    let first_new = conversation.turns.len();
    for attempt in 0..2 {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let completion =
            match tokio::time::timeout(remaining, provider.complete(&conversation, Some(&format))).await {
                Err(_) => {
                    output.out_of_time = true;
                    break;
                }
                // A refusal or an empty answer is an unusable answer, not a broken provider
                // (J16): the iteration is consumed the same way as for malformed text.
                Ok(Err(error @ (LlmError::Refused { .. } | LlmError::EmptyAnswer { .. }))) => Completion {
                    text: String::new(),
                    usage: error.usage(),
                    finish: FinishReason::Other(error.to_string()),
                },
                Ok(Err(error)) => {
                    output.error = Some(format!("asking {}: {error}", provider.describe()));
                    break;
                }
                Ok(Ok(completion)) => completion,
            };
        conversation.turns.push(Turn {
            role: Role::Assistant,
            text: bork_ci_core::secrets::redact(&completion.text).into_owned(),
        });
        let answer = match &completion.finish {
            FinishReason::Other(reason) if completion.text.is_empty() => {
                Err(format!("no usable answer: {reason}"))
            }
            _ => read_answer(&completion, &limits),
        };
        match answer {
            Ok(plan) => {
                if input.apply_in_step {
                    let (result, apply_ms) = apply_plan(input, repo, &plan);
                    match result {
                        Ok(changeset) => output.changeset = changeset,
                        Err(error) => output.error = Some(error),
                    }
                    output.apply_ms = apply_ms;
                } else {
                    output.plan = Some(plan);
                }
                output.answer_error = None;
                break;
            }
            Err(error) => {
                tracing::warn!("the model's answer could not be used: {error}");
                if attempt == 0 {
                    output.parse_retries += 1;
                    conversation.turns.push(Turn {
                        role: Role::User,
                        text: prompt::parse_retry(&error),
                    });
                }
                output.answer_error = Some(error);
            }
        }
    }
    output.turns = conversation.turns.split_off(first_new);
    output.learned = provider.learned();
    // Every token the server reported, whether the answer was used or not (refused, empty, cut
    // off, unparsable, retried, sent again with a weaker format or a lower cap).
    output.usage = provider.spent();
    output
}

/// Writes `value` as JSON to `dir/name` through a temporary file and a rename. The JSON is
/// streamed to the file, never held whole in memory: the input carries the whole prompt.
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> Result<()> {
    let mut temporary = tempfile::NamedTempFile::new_in(dir).context("creating a state file")?;
    {
        let mut writer = std::io::BufWriter::with_capacity(1 << 20, &mut temporary);
        serde_json::to_writer(&mut writer, value).context("serializing the edit step's state")?;
        std::io::Write::flush(&mut writer).context("writing a state file")?;
    }
    temporary
        .persist(dir.join(name))
        .map_err(|error| error.error)
        .context("saving a state file")?;
    Ok(())
}

/// Reads `dir/name` as JSON: a regular file, never through a symlink, at most 256 MiB. The other
/// side of the state directory may be a container holding model-written code.
pub fn read_json<T: for<'de> Deserialize<'de>>(dir: &Path, name: &str) -> Result<T> {
    let path = dir.join(name);
    // Parsed as it is read: the file (the whole prompt, for the input) is never held twice.
    let file = bork_ci_core::safe_fs::open_no_follow_within(&path, OUTPUT_CAP)
        .with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_reader(std::io::BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("parsing {}", path.display()))
}
