//! `bork-ci completions` and `bork-ci man`.

use std::io::Write;

use anyhow::{Context, Result};

use crate::cli::Cli;
use crate::exit::ExitCode;

/// `bork-ci completions <shell>`: the completion script on stdout.
pub(super) fn completions(args: &crate::cli::CompletionsArgs) -> Result<ExitCode> {
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
pub(super) fn man(args: &crate::cli::ManArgs) -> Result<ExitCode> {
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
