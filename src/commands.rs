//! Glue between the command line and the library: one function per subcommand, each returning
//! the exit code. Errors are printed here, once, with their context chain.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use secrecy::ExposeSecret;

use crate::cli::{Cli, Command, ConfigArgs, LogFormat, PackArgs, RepoArgs, ReviewArgs, RunArgs};
use crate::config::{self, Resolved};
use crate::exit::ExitCode;
use crate::reconcile::{self, RunOptions};
use crate::report;
use crate::sandbox::{Sandbox, SandboxKind};

/// Sets up `tracing` on stderr: the format (`--log-format`), the level (`BORK_LOG` when set,
/// else `-q` warnings and errors only, default info, `-v` debug, `-vv` trace) and colour
/// (`--color`, `NO_COLOR`, `TERM=dumb`; JSON lines are never coloured).
pub fn init_logging(cli: &Cli) {
    let env = config::process_env();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let from_env = env
        .get("BORK_LOG")
        .filter(|value| !value.trim().is_empty())
        .filter(|value| tracing_subscriber::EnvFilter::try_new(value.as_str()).is_ok());
    let filter = tracing_subscriber::EnvFilter::new(from_env.map_or(level, String::as_str));
    let child_filter = from_env
        .cloned()
        .or_else(|| (cli.quiet || cli.verbose > 0).then(|| level.to_owned()));
    let ansi = cli.log_format == LogFormat::Text
        && cli.color.enabled(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            env.get("NO_COLOR").map(String::as_str),
            env.get("TERM").map(String::as_str),
        );
    let mut child_args = vec![
        "--color".to_owned(),
        if ansi { "always" } else { "never" }.to_owned(),
    ];
    if cli.quiet {
        child_args.push("--quiet".to_owned());
    }
    child_args.extend((0..cli.verbose.min(2)).map(|_| "--verbose".to_owned()));
    crate::cli::set_child_logging(crate::cli::ChildLogging {
        args: child_args,
        filter: child_filter,
    });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || -> Box<dyn std::io::Write> {
            // Every log line is one line, escaped and redacted; on a terminal (colors) only
            // redacted.
            if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
                Box::new(crate::secrets::Redacting(std::io::stderr()))
            } else if ansi {
                Box::new(crate::untrusted::ColourLogWriter(std::io::stderr()))
            } else {
                Box::new(crate::untrusted::LogWriter(std::io::stderr()))
            }
        })
        .with_target(false)
        .with_ansi(ansi);
    let _ = match cli.log_format {
        LogFormat::Text => builder.without_time().try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Runs the parsed command and returns its exit code.
pub async fn dispatch(cli: Cli) -> ExitCode {
    let result = match cli.command {
        Command::Run(args) => run(*args, cli.log_format == LogFormat::Json).await,
        Command::EditStep(args) => edit_step(args).await,
        Command::SandboxUnpack(args) => sandbox_unpack(&args),
        Command::Verify(args) => verify(args).await,
        Command::Gc(args) => gc(args).await,
        Command::Pack(args) => pack(args, cli.quiet),
        Command::Completions(args) => completions(&args),
        Command::Man(args) => man(&args),
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
#[allow(clippy::disallowed_methods)] // a git runner: finds the repository root
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

/// `bork-ci completions <shell>`: the completion script on stdout.
fn completions(args: &crate::cli::CompletionsArgs) -> Result<ExitCode> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "bork-ci", &mut script);
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script).context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    Ok(ExitCode::Converged)
}

/// `bork-ci man`: `bork-ci.1` on stdout, or every page into `--out-dir`.
fn man(args: &crate::cli::ManArgs) -> Result<ExitCode> {
    use clap::CommandFactory;
    let command = Cli::command().version(crate::cli::VERSION);
    match &args.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(command)
                .render(&mut page)
                .context("rendering the man page")?;
            let page = title_first(&page);
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&page).context("writing to stdout")?;
            stdout.flush().context("writing to stdout")?;
        }
    }
    Ok(ExitCode::Converged)
}

/// The page with its `.TH` line moved to the top (clap_mangen writes a string definition
/// first), so the page starts with its title as man pages conventionally do.
fn title_first(page: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(page);
    let mut lines: Vec<&str> = text.lines().collect();
    if let Some(index) = lines.iter().position(|line| line.starts_with(".TH ")) {
        let title = lines.remove(index);
        lines.insert(0, title);
    }
    let mut out = lines.join("\n");
    out.push('\n');
    out.into_bytes()
}

