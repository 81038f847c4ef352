//! Checks of a resolved configuration that serde cannot make: ranges, paths inside the
//! repository, globs, endpoints, what a provider needs, and the artifact root outside the
//! repository. Each error names the key and the layer its value came from.

use std::path::Path;

use super::{ConfigError, LlmConfig, MAX_FILE_BYTES, MAX_TIMEOUT_SECS, MAX_TOKENS, Resolved};
use crate::llm::ProviderKind;

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
    if crate::edit::glob::normalize_path(path).is_empty() {
        return Some(format!("{path:?} names no file"));
    }
    None
}

impl Resolved {
    /// Gitignore-style globs of repository paths: `/` separators, no `..`, naming something.
    fn validate_globs(&self, key: &str, globs: &[String]) -> Result<(), ConfigError> {
        for glob in globs {
            if glob.contains('\\') || glob.split('/').any(|part| part == "..") {
                return Err(self.bad(
                    key,
                    format!("{glob:?}: give globs with `/` separators and no `..` component"),
                ));
            }
            if crate::edit::glob::normalize_glob(glob)
                .trim_matches('/')
                .is_empty()
            {
                return Err(self.bad(key, format!("{glob:?} names nothing")));
            }
        }
        Ok(())
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
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
        for (key, globs) in [("code", &config.code), ("tests", &config.tests)] {
            if let Some(globs) = globs {
                let bare: Vec<String> = globs
                    .iter()
                    .map(|glob| glob.strip_prefix('!').unwrap_or(glob).to_owned())
                    .collect();
                self.validate_globs(key, &bare)?;
                let rules = crate::edit::code::CodeRules {
                    code: globs.clone(),
                    ..Default::default()
                };
                if let Err(error) = rules.matcher() {
                    return Err(self.bad(key, error));
                }
            }
        }
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
            if crate::net::reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
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
                && crate::net::reqwest::header::HeaderValue::from_str(value).is_err()
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

    /// Checks what no setting of the environment can complete: a provider whose address is
    /// the file's to give (Azure's resource endpoint). `config` refuses it too.
    pub fn validate_provider_address(&self) -> Result<(), ConfigError> {
        let mut sections = vec![("llm", self.config.llm.clone())];
        if self.config.review.enabled || self.config.review.llm.is_some() {
            sections.push(("review.llm", self.review_llm()));
        }
        for (section, llm) in sections {
            if llm.provider == ProviderKind::Azure && llm.base_url.is_none() {
                return Err(self.bad(
                    &format!("{section}.base-url"),
                    "the azure provider needs the resource endpoint, e.g. https://NAME.openai.azure.com",
                ));
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
}
