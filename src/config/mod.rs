//! Configuration: `.config/bork.json` layered with figment, from lowest to highest precedence:
//! defaults, the file, `BORK_*` environment variables, command-line flags. One typed [`Config`]
//! comes out, validated before anything else runs; [`Resolved::explain`] says where each value came
//! from. This is the only module that reads the environment for configuration; it never prints a
//! secret (the LLM key is held as a `SecretString` and only its presence is shown).
//!
//! The keys are documented in `specs/core/config-file.md`; keep the two in step.

pub mod env_vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::llm::{AuthMode, ProviderKind};
use crate::review::Severity;
use crate::sandbox::SandboxKind;
use crate::sandbox::docker::{PullPolicy, Transport};

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

/// The resolved configuration of one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Config {
    /// Path of the correctness-checker executable, relative to the repository root. Absent: no checker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correctness_checker: Option<String>,
    /// Gitignore-style globs whose edits need human approval, in addition to `specs/**` and the defaults.
    pub edits_require_approval: Vec<String>,
    /// Gitignore-style globs of further judge files (files that decide what the checker or the
    /// Verifier does), added to the defaults (`judge_files::DEFAULTS`): edits to them are held for
    /// approval, and every judge runs with them as the approved revision has them.
    pub judge_files: Vec<String>,
    /// Defaults of the judge files turned off, each with the reason (`{"setup.cfg": "..."}`).
    pub judge_files_exempt: BTreeMap<String, String>,
    /// Run the checker once on the approved tree before the first model call: a checker that
    /// cannot run stops the run there (exit 2), and its findings are the run's baseline.
    pub preflight: bool,
    /// Confirm a clean verdict before the run ends converged: the checker and the Verifier run
    /// once more with an empty build cache, so nothing an earlier judge of the run left there
    /// can have bought it.
    pub confirm_clean: bool,
    /// Iterations before the run stops and asks for a human.
    pub max_iterations: u32,
    /// Wall-clock limit of one checker run, in seconds.
    pub checker_timeout_secs: u64,
    /// Upper bound on the estimated tokens of the packed prompt.
    pub context_budget_tokens: u64,
    /// Wall-clock budget of the whole run, in seconds; past it the run ends `needs-human`.
    pub run_timeout_secs: u64,
    /// The branch the spec diff is taken against.
    pub base: String,
    /// The revision the spec diff is taken against, overriding `base` and the push's own
    /// `before` commit. Absent: chosen from `base` and the CI's push event.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_base: Option<String>,
    /// Files larger than this are named in the prompt but not inlined.
    pub max_file_bytes: u64,
    pub llm: LlmConfig,
    pub sandbox: SandboxConfig,
    pub verification: VerificationConfig,
    pub review: ReviewConfig,
    pub github: GithubConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            correctness_checker: None,
            edits_require_approval: Vec::new(),
            judge_files: Vec::new(),
            judge_files_exempt: BTreeMap::new(),
            preflight: true,
            confirm_clean: true,
            max_iterations: 5,
            checker_timeout_secs: 600,
            context_budget_tokens: 200_000,
            run_timeout_secs: 3600,
            base: crate::pack::DEFAULT_BASE.into(),
            diff_base: None,
            max_file_bytes: crate::pack::DEFAULT_MAX_FILE_BYTES,
            llm: LlmConfig::default(),
            sandbox: SandboxConfig::default(),
            verification: VerificationConfig::default(),
            review: ReviewConfig::default(),
            github: GithubConfig::default(),
        }
    }
}

/// The model and how to reach it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LlmConfig {
    pub provider: ProviderKind,
    pub model: String,
    /// Endpoint root; absent: the provider's public API.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the variable holding the key; absent: `OPENAI_API_KEY` or `ANTHROPIC_API_KEY`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Output token limit of one answer. A server whose 400 states a lower maximum gets that
    /// maximum, once, for the rest of the run.
    pub max_output_tokens: u32,
    /// OpenAI-compatible servers: `max_completion_tokens` or `max_tokens`, the field the cap is
    /// sent in; absent: `max_completion_tokens` for `api.openai.com` and `azure`, `max_tokens`
    /// for every other endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<crate::llm::MaxTokensField>,
    /// The longest silence allowed while waiting for an answer or reading it (no bytes at all),
    /// in seconds; without streaming, the wait for the whole answer.
    pub timeout_secs: u64,
    /// The longest one model request may take in all, streamed or not, in seconds.
    pub max_request_secs: u64,
    /// Stream answers as server-sent events (OpenAI-compatible and Anthropic endpoints; Bedrock
    /// never streams); a server that cannot is asked without streaming for the rest of the run.
    pub stream: bool,
    pub max_retries: u32,
    /// Token budget of the whole run (input + output); past it the run ends `needs-human`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    /// Cost budget of the whole run in US dollars, priced with `llm.prices` (the model's tokens);
    /// past it the run ends `needs-human`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Prices per million tokens, for the cost figure in the report and `llm.max-cost-usd`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
    /// The scripted model's file of canned answers, relative to the working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// Azure: the `api-version` query parameter; absent: the latest GA version bork-ci knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Azure: `key` (the `api-key` header) or `bearer` (an Entra ID token as `Authorization: Bearer`).
    pub auth: AuthMode,
    /// Bedrock and Vertex: the region; Bedrock falls back to `AWS_REGION`, `AWS_DEFAULT_REGION`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Vertex: the Google Cloud project; absent: `GOOGLE_CLOUD_PROJECT`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Bedrock web identity: the STS endpoint; absent: `https://sts.{region}.amazonaws.com`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_url: Option<String>,
    /// Headers added to every model request; a value written `${NAME}` is read from the
    /// environment variable NAME and treated as a secret.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_headers: BTreeMap<String, String>,
    /// Fields merged into the top level of every request body.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, Value>,
    /// Sampling temperature; absent: the server's default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Sampling seed (OpenAI-compatible servers); absent: none sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Anthropic: mark the constant prompt for caching (`cache_control` blocks); `false` sends
    /// plain string contents.
    pub prompt_caching: bool,
    /// The model's context window in tokens; a packed prompt estimated above it is warned about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// How the answer's JSON structure is asked for: `json-schema` (OpenAI `response_format`
    /// `json_schema`; Anthropic and Bedrock a forced tool), `json-object` (OpenAI
    /// `response_format` `json_object`; no tool elsewhere) or `none`. A server that rejects the
    /// mode gets the next weaker one for the rest of the run.
    pub structured_output: crate::llm::StructuredOutput,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            provider: ProviderKind::Openai,
            model: "gpt-4.1".into(),
            base_url: None,
            api_key_env: None,
            max_output_tokens: crate::llm::DEFAULT_MAX_OUTPUT_TOKENS,
            max_tokens_field: None,
            timeout_secs: 600,
            max_request_secs: crate::llm::DEFAULT_MAX_REQUEST_SECS,
            stream: true,
            max_retries: 4,
            max_total_tokens: None,
            max_cost_usd: None,
            prices: None,
            script: None,
            api_version: None,
            auth: AuthMode::Key,
            region: None,
            project: None,
            sts_url: None,
            extra_headers: BTreeMap::new(),
            extra_body: serde_json::Map::new(),
            temperature: None,
            seed: None,
            prompt_caching: true,
            context_window: None,
            structured_output: crate::llm::StructuredOutput::JsonSchema,
        }
    }
}