fn pack(args: PackArgs, quiet: bool) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let (conversation, snapshot) = reconcile::initial_prompt(&repo, &resolved)?;
    let estimate = reconcile::estimate(&conversation);
    let mut stdout = std::io::stdout().lock();
    let head = format!(
        "===== SYSTEM (prompt version {}) =====\n{}\n===== USER =====\n",
        crate::prompt::PROMPT_VERSION,
        conversation.system,
    );
    stdout.write_all(head.as_bytes()).context("writing to stdout")?;
    stdout
        .write_all(conversation.prefix.as_bytes())
        .context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    let total = head.len() + conversation.prefix.len();
    let budget = resolved.config.context_budget_tokens;
    let mut stderr = std::io::stderr().lock();
    if !quiet {
        let _ = writeln!(
            stderr,
            "bork-ci pack: {} files, {} bytes, about {estimate} tokens (budget {budget})",
            snapshot.files.len(),
            total,
        );
    }
    if estimate > budget {
        let _ = writeln!(
            stderr,
            "warning: the prompt is over the context budget (`context-budget-tokens` = {budget}); `bork-ci run` would refuse it. Add what the model need not see to .gitignore."
        );
    }
    Ok(ExitCode::Converged)
}

/// The docker backend's settings from the `sandbox.*` keys.
fn docker_settings(resolved: &Resolved) -> Result<crate::sandbox::docker::DockerSettings> {
    use crate::sandbox::docker::{DockerSettings, PullPolicy, parse_memory};
    let sandbox = &resolved.config.sandbox;
    let mut settings = DockerSettings::new(resolved.artifact_root());
    settings.host = resolved.docker_host.clone();
    settings.image = sandbox.image.clone();
    settings.runner_image = sandbox.runner_image.clone();
    settings.transport = crate::sandbox::docker::Transport::parse(&sandbox.transport)
        .ok_or_else(|| anyhow::anyhow!("sandbox.transport: must be one of auto, bind, copy"))?;
    settings.ulimits = crate::sandbox::docker::Ulimits {
        nofile: sandbox.ulimits.nofile,
        nproc: sandbox.ulimits.nproc,
    };
    settings.pull = match sandbox.pull.as_str() {
        "always" => PullPolicy::Always,
        "never" => PullPolicy::Never,
        _ => PullPolicy::Missing,
    };
    settings.network = sandbox.network.clone();
    settings.memory =
        Some(parse_memory(&sandbox.memory).map_err(|error| anyhow::anyhow!("sandbox.memory: {error}"))?);
    settings.cpus = Some(sandbox.cpus);
    settings.pids_limit = Some(sandbox.pids_limit);
    settings.user = sandbox.user.clone();
    Ok(settings)
}

/// How long labelled leftovers of a dead run are kept before `gc` removes them regardless.
const GC_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The artifact directory must live outside the repository: a checker that can write artifacts
/// must not be able to write into the tree it judges.
fn check_artifact_root(resolved: &Resolved, repo: &Path) -> Result<()> {
    let root = resolved.artifact_root();
    let absolute = if root.is_absolute() {
        root.clone()
    } else {
        std::env::current_dir()
            .context("reading the current directory")?
            .join(&root)
    };
    // The directory may not exist yet: compare the nearest existing ancestor.
    let mut probe = absolute.as_path();
    let existing = loop {
        if let Ok(canonical) = probe.canonicalize() {
            break canonical;
        }
        match probe.parent() {
            Some(parent) => probe = parent,
            None => break absolute.clone(),
        }
    };
    let repo = repo.canonicalize().unwrap_or_else(|_| repo.to_owned());
    if existing.starts_with(&repo) {
        anyhow::bail!(
            "the artifact directory {} is inside the repository {}; set `sandbox.artifact-dir` or AGENT_ARTIFACT_DIR to a directory outside it",
            root.display(),
            repo.display()
        );
    }
    Ok(())
}

