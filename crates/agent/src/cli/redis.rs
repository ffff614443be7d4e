//! The principal's Redis-proxy flags (names, defaults and environment variables as the peer's
//! cmd/argocd-agent/principal.go) and the TLS they configure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};

use argocd_pull_principal::redis_proxy::{DEFAULT_LISTEN, RedisProxyConfig, UpstreamTls};

#[derive(clap::Args, Debug, Clone)]
pub struct RedisProxyArgs {
    /// Disable the local Redis proxy.
    #[arg(long = "disable-redis-proxy", env = "ARGOCD_PRINCIPAL_DISABLE_REDIS_PROXY", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub disable_redis_proxy: bool,
    /// Where the Redis proxy listens (the peer always uses 0.0.0.0:6379).
    #[arg(
        long = "redis-proxy-listen-address",
        env = "ARGOCD_PRINCIPAL_REDIS_PROXY_LISTEN_ADDRESS",
        default_value = DEFAULT_LISTEN
    )]
    pub redis_proxy_listen: SocketAddr,
    /// Enable TLS for Redis connections (Argo CD → proxy, and proxy → Redis).
    #[arg(long = "redis-tls-enabled", env = "ARGOCD_PRINCIPAL_REDIS_TLS_ENABLED", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub redis_tls_enabled: bool,
    /// Path to TLS certificate for Redis proxy server.
    #[arg(
        long = "redis-proxy-server-tls-cert",
        env = "ARGOCD_PRINCIPAL_REDIS_PROXY_SERVER_TLS_CERT_PATH"
    )]
    pub redis_proxy_server_tls_cert: Option<PathBuf>,
    /// Path to TLS private key for Redis proxy server.
    #[arg(
        long = "redis-proxy-server-tls-key",
        env = "ARGOCD_PRINCIPAL_REDIS_PROXY_SERVER_TLS_KEY_PATH"
    )]
    pub redis_proxy_server_tls_key: Option<PathBuf>,
    /// Secret name containing TLS certificate and key for Redis proxy server.
    #[arg(
        long = "redis-proxy-server-tls-secret-name",
        env = "ARGOCD_PRINCIPAL_REDIS_PROXY_SERVER_TLS_SECRET_NAME",
        default_value = "argocd-redis-proxy-tls"
    )]
    pub redis_proxy_server_tls_secret_name: String,
    /// Path to CA certificate for verifying Redis TLS certificate.
    #[arg(long = "redis-ca-path", env = "ARGOCD_PRINCIPAL_REDIS_CA_PATH")]
    pub redis_ca_path: Option<PathBuf>,
    /// Secret name containing CA certificate for verifying Redis TLS certificate.
    #[arg(
        long = "redis-ca-secret-name",
        env = "ARGOCD_PRINCIPAL_REDIS_CA_SECRET_NAME",
        default_value = "argocd-redis-tls"
    )]
    pub redis_ca_secret_name: String,
    /// INSECURE: Do not verify Redis TLS certificate.
    #[arg(long = "redis-tls-insecure", env = "ARGOCD_PRINCIPAL_REDIS_TLS_INSECURE", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub redis_tls_insecure: bool,
}

/// The agent's TLS flags for its local Redis (the peer's cmd/argocd-agent/agent.go).
#[derive(clap::Args, Debug, Clone)]
pub struct AgentRedisTlsArgs {
    /// Enable TLS for Redis connections.
    #[arg(long = "redis-tls-enabled", env = "ARGOCD_AGENT_REDIS_TLS_ENABLED", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub redis_tls_enabled: bool,
    /// Path to CA certificate for Redis TLS (for local development).
    #[arg(long = "redis-tls-ca-path", env = "ARGOCD_AGENT_REDIS_TLS_CA_PATH")]
    pub redis_tls_ca_path: Option<PathBuf>,
    /// Secret name containing CA certificate for Redis TLS (for production deployment).
    #[arg(
        long = "redis-tls-ca-secret-name",
        env = "ARGOCD_AGENT_REDIS_TLS_CA_SECRET_NAME",
        default_value = "argocd-redis-tls"
    )]
    pub redis_tls_ca_secret_name: String,
    /// INSECURE: Do not verify Redis TLS certificate.
    #[arg(long = "redis-tls-insecure", env = "ARGOCD_AGENT_REDIS_TLS_INSECURE", action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value_t = false)]
    pub redis_tls_insecure: bool,
}

