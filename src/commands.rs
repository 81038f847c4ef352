//! Glue between the command line and the library: one function per subcommand, each returning
//! the exit code. Errors are printed here, once, with their context chain.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{Cli, Command, ConfigArgs, LogFormat, PackArgs, RepoArgs, ReviewArgs, RunArgs};
use crate::config::{self, Resolved};
use crate::exit::ExitCode;
use crate::reconcile::{self, RunOptions};
use crate::report;
use crate::sandbox::{Sandbox, SandboxKind};

/// Sets up `tracing` on stderr in the requested format.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BORK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.without_time().try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Runs the parsed command and returns its exit code.
pub async fn dispatch(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => run(args).await,
        Command::Pack(args) => pack(args),
        Command::Config(args) => show_config(args),
        Command::Review(args) => review(args).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            tracing::error!("{error:#}");
            ExitCode::Error
        }
    }
}

/// The repository root: `--repo`, or the current directory's git top level.
fn repo_root(args: &RepoArgs) -> Result<PathBuf> {
    let start = match &args.repo {
        Some(path) => path.clone(),
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let start = start
        .canonicalize()
        .with_context(|| format!("opening the repository at {}", start.display()))?;
    if start.join(".git").exists() || args.repo.is_some() {
        return Ok(start);
    }
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .current_dir(&start)
        .output();
    match output {
        Ok(output) if output.status.success() => {
            let top = String::from_utf8_lossy(&output.stdout).trim().to_owned();
            Ok(PathBuf::from(top))
        }
        _ => Ok(start),
    }
}

fn load_config(repo: &Path, args: &RepoArgs, flags: &crate::cli::ConfigFlags) -> Result<Resolved> {
    config::load(
        repo,
        args.config.as_deref(),
        &config::process_env(),
        &flags.values(),
    )
    .map_err(anyhow::Error::new)
    .context("invalid configuration")
}

fn show_config(args: ConfigArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(resolved.explain().as_bytes())
        .context("writing to stdout")?;
    Ok(ExitCode::Converged)
}

fn pack(args: PackArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let (conversation, snapshot) = reconcile::initial_prompt(&repo, &resolved)?;
    let estimate = reconcile::estimate(&conversation);
    let mut stdout = std::io::stdout().lock();
    let text = format!(
        "===== SYSTEM (prompt version {}) =====\n{}\n===== USER =====\n{}",
        crate::prompt::PROMPT_VERSION,
        conversation.system,
        conversation.prefix
    );
    stdout.write_all(text.as_bytes()).context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    let budget = resolved.config.context_budget_tokens;
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(
        stderr,
        "bork-ci pack: {} files, {} bytes, about {estimate} tokens (budget {budget})",
        snapshot.files.len(),
        text.len(),
    );
    if estimate > budget {
        let _ = writeln!(
            stderr,
            "warning: the prompt is over the context budget (`context-budget-tokens` = {budget}); `bork-ci run` would refuse it. Add what the model need not see to .gitignore."
        );
    }
    Ok(ExitCode::Converged)
}

fn sandbox_for(resolved: &Resolved) -> Result<Sandbox> {
    match resolved.config.sandbox.kind {
        SandboxKind::None => Ok(Sandbox::None(crate::sandbox::none::Local)),
        SandboxKind::Docker => anyhow::bail!(
            "the docker sandbox is not available in this build; use `--sandbox none` inside an already-isolated CI job"
        ),
    }
}

async fn run(args: RunArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let sandbox = sandbox_for(&resolved)?;
    let in_actions = config::process_env()
        .get("GITHUB_ACTIONS")
        .is_some_and(|value| value == "true");
    let options = RunOptions {
        repo,
        run_id: uuid::Uuid::new_v4().simple().to_string(),
        stop_token: in_actions.then(|| uuid::Uuid::new_v4().simple().to_string()),
    };
    let report = reconcile::run(&resolved, &sandbox, &options).await?;
    if let Some(path) = &args.report {
        report::write_json(&report, path)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if let Some(error) = &report.error {
        tracing::error!("{error}");
    }
    tracing::info!("{}", report.summary_line());
    Ok(report.status.exit_code())
}

async fn review(args: ReviewArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let mut flags = args.flags.values();
    if let Some(severity) = &args.min_severity {
        flags.push((
            "review.min-severity",
            serde_json::Value::from(severity.clone()),
            "--min-severity",
        ));
    }
    let resolved = config::load(&repo, args.repo.config.as_deref(), &config::process_env(), &flags)
        .map_err(anyhow::Error::new)
        .context("invalid configuration")?;
    let min_severity: crate::review::Severity = resolved
        .config
        .review
        .min_severity
        .parse()
        .map_err(|error| anyhow::anyhow!("review.min-severity: {error}"))?;
    let (outcome, usage) = reconcile::review_once(&resolved, &repo, args.files.as_deref()).await?;
    let output = crate::review::checker_output(&outcome, min_severity, args.format);
    if let Err(error) = &outcome {
        tracing::error!("the review failed: {error}");
    }
    tracing::info!(
        "review tokens: in {} out {} cached {}",
        usage.input_tokens,
        usage.output_tokens,
        usage.cached_input_tokens
    );
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(output.stdout.as_bytes())
        .context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    Ok(match output.exit_code {
        0 => ExitCode::Converged,
        1 => ExitCode::NeedsHuman,
        _ => ExitCode::Error,
    })
}
