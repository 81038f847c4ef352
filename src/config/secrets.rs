//! Which variables hold secrets (the keys, the providers' credentials, `${NAME}` extra headers,
//! the GitHub and Actions tokens) and what values must be masked: never handed to a checker or
//! a verifier, registered for redaction when the configuration is read.

use secrecy::SecretString;

use super::Resolved;

impl Resolved {
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