/// TLS of the agent's local Redis connections (`None`: plain TCP); one mode only, as the peer.
pub async fn agent_tls(
    a: &AgentRedisTlsArgs,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<Option<argocd_pull_spoke::LocalRedisTls>> {
    use argocd_pull_spoke::LocalRedisTls;
    if !a.redis_tls_enabled {
        return Ok(None);
    }
    let secret_given = a.redis_tls_ca_secret_name != "argocd-redis-tls";
    let modes = [
        a.redis_tls_insecure,
        a.redis_tls_ca_path.is_some(),
        secret_given,
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        bail!(
            "Only one Redis TLS mode can be specified: --redis-tls-insecure, --redis-tls-ca-path, or --redis-tls-ca-secret-name"
        );
    }
    if a.redis_tls_insecure {
        tracing::warn!("INSECURE: Redis client not verifying Redis TLS certificate");
        return Ok(Some(LocalRedisTls::Insecure));
    }
    let ca = match (&a.redis_tls_ca_path, client) {
        (Some(p), _) => argocd_pull_agent_core::settings::read(p)?,
        (None, Some(kube)) => argocd_pull_agent_core::settings::ca_from_secret(
            kube,
            namespace,
            &a.redis_tls_ca_secret_name,
            &["ca.crt"],
        )
        .await
        .context("loading the Redis TLS CA certificate")?,
        (None, None) => bail!(
            "redis TLS enabled but no CA certificate configured for Redis client: use --redis-tls-ca-path, --redis-tls-ca-secret-name, or --redis-tls-insecure"
        ),
    };
    argocd_pull_agent_core::tls::parse_certs(&ca).context("Redis TLS CA certificate")?;
    Ok(Some(LocalRedisTls::Ca(ca)))
}

/// Accepts any server certificate (`--redis-tls-insecure`), still checking handshake signatures.
#[derive(Debug)]
struct Insecure(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Insecure {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &rustls::pki_types::CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The Redis proxy's configuration (`None` with `--disable-redis-proxy`). Bad flag combinations
/// fail here, before anything listens.
pub async fn config(
    a: &RedisProxyArgs,
    upstream: &str,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<Option<RedisProxyConfig>> {
    if a.disable_redis_proxy {
        return Ok(None);
    }
    let mut cfg = RedisProxyConfig::new(a.redis_proxy_listen, upstream);
    if !a.redis_tls_enabled {
        return Ok(Some(cfg));
    }
    let provider = argocd_pull_agent_core::tls::provider();
    // the proxy's server certificate (Argo CD → proxy)
    let (cert, key) = match (
        &a.redis_proxy_server_tls_cert,
        &a.redis_proxy_server_tls_key,
    ) {
        (Some(c), Some(k)) => (
            argocd_pull_agent_core::settings::read(c)?,
            argocd_pull_agent_core::settings::read(k)?,
        ),
        (None, None) => {
            let Some(kube) = client else {
                bail!(
                    "--redis-tls-enabled needs the Redis proxy's certificate: give --redis-proxy-server-tls-cert and --redis-proxy-server-tls-key, or run with a Kubernetes client to read Secret {:?}",
                    a.redis_proxy_server_tls_secret_name
                );
            };
            argocd_pull_agent_core::settings::tls_from_secret(
                kube,
                namespace,
                &a.redis_proxy_server_tls_secret_name,
            )
            .await
            .context("loading the Redis proxy server TLS certificate")?
        }
        _ => bail!(
            "Both --redis-proxy-server-tls-cert and --redis-proxy-server-tls-key have to be given"
        ),
    };
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            argocd_pull_agent_core::tls::parse_certs(&cert)
                .context("Redis proxy server certificate")?,
            argocd_pull_agent_core::tls::parse_key(&key).context("Redis proxy server key")?,
        )
        .context("Redis proxy server certificate/key")?;
    cfg.server_tls = Some(Arc::new(server));
    // proxy → hub Redis: exactly one mode, as the peer
    let secret_given = a.redis_ca_secret_name != "argocd-redis-tls";
    let modes = [
        a.redis_tls_insecure,
        a.redis_ca_path.is_some(),
        secret_given,
    ];
    if modes.iter().filter(|m| **m).count() > 1 {
        bail!(
            "Only one Redis TLS mode can be specified: --redis-tls-insecure, --redis-ca-path, or --redis-ca-secret-name"
        );
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let client_cfg = if a.redis_tls_insecure {
        tracing::warn!("INSECURE: Not verifying Redis TLS certificate");
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Insecure(provider)))
            .with_no_client_auth()
    } else {
        let ca = match (&a.redis_ca_path, client) {
            (Some(p), _) => argocd_pull_agent_core::settings::read(p)?,
            (None, Some(kube)) => argocd_pull_agent_core::settings::ca_from_secret(
                kube,
                namespace,
                &a.redis_ca_secret_name,
                &["ca.crt"],
            )
            .await
            .context("loading the Redis CA certificate")?,
            (None, None) => bail!(
                "redis TLS enabled but no CA certificate configured for Redis proxy upstream: use --redis-ca-path, --redis-ca-secret-name, or --redis-tls-insecure"
            ),
        };
        let mut roots = rustls::RootCertStore::empty();
        for c in argocd_pull_agent_core::tls::parse_certs(&ca).context("Redis CA certificate")? {
            roots.add(c).context("Redis CA certificate")?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let host = upstream
        .rsplit_once(':')
        .map(|(h, _)| h)
        .unwrap_or(upstream)
        .trim_matches(['[', ']']);
    cfg.upstream_tls = Some(UpstreamTls {
        config: Arc::new(client_cfg),
        server_name: host.to_string(),
    });
    Ok(Some(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        r: RedisProxyArgs,
    }

    fn parse(args: &[&str]) -> RedisProxyArgs {
        T::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap()
            .r
    }

    #[tokio::test]
    async fn flags_and_defaults_as_the_peer() {
        let a = parse(&[]);
        assert!(!a.disable_redis_proxy && !a.redis_tls_enabled && !a.redis_tls_insecure);
        assert_eq!(a.redis_proxy_listen.to_string(), "0.0.0.0:6379");
        assert_eq!(
            a.redis_proxy_server_tls_secret_name,
            "argocd-redis-proxy-tls"
        );
        assert_eq!(a.redis_ca_secret_name, "argocd-redis-tls");
        let c = config(&a, "argocd-redis:6379", None, "argocd")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(c.upstream, "argocd-redis:6379");
        assert_eq!(c.timeout, std::time::Duration::from_secs(60));
        assert!(c.server_tls.is_none() && c.upstream_tls.is_none());
        assert!(
            config(&parse(&["--disable-redis-proxy"]), "x:1", None, "argocd")
                .await
                .unwrap()
                .is_none()
        );
    }

    #[tokio::test]
    async fn bad_tls_combinations_are_refused_with_the_fix() {
        let e = config(
            &parse(&["--redis-tls-enabled", "--redis-proxy-server-tls-cert=/x"]),
            "r:6379",
            None,
            "argocd",
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("Both --redis-proxy-server-tls-cert and --redis-proxy-server-tls-key"),
            "{e}"
        );
        let e = config(&parse(&["--redis-tls-enabled"]), "r:6379", None, "argocd")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("--redis-proxy-server-tls-cert"), "{e}");
    }
}
