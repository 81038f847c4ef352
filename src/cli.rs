//! The command line: `bork-ci run | pack | config | ...`, parsed with clap derive. Flags that set
//! configuration keys are `Option`s, so an absent flag overrides nothing; [`ConfigFlags::values`]
//! hands them to `config` as the highest layer.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::Value;

use crate::config::FlagValues;
use crate::sandbox::SandboxKind;

/// bork-ci: keeps a repository's code in line with its specs, headless, in CI.
#[derive(Debug, Parser)]
#[command(name = "bork-ci", version, about, after_help = crate::exit::HELP)]
pub struct Cli {
    /// How progress and diagnostics are written to stderr.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub log_format: LogFormat,
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
    /// Run the Verifier pipeline once and print its contract JSON (exit 0 PASS, 1 FAIL, 2 error).
    Verify(VerifyArgs),
    /// Remove containers and volumes left behind by bork-ci runs that are gone.
    Gc(GcArgs),
    /// One edit step of a run (ask, parse, apply), started by `bork-ci run` inside its sandbox.
    #[command(hide = true)]
    EditStep(EditStepArgs),
}

/// `bork-ci verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
}

/// `bork-ci gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    pub repo: RepoArgs,
    /// Also remove labelled leftovers older than this many seconds even if their run's process
    /// still seems alive (default: one day).
    #[arg(long, value_name = "SECS")]
    pub older_than_secs: Option<u64>,
}

/// `bork-ci edit-step`.
#[derive(Debug, Args)]
pub struct EditStepArgs {
    /// The state directory holding `input.json`; `output.json` is written there.
    #[arg(long, value_name = "DIR")]
    pub state: PathBuf,
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
    #[arg(long, value_name = "BRANCH")]
    pub base: Option<String>,
    /// Iterations before asking for a human (`max-iterations`).
    #[arg(long, value_name = "N")]
    pub max_iterations: Option<u32>,
    /// Path of the correctness checker, relative to the repository root (`correctness-checker`).
    #[arg(long, value_name = "PATH")]
    pub correctness_checker: Option<String>,
    /// Checker timeout in seconds (`checker-timeout-secs`).
    #[arg(long, value_name = "SECS")]
    pub checker_timeout_secs: Option<u64>,
    /// Wall-clock budget of the run in seconds (`run-timeout-secs`).
    #[arg(long, value_name = "SECS")]
    pub run_timeout_secs: Option<u64>,
    /// Token budget of the packed prompt (`context-budget-tokens`).
    #[arg(long, value_name = "TOKENS")]
    pub context_budget_tokens: Option<u64>,
    /// LLM provider: openai, anthropic or scripted (`llm.provider`).
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// Model name (`llm.model`).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Endpoint root of the provider (`llm.base-url`).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Name of the variable holding the API key (`llm.api-key-env`).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// Token budget of the whole run (`llm.max-total-tokens`).
    #[arg(long, value_name = "TOKENS")]
    pub max_total_tokens: Option<u64>,
    /// The scripted model's file of canned answers (`llm.script`).
    #[arg(long, value_name = "FILE")]
    pub script: Option<String>,
    /// Where steps run: docker or none (`sandbox.kind`).
    #[arg(long, value_enum, value_name = "KIND")]
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
    #[command(flatten)]
    pub github: crate::github::GithubFlags,
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
    #[command(flatten)]
    pub repo: RepoArgs,
    #[command(flatten)]
    pub flags: ConfigFlags,
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // tests lay out their fixtures directly
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
