//! What a run reads, resolved once before it starts: the binary crate builds a [`RunPlan`] from
//! the configuration file, the CI's variables and the command line, and the loop reads this and
//! nothing else. This crate cannot name the configuration (no `config`, figment or clap in its
//! manifest), so a setting the loop reads a second way, or a variable it reads behind the plan's
//! back, does not compile.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bork_ci_edit::edit::judge_files::JudgeRules;
use bork_ci_edit::pack::PackOptions;
use bork_ci_edit::review::Severity;
use bork_ci_llm::llm::{Credentials, LlmConfig, LlmSettings};
use bork_ci_sandbox::verify::Step;
use secrecy::SecretString;

use crate::budget::Limits;

/// The rule reported for a file the dev container's build reads.
pub const DEVCONTAINER_BUILD_RULE: &str = "read by the dev container's build";

/// Everything one run reads, resolved once.
#[derive(Clone)]
pub struct RunPlan {
    /// The edit step's model: `llm`, its key and its other credentials.
    pub model: Model,
    /// The reviewer: `review.*`, and its model (`review.llm` over `llm`).
    pub review: Review,
    /// How the repository is packed: `base`, `diff-base`, `max-file-bytes` and the CI's push.
    pub pack: PackOptions,
    /// `context-budget-tokens`: the packed prompt's upper bound.
    pub context_budget_tokens: u64,
    /// The run's budgets (`run-timeout-secs`, `llm.max-total-tokens`, `llm.max-cost-usd`).
    pub limits: Limits,
    /// `max-iterations`: iterations between two human looks.
    pub max_iterations: u32,
    /// `correctness-checker`: the checker's path in the repository.
    pub checker: Option<String>,
    /// `checker-timeout-secs`.
    pub checker_timeout: Duration,
    /// `preflight`: the checker runs once on the approved tree before the first model call.
    pub preflight: bool,
    /// `confirm-clean`: a clean verdict is confirmed with an empty build cache.
    pub confirm_clean: bool,
    /// What the model may change and what is held (`code`, `tests`, `judge-files`, ...).
    pub approval: Approval,
    /// The Verifier's configured steps (`verification.steps`; empty: the repository's
    /// `agent.yaml`, read per round) and `verification.timeout-secs`.
    pub verification: Verification,
    /// The setup commands (`sandbox.setup`).
    pub setup: Setup,
    /// Variables whose values no job but the edit step (its own key) may see.
    pub secret_env: Vec<String>,
    /// The environment the run was started with: where the values of those variables are
    /// looked up (to keep them out of the prompt).
    pub env: BTreeMap<String, String>,
    /// Where the run's artifacts (state, caches, logs) go.
    pub artifact_root: PathBuf,
    /// How the edit step, a child process, logs.
    pub logging: ChildLogging,
}

impl std::fmt::Debug for RunPlan {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RunPlan")
            .field("model", &self.model)
            .field("checker", &self.checker)
            .field("max_iterations", &self.max_iterations)
            .field("artifact_root", &self.artifact_root)
            .finish_non_exhaustive()
    }
}

