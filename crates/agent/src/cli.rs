//! Command-line arguments and entry points for `argocd-pull principal|agent|pki`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::Mode;
use crate::agent::{Agent, AgentConfig};
use crate::metrics::Metrics;
use crate::principal::{Principal, PrincipalConfig};
use crate::store::{KubeStore, Store};
use crate::tls::TlsMaterial;
use argocd_pull_ops::CancellationToken;

fn read(p: &PathBuf) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("reading {}", p.display()))
}

/// `argocd-pull principal`
#[derive(clap::Args, Debug, Clone)]
pub struct PrincipalArgs {
    /// gRPC listen address.
    #[arg(
        long,
        env = "ARGOCD_PRINCIPAL_LISTEN_HOST_PORT",
        default_value = "0.0.0.0:8443"
    )]
    pub listen: SocketAddr,
    /// Server certificate (PEM).
    #[arg(long = "tls-cert", env = "ARGOCD_PRINCIPAL_TLS_SERVER_CERT_PATH")]
    pub tls_cert: PathBuf,
    /// Server key (PEM).
    #[arg(long = "tls-key", env = "ARGOCD_PRINCIPAL_TLS_SERVER_KEY_PATH")]
    pub tls_key: PathBuf,
    /// CA that signs agent client certificates (PEM).
    #[arg(
        long = "tls-client-ca",
        env = "ARGOCD_PRINCIPAL_TLS_SERVER_ROOT_CA_PATH"
    )]
    pub tls_client_ca: PathBuf,
    /// Allow TLS 1.2 (default: TLS 1.3 only).
    #[arg(
        long = "tls-allow-1.2",
        env = "ARGOCD_PRINCIPAL_TLS_ALLOW_12",
        default_value_t = false
    )]
    pub tls_allow_12: bool,
    /// Regex over the client certificate subject; the first capture group is the agent name.
    #[arg(long = "auth-mtls-identity-regex", env = "ARGOCD_PRINCIPAL_AUTH_MTLS_IDENTITY_REGEX", default_value = crate::tls::DEFAULT_IDENTITY_REGEX)]
    pub identity_regex: String,
    /// RSA PKCS#8 PEM key signing JWTs.
    #[arg(long = "jwt-key", env = "ARGOCD_PRINCIPAL_JWT_SECRET_PATH")]
    pub jwt_key: PathBuf,
    /// The principal's namespace.
    #[arg(long, env = "ARGOCD_PRINCIPAL_NAMESPACE", default_value = "argocd")]
    pub namespace: String,
    /// Largest event in bytes; larger ones are rejected with an error, never retried.
    #[arg(long = "max-event-size", env = "ARGOCD_PRINCIPAL_MAX_EVENT_SIZE", default_value_t = crate::DEFAULT_MAX_EVENT_SIZE)]
    pub max_event_size: usize,
    /// Per-agent send queue capacity (events); beyond it resources are deferred, never dropped.
    #[arg(long = "queue-capacity", env = "ARGOCD_PRINCIPAL_QUEUE_CAPACITY", default_value_t = crate::DEFAULT_QUEUE_CAPACITY)]
    pub queue_capacity: usize,
    /// Received events processed concurrently per agent.
    #[arg(long, env = "ARGOCD_PRINCIPAL_CONCURRENCY", default_value_t = crate::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// gzip-compress sent events.
    #[arg(
        long = "enable-compression",
        env = "ARGOCD_PRINCIPAL_ENABLE_COMPRESSION",
        default_value_t = false
    )]
    pub compression: bool,
    /// Metrics/health listen address.
    #[arg(
        long = "metrics-addr",
        env = "ARGOCD_PRINCIPAL_METRICS_ADDR",
        default_value = "0.0.0.0:8000"
    )]
    pub metrics_addr: SocketAddr,
}

