//! What a round's loop needs, resolved once before its first iteration: the limits, the
//! judges (the checker, the Verifier's steps, the reviewer's threshold), the names of the
//! secrets kept out of every job, the approval rules and what the pack left out. The iterations only read it: nothing
//! here is derived again, re-read from disk or re-parsed per iteration, and a setting that does
//! not resolve is an error before any model call.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::budget::Limits;
use crate::run_plan::{DEVCONTAINER_BUILD_RULE, RunPlan};
use bork_ci_edit::edit::code::{CodeRules, CodeSource, TEST_GLOBS};
use bork_ci_edit::edit::judge_files::JudgeRules;
use bork_ci_edit::review::Severity;
use bork_ci_sandbox::verify::Step;

/// The resolved settings of one round.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    pub limits: Limits,
    /// `max-iterations`: iterations between two human looks.
    pub max_iterations: u32,
    /// The checker's path in the repository, when one is configured.
    pub checker: Option<String>,
    /// `checker-timeout-secs`.
    pub checker_timeout: Duration,
    /// The Verifier's steps (`verification.steps`, else the repository's `agent.yaml`, read
    /// once); empty when there is no Verifier.
    pub verifier_steps: Vec<Step>,
    /// `verification.timeout-secs`.
    pub verifier_timeout: Duration,
    /// `review.min-severity` when the reviewer is on.
    pub review_min_severity: Option<Severity>,
    /// `confirm-clean`: a clean verdict is confirmed with an empty build cache.
    pub confirm_clean: bool,
    /// Variables whose values no job but the edit step (its own key) may see.
    pub secret_env: Vec<String>,
    /// Which files are judge files (held for approval, compared before every judge).
    pub judge_rules: JudgeRules,
    /// Files the pack left out of the prompt (the model is told so when it edits one).
    pub not_shown: BTreeSet<String>,
}

impl Plan {
    /// Resolves the round's settings from the run's plan and the repository at `repo`.
    pub(super) fn resolve(run_plan: &RunPlan, repo: &Path, not_shown: BTreeSet<String>) -> Result<Plan> {
        let verifier_steps = bork_ci_core::blocking::run(|| {
            bork_ci_sandbox::verify::load_steps(repo, &run_plan.verification.steps)
        })
        .context("reading the verification steps")?;
        let mut judge_rules =
            bork_ci_core::blocking::run(|| run_plan.judge_rules_in(repo)).map_err(anyhow::Error::msg)?;
        judge_rules.code = Some(code_rules(run_plan, repo, &verifier_steps)?);
        Ok(Plan {
            limits: run_plan.limits,
            max_iterations: run_plan.max_iterations,
            checker: run_plan.checker.clone(),
            checker_timeout: run_plan.checker_timeout,
            verifier_steps,
            verifier_timeout: run_plan.verification.timeout,
            review_min_severity: run_plan.review.min_severity,
            confirm_clean: run_plan.confirm_clean,
            secret_env: run_plan.secret_env.clone(),
            judge_rules,
            not_shown,
        })
    }

    /// Whether any judge is configured (a checker, Verifier steps, the reviewer).
    pub(super) fn has_judges(&self) -> bool {
        self.checker.is_some() || !self.verifier_steps.is_empty() || self.review_min_severity.is_some()
    }
}

