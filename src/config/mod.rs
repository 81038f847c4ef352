//! Configuration: `.config/bork.json` layered with figment, from lowest to highest precedence:
//! defaults, the file, `BORK_*` environment variables, command-line flags. One typed [`Config`]
//! comes out, validated before anything else runs; [`Resolved::explain`] says where each value came
//! from. This is the only module that reads the environment for configuration; it never prints a
//! secret (the LLM key is held as a `SecretString` and only its presence is shown).
//!
//! The keys are documented in `specs/core/config-file.md`; keep the two in step.
//!
//! The pieces: `schema` (the serde types and their defaults), `load` (layering and the
//! environment snapshot), `validate` (checks serde cannot make), `secrets` (which variables and
//! values are secret), `env_vars` (every variable read).

pub mod env_vars;
mod load;
mod schema;
mod secrets;
mod validate;

use std::path::{Path, PathBuf};

use figment::Figment;
use secrecy::SecretString;
use serde_json::Value;

pub use load::{Env, FlagValues, SECURITY_KEYS, load, load_with_trusted, process_env, push_event};
pub use schema::{
    Config, GithubConfig, LlmConfig, LlmOverrides, Network, PriceOverrides, Prices, ReviewConfig,
    SandboxConfig, SandboxUlimits, StepConfig, VerificationConfig, every_key,
};
pub use validate::{branch_prefix_problem, repo_relative_problem};

/// Where the configuration file lives, relative to the repository root.
pub const CONFIG_PATH: &str = ".config/bork.json";
/// Largest value of any `*-timeout-secs` key: 7 days.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;
/// Largest value of any token count or budget.
pub const MAX_TOKENS: u64 = 1_000_000_000;
/// Largest `max-file-bytes`: 1 GiB.
pub const MAX_FILE_BYTES: u64 = 1 << 30;
/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 4 << 20;

/// A configuration problem: always names the key and where it came from.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
    #[error("configuration key `{key}` (from {source_name}): {message}")]
    BadValue {
        key: String,
        source_name: String,
        message: String,
    },
    #[error("environment variable {name} (for `{key}`): {message}")]
    BadEnv {
        name: String,
        key: String,
        message: String,
    },
    #[error("reading {file}: {source}")]
    Read { file: String, source: std::io::Error },
}

/// The configuration of one run and the figment it was extracted from.
pub struct Resolved {
    pub config: Config,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
    /// The LLM key, read from the variable `llm.api-key-env` names.
    pub api_key: Option<SecretString>,
    /// The reviewer's key, read from the variable its `api-key-env` names.
    pub review_api_key: Option<SecretString>,
    /// The model's other credentials (AWS, Google, `${NAME}` extra headers).
    pub llm_credentials: crate::llm::Credentials,
    /// The reviewer's other credentials.
    pub review_llm_credentials: crate::llm::Credentials,
    /// `DOCKER_HOST`, when set: the engine the docker backend talks to.
    pub docker_host: Option<String>,
    /// With `DOCKER_TLS_VERIFY` set, the client certificate folder (`DOCKER_CERT_PATH`, else
    /// `~/.docker`) for a `tcp://` engine.
    pub docker_tls: Option<std::path::PathBuf>,
    /// The push this run was started by, from the CI's variables (see [`push_event`]).
    pub push: Option<crate::pack::PushEvent>,
    /// The runner's proxy variables and CA bundle, for the setup commands.
    pub setup_network: crate::sandbox::SetupNetwork,
    /// `RUSTUP_HOME` and `PYENV_ROOT` where the runner's toolchains are under its own `HOME`
    /// and the variable is unset: a judge run with `--sandbox none` gets a fresh `HOME` and
    /// still finds them.
    pub toolchain_homes: Vec<(String, String)>,
    /// The environment the configuration was read from (the process's snapshot): where the
    /// values of the secret variables are looked up.
    pub env: Env,
    /// The artifact root when `sandbox.artifact-dir` is unset: `AGENT_ARTIFACT_DIR`, else
    /// `~/.agent-artifacts`.
    default_artifact_dir: PathBuf,
    figment: Figment,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Resolved")
            .field("config", &self.config)
            .field("file", &self.file)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field(
                "review_api_key",
                &self.review_api_key.as_ref().map(|_| "[redacted]"),
            )
            .finish()
    }
}