impl LlmConfig {
    /// The model provider's settings: these keys plus the key and the provider's other
    /// credentials (AWS, Google, extra headers). The one conversion from configuration to
    /// [`crate::llm::LlmSettings`].
    pub fn settings(
        &self,
        api_key: Option<SecretString>,
        credentials: crate::llm::Credentials,
    ) -> crate::llm::LlmSettings {
        use crate::llm;
        llm::LlmSettings {
            provider: self.provider,
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key,
            api_key_env: self.key_env(),
            max_output_tokens: self.max_output_tokens,
            timeout: std::time::Duration::from_secs(self.timeout_secs),
            max_request: std::time::Duration::from_secs(self.max_request_secs),
            stream: self.stream,
            progress_interval: llm::PROGRESS_INTERVAL,
            max_retries: self.max_retries,
            script: self.script.as_ref().map(PathBuf::from),
            endpoint: llm::EndpointSettings {
                api_version: self.api_version.clone(),
                auth: self.auth,
                region: self.region.clone(),
                project: self.project.clone(),
                sts_url: self.sts_url.clone(),
                extra_headers: self.extra_headers.clone(),
                extra_body: self.extra_body.clone(),
                temperature: self.temperature,
                seed: self.seed,
                prompt_caching: self.prompt_caching,
                credentials,
            },
            structured_output: self.structured_output,
            max_tokens_field: self.max_tokens_field,
        }
    }

    /// These settings with what a provider learned about its server applied (never a
    /// stronger structured-output mode, a higher output cap, or streaming turned back on).
    pub fn apply_learned(&mut self, learned: &crate::llm::Learned) {
        if let Some(mode) = learned.structured_output {
            self.structured_output = self.structured_output.max(mode);
        }
        if let Some(cap) = learned.max_output_tokens.filter(|cap| *cap > 0) {
            self.max_output_tokens = self.max_output_tokens.min(cap);
        }
        if learned.stream == Some(false) {
            self.stream = false;
        }
    }

    /// The provider's name as written in the configuration.
    pub fn provider_name(&self) -> String {
        self.provider.as_str().to_owned()
    }

    /// The variable the key is read from (empty for providers without a key: Bedrock, Vertex).
    pub fn key_env(&self) -> String {
        match (&self.api_key_env, self.provider) {
            (Some(name), _) => name.clone(),
            (None, ProviderKind::Azure) if self.auth == AuthMode::Bearer => {
                "AZURE_OPENAI_AD_TOKEN".to_owned()
            }
            (None, provider) => provider.default_api_key_env().to_owned(),
        }
    }

    /// The variables the provider's other credentials and the `${NAME}` extra headers come from:
    /// `(secret names, plain names)`.
    pub fn credential_env_names(&self) -> (Vec<String>, Vec<String>) {
        let (secrets, plain) = crate::llm::endpoint::credential_env(self.provider);
        let mut secrets: Vec<String> = secrets.iter().map(|name| (*name).to_owned()).collect();
        secrets.extend(
            self.extra_headers
                .values()
                .filter_map(|value| crate::llm::endpoint::header_env_name(value))
                .map(str::to_owned),
        );
        (secrets, plain.iter().map(|name| (*name).to_owned()).collect())
    }

    /// The provider's other credentials, read from `env` (see [`LlmConfig::credential_env_names`]).
    pub fn credentials(&self, env: &BTreeMap<String, String>) -> crate::llm::Credentials {
        let (secrets, plain) = self.credential_env_names();
        let mut credentials = crate::llm::Credentials::default();
        for name in secrets {
            if let Some(value) = env.get(&name).filter(|value| !value.is_empty()) {
                credentials
                    .secrets
                    .insert(name, SecretString::from(value.clone()));
            }
        }
        for name in plain {
            if let Some(value) = env.get(&name).filter(|value| !value.is_empty()) {
                credentials.plain.insert(name, value.clone());
            }
        }
        credentials
    }
}

/// `review.llm`: the keys of [`LlmConfig`], each optional; a key set here replaces `llm`'s, one
/// left unset (or `null`) inherits it. `extra-headers`, `extra-body` and `prices` are merged key
/// by key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct LlmOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<crate::llm::MaxTokensField>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_total_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices: Option<PriceOverrides>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sts_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_headers: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_body: Option<serde_json::Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_caching: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<crate::llm::StructuredOutput>,
}

/// `review.llm.prices`: each price optional, inheriting `llm.prices`'.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct PriceOverrides {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_per_mtok: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_per_mtok: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
}

impl LlmOverrides {
    /// `base` with the keys set here laid over it.
    pub fn over(&self, base: &LlmConfig) -> LlmConfig {
        let mut llm = base.clone();
        macro_rules! replace {
            ($($field:ident),*) => {$(
                if let Some(value) = &self.$field {
                    llm.$field = value.clone();
                }
            )*};
        }
        macro_rules! replace_optional {
            ($($field:ident),*) => {$(
                if let Some(value) = &self.$field {
                    llm.$field = Some(value.clone());
                }
            )*};
        }
        replace!(
            provider,
            model,
            max_output_tokens,
            timeout_secs,
            max_request_secs,
            stream,
            max_retries,
            auth,
            prompt_caching,
            structured_output
        );
        replace_optional!(
            base_url,
            api_key_env,
            max_tokens_field,
            max_total_tokens,
            max_cost_usd,
            script,
            api_version,
            region,
            project,
            sts_url,
            temperature,
            seed,
            context_window
        );
        if let Some(prices) = &self.prices {
            let inherited = llm.prices.unwrap_or_default();
            llm.prices = Some(Prices {
                input_per_mtok: prices.input_per_mtok.unwrap_or(inherited.input_per_mtok),
                output_per_mtok: prices.output_per_mtok.unwrap_or(inherited.output_per_mtok),
                cached_input_per_mtok: prices
                    .cached_input_per_mtok
                    .unwrap_or(inherited.cached_input_per_mtok),
            });
        }
        if let Some(headers) = &self.extra_headers {
            llm.extra_headers
                .extend(headers.iter().map(|(name, value)| (name.clone(), value.clone())));
        }
        if let Some(body) = &self.extra_body {
            for (key, value) in body {
                let merged = match llm.extra_body.remove(key) {
                    Some(inherited) => merge_json(inherited, value),
                    None => value.clone(),
                };
                llm.extra_body.insert(key.clone(), merged);
            }
        }
        llm
    }
}