/// What the model may change in the repository at `repo`: the configured `code` and `tests`
/// globs, else those derived from its layout; never what the checker, the Verifier's steps, the
/// setup commands or the dev container read.
pub(super) fn code_rules(run_plan: &RunPlan, repo: &Path, verifier_steps: &[Step]) -> Result<CodeRules> {
    let mut rules = bork_ci_core::blocking::run(|| configured_or_derived(run_plan, repo))?;
    rules.exempt = run_plan.approval.judge_files_exempt.keys().cloned().collect();
    // The checker and its folder are judge files already (`judge_files`).
    let steps: Vec<(String, String)> = verifier_steps
        .iter()
        .map(|step| {
            (
                step.command.clone(),
                format!(
                    "the Verifier's step `{}`",
                    bork_ci_core::untrusted::one_line(&step.name)
                ),
            )
        })
        .collect();
    let setup: Vec<(String, String)> = run_plan
        .setup
        .commands
        .iter()
        .map(|command| (command.clone(), "a setup command (`sandbox.setup`)".to_owned()))
        .collect();
    rules.never = bork_ci_core::blocking::run(|| {
        let mut never = bork_ci_edit::edit::layout::read_by_commands(repo, &steps, false);
        never.extend(bork_ci_edit::edit::layout::read_by_commands(repo, &setup, true));
        // What the dev container's build reads (its Dockerfile, the files it copies).
        if let Ok(inputs) = bork_ci_sandbox::sandbox::devcontainer::build_inputs(repo) {
            never.extend(
                inputs
                    .globs
                    .into_iter()
                    .map(|glob| (glob, DEVCONTAINER_BUILD_RULE.to_owned())),
            );
        }
        never
    });
    rules
        .matcher()
        .map_err(anyhow::Error::msg)
        .context("compiling the code globs")?;
    tracing::info!(
        source = ?rules.source,
        globs = rules.code.len(),
        "code: {} glob(s) {}; every other edit is held for approval",
        rules.code.len(),
        match rules.source {
            CodeSource::Configured => "from `code`",
            CodeSource::Derived => "derived from the repository's layout",
        }
    );
    tracing::debug!(code = ?rules.code, tests = ?rules.tests, never = ?rules.never, "code rules");
    Ok(rules)
}

/// `code` and `tests` as configured, else `code` derived from the repository's layout with the
/// default tests: the rules before what the judges read is added.
fn configured_or_derived(run_plan: &RunPlan, repo: &Path) -> Result<CodeRules> {
    let mut rules = match &run_plan.approval.code {
        Some(code) => CodeRules {
            code: code.clone(),
            tests: TEST_GLOBS.iter().map(|glob| (*glob).to_owned()).collect(),
            source: CodeSource::Configured,
            ..CodeRules::default()
        },
        None => bork_ci_edit::edit::layout::derive(repo)
            .context("deriving the code globs from the repository's layout")?,
    };
    if let Some(tests) = &run_plan.approval.tests {
        rules.tests = tests.clone();
    }
    Ok(rules)
}

/// Whether the tree at `repo` holds no code or test that differs from its commit (changed,
/// deleted, or new, ignored files included). Then its checker runs approved code only, and the preflight
/// may fill the warm build cache; a local tree can hold a model's edits from an earlier run. A
/// changed file that is not code (a spec, the config) is not the model's: held edits are never
/// applied unapproved. Unknown (git fails, the globs do not compile): false.
pub(super) fn code_is_committed(run_plan: &RunPlan, repo: &Path) -> bool {
    let status = bork_ci_core::git::run(
        repo,
        &[
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ],
    );
    // Ignored files one by one: a judge over `bind` sees them too.
    let ignored = bork_ci_core::git::run(
        repo,
        &["ls-files", "-z", "--others", "--ignored", "--exclude-standard"],
    );
    let (Ok(status), Ok(ignored)) = (status, ignored) else {
        return false;
    };
    let mut paths: Vec<String> = status
        .split(|byte| *byte == 0)
        .filter(|entry| entry.len() > 3)
        .map(|entry| String::from_utf8_lossy(&entry[3..]).into_owned())
        .collect();
    paths.extend(
        ignored
            .split(|byte| *byte == 0)
            .filter(|entry| !entry.is_empty())
            .map(|entry| String::from_utf8_lossy(entry).into_owned()),
    );
    if paths.is_empty() {
        return true;
    }
    let Ok(matcher) =
        configured_or_derived(run_plan, repo).and_then(|rules| rules.matcher().map_err(anyhow::Error::msg))
    else {
        return false;
    };
    paths.iter().all(|path| {
        matches!(
            matcher.kind(&bork_ci_edit::edit::code::fold(path)),
            bork_ci_edit::edit::code::Kind::NotCode { .. }
        )
    })
}
