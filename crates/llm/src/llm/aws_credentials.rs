//! Bedrock's AWS credentials: the standard chain, in AWS's order.
//!
//! 1. The environment: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`),
//!    read once with the other secrets (see `bedrock::AwsAuth`).
//! 2. The shared config and credentials files (`AWS_PROFILE`, `AWS_CONFIG_FILE`,
//!    `AWS_SHARED_CREDENTIALS_FILE`): static keys, `credential_process`, IAM Identity Center
//!    (SSO, from the token `aws sso login` cached), `role_arn` with a source profile.
//! 3. Web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (GitHub's OIDC token as
//!    `aws-actions/configure-aws-credentials` or EKS's IRSA write it), exchanged at STS with
//!    `AssumeRoleWithWebIdentity` by the AWS SDK's STS client (`aws-sdk-sts`, the one `aws-config`
//!    uses), at the regional endpoint or `llm.sts-url` (the client's endpoint override). The token
//!    file is read through `safe_fs` (a regular file, bounded) and trimmed.
//! 4. Container credentials: ECS and EKS Pod Identity (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`
//!    or `_FULL_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]`).
//! 5. EC2's instance metadata, IMDSv2 (`AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! Steps 2, 4 and 5 are `aws-config`'s own providers. Their requests and STS's go through
//! bork-ci's HTTP client (`net`), so no second TLS stack is linked. Plain-HTTP metadata endpoints
//! are reached without a proxy, as AWS's SDKs do.
//!
//! Not `aws-config`'s `WebIdentityTokenCredentialsProvider`: its STS endpoint can be moved only
//! through the process environment (`AWS_ENDPOINT_URL_STS`), not by `llm.sts-url`, and it reads
//! the token file as it is, unbounded and untrimmed.

use std::time::{Duration, SystemTime};

use aws_config::ecs::EcsCredentialsProvider;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::meta::credentials::CredentialsProviderChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials as AwsCredentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, ProvideCredentials, future};
use aws_sdk_sts::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use bork_ci_core::net::reqwest::Client;
use secrecy::{ExposeSecret, SecretString};

/// Largest answer a credential endpoint may send.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Longest one credential request may take when the provider sets no timeout.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest web identity token file read.
const MAX_TOKEN_BYTES: u64 = 64 * 1024;

/// Web identity settings from the environment.
#[derive(Debug, Clone)]
pub(super) struct WebIdentity {
    pub(super) token_file: String,
    pub(super) role_arn: String,
    pub(super) session_name: String,
    /// `llm.sts-url`; `None`: STS's regional endpoint, `https://sts.{region}.amazonaws.com`.
    pub(super) sts_url: Option<String>,
}

/// Every source after the environment, tried in order.
#[derive(Debug)]
pub(super) struct Chain {
    chain: CredentialsProviderChain,
}

impl Chain {
    pub(super) fn new(client: &Client, region: &str, web_identity: Option<WebIdentity>) -> Self {
        let http = ReqwestHttp {
            client: client.clone(),
            direct: bork_ci_core::net::client_builder().no_proxy().build().ok(),
        };
        let config = ProviderConfig::default()
            .with_http_client(http)
            .with_region(Some(aws_config::Region::new(region.to_owned())));
        let mut chain = CredentialsProviderChain::first_try(
            "Profile",
            ProfileFileCredentialsProvider::builder()
                .configure(&config)
                .build(),
        );
        if let Some(identity) = web_identity {
            chain = chain.or_else(
                "WebIdentityToken",
                WebIdentityProvider::new(client, region, identity),
            );
        }
        let chain = chain
            .or_else(
                "EcsContainer",
                EcsCredentialsProvider::builder().configure(&config).build(),
            )
            .or_else(
                "Ec2InstanceMetadata",
                ImdsCredentialsProvider::builder().configure(&config).build(),
            );
        Self { chain }
    }