/// Prices in US dollars per million tokens.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Prices {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cached_input_per_mtok: f64,
}

/// Where the steps run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SandboxConfig {
    pub kind: SandboxKind,
    /// The team's toolchain image the checker and verifier run in.
    pub image: String,
    /// The image of bork-ci itself, for the edit step; absent (`null`): bork-ci builds one from
    /// its own executable, tagged `bork-ci-runner:<sha256 prefix>`.
    pub runner_image: Option<String>,
    /// How files reach the containers: `auto` (default), `bind` or `copy`.
    pub transport: Transport,
    /// Resource limits of every container.
    pub ulimits: SandboxUlimits,
    /// When to pull images: `missing`, `always` or `never`.
    pub pull: PullPolicy,
    /// The network of the checker and the verifier: `none` (default), `bridge` or `host`.
    pub network: Network,
    /// Memory limit, e.g. `2g`.
    pub memory: String,
    pub cpus: f64,
    pub pids_limit: i64,
    /// `uid:gid` the checker runs as.
    pub user: String,
    /// Shell commands run once per run before the first model call, in the judge image, on the
    /// approved revision, with `setup-network`: they fill the dependency cache (`/deps`) that the
    /// judges then read (read-only) without network.
    pub setup: Vec<String>,
    /// The network of the setup commands: `bridge` (default), `host` or `none`.
    pub setup_network: Network,
    /// Wall-clock limit of all setup commands together, in seconds.
    pub setup_timeout_secs: u64,
    /// Artifact directory outside the repository; absent: `AGENT_ARTIFACT_DIR` or `~/.agent-artifacts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_dir: Option<String>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            kind: SandboxKind::Docker,
            image: "debian:bookworm-slim".into(),
            runner_image: None,
            transport: Transport::Auto,
            ulimits: SandboxUlimits::default(),
            pull: PullPolicy::Missing,
            network: Network::None,
            memory: "2g".into(),
            cpus: 2.0,
            pids_limit: 512,
            user: "65534:65534".into(),
            setup: Vec::new(),
            setup_network: Network::Bridge,
            setup_timeout_secs: 1800,
            artifact_dir: None,
        }
    }
}

impl SandboxConfig {
    /// The docker backend's settings from these keys, with artifacts under `artifact_dir`: the
    /// one conversion, so that each default is stated once (in [`SandboxConfig::default`]). The
    /// engine is `DOCKER_HOST`'s, the lease the backend's default, no egress for the setup job:
    /// [`Resolved::docker_settings`] sets those from the run. An error is `sandbox.memory`'s.
    pub fn docker_settings(
        &self,
        artifact_dir: PathBuf,
    ) -> Result<crate::sandbox::docker::DockerSettings, String> {
        use crate::sandbox::docker;
        Ok(docker::DockerSettings {
            host: None,
            image: self.image.clone(),
            runner_image: self.runner_image.clone(),
            runner_binary: None,
            transport: self.transport,
            ulimits: docker::Ulimits {
                nofile: self.ulimits.nofile,
                nproc: self.ulimits.nproc,
            },
            pull: self.pull,
            network: self.network.as_str().to_owned(),
            memory: Some(docker::parse_memory(&self.memory)?),
            cpus: Some(self.cpus),
            pids_limit: Some(self.pids_limit),
            user: self.user.clone(),
            tmpfs_bytes: docker::TMPFS_BYTES,
            // Unless the caller names the repository: one dependency cache per artifact root.
            deps_identity: artifact_dir.display().to_string(),
            artifact_dir,
            setup_network: self.setup_network.as_str().to_owned(),
            setup_egress: crate::sandbox::SetupNetwork::default(),
            lease: docker::DEFAULT_LEASE,
        })
    }
}

/// `sandbox.ulimits`: soft and hard limits set on every container, at or below usual hosts'
/// hard limits (an engine that applies larger defaults of its own, as Podman does, fails with
/// "error setting rlimit" where they exceed them).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct SandboxUlimits {
    /// Open files per process.
    pub nofile: i64,
    /// Processes of the container's user.
    pub nproc: i64,
}

impl Default for SandboxUlimits {
    fn default() -> Self {
        SandboxUlimits {
            nofile: 1024,
            nproc: 4096,
        }
    }
}

/// A container network (`sandbox.network`, `sandbox.setup-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// No network at all.
    None,
    /// The engine's default bridge.
    Bridge,
    /// The host's network.
    Host,
}

impl Network {
    /// The engine's name of the network (`network_mode`).
    pub fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Bridge => "bridge",
            Network::Host => "host",
        }
    }
}

impl std::fmt::Display for Network {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// One verifier step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    pub name: String,
    pub command: String,
}

/// The Verifier pipeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct VerificationConfig {
    pub steps: Vec<StepConfig>,
    pub timeout_secs: u64,
}

impl Default for VerificationConfig {
    fn default() -> Self {
        VerificationConfig {
            steps: Vec::new(),
            timeout_secs: 1800,
        }
    }
}

/// The built-in LLM reviewer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct ReviewConfig {
    pub enabled: bool,
    /// Review findings below this severity are not fed back: `critical`, `high`, `medium`,
    /// `low` or `info`.
    pub min_severity: Severity,
    pub allow_prompt_patch_drift: bool,
    /// Overrides of `llm` for the reviewer; unset keys inherit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmOverrides>,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        ReviewConfig {
            enabled: false,
            min_severity: Severity::Medium,
            allow_prompt_patch_drift: false,
            llm: None,
        }
    }
}

/// How bork-ci appears on GitHub.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct GithubConfig {
    pub label: String,
    pub author_name: String,
    pub author_email: String,
    pub branch_prefix: String,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            label: "bork:needs-human".into(),
            author_name: "bork-ci".into(),
            author_email: "bork-ci@users.noreply.github.com".into(),
            branch_prefix: "bork/".into(),
        }
    }
}

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

/// Values given on the command line: each (key path, value, flag as typed).
pub type FlagValues = Vec<(&'static str, Value, &'static str)>;

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

/// One named layer of values (defaults, an env var, a flag), so provenance can name it.
struct Layer {
    name: String,
    data: Value,
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        figment::providers::Serialized::defaults(&self.data).data()
    }
}

/// Sets `path` (dotted) in a JSON object tree.
fn nest(path: &str, value: Value) -> Value {
    path.rsplit('.').fold(value, |inner, part| {
        let mut object = serde_json::Map::new();
        object.insert(part.to_owned(), inner);
        Value::Object(object)
    })
}

