//! `bork-ci check -- <command>`: runs a test tool as a correctness checker and prints the
//! contract's JSON (exit 0 clean, 1 findings, 2 the tool could not start). The tool's output
//! tails go to stderr, escaped.

use std::io::Write;

use anyhow::{Context, Result};

use crate::check::run::{Options, run};
use crate::exit::ExitCode;

pub(super) async fn check(args: crate::cli::CheckArgs) -> Result<ExitCode> {
    let repo = std::env::current_dir().context("reading the current directory")?;
    let options = Options {
        format: args.format,
        junit: args.junit,
        sarif: args.sarif,
    };
    let mut stderr = std::io::stderr().lock();
    let checked = match run(&args.command, &options, &repo).await {
        Ok(checked) => checked,
        Err(not_started) => {
            let line = crate::untrusted::line(&format!("bork-ci check: {not_started}"));
            let _ = writeln!(stderr, "{line}");
            return Ok(ExitCode::Error);
        }
    };
    for (name, tail) in [("stdout", &checked.stdout_tail), ("stderr", &checked.stderr_tail)] {
        if !tail.is_empty() {
            let _ = writeln!(
                stderr,
                "--- {name} of `{}` (its end) ---\n{}",
                crate::untrusted::inline(&crate::check::run::shell_words(&args.command)),
                crate::untrusted::terminal_lines(tail)
            );
        }
    }
    let _ = writeln!(
        stderr,
        "bork-ci check: `{}` {}; {} finding(s)",
        crate::untrusted::inline(&crate::check::run::shell_words(&args.command)),
        checked.ended,
        checked.findings.len()
    );
    let json = serde_json::to_string_pretty(&checked.findings).context("writing the findings")?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(json.as_bytes()).context("writing to stdout")?;
    stdout.write_all(b"\n").context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
    Ok(ExitCode::of_checker_contract(checked.exit_code))
}