pub use crate::run_plan::DEVCONTAINER_BUILD_RULE;

impl Resolved {
    fn source_of(&self, key: &str) -> String {
        self.figment
            .find_metadata(key)
            .map(|meta| meta.name.to_string())
            .unwrap_or_else(|| "default".into())
    }

    fn bad(&self, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::BadValue {
            key: key.to_owned(),
            source_name: self.source_of(key),
            message: message.into(),
        }
    }

    /// Every configuration key ([`every_key`]) with its resolved value (`null` when unset) and
    /// the layer it came from.
    pub fn every_value(&self) -> Vec<(String, Value, String)> {
        let value = serde_json::to_value(&self.config).unwrap_or_default();
        every_key()
            .into_iter()
            .map(|key| {
                let found = key
                    .split('.')
                    .try_fold(&value, |node, part| node.get(part))
                    .cloned()
                    .unwrap_or(Value::Null);
                let source = self.source_of(&key);
                (key, found, source)
            })
            .collect()
    }

    /// `bork-ci config --format json`: the file, and every key with its value and source.
    pub fn explain_json(&self) -> Value {
        let keys: Vec<Value> = self
            .every_value()
            .into_iter()
            .map(|(key, value, source)| serde_json::json!({"key": key, "value": value, "source": source}))
            .collect();
        serde_json::json!({
            "file": self.file.as_ref().map(|file| file.display().to_string()),
            "keys": keys,
            "llm.api-key": {
                "variable": self.config.llm.key_env(),
                "set": self.api_key.is_some(),
            },
        })
    }

    /// The reviewer's LLM settings: `llm` with `review.llm` laid over it.
    pub fn review_llm(&self) -> LlmConfig {
        let Some(overrides) = &self.config.review.llm else {
            return self.config.llm.clone();
        };
        let mut llm = overrides.over(&self.config.llm);
        // Another provider without a model: its default, not the main model's name.
        if llm.provider != self.config.llm.provider
            && overrides.model.is_none()
            && load::model_is_default(&self.figment, "llm.model")
        {
            llm.model = llm.provider.default_model().to_owned();
        }
        llm
    }

    /// Every resolved value with where it came from, one `key = value  # source` line each.
    /// No secret is ever part of it: the key's variable name is, and whether it is set.
    pub fn explain(&self) -> String {
        let mut lines = Vec::new();
        // A section given as an object (`review.llm`, `llm.extra-headers`) shows its keys.
        fn expand(key: String, value: Value, out: &mut Vec<(String, Value)>) {
            match value {
                Value::Object(map) if !map.is_empty() => {
                    for (name, inner) in map {
                        expand(format!("{key}.{name}"), inner, out);
                    }
                }
                other => out.push((key, other)),
            }
        }
        let mut leaves = Vec::new();
        for (key, value, _) in self.every_value() {
            expand(key, value, &mut leaves);
        }
        let width = leaves.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
        for (key, value) in leaves {
            let source = self.source_of(&key);
            let value = if value.is_null() {
                "unset".to_owned()
            } else {
                value.to_string()
            };
            lines.push(format!("{key:<width$} = {value}  # {source}"));
        }
        let key_env = self.config.llm.key_env();
        let key_state = if self.api_key.is_some() { "set" } else { "not set" };
        if !key_env.is_empty() {
            lines.push(format!(
                "{:<width$} = {key_state}  # read from ${key_env}, never printed",
                "llm.api-key"
            ));
        }
        let (secret_names, plain_names) = self.config.llm.credential_env_names();
        for name in secret_names {
            let state = if self.llm_credentials.secrets.contains_key(&name) {
                "set"
            } else {
                "not set"
            };
            lines.push(format!(
                "llm.credentials.{name} = {state}  # read from ${name}, never printed"
            ));
        }
        for name in plain_names {
            if let Some(value) = self.llm_credentials.plain.get(&name) {
                lines.push(format!("llm.credentials.{name} = {value:?}  # read from ${name}"));
            }
        }
        let file = match &self.file {
            Some(file) => format!("# configuration file: {}", file.display()),
            None => format!("# configuration file: none ({CONFIG_PATH} not found)"),
        };
        format!("{file}\n{}\n", lines.join("\n"))
    }