fn parse_env(var: &env_vars::EnvVar, text: &str) -> Result<Value, ConfigError> {
    let bad = |message: String| ConfigError::BadEnv {
        name: var.name.to_owned(),
        key: var.key.to_owned(),
        message,
    };
    Ok(match var.kind {
        env_vars::ValueKind::Text => Value::String(text.to_owned()),
        env_vars::ValueKind::Integer => Value::from(
            text.trim()
                .parse::<u64>()
                .map_err(|_| bad(format!("expected a whole number, got {text:?}")))?,
        ),
        env_vars::ValueKind::Decimal => Value::from(
            text.trim()
                .parse::<f64>()
                .ok()
                .filter(|number| number.is_finite())
                .ok_or_else(|| bad(format!("expected a number, got {text:?}")))?,
        ),
        env_vars::ValueKind::Boolean => match text.trim().to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Value::Bool(true),
            "false" | "0" | "no" | "" => Value::Bool(false),
            _ => return Err(bad(format!("expected true or false, got {text:?}"))),
        },
        env_vars::ValueKind::List => Value::Array(
            text.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| Value::String(item.to_owned()))
                .collect(),
        ),
    })
}

/// The process environment as one snapshot: variable names and values.
pub type Env = BTreeMap<String, String>;

/// The process environment, read once, by `main`, and passed down from there as a value
/// (non-UTF-8 variables are skipped).
#[expect(clippy::disallowed_methods, reason = "the environment is read here, once")]
pub fn process_env() -> Env {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// Largest event payload read (GitHub's own webhook payloads are capped at 25 MB).
const MAX_EVENT_BYTES: u64 = 32 * 1024 * 1024;

/// The push a CI job was started by: on GitHub Actions a `push` event (`GITHUB_EVENT_NAME`)
/// whose payload (`GITHUB_EVENT_PATH`) has `before`; on GitLab `CI_COMMIT_BEFORE_SHA` in a
/// `push` pipeline (`CI_PIPELINE_SOURCE`, or when that is not set). `None` elsewhere, and when
/// the payload cannot be read (logged).
pub fn push_event(env: &BTreeMap<String, String>) -> Option<crate::pack::PushEvent> {
    let get = |name: &str| {
        env.get(name)
            .map(|value| value.trim())
            .filter(|value| !value.is_empty())
    };
    if get("GITHUB_EVENT_NAME") == Some("push") {
        let path = get("GITHUB_EVENT_PATH")?;
        let event: Value = match crate::safe_fs::read_regular(Path::new(path), MAX_EVENT_BYTES)
            .map_err(|error| error.to_string())
            .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|error| error.to_string()))
        {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(path, %error, "the push event payload cannot be read; the spec diff is taken against `base`");
                return None;
            }
        };
        let text = |pointer: &str| {
            event
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
        };
        let git_ref = text("/ref").or_else(|| get("GITHUB_REF").map(str::to_owned));
        return Some(crate::pack::PushEvent {
            before: text("/before")?,
            source: "`before` in the push event at GITHUB_EVENT_PATH".into(),
            branch: git_ref.and_then(|r| r.strip_prefix("refs/heads/").map(str::to_owned)),
            default_branch: text("/repository/default_branch"),
        });
    }
    let before = get("CI_COMMIT_BEFORE_SHA")?;
    if get("CI_PIPELINE_SOURCE").is_some_and(|source| source != "push") {
        return None;
    }
    Some(crate::pack::PushEvent {
        before: before.to_owned(),
        source: "CI_COMMIT_BEFORE_SHA".into(),
        branch: get("CI_COMMIT_BRANCH").map(str::to_owned),
        default_branch: get("CI_DEFAULT_BRANCH").map(str::to_owned),
    })
}

/// Reads the configuration of the repository at `repo_root`.
///
/// `config_path` overrides where the file is (relative to the repository root or absolute);
/// `env` is the process environment (passed in so tests control it); `flags` are command-line values.
pub fn load(
    repo_root: &Path,
    config_path: Option<&Path>,
    env: &BTreeMap<String, String>,
    flags: &FlagValues,
) -> Result<Resolved, ConfigError> {
    load_with_trusted(repo_root, config_path, env, flags, None)
}

/// Why `prefix` cannot start bork-ci's branch names, if it cannot: it must be a folder of its
/// own (`bork/`), so that no result branch (`<prefix><base>`) can be the base branch itself or
/// any other branch people push to.
pub fn branch_prefix_problem(prefix: &str) -> Option<String> {
    let valid = !prefix.is_empty()
        && prefix.ends_with('/')
        && prefix.len() >= 2
        && !prefix.starts_with('/')
        && !prefix.starts_with('-')
        && !prefix.starts_with("refs/")
        && !prefix.contains("..")
        && !prefix.contains("//")
        && !prefix.contains("/.")
        && !prefix.starts_with('.')
        && !prefix.contains(".lock/")
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.'));
    (!valid).then(|| {
        format!(
            "`{}` is not a branch folder: use letters, digits, `-`, `_` or `.`, ending in `/` (the default is `bork/`), so that bork-ci's branches never name the base branch or another one people push to",
            crate::untrusted::one_line(prefix)
        )
    })
}

/// Keys that decide where secrets go, what runs with the repository, and what needs approval.
/// On pull-request events they come from the base branch's file, never from the checkout's.
pub const SECURITY_KEYS: &[&str] = &[
    "correctness-checker",
    "edits-require-approval",
    "judge-files",
    "judge-files-exempt",
    "llm.provider",
    "llm.base-url",
    "llm.api-key-env",
    "llm.auth",
    "llm.sts-url",
    "llm.extra-headers",
    "llm.extra-body",
    "review.llm",
    "sandbox.kind",
    "sandbox.image",
    "sandbox.runner-image",
    "sandbox.network",
    "sandbox.setup",
    "sandbox.setup-network",
    // Where bork-ci pushes, what it labels, whom it commits as.
    "github",
];

fn take_key(data: &mut Value, path: &str) -> Option<Value> {
    let mut parts = path.split('.').peekable();
    let mut node = data;
    while let Some(part) = parts.next() {
        let object = node.as_object_mut()?;
        if parts.peek().is_none() {
            return object.remove(part);
        }
        node = object.get_mut(part)?;
    }
    None
}

