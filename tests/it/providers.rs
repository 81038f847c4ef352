//! End-to-end runs of the `bork-ci` binary against fakes of the hosted endpoints on 127.0.0.1:
//! Azure OpenAI (deployment path, `api-version`, `api-key` or bearer), Google Vertex (Claude
//! through `rawPredict`, Gemini through the OpenAI-compatible endpoint, tokens from the
//! environment or a workload-identity file exchanged at a fake STS), AWS Bedrock (a Python fake
//! whose SigV4 checks are botocore's own, Converse whole and streamed as AWS event-stream frames,
//! and its STS), an Anthropic base URL ending in `/v1`, gateway headers and body fields, and errors
//! that name the full URL path.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::{Outcome, Repo, TestContext, app_repo, bork};

const ANSWER: &str = r#"{"create-or-update": {"src/app.txt": "DONE\n"}}"#;

/// A request a fake received.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

type Answer = dyn Fn(&Seen) -> ResponseTemplate + Send + Sync;

struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    answer: Box<Answer>,
}

impl Respond for Recorder {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let seen = Seen {
            path: request.url.path().to_owned(),
            query: request.url.query().map(str::to_owned),
            headers: request
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_ascii_lowercase(),
                        value.to_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
            body: request.body.clone(),
        };
        let response = (self.answer)(&seen);
        self.seen.lock().expect("lock").push(seen);
        response
    }
}

/// A fake endpoint answering every request with `answer` and recording it.
struct Fake {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    _server: MockServer,
}

impl Fake {
    async fn start(answer: impl Fn(&Seen) -> ResponseTemplate + Send + Sync + 'static) -> Self {
        let server = MockServer::start().await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        Mock::given(any())
            .respond_with(Recorder {
                seen: Arc::clone(&seen),
                answer: Box::new(answer),
            })
            .mount(&server)
            .await;
        Self {
            url: server.uri().trim_end_matches('/').to_owned(),
            seen,
            _server: server,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

/// A Chat Completions answer with `text`.
fn openai_answer(text: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": null},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132}
    }))
}

/// An Anthropic Messages answer with `text` as a text block.
fn anthropic_answer(text: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 120, "output_tokens": 12}
    }))
}

/// Azure's answer to an unknown deployment.
fn azure_not_found() -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(json!({"error": {
        "code": "DeploymentNotFound",
        "message": "The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."
    }}))
}

/// Runs `bork-ci run` on `repo` with `env` (the host's cloud credential variables never reach it:
/// the test context is hermetic).
async fn run(repo: &Repo, env: &[(&str, &str)]) -> Outcome {
    let mut context = TestContext::on(repo);
    context
        .env("BORK_LLM_MAX_RETRIES", "1")
        .env("BORK_LLM_TIMEOUT_SECS", "20");
    for (name, value) in env {
        context.env(name, value);
    }
    context.run_async(&[]).await
}

