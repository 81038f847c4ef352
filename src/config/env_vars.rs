//! Every `BORK_*` environment variable bork-ci reads as configuration, and the rule behind them.
//!
//! The rule: `BORK_` followed by the key's path, sections and key joined by `_`, dashes as `_`,
//! upper case. `llm.base-url` is `BORK_LLM_BASE_URL`; `max-iterations` is `BORK_MAX_ITERATIONS`.
//! Lists are comma-separated. [`ALL`] is the whole set of configuration variables; [`FLAG_VARS`]
//! lists the variables that stand in for a flag of `bork-ci run` left off the command line (the
//! Actions runner's `GITHUB_*` and bork-ci's run settings that are not configuration keys). Both
//! are read from the process's one environment snapshot (`config::process_env`).

/// How the text of a variable becomes a configuration value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    Text,
    Integer,
    Decimal,
    Boolean,
    List,
}

/// One variable: its name, the key it sets, and how its value is read.
#[derive(Debug, Clone, Copy)]
pub struct EnvVar {
    pub name: &'static str,
    pub key: &'static str,
    pub kind: ValueKind,
}

macro_rules! vars {
    ($($name:literal => $key:literal : $kind:ident),* $(,)?) => {
        /// Every configuration variable, in documentation order.
        pub const ALL: &[EnvVar] = &[$(EnvVar { name: $name, key: $key, kind: ValueKind::$kind }),*];
    };
}

vars! {
    "BORK_CORRECTNESS_CHECKER" => "correctness-checker": Text,
    "BORK_EDITS_REQUIRE_APPROVAL" => "edits-require-approval": List,
    "BORK_JUDGE_FILES" => "judge-files": List,
    "BORK_CODE" => "code": List,
    "BORK_TESTS" => "tests": List,
    "BORK_PREFLIGHT" => "preflight": Boolean,
    "BORK_CONFIRM_CLEAN" => "confirm-clean": Boolean,
    "BORK_MAX_ITERATIONS" => "max-iterations": Integer,
    "BORK_CHECKER_TIMEOUT_SECS" => "checker-timeout-secs": Integer,
    "BORK_CONTEXT_BUDGET_TOKENS" => "context-budget-tokens": Integer,
    "BORK_RUN_TIMEOUT_SECS" => "run-timeout-secs": Integer,
    "BORK_BASE" => "base": Text,
    "BORK_DIFF_BASE" => "diff-base": Text,
    "BORK_MAX_FILE_BYTES" => "max-file-bytes": Integer,
    "BORK_LLM_PROVIDER" => "llm.provider": Text,
    "BORK_LLM_MODEL" => "llm.model": Text,
    "BORK_LLM_BASE_URL" => "llm.base-url": Text,
    "BORK_LLM_API_KEY_ENV" => "llm.api-key-env": Text,
    "BORK_LLM_MAX_OUTPUT_TOKENS" => "llm.max-output-tokens": Integer,
    "BORK_LLM_MAX_TOKENS_FIELD" => "llm.max-tokens-field": Text,
    "BORK_LLM_TIMEOUT_SECS" => "llm.timeout-secs": Integer,
    "BORK_LLM_MAX_REQUEST_SECS" => "llm.max-request-secs": Integer,
    "BORK_LLM_STREAM" => "llm.stream": Boolean,
    "BORK_LLM_MAX_RETRIES" => "llm.max-retries": Integer,
    "BORK_LLM_MAX_TOTAL_TOKENS" => "llm.max-total-tokens": Integer,
    "BORK_LLM_MAX_COST_USD" => "llm.max-cost-usd": Decimal,
    "BORK_LLM_SCRIPT" => "llm.script": Text,
    "BORK_LLM_API_VERSION" => "llm.api-version": Text,
    "BORK_LLM_AUTH" => "llm.auth": Text,
    "BORK_LLM_REGION" => "llm.region": Text,
    "BORK_LLM_PROJECT" => "llm.project": Text,
    "BORK_LLM_STS_URL" => "llm.sts-url": Text,
    "BORK_LLM_TEMPERATURE" => "llm.temperature": Decimal,
    "BORK_LLM_SEED" => "llm.seed": Integer,
    "BORK_LLM_PROMPT_CACHING" => "llm.prompt-caching": Boolean,
    "BORK_LLM_CONTEXT_WINDOW" => "llm.context-window": Integer,
    "BORK_LLM_STRUCTURED_OUTPUT" => "llm.structured-output": Text,
    "BORK_LLM_PRICES_INPUT_PER_MTOK" => "llm.prices.input-per-mtok": Decimal,
    "BORK_LLM_PRICES_OUTPUT_PER_MTOK" => "llm.prices.output-per-mtok": Decimal,
    "BORK_LLM_PRICES_CACHED_INPUT_PER_MTOK" => "llm.prices.cached-input-per-mtok": Decimal,
    "BORK_SANDBOX_KIND" => "sandbox.kind": Text,
    "BORK_SANDBOX_IMAGE" => "sandbox.image": Text,
    "BORK_SANDBOX_RUNNER_IMAGE" => "sandbox.runner-image": Text,
    "BORK_SANDBOX_TRANSPORT" => "sandbox.transport": Text,
    "BORK_SANDBOX_KEEP_TREE" => "sandbox.keep-tree": Boolean,
    "BORK_SANDBOX_ULIMITS_NOFILE" => "sandbox.ulimits.nofile": Integer,
    "BORK_SANDBOX_ULIMITS_NPROC" => "sandbox.ulimits.nproc": Integer,
    "BORK_SANDBOX_PULL" => "sandbox.pull": Text,
    "BORK_SANDBOX_NETWORK" => "sandbox.network": Text,
    "BORK_SANDBOX_MEMORY" => "sandbox.memory": Text,
    "BORK_SANDBOX_CPUS" => "sandbox.cpus": Decimal,
    "BORK_SANDBOX_PIDS_LIMIT" => "sandbox.pids-limit": Integer,
    "BORK_SANDBOX_USER" => "sandbox.user": Text,
    "BORK_SANDBOX_SETUP_NETWORK" => "sandbox.setup-network": Text,
    "BORK_SANDBOX_SETUP_TIMEOUT_SECS" => "sandbox.setup-timeout-secs": Integer,
    "BORK_SANDBOX_ARTIFACT_DIR" => "sandbox.artifact-dir": Text,
    "BORK_VERIFICATION_TIMEOUT_SECS" => "verification.timeout-secs": Integer,
    "BORK_REVIEW_ENABLED" => "review.enabled": Boolean,
    "BORK_REVIEW_MIN_SEVERITY" => "review.min-severity": Text,
    "BORK_REVIEW_ALLOW_PROMPT_PATCH_DRIFT" => "review.allow-prompt-patch-drift": Boolean,
    "BORK_GITHUB_LABEL" => "github.label": Text,
    "BORK_GITHUB_AUTHOR_NAME" => "github.author-name": Text,
    "BORK_GITHUB_AUTHOR_EMAIL" => "github.author-email": Text,
    "BORK_GITHUB_BRANCH_PREFIX" => "github.branch-prefix": Text,
}