/// As [`load`], with `trusted` the base branch's configuration file (`Some(None)` when the base
/// has none): the [`SECURITY_KEYS`] are taken from it, and the checkout's values for them are
/// ignored (and logged). Environment and flags, which come from the workflow, still apply.
pub fn load_with_trusted(
    repo_root: &Path,
    config_path: Option<&Path>,
    env: &BTreeMap<String, String>,
    flags: &FlagValues,
    trusted: Option<Option<&str>>,
) -> Result<Resolved, ConfigError> {
    let file = match config_path {
        Some(path) if path.is_absolute() => path.to_owned(),
        Some(path) => repo_root.join(path),
        None => repo_root.join(CONFIG_PATH),
    };
    let shown = config_path
        .map(|path| path.display().to_string())
        .unwrap_or_else(|| CONFIG_PATH.to_owned());
    let mut figment = Figment::new().merge(Layer {
        name: "default".into(),
        data: serde_json::to_value(Config::default()).map_err(|error| ConfigError::Invalid {
            file: shown.clone(),
            message: error.to_string(),
        })?,
    });
    // Read the file ourselves (without following a symlink out of the repository) so that a
    // malformed file gets one clear message with its name.
    if config_path.is_none()
        && std::fs::symlink_metadata(repo_root.join(".config"))
            .is_ok_and(|meta| meta.file_type().is_symlink())
    {
        return Err(ConfigError::Invalid {
            file: shown,
            message:
                "`.config` is a symbolic link; bork-ci reads its configuration only through real folders"
                    .into(),
        });
    }
    let file_used = match std::fs::symlink_metadata(&file) {
        Ok(meta) if meta.file_type().is_symlink() && config_path.is_none() => {
            return Err(ConfigError::Invalid {
                file: shown,
                message: "is a symbolic link; bork-ci reads its configuration only from a regular file"
                    .into(),
            });
        }
        Ok(_) => {
            let bytes = crate::safe_fs::read_regular(&file, MAX_CONFIG_BYTES).map_err(|source| {
                ConfigError::Read {
                    file: shown.clone(),
                    source,
                }
            })?;
            let text = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
                file: shown.clone(),
                message: "not UTF-8".into(),
            })?;
            let data: Value = crate::strict_json::from_str(&text).map_err(|error| ConfigError::Invalid {
                file: shown.clone(),
                message: format!("not valid JSON: {error}"),
            })?;
            if !data.is_object() {
                return Err(ConfigError::Invalid {
                    file: shown.clone(),
                    message: "the top level must be a JSON object".into(),
                });
            }
            let mut data = data;
            if trusted.is_some() {
                for key in SECURITY_KEYS {
                    if take_key(&mut data, key).is_some() {
                        tracing::warn!(
                            "ignoring `{key}` from the checked-out {shown}: on pull-request events it comes from the base branch"
                        );
                    }
                }
            }
            figment = figment.merge(Layer {
                name: shown.clone(),
                data,
            });
            Some(file.clone())
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound && config_path.is_none() => None,
        Err(source) => {
            return Err(ConfigError::Read { file: shown, source });
        }
    };
    if let Some(Some(text)) = trusted {
        let mut base: Value = crate::strict_json::from_str(text).map_err(|error| ConfigError::Invalid {
            file: format!("the base branch's {CONFIG_PATH}"),
            message: format!("not valid JSON: {error}"),
        })?;
        let mut kept = Value::Object(serde_json::Map::new());
        for key in SECURITY_KEYS {
            if let Some(value) = take_key(&mut base, key) {
                kept = merge_json(kept, &nest(key, value));
            }
        }
        figment = figment.merge(Layer {
            name: format!("the base branch's {CONFIG_PATH}"),
            data: kept,
        });
    }
    for var in env_vars::ALL {
        if let Some(text) = env.get(var.name) {
            figment = figment.merge(Layer {
                name: format!("environment {}", var.name),
                data: nest(var.key, parse_env(var, text)?),
            });
        }
    }
    for (key, value, flag) in flags {
        figment = figment.merge(Layer {
            name: format!("flag {flag}"),
            data: nest(key, value.clone()),
        });
    }
    let mut config: Config = figment.extract().map_err(|error| describe(&error, &figment))?;
    // An unset model follows the provider (the built-in default names an OpenAI model).
    if model_is_default(&figment, "llm.model") {
        config.llm.model = config.llm.provider.default_model().to_owned();
    }
    let mut resolved = Resolved {
        review_api_key: None,
        llm_credentials: config.llm.credentials(env),
        review_llm_credentials: crate::llm::Credentials::default(),
        docker_host: env.get("DOCKER_HOST").filter(|host| !host.is_empty()).cloned(),
        push: push_event(env),
        setup_network: setup_network(env),
        toolchain_homes: toolchain_homes(env),
        env: env.clone(),
        default_artifact_dir: crate::verify::default_artifact_dir(env),
        api_key: Some(config.llm.key_env())
            .filter(|name| !name.is_empty())
            .and_then(|name| env.get(&name))
            .filter(|key| !key.is_empty())
            .map(|key| SecretString::from(key.clone())),
        config,
        file: file_used,
        figment,
    };
    resolved.validate()?;
    if let Some(checker) = &mut resolved.config.correctness_checker {
        *checker = crate::edit::policy::normalize_path(checker);
    }
    resolved.review_api_key = Some(resolved.review_llm().key_env())
        .filter(|name| !name.is_empty())
        .and_then(|name| env.get(&name))
        .filter(|key| !key.is_empty())
        .map(|key| SecretString::from(key.clone()));
    resolved.review_llm_credentials = resolved.review_llm().credentials(env);
    for name in resolved.secret_env_names() {
        if let Some(value) = env.get(&name).filter(|_| !name.ends_with("_URL")) {
            crate::secrets::register(&name, value);
        }
    }
    Ok(resolved)
}

/// The proxy variables and the CA bundle (`SSL_CERT_FILE`) the setup commands get.
fn setup_network(env: &BTreeMap<String, String>) -> crate::sandbox::SetupNetwork {
    let proxy_env = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "NO_PROXY",
        "no_proxy",
    ]
    .iter()
    .filter_map(|name| env.get(*name).map(|value| ((*name).to_owned(), value.clone())))
    .collect();
    crate::sandbox::SetupNetwork {
        proxy_env,
        ca_file: env
            .get("SSL_CERT_FILE")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from),
    }
}

/// Toolchain managers' homes under the runner's `HOME` whose variable is unset (see
/// [`Resolved::toolchain_homes`]).
fn toolchain_homes(env: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let Some(home) = env.get("HOME").filter(|home| !home.is_empty()) else {
        return Vec::new();
    };
    [("RUSTUP_HOME", ".rustup"), ("PYENV_ROOT", ".pyenv")]
        .iter()
        .filter(|(name, _)| !env.contains_key(*name))
        .map(|(name, folder)| ((*name).to_owned(), Path::new(home).join(folder)))
        .filter(|(_, path)| path.is_dir())
        .map(|(name, path)| (name, path.display().to_string()))
        .collect()
}

/// Whether `key` was set by no layer but the built-in defaults.
fn model_is_default(figment: &Figment, key: &str) -> bool {
    figment
        .find_metadata(key)
        .is_none_or(|meta| meta.name == "default")
}