    /// Credentials from the first source that has them, and when they expire.
    pub(super) async fn credentials(&self) -> Result<AwsCredentials, String> {
        self.chain
            .provide_credentials()
            .await
            .map_err(|error| match error {
                CredentialsError::CredentialsNotLoaded(_) => "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE, with keys, SSO or credential_process), AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, or run where ECS, EKS or EC2 provide them".to_owned(),
                other => format!("getting AWS credentials: {}", super::data::error_chain(&other)),
            })
    }
}

/// Largest shared config or credentials file read.
const MAX_PROFILE_BYTES: u64 = 1024 * 1024;

/// A shared config or credentials file, when present, must be a small regular file: `aws-config`
/// reads it with a plain read, which a FIFO would block.
pub(super) fn check_profile_file(file: &std::path::Path) -> Result<(), String> {
    match std::fs::symlink_metadata(file) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        _ => bork_ci_core::safe_fs::read_regular(file, MAX_PROFILE_BYTES)
            .map(drop)
            .map_err(|error| format!("reading the AWS shared file {}: {error}", file.display())),
    }
}

/// `AssumeRoleWithWebIdentity` through the SDK's STS client, with a token read through
/// `safe_fs`.
#[derive(Debug)]
struct WebIdentityProvider {
    identity: WebIdentity,
    sts: aws_sdk_sts::Client,
    /// Where the exchange goes, as shown in messages.
    shown: String,
}

impl WebIdentityProvider {
    fn new(client: &Client, region: &str, identity: WebIdentity) -> Self {
        // STS is reached like the model: through the configured proxy, if any.
        let http = ReqwestHttp {
            client: client.clone(),
            direct: None,
        };
        let mut config = aws_sdk_sts::Config::builder()
            .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
            .region(aws_sdk_sts::config::Region::new(region.to_owned()))
            .http_client(http)
            .sleep_impl(TokioSleep);
        let shown = match &identity.sts_url {
            Some(url) => {
                config = config.endpoint_url(url.clone());
                match bork_ci_core::net::reqwest::Url::parse(url) {
                    Ok(url) => super::address::shown_url(&url),
                    Err(_) => "llm.sts-url".to_owned(),
                }
            }
            None => format!("STS's endpoint in {region}"),
        };
        Self {
            identity,
            sts: aws_sdk_sts::Client::from_conf(config.build()),
            shown,
        }
    }

    async fn assume_role(&self) -> provider::Result {
        let identity = &self.identity;
        let fail = |message: String| CredentialsError::provider_error(StsError(message));
        let bytes =
            bork_ci_core::safe_fs::read_regular(std::path::Path::new(&identity.token_file), MAX_TOKEN_BYTES)
                .map_err(|error| {
                    fail(format!(
                        "reading the web identity token from {} (AWS_WEB_IDENTITY_TOKEN_FILE): {error}",
                        identity.token_file
                    ))
                })?;
        let token = SecretString::from(String::from_utf8_lossy(&bytes).trim().to_owned());
        if token.expose_secret().is_empty() {
            return Err(fail(format!(
                "the web identity token file {} (AWS_WEB_IDENTITY_TOKEN_FILE) is empty",
                identity.token_file
            )));
        }
        let clean = |text: String| text.replace(token.expose_secret(), "[redacted]");
        let shown = &self.shown;
        let answer = self
            .sts
            .assume_role_with_web_identity()
            .role_arn(&identity.role_arn)
            .role_session_name(&identity.session_name)
            .web_identity_token(token.expose_secret())
            .send()
            .await
            .map_err(|error| fail(clean(sts_failure(shown, &error))))?;
        let credentials = answer.credentials.ok_or_else(|| {
            fail(format!(
                "AssumeRoleWithWebIdentity at {shown}: the answer holds no credentials"
            ))
        })?;
        let expiry = SystemTime::try_from(credentials.expiration)
            .unwrap_or_else(|_| SystemTime::now() + Duration::from_secs(900));
        Ok(AwsCredentials::new(
            credentials.access_key_id,
            credentials.secret_access_key,
            Some(credentials.session_token),
            Some(expiry),
            "WebIdentityToken",
        ))
    }
}

impl ProvideCredentials for WebIdentityProvider {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(self.assume_role())
    }
}