    /// The artifact root: `sandbox.artifact-dir`, else `AGENT_ARTIFACT_DIR`, else `~/.agent-artifacts`.
    pub fn artifact_root(&self) -> PathBuf {
        self.config
            .sandbox
            .artifact_dir
            .as_ref()
            .map(PathBuf::from)
            .unwrap_or_else(|| self.default_artifact_dir.clone())
    }

    /// The Docker backend's settings from the `sandbox.*` keys, the engine `DOCKER_HOST` names,
    /// the run's lease (its time budget and a grace) and the runner's egress for the setup job.
    pub fn docker_settings(&self) -> Result<crate::sandbox::docker::DockerSettings, ConfigError> {
        let mut settings = self
            .config
            .sandbox
            .docker_settings(self.artifact_root())
            .map_err(|message| self.bad("sandbox.memory", message))?;
        settings.host = self.docker_host.clone();
        settings.tls = self.docker_tls.clone();
        if self.config.run_timeout_secs > 0 {
            settings.lease = std::time::Duration::from_secs(self.config.run_timeout_secs)
                + crate::sandbox::docker::LEASE_GRACE;
        }
        settings.setup_egress = self.setup_network.clone();
        Ok(settings)
    }

    /// What names the dependency cache of the repository at `repo`: its path and the base branch.
    pub fn deps_identity(&self, repo: &Path) -> String {
        crate::run_plan::deps_identity(repo, &self.config.base)
    }

    /// The build and dependency caches of run `run_id` on the repository at `repo`.
    pub fn shared_dirs(&self, repo: &Path, run_id: &str) -> crate::sandbox::SharedDirs {
        crate::sandbox::SharedDirs::new(&self.artifact_root(), run_id, &self.deps_identity(repo), "")
    }

    /// The judge files of this configuration (see `judge_files`); an error names a bad
    /// `judge-files-exempt` entry.
    pub fn judge_rules(&self) -> Result<crate::edit::judge_files::JudgeRules, String> {
        crate::run_plan::judge_rules(self.config.correctness_checker.as_deref(), &self.approval())
    }

    /// The judge files of this configuration on the repository at `repo` (see
    /// [`crate::run_plan::judge_rules_in`]).
    pub fn judge_rules_in(&self, repo: &Path) -> Result<crate::edit::judge_files::JudgeRules, String> {
        crate::run_plan::judge_rules_in(self.config.correctness_checker.as_deref(), &self.approval(), repo)
    }

    fn approval(&self) -> crate::run_plan::Approval {
        let config = &self.config;
        crate::run_plan::Approval {
            edits_require_approval: config.edits_require_approval.clone(),
            judge_files: config.judge_files.clone(),
            judge_files_exempt: config.judge_files_exempt.clone(),
            code: config.code.clone(),
            tests: config.tests.clone(),
        }
    }

