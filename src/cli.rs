//! The command line: `bork-ci run | pack | config | ...`, parsed with clap derive. Flags that set
//! configuration keys are `Option`s, so an absent flag overrides nothing; [`ConfigFlags::values`]
//! hands them to `config` as the highest layer.

use std::path::PathBuf;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::config::FlagValues;
use crate::exit::{ExitCode, RunStatus};
use crate::sandbox::SandboxKind;

/// The version `--version` prints: the crate's version, then the commit and its date when built
/// from a git checkout, e.g. `0.1.0 (abc1234 2026-11-23)`.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("BORK_CI_VERSION_SUFFIX"));

/// bork-ci: keeps a repository's code in line with its specs, headless, in CI.
#[derive(Debug, Parser)]
#[command(name = "bork-ci", version = VERSION, about, after_help = crate::exit::HELP)]
pub struct Cli {
    /// How progress and diagnostics are written to stderr.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
    /// When to colour what bork-ci prints: `auto` colours only a terminal, and not when
    /// `NO_COLOR` is set (non-empty) or `TERM` is `dumb`; `always` and `never` override both.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "auto", global = true)]
    pub color: ColorChoice,
    /// Print only warnings and errors: no progress lines.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Print more: `-v` adds bork-ci's debug lines, `-vv` every crate's debug lines and
    /// bork-ci's trace lines, `-vvv` every trace line but the AWS runtime's (they hold
    /// credentials). `BORK_LOG`, when set, takes precedence over `-q` and `-v` (an env-filter,
    /// e.g. `BORK_LOG=bork_ci::sandbox=debug`).
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for machines.
    Json,
}

pub use crate::run_plan::ChildLogging;

static CHILD_LOGGING: std::sync::OnceLock<ChildLogging> = std::sync::OnceLock::new();

/// Records how child processes log (the first call wins).
pub fn set_child_logging(logging: ChildLogging) {
    let _ = CHILD_LOGGING.set(logging);
}

/// How child processes log; the default before logging is set up.
pub fn child_logging() -> ChildLogging {
    CHILD_LOGGING.get().cloned().unwrap_or_default()
}

/// Which outcomes of a run make its process fail (`--fail-on`): a CI step stays green on the
/// others, whose outcome is still in the report, the outputs and the summary. An error always
/// fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FailOn {
    Error,
    NeedsHuman,
    AwaitingApproval,
}

/// The process's exit code for a run that ended `status`: its own code when `fail_on` is empty
/// (every outcome but converged fails) or names it, else 0.
pub fn run_exit(status: RunStatus, fail_on: &[FailOn]) -> ExitCode {
    let code = ExitCode::from(status);
    let named = match status {
        RunStatus::Error => true,
        RunStatus::NeedsHuman => fail_on.contains(&FailOn::NeedsHuman),
        RunStatus::AwaitingApproval => fail_on.contains(&FailOn::AwaitingApproval),
        RunStatus::Converged | RunStatus::Skipped => true,
    };
    if fail_on.is_empty() || named {
        code
    } else {
        ExitCode::Converged
    }
}

/// When to colour output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when writing to a terminal and `NO_COLOR` is not set.
    Auto,
    /// Always colour, even when not a terminal or `NO_COLOR` is set.
    Always,
    /// Never colour.
    Never,
}