/// The variables that stand in for a flag the command line left out, by name.
pub mod flag {
    pub const GITHUB_REPOSITORY: &str = "GITHUB_REPOSITORY";
    pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
    pub const GITHUB_SERVER_URL: &str = "GITHUB_SERVER_URL";
    pub const GITHUB_SHA: &str = "GITHUB_SHA";
    pub const GITHUB_REF: &str = "GITHUB_REF";
    pub const GITHUB_EVENT_NAME: &str = "GITHUB_EVENT_NAME";
    pub const GITHUB_EVENT_PATH: &str = "GITHUB_EVENT_PATH";
    pub const GITHUB_STEP_SUMMARY: &str = "GITHUB_STEP_SUMMARY";
    pub const GITHUB_OUTPUT: &str = "GITHUB_OUTPUT";
    pub const BORK_GITHUB_LABEL: &str = "BORK_GITHUB_LABEL";
    pub const BORK_GITHUB_AUTHOR_NAME: &str = "BORK_GITHUB_AUTHOR_NAME";
    pub const BORK_GITHUB_AUTHOR_EMAIL: &str = "BORK_GITHUB_AUTHOR_EMAIL";
    pub const BORK_WAIT_FOR_APPROVAL: &str = "BORK_WAIT_FOR_APPROVAL";
    pub const BORK_FAIL_ON: &str = "BORK_FAIL_ON";
}