    /// The plan of a run: everything the loop reads, resolved here once (the loop's crate
    /// cannot read the configuration). `logging` is how the edit step logs.
    pub fn run_plan(&self, logging: crate::run_plan::ChildLogging) -> crate::run_plan::RunPlan {
        use crate::run_plan::{Model, Review, RunPlan, Setup, Verification};
        let config = &self.config;
        RunPlan {
            model: Model {
                llm: config.llm.clone(),
                api_key: self.api_key.clone(),
                credentials: self.llm_credentials.clone(),
            },
            review: Review {
                min_severity: config.review.enabled.then_some(config.review.min_severity),
                allow_prompt_patch_drift: config.review.allow_prompt_patch_drift,
                model: Model {
                    llm: self.review_llm(),
                    api_key: self.review_api_key.clone(),
                    credentials: self.review_llm_credentials.clone(),
                },
            },
            pack: self.pack_options(),
            context_budget_tokens: config.context_budget_tokens,
            limits: crate::budget::Limits {
                wall_clock: std::time::Duration::from_secs(config.run_timeout_secs),
                max_total_tokens: config.llm.max_total_tokens,
                max_cost_usd: config.llm.max_cost_usd,
                prices: config.llm.prices.map(|prices| crate::llm::Prices {
                    input_per_mtok: prices.input_per_mtok,
                    output_per_mtok: prices.output_per_mtok,
                    cached_input_per_mtok: prices.cached_input_per_mtok,
                }),
            },
            max_iterations: config.max_iterations,
            checker: config.correctness_checker.clone(),
            checker_timeout: std::time::Duration::from_secs(config.checker_timeout_secs),
            preflight: config.preflight,
            confirm_clean: config.confirm_clean,
            approval: self.approval(),
            verification: Verification {
                steps: self.verification_steps(),
                timeout: std::time::Duration::from_secs(config.verification.timeout_secs),
            },
            setup: Setup {
                commands: config.sandbox.setup.clone(),
                timeout: std::time::Duration::from_secs(config.sandbox.setup_timeout_secs),
                network: config.sandbox.setup_network.to_string(),
            },
            secret_env: self.secret_env_names(),
            env: self.env.clone(),
            artifact_root: self.artifact_root(),
            logging,
        }
    }

    /// How the repository is packed: `base`, `diff-base`, `max-file-bytes` and the CI's push.
    pub fn pack_options(&self) -> crate::pack::PackOptions {
        crate::pack::PackOptions {
            base: self.config.base.clone(),
            max_file_bytes: self.config.max_file_bytes,
            diff_base: self.config.diff_base.clone(),
            push: self.push.clone(),
        }
    }

    /// The verifier steps configured in the file (`agent.yaml` is read by `verify::load_steps`).
    pub fn verification_steps(&self) -> Vec<crate::verify::Step> {
        self.config
            .verification
            .steps
            .iter()
            .map(|step| crate::verify::Step {
                name: step.name.clone(),
                command: step.command.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::llm::{AuthMode, ProviderKind};
    use crate::review::Severity;
    use crate::sandbox::docker::{PullPolicy, Transport};

    /// The run's plan carries every secret the loop must keep out of the prompt: the key (by
    /// its variable's name) and each secret variable's value from the run's environment.
    #[test]
    fn any_known_secret_in_the_prompt_is_found_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env: std::collections::BTreeMap<String, String> = [
            ("OPENAI_API_KEY", "sk-key-value-1234"),
            ("GITHUB_TOKEN", "ghs_token_value_5678"),
            ("ACTIONS_RESULTS_URL", "https://results.example/"),
            ("GH_TOKEN", "short"),
        ]
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect();
        let resolved = load(dir.path(), None, &env, &vec![]).expect("loads");
        let plan = resolved.run_plan(crate::run_plan::ChildLogging::default());
        let with = |prefix: &str| crate::llm::Conversation {
            system: "instructions".into(),
            prefix: prefix.into(),
            turns: Vec::new(),
        };
        let found = |prefix: &str| crate::reconcile::secret_in_prompt(&plan, &with(prefix), &plan.env);
        assert_eq!(found("a sk-key-value-1234 b").as_deref(), Some("OPENAI_API_KEY"));
        assert_eq!(found("x ghs_token_value_5678").as_deref(), Some("GITHUB_TOKEN"));
        assert_eq!(found("see https://results.example/ and short"), None);
        assert_eq!(found("nothing secret here"), None);
    }

    fn repo_with(config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join(".config")).expect("mkdir");
        std::fs::write(dir.path().join(CONFIG_PATH), config).expect("write");
        dir
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    }

    #[test]
    fn a_tls_engine_is_read_as_the_docker_cli_reads_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = |pairs: &[(&str, &str)]| {
            let resolved = load(dir.path(), None, &env(pairs), &vec![]).expect("loads");
            let settings = resolved.docker_settings().expect("settings");
            (settings.host, settings.tls)
        };
        assert_eq!(
            tls(&[("DOCKER_HOST", "tcp://docker:2376")]),
            (Some("tcp://docker:2376".into()), None)
        );
        assert_eq!(tls(&[("DOCKER_TLS_VERIFY", ""), ("HOME", "/h")]).1, None);
        assert_eq!(
            tls(&[("DOCKER_TLS_VERIFY", "1"), ("HOME", "/h")]).1,
            Some(std::path::PathBuf::from("/h/.docker"))
        );
        assert_eq!(
            tls(&[
                ("DOCKER_TLS_VERIFY", "1"),
                ("DOCKER_CERT_PATH", "/certs/client"),
                ("HOME", "/h")
            ])
            .1,
            Some(std::path::PathBuf::from("/certs/client"))
        );
    }