async fn sandbox_for(resolved: &Resolved, run_id: &str) -> Result<Sandbox> {
    match resolved.config.sandbox.kind {
        SandboxKind::None => {
            // A same-user checker must not read this process's memory or environment.
            non_dumpable();
            Ok(Sandbox::None(crate::sandbox::none::Local))
        }
        SandboxKind::Docker => {
            let docker = crate::sandbox::docker::DockerSandbox::connect(docker_settings(resolved)?, run_id)
                .await
                .map_err(anyhow::Error::new)
                .context("connecting to the Docker engine")?;
            match crate::sandbox::docker::gc(&docker, GC_TTL).await {
                Ok(report) if !report.containers.is_empty() || !report.volumes.is_empty() => tracing::info!(
                    "removed {} leftover container(s) and {} volume(s) of earlier runs",
                    report.containers.len(),
                    report.volumes.len()
                ),
                Ok(_) => {}
                Err(error) => tracing::warn!("removing leftovers of earlier runs: {error}"),
            }
            Ok(Sandbox::Docker(Box::new(docker)))
        }
    }
}

async fn run(args: RunArgs, json_logs: bool) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let env = config::process_env();
    let in_actions = env.get("GITHUB_ACTIONS").is_some_and(|value| value == "true");
    let mut github_flags = args.github.clone();
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let github_config = &resolved.config.github;
    github_flags
        .github_label
        .get_or_insert_with(|| github_config.label.clone());
    github_flags
        .github_author_name
        .get_or_insert_with(|| github_config.author_name.clone());
    github_flags
        .github_author_email
        .get_or_insert_with(|| github_config.author_email.clone());
    let github = crate::github::GithubContext::from_env_and_flags(&github_flags)
        .map_err(anyhow::Error::new)
        .context("reading the GitHub settings")?
        .map(|mut ctx| {
            ctx.branch_prefix = github_config.branch_prefix.clone();
            ctx
        });
    // On pull-request events the checkout is not trusted yet: the settings that decide where
    // secrets go and what is protected come from the base branch's configuration file.
    let resolved = match &github {
        Some(ctx) if ctx.is_pull_request_event() => {
            let base = ctx.base_branch().unwrap_or_else(|| resolved.config.base.clone());
            let path = args
                .repo
                .config
                .as_ref()
                .map(|path| path.display().to_string())
                .unwrap_or_else(|| config::CONFIG_PATH.to_owned());
            let text = crate::github::file_at(ctx, &path, &base)
                .await
                .map_err(anyhow::Error::new)
                .with_context(|| format!("reading {path} from the base branch {base}"))?;
            tracing::info!("pull-request event: security settings come from {path} on {base}");
            config::load_with_trusted(
                &repo,
                args.repo.config.as_deref(),
                &env,
                &args.flags.values(),
                Some(text.as_deref()),
            )
            .map_err(anyhow::Error::new)
            .context("invalid configuration")?
        }
        _ => resolved,
    };
    if in_actions {
        // Mask every secret before anything else is printed.
        let mut stdout = std::io::stdout().lock();
        for secret in resolved.llm_secrets() {
            let _ = stdout.write_all(crate::actions::mask(secret.expose_secret()).as_bytes());
        }
        if let Some(ctx) = &github {
            let _ = stdout.write_all(crate::actions::mask(ctx.token.expose_secret()).as_bytes());
        }
        let _ = stdout.flush();
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let options = RunOptions {
        repo: repo.clone(),
        run_id: run_id.clone(),
        stop_token: in_actions.then(crate::actions::random_token),
        preamble: None,
        after_iteration: None,
        json_logs,
        spent: crate::budget::Spent::default(),
    };

    let skipped = github.as_ref().and_then(|ctx| ctx.untrusted_context());
    let report = if let Some(reason) = skipped {
        tracing::warn!("{reason}; nothing was run");
        let mut report = report::RunReport::new(
            run_id,
            resolved.config.llm.provider_name(),
            resolved.config.llm.model.clone(),
            "none".into(),
            resolved.config.max_iterations,
        );
        report.finish(report::RunStatus::Skipped, reason);
        report
    } else {
        resolved
            .validate_llm()
            .map_err(anyhow::Error::new)
            .context("invalid configuration")?;
        check_artifact_root(&resolved, &repo)?;
        let sandbox = sandbox_for(&resolved, &run_id).await?;
        let work = async {
            match &github {
                Some(ctx) => {
                    crate::delivery::run(
                        ctx,
                        &resolved,
                        &sandbox,
                        options,
                        github_flags.wait_for_approval.map(Into::into),
                    )
                    .await
                }
                None => reconcile::run(&resolved, &sandbox, &options).await,
            }
        };
        let result = tokio::select! {
            result = work => result,
            signal = shutdown_signal() => {
                tracing::warn!("received {signal}: removing this run's containers and stopping");
                sandbox.cleanup().await;
                crate::edit::apply::sweep_temp_files(&repo);
                Err(anyhow::anyhow!("interrupted by {signal}"))
            }
        };
        sandbox.cleanup().await;
        match result {
            Ok(report) => report,
            Err(error) => {
                // Errors before the loop could start: still leave a report and the outputs.
                let mut report = report::RunReport::new(
                    run_id,
                    resolved.config.llm.provider_name(),
                    resolved.config.llm.model.clone(),
                    format!("{:?}", sandbox.kind()).to_lowercase(),
                    resolved.config.max_iterations,
                );
                report.error = Some(format!("{error:#}"));
                report.finish(report::RunStatus::Error, "error");
                report
            }
        }
    };
    finish_run(
        &report,
        &args,
        &github_flags,
        resolved.config.correctness_checker.as_deref(),
    )?;
    Ok(report.status.exit_code())
}