fn assert_converged(outcome: &Outcome, repo: &Repo) {
    assert_eq!(outcome.code, 0, "{}\n{}", outcome.stderr, outcome.report_text);
    assert_eq!(outcome.report["status"], "converged");
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_sends_the_deployment_path_api_version_and_api_key() {
    let fake = Fake::start(|_| openai_answer(ANSWER)).await;
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "azure", "model": "my-gpt4o", "base-url": "{}"}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("AZURE_OPENAI_API_KEY", "azure-key-0001")]).await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/openai/deployments/my-gpt4o/chat/completions");
    assert_eq!(seen[0].query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(seen[0].header("api-key"), Some("azure-key-0001"));
    assert_eq!(seen[0].header("authorization"), None);
    assert_eq!(seen[0].json()["messages"][0]["role"], "system");
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_bearer_mode_sends_the_entra_token() {
    let fake = Fake::start(|_| openai_answer(ANSWER)).await;
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "azure", "model": "dep", "base-url": "{}/", "auth": "bearer", "api-version": "2025-04-01-preview"}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("AZURE_OPENAI_AD_TOKEN", "eyJ0eXAiOiJKV1Qi.entra")]).await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    assert_eq!(seen[0].path, "/openai/deployments/dep/chat/completions");
    assert_eq!(seen[0].query.as_deref(), Some("api-version=2025-04-01-preview"));
    assert_eq!(
        seen[0].header("authorization"),
        Some("Bearer eyJ0eXAiOiJKV1Qi.entra")
    );
    assert_eq!(seen[0].header("api-key"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_404_names_the_full_url_path_but_no_key() {
    let fake = Fake::start(|_| azure_not_found()).await;
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "azure", "model": "nope", "base-url": "{}"}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("AZURE_OPENAI_API_KEY", "azure-key-0002")]).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let shown = format!("{}{}", outcome.stderr, outcome.report_text);
    assert!(
        shown.contains(&format!(
            "POST {}/openai/deployments/nope/chat/completions?api-version=2024-10-21",
            fake.url
        )),
        "{shown}"
    );
    assert!(
        shown.contains("HTTP 404") && shown.contains("DeploymentNotFound")
            || shown.contains("does not exist"),
        "{shown}"
    );
    assert!(!shown.contains("azure-key-0002"), "{shown}");
    assert_eq!(fake.seen().len(), 1, "a 404 is not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn anthropic_base_url_ending_in_v1_plain_strings_seed_warning_and_context_window() {
    let fake = Fake::start(|seen| {
        if seen.path == "/v1/messages" && seen.json().get("seed").is_none() {
            anthropic_answer(ANSWER)
        } else {
            ResponseTemplate::new(404).set_body_json(
                json!({"type": "error", "error": {"type": "not_found_error", "message": "Not found"}}),
            )
        }
    })
    .await;
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "anthropic", "model": "claude-x", "base-url": "{}/v1", "prompt-caching": false, "seed": 7, "context-window": 50}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("ANTHROPIC_API_KEY", "anthropic-key-01")]).await;
    assert_converged(&outcome, &repo);
    assert_eq!(
        outcome.stderr.matches("llm.seed is set").count(),
        1,
        "the seed warning comes once: {}",
        outcome.stderr
    );
    assert!(
        outcome.stderr.contains("llm.context-window"),
        "{}",
        outcome.stderr
    );
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/messages");
    let body = seen[0].json();
    assert!(body["system"].is_string(), "{body}");
    for message in body["messages"].as_array().expect("messages") {
        assert!(message["content"].is_string(), "{message}");
    }
    assert!(!String::from_utf8_lossy(&seen[0].body).contains("cache_control"));
}

