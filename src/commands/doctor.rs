//! `bork-ci doctor`: checks, one line each with the fix, what a first run needs: the git state,
//! the configuration, the model's key, the endpoint (reached without a paid call unless
//! `--call`), the engine and the judges' image, and the checker on this tree (the preflight, with
//! the setup commands first). Exit 0 when all pass, 2 otherwise.

use std::io::Write;

use anyhow::Result;

use super::{load_config, repo_root, sandbox_for};
use crate::exit::ExitCode;

/// One check's result.
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: true,
            detail: detail.into(),
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            ok: false,
            detail: detail.into(),
        }
    }
}

pub(super) async fn doctor(args: crate::cli::DoctorArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let mut checks = Vec::new();
    let repo = match repo_root(&args.repo) {
        Ok(repo) => repo,
        Err(error) => {
            checks.push(Check::fail(
                "git",
                format!("{error:#}; fix: run it in a git repository, or give --repo"),
            ));
            return Ok(print(&checks));
        }
    };
    let head = crate::verify::commit_sha(&repo);
    checks.push(if head.is_empty() {
        Check::fail(
            "git",
            "no commit checked out; fix: commit, or check out the branch to reconcile",
        )
    } else {
        Check::pass(
            "git",
            format!("{} at {}", repo.display(), &head[..head.len().min(12)]),
        )
    });
    let resolved = match load_config(&repo, &args.repo, &args.flags, env) {
        Ok(resolved) => resolved,
        Err(error) => {
            checks.push(Check::fail(
                "config",
                format!(
                    "{}; fix: `bork-ci config` shows every key and where it came from",
                    crate::report::error_text(&error)
                ),
            ));
            return Ok(print(&checks));
        }
    };
    checks.push(Check::pass(
        "config",
        resolved.file.as_ref().map_or(
            "no .config/bork.json: the defaults (`bork-ci init` writes one)".to_owned(),
            |file| file.display().to_string(),
        ),
    ));
    let llm = &resolved.config.llm;
    let provider = resolved
        .validate_llm()
        .map_err(|error| error.to_string())
        .and_then(|()| {
            crate::llm::Provider::new(
                llm.settings(resolved.api_key.clone(), resolved.llm_credentials.clone()),
            )
            .map_err(|error| error.to_string())
        });
    match provider {
        Ok(provider) => {
            checks.push(Check::pass("model", provider.describe()));
            checks.push(endpoint(&provider, args.call).await);
        }
        Err(error) => checks.push(Check::fail(
            "model",
            format!("{error}; fix: set the variable or key it names (`bork-ci config` shows them)"),
        )),
    }
    checks.extend(github(&args, &resolved).await);
    match resolved.config.correctness_checker.as_deref() {
        None => checks.push(Check::fail(
            "checker",
            "no `correctness-checker`: the loop runs once and nothing judges it; fix: `bork-ci init` writes one",
        )),
        Some(checker) => match crate::checker::missing(&repo, checker) {
            Some(problem) => checks.push(Check::fail("checker", format!("{problem}; fix: commit the checker, or set `correctness-checker`"))),
            None => checks.extend(judged(&resolved, &repo, checker).await),
        },
    }
    Ok(print(&checks))
}

/// The endpoint answers (any HTTP status): no model call is paid for unless `call`.
async fn endpoint(provider: &crate::llm::Provider, call: bool) -> Check {
    if call {
        let conversation = crate::llm::Conversation {
            system: "Answer with the word ok.".to_owned(),
            prefix: "ok?".to_owned(),
            turns: Vec::new(),
        };
        return match provider.complete(&conversation, None).await {
            Ok(_) => Check::pass(
                "endpoint",
                format!("{} answered a one-word request", provider.describe()),
            ),
            Err(error) => Check::fail(
                "endpoint",
                format!(
                    "{}: {}; fix: the base URL, the key, the model name",
                    provider.describe(),
                    crate::report::error_text(&anyhow::Error::new(error))
                ),
            ),
        };
    }
    match provider.reachable().await {
        Ok(status) => Check::pass(
            "endpoint",
            format!(
                "{} answers (HTTP {status}; no model call: --call makes one)",
                provider.describe()
            ),
        ),
        Err(error) => Check::fail(
            "endpoint",
            format!(
                "{}: {error}; fix: `llm.base-url`, the key, the network or a proxy",
                provider.describe()
            ),
        ),
    }
}