/// Writes the report, SARIF, job summary, outputs and annotations, and prints the summary line.
fn finish_run(
    report: &report::RunReport,
    args: &RunArgs,
    github: &crate::github::GithubFlags,
    checker: Option<&str>,
) -> Result<()> {
    if let Some(path) = &args.report {
        report::write_json(report, path)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if let Some(path) = &args.sarif {
        let sarif = crate::sarif::render(&report.findings_left, env!("CARGO_PKG_VERSION"), checker);
        let text = serde_json::to_string_pretty(&sarif).context("rendering SARIF")?;
        crate::safe_fs::write_atomic(path, text.as_bytes())
            .with_context(|| format!("writing SARIF to {}", path.display()))?;
    }
    let result_pr = report.pull_requests.iter().find(|pr| pr.purpose == "result");
    if let Some(path) = &github.github_step_summary {
        let summary = crate::actions::render_summary(&crate::actions::SummaryInput {
            status: report.status.as_str().to_owned(),
            reason: Some(report.error.clone().unwrap_or_else(|| report.stop_reason.clone())),
            iterations: report.iterations.len() as u32,
            findings: report.findings_left.clone(),
            tokens: (
                report.usage.input_tokens,
                report.usage.output_tokens,
                report.usage.cached_input_tokens,
            ),
            cost_usd: report.cost_usd,
            pull_requests: report
                .pull_requests
                .iter()
                .map(|pr| crate::actions::SummaryLink {
                    title: format!("#{} ({})", pr.number, pr.purpose),
                    url: pr.url.clone(),
                })
                .collect(),
            logs: Vec::new(),
        });
        crate::actions::ActionsWriter::append(path, &summary)
            .with_context(|| format!("writing the job summary to {}", path.display()))?;
    }
    if let Some(path) = &github.github_output {
        let outputs = crate::actions::run_outputs(
            report.status.as_str(),
            result_pr.map(|pr| pr.number),
            result_pr.map(|pr| pr.url.as_str()),
            report.iterations.len() as u32,
        );
        crate::actions::ActionsWriter::append(path, &crate::actions::render_outputs(&outputs))
            .with_context(|| format!("writing step outputs to {}", path.display()))?;
    }
    if github.github_step_summary.is_some() || github.github_output.is_some() {
        let mut stdout = crate::secrets::Redacting(std::io::stdout().lock());
        for line in crate::actions::annotations(&report.findings_left) {
            let _ = stdout.write_all(line.as_bytes());
        }
        let _ = stdout.flush();
    }
    if let Some(error) = &report.error {
        tracing::error!("{error}");
    }
    tracing::info!(
        status = report.status.as_str(),
        exit_code = report.exit_code,
        iterations = report.iterations.len(),
        input_tokens = report.usage.input_tokens,
        output_tokens = report.usage.output_tokens,
        "{}",
        report.summary_line()
    );
    Ok(())
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
    resolved
        .validate_llm()
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
        input_tokens = usage.input_tokens,
        output_tokens = usage.output_tokens,
        cached_input_tokens = usage.cached_input_tokens,
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

async fn edit_step(args: crate::cli::EditStepArgs) -> Result<ExitCode> {
    use crate::edit_step::{self, EditStepInput};
    // The step holds the model key in its environment: closed to other same-user processes.
    non_dumpable();
    let input: EditStepInput = edit_step::read_json(&args.state, edit_step::INPUT)?;
    let env = config::process_env();
    let api_key = env
        .get(&input.llm.key_env())
        .filter(|key| !key.is_empty())
        .map(|key| secrecy::SecretString::from(key.clone()));
    let credentials = input.llm.credentials(&env);
    let repo = std::env::current_dir().context("reading the working directory")?;
    let output = edit_step::run(&input, &repo, api_key, credentials).await;
    edit_step::write_json(&args.state, edit_step::OUTPUT, &output)?;
    Ok(ExitCode::Converged)
}

/// `bork-ci sandbox-unpack`: unpacks, then confirms on stdout with the archive's name.
fn sandbox_unpack(args: &crate::cli::SandboxUnpackArgs) -> Result<ExitCode> {
    crate::sandbox::docker::unpack_tree(&args.archive, args.remove.as_deref(), &args.into).with_context(
        || {
            format!(
                "unpacking {} into {}",
                args.archive.display(),
                args.into.display()
            )
        },
    )?;
    let name = args
        .archive
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "bork-ci unpacked {name}").context("writing to stdout")?;
    Ok(ExitCode::Converged)
}

async fn verify(args: crate::cli::VerifyArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags)?;
    let steps = crate::verify::load_steps(&repo, &resolved.verification_steps())
        .context("reading the verification steps")?;
    if steps.is_empty() {
        anyhow::bail!(
            "no verification steps: set `verification.steps` in .config/bork.json or add agent.yaml"
        );
    }
    check_artifact_root(&resolved, &repo)?;
    let run_id = crate::verify::new_run_id();
    let sandbox = sandbox_for(&resolved, &run_id).await?;
    let mut options = crate::verify::VerifyOptions::new(resolved.artifact_root());
    options.timeout = std::time::Duration::from_secs(resolved.config.verification.timeout_secs);
    options.run_id = Some(run_id);
    options.secret_env = resolved.secret_env_names();
    let result = crate::verify::run(&sandbox, &repo, &steps, &options).await;
    sandbox.cleanup().await;
    let result = result.context("running the verifier")?;
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(result.to_json().as_bytes())
        .context("writing to stdout")?;
    stdout.write_all(b"\n").context("writing to stdout")?;
    Ok(match result.status {
        crate::verify::Status::Pass => ExitCode::Converged,
        crate::verify::Status::Fail => ExitCode::NeedsHuman,
    })
}