/// A model and what reaches it: its settings, its key and its other credentials.
#[derive(Clone)]
pub struct Model {
    pub llm: LlmConfig,
    /// The key, read from the variable [`LlmConfig::key_env`] names.
    pub api_key: Option<SecretString>,
    /// AWS, Google and `${NAME}` extra-header credentials.
    pub credentials: Credentials,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Model")
            .field("provider", &self.llm.provider)
            .field("model", &self.llm.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

impl Model {
    /// The provider's settings (see [`LlmConfig::settings`]).
    pub fn settings(&self) -> LlmSettings {
        self.llm.settings(self.api_key.clone(), self.credentials.clone())
    }
}

/// The reviewer.
#[derive(Debug, Clone)]
pub struct Review {
    /// `review.min-severity` when `review.enabled`; `None`: no reviewer in the loop.
    pub min_severity: Option<Severity>,
    /// `review.allow-prompt-patch-drift`.
    pub allow_prompt_patch_drift: bool,
    /// `review.llm` over `llm`.
    pub model: Model,
}

/// What the model may change, and what is held for a human.
#[derive(Debug, Clone, Default)]
pub struct Approval {
    /// `edits-require-approval`: further globs held like specs.
    pub edits_require_approval: Vec<String>,
    /// `judge-files`: further judge-file globs.
    pub judge_files: Vec<String>,
    /// `judge-files-exempt`: defaults turned off, with the reason.
    pub judge_files_exempt: BTreeMap<String, String>,
    /// `code`; `None`: derived from the repository's layout.
    pub code: Option<Vec<String>>,
    /// `tests`; `None`: the usual test names.
    pub tests: Option<Vec<String>>,
}

/// The Verifier's configuration.
#[derive(Debug, Clone, Default)]
pub struct Verification {
    pub steps: Vec<Step>,
    pub timeout: Duration,
}

/// The setup commands.
#[derive(Debug, Clone, Default)]
pub struct Setup {
    /// `sandbox.setup`: shell commands, run in order on the approved revision.
    pub commands: Vec<String>,
    /// `sandbox.setup-timeout-secs`: for all of them.
    pub timeout: Duration,
    /// `sandbox.setup-network`, as written (for the log).
    pub network: String,
}

/// How a child `bork-ci` (the edit step) is told to log like this process: the flags
/// (`--color always|never` as decided here, since the child writes to a pipe; `-q`; `-v`) for
/// the same executable, and the `BORK_LOG` filter for an edit-step image that may hold another
/// version.
#[derive(Debug, Clone, Default)]
pub struct ChildLogging {
    /// Flags for the same executable.
    pub args: Vec<String>,
    /// The filter in effect, when `BORK_LOG`, `-q` or `-v` chose one.
    pub filter: Option<String>,
}

impl RunPlan {
    /// The judge files of the plan (see `judge_files`); an error names a bad
    /// `judge-files-exempt` entry.
    pub fn judge_rules(&self) -> Result<JudgeRules, String> {
        judge_rules(self.checker.as_deref(), &self.approval)
    }

    /// What the dependency cache's key names besides the tree of the repository at `repo`.
    pub fn deps_identity(&self, repo: &Path) -> String {
        deps_identity(repo, &self.pack.base)
    }

    /// The judge files on the repository at `repo` (see [`judge_rules_in`]).
    pub fn judge_rules_in(&self, repo: &Path) -> Result<JudgeRules, String> {
        judge_rules_in(self.checker.as_deref(), &self.approval, repo)
    }
}

/// What the dependency cache's key names besides the tree: the repository at `repo` and the
/// branch `base` its specs are diffed against.
pub fn deps_identity(repo: &Path, base: &str) -> String {
    format!("{}\n{}", repo.display(), base)
}

/// The judge files that `checker` and `approval` name (see `judge_files`).
pub fn judge_rules(checker: Option<&str>, approval: &Approval) -> Result<JudgeRules, String> {
    JudgeRules::resolve(checker, &approval.judge_files, &approval.judge_files_exempt)
}

/// The judge files on the repository at `repo`: [`judge_rules`] and everything the repository's
/// dev container build reads (`sandbox::devcontainer::build_inputs`), so that the model cannot
/// change what the judges run in through a Dockerfile or a file it copies from outside
/// `.devcontainer/`.
pub fn judge_rules_in(checker: Option<&str>, approval: &Approval, repo: &Path) -> Result<JudgeRules, String> {
    let mut rules = judge_rules(checker, approval)?;
    // They are never code either (`reconcile::plan::code_rules`); as judge files they are also
    // compared with the approved revision before and after every judge.
    match bork_ci_sandbox::sandbox::devcontainer::build_inputs(repo) {
        Ok(inputs) => {
            for note in &inputs.notes {
                tracing::warn!("the dev container: {note}");
            }
            rules.globs.extend(
                inputs
                    .globs
                    .into_iter()
                    .map(|glob| (glob, DEVCONTAINER_BUILD_RULE.to_owned())),
            );
        }
        // The dev container's own files are judge files already; a build that cannot be read
        // fails where it is built.
        Err(error) => tracing::debug!("the dev container's build inputs: {error}"),
    }
    Ok(rules)
}
