//! The one place bork-ci builds its HTTP clients (the model providers' and GitHub's).
//!
//! Every client resolves host names with hickory, a resolver written in Rust that reads
//! `/etc/resolv.conf` and `/etc/hosts` itself, and trusts only Mozilla's root store compiled into
//! the binary (`webpki-root-certs`). So a statically linked bork-ci behaves the same on a host and
//! in an empty (`FROM scratch`) container: no NSS modules, no certificate files, no libc resolver.
//! This module owns no request logic: callers add their own timeouts, headers and redirect policy.
//! `clippy.toml` forbids building a `reqwest` client anywhere else, and reqwest is a dependency of
//! this crate only: the others name its types through the re-export below.

/// The HTTP client crate, for the types callers name (requests, responses, errors, methods).
pub use reqwest;

/// A `reqwest` client builder with bork-ci's resolver, TLS provider and root store.
pub fn client_builder() -> reqwest::ClientBuilder {
    // The process-wide rustls provider; a second call is a no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
        .iter()
        .filter_map(|der| reqwest::Certificate::from_der(der).ok());
    #[expect(clippy::disallowed_methods, reason = "this is the one sanctioned constructor")]
    let builder = reqwest::Client::builder();
    builder.hickory_dns(true).tls_certs_only(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_root_store_is_not_empty_and_builds() {
        assert!(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() > 100);
        let roots = webpki_root_certs::TLS_SERVER_ROOT_CERTS
            .iter()
            .filter_map(|der| reqwest::Certificate::from_der(der).ok())
            .count();
        assert_eq!(roots, webpki_root_certs::TLS_SERVER_ROOT_CERTS.len());
        client_builder()
            .build()
            .expect("a client with the built-in roots");
    }
}