async fn gc(args: crate::cli::GcArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo).unwrap_or_else(|_| PathBuf::from("."));
    let resolved = load_config(&repo, &args.repo, &crate::cli::ConfigFlags::default())?;
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let docker = crate::sandbox::docker::DockerSandbox::connect(docker_settings(&resolved)?, &run_id)
        .await
        .map_err(anyhow::Error::new)
        .context("connecting to the Docker engine")?;
    let ttl = std::time::Duration::from_secs(args.older_than_secs.unwrap_or(GC_TTL.as_secs()));
    let report = crate::sandbox::docker::gc(&docker, ttl)
        .await
        .map_err(anyhow::Error::new)
        .context("removing leftovers")?;
    let caches = if args.keep_caches {
        Vec::new()
    } else {
        crate::sandbox::docker::gc_caches(&docker)
            .await
            .map_err(anyhow::Error::new)
            .context("removing unused cache volumes")?
    };
    let images = if args.keep_caches {
        Vec::new()
    } else {
        crate::sandbox::docker::gc_runner_images(&docker)
            .await
            .map_err(anyhow::Error::new)
            .context("removing older runner images")?
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(
        stdout,
        "removed {} container(s), {} volume(s), {} unused cache volume(s) and {} older runner image(s)",
        report.containers.len(),
        report.volumes.len(),
        caches.len(),
        images.len()
    );
    Ok(ExitCode::Converged)
}

/// Resolves on SIGINT or SIGTERM (a CI cancel), naming the signal.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) =
        (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        // Without handlers, never resolve: the default dispositions apply.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => "SIGINT",
        _ = terminate.recv() => "SIGTERM",
    }
}

/// Makes this process non-dumpable: `/proc/<pid>/environ` and `/proc/<pid>/mem` are then
/// closed to other processes of the same user (a checker run with `--sandbox none`).
pub fn non_dumpable() {
    if let Err(error) = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!("could not make bork-ci non-dumpable: {error}");
    }
}