impl ColorChoice {
    /// Whether to colour: `auto` needs a terminal, `NO_COLOR` unset or empty, and `TERM` not `dumb`.
    pub fn enabled(self, is_terminal: bool, no_color: Option<&str>, term: Option<&str>) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => is_terminal && no_color.is_none_or(str::is_empty) && term != Some("dumb"),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Bring the repository in line with its specs: pack, ask the model, apply, check, loop.
    #[command(after_help = crate::exit::HELP)]
    Run(Box<RunArgs>),
    /// Print exactly the prompt that would be sent (stdout), with its size and token estimate (stderr).
    Pack(PackArgs),
    /// Print the resolved configuration and where each value came from.
    Config(ConfigArgs),
    /// Review the working tree's changes against the base branch with the LLM reviewer; a
    /// correctness checker itself (JSON on stdout; exit 0 clean, 1 findings, 2 failed to run).
    Review(ReviewArgs),
    /// Run a test tool as a correctness checker: one finding per failing test (file, line, test,
    /// message) as the checker contract's JSON on stdout (exit 0 clean, 1 findings, 2 the tool
    /// could not start), the tool's output tail on stderr.
    ///
    /// Known tools are asked for structured output: pytest (JUnit XML), `go test -json`, jest
    /// and vitest (JSON), `node --test` (TAP); `cargo test` and `prove` are read as they print.
    #[command(long_about)]
    Check(CheckArgs),
    /// Run the Verifier pipeline once and print its contract JSON (exit 0 PASS, 1 FAIL, 2 error).
    Verify(VerifyArgs),
    /// Remove what bork-ci runs left on the engine once their lease ran out.
    ///
    /// Every container and volume a run creates carries `bork-ci.lease-until`: its creation
    /// time plus the run's whole budget (`run-timeout-secs`) and 15 minutes. `gc` (and each run's
    /// start-up sweep) removes only what is past its lease, never a run's own while it runs,
    /// never by process ids, host names or paths, so a bork-ci in another PID or mount namespace,
    /// or on another host sharing the engine, can never remove a live run's work. Cache volumes
    /// go only when no container references them (a live run holds its own with an idle anchor
    /// container) and they are older than `--older-than-secs`.
    #[command(long_about)]
    Gc(GcArgs),
    /// Write `.config/bork.json`, a correctness checker for the repository's toolchain and, with
    /// --ci, the pipeline file; never over an existing file without --force.
    Init(InitArgs),
    /// Check what a first run needs, one line each with the fix: git, config, key, endpoint,
    /// engine, image, setup, the checker on this tree (exit 0 all passed, 2 otherwise).
    Doctor(Box<DoctorArgs>),
    /// Print a shell completion script to stdout (bash, zsh, fish, powershell, elvish).
    Completions(CompletionsArgs),
    /// Print the man page (roff) to stdout, or write one page per command into a directory.
    Man(ManArgs),
    /// One edit step of a run (ask, parse, apply), started by `bork-ci run` inside its sandbox.
    #[command(hide = true)]
    EditStep(EditStepArgs),
    /// Unpack the working tree's archive, read from stdin, into a volume, inside a helper
    /// container of the runner image (the `copy` transport's fast path).
    #[command(hide = true)]
    SandboxUnpack(SandboxUnpackArgs),
}

/// `bork-ci sandbox-unpack`.
#[derive(Debug, Args)]
pub struct SandboxUnpackArgs {
    /// The directory to unpack the tar read from stdin into.
    #[arg(long, value_name = "DIR")]
    pub into: PathBuf,
    /// Names this call: the archive's first entry `.bork-ci-remove-TOKEN`, when there, lists
    /// the relative paths (NUL-separated) to remove first; the confirmation names it too.
    #[arg(long, value_name = "TOKEN", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub token: String,
}

/// How `bork-ci config` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ConfigFormat {
    Text,
    Json,
}

/// `bork-ci completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `bork-ci man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write `bork-ci.1` and a page per subcommand (`bork-ci-run.1`, ...) into this directory
    /// instead of printing `bork-ci.1` to stdout.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `bork-ci verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
}

/// `bork-ci check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The structured output to read: `auto` asks a known tool for it, else sniffs the output.
    #[arg(long, value_enum, default_value = "auto")]
    pub format: crate::check::Format,
    /// A JUnit XML file the command writes, read once it ends.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// A SARIF file the command writes, read once it ends; each result is a finding.
    #[arg(long, value_name = "FILE")]
    pub sarif: Option<PathBuf>,
    /// The test command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `bork-ci init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// The toolchain to write a checker for; default: the first one found (rust, python, node,
    /// go, make).
    #[arg(long, value_enum)]
    pub toolchain: Option<crate::init::Toolchain>,
    /// Also write the pipeline file of this CI system.
    #[arg(long, value_enum)]
    pub ci: Option<crate::init::Ci>,
    /// Replace files that exist and differ from what init writes (without it they are kept
    /// and listed).
    #[arg(long)]
    pub force: bool,
    /// The LLM provider the config names (`llm.provider`): openai, anthropic, azure, bedrock
    /// or vertex; default openai.
    #[arg(long, value_parser = ["openai", "anthropic", "azure", "bedrock", "vertex"])]
    pub provider: Option<String>,
    /// With `--ci github`: pin the action by the commit its release tag `v<this version>` points
    /// at (asked of GitHub's API: `GITHUB_API_URL`, default `https://api.github.com`), the
    /// version as a comment. Without it the workflow uses the tag.
    #[arg(long)]
    pub pin: bool,
}

/// `bork-ci doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Also send the model one tiny request (paid): proves the key and the model name.
    #[arg(long)]
    pub call: bool,
    #[command(flatten)]
    pub github: crate::github::GithubFlags,
}

