//! The resource proxy's settings and the peer's defaults.

use std::net::SocketAddr;
use std::time::Duration;

use argocd_pull_agent_core::tls::TlsMaterial;

/// The peer's listener address (principal/server.go `defaultResourceProxyListenerAddr`).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:9090";
/// The peer's `requestTimeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest request body accepted (it travels base64 in one event).
pub const DEFAULT_MAX_BODY: usize = 2 * 1024 * 1024;

/// Resource-proxy settings.
#[derive(Clone, Debug)]
pub struct ResourceProxyConfig {
    pub listen: SocketAddr,
    /// The proxy's server certificate and key, and the CA that signs callers' client certificates.
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    /// `--tls-ciphersuites` (`None`: every ring suite).
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
    /// How long a request waits for its agent (then 504).
    pub timeout: Duration,
    /// Largest request body (then 413).
    pub max_body: usize,
}

impl ResourceProxyConfig {
    pub fn new(listen: SocketAddr, tls: TlsMaterial) -> Self {
        Self {
            listen,
            tls,
            allow_tls12: false,
            cipher_suites: None,
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
        }
    }
}