/// The engine and the image, then the setup commands and the checker on this tree, as a run's
/// preflight does them.
async fn judged(resolved: &crate::config::Resolved, repo: &std::path::Path, checker: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let sandbox = match sandbox_for(resolved, repo, &run_id).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            checks.push(Check::fail("engine", crate::report::error_text(&error)));
            return checks;
        }
    };
    checks.push(Check::pass(
        "engine",
        match sandbox.image(crate::sandbox::JobKind::Checker) {
            Some(image) => format!("docker; the judges' image {image}"),
            None => "none: the checker runs as a local process".to_owned(),
        },
    ));
    let plan = resolved.run_plan(crate::cli::child_logging());
    let (job, commands) = crate::reconcile::setup_job(&plan);
    // The cache a run's first round would use, so that the setup fills the same one.
    if let Err(error) = crate::reconcile::use_deps_of(&plan, &sandbox, repo).await {
        checks.push(Check::fail("setup", crate::report::error_text(&error)));
    }
    if !commands.is_empty() {
        match sandbox.run_sequence(repo, &job, &commands).await {
            Ok(outputs) => match outputs
                .iter()
                .position(|output| output.outcome != crate::sandbox::Outcome::Exited(0))
            {
                None => checks.push(Check::pass("setup", format!("{} command(s) ran", commands.len()))),
                Some(index) => checks.push(Check::fail(
                    "setup",
                    format!(
                        "`{}` ended {}: {}; fix: the command, `sandbox.setup-network`, a proxy",
                        crate::untrusted::one_line(&resolved.config.sandbox.setup[index]),
                        outputs[index].outcome,
                        crate::untrusted::one_line(&crate::untrusted::tail_bytes(
                            &outputs[index].stderr,
                            300
                        ))
                    ),
                )),
            },
            Err(error) => checks.push(Check::fail("setup", format!("{error}"))),
        }
    }
    let timeout = std::time::Duration::from_secs(resolved.config.checker_timeout_secs);
    let check = crate::checker::run(
        &sandbox,
        repo,
        checker,
        timeout,
        &resolved.secret_env_names(),
        // The working tree as it is, which nobody approved: it reads the warm cache, never writes it.
        crate::sandbox::BuildCache::Layer,
    )
    .await;
    checks.push(match check {
        Ok(run) => match &run.verdict {
            crate::checker::Verdict::Clean => {
                Check::pass("preflight", format!("`{checker}` runs: clean on this tree"))
            }
            crate::checker::Verdict::Findings { findings } => Check::pass(
                "preflight",
                format!(
                    "`{checker}` runs: {} finding(s) on this tree, the run's baseline (first: {})",
                    findings.len(),
                    crate::reconcile::held::finding_lines(findings)
                        .first()
                        .map(String::as_str)
                        .unwrap_or("none")
                ),
            ),
            crate::checker::Verdict::FailedToRun { reason, .. }
                if !crate::reconcile::preflight::cannot_start(run.outcome, &run.stderr_tail) =>
            {
                Check::pass(
                    "preflight",
                    format!(
                        "`{checker}` starts but fails on this tree ({reason}): a run gives the model its output to fix (its stderr ends: {})",
                        crate::untrusted::one_line(&crate::untrusted::tail(&run.stderr_tail, 300))
                    ),
                )
            }
            crate::checker::Verdict::FailedToRun { reason, .. } => Check::fail(
                "preflight",
                format!(
                    "`{checker}` cannot run: {reason}; fix: {} (its stderr ends: {})",
                    crate::checker::likely_fix(
                        run.outcome,
                        &run.stderr_tail,
                        sandbox.image(crate::sandbox::JobKind::Checker).as_deref()
                    ),
                    crate::untrusted::one_line(&crate::untrusted::tail(&run.stderr_tail, 300))
                ),
            ),
        },
        Err(error) => Check::fail("preflight", format!("{error}")),
    });
    sandbox.cleanup().await;
    checks
}

/// On GitHub (a token and a repository): what the token may do there. Pushing needs write
/// access (`contents: write`); what an App token grants beyond that (pull requests, workflows)
/// GitHub does not say here, so the line says what to grant.
async fn github(args: &crate::cli::DoctorArgs, resolved: &crate::config::Resolved) -> Option<Check> {
    let flags = match crate::delivery::github_flags_from_env(&args.github, &resolved.env) {
        Ok(flags) => crate::delivery::github_flags(&flags, &resolved.config.github),
        Err(error) => return Some(Check::fail("github", error.to_string())),
    };
    let ctx = match crate::delivery::github_context(&flags, &resolved.config.github, &resolved.env) {
        Ok(Some(ctx)) => ctx,
        Ok(None) => return None,
        Err(error) => return Some(Check::fail("github", crate::report::error_text(&error))),
    };
    Some(match crate::github::check_token_permissions(&ctx).await {
        Ok(granted)
            if granted
                .iter()
                .any(|name| name == "push" || name == "admin" || name == "maintain") =>
        {
            Check::pass(
                "github",
                format!(
                    "the token may push to {}/{} ({}); an App token also needs pull requests: write, and workflows: write for held workflow edits",
                    ctx.owner,
                    ctx.repo,
                    granted.join(", ")
                ),
            )
        }
        Ok(granted) => Check::fail(
            "github",
            format!(
                "the token may not push to {}/{} ({}); fix: `permissions: contents: write, pull-requests: write` in the workflow, or an App token with them",
                ctx.owner,
                ctx.repo,
                if granted.is_empty() {
                    "no permission reported".to_owned()
                } else {
                    granted.join(", ")
                }
            ),
        ),
        Err(error @ crate::github::GithubError::Transport(_)) => Check::fail(
            "github",
            format!(
                "a network error reaching GitHub's API at {}: {error}; fix: the network, a proxy, `GITHUB_API_URL`",
                ctx.api_url
            ),
        ),
        Err(error) => Check::fail(
            "github",
            format!("{error}; fix: the token (`github-token`), the repository name"),
        ),
    })
}

/// Prints one line per check; exit 0 when all passed, 2 otherwise.
fn print(checks: &[Check]) -> ExitCode {
    let mut stdout = crate::secrets::Redacting(std::io::stdout().lock());
    for check in checks {
        let mark = if check.ok { "ok  " } else { "FAIL" };
        let _ = writeln!(
            stdout,
            "{mark} {:<9} {}",
            check.name,
            crate::untrusted::line(&check.detail)
        );
    }
    let failed = checks.iter().filter(|check| !check.ok).count();
    let _ = writeln!(
        stdout,
        "{}",
        if failed == 0 {
            "all checks passed".to_owned()
        } else {
            format!("{failed} check(s) failed")
        }
    );
    if failed == 0 {
        ExitCode::Converged
    } else {
        ExitCode::Error
    }
}
