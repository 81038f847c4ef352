//! The configuration's schema: the serde types of `.config/bork.json` (one per section), each
//! with its defaults, stated once here, and the conversions of a section into the settings a
//! module takes ([`LlmConfig::settings`], [`SandboxConfig::docker_settings`]). No I/O.

use std::collections::BTreeMap;
use std::path::PathBuf;

use figment::Figment;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::github::GithubConfig;
pub use crate::llm::config::{LlmConfig, Prices};
use crate::llm::{AuthMode, ProviderKind};
use crate::review::Severity;
use crate::sandbox::SandboxKind;
use crate::sandbox::docker::{PullPolicy, Transport};

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
    /// Gitignore-style globs of the code: what the model may create, change or delete without
    /// approval. Every other edit is held for approval (it decides how the code is built, run or
    /// judged). Absent: derived from the repository's layout (`bork-ci init` writes it out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<Vec<String>>,
    /// Gitignore-style globs of test files: the model may add one, while a change to or deletion
    /// of one the approved revision has is held (listing tests in `code` lets the model change
    /// them freely). Absent: the usual test names (`tests/`, `test_*.py`, `*_test.go`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests: Option<Vec<String>>,
    /// Run the checker once on the approved tree before the first model call: a checker that
    /// cannot start stops the run there (exit 2); any other verdict is the run's baseline, shown
    /// to the model in the first prompt.
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
            code: None,
            tests: None,
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
    /// Over `copy`: keep the tree volume for the next run of the repository (default `true`).
    pub keep_tree: bool,
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
    /// Shell commands run once per round (the first before the first model call), in the judge
    /// image, on the approved revision, with `setup-network`: they fill the dependency cache
    /// (`/deps`, keyed by `sandbox::deps::key`) that the judges then read (read-only) without
    /// network.
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
            keep_tree: true,
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
    /// [`Resolved::docker_settings`](crate::config::Resolved::docker_settings) sets those from
    /// the run. An error is `sandbox.memory`'s.
    pub fn docker_settings(
        &self,
        artifact_dir: PathBuf,
    ) -> Result<crate::sandbox::docker::DockerSettings, String> {
        use crate::sandbox::docker;
        Ok(docker::DockerSettings {
            host: None,
            tls: None,
            image: self.image.clone(),
            runner_image: self.runner_image.clone(),
            runner_binary: None,
            transport: self.transport,
            keep_tree: self.keep_tree,
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

/// The fields of a section as serde itself lists them (a probe with an unknown field asks it).
pub(super) fn fields<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
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

pub(super) fn merge_json(mut base: Value, overlay: &Value) -> Value {
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