/// Each variable of [`flag`] with the flag it stands in for. A text variable set but empty is an
/// empty value; a path, duration or list variable set but empty counts as unset.
pub const FLAG_VARS: &[(&str, &str)] = &[
    (flag::GITHUB_REPOSITORY, "--github-repo"),
    (flag::GITHUB_API_URL, "--github-api-url"),
    (flag::GITHUB_SERVER_URL, "--github-server-url"),
    (flag::GITHUB_SHA, "--github-sha"),
    (flag::GITHUB_REF, "--github-ref"),
    (flag::GITHUB_EVENT_NAME, "--github-event-name"),
    (flag::GITHUB_EVENT_PATH, "--github-event-path"),
    (flag::GITHUB_STEP_SUMMARY, "--github-step-summary"),
    (flag::GITHUB_OUTPUT, "--github-output"),
    (flag::BORK_GITHUB_LABEL, "--github-label"),
    (flag::BORK_GITHUB_AUTHOR_NAME, "--github-author-name"),
    (flag::BORK_GITHUB_AUTHOR_EMAIL, "--github-author-email"),
    (flag::BORK_WAIT_FOR_APPROVAL, "--wait-for-approval"),
    (flag::BORK_FAIL_ON, "--fail-on"),
];

/// `BORK_*` variables bork-ci reads that are not configuration keys or flags: logging, what a
/// judge is given, the build's version suffix, the GitHub token's other name.
pub const OTHER_VARS: &[&str] = &[
    "BORK_LOG",
    "BORK_CI",
    "BORK_CI_VERSION_SUFFIX",
    "BORK_DEPS_DIR",
    "BORK_BUILD_CACHE",
    "BORK_GITHUB_TOKEN",
    // The Action's `api-key` input, named by `--api-key-env`.
    "BORK_ACTION_LLM_KEY",
    // The CI templates' own variables, read by their scripts (the repository, passed as
    // `--github-repo`; Buildkite's extra `docker run` options), and often in bork-ci's
    // environment too.
    "BORK_GITHUB_REPO",
    "BORK_CI_DOCKER_ARGS",
];

/// Prefixes of `BORK_*` variables that belong to bork-ci's own scripts and tests, not to a run.
const SCRIPT_PREFIXES: &[&str] = &[
    "BORK_TEST_",
    "BORK_EXAMPLE",
    "BORK_REBUILD_",
    "BORK_STATIC_",
    "BORK_CI_BUILD_",
];

/// The `BORK_*` variables in `env` that bork-ci does not know, each with the known name it most
/// likely meant (when one is close).
pub fn unknown<'a>(env: impl IntoIterator<Item = &'a String>) -> Vec<(String, Option<&'static str>)> {
    let known: Vec<&'static str> = ALL
        .iter()
        .map(|var| var.name)
        .chain(FLAG_VARS.iter().map(|(name, _)| *name))
        .chain(OTHER_VARS.iter().copied())
        .collect();
    env.into_iter()
        .filter(|name| name.starts_with("BORK_"))
        .filter(|name| !known.contains(&name.as_str()))
        .filter(|name| !SCRIPT_PREFIXES.iter().any(|prefix| name.starts_with(prefix)))
        .map(|name| {
            let closest = known
                .iter()
                .map(|candidate| (strsim::levenshtein(name, candidate), *candidate))
                .filter(|(distance, _)| *distance <= 3)
                .min()
                .map(|(_, candidate)| candidate);
            (name.clone(), closest)
        })
        .collect()
}

/// The variable name the rule gives a key path.
pub fn name_for(key: &str) -> String {
    format!("BORK_{}", key.replace(['.', '-'], "_").to_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_follows_the_rule() {
        for var in ALL {
            assert_eq!(var.name, name_for(var.key), "{}", var.key);
        }
    }

    #[test]
    fn every_flag_variable_names_a_flag_of_run() {
        use clap::CommandFactory;
        let cli = crate::cli::Cli::command();
        let run = cli.find_subcommand("run").expect("run");
        for (name, flag) in FLAG_VARS {
            assert!(
                run.get_arguments()
                    .any(|arg| arg.get_long() == flag.strip_prefix("--")),
                "{name}: {flag}"
            );
        }
    }

    #[test]
    fn the_documented_names_exist() {
        for name in [
            "BORK_LLM_PROVIDER",
            "BORK_LLM_MODEL",
            "BORK_LLM_BASE_URL",
            "BORK_MAX_ITERATIONS",
            "BORK_CORRECTNESS_CHECKER",
        ] {
            assert!(ALL.iter().any(|var| var.name == name), "{name}");
        }
    }
}