#[tokio::test(flavor = "multi_thread")]
async fn extra_headers_and_body_arrive_and_the_header_secret_stays_out_of_outputs() {
    let fake = Fake::start(|_| openai_answer(ANSWER)).await;
    let secret = "gw-secret-value-7f3a9c";
    let config = format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "openai", "model": "local", "base-url": "{}/v1",
            "extra-headers": {{"X-Gateway-Token": "${{GW_TOKEN}}", "X-Team": "bork"}},
            "extra-body": {{"top_k": 20, "chat_template_kwargs": {{"enable_thinking": false}}}},
            "temperature": 0.2, "seed": 42}}}}"#,
        fake.url
    );
    let repo = app_repo(&config);
    let outcome = run(
        &repo,
        &[
            ("OPENAI_API_KEY", "sk-local-0001"),
            ("GW_TOKEN", secret),
            ("RUST_LOG", "trace"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("x-gateway-token"), Some(secret));
    assert_eq!(seen[0].header("x-team"), Some("bork"));
    let body = seen[0].json();
    assert_eq!(body["top_k"], 20);
    assert_eq!(body["chat_template_kwargs"]["enable_thinking"], false);
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["seed"], 42);
    for (place, text) in [
        ("stderr", &outcome.stderr),
        ("stdout", &outcome.stdout),
        ("report", &outcome.report_text),
    ] {
        assert!(!text.contains(secret), "{place} holds the header secret: {text}");
    }

    let mut command = bork();
    command
        .arg("config")
        .arg("--repo")
        .arg(repo.path())
        .env("GW_TOKEN", secret);
    let output = command.output().expect("config runs");
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{shown}");
    assert!(!shown.contains(secret), "{shown}");
    assert!(shown.contains("llm.extra-headers.X-Gateway-Token"), "{shown}");
    assert!(shown.contains("llm.credentials.GW_TOKEN = set"), "{shown}");
    assert!(shown.contains("llm.temperature"), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn extra_body_may_not_replace_the_messages() {
    let repo = app_repo(r#"{"llm": {"extra-body": {"messages": []}}}"#);
    let outcome = run(&repo, &[("OPENAI_API_KEY", "sk-x-0001")]).await;
    assert_eq!(outcome.code, 2);
    assert!(outcome.stderr.contains("llm.extra-body"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_header_variable_is_exit_two_before_any_request() {
    let fake = Fake::start(|_| openai_answer(ANSWER)).await;
    let repo = app_repo(&format!(
        r#"{{"llm": {{"base-url": "{}/v1", "extra-headers": {{"X-Token": "${{NOT_SET_ANYWHERE}}"}}}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("OPENAI_API_KEY", "sk-x-0001")]).await;
    assert_eq!(outcome.code, 2);
    assert!(
        outcome.stderr.contains("llm.extra-headers") && outcome.stderr.contains("NOT_SET_ANYWHERE"),
        "{}",
        outcome.stderr
    );
    assert!(fake.seen().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn vertex_without_region_or_project_is_exit_two_naming_the_key() {
    let repo =
        app_repo(r#"{"llm": {"provider": "vertex", "model": "claude-sonnet-4@20250514", "project": "p"}}"#);
    let outcome = run(&repo, &[("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.x")]).await;
    assert_eq!(outcome.code, 2);
    assert!(outcome.stderr.contains("llm.region"), "{}", outcome.stderr);
    let repo =
        app_repo(r#"{"llm": {"provider": "vertex", "model": "gemini-2.0-flash", "region": "global"}}"#);
    let outcome = run(&repo, &[("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.x")]).await;
    assert_eq!(outcome.code, 2);
    assert!(outcome.stderr.contains("llm.project"), "{}", outcome.stderr);
    let repo = app_repo(r#"{"llm": {"provider": "watsonx", "model": "m"}}"#);
    let outcome = run(&repo, &[]).await;
    assert_eq!(outcome.code, 2);
    assert!(outcome.stderr.contains("llm.provider"), "{}", outcome.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn vertex_claude_goes_through_raw_predict_with_the_access_token() {
    let fake = Fake::start(|_| anthropic_answer(ANSWER)).await;
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "vertex", "model": "claude-sonnet-4@20250514", "region": "us-east5", "project": "my-proj", "base-url": "{}"}}}}"#,
        fake.url
    ));
    let outcome = run(&repo, &[("GOOGLE_OAUTH_ACCESS_TOKEN", "ya29.fixed-token")]).await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1);
    // Streaming is on by default: Vertex streams Claude from `streamRawPredict` (this fake
    // answers whole, which bork-ci accepts).
    assert_eq!(
        seen[0].path,
        "/v1/projects/my-proj/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict"
    );
    assert_eq!(seen[0].json()["stream"], true);
    assert_eq!(seen[0].header("authorization"), Some("Bearer ya29.fixed-token"));
    let body = seen[0].json();
    assert_eq!(body["anthropic_version"], "vertex-2023-10-16");
    assert!(body.get("model").is_none(), "{body}");
    assert!(body["max_tokens"].is_u64());
    assert_eq!(seen[0].header("x-api-key"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn vertex_gemini_uses_the_openai_endpoint_with_a_workload_identity_token() {
    // Every source google-github-actions/auth and gcloud write: a file, GitHub's OIDC endpoint
    // (a URL with an Authorization header, the token in a JSON field `value`), and an
    // executable (Google's executable-sourced credentials protocol).
    for source in ["file", "url", "executable"] {
        vertex_with_workload_identity_from(source).await;
    }
}

async fn vertex_with_workload_identity_from(source: &str) {
    let fake = Fake::start(|seen| {
        if seen.path == "/oidc" {
            if seen.header("authorization") == Some("Bearer gh-request-token-77")
                && seen.query.as_deref().is_some_and(|query| query.contains("audience="))
            {
                ResponseTemplate::new(200).set_body_json(json!({"count": 1, "value": "oidc-subject-token-123"}))
            } else {
                ResponseTemplate::new(403).set_body_json(json!({"message": "bad request token"}))
            }
        } else if seen.path == "/sts/v1/token" {
            let form = String::from_utf8_lossy(&seen.body).into_owned();
            if form.contains("subject_token=oidc-subject-token-123")
                && form.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange")
            {
                ResponseTemplate::new(200).set_body_json(json!({
                    "access_token": "ya29.exchanged-token",
                    "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    "token_type": "Bearer", "expires_in": 3600
                }))
            } else {
                ResponseTemplate::new(400).set_body_json(json!({"error": "invalid_grant", "error_description": "bad subject token"}))
            }
        } else if seen.header("authorization") == Some("Bearer ya29.exchanged-token") {
            openai_answer(ANSWER)
        } else {
            ResponseTemplate::new(401).set_body_json(json!({"error": {"code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"}}))
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let subject = dir.path().join("oidc-token");
    std::fs::write(&subject, "oidc-subject-token-123\n").expect("write");
    let credentials = dir.path().join("external.json");
    let tool = dir.path().join("token-tool.sh");
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600;
    std::fs::write(
        &tool,
        format!(
            "#!/bin/sh\nprintf '%s' '{{\"version\":1,\"success\":true,\"token_type\":\"urn:ietf:params:oauth:token-type:jwt\",\"id_token\":\"oidc-subject-token-123\",\"expiration_time\":{expires}}}'\n"
        ),
    )
    .expect("write");
    std::fs::set_permissions(&tool, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let credential_source = match source {
        "file" => json!({"file": subject.display().to_string()}),
        "executable" => {
            json!({"executable": {"command": tool.display().to_string(), "timeout_millis": 5000}})
        }
        _ => json!({
            "url": format!("{}/oidc?api-version=2.0&audience=https%3A%2F%2Fiam.googleapis.com%2Fpool", fake.url),
            "headers": {"Authorization": "Bearer gh-request-token-77"},
            "format": {"type": "json", "subject_token_field_name": "value"}
        }),
    };
    std::fs::write(
        &credentials,
        json!({
            "type": "external_account",
            "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/gh",
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": format!("{}/sts/v1/token", fake.url),
            "credential_source": credential_source
        })
        .to_string(),
    )
    .expect("write");
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "vertex", "model": "gemini-2.0-flash", "region": "global", "base-url": "{}"}}}}"#,
        fake.url
    ));
    let outcome = run(
        &repo,
        &[
            (
                "GOOGLE_APPLICATION_CREDENTIALS",
                &credentials.display().to_string(),
            ),
            ("GOOGLE_CLOUD_PROJECT", "proj-from-env"),
            ("GOOGLE_EXTERNAL_ACCOUNT_ALLOW_EXECUTABLES", "1"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    let chat: Vec<&Seen> = seen
        .iter()
        .filter(|seen| !seen.path.starts_with("/sts") && seen.path != "/oidc")
        .collect();
    assert_eq!(chat.len(), 1, "{seen:?}");
    assert_eq!(
        chat[0].path,
        "/v1/projects/proj-from-env/locations/global/endpoints/openapi/chat/completions"
    );
    assert_eq!(chat[0].json()["model"], "google/gemini-2.0-flash");
    assert!(seen.iter().any(|seen| seen.path == "/sts/v1/token"));
    for text in [&outcome.stderr, &outcome.report_text] {
        assert!(!text.contains("ya29.exchanged-token") && !text.contains("oidc-subject-token-123"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn vertex_with_a_service_account_key_sends_a_jwt_signed_by_that_key() {
    // A key file from `gcloud iam service-accounts keys create`: Google's libraries sign a
    // self-signed JWT with the key (no token endpoint); the test checks its claims and verifies
    // its signature with openssl against the key's public half.
    let dir = tempfile::tempdir().expect("tempdir");
    let key = dir.path().join("key.pem");
    let public = dir.path().join("public.pem");
    for args in [
        vec![
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ],
        vec!["pkey", "-pubout", "-in"],
    ] {
        let mut command = Command::new("openssl");
        command.args(&args);
        if args[0] == "genpkey" {
            command.arg(&key);
        } else {
            command.arg(&key).arg("-out").arg(&public);
        }
        assert!(command.status().expect("openssl").success());
    }
    let fake = Fake::start(|seen| {
        let claims = seen
            .header("authorization")
            .and_then(|value| value.strip_prefix("Bearer "))
            .and_then(|jwt| jwt.split('.').nth(1))
            .and_then(|payload| {
                use base64::Engine as _;
                base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload).ok()
            })
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok());
        match claims {
            Some(claims)
                if claims["iss"] == "bork@proj.iam.gserviceaccount.com"
                    && claims["scope"]
                        .as_str()
                        .is_some_and(|scope| scope.contains("https://www.googleapis.com/auth/cloud-platform")) =>
            {
                openai_answer(ANSWER)
            }
            _ => ResponseTemplate::new(401).set_body_json(json!({"error": {"code": 401, "message": "Request had invalid authentication credentials.", "status": "UNAUTHENTICATED"}})),
        }
    })
    .await;
    let credentials = dir.path().join("sa.json");
    std::fs::write(
        &credentials,
        json!({
            "type": "service_account",
            "project_id": "proj",
            "private_key_id": "kid-1",
            "private_key": std::fs::read_to_string(&key).expect("key"),
            "client_email": "bork@proj.iam.gserviceaccount.com",
            "client_id": "1",
            "token_uri": format!("{}/token", fake.url),
        })
        .to_string(),
    )
    .expect("write");
    let repo = app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "vertex", "model": "gemini-2.0-flash", "region": "global", "project": "proj", "base-url": "{}"}}}}"#,
        fake.url
    ));
    let outcome = run(
        &repo,
        &[(
            "GOOGLE_APPLICATION_CREDENTIALS",
            &credentials.display().to_string(),
        )],
    )
    .await;
    assert_converged(&outcome, &repo);
    let seen = fake.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let jwt = seen[0]
        .header("authorization")
        .and_then(|value| value.strip_prefix("Bearer "))
        .expect("bearer")
        .to_owned();
    let (signed, signature) = jwt.rsplit_once('.').expect("jwt");
    use base64::Engine as _;
    std::fs::write(dir.path().join("signed"), signed).expect("write");
    std::fs::write(
        dir.path().join("signature"),
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(signature)
            .expect("signature"),
    )
    .expect("write");
    let verified = Command::new("openssl")
        .args(["dgst", "-sha256", "-verify"])
        .arg(&public)
        .arg("-signature")
        .arg(dir.path().join("signature"))
        .arg(dir.path().join("signed"))
        .output()
        .expect("openssl");
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    for text in [&outcome.stderr, &outcome.report_text] {
        assert!(!text.contains(&jwt) && !text.contains("PRIVATE KEY"));
    }
}

/// The Python fake Bedrock (botocore checks every signature).
struct FakeBedrock {
    url: String,
    log: std::path::PathBuf,
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for FakeBedrock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python that has botocore: `BORK_TEST_PYTHON`, else the venv `.ci/run` makes
/// (`~/.cache/bork-ci/venv-botocore`), else `python3`.
fn python() -> String {
    if let Ok(python) = std::env::var("BORK_TEST_PYTHON")
        && !python.is_empty()
    {
        return python;
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    cache
        .map(|cache| cache.join("bork-ci/venv-botocore/bin/python"))
        .filter(|venv| venv.exists())
        .map_or_else(|| "python3".to_owned(), |venv| venv.display().to_string())
}

impl FakeBedrock {
    fn start(config: Value) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = dir.path().join("config.json");
        std::fs::write(&config_path, config.to_string()).expect("write");
        let log = dir.path().join("log.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake_bedrock.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg(&config_path)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 with botocore runs the fake Bedrock");
        let mut port = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut port)
            .expect("the fake prints its port");
        let port: u16 = port
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port from the fake Bedrock (is botocore installed?): {port:?}"));
        Self {
            url: format!("http://127.0.0.1:{port}"),
            log,
            child,
            _dir: dir,
        }
    }

    fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }
}

fn bedrock_repo(fake: &FakeBedrock, extra: &str) -> Repo {
    app_repo(&format!(
        r#"{{"correctness-checker": "check.sh", "llm": {{"provider": "bedrock", "model": "anthropic.claude-3-5-sonnet-20240620-v1:0", "base-url": "{}"{extra}}}}}"#,
        fake.url
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_converse_signed_with_a_session_token_passes_botocore() {
    let fake = FakeBedrock::start(json!({
        "region": "eu-central-1",
        "keys": {"ASIATESTKEY0001": {"secret": "bedrock-secret-key-0001", "token": "session-token-0001"}},
        "answers": [ANSWER]
    }));
    let repo = bedrock_repo(&fake, r#", "stream": false"#);
    let outcome = run(
        &repo,
        &[
            ("AWS_REGION", "eu-central-1"),
            ("AWS_ACCESS_KEY_ID", "ASIATESTKEY0001"),
            ("AWS_SECRET_ACCESS_KEY", "bedrock-secret-key-0001"),
            ("AWS_SESSION_TOKEN", "session-token-0001"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["verdict"], "ok");
    assert_eq!(
        requests[0]["path"],
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"
    );
    assert_eq!(
        requests[0]["headers"]["x-amz-security-token"],
        "session-token-0001"
    );
    let body: Value = serde_json::from_str(requests[0]["body"].as_str().expect("body")).expect("json");
    assert!(body["inferenceConfig"]["maxTokens"].is_u64(), "{body}");
    assert!(body["messages"][0]["content"][0]["text"].is_string(), "{body}");
    assert!(
        body["toolConfig"]["toolChoice"]["tool"]["name"].is_string(),
        "{body}"
    );
    assert!(body.get("model").is_none());
    assert!(
        outcome.report["usage"]["input-tokens"].as_u64().unwrap_or(0) > 0,
        "{}",
        outcome.report_text
    );
    for text in [&outcome.stderr, &outcome.report_text] {
        assert!(!text.contains("bedrock-secret-key-0001") && !text.contains("session-token-0001"));
    }
}

/// Streamed (the default): the same body to `converse-stream`, signed for that path, and the
/// answer and its usage read from the event-stream frames.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_converse_stream_signed_with_a_session_token_passes_botocore() {
    let fake = FakeBedrock::start(json!({
        "region": "eu-central-1",
        "keys": {"ASIATESTKEY0004": {"secret": "bedrock-secret-key-0004", "token": "session-token-0004"}},
        "answers": [ANSWER]
    }));
    let repo = bedrock_repo(&fake, "");
    let outcome = run(
        &repo,
        &[
            ("AWS_REGION", "eu-central-1"),
            ("AWS_ACCESS_KEY_ID", "ASIATESTKEY0004"),
            ("AWS_SECRET_ACCESS_KEY", "bedrock-secret-key-0004"),
            ("AWS_SESSION_TOKEN", "session-token-0004"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["verdict"], "ok");
    assert_eq!(
        requests[0]["path"],
        "/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse-stream"
    );
    let body: Value = serde_json::from_str(requests[0]["body"].as_str().expect("body")).expect("json");
    assert!(
        body["toolConfig"]["toolChoice"]["tool"]["name"].is_string(),
        "{body}"
    );
    assert!(body.get("stream").is_none(), "{body}");
    assert!(
        outcome.report["usage"]["input-tokens"].as_u64().unwrap_or(0) > 0
            && outcome.report["usage"]["output-tokens"].as_u64().unwrap_or(0) > 0,
        "{}",
        outcome.report_text
    );
    for text in [&outcome.stderr, &outcome.report_text] {
        assert!(!text.contains("bedrock-secret-key-0004") && !text.contains("session-token-0004"));
    }
}

/// A server without `converse-stream` (HTTP 404) is asked `converse` instead, and the run goes
/// on without streaming.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_without_converse_stream_is_asked_whole() {
    let fake = FakeBedrock::start(json!({
        "region": "us-east-1",
        "keys": {"AKIATESTKEY0005": {"secret": "the-secret-0005", "token": null}},
        "answers": [ANSWER],
        "no_stream": true
    }));
    let repo = bedrock_repo(&fake, r#", "region": "us-east-1""#);
    let outcome = run(
        &repo,
        &[
            ("AWS_ACCESS_KEY_ID", "AKIATESTKEY0005"),
            ("AWS_SECRET_ACCESS_KEY", "the-secret-0005"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let operations: Vec<String> = fake
        .requests()
        .iter()
        .filter_map(|request| Some(request["path"].as_str()?.rsplit('/').next()?.to_owned()))
        .collect();
    assert_eq!(operations, ["converse-stream", "converse"]);
    assert!(
        outcome.stderr.contains("not streaming for the rest of the run"),
        "{}",
        outcome.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_wrong_secret_is_a_403_exit_two_without_retrying() {
    let fake = FakeBedrock::start(json!({
        "region": "us-east-1",
        "keys": {"AKIATESTKEY0002": {"secret": "the-right-secret-0002", "token": null}},
        "answers": [ANSWER]
    }));
    let repo = bedrock_repo(&fake, r#", "region": "us-east-1""#);
    let outcome = run(
        &repo,
        &[
            ("AWS_ACCESS_KEY_ID", "AKIATESTKEY0002"),
            ("AWS_SECRET_ACCESS_KEY", "a-wrong-secret-0002"),
        ],
    )
    .await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), 1, "a 403 is not retried: {requests:?}");
    assert_eq!(requests[0]["verdict"], "bad-signature");
    let shown = format!("{}{}", outcome.stderr, outcome.report_text);
    assert!(
        shown.contains("HTTP 403") && shown.contains("signature"),
        "{shown}"
    );
    assert!(
        shown.contains("/model/anthropic.claude-3-5-sonnet-20240620-v1%3A0/converse"),
        "{shown}"
    );
    assert!(!shown.contains("a-wrong-secret-0002"), "{shown}");
}

/// A Bedrock run whose credentials come from one source of AWS's standard chain, set up in
/// `home` by `env`; the fake grants that source's keys, and botocore checks the signature.
async fn bedrock_chain_run(kind: &str, fake: &FakeBedrock, home: &Path, env: &[(&str, &str)]) {
    let repo = bedrock_repo(fake, r#", "region": "us-east-1""#);
    let home_text = home.display().to_string();
    let mut all: Vec<(&str, &str)> = vec![("HOME", &home_text), ("AWS_EC2_METADATA_DISABLED", "true")];
    all.retain(|(name, _)| !env.iter().any(|(set, _)| set == name));
    all.extend_from_slice(env);
    let before = fake.requests().len();
    let outcome = run(&repo, &all).await;
    assert_converged(&outcome, &repo);
    let requests: Vec<Value> = fake.requests().into_iter().skip(before).collect();
    let converse: Vec<&Value> = requests
        .iter()
        .filter(|request| request["kind"] == "converse")
        .collect();
    assert_eq!(converse.len(), 1, "{requests:?}");
    assert_eq!(converse[0]["verdict"], "ok", "{requests:?}");
    if kind == "profile" {
        assert_eq!(converse[0]["headers"]["x-amz-security-token"], Value::Null);
    } else {
        assert_eq!(
            converse[0]["headers"]["x-amz-security-token"],
            format!("{kind}-chain-session"),
            "{requests:?}"
        );
    }
    for text in [&outcome.stderr, &outcome.report_text] {
        assert!(
            !text.contains(&format!("{kind}-chain-secret")) && !text.contains("profile-secret-0009"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_reads_every_source_of_the_standard_aws_chain() {
    // Profile with static keys (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE).
    let fake = FakeBedrock::start(json!({
        "region": "us-east-1",
        "keys": {"AKIAPROFILE0009": {"secret": "profile-secret-0009", "token": null}},
        "container_token": "ecs-authorization-token-7",
        "sso_access_token": "sso-cached-access-token-5",
        "answers": [ANSWER]
    }));
    let home = tempfile::tempdir().expect("tempdir");
    let aws = home.path().join(".aws");
    std::fs::create_dir_all(aws.join("sso/cache")).expect("mkdir");
    std::fs::write(
        aws.join("credentials"),
        "[default]\naws_access_key_id = AKIAWRONGDEFAULT\naws_secret_access_key = nope\n\n[bork]\naws_access_key_id = AKIAPROFILE0009\naws_secret_access_key = profile-secret-0009\n",
    )
    .expect("write");
    bedrock_chain_run("profile", &fake, home.path(), &[("AWS_PROFILE", "bork")]).await;

    // IAM Identity Center: a profile naming an SSO start URL, the token `aws sso login` cached
    // under ~/.aws/sso/cache/<sha1 of the start URL>.json, the portal at AWS_ENDPOINT_URL_SSO.
    let start_url = "https://bork-test.awsapps.com/start";
    std::fs::write(
        aws.join("config"),
        format!("[profile sso-dev]\nsso_start_url = {start_url}\nsso_region = us-east-1\nsso_account_id = 123456789012\nsso_role_name = BorkDeveloper\nregion = us-east-1\n"),
    )
    .expect("write");
    let digest = Command::new("sh")
        .arg("-c")
        .arg(format!("printf '%s' '{start_url}' | sha1sum | cut -d' ' -f1"))
        .output()
        .expect("sha1sum");
    let digest = String::from_utf8_lossy(&digest.stdout).trim().to_owned();
    std::fs::write(
        aws.join(format!("sso/cache/{digest}.json")),
        json!({"startUrl": start_url, "region": "us-east-1", "accessToken": "sso-cached-access-token-5", "expiresAt": "2099-01-01T00:00:00Z"}).to_string(),
    )
    .expect("write");
    bedrock_chain_run(
        "sso",
        &fake,
        home.path(),
        &[("AWS_PROFILE", "sso-dev"), ("AWS_ENDPOINT_URL_SSO", &fake.url)],
    )
    .await;
    let sso: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|request| request["kind"] == "sso")
        .collect();
    assert_eq!(sso.len(), 1, "{sso:?}");
    assert_eq!(sso[0]["query"]["role_name"][0], "BorkDeveloper");
    assert_eq!(sso[0]["query"]["account_id"][0], "123456789012");

    // ECS / EKS Pod Identity: a full URI on loopback with an authorization token.
    let empty_home = tempfile::tempdir().expect("tempdir");
    let ecs_uri = format!("{}/ecs-credentials", fake.url);
    bedrock_chain_run(
        "ecs",
        &fake,
        empty_home.path(),
        &[
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", &ecs_uri),
            ("AWS_CONTAINER_AUTHORIZATION_TOKEN", "ecs-authorization-token-7"),
        ],
    )
    .await;

    // EC2 instance metadata, IMDSv2: a session token first, then the role's credentials.
    let imds = format!("{}/", fake.url);
    bedrock_chain_run(
        "imds",
        &fake,
        empty_home.path(),
        &[
            ("AWS_EC2_METADATA_DISABLED", "false"),
            ("AWS_EC2_METADATA_SERVICE_ENDPOINT", &imds),
        ],
    )
    .await;
    let metadata: Vec<Value> = fake
        .requests()
        .into_iter()
        .filter(|request| request["kind"] == "imds")
        .collect();
    assert_eq!(metadata[0]["method"], "PUT", "{metadata:?}");
    assert!(
        metadata
            .iter()
            .filter(|request| request["method"] == "GET")
            .all(|request| request["session"] == "imds-session-token-1"),
        "{metadata:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_without_any_credentials_is_exit_two_naming_every_source() {
    let fake = FakeBedrock::start(json!({"region": "us-east-1", "keys": {}, "answers": [ANSWER]}));
    let home = tempfile::tempdir().expect("tempdir");
    let repo = bedrock_repo(&fake, r#", "region": "us-east-1""#);
    let home_text = home.path().display().to_string();
    let outcome = run(
        &repo,
        &[("HOME", &home_text), ("AWS_EC2_METADATA_DISABLED", "true")],
    )
    .await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("no AWS credentials") && outcome.stderr.contains("AWS_PROFILE"),
        "{}",
        outcome.stderr
    );
    assert!(fake.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn bedrock_web_identity_is_exchanged_at_sts_and_signs() {
    let fake = FakeBedrock::start(json!({
        "region": "us-west-2",
        "keys": {},
        "web_identity_token": "oidc-web-identity-jwt-0003",
        "answers": [ANSWER]
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "oidc-web-identity-jwt-0003\n").expect("write");
    let repo = bedrock_repo(&fake, &format!(r#", "sts-url": "{}/sts/""#, fake.url));
    let outcome = run(
        &repo,
        &[
            ("AWS_DEFAULT_REGION", "us-west-2"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &token.display().to_string()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/bork"),
        ],
    )
    .await;
    assert_converged(&outcome, &repo);
    let requests = fake.requests();
    assert!(
        requests.iter().any(|request| request["kind"] == "sts"),
        "{requests:?}"
    );
    let converse: Vec<&Value> = requests
        .iter()
        .filter(|request| request["kind"] == "converse")
        .collect();
    assert_eq!(converse.len(), 1, "{requests:?}");
    assert_eq!(converse[0]["verdict"], "ok");
    assert_eq!(
        converse[0]["headers"]["x-amz-security-token"],
        "web-identity-session-token"
    );
    assert!(!outcome.stderr.contains("oidc-web-identity-jwt-0003"));
}

/// A token STS refuses, and a token file that is not there: exit 2 with STS's words or what
/// could not be read, never the token.
#[tokio::test(flavor = "multi_thread")]
async fn bedrock_web_identity_failures_are_clear_and_hold_no_token() {
    let fake = FakeBedrock::start(json!({
        "region": "us-west-2",
        "keys": {},
        "web_identity_token": "the-expected-jwt-0006",
        "answers": [ANSWER]
    }));
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "a-refused-oidc-jwt-0006").expect("write");
    let repo = bedrock_repo(&fake, &format!(r#", "sts-url": "{}/sts/""#, fake.url));
    let env = |file: &Path| {
        vec![
            ("AWS_DEFAULT_REGION", "us-west-2".to_owned()),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", file.display().to_string()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/bork".to_owned()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
        ]
    };
    let refused = env(&token);
    let refused: Vec<(&str, &str)> = refused
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let outcome = run(&repo, &refused).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    let shown = format!("{}{}", outcome.stderr, outcome.report_text);
    assert!(
        shown.contains("AssumeRoleWithWebIdentity")
            && shown.contains("HTTP 400")
            && shown.contains("InvalidIdentityToken")
            && shown.contains("Couldn't retrieve verification key"),
        "{shown}"
    );
    assert!(!shown.contains("a-refused-oidc-jwt-0006"), "{shown}");
    assert!(
        fake.requests().iter().all(|request| request["kind"] == "sts"),
        "no model call without credentials"
    );

    let missing = env(&dir.path().join("no-such-token"));
    let missing: Vec<(&str, &str)> = missing
        .iter()
        .map(|(name, value)| (*name, value.as_str()))
        .collect();
    let outcome = run(&repo, &missing).await;
    assert_eq!(outcome.code, 2, "{}", outcome.stderr);
    assert!(
        outcome.stderr.contains("reading the web identity token")
            && outcome.stderr.contains("AWS_WEB_IDENTITY_TOKEN_FILE")
            && outcome.stderr.contains("No such file"),
        "{}",
        outcome.stderr
    );
}