/// `bork-ci gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Age past which unreferenced cache volumes, leftovers of older bork-ci versions (without
    /// a lease) and killed runs' build folders go (default: one day).
    #[arg(long, value_name = "SECS")]
    pub older_than_secs: Option<u64>,
    /// Keep the cache volumes no container references (one per repository and base, made by
    /// the `copy` transport) and the runner images of older bork-ci executables; by default
    /// both go once old enough (images: when no container uses them).
    #[arg(long)]
    pub keep_caches: bool,
}

/// `bork-ci edit-step`.
#[derive(Debug, Args)]
pub struct EditStepArgs {
    /// The state directory holding `input.json`; `output.json` is written there.
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
    /// Read the state folder's files from stdin (one tar, `input.json` among them) into `--state`
    /// and write the result to stdout instead of `output.json`.
    #[arg(long)]
    pub stdio: bool,
}

/// `bork-ci review`.
#[derive(Debug, Args)]
pub struct ReviewArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Review exactly these paths instead of every changed file.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub files: Option<Vec<String>>,
    /// `findings` (the correctness-checker format) or `review-result` (the validated ReviewResult
    /// with its diagnostics).
    #[arg(long, value_enum, default_value = "findings")]
    pub format: crate::review::OutputFormat,
    /// Lowest severity reported (`review.min-severity`).
    #[arg(long, value_name = "SEVERITY")]
    pub min_severity: Option<String>,
}

/// Where the repository and its configuration are.
#[derive(Debug, Clone, Args)]
pub struct RepoArgs {
    /// The repository root (default: the current directory's repository).
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
    /// The configuration file (default: `.config/bork.json` in the repository).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Flags that override configuration keys (highest precedence).
#[derive(Debug, Clone, Default, Args)]
pub struct ConfigFlags {
    /// The branch the spec diff is taken against (`base`).
    #[arg(long, help_heading = "Loop", value_name = "BRANCH")]
    pub base: Option<String>,
    /// The revision the spec diff is taken against, overriding `--base` and the push's own
    /// `before` commit (`diff-base`).
    #[arg(long, help_heading = "Loop", value_name = "REV")]
    pub diff_base: Option<String>,
    /// Iterations before asking for a human (`max-iterations`).
    #[arg(long, help_heading = "Loop", value_name = "N")]
    pub max_iterations: Option<u32>,
    /// Path of the correctness checker, relative to the repository root (`correctness-checker`).
    #[arg(long, help_heading = "Loop", value_name = "PATH")]
    pub correctness_checker: Option<String>,
    /// Checker timeout in seconds (`checker-timeout-secs`).
    #[arg(long, help_heading = "Loop", value_name = "SECS")]
    pub checker_timeout_secs: Option<u64>,
    /// Wall-clock budget of the run in seconds (`run-timeout-secs`).
    #[arg(long, help_heading = "Loop", value_name = "SECS")]
    pub run_timeout_secs: Option<u64>,
    /// Token budget of the packed prompt (`context-budget-tokens`).
    #[arg(long, help_heading = "Loop", value_name = "TOKENS")]
    pub context_budget_tokens: Option<u64>,
    /// LLM provider: openai, anthropic, azure, bedrock, vertex or scripted (`llm.provider`).
    #[arg(long, help_heading = "Model", value_name = "NAME")]
    pub provider: Option<String>,
    /// Model name (`llm.model`).
    #[arg(long, help_heading = "Model", value_name = "MODEL")]
    pub model: Option<String>,
    /// Endpoint root of the provider (`llm.base-url`).
    #[arg(long, help_heading = "Model", value_name = "URL")]
    pub base_url: Option<String>,
    /// Name of the variable holding the API key (`llm.api-key-env`).
    #[arg(long, help_heading = "Model", value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Token budget of the whole run (`llm.max-total-tokens`).
    #[arg(long, help_heading = "Model", value_name = "TOKENS")]
    pub max_total_tokens: Option<u64>,
    /// Cost budget of the whole run in US dollars, priced with `llm.prices` (`llm.max-cost-usd`).
    #[arg(long, help_heading = "Model", value_name = "USD", value_parser = dollars)]
    pub max_cost_usd: Option<f64>,
    /// The scripted model's file of canned answers (`llm.script`).
    #[arg(long, help_heading = "Model", value_name = "FILE")]
    pub script: Option<String>,
    /// Where steps run: docker or none (`sandbox.kind`).
    #[arg(long, help_heading = "Sandbox", value_enum, value_name = "KIND")]
    pub sandbox: Option<SandboxKind>,
}

impl ConfigFlags {
    /// The flags that were given, as configuration values.
    pub fn values(&self) -> FlagValues {
        let mut values: FlagValues = Vec::new();
        let mut put = |key: &'static str, value: Option<Value>, flag: &'static str| {
            if let Some(value) = value {
                values.push((key, value, flag));
            }
        };
        put("base", self.base.clone().map(Value::from), "--base");
        put(
            "diff-base",
            self.diff_base.clone().map(Value::from),
            "--diff-base",
        );
        put(
            "max-iterations",
            self.max_iterations.map(Value::from),
            "--max-iterations",
        );
        put(
            "correctness-checker",
            self.correctness_checker.clone().map(Value::from),
            "--correctness-checker",
        );
        put(
            "checker-timeout-secs",
            self.checker_timeout_secs.map(Value::from),
            "--checker-timeout-secs",
        );
        put(
            "run-timeout-secs",
            self.run_timeout_secs.map(Value::from),
            "--run-timeout-secs",
        );
        put(
            "context-budget-tokens",
            self.context_budget_tokens.map(Value::from),
            "--context-budget-tokens",
        );
        put(
            "llm.provider",
            self.provider.clone().map(Value::from),
            "--provider",
        );
        put("llm.model", self.model.clone().map(Value::from), "--model");
        put(
            "llm.base-url",
            self.base_url.clone().map(Value::from),
            "--base-url",
        );
        put(
            "llm.api-key-env",
            self.api_key_env.clone().map(Value::from),
            "--api-key-env",
        );
        put(
            "llm.max-total-tokens",
            self.max_total_tokens.map(Value::from),
            "--max-total-tokens",
        );
        put(
            "llm.max-cost-usd",
            self.max_cost_usd.map(Value::from),
            "--max-cost-usd",
        );
        put("llm.script", self.script.clone().map(Value::from), "--script");
        put(
            "sandbox.kind",
            self.sandbox.map(|kind| {
                Value::from(if kind == SandboxKind::None {
                    "none"
                } else {
                    "docker"
                })
            }),
            "--sandbox",
        );
        values
    }
}

/// `bork-ci run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
    /// Write the run report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
    /// Write the findings left at the end as SARIF 2.1.0 to this file (for code scanning).
    #[arg(long, value_name = "PATH")]
    pub sarif: Option<PathBuf>,
    /// Outcomes that make the process fail, comma-separated: error, needs-human,
    /// awaiting-approval. Others exit 0 (the report, outputs and summary still say what
    /// happened); an error always fails. Unset: every outcome but converged fails (exit 1, 2, 3).
    /// Falls back to `BORK_FAIL_ON`.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "OUTCOMES")]
    pub fail_on: Vec<FailOn>,
    #[command(flatten)]
    pub github: crate::github::GithubFlags,
}

