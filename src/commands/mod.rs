//! The command line's verbs, one file each (`commands/<verb>.rs`), each short: read the
//! flags, ask the library, print, return how it ended. Policy lives in the modules that own it;
//! exit codes come from `exit`. Errors are printed here, once, with their context chain.

mod check;
mod docs;
mod doctor;
mod edit_step;
mod gc;
mod init;
mod pack;
mod review;
mod run;
mod sandbox_unpack;
mod show_config;
mod verify;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::cli::{Cli, Command, LogFormat, RepoArgs};
use crate::config::{self, Resolved};
use crate::exit::ExitCode;
use crate::sandbox::{Sandbox, SandboxKind};

/// Sets up `tracing` on stderr: the format (`--log-format`), the level (`BORK_LOG` when set,
/// else `-q` warnings and errors only, default info, `-v` bork-ci's own debug lines, `-vv`
/// every crate's debug lines and bork-ci's trace, `-vvv` every trace line but the AWS
/// runtime's) and colour (`--color`, `NO_COLOR`, `TERM=dumb`; JSON lines are never coloured).
pub fn init_logging(cli: &Cli, env: &config::Env) {
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "info,bork_ci=debug",
        (false, 2) => "debug,bork_ci=trace",
        // The AWS runtime traces whole requests and answers: STS's carries the web identity
        // token, every credential endpoint's the keys it grants.
        (false, _) => "trace,aws_smithy_runtime=debug",
    };
    let from_env = env
        .get("BORK_LOG")
        .filter(|value| !value.trim().is_empty())
        .filter(|value| tracing_subscriber::EnvFilter::try_new(value.as_str()).is_ok());
    // The credential crates' own chatter (each source of a chain they try) only under -v:
    // bork-ci reports their outcome in its own words.
    let quiet_crates = match cli.verbose {
        0 => format!("{level},aws_config=error,aws_smithy_runtime=error,google_cloud_auth=error"),
        _ => level.to_owned(),
    };
    let filter = tracing_subscriber::EnvFilter::new(from_env.map_or(quiet_crates.as_str(), String::as_str));
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
    // Every log line is one line, redacted and escaped, on a terminal as in a runner's log.
    let writer = move || crate::untrusted::log_writer(ansi);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi);
    let _ = match cli.log_format {
        // Text lines say it in words, with only the fields the words do not already say; every
        // field is in `--log-format json`.
        LogFormat::Text => builder.without_time().fmt_fields(MessageFirst).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The text log's fields: the message, then only the fields whose value it does not already
/// hold (`iteration 1 of 5` needs no `iteration=1 max_iterations=5` after it). Each is
/// [`crate::untrusted::terminal_text`], so the only colour codes in a line are the formatter's.
struct MessageFirst;

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for MessageFirst {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut collected = Fields::default();
        fields.record(&mut collected);
        write!(writer, "{}", crate::untrusted::terminal_text(&collected.message))?;
        for (name, value) in &collected.others {
            if !collected.message.contains(value.as_str()) {
                write!(writer, " {name}={}", crate::untrusted::terminal_text(value))?;
            }
        }
        Ok(())
    }
}

/// A log event's fields as text, the message apart.
#[derive(Default)]
struct Fields {
    message: String,
    others: Vec<(&'static str, String)>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            name => self.others.push((name, value.to_owned())),
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            name => self.others.push((name, format!("{value:?}"))),
        }
    }
}

/// Runs the parsed command with the process environment `env` (read once, by `main`) and
/// returns its exit code.
pub async fn dispatch(cli: Cli, env: config::Env) -> ExitCode {
    let env = &env;
    let result = match cli.command {
        Command::Run(args) => run::run(*args, cli.log_format == LogFormat::Json, env).await,
        Command::EditStep(args) => edit_step::edit_step(args, env).await,
        Command::SandboxUnpack(args) => sandbox_unpack::sandbox_unpack(&args),
        Command::Verify(args) => verify::verify(args, env).await,
        Command::Gc(args) => gc::gc(args, env).await,
        Command::Init(args) => init::init(args, env).await,
        Command::Doctor(args) => doctor::doctor(*args, env).await,
        Command::Pack(args) => pack::pack(args, cli.quiet, env),
        Command::Completions(args) => docs::completions(&args),
        Command::Man(args) => docs::man(&args),
        Command::Config(args) => show_config::show_config(args, env),
        Command::Review(args) => review::review(args, env).await,
        Command::Check(args) => check::check(args).await,
    };
    match result {
        Ok(code) => code,
        Err(error) => {
            crate::report::log_error(&crate::report::error_text(&error));
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
    match crate::git::run(&start, &["rev-parse", "--show-toplevel"]) {
        Ok(stdout) => Ok(PathBuf::from(String::from_utf8_lossy(&stdout).trim())),
        Err(_) => Ok(start),
    }
}

fn load_config(
    repo: &Path,
    args: &RepoArgs,
    flags: &crate::cli::ConfigFlags,
    env: &config::Env,
) -> Result<Resolved> {
    for (name, meant) in config::env_vars::unknown(env.keys()) {
        match meant {
            Some(meant) => {
                tracing::warn!("`{name}` is not a bork-ci variable and is ignored; did you mean `{meant}`?")
            }
            None => tracing::warn!("`{name}` is not a bork-ci variable and is ignored"),
        }
    }
    config::load(repo, args.config.as_deref(), env, &flags.values())
        .map_err(anyhow::Error::new)
        .context("invalid configuration")
}

/// The age past which `gc` removes unreferenced caches and leftovers without a lease (made by
/// an older bork-ci); what has a lease goes when it runs out.
const GC_TTL: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// The sandbox of a run: local processes (this process made non-dumpable first), or the
/// Docker engine with what earlier runs left and whose lease ran out removed.
async fn sandbox_for(resolved: &Resolved, repo: &std::path::Path, run_id: &str) -> Result<Sandbox> {
    match resolved.config.sandbox.kind {
        SandboxKind::None => {
            // A same-user checker must not read this process's memory or environment.
            non_dumpable();
            Ok(Sandbox::None(crate::sandbox::none::Local::new(
                resolved.shared_dirs(repo, run_id),
                resolved.toolchain_homes.clone(),
            )))
        }
        SandboxKind::Docker => {
            let mut settings = resolved.docker_settings().map_err(anyhow::Error::new)?;
            settings.deps_identity = resolved.deps_identity(repo);
            let docker = crate::sandbox::docker::DockerSandbox::connect(settings, run_id)
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