/// `argocd-pull agent`
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Principal address (host:port).
    #[arg(long = "server-address", env = "ARGOCD_AGENT_REMOTE_SERVER")]
    pub server_address: String,
    /// Name in the principal's certificate (default: the host of --server-address).
    #[arg(long = "server-name", env = "ARGOCD_AGENT_REMOTE_SERVER_NAME")]
    pub server_name: Option<String>,
    /// Mode of operation.
    #[arg(
        long = "agent-mode",
        env = "ARGOCD_AGENT_MODE",
        value_enum,
        default_value = "managed"
    )]
    pub mode: Mode,
    /// Client certificate (PEM).
    #[arg(long = "tls-client-cert", env = "ARGOCD_AGENT_TLS_CLIENT_CERT_PATH")]
    pub tls_cert: PathBuf,
    /// Client key (PEM).
    #[arg(long = "tls-client-key", env = "ARGOCD_AGENT_TLS_CLIENT_KEY_PATH")]
    pub tls_key: PathBuf,
    /// CA of the principal's certificate (PEM).
    #[arg(long = "tls-root-ca-path", env = "ARGOCD_AGENT_TLS_ROOT_CA_PATH")]
    pub tls_ca: PathBuf,
    /// Allow TLS 1.2 (default: TLS 1.3 only).
    #[arg(
        long = "tls-allow-1.2",
        env = "ARGOCD_AGENT_TLS_ALLOW_12",
        default_value_t = false
    )]
    pub tls_allow_12: bool,
    /// Local Argo CD namespace.
    #[arg(long, env = "ARGOCD_AGENT_NAMESPACE", default_value = "argocd")]
    pub namespace: String,
    /// Largest event in bytes.
    #[arg(long = "max-event-size", env = "ARGOCD_AGENT_MAX_EVENT_SIZE", default_value_t = crate::DEFAULT_MAX_EVENT_SIZE)]
    pub max_event_size: usize,
    /// Send queue capacity (events).
    #[arg(long = "queue-capacity", env = "ARGOCD_AGENT_QUEUE_CAPACITY", default_value_t = crate::DEFAULT_QUEUE_CAPACITY)]
    pub queue_capacity: usize,
    /// gzip-compress sent events.
    #[arg(
        long = "enable-compression",
        env = "ARGOCD_AGENT_ENABLE_COMPRESSION",
        default_value_t = false
    )]
    pub compression: bool,
    /// HTTP/2 keepalive ping interval.
    #[arg(long = "keep-alive-ping-interval", env = "ARGOCD_AGENT_KEEP_ALIVE_PING_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub keepalive: Duration,
    /// Metrics/health listen address.
    #[arg(
        long = "metrics-addr",
        env = "ARGOCD_AGENT_METRICS_ADDR",
        default_value = "0.0.0.0:8181"
    )]
    pub metrics_addr: SocketAddr,
}

/// `argocd-pull pki`
#[derive(clap::Args, Debug, Clone)]
pub struct PkiArgs {
    /// Output directory.
    #[arg(long, env = "ARGOCD_PULL_PKI_DIR", default_value = "pki")]
    pub dir: PathBuf,
    /// Agent names (one client certificate each).
    #[arg(long = "agent", env = "ARGOCD_PULL_PKI_AGENTS", value_delimiter = ',')]
    pub agents: Vec<String>,
    /// Extra DNS names / IPs for the principal certificate.
    #[arg(long = "san", env = "ARGOCD_PULL_PKI_SANS", value_delimiter = ',')]
    pub sans: Vec<String>,
    /// Overwrite existing files.
    #[arg(long, default_value_t = false)]
    pub force: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid duration {s:?} (e.g. 30s, 500ms, 2m)"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("invalid duration unit in {s:?} (ms, s, m)")),
    }
}

/// Runs the principal against the current kube context until SIGTERM or Ctrl-C.
pub async fn run_principal(args: PrincipalArgs) -> anyhow::Result<()> {
    run_principal_until(args, None, argocd_pull_ops::shutdown::on_signal()).await
}

