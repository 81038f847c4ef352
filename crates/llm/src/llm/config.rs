//! The `llm` section of the configuration file as serde types ([`LlmConfig`], its defaults
//! stated once here) and its one conversion into [`LlmSettings`]. The edit step receives it as
//! data (without the key); nothing here reads a file or the environment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use secrecy::SecretString;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::data::{AuthMode, LlmSettings, ProviderKind};

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
    pub max_tokens_field: Option<super::data::MaxTokensField>,
    /// The longest silence allowed while waiting for an answer or reading it (no bytes at all),
    /// in seconds; without streaming, the wait for the whole answer.
    pub timeout_secs: u64,
    /// The longest one model request may take in all, streamed or not, in seconds.
    pub max_request_secs: u64,
    /// Stream answers: server-sent events from OpenAI-compatible and Anthropic endpoints,
    /// `converse-stream`'s AWS event stream from Bedrock; a server that cannot is asked without
    /// streaming for the rest of the run.
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
    pub structured_output: super::data::StructuredOutput,
}

impl Default for LlmConfig {
    fn default() -> Self {
        // The endpoint's keys default as `llm` states them.
        let endpoint = super::data::EndpointSettings::default();
        LlmConfig {
            provider: ProviderKind::Openai,
            model: ProviderKind::Openai.default_model().into(),
            base_url: None,
            api_key_env: None,
            max_output_tokens: super::data::DEFAULT_MAX_OUTPUT_TOKENS,
            max_tokens_field: None,
            timeout_secs: super::data::DEFAULT_TIMEOUT_SECS,
            max_request_secs: super::data::DEFAULT_MAX_REQUEST_SECS,
            stream: true,
            max_retries: super::data::DEFAULT_MAX_RETRIES,
            max_total_tokens: None,
            max_cost_usd: None,
            prices: None,
            script: None,
            api_version: endpoint.api_version,
            auth: endpoint.auth,
            region: endpoint.region,
            project: endpoint.project,
            sts_url: endpoint.sts_url,
            extra_headers: endpoint.extra_headers,
            extra_body: endpoint.extra_body,
            temperature: endpoint.temperature,
            seed: endpoint.seed,
            prompt_caching: endpoint.prompt_caching,
            context_window: None,
            structured_output: super::data::StructuredOutput::JsonSchema,
        }
    }
}

impl LlmConfig {
    /// The model provider's settings: these keys plus the key and the provider's other
    /// credentials (AWS, Google, extra headers). The one conversion from configuration to
    /// [`LlmSettings`].
    pub fn settings(
        &self,
        api_key: Option<SecretString>,
        credentials: super::data::Credentials,
    ) -> LlmSettings {
        LlmSettings {
            provider: self.provider,
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            api_key,
            api_key_env: self.key_env(),
            max_output_tokens: self.max_output_tokens,
            timeout: std::time::Duration::from_secs(self.timeout_secs),
            max_request: std::time::Duration::from_secs(self.max_request_secs),
            stream: self.stream,
            progress_interval: super::data::PROGRESS_INTERVAL,
            max_retries: self.max_retries,
            script: self.script.as_ref().map(PathBuf::from),
            endpoint: super::data::EndpointSettings {
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
    pub fn apply_learned(&mut self, learned: &super::data::Learned) {
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
        let (secrets, plain) = super::endpoint::credential_env(self.provider);
        let mut secrets: Vec<String> = secrets.iter().map(|name| (*name).to_owned()).collect();
        secrets.extend(
            self.extra_headers
                .values()
                .filter_map(|value| super::endpoint::header_env_name(value))
                .map(str::to_owned),
        );
        (secrets, plain.iter().map(|name| (*name).to_owned()).collect())
    }

    /// The provider's other credentials, read from `env` (see [`LlmConfig::credential_env_names`]).
    pub fn credentials(&self, env: &BTreeMap<String, String>) -> super::data::Credentials {
        let (secrets, plain) = self.credential_env_names();
        let mut credentials = super::data::Credentials::default();
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
        credentials.home = env
            .get("HOME")
            .filter(|home| !home.is_empty())
            .map(std::path::PathBuf::from);
        credentials
    }
}

/// Prices in US dollars per million tokens, as the configuration writes them (`llm.prices`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Default)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Prices {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cached_input_per_mtok: f64,
}