/// What a failed `AssumeRoleWithWebIdentity` says: STS's status, code and message when it
/// answered, else why no answer came (never the request, which holds the token).
fn sts_failure<E>(shown: &str, error: &SdkError<E, HttpResponse>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let call = format!("AssumeRoleWithWebIdentity at {shown}");
    match error {
        SdkError::ServiceError(answer) => {
            let service = answer.err();
            format!(
                "{call}: HTTP {}: {}: {}",
                answer.raw().status().as_u16(),
                service.code().unwrap_or("no error code"),
                service.message().map_or_else(
                    || "no message".to_owned(),
                    |text| bork_ci_core::untrusted::excerpt(text, 300)
                )
            )
        }
        other => format!("{call}: {}", super::data::error_chain(other)),
    }
}

/// A message from STS, with the token never in it.
#[derive(Debug)]
struct StsError(String);

impl std::fmt::Display for StsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StsError {}

/// The SDK's sleep (retry backoff, timeouts) on tokio.
#[derive(Debug, Clone, Copy)]
struct TokioSleep;

impl aws_sdk_sts::config::AsyncSleep for TokioSleep {
    fn sleep(&self, duration: Duration) -> aws_sdk_sts::config::Sleep {
        aws_sdk_sts::config::Sleep::new(tokio::time::sleep(duration))
    }
}

/// `aws-config`'s HTTP client trait over bork-ci's `reqwest` clients.
#[derive(Debug, Clone)]
struct ReqwestHttp {
    client: Client,
    /// For plain-HTTP metadata endpoints (IMDS, container credentials): never proxied.
    direct: Option<Client>,
}

impl HttpClient for ReqwestHttp {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let timeout = match (settings.connect_timeout(), settings.read_timeout()) {
            (None, None) => REQUEST_TIMEOUT,
            (connect, read) => connect.unwrap_or_default() + read.unwrap_or(REQUEST_TIMEOUT),
        };
        SharedHttpConnector::new(ReqwestConnector {
            http: self.clone(),
            timeout,
        })
    }
}

#[derive(Debug)]
struct ReqwestConnector {
    http: ReqwestHttp,
    timeout: Duration,
}

fn connector_error(error: impl std::error::Error + Send + Sync + 'static) -> ConnectorError {
    ConnectorError::other(Box::new(error), None)
}

impl HttpConnector for ReqwestConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let plain_http = request.uri().starts_with("http://");
        let client = match (&self.http.direct, plain_http) {
            (Some(direct), true) => direct.clone(),
            _ => self.http.client.clone(),
        };
        let timeout = self.timeout;
        HttpConnectorFuture::new(async move {
            let method = bork_ci_core::net::reqwest::Method::from_bytes(request.method().as_bytes())
                .map_err(connector_error)?;
            let mut builder = client.request(method, request.uri()).timeout(timeout);
            for (name, value) in request.headers() {
                builder = builder.header(name, value);
            }
            let body = request.body().bytes().map(<[u8]>::to_vec).unwrap_or_default();
            let mut response = builder.body(body).send().await.map_err(|error| {
                if error.is_timeout() {
                    ConnectorError::timeout(Box::new(error.without_url()))
                } else {
                    ConnectorError::io(Box::new(error.without_url()))
                }
            })?;
            let status = StatusCode::try_from(response.status().as_u16()).map_err(connector_error)?;
            let headers = response.headers().clone();
            let mut bytes = Vec::new();
            while let Some(chunk) = response
                .chunk()
                .await
                .map_err(|error| ConnectorError::io(Box::new(error.without_url())))?
            {
                if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                    return Err(ConnectorError::other(
                        format!("the credential endpoint's answer is larger than {MAX_ANSWER_BYTES} bytes")
                            .into(),
                        None,
                    ));
                }
                bytes.extend_from_slice(&chunk);
            }
            let mut answer = HttpResponse::new(status, SdkBody::from(bytes));
            for (name, value) in &headers {
                if let Ok(value) = value.to_str() {
                    answer
                        .headers_mut()
                        .append(name.as_str().to_owned(), value.to_owned());
                }
            }
            Ok(answer)
        })
    }
}
