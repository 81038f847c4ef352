//! Bedrock's AWS credentials: the standard chain, in AWS's order.
//!
//! 1. The environment: `AWS_ACCESS_KEY_ID` + `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`),
//!    read once with the other secrets (see `bedrock::AwsAuth`).
//! 2. The shared config and credentials files (`AWS_PROFILE`, `AWS_CONFIG_FILE`,
//!    `AWS_SHARED_CREDENTIALS_FILE`): static keys, `credential_process`, IAM Identity Center
//!    (SSO, from the token `aws sso login` cached), `role_arn` with a source profile.
//! 3. Web identity: `AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN` (GitHub's OIDC token as
//!    `aws-actions/configure-aws-credentials` or EKS's IRSA write it), exchanged at STS
//!    (`llm.sts-url` overrides the regional endpoint); the token file is read through `safe_fs`.
//! 4. Container credentials: ECS and EKS Pod Identity (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`
//!    or `_FULL_URI`, with `AWS_CONTAINER_AUTHORIZATION_TOKEN[_FILE]`).
//! 5. EC2's instance metadata, IMDSv2 (`AWS_EC2_METADATA_DISABLED=true` skips it).
//!
//! Steps 2, 4 and 5 are `aws-config`'s own providers; their requests go through bork-ci's HTTP
//! client (`net`), so no second TLS stack is linked. Plain-HTTP metadata endpoints are reached
//! without a proxy, as AWS's SDKs do.

use std::time::{Duration, SystemTime};

use aws_config::ecs::EcsCredentialsProvider;
use aws_config::imds::credentials::ImdsCredentialsProvider;
use aws_config::meta::credentials::CredentialsProviderChain;
use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::Credentials as AwsCredentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, ProvideCredentials, future};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use bork_ci_core::net::reqwest::{Client, Url};
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
    pub(super) sts_url: String,
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
                WebIdentityProvider {
                    client: client.clone(),
                    identity,
                },
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

/// `AssumeRoleWithWebIdentity` with a token read through `safe_fs`.
#[derive(Debug)]
struct WebIdentityProvider {
    client: Client,
    identity: WebIdentity,
}

impl ProvideCredentials for WebIdentityProvider {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        future::ProvideCredentials::new(async move {
            assume_role_with_web_identity(&self.client, &self.identity)
                .await
                .map_err(CredentialsError::provider_error)
        })
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

async fn assume_role_with_web_identity(client: &Client, identity: &WebIdentity) -> provider::Result {
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
    let body = super::address::form(&[
        ("Action", "AssumeRoleWithWebIdentity"),
        ("Version", "2011-06-15"),
        ("RoleArn", &identity.role_arn),
        ("RoleSessionName", &identity.session_name),
        ("WebIdentityToken", token.expose_secret()),
    ]);
    let url = Url::parse(&identity.sts_url).map_err(|error| {
        fail(format!(
            "llm.sts-url `{}` is not a URL: {error}",
            identity.sts_url
        ))
    })?;
    let shown = super::address::shown_url(&url);
    let clean = |text: String| text.replace(token.expose_secret(), "[redacted]");
    let response = client
        .post(url)
        .header(
            bork_ci_core::net::reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .timeout(REQUEST_TIMEOUT)
        .body(body)
        .send()
        .await
        .map_err(|error| fail(clean(format!("POST {shown}: {}", error.without_url()))))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|error| fail(clean(format!("POST {shown}: {}", error.without_url()))))?;
    if !status.is_success() {
        let code = xml_text(&text, "Code").unwrap_or_default();
        let message =
            xml_text(&text, "Message").unwrap_or_else(|| bork_ci_core::untrusted::excerpt(&text, 300));
        return Err(fail(clean(format!(
            "POST {shown} (AssumeRoleWithWebIdentity): HTTP {}: {code}: {message}",
            status.as_u16()
        ))));
    }
    let field = |tag: &str| {
        xml_text(&text, tag).ok_or_else(|| fail(format!("POST {shown}: the STS answer has no <{tag}>")))
    };
    let expiry = xml_text(&text, "Expiration")
        .and_then(|when| humantime::parse_rfc3339_weak(when.trim_end_matches('Z')).ok())
        .unwrap_or_else(|| SystemTime::now() + Duration::from_secs(900));
    Ok(AwsCredentials::new(
        field("AccessKeyId")?,
        field("SecretAccessKey")?,
        Some(field("SessionToken")?),
        Some(expiry),
        "WebIdentityToken",
    ))
}

/// The text of the first `<tag>…</tag>` in `xml`, entities decoded.
pub(super) fn xml_text(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(
        xml[start..end]
            .trim()
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sts_xml_fields() {
        let xml = "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIA1</AccessKeyId><SecretAccessKey>s&amp;k</SecretAccessKey></Credentials></AssumeRoleWithWebIdentityResult>";
        assert_eq!(xml_text(xml, "AccessKeyId").as_deref(), Some("ASIA1"));
        assert_eq!(xml_text(xml, "SecretAccessKey").as_deref(), Some("s&k"));
        assert_eq!(xml_text(xml, "SessionToken"), None);
    }
}
