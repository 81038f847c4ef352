//! Reading the configuration: the layers (defaults, the file, the base branch's security keys
//! on pull-request events, `BORK_*` variables, flags) merged with figment into one [`Config`],
//! with provenance, and the values read from the environment snapshot beside it (keys,
//! credentials, `DOCKER_HOST`, the push event, the setup job's egress).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use figment::value::{Dict, Map};
use figment::{Figment, Metadata, Profile, Provider};
use secrecy::SecretString;
use serde_json::Value;

use super::schema::merge_json;
use super::{CONFIG_PATH, Config, ConfigError, MAX_CONFIG_BYTES, Resolved, env_vars};

/// Values given on the command line: each (key path, value, flag as typed).
pub type FlagValues = Vec<(&'static str, Value, &'static str)>;

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

/// Keys that decide where secrets go, what runs with the repository, and what needs approval.
/// On pull-request events they come from the base branch's file, never from the checkout's.
pub const SECURITY_KEYS: &[&str] = &[
    "correctness-checker",
    "edits-require-approval",
    "judge-files",
    "judge-files-exempt",
    "code",
    "tests",
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
        let region = config
            .llm
            .region
            .clone()
            .or_else(|| env.get("AWS_REGION").filter(|region| !region.is_empty()).cloned())
            .or_else(|| {
                env.get("AWS_DEFAULT_REGION")
                    .filter(|region| !region.is_empty())
                    .cloned()
            });
        config.llm.model = config.llm.provider.default_model_in(region.as_deref());
    }
    let mut resolved = Resolved {
        review_api_key: None,
        llm_credentials: config.llm.credentials(env),
        review_llm_credentials: crate::llm::Credentials::default(),
        docker_host: env.get("DOCKER_HOST").filter(|host| !host.is_empty()).cloned(),
        docker_tls: docker_tls(env),
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
        *checker = crate::edit::glob::normalize_path(checker);
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
pub(super) fn model_is_default(figment: &Figment, key: &str) -> bool {
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

/// The Docker CLI's TLS client settings: with `DOCKER_TLS_VERIFY` set (non-empty), the folder of
/// `ca.pem`, `cert.pem` and `key.pem`: `DOCKER_CERT_PATH`, else `~/.docker`.
fn docker_tls(env: &BTreeMap<String, String>) -> Option<std::path::PathBuf> {
    env.get("DOCKER_TLS_VERIFY").filter(|value| !value.is_empty())?;
    let folder = match env.get("DOCKER_CERT_PATH").filter(|path| !path.is_empty()) {
        Some(path) => std::path::PathBuf::from(path),
        None => std::path::PathBuf::from(env.get("HOME").map(String::as_str).unwrap_or("")).join(".docker"),
    };
    Some(folder)
}