fn describe(error: &figment::Error, figment: &Figment) -> ConfigError {
    let error = error.clone().into_iter().next().unwrap_or_else(|| error.clone());
    let key = error
        .path
        .iter()
        .filter(|part| part.as_str() != "default")
        .cloned()
        .collect::<Vec<_>>()
        .join(".");
    let source_name = error
        .metadata
        .as_ref()
        .map(|meta| meta.name.to_string())
        .or_else(|| figment.find_metadata(&key).map(|meta| meta.name.to_string()))
        .unwrap_or_else(|| "configuration".into());
    let message = match &error.kind {
        figment::error::Kind::UnknownField(field, expected) => {
            let closest = expected
                .iter()
                .map(|known| (strsim::jaro_winkler(field, known), known))
                .filter(|(score, _)| *score > 0.7)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match closest {
                Some((_, known)) => format!(
                    "unknown key `{field}`; did you mean `{known}`? Known keys here: {}",
                    expected.join(", ")
                ),
                None => format!("unknown key `{field}`; known keys here: {}", expected.join(", ")),
            }
        }
        figment::error::Kind::UnknownVariant(found, expected) => format!(
            "must be one of {}, not `{}`",
            expected.join(", "),
            crate::untrusted::one_line(found)
        ),
        other => other.to_string(),
    };
    // The error's path may end with the unknown key already: name it once.
    let key = match &error.kind {
        figment::error::Kind::UnknownField(field, _) if key.is_empty() => field.clone(),
        figment::error::Kind::UnknownField(field, _)
            if key == *field || key.ends_with(&format!(".{field}")) =>
        {
            key
        }
        figment::error::Kind::UnknownField(field, _) => format!("{key}.{field}"),
        _ => key,
    };
    ConfigError::BadValue {
        key,
        source_name,
        message,
    }
}

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

    /// Gitignore-style globs of repository paths: `/` separators, no `..`, naming something.
    fn validate_globs(&self, key: &str, globs: &[String]) -> Result<(), ConfigError> {
        for glob in globs {
            if glob.contains('\\') || glob.split('/').any(|part| part == "..") {
                return Err(self.bad(
                    key,
                    format!("{glob:?}: give globs with `/` separators and no `..` component"),
                ));
            }
            if crate::edit::policy::normalize_glob(glob)
                .trim_matches('/')
                .is_empty()
            {
                return Err(self.bad(key, format!("{glob:?} names nothing")));
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let config = &self.config;
        if let Some(problem) = branch_prefix_problem(&config.github.branch_prefix) {
            return Err(self.bad("github.branch-prefix", &problem));
        }
        if config.github.label.trim().is_empty() {
            return Err(self.bad("github.label", "must not be empty"));
        }
        if let Some(checker) = &config.correctness_checker
            && let Some(problem) = repo_relative_problem(checker)
        {
            return Err(self.bad("correctness-checker", problem));
        }
        self.validate_globs("edits-require-approval", &config.edits_require_approval)?;
        self.validate_globs("judge-files", &config.judge_files)?;
        if config
            .llm
            .api_key_env
            .as_ref()
            .is_some_and(|name| name.trim().is_empty())
        {
            return Err(self.bad("llm.api-key-env", "must not be empty"));
        }
        for (key, value, max) in [
            (
                "checker-timeout-secs",
                config.checker_timeout_secs,
                MAX_TIMEOUT_SECS,
            ),
            ("run-timeout-secs", config.run_timeout_secs, MAX_TIMEOUT_SECS),
            ("llm.timeout-secs", config.llm.timeout_secs, MAX_TIMEOUT_SECS),
            (
                "llm.max-request-secs",
                config.llm.max_request_secs,
                MAX_TIMEOUT_SECS,
            ),
            (
                "verification.timeout-secs",
                config.verification.timeout_secs,
                MAX_TIMEOUT_SECS,
            ),
            ("context-budget-tokens", config.context_budget_tokens, MAX_TOKENS),
            ("max-file-bytes", config.max_file_bytes, MAX_FILE_BYTES),
            (
                "llm.max-total-tokens",
                config.llm.max_total_tokens.unwrap_or(0),
                MAX_TOKENS,
            ),
            (
                "llm.max-output-tokens",
                u64::from(config.llm.max_output_tokens),
                MAX_TOKENS,
            ),
        ] {
            if value > max {
                return Err(self.bad(key, format!("must be at most {max}")));
            }
        }
        if config.max_iterations == 0 || config.max_iterations > 100 {
            return Err(self.bad("max-iterations", "must be between 1 and 100"));
        }
        for (key, value) in [
            ("checker-timeout-secs", config.checker_timeout_secs),
            ("run-timeout-secs", config.run_timeout_secs),
            ("llm.timeout-secs", config.llm.timeout_secs),
            ("llm.max-request-secs", config.llm.max_request_secs),
            ("context-budget-tokens", config.context_budget_tokens),
            ("max-file-bytes", config.max_file_bytes),
            ("verification.timeout-secs", config.verification.timeout_secs),
        ] {
            if value == 0 {
                return Err(self.bad(key, "must be greater than 0"));
            }
        }
        if config.llm.max_output_tokens == 0 {
            return Err(self.bad("llm.max-output-tokens", "must be greater than 0"));
        }
        if let Some(budget) = config.llm.max_cost_usd {
            if !budget.is_finite() || budget < 0.0 {
                return Err(self.bad("llm.max-cost-usd", "must be a number of dollars, 0 or more"));
            }
            if config.llm.prices.is_none() {
                return Err(self.bad(
                    "llm.max-cost-usd",
                    "needs the model's prices (`llm.prices.input-per-mtok`, `llm.prices.output-per-mtok`) to count the cost",
                ));
            }
        }
        if let Some(prices) = &config.llm.prices {
            for (key, price) in [
                ("llm.prices.input-per-mtok", prices.input_per_mtok),
                ("llm.prices.output-per-mtok", prices.output_per_mtok),
                ("llm.prices.cached-input-per-mtok", prices.cached_input_per_mtok),
            ] {
                if !price.is_finite() || price < 0.0 {
                    return Err(self.bad(key, "must be a price in dollars, 0 or more"));
                }
            }
        }
        for glob in &config.edits_require_approval {
            if let Err(error) = globset::Glob::new(glob.trim_end_matches('/')) {
                return Err(self.bad("edits-require-approval", format!("bad glob {glob:?}: {error}")));
            }
        }
        if let Some(url) = &config.llm.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(self.bad("llm.base-url", "must start with http:// or https://"));
        }
        for (key, value) in [
            ("sandbox.ulimits.nofile", config.sandbox.ulimits.nofile),
            ("sandbox.ulimits.nproc", config.sandbox.ulimits.nproc),
        ] {
            if value < 1 {
                return Err(self.bad(key, "must be a positive number"));
            }
        }
        if config
            .sandbox
            .runner_image
            .as_deref()
            .is_some_and(|image| image.trim().is_empty())
        {
            return Err(self.bad(
                "sandbox.runner-image",
                "must name an image; leave it unset to have bork-ci build one",
            ));
        }
        if let Err(problem) = crate::sandbox::docker::parse_memory(&config.sandbox.memory) {
            return Err(self.bad("sandbox.memory", problem));
        }
        if !(config.sandbox.cpus.is_finite() && config.sandbox.cpus > 0.0) {
            return Err(self.bad("sandbox.cpus", "must be a number of CPUs greater than 0"));
        }
        if config.sandbox.pids_limit < 1 {
            return Err(self.bad("sandbox.pids-limit", "must be a positive number"));
        }
        if config
            .sandbox
            .setup
            .iter()
            .any(|command| command.trim().is_empty())
        {
            return Err(self.bad("sandbox.setup", "a setup command must not be empty"));
        }
        if config.sandbox.setup_timeout_secs == 0 || config.sandbox.setup_timeout_secs > MAX_TIMEOUT_SECS {
            return Err(self.bad(
                "sandbox.setup-timeout-secs",
                format!("must be between 1 and {MAX_TIMEOUT_SECS}"),
            ));
        }
        let rules = self
            .judge_rules()
            .map_err(|message| self.bad("judge-files-exempt", message))?;
        if let Err(error) = rules.matcher() {
            return Err(self.bad("judge-files", format!("bad glob: {error}")));
        }
        for (index, step) in config.verification.steps.iter().enumerate() {
            if step.name.trim().is_empty() || step.command.trim().is_empty() {
                return Err(self.bad(
                    "verification.steps",
                    format!("step {} needs a non-empty name and command", index + 1),
                ));
            }
        }
        self.validate_endpoint("llm", &config.llm)?;
        if config.review.llm.is_some() {
            self.validate_endpoint("review.llm", &self.review_llm())?;
        }
        Ok(())
    }

    /// Checks the endpoint keys of `llm` (or `review.llm`, named by `section`).
    fn validate_endpoint(&self, section: &str, llm: &LlmConfig) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{section}.{name}");
        if let Some(url) = &llm.sts_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(self.bad(&key("sts-url"), "must start with http:// or https://"));
        }
        for (name, value) in &llm.extra_headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(self.bad(
                    &key("extra-headers"),
                    format!("`{name}` is not an HTTP header name"),
                ));
            }
            if value.contains("${") && crate::llm::endpoint::header_env_name(value).is_none() {
                return Err(self.bad(
                    &key("extra-headers"),
                    format!("the value of `{name}` must be either plain text or exactly `${{NAME}}`"),
                ));
            }
            if crate::llm::endpoint::header_env_name(value).is_none()
                && reqwest::header::HeaderValue::from_str(value).is_err()
            {
                return Err(self.bad(
                    &key("extra-headers"),
                    format!("the value of `{name}` cannot be sent in an HTTP header"),
                ));
            }
        }
        for reserved in crate::llm::endpoint::RESERVED_BODY_KEYS {
            if llm.extra_body.contains_key(*reserved) {
                return Err(self.bad(
                    &key("extra-body"),
                    format!("`{reserved}` is set by bork-ci itself and cannot be overridden"),
                ));
            }
        }
        if let Some(temperature) = llm.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(self.bad(&key("temperature"), "must be between 0 and 2"));
        }
        if llm.context_window == Some(0) {
            return Err(self.bad(&key("context-window"), "must be greater than 0"));
        }
        for (name, value, max) in [
            ("timeout-secs", llm.timeout_secs, MAX_TIMEOUT_SECS),
            ("max-request-secs", llm.max_request_secs, MAX_TIMEOUT_SECS),
            ("max-output-tokens", u64::from(llm.max_output_tokens), MAX_TOKENS),
        ] {
            if value == 0 || value > max {
                return Err(self.bad(&key(name), format!("must be between 1 and {max}")));
            }
        }
        Ok(())
    }

    /// Checks what only a model call needs (the scripted model's file, a model name), so that
    /// `pack` and `config` work without any model settings.
    pub fn validate_llm(&self) -> Result<(), ConfigError> {
        let config = &self.config;
        match config.llm.provider {
            ProviderKind::Scripted if config.llm.script.is_none() => {
                return Err(self.bad(
                    "llm.script",
                    "the scripted provider needs `llm.script`, the file of canned answers",
                ));
            }
            ProviderKind::Scripted => {}
            _ if config.llm.model.trim().is_empty() => {
                return Err(self.bad("llm.model", "must not be empty"));
            }
            _ => {}
        }
        let mut sections = vec![("llm", config.llm.clone(), &self.llm_credentials)];
        if config.review.enabled || config.review.llm.is_some() {
            sections.push(("review.llm", self.review_llm(), &self.review_llm_credentials));
        }
        for (section, llm, credentials) in sections {
            let key = |name: &str| format!("{section}.{name}");
            let set = |name: &str| credentials.plain.contains_key(name);
            match llm.provider {
                ProviderKind::Azure if llm.base_url.is_none() => {
                    return Err(self.bad(
                        &key("base-url"),
                        "the azure provider needs the resource endpoint, e.g. https://NAME.openai.azure.com",
                    ));
                }
                ProviderKind::Bedrock
                    if llm.region.is_none() && !set("AWS_REGION") && !set("AWS_DEFAULT_REGION") =>
                {
                    return Err(self.bad(
                        &key("region"),
                        "the bedrock provider needs a region: set it or the environment variable AWS_REGION",
                    ));
                }
                ProviderKind::Vertex if llm.region.is_none() => {
                    return Err(self.bad(
                        &key("region"),
                        "the vertex provider needs a region, e.g. us-east5 or global",
                    ));
                }
                ProviderKind::Vertex if llm.project.is_none() && !set("GOOGLE_CLOUD_PROJECT") => {
                    return Err(self.bad(
                        &key("project"),
                        "the vertex provider needs a project: set it or the environment variable GOOGLE_CLOUD_PROJECT",
                    ));
                }
                _ => {}
            }
            for (name, value) in &llm.extra_headers {
                if let Some(env) = crate::llm::endpoint::header_env_name(value)
                    && !credentials.secrets.contains_key(env)
                {
                    return Err(self.bad(
                        &key("extra-headers"),
                        format!("`{name}` reads the environment variable {env}, which is not set"),
                    ));
                }
            }
        }
        Ok(())
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
            && model_is_default(&self.figment, "llm.model")
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
        if self.config.run_timeout_secs > 0 {
            settings.lease = std::time::Duration::from_secs(self.config.run_timeout_secs)
                + crate::sandbox::docker::LEASE_GRACE;
        }
        settings.setup_egress = self.setup_network.clone();
        Ok(settings)
    }

    /// What names the dependency cache of the repository at `repo`: its path and the base branch.
    pub fn deps_identity(&self, repo: &Path) -> String {
        format!("{}\n{}", repo.display(), self.config.base)
    }

    /// The build and dependency caches of run `run_id` on the repository at `repo`.
    pub fn shared_dirs(&self, repo: &Path, run_id: &str) -> crate::sandbox::SharedDirs {
        crate::sandbox::SharedDirs::new(&self.artifact_root(), run_id, &self.deps_identity(repo), "")
    }

    /// The artifact directory must live outside the repository: a checker that can write
    /// artifacts must not be able to write into the tree it judges. (It may not exist yet: the
    /// nearest existing ancestor is compared.)
    pub fn check_artifact_root(&self, repo: &Path) -> Result<(), ConfigError> {
        let root = self.artifact_root();
        let absolute = if root.is_absolute() {
            root.clone()
        } else {
            std::env::current_dir()
                .map_err(|source| ConfigError::Read {
                    file: "the current directory".into(),
                    source,
                })?
                .join(&root)
        };
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
            return Err(ConfigError::BadValue {
                key: "sandbox.artifact-dir".into(),
                source_name: self.source_of("sandbox.artifact-dir"),
                message: format!(
                    "the artifact directory {} is inside the repository {}; set `sandbox.artifact-dir` or AGENT_ARTIFACT_DIR to a directory outside it",
                    root.display(),
                    repo.display()
                ),
            });
        }
        Ok(())
    }

    /// The judge files of this configuration (see `judge_files`); an error names a bad
    /// `judge-files-exempt` entry.
    pub fn judge_rules(&self) -> Result<crate::edit::judge_files::JudgeRules, String> {
        crate::edit::judge_files::JudgeRules::resolve(
            self.config.correctness_checker.as_deref(),
            &self.config.judge_files,
            &self.config.judge_files_exempt,
        )
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

    /// Every secret value the model settings hold (keys, AWS and Google credentials, `${NAME}`
    /// extra-header values): what must be masked in logs and kept out of prompts.
    pub fn llm_secrets(&self) -> Vec<&SecretString> {
        let mut secrets: Vec<&SecretString> = [self.api_key.as_ref(), self.review_api_key.as_ref()]
            .into_iter()
            .flatten()
            .collect();
        secrets.extend(self.llm_credentials.secrets.values());
        secrets.extend(self.review_llm_credentials.secrets.values());
        secrets
    }

    /// Names of variables that hold secrets and must never reach a checker or verifier.
    pub fn secret_env_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            "GITHUB_TOKEN",
            "BORK_GITHUB_TOKEN",
            "GH_TOKEN",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "ACTIONS_RUNTIME_TOKEN",
            "ACTIONS_RUNTIME_URL",
            "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
            "ACTIONS_ID_TOKEN_REQUEST_URL",
            "ACTIONS_CACHE_URL",
            "ACTIONS_RESULTS_URL",
        ]
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
        names.push(self.config.llm.key_env());
        names.push(self.review_llm().key_env());
        for llm in [&self.config.llm, &self.review_llm()] {
            let (secrets, plain) = llm.credential_env_names();
            names.extend(secrets);
            // Paths of credential files: the files are secrets, so their names go too.
            names.extend(plain.into_iter().filter(|name| {
                matches!(
                    name.as_str(),
                    "AWS_WEB_IDENTITY_TOKEN_FILE" | "GOOGLE_APPLICATION_CREDENTIALS"
                )
            }));
        }
        names.retain(|name| !name.is_empty());
        names.sort();
        names.dedup();
        names
    }
}