impl RunArgs {
    /// `--fail-on`, else `BORK_FAIL_ON` in `env` (comma-separated; set but empty counts as unset).
    pub fn fail_on_or_env(
        &self,
        env: &std::collections::BTreeMap<String, String>,
    ) -> anyhow::Result<Vec<FailOn>> {
        use crate::config::env_vars::flag::BORK_FAIL_ON;
        if !self.fail_on.is_empty() {
            return Ok(self.fail_on.clone());
        }
        let Some(text) = env.get(BORK_FAIL_ON).filter(|text| !text.is_empty()) else {
            return Ok(Vec::new());
        };
        text.split(',')
            .map(|item| {
                <FailOn as ValueEnum>::from_str(item, false).map_err(|_| {
                    anyhow::anyhow!(
                        "{BORK_FAIL_ON}: `{}` is not an outcome; use error, needs-human or awaiting-approval",
                        crate::untrusted::one_line(item)
                    )
                })
            })
            .collect()
    }
}

/// `bork-ci pack`.
#[derive(Debug, Args)]
pub struct PackArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
}

/// `bork-ci config`.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// `text`: one line per key, `key = value  # source`; `json`: every key with its value
    /// (`null` when unset) and source.
    #[arg(long, value_enum, default_value_t = ConfigFormat::Text)]
    pub format: ConfigFormat,
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
}

/// An amount of US dollars: a finite number, 0 or more.
fn dollars(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(amount) if amount.is_finite() && amount >= 0.0 => Ok(amount),
        _ => Err(format!("expected an amount of dollars, 0 or more, got {text:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn absent_flags_override_nothing() {
        assert!(ConfigFlags::default().values().is_empty());
        let cli = Cli::parse_from(["bork-ci", "run", "--max-iterations", "3", "--sandbox", "none"]);
        let Command::Run(args) = cli.command else {
            panic!("run expected")
        };
        let keys: Vec<_> = args.flags.values().iter().map(|(key, _, _)| *key).collect();
        assert_eq!(keys, vec!["max-iterations", "sandbox.kind"]);
    }
}