/// Runs the principal until `shutdown` is cancelled, then stops serving and drops every stream.
/// `store`: the hub backend (`None`: the current kube context).
pub async fn run_principal_until(
    args: PrincipalArgs,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = TlsMaterial {
        cert_pem: read(&args.tls_cert)?,
        key_pem: read(&args.tls_key)?,
        ca_pem: read(&args.tls_client_ca)?,
    };
    let jwt = String::from_utf8(read(&args.jwt_key)?).context("JWT key is not UTF-8 PEM")?;
    let mut cfg = PrincipalConfig::new(args.listen, tls, jwt);
    cfg.allow_tls12 = args.tls_allow_12;
    cfg.identity_regex = args.identity_regex;
    cfg.namespace = args.namespace;
    cfg.max_event_size = args.max_event_size;
    cfg.queue_capacity = args.queue_capacity;
    cfg.concurrency = args.concurrency;
    cfg.compression = args.compression;
    let store = store_or_current_context(store, "hub").await?;
    let metrics = Metrics::new("argocd_principal");
    let (maddr, admin) = metrics
        .serve_admin(args.metrics_addr, shutdown.clone())
        .await?;
    tracing::info!(%maddr, "principal metrics and health endpoints");
    let p = Principal::start(cfg, store, metrics).await?;
    shutdown.cancelled().await;
    tracing::info!("principal shutting down");
    p.shutdown().await;
    admin.await??;
    Ok(())
}

/// Runs an agent against the current kube context until SIGTERM or Ctrl-C.
pub async fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
    run_agent_until(args, None, argocd_pull_ops::shutdown::on_signal()).await
}

/// Runs an agent until `shutdown` is cancelled. `store`: the local backend (`None`: the current
/// kube context).
pub async fn run_agent_until(
    args: AgentArgs,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let tls = TlsMaterial {
        cert_pem: read(&args.tls_cert)?,
        key_pem: read(&args.tls_key)?,
        ca_pem: read(&args.tls_ca)?,
    };
    let addr = tokio::net::lookup_host(&args.server_address)
        .await
        .with_context(|| format!("resolving {}", args.server_address))?
        .next()
        .with_context(|| format!("{} resolves to no address", args.server_address))?;
    let mut cfg = AgentConfig::new(addr, tls, args.mode);
    cfg.server_name = args.server_name.unwrap_or_else(|| {
        args.server_address
            .rsplit_once(':')
            .map(|(h, _)| h.to_string())
            .unwrap_or(args.server_address.clone())
    });
    cfg.allow_tls12 = args.tls_allow_12;
    cfg.namespace = args.namespace;
    cfg.max_event_size = args.max_event_size;
    cfg.queue_capacity = args.queue_capacity;
    cfg.compression = args.compression;
    cfg.keepalive_interval = args.keepalive;
    let store = store_or_current_context(store, "local").await?;
    let metrics = Metrics::new("argocd_agent");
    let (maddr, admin) = metrics
        .serve_admin(args.metrics_addr, shutdown.clone())
        .await?;
    tracing::info!(%maddr, "agent metrics and health endpoints");
    let a = Agent::start(cfg, store, metrics).await?;
    shutdown.cancelled().await;
    tracing::info!("agent shutting down");
    a.shutdown().await;
    admin.await??;
    Ok(())
}

/// `store`, or the cluster of the current kube context (`KUBECONFIG`, then in-cluster).
async fn store_or_current_context(
    store: Option<Arc<dyn Store>>,
    which: &str,
) -> anyhow::Result<Arc<dyn Store>> {
    if let Some(s) = store {
        return Ok(s);
    }
    let client = kube::Client::try_default()
        .await
        .with_context(|| format!("connecting to the {which} cluster"))?;
    Ok(Arc::new(KubeStore::new(client)))
}

/// Creates a CA, the principal certificate, agent certificates and the JWT key.
pub async fn run_pki(args: PkiArgs) -> anyhow::Result<()> {
    let files = tokio::task::spawn_blocking(move || {
        crate::pki::write_local_pki(&args.dir, &args.agents, &args.sans, args.force)
    })
    .await??;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