/// The fields of a section as serde itself lists them (a probe with an unknown field asks it).
fn fields<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    let probe = Figment::from(figment::providers::Serialized::defaults(
        serde_json::json!({ "bork-ci-probe": true }),
    ));
    match probe.extract::<T>() {
        Err(error) => match &error.kind {
            figment::error::Kind::UnknownField(_, expected) => expected.to_vec(),
            _ => Vec::new(),
        },
        Ok(_) => Vec::new(),
    }
}

/// Every key the configuration accepts, as dotted paths (`llm.max-cost-usd`), set or not: the
/// fields of each section as serde itself lists them (a probe with an unknown field asks it).
pub fn every_key() -> Vec<String> {
    let sections: [(&str, Vec<&'static str>); 7] = [
        ("", fields::<Config>()),
        ("llm", fields::<LlmConfig>()),
        ("llm.prices", fields::<Prices>()),
        ("sandbox", fields::<SandboxConfig>()),
        ("sandbox.ulimits", fields::<SandboxUlimits>()),
        ("verification", fields::<VerificationConfig>()),
        ("review", fields::<ReviewConfig>()),
    ];
    let github = fields::<GithubConfig>();
    let nested: Vec<&str> = sections
        .iter()
        .map(|(prefix, _)| *prefix)
        .chain(std::iter::once("github"))
        .filter(|prefix| !prefix.is_empty())
        .collect();
    let mut keys = Vec::new();
    for (prefix, names) in sections.iter().chain(std::iter::once(&("github", github))) {
        for name in names {
            let key = if prefix.is_empty() {
                (*name).to_owned()
            } else {
                format!("{prefix}.{name}")
            };
            if !nested.contains(&key.as_str()) {
                keys.push(key);
            }
        }
    }
    keys
}

fn merge_json(mut base: Value, overlay: &Value) -> Value {
    if let (Value::Object(base_map), Value::Object(overlay_map)) = (&mut base, overlay) {
        for (key, value) in overlay_map {
            let merged = match base_map.remove(key) {
                Some(existing) => merge_json(existing, value),
                None => value.clone(),
            };
            base_map.insert(key.clone(), merged);
        }
        base
    } else {
        overlay.clone()
    }
}

/// Why `path` is not a plain path inside the repository, if it is not.
pub fn repo_relative_problem(path: &str) -> Option<String> {
    if path.is_empty() {
        return Some("must not be empty".into());
    }
    if path.starts_with('/') || path.contains('\\') || path.contains(':') {
        return Some(format!(
            "{path:?} leaves the repository: give a path relative to the repository root"
        ));
    }
    if path
        .split('/')
        .any(|part| part == ".." || part.chars().any(char::is_control))
    {
        return Some(format!(
            "{path:?} leaves the repository or is not a plain relative path"
        ));
    }
    if path.split('/').any(|part| part.eq_ignore_ascii_case(".git")) {
        return Some(format!("{path:?} points into .git"));
    }
    if crate::edit::policy::normalize_path(path).is_empty() {
        return Some(format!("{path:?} names no file"));
    }
    None
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

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
        assert_eq!(fields::<LlmOverrides>(), fields::<LlmConfig>());
        assert_eq!(fields::<PriceOverrides>(), fields::<Prices>());
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
