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

/// `bork-ci man`: `bork-ci.1` on stdout, or every page into `--out-dir`. The main page has
/// EXIT STATUS, ENVIRONMENT and FILES besides what clap describes.
pub(super) fn man(args: &crate::cli::ManArgs) -> Result<ExitCode> {
    use clap::CommandFactory;
    let command = Cli::command().version(crate::cli::VERSION);
    let page = main_page(command.clone())?;
    match &args.out_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
            crate::safe_fs::write_atomic(&dir.join("bork-ci.1"), &page)
                .with_context(|| format!("writing {}", dir.join("bork-ci.1").display()))?;
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&page).context("writing to stdout")?;
            stdout.flush().context("writing to stdout")?;
        }
    }
    Ok(ExitCode::Converged)
}

/// `bork-ci.1`: clap's sections, then EXIT STATUS, ENVIRONMENT and FILES, then the version.
fn main_page(command: clap::Command) -> Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command);
    let mut page = Vec::new();
    let render = |page: &mut Vec<u8>| -> std::io::Result<()> {
        man.render_title(page)?;
        man.render_name_section(page)?;
        man.render_synopsis_section(page)?;
        man.render_description_section(page)?;
        man.render_options_section(page)?;
        man.render_subcommands_section(page)?;
        man.render_extra_section(page)?;
        page.extend_from_slice(extra_sections().as_bytes());
        man.render_version_section(page)
    };
    render(&mut page).context("rendering the man page")?;
    Ok(title_first(&page))
}

/// A roff paragraph's text: backslashes doubled, a leading dot or quote escaped.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\\\").replace('-', "\\-");
    if text.starts_with('.') || text.starts_with('\'') {
        format!("\\&{text}")
    } else {
        text
    }
}

fn tagged(out: &mut String, tag: &str, body: &str) {
    out.push_str(&format!(".TP\n\\fB{}\\fR\n{}\n", roff(tag), roff(body)));
}

/// EXIT STATUS, ENVIRONMENT and FILES, from the same tables the program uses.
fn extra_sections() -> String {
    use crate::config::env_vars;
    let mut out = String::from(".SH \"EXIT STATUS\"\n");
    for (code, meaning) in [
        (
            crate::exit::ExitCode::Converged,
            "converged: the checks are clean on the final tree (also: nothing to do, or a command other than run that succeeded)",
        ),
        (
            crate::exit::ExitCode::NeedsHuman,
            "needs human: the iterations or the token or cost budget ran out with findings left",
        ),
        (
            crate::exit::ExitCode::Error,
            "error: bad configuration, a judge that cannot start or whose failure an edit did not change, a sandbox, model or GitHub failure",
        ),
        (
            crate::exit::ExitCode::AwaitingApproval,
            "awaiting approval: held edits wait on a person (approval pull requests on GitHub)",
        ),
    ] {
        tagged(&mut out, &code.code().to_string(), meaning);
    }
    out.push_str(".SH ENVIRONMENT\n");
    out.push_str(&roff("Every configuration key has a variable: BORK_ and the key's path in upper case, dots and dashes as underscores; lists are comma-separated. A variable overrides the configuration file, a flag overrides the variable."));
    out.push('\n');
    for var in env_vars::ALL {
        tagged(&mut out, var.name, &format!("the configuration key {}", var.key));
    }
    for (name, flag) in env_vars::FLAG_VARS {
        tagged(&mut out, name, &format!("stands in for {flag} of bork-ci run"));
    }
    for (name, meaning) in [
        ("BORK_LOG", "a log filter (as RUST_LOG), over -v and -q"),
        ("BORK_GITHUB_TOKEN", "the GitHub token (also GITHUB_TOKEN)"),
        ("NO_COLOR", "no colour in the log"),
        (
            "DOCKER_HOST",
            "the container engine to use, as the docker CLI reads it",
        ),
        (
            "SSL_CERT_FILE",
            "a CA bundle trusted for HTTPS, and passed to the setup commands",
        ),
        (
            "AGENT_ARTIFACT_DIR",
            "the artifact root when sandbox.artifact-dir is unset",
        ),
    ] {
        tagged(&mut out, name, meaning);
    }
    out.push_str(".SH FILES\n");
    for (path, meaning) in [
        (
            ".config/bork.json",
            "the repository's configuration (JSON); its security keys are read from the base branch",
        ),
        ("specs/", "the specifications the code is kept in line with"),
        (
            "~/.agent-artifacts/",
            "the artifact root (sandbox.artifact-dir): runs/<run id>/ with each job's artifacts and test temporaries, deps/<key>/ the dependency caches, warm/<key>/ the warm build caches, build/ the judges' own build caches; bork-ci gc removes what is stale",
        ),
    ] {
        tagged(&mut out, path, meaning);
    }
    out
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