    #[test]
    fn defaults_without_a_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let resolved = load(dir.path(), None, &env(&[]), &vec![]).expect("loads");
        assert_eq!(resolved.config, Config::default());
        assert!(resolved.file.is_none());
    }

    #[test]
    fn precedence_default_file_env_flag() {
        let dir = repo_with(r#"{"max-iterations": 3, "llm": {"model": "file-model", "max-retries": 1}}"#);
        let resolved = load(
            dir.path(),
            None,
            &env(&[("BORK_MAX_ITERATIONS", "4"), ("BORK_LLM_MODEL", "env-model")]),
            &vec![("max-iterations", Value::from(2), "--max-iterations")],
        )
        .expect("loads");
        assert_eq!(resolved.config.max_iterations, 2);
        assert_eq!(resolved.config.llm.model, "env-model");
        assert_eq!(resolved.config.llm.max_retries, 1);
        assert_eq!(resolved.config.checker_timeout_secs, 600);
        let explained = resolved.explain();
        assert!(explained.contains("max-iterations"));
        assert!(explained.contains("# flag --max-iterations"), "{explained}");
        assert!(explained.contains("# environment BORK_LLM_MODEL"), "{explained}");
        assert!(explained.contains("# .config/bork.json"), "{explained}");
        assert!(explained.contains("# default"), "{explained}");
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let dir = repo_with(r#"{"llm": {"modle": "x"}}"#);
        let error = load(dir.path(), None, &env(&[]), &vec![]).expect_err("rejects");
        let text = error.to_string();
        assert!(text.contains("llm.modle"), "{text}");
        assert!(text.contains(".config/bork.json"), "{text}");
    }

    #[test]
    fn wrong_type_names_key_and_file() {
        let dir = repo_with(r#"{"max-iterations": "five"}"#);
        let text = load(dir.path(), None, &env(&[]), &vec![])
            .expect_err("rejects")
            .to_string();
        assert!(text.contains("max-iterations"), "{text}");
        assert!(text.contains(".config/bork.json"), "{text}");
    }

    #[test]
    fn checker_outside_the_repo_is_refused() {
        for checker in ["/bin/true", "../x", "a/../../x", "a\\b", ".git/hooks/x"] {
            let dir = repo_with(&format!(r#"{{"correctness-checker": {}}}"#, Value::from(checker)));
            let text = load(dir.path(), None, &env(&[]), &vec![])
                .expect_err(checker)
                .to_string();
            assert!(text.contains("correctness-checker"), "{text}");
        }
    }

    #[test]
    fn malformed_json_names_the_file() {
        let dir = repo_with("{not json");
        let text = load(dir.path(), None, &env(&[]), &vec![])
            .expect_err("rejects")
            .to_string();
        assert!(
            text.contains(".config/bork.json") && text.contains("JSON"),
            "{text}"
        );
    }

    #[test]
    fn bad_env_value_names_the_variable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = load(
            dir.path(),
            None,
            &env(&[("BORK_MAX_ITERATIONS", "lots")]),
            &vec![],
        )
        .expect_err("rejects")
        .to_string();
        assert!(text.contains("BORK_MAX_ITERATIONS"), "{text}");
    }

    #[test]
    fn a_cost_budget_needs_prices_and_a_sane_amount() {
        let dir = tempfile::tempdir().expect("tempdir");
        let load_with = |vars: &[(&str, &str)]| load(dir.path(), None, &env(vars), &vec![]);
        let text = load_with(&[("BORK_LLM_MAX_COST_USD", "2.5")])
            .expect_err("no prices")
            .to_string();
        assert!(
            text.contains("llm.max-cost-usd") && text.contains("prices"),
            "{text}"
        );
        let priced = [
            ("BORK_LLM_PRICES_INPUT_PER_MTOK", "3"),
            ("BORK_LLM_PRICES_OUTPUT_PER_MTOK", "15"),
        ];
        for bad in ["-1", "NaN", "inf"] {
            let mut vars = priced.to_vec();
            vars.push(("BORK_LLM_MAX_COST_USD", bad));
            let text = load_with(&vars).expect_err(bad).to_string();
            assert!(
                text.contains("max-cost-usd") || text.contains("MAX_COST_USD"),
                "{bad}: {text}"
            );
        }
        let mut vars = priced.to_vec();
        vars.push(("BORK_LLM_PRICES_OUTPUT_PER_MTOK", "-15"));
        assert!(load_with(&vars).is_err(), "a negative price is refused");
        let mut vars = priced.to_vec();
        vars.push(("BORK_LLM_MAX_COST_USD", "2.5"));
        let resolved = load_with(&vars).expect("loads");
        assert_eq!(resolved.config.llm.max_cost_usd, Some(2.5));
    }

    #[test]
    fn the_key_is_never_explained() {
        let dir = repo_with(r#"{"llm": {"api-key-env": "MY_KEY"}}"#);
        let resolved = load(dir.path(), None, &env(&[("MY_KEY", "sk-canary-42")]), &vec![]).expect("loads");
        assert!(resolved.api_key.is_some());
        let shown = format!("{}{:?}", resolved.explain(), resolved);
        assert!(!shown.contains("sk-canary-42"));
        assert!(shown.contains("MY_KEY"));
        assert!(resolved.secret_env_names().contains(&"MY_KEY".to_owned()));
    }

    #[test]
    fn the_reviewer_inherits_endpoint_keys_and_their_secrets() {
        let dir = repo_with(
            r#"{"llm": {"provider": "azure", "base-url": "https://res.openai.azure.com", "model": "dep",
                "auth": "bearer", "extra-headers": {"X-Tenant": "${TENANT_TOKEN}"}, "temperature": 0.1},
                "review": {"enabled": true, "llm": {"model": "review-dep"}}}"#,
        );
        let resolved = load(
            dir.path(),
            None,
            &env(&[
                ("AZURE_OPENAI_AD_TOKEN", "entra-token-1234"),
                ("TENANT_TOKEN", "tenant-secret-99"),
            ]),
            &vec![],
        )
        .expect("loads");
        resolved.validate_llm().expect("valid");
        let review = resolved.review_llm();
        assert_eq!(review.model, "review-dep");
        assert_eq!(review.auth, AuthMode::Bearer);
        assert_eq!(review.key_env(), "AZURE_OPENAI_AD_TOKEN");
        assert_eq!(review.temperature, Some(0.1));
        assert!(
            resolved
                .review_llm_credentials
                .secrets
                .contains_key("TENANT_TOKEN")
        );
        assert!(resolved.review_api_key.is_some());
        let names = resolved.secret_env_names();
        assert!(
            names.contains(&"TENANT_TOKEN".to_owned()) && names.contains(&"AZURE_OPENAI_AD_TOKEN".to_owned())
        );
        let shown = resolved.explain();
        assert!(
            !shown.contains("tenant-secret-99") && !shown.contains("entra-token-1234"),
            "{shown}"
        );
        assert!(resolved.llm_secrets().len() >= 4);
    }

    #[test]
    fn review_llm_overrides_every_llm_key_and_merges_maps_key_by_key() {
        assert_eq!(schema::fields::<LlmOverrides>(), schema::fields::<LlmConfig>());
        assert_eq!(schema::fields::<PriceOverrides>(), schema::fields::<Prices>());
        let dir = repo_with(
            r#"{"llm": {"model": "main", "extra-headers": {"X-A": "a"}, "extra-body": {"o": {"a": 1, "b": 2}},
                "prices": {"input-per-mtok": 3, "output-per-mtok": 15}, "max-retries": 2},
                "review": {"llm": {"extra-headers": {"X-B": "b"}, "extra-body": {"o": {"b": 3}},
                "prices": {"output-per-mtok": 5}, "stream": false, "base-url": null}}}"#,
        );
        let resolved = load(dir.path(), None, &env(&[]), &vec![]).expect("loads");
        let review = resolved.review_llm();
        assert_eq!(review.model, "main");
        assert_eq!(review.max_retries, 2);
        assert!(!review.stream && resolved.config.llm.stream);
        assert_eq!(review.extra_headers.len(), 2);
        assert_eq!(review.extra_body["o"], serde_json::json!({"a": 1, "b": 3}));
        let prices = review.prices.expect("prices");
        assert_eq!((prices.input_per_mtok, prices.output_per_mtok), (3.0, 5.0));
        let other = repo_with(r#"{"review": {"llm": {"provider": "anthropic"}}}"#);
        let resolved = load(other.path(), None, &env(&[]), &vec![]).expect("loads");
        assert_eq!(
            resolved.review_llm().model,
            ProviderKind::Anthropic.default_model(),
            "another provider without a model takes its own default"
        );
        let bad = repo_with(r#"{"review": {"llm": {"auth": "basic"}}}"#);
        let text = load(bad.path(), None, &env(&[]), &vec![])
            .expect_err("rejects")
            .to_string();
        assert!(
            text.contains("review.llm.auth") && text.contains("key, bearer"),
            "{text}"
        );
    }

    #[test]
    fn endpoint_keys_are_validated_naming_the_key() {
        for (config, key) in [
            (r#"{"llm": {"provider": "bedrock", "model": "m"}}"#, "llm.region"),
            (r#"{"llm": {"provider": "azure", "model": "m"}}"#, "llm.base-url"),
            (r#"{"llm": {"auth": "basic"}}"#, "llm.auth"),
            (r#"{"llm": {"extra-body": {"model": "x"}}}"#, "llm.extra-body"),
            (
                r#"{"llm": {"extra-headers": {"X-A": "Bearer ${TOKEN}"}}}"#,
                "llm.extra-headers",
            ),
            (
                r#"{"review": {"llm": {"temperature": 9}}}"#,
                "review.llm.temperature",
            ),
            (
                r#"{"review": {"llm": {"max-request-secs": 0}}}"#,
                "review.llm.max-request-secs",
            ),
            (
                r#"{"llm": {"structured-output": "json"}}"#,
                "llm.structured-output",
            ),
            (
                r#"{"llm": {"max-tokens-field": "maxTokens"}}"#,
                "llm.max-tokens-field",
            ),
            (r#"{"llm": {"stream": "yes"}}"#, "llm.stream"),
        ] {
            let dir = repo_with(config);
            let text = match load(dir.path(), None, &env(&[]), &vec![]) {
                Err(error) => error.to_string(),
                Ok(resolved) => resolved.validate_llm().expect_err(config).to_string(),
            };
            assert!(text.contains(key), "{config}: {text}");
        }
    }

    #[test]
    fn a_value_outside_a_list_names_the_key_and_every_allowed_value() {
        for (name, text, key, allowed) in [
            (
                "BORK_SANDBOX_TRANSPORT",
                "rsync",
                "sandbox.transport",
                "auto, bind, copy",
            ),
            (
                "BORK_SANDBOX_PULL",
                "sometimes",
                "sandbox.pull",
                "missing, always, never",
            ),
            (
                "BORK_SANDBOX_NETWORK",
                "wifi",
                "sandbox.network",
                "none, bridge, host",
            ),
            (
                "BORK_SANDBOX_SETUP_NETWORK",
                "wifi",
                "sandbox.setup-network",
                "none, bridge, host",
            ),
            (
                "BORK_REVIEW_MIN_SEVERITY",
                "urgent",
                "review.min-severity",
                "critical, high, medium, low, info",
            ),
            ("BORK_LLM_AUTH", "basic", "llm.auth", "key, bearer"),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let text = load(dir.path(), None, &env(&[(name, text)]), &vec![])
                .expect_err(name)
                .to_string();
            assert!(
                text.contains(key) && text.contains(allowed) && text.contains(name),
                "{name}: {text}"
            );
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let resolved = load(
            dir.path(),
            None,
            &env(&[
                ("BORK_SANDBOX_TRANSPORT", "copy"),
                ("BORK_SANDBOX_KEEP_TREE", "false"),
                ("BORK_SANDBOX_PULL", "never"),
                ("BORK_SANDBOX_NETWORK", "bridge"),
                ("BORK_REVIEW_MIN_SEVERITY", "high"),
                ("BORK_LLM_AUTH", "bearer"),
            ]),
            &vec![],
        )
        .expect("loads");
        let config = &resolved.config;
        assert_eq!(config.sandbox.transport, Transport::Copy);
        assert!(!config.sandbox.keep_tree, "on unless turned off");
        assert!(
            SandboxConfig::default().keep_tree,
            "a tree worth keeping is kept by default"
        );
        assert_eq!(config.sandbox.pull, PullPolicy::Never);
        assert_eq!(config.sandbox.network, Network::Bridge);
        assert_eq!(config.review.min_severity, Severity::High);
        assert_eq!(config.llm.auth, AuthMode::Bearer);
    }

    #[test]
    fn security_keys_come_from_the_base_branch() {
        let dir = repo_with(
            r#"{"max-iterations": 2, "correctness-checker": "fake-check", "edits-require-approval": [],
                "llm": {"base-url": "https://attacker.example", "model": "head-model"}}"#,
        );
        let base = r#"{"correctness-checker": "ci/check", "edits-require-approval": ["Cargo.toml"], "max-iterations": 9}"#;
        let resolved =
            load_with_trusted(dir.path(), None, &env(&[]), &vec![], Some(Some(base))).expect("loads");
        assert_eq!(resolved.config.correctness_checker.as_deref(), Some("ci/check"));
        assert_eq!(resolved.config.edits_require_approval, vec!["Cargo.toml"]);
        assert_eq!(
            resolved.config.llm.base_url, None,
            "the head's endpoint is ignored"
        );
        assert_eq!(
            resolved.config.llm.model, "head-model",
            "other keys still come from the checkout"
        );
        assert_eq!(resolved.config.max_iterations, 2);
        assert!(resolved.explain().contains("base branch"));
        let none = load_with_trusted(dir.path(), None, &env(&[]), &vec![], Some(None)).expect("loads");
        assert_eq!(none.config.correctness_checker, None);
    }

    #[test]
    fn env_lists_and_booleans() {
        let dir = tempfile::tempdir().expect("tempdir");
        let resolved = load(
            dir.path(),
            None,
            &env(&[
                ("BORK_EDITS_REQUIRE_APPROVAL", "Cargo.toml, ci/*.sh"),
                ("BORK_REVIEW_ENABLED", "true"),
            ]),
            &vec![],
        )
        .expect("loads");
        assert_eq!(
            resolved.config.edits_require_approval,
            vec!["Cargo.toml", "ci/*.sh"]
        );
        assert!(resolved.config.review.enabled);
    }
}
