//! `bork-ci pack`: the prompt `run` would send, on stdout.

use std::io::Write;

use anyhow::{Context, Result};

use super::{load_config, repo_root};
use crate::cli::PackArgs;
use crate::config;
use crate::exit::ExitCode;
use crate::reconcile;

pub(super) fn pack(args: PackArgs, quiet: bool, env: &config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let resolved = load_config(&repo, &args.repo, &args.flags, env)?;
    let (conversation, snapshot) = reconcile::initial_prompt(&repo, &resolved.pack_options())?;
    let estimate = reconcile::estimate(&conversation);
    let mut stdout = std::io::stdout().lock();
    let head = format!(
        "===== SYSTEM (prompt version {}) =====\n{}\n===== USER =====\n",
        crate::prompt::PROMPT_VERSION,
        conversation.system,
    );
    let total = head.len() + conversation.prefix.len();
    // The prompt holds the repository's files: exact when piped to a file, but never able to
    // drive a terminal, nor the Actions runner (which reads stdout for workflow commands).
    let in_actions = env.get("GITHUB_ACTIONS").is_some_and(|value| value == "true");
    let prompt = format!("{head}{}", conversation.prefix);
    let shown = if in_actions {
        crate::untrusted::block(&prompt, &crate::untrusted::random_token())
    } else if std::io::IsTerminal::is_terminal(&stdout) {
        crate::untrusted::escape(&prompt)
    } else {
        prompt
    };
    stdout.write_all(shown.as_bytes()).context("writing to stdout")?;
    stdout.flush().context("writing to stdout")?;
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
