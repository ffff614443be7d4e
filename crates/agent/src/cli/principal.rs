//! `argocd-pull principal`: flags and env of argocd-agent's `principal` command.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::common::{self, IdentitySource, parse_duration, read};
use crate::metrics::Metrics;
use crate::principal::{Principal, PrincipalConfig};
use crate::store::Store;
use crate::tls::TlsMaterial;
use argocd_pull_ops::CancellationToken;

/// `argocd-pull principal`
#[derive(clap::Args, Debug, Clone)]
pub struct PrincipalArgs {
    /// Name of the host to listen on (empty: all interfaces).
    #[arg(
        long = "listen-host",
        env = "ARGOCD_PRINCIPAL_LISTEN_HOST",
        default_value = ""
    )]
    pub listen_host: String,
    /// Port the gRPC server will listen on.
    #[arg(
        long = "listen-port",
        env = "ARGOCD_PRINCIPAL_LISTEN_PORT",
        default_value_t = 8443
    )]
    pub listen_port: u16,
    /// Our previous release's listen address (host:port); overrides --listen-host/--listen-port.
    #[arg(
        long = "listen",
        env = "ARGOCD_PRINCIPAL_LISTEN_HOST_PORT",
        hide = true
    )]
    pub listen: Option<SocketAddr>,

    /// Secret holding the gRPC server certificate (kubernetes.io/tls), used without --tls-cert.
    #[arg(long = "tls-secret-name", env = "ARGOCD_PRINCIPAL_TLS_SECRET_NAME", default_value = common::SECRET_PRINCIPAL_TLS)]
    pub tls_secret_name: String,
    /// gRPC server certificate (PEM file).
    #[arg(long = "tls-cert", env = "ARGOCD_PRINCIPAL_TLS_SERVER_CERT_PATH")]
    pub tls_cert: Option<PathBuf>,
    /// gRPC server key (PEM file).
    #[arg(long = "tls-key", env = "ARGOCD_PRINCIPAL_TLS_SERVER_KEY_PATH")]
    pub tls_key: Option<PathBuf>,
    /// INSECURE: generate a one-time self-signed server certificate.
    #[arg(
        long = "insecure-tls-generate",
        env = "ARGOCD_PRINCIPAL_TLS_SERVER_ALLOW_GENERATE",
        default_value_t = false
    )]
    pub insecure_tls_generate: bool,
    /// Secret holding the CA that signs agent certificates (fields tls.crt / ca.crt), used
    /// without --root-ca-path.
    #[arg(long = "tls-ca-secret-name", env = "ARGOCD_PRINCIPAL_TLS_SERVER_ROOT_CA_SECRET_NAME", default_value = common::SECRET_CA)]
    pub tls_ca_secret_name: String,
    /// CA that signs agent client certificates (PEM file).
    #[arg(
        long = "root-ca-path",
        alias = "tls-client-ca",
        env = "ARGOCD_PRINCIPAL_TLS_SERVER_ROOT_CA_PATH"
    )]
    pub root_ca_path: Option<PathBuf>,
    /// Minimum TLS version (tls1.2, tls1.3).
    #[arg(
        long = "tls-min-version",
        env = "ARGOCD_PRINCIPAL_TLS_MIN_VERSION",
        default_value = "tls1.3"
    )]
    pub tls_min_version: String,
    /// Maximum TLS version (tls1.3; empty: the highest).
    #[arg(
        long = "tls-max-version",
        env = "ARGOCD_PRINCIPAL_TLS_MAX_VERSION",
        default_value = ""
    )]
    pub tls_max_version: String,
    /// Our previous release: allow TLS 1.2 (same as --tls-min-version tls1.2).
    #[arg(
        long = "tls-allow-1.2",
        env = "ARGOCD_PRINCIPAL_TLS_ALLOW_12",
        default_value_t = false,
        hide = true
    )]
    pub tls_allow_12: bool,
    /// Comma-separated list of TLS cipher suites to use, Go's names (`list` prints them and
    /// exits). Naming TLS 1.3 suites restricts TLS 1.3 too (Go cannot).
    #[arg(
        long = "tls-ciphersuites",
        env = "ARGOCD_PRINCIPAL_TLS_CIPHERSUITES",
        value_delimiter = ','
    )]
    pub tls_ciphersuites: Vec<String>,

    /// Authentication: mtls:subject:<regex> or mtls:uri:<regex>; the first capture group is the
    /// agent name.
    #[arg(
        long = "auth",
        env = "ARGOCD_PRINCIPAL_AUTH",
        default_value = "mtls:subject:CN=([^,]+)"
    )]
    pub auth: String,
    /// Our previous release's identity regex over the subject (same as --auth mtls:subject:<re>).
    #[arg(
        long = "auth-mtls-identity-regex",
        env = "ARGOCD_PRINCIPAL_AUTH_MTLS_IDENTITY_REGEX",
        hide = true
    )]
    pub identity_regex: Option<String>,

    /// Secret holding the JWT signing key (field jwt.key), used without --jwt-key.
    #[arg(long = "jwt-secret-name", env = "ARGOCD_PRINCIPAL_JWT_SECRET_NAME", default_value = common::SECRET_JWT)]
    pub jwt_secret_name: String,
    /// RSA PKCS#8 PEM key signing JWTs.
    #[arg(long = "jwt-key", env = "ARGOCD_PRINCIPAL_JWT_KEY_PATH")]
    pub jwt_key: Option<PathBuf>,
    /// Our previous release's env name for --jwt-key.
    #[arg(
        long = "jwt-secret-path",
        env = "ARGOCD_PRINCIPAL_JWT_SECRET_PATH",
        hide = true
    )]
    pub jwt_key_legacy: Option<PathBuf>,
    /// INSECURE: generate a one-time JWT signing key.
    #[arg(
        long = "insecure-jwt-generate",
        env = "ARGOCD_PRINCIPAL_JWT_ALLOW_GENERATE",
        default_value_t = false
    )]
    pub insecure_jwt_generate: bool,

    /// The principal's namespace (default: the pod's namespace, else argocd).
    #[arg(short = 'n', long, env = "ARGOCD_PRINCIPAL_NAMESPACE")]
    pub namespace: Option<String>,
    /// Path to a kubeconfig file to use.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Override the default kube context.
    #[arg(long)]
    pub kubecontext: Option<String>,

    /// Maximum gRPC message size in bytes (the largest event accepted or sent).
    #[arg(long = "grpc-max-message-size", alias = "max-event-size", env = "ARGOCD_PRINCIPAL_GRPC_MAX_MESSAGE_SIZE", default_value_t = common::DEFAULT_GRPC_MAX_MESSAGE_SIZE)]
    pub grpc_max_message_size: usize,
    /// Our previous release's env name for the size limit.
    #[arg(
        long = "max-event-size-legacy",
        env = "ARGOCD_PRINCIPAL_MAX_EVENT_SIZE",
        hide = true
    )]
    pub max_event_size_legacy: Option<usize>,
    /// Received events processed concurrently per agent (the peer's name; default: --concurrency).
    #[arg(long = "event-processors", env = "ARGOCD_PRINCIPAL_EVENT_PROCESSORS")]
    pub event_processors: Option<usize>,
    /// Received events processed concurrently per agent.
    #[arg(long, env = "ARGOCD_PRINCIPAL_CONCURRENCY", default_value_t = crate::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Per-agent send queue capacity (events); beyond it resources are deferred, never dropped.
    /// Default 10000, or the peer's ARGOCD_AGENT_SEND_QUEUE_SIZE.
    #[arg(long = "queue-capacity", env = "ARGOCD_PRINCIPAL_QUEUE_CAPACITY")]
    pub queue_capacity: Option<usize>,
    /// Version string reported to agents and required of them (the peer's rule: string equality).
    /// Set it to the argocd-agent release of a mixed fleet (e.g. `0.5.0`) so its agents log in.
    #[arg(long = "report-version", env = "ARGOCD_PRINCIPAL_REPORT_VERSION", default_value = crate::VERSION)]
    pub report_version: String,
    /// gzip-compress sent events.
    #[arg(
        long = "enable-compression",
        env = "ARGOCD_PRINCIPAL_ENABLE_COMPRESSION",
        default_value_t = false
    )]
    pub compression: bool,
    /// Minimum interval between keepalive pings an agent may send.
    #[arg(long = "keepalive-min-interval", env = "ARGOCD_PRINCIPAL_KEEP_ALIVE_MIN_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub keepalive_min_interval: Duration,
    /// How often every agent connection is checked (HTTP/2 PING). An agent whose stream dropped is
    /// shown Failed (Argo CD's cluster info, its cluster secret) after half of it unless it
    /// reconnected: within 2 × the interval of any drop.
    #[arg(long = "heartbeat-interval", env = "ARGOCD_PRINCIPAL_HEARTBEAT_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// Least time between two resync rounds one agent may ask for (its --resync-interval);
    /// sooner ones are refused with a warning. 0 disables the limit.
    #[arg(long = "resync-min-interval", env = "ARGOCD_PRINCIPAL_RESYNC_MIN_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub resync_min_interval: Duration,
    /// Publish each agent's status (connection, versions, events queued) as annotations on its
    /// cluster secret, for `argocd-pull ctl agent list` (needs `patch` on Secrets in the
    /// principal's namespace).
    #[arg(long = "publish-agent-status", env = "ARGOCD_PRINCIPAL_PUBLISH_AGENT_STATUS",
          default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub publish_agent_status: bool,

    /// Port the metrics server listens on (0: off).
    #[arg(
        long = "metrics-port",
        env = "ARGOCD_PRINCIPAL_METRICS_PORT",
        default_value_t = 8000
    )]
    pub metrics_port: u16,
    /// Port the health check server listens on (0: off).
    #[arg(
        long = "healthz-port",
        env = "ARGOCD_PRINCIPAL_HEALTH_CHECK_PORT",
        default_value_t = 8003
    )]
    pub healthz_port: u16,
    /// Our previous release's metrics/health address (one server); overrides the ports.
    #[arg(
        long = "metrics-addr",
        env = "ARGOCD_PRINCIPAL_METRICS_ADDR",
        hide = true
    )]
    pub metrics_addr: Option<SocketAddr>,
    /// Port the pprof server will listen on (127.0.0.1 only; 0: off). Serves
    /// /debug/pprof/profile?seconds=N, a CPU profile for `go tool pprof`.
    #[arg(
        long = "pprof-port",
        env = "ARGOCD_PRINCIPAL_PPROF_PORT",
        default_value_t = 0
    )]
    pub pprof_port: u16,
    /// Enable full detail logging for specified categories. Comma-separated list of: all,
    /// actions, events, informers (the whole object in their debug lines).
    #[arg(
        long = "full-detail",
        env = "ARGOCD_PRINCIPAL_FULL_DETAIL",
        value_delimiter = ','
    )]
    pub full_detail: Vec<String>,

    /// Kubernetes label selector to restrict which resources the principal watches
    /// (Applications, AppProjects, repository Secrets).
    #[arg(
        long = "label-selector",
        env = "ARGOCD_PRINCIPAL_LABEL_SELECTOR",
        default_value = ""
    )]
    pub label_selector: String,

    /// Whether to allow automatic namespace creation for autonomous agents.
    #[arg(
        long = "namespace-create-enable",
        env = "ARGOCD_PRINCIPAL_NAMESPACE_CREATE_ENABLE",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub namespace_create_enable: bool,
    /// Only automatically create namespaces matching pattern.
    #[arg(
        long = "namespace-create-pattern",
        env = "ARGOCD_PRINCIPAL_NAMESPACE_CREATE_PATTERN",
        default_value = ""
    )]
    pub namespace_create_pattern: String,
    /// Labels to apply to auto-created namespaces (key=value, comma-separated or repeated).
    #[arg(
        long = "namespace-create-labels",
        env = "ARGOCD_PRINCIPAL_NAMESPACE_CREATE_LABELS",
        value_delimiter = ','
    )]
    pub namespace_create_labels: Vec<String>,
    /// List of namespaces the server is allowed to operate in (globs such as `agent-*`, or
    /// `/regex/`). Empty: all namespaces (the peer then allows none).
    #[arg(
        long = "allowed-namespaces",
        env = "ARGOCD_PRINCIPAL_ALLOWED_NAMESPACES",
        value_delimiter = ','
    )]
    pub allowed_namespaces: Vec<String>,
    /// Route Applications to managed agents by `spec.destination.name` instead of their namespace
    /// (argocd-agent's destination-based mapping); they keep their namespace on the agent.
    #[arg(long = "destination-based-mapping", env = "ARGOCD_PRINCIPAL_DESTINATION_BASED_MAPPING",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub destination_based_mapping: bool,
    /// INSECURE: serve gRPC without TLS (behind a service mesh that terminates the agents' mTLS;
    /// requires --auth header:<name>:<regex>).
    #[arg(long = "insecure-plaintext", env = "ARGOCD_PRINCIPAL_INSECURE_PLAINTEXT",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub insecure_plaintext: bool,
    /// Whether to require agents to present a client certificate. With mTLS authentication (the
    /// only TLS mode) client certificates are always required and verified, as the peer forces
    /// it for `--auth mtls:`; without TLS (--insecure-plaintext) there is none to require.
    #[arg(long = "require-client-certs", env = "ARGOCD_PRINCIPAL_TLS_CLIENT_CERT_REQUIRE",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub require_client_certs: bool,
    /// Whether a client cert's subject must match the agent name: the certificate's common name
    /// must equal the agent name of every authenticated call (refused as unauthenticated).
    #[arg(long = "client-cert-subject-match", env = "ARGOCD_PRINCIPAL_TLS_CLIENT_CERT_MATCH_SUBJECT",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub client_cert_subject_match: bool,
    /// Also accept gRPC over WebSocket (HTTP/1.1 upgrades) on the gRPC port, beside native gRPC:
    /// for agents behind proxies that do not speak HTTP/2 (agents set --enable-websocket).
    #[arg(long = "enable-websocket", env = "ARGOCD_PRINCIPAL_ENABLE_WEBSOCKET",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub enable_websocket: bool,
    /// Allow agents with valid credentials to self-register on connection (requires
    /// --self-registration-client-cert-secret).
    #[arg(long = "enable-self-cluster-registration", env = "ARGOCD_PRINCIPAL_ENABLE_SELF_CLUSTER_REGISTRATION",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub enable_self_cluster_registration: bool,
    /// TLS secret containing shared client cert for self-registered cluster secrets (must have
    /// tls.crt, tls.key, ca.crt).
    #[arg(
        long = "self-registration-client-cert-secret",
        env = "ARGOCD_PRINCIPAL_SELF_REGISTRATION_CLIENT_CERT_SECRET",
        default_value = ""
    )]
    pub self_registration_client_cert_secret: String,
    /// Resource proxy and Redis (boxed: keeps the CLI's command enum small).
    #[command(flatten)]
    pub proxy: Box<ProxyArgs>,
    #[command(flatten)]
    pub ha: Box<super::ha::HaArgs>,
    /// OTLP tracing: `--otlp-address`, `--otlp-insecure` (set up by the binary before the
    /// principal starts, see `argocd_pull_ops::otel`).
    #[command(flatten)]
    pub otlp: argocd_pull_ops::otel::PrincipalOtlpArgs,
}

/// The resource proxy's and the Argo CD Redis cache's flags.
#[derive(clap::Args, Debug, Clone)]
pub struct ProxyArgs {
    /// Whether to enable the resource proxy (default true; when not given explicitly and its TLS
    /// material cannot be loaded, the proxy is disabled with a warning instead of failing).
    #[arg(long = "enable-resource-proxy", env = "ARGOCD_PRINCIPAL_ENABLE_RESOURCE_PROXY", num_args = 0..=1, default_missing_value = "true")]
    pub enable_resource_proxy: Option<bool>,
    /// Resource proxy address on principal side (what cluster secrets point Argo CD at).
    #[arg(
        long = "resource-proxy-address",
        env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_ADDRESS",
        default_value = "argocd-agent-resource-proxy:9090"
    )]
    pub resource_proxy_address: String,
    /// Where the resource proxy listens (the peer always uses 0.0.0.0:9090).
    #[arg(
        long = "resource-proxy-listen-address",
        env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_LISTEN_ADDRESS",
        default_value = crate::principal::resource_proxy::DEFAULT_LISTEN
    )]
    pub resource_proxy_listen: SocketAddr,
    /// Secret name of the resource proxy.
    #[arg(long = "resource-proxy-secret-name", env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_SECRET_NAME", default_value = common::SECRET_RESOURCE_PROXY_TLS)]
    pub resource_proxy_secret_name: String,
    /// Path to a file containing the resource proxy's TLS certificate.
    #[arg(
        long = "resource-proxy-cert-path",
        env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_TLS_CERT_PATH"
    )]
    pub resource_proxy_cert_path: Option<PathBuf>,
    /// Path to a file containing the resource proxy's TLS private key.
    #[arg(
        long = "resource-proxy-key-path",
        env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_TLS_KEY_PATH"
    )]
    pub resource_proxy_key_path: Option<PathBuf>,
    /// Secret name of the resource proxy's CA certificate.
    #[arg(long = "resource-proxy-ca-secret-name", env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_CA_SECRET_NAME", default_value = common::SECRET_CA)]
    pub resource_proxy_ca_secret_name: String,
    /// Path to a file containing the resource proxy's TLS CA data.
    #[arg(
        long = "resource-proxy-ca-path",
        env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_TLS_CA_PATH"
    )]
    pub resource_proxy_ca_path: Option<PathBuf>,

    /// Redis server hostname and port (e.g. argocd-redis:6379): agents' cluster info is written
    /// there for Argo CD.
    #[arg(
        long = "redis-server-address",
        env = "ARGOCD_PRINCIPAL_REDIS_SERVER_ADDRESS",
        default_value = "argocd-redis:6379"
    )]
    pub redis_server_address: String,
    /// The password to connect to redis with.
    #[arg(long = "redis-password", env = "REDIS_PASSWORD", default_value = "")]
    pub redis_password: String,
    /// The redis directory with 'auth' file for Redis password (instead of --redis-password).
    #[arg(long = "redis-creds-dir-path", env = "REDIS_CREDS_DIR_PATH")]
    pub redis_creds_dir_path: Option<PathBuf>,
    /// Compression algorithm required by Redis (gzip, none).
    #[arg(
        long = "redis-compression-type",
        env = "ARGOCD_PRINCIPAL_REDIS_COMPRESSION_TYPE",
        default_value = "gzip"
    )]
    pub redis_compression_type: String,
    /// The Redis proxy's flags.
    #[command(flatten)]
    pub redis: super::redis::RedisProxyArgs,
}

impl PrincipalArgs {
    fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        if let Some(a) = self.listen {
            return Ok(a);
        }
        let ip: IpAddr = if self.listen_host.is_empty() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            match self.listen_host.parse() {
                Ok(ip) => ip,
                Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(
                    self.listen_host.as_str(),
                    self.listen_port,
                ))
                .with_context(|| format!("resolving --listen-host {}", self.listen_host))?
                .next()
                .with_context(|| format!("--listen-host {} resolves to nothing", self.listen_host))?
                .ip(),
            }
        };
        Ok(SocketAddr::new(ip, self.listen_port))
    }

    /// Why this run needs a Kubernetes client (`None`: it does not). One rule for every mode:
    /// the client comes from `--kubeconfig`/`--kubecontext`, else `KUBECONFIG` (or
    /// `~/.kube/config`), else the in-cluster service account (issue 29: `--leader-elect` with
    /// TLS material from files used to find no client).
    fn client_reason(&self, store_given: bool) -> Option<&'static str> {
        if self.needs_kube_for_material() {
            Some("the TLS material or the JWT key come from Secrets")
        } else if self.kubeconfig.is_some() || self.kubecontext.is_some() {
            Some("--kubeconfig / --kubecontext")
        } else if self.ha.leader_elect {
            Some("--leader-elect (its Lease)")
        } else if self.enable_self_cluster_registration {
            Some("--enable-self-cluster-registration (the cluster secrets)")
        } else if !store_given {
            Some("the hub's Applications, AppProjects and Secrets")
        } else {
            None
        }
    }

    fn needs_kube_for_material(&self) -> bool {
        (!self.insecure_plaintext
            && ((self.tls_cert.is_none() && !self.insecure_tls_generate)
                || self.root_ca_path.is_none()))
            || (self.jwt_key.is_none()
                && self.jwt_key_legacy.is_none()
                && !self.insecure_jwt_generate)
    }
}

/// Runs the principal against the current kube context until SIGTERM or Ctrl-C.
pub async fn run_principal(args: PrincipalArgs) -> anyhow::Result<()> {
    run(args, None, None, argocd_pull_ops::shutdown::on_signal()).await
}

/// Runs the principal until `shutdown` is cancelled, then stops serving and drops every stream.
/// `store`: the hub backend (`None`: the current kube context).
pub async fn run_principal_until(
    args: PrincipalArgs,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, None, store, shutdown).await
}

/// Runs the principal against `client`'s cluster (hub objects and the peer's Secrets) until
/// `shutdown` is cancelled.
pub async fn run_principal_in(
    args: PrincipalArgs,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, Some(client), None, shutdown).await
}

/// The resource proxy's TLS material: from the three files when all are given (the peer's rule),
/// else from the two Secrets.
async fn proxy_material(
    args: &PrincipalArgs,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<TlsMaterial> {
    if let (Some(c), Some(k), Some(ca)) = (
        &args.proxy.resource_proxy_cert_path,
        &args.proxy.resource_proxy_key_path,
        &args.proxy.resource_proxy_ca_path,
    ) {
        return Ok(TlsMaterial {
            cert_pem: read(c)?,
            key_pem: read(k)?,
            ca_pem: read(ca)?,
        });
    }
    let Some(kube) = client else {
        bail!(
            "no Kubernetes client to read the resource proxy Secrets; give --resource-proxy-cert-path, --resource-proxy-key-path and --resource-proxy-ca-path"
        );
    };
    tracing::info!(secret = %args.proxy.resource_proxy_secret_name, ca_secret = %args.proxy.resource_proxy_ca_secret_name, %namespace, "loading resource proxy TLS certificate from secrets");
    let (cert_pem, key_pem) =
        common::tls_from_secret(kube, namespace, &args.proxy.resource_proxy_secret_name).await?;
    let ca_pem = common::ca_from_secret(
        kube,
        namespace,
        &args.proxy.resource_proxy_ca_secret_name,
        &["tls.crt", "ca.crt"],
    )
    .await?;
    Ok(TlsMaterial {
        cert_pem,
        key_pem,
        ca_pem,
    })
}

struct Material {
    tls: TlsMaterial,
    jwt: String,
    client: Option<kube::Client>,
    namespace: String,
}

/// Whether the gRPC TLS material comes from files or Secrets that can change (not generated, not
/// plaintext): only then is it re-read while running.
fn tls_reloadable(args: &PrincipalArgs) -> bool {
    let generated = args.tls_cert.is_none() && args.insecure_tls_generate;
    !(args.insecure_plaintext || generated)
}

/// The gRPC server certificate, key and client-CA bundle: files, the peer's Secrets, or (with
/// `--insecure-tls-generate`) a one-time certificate; empty behind a service mesh.
async fn load_tls(
    args: &PrincipalArgs,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<TlsMaterial> {
    let kube = || client.expect("client present when Secrets are read");
    let (cert_pem, key_pem) = match (&args.tls_cert, &args.tls_key) {
        // behind a service mesh the sidecar terminates TLS: no certificate, no CA here
        _ if args.insecure_plaintext => (Vec::new(), Vec::new()),
        (Some(c), Some(k)) => (read(c)?, read(k)?),
        (Some(_), None) | (None, Some(_)) => {
            bail!("Both --tls-cert and --tls-key have to be given")
        }
        (None, None) if args.insecure_tls_generate => {
            tracing::warn!("INSECURE: using a one-time generated TLS certificate for gRPC");
            let ca = crate::pki::Ca::new("argocd-agent-principal--generated")?;
            let s = ca.issue_server(&[])?;
            (s.cert_pem.into_bytes(), s.key_pem.into_bytes())
        }
        (None, None) => {
            tracing::debug!(secret = %args.tls_secret_name, namespace = %namespace, "loading gRPC TLS certificate from secret");
            common::tls_from_secret(kube(), namespace, &args.tls_secret_name).await?
        }
    };
    let ca_pem = match &args.root_ca_path {
        _ if args.insecure_plaintext => Vec::new(),
        Some(p) => read(p)?,
        None => {
            tracing::debug!(secret = %args.tls_ca_secret_name, namespace = %namespace, "loading root CA certificate from secret");
            common::ca_from_secret(
                kube(),
                namespace,
                &args.tls_ca_secret_name,
                &["tls.crt", "ca.crt"],
            )
            .await?
        }
    };
    Ok(TlsMaterial {
        cert_pem,
        key_pem,
        ca_pem,
    })
}

/// What [`run_reloading_tls`] reloads TLS material with: the flags, the shutdown token, and the
/// client and namespace of the Secrets.
type TlsReload<'a> = (
    &'a PrincipalArgs,
    &'a CancellationToken,
    Option<&'a kube::Client>,
    &'a str,
);

/// Runs an HA mode's principal (`run`) while reloading the TLS material (files or Secrets) into
/// `tx` when it changes; then waits for the admin servers.
async fn run_reloading_tls(
    run: impl std::future::Future<Output = anyhow::Result<()>>,
    (args, shutdown, client, namespace): TlsReload<'_>,
    initial: TlsMaterial,
    tx: tokio::sync::watch::Sender<TlsMaterial>,
    admin: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    let reload = async {
        if tls_reloadable(args) {
            super::reload_tls_until(
                shutdown,
                initial,
                || load_tls(args, client, namespace),
                |m| {
                    tx.send_replace(m.clone());
                    Ok(())
                },
            )
            .await;
        }
        std::future::pending::<()>().await
    };
    let r = tokio::select! {
        r = run => r,
        _ = reload => unreachable!("pending"),
    };
    for a in admin {
        let _ = a.await;
    }
    r
}

async fn material(
    args: &PrincipalArgs,
    client: Option<kube::Client>,
    store_given: bool,
) -> anyhow::Result<Material> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(common::default_namespace);
    let client = match (client, args.client_reason(store_given)) {
        (Some(c), _) => Some(c),
        (None, Some(why)) => Some(
            common::kube_client(args.kubeconfig.as_ref(), args.kubecontext.as_deref())
                .await
                .with_context(|| {
                    format!(
                        "a Kubernetes client is needed for {why}: set KUBECONFIG or --kubeconfig, or run in a pod with a service account"
                    )
                })?,
        ),
        (None, None) => None,
    };
    let tls = load_tls(args, client.as_ref(), &namespace).await?;
    let kube = || {
        client
            .as_ref()
            .expect("client present when Secrets are read")
    };
    let jwt = match args.jwt_key.as_ref().or(args.jwt_key_legacy.as_ref()) {
        Some(p) => String::from_utf8(read(p)?).context("JWT key is not UTF-8 PEM")?,
        None if args.insecure_jwt_generate => {
            tracing::warn!("INSECURE: using a one-time generated JWT signing key");
            tokio::task::spawn_blocking(|| crate::auth::generate_rsa_pem(2048)).await??
        }
        None => {
            tracing::debug!(secret = %args.jwt_secret_name, %namespace, "loading JWT signing key from secret");
            common::jwt_key_from_secret(kube(), &namespace, &args.jwt_secret_name).await?
        }
    };
    Ok(Material {
        tls,
        jwt,
        client,
        namespace,
    })
}

async fn run(
    args: PrincipalArgs,
    client: Option<kube::Client>,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if crate::ciphers::is_list(&args.tls_ciphersuites) {
        print!("{}", crate::ciphers::list_text());
        return Ok(());
    }
    // as the peer: the profiling server first, a taken port ends the command
    let _pprof = super::serve_pprof(args.pprof_port, &shutdown).await?;
    crate::full_detail::set(crate::full_detail::FullDetail::parse(&args.full_detail));
    // bad input is reported before anything is loaded or connected
    if args.enable_self_cluster_registration && args.self_registration_client_cert_secret.is_empty()
    {
        bail!(
            "--enable-self-cluster-registration requires --self-registration-client-cert-secret (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt: the client certificate Argo CD presents to the resource proxy)"
        );
    }
    let replication = args.ha.replication()?;
    let selector = super::label_selector(&args.label_selector)?;
    let namespace_create = namespace_create(&args)?;
    let auth = match &args.identity_regex {
        Some(re) => common::parse_auth(&format!("mtls:subject:{re}"))?,
        None => common::parse_auth(&args.auth)?,
    };
    // peer: validateAuthTLSPairing
    match (&auth.source, args.insecure_plaintext) {
        (IdentitySource::Header(_), false) => bail!(
            "invalid configuration: header-based authentication requires --insecure-plaintext=true: it is for service meshes (e.g. Istio) whose sidecar terminates mTLS and injects the identity header; otherwise use --auth mtls:subject:<regex>"
        ),
        (IdentitySource::Subject | IdentitySource::Uri, true) => bail!(
            "invalid configuration: mtls authentication cannot be used with --insecure-plaintext: no client certificate reaches a plaintext server; remove --insecure-plaintext or use --auth header:<header>:<regex> behind a service mesh"
        ),
        _ => {}
    }
    let allow_tls12 = args.tls_allow_12
        || common::allow_tls12(&args.tls_min_version, &args.tls_max_version, "tls1.3")?;
    let listen = args.listen_addr()?;
    let max_event_size = args
        .max_event_size_legacy
        .unwrap_or(args.grpc_max_message_size);
    if max_event_size == 0 {
        bail!("--grpc-max-message-size must be greater than 0");
    }
    crate::env_tuning::check()?;
    let queue_capacity = crate::env_tuning::send_queue_capacity(
        args.queue_capacity,
        "--queue-capacity (ARGOCD_PRINCIPAL_QUEUE_CAPACITY)",
        crate::DEFAULT_QUEUE_CAPACITY,
    )?;
    if args.heartbeat_interval < Duration::from_secs(1) {
        bail!(
            "--heartbeat-interval {:?} is too short: give at least 1s (default 30s)",
            args.heartbeat_interval
        );
    }
    // the peer's ValidateTLSConfig: every suite supports the minimum version (default tls1.3)
    let cipher_suites = crate::ciphers::parse(&args.tls_ciphersuites, Some(!allow_tls12))
        .map_err(|e| anyhow::anyhow!("--tls-ciphersuites: {e}"))?;
    let Some(m) = super::or_shutdown(&shutdown, material(&args, client, store.is_some())).await?
    else {
        return Ok(());
    };
    let (initial_tls, reload_client, reload_namespace) =
        (m.tls.clone(), m.client.clone(), m.namespace.clone());
    let mut cfg = PrincipalConfig::new(listen, m.tls, m.jwt);
    cfg.allow_tls12 = allow_tls12;
    cfg.cipher_suites = cipher_suites;
    cfg.identity_regex = auth.regex;
    cfg.identity_from_uri = auth.source == IdentitySource::Uri;
    if let IdentitySource::Header(h) = &auth.source {
        cfg.identity_header = Some(h.clone());
    }
    cfg.insecure_plaintext = args.insecure_plaintext;
    if args.insecure_plaintext && (args.require_client_certs || args.client_cert_subject_match) {
        tracing::warn!(
            "--require-client-certs / --client-cert-subject-match have no effect with --insecure-plaintext: the principal sees no client certificate (the service mesh terminates TLS)"
        );
    }
    // peer: `--auth mtls:` forces client certificates on; every TLS mode here is mTLS
    cfg.client_cert_subject_match = args.client_cert_subject_match && !args.insecure_plaintext;
    cfg.enable_websocket = args.enable_websocket;
    cfg.namespace = m.namespace;
    cfg.max_event_size = max_event_size;
    cfg.queue_capacity = queue_capacity;
    cfg.recv_queue_size = crate::env_tuning::recv_queue_size()?;
    cfg.version = args.report_version.clone();
    cfg.concurrency = args.event_processors.unwrap_or(args.concurrency).max(1);
    cfg.compression = args.compression;
    cfg.keepalive_min_interval = args.keepalive_min_interval;
    cfg.heartbeat = args.heartbeat_interval;
    cfg.resync_min_interval = args.resync_min_interval;
    cfg.publish_agent_status = args.publish_agent_status;
    cfg.namespace_create = namespace_create;
    cfg.allowed_namespaces = args
        .allowed_namespaces
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    cfg.destination_based_mapping = args.destination_based_mapping;
    if cfg.destination_based_mapping {
        tracing::info!("Destination-based mapping is enabled on the principal");
    }
    let gzip = match args.proxy.redis_compression_type.as_str() {
        "gzip" => true,
        "none" => false,
        other => bail!("--redis-compression-type {other:?} is not supported; use gzip or none"),
    };
    cfg.cluster_secrets = m
        .client
        .clone()
        .map(crate::principal::cluster_secrets::SecretsClient);
    if args.enable_self_cluster_registration {
        if cfg.cluster_secrets.is_none() {
            bail!(
                "--enable-self-cluster-registration needs a Kubernetes client (the cluster secrets are written to the principal's namespace)"
            );
        }
        cfg.self_registration = Some(crate::principal::SelfRegistration {
            client_cert_secret: args.self_registration_client_cert_secret.clone(),
            resource_proxy_address: args.proxy.resource_proxy_address.clone(),
        });
    }
    // as the peer: the password from the directory, its username file ignored
    let (_, redis_password) = super::creds::redis_creds(
        args.proxy.redis_creds_dir_path.as_deref(),
        "",
        &args.proxy.redis_password,
    )?;
    cfg.argocd_cache = Some(crate::argocd_cache::ArgoCacheConfig {
        address: args.proxy.redis_server_address.clone(),
        password: Some(redis_password).filter(|p| !p.is_empty()),
        gzip,
        resource_proxy_address: args.proxy.resource_proxy_address.clone(),
    });
    cfg.redis_proxy = super::redis::config(
        &args.proxy.redis,
        &args.proxy.redis_server_address,
        m.client.as_ref(),
        &cfg.namespace,
    )
    .await?;
    if args.proxy.enable_resource_proxy != Some(false) {
        match proxy_material(&args, m.client.as_ref(), &cfg.namespace).await {
            Ok(t) => {
                let mut rp =
                    crate::principal::ResourceProxyConfig::new(args.proxy.resource_proxy_listen, t);
                rp.allow_tls12 = allow_tls12;
                rp.cipher_suites = cfg.cipher_suites.clone();
                cfg.resource_proxy = Some(rp);
            }
            Err(e) if args.proxy.enable_resource_proxy.is_none() => {
                tracing::warn!(error = %format!("{e:#}"), "resource proxy disabled: its TLS material could not be loaded (create the Secrets, give the --resource-proxy-*-path files, or pass --enable-resource-proxy=false)");
            }
            Err(e) => {
                return Err(e.context("Could not load resource proxy TLS configuration"));
            }
        }
    }
    let ha_client = m.client.clone();
    let Some(store) =
        super::or_shutdown(&shutdown, super::store_or(store, m.client, "hub")).await?
    else {
        return Ok(());
    };
    let store = super::selected(store, selector, "principal");
    let metrics = Metrics::new("argocd_principal");
    let admin = super::serve_admin(
        &metrics,
        &super::admin_addrs(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            args.metrics_port,
            args.healthz_port,
            args.metrics_addr,
        ),
        &shutdown,
    )
    .await?;
    // the principal's identity (the peer's principal-identity ConfigMap): agents tell a
    // failover to the other principal of an HA pair from a recreated object by it
    match crate::principal::identity::ensure_principal_uid(store.as_ref(), &cfg.namespace).await {
        Ok(uid) => {
            tracing::info!(%uid, "principal identity");
            cfg.principal_uid = Some(uid);
        }
        Err(e) if replication.is_some() => return Err(e.context("--ha-enabled")),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "no principal identity: agents cannot tell a failover to another principal from a recreated Application");
        }
    }
    if let Some(settings) = replication {
        let (tls_tx, tls_rx) = tokio::sync::watch::channel(initial_tls.clone());
        let node = crate::ha::replication::Node {
            store,
            metrics,
            tls: tls_reloadable(&args).then_some(tls_rx),
            state: None,
        };
        let run = crate::ha::replication::run(settings, cfg, node, shutdown.clone());
        let reload = (
            &args,
            &shutdown,
            reload_client.as_ref(),
            reload_namespace.as_str(),
        );
        return run_reloading_tls(run, reload, initial_tls, tls_tx, admin).await;
    }
    if let Some(ha) = args.ha.config(&cfg.namespace)? {
        let Some(client) = ha_client else {
            bail!(
                "--leader-elect needs a Kubernetes client for its Lease (run in a cluster or set KUBECONFIG)"
            );
        };
        let (tls_tx, tls_rx) = tokio::sync::watch::channel(initial_tls.clone());
        let replica = crate::ha::Replica {
            client,
            store,
            metrics,
            role: tokio::sync::watch::channel(crate::ha::Role::Recovering).0,
            tls: tls_reloadable(&args).then_some(tls_rx),
        };
        let run = crate::ha::run(ha, cfg, replica, shutdown.clone());
        let reload = (
            &args,
            &shutdown,
            reload_client.as_ref(),
            reload_namespace.as_str(),
        );
        return run_reloading_tls(run, reload, initial_tls, tls_tx, admin).await;
    }
    let Some(p) = super::or_shutdown(&shutdown, Principal::start(cfg, store, metrics)).await?
    else {
        return Ok(());
    };
    if tls_reloadable(&args) {
        // only the TLS material is re-read (not the JWT key)
        super::reload_tls_until(
            &shutdown,
            initial_tls,
            || load_tls(&args, reload_client.as_ref(), &reload_namespace),
            |m| p.reload_tls(m),
        )
        .await;
    } else {
        shutdown.cancelled().await;
    }
    tracing::info!("principal shutting down");
    super::bounded_stop("principal", async {
        p.shutdown().await;
        for a in admin {
            let _ = a.await;
        }
    })
    .await;
    Ok(())
}

/// `--namespace-create-*` as the peer reads them (`labels.StringsToMap`, `regexp.Compile`).
fn namespace_create(
    args: &PrincipalArgs,
) -> anyhow::Result<Option<crate::principal::NamespaceCreate>> {
    if !args.namespace_create_enable {
        return Ok(None);
    }
    let pattern = match args.namespace_create_pattern.as_str() {
        "" => None,
        p => Some(regex::Regex::new(p).map_err(|e| {
            anyhow::anyhow!("--namespace-create-pattern: invalid auto-namespace pattern {p:?}: {e}")
        })?),
    };
    let mut labels = std::collections::BTreeMap::new();
    for l in args
        .namespace_create_labels
        .iter()
        .filter(|l| !l.is_empty())
    {
        let (k, v) = l.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(
                "--namespace-create-labels: could not parse auto namespace labels: {l:?} is not key=value"
            )
        })?;
        labels.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(Some(crate::principal::NamespaceCreate { pattern, labels }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_tls_material_read_from_files_or_secrets_is_reloaded() {
        let p = |f: &[&str]| PrincipalArgs::try_parse_flags(f.iter().copied()).unwrap();
        assert!(tls_reloadable(&p(&[])), "the peer's Secrets");
        assert!(
            !tls_reloadable(&p(&["--insecure-tls-generate"])),
            "a generated certificate is not re-generated every minute"
        );
        assert!(!tls_reloadable(&p(&["--insecure-plaintext"])));
        assert!(tls_reloadable(&p(&[
            "--insecure-tls-generate",
            "--tls-cert=/c",
            "--tls-key=/k"
        ])));
    }

    #[test]
    fn enable_websocket_is_the_peers_flag_on_both_sides() {
        let p = |f: &[&str]| {
            PrincipalArgs::try_parse_flags(f.iter().copied())
                .unwrap()
                .enable_websocket
        };
        let a = |f: &[&str]| {
            let flags = ["--server-address=principal.example.com"].iter().chain(f);
            crate::cli::AgentArgs::try_parse_flags(flags.copied())
                .unwrap()
                .enable_websocket
        };
        for parse in [p, a] {
            assert!(!parse(&[]), "off by default");
            assert!(parse(&["--enable-websocket"]));
            assert!(parse(&["--enable-websocket=true"]));
            assert!(!parse(&["--enable-websocket=false"]));
        }
    }

    #[test]
    fn resource_proxy_and_redis_flags_as_the_peer() {
        let a = PrincipalArgs::try_parse_flags(Vec::<String>::new()).unwrap();
        assert_eq!(a.proxy.enable_resource_proxy, None, "default on, lenient");
        assert_eq!(
            a.proxy.resource_proxy_address,
            "argocd-agent-resource-proxy:9090"
        );
        assert_eq!(a.proxy.resource_proxy_listen.to_string(), "0.0.0.0:9090");
        assert_eq!(
            a.proxy.resource_proxy_secret_name,
            "argocd-agent-resource-proxy-tls"
        );
        assert_eq!(a.proxy.resource_proxy_ca_secret_name, "argocd-agent-ca");
        assert_eq!(a.proxy.redis_server_address, "argocd-redis:6379");
        assert_eq!(a.proxy.redis_compression_type, "gzip");
        let a = PrincipalArgs::try_parse_flags(["--enable-resource-proxy=false"]).unwrap();
        assert_eq!(a.proxy.enable_resource_proxy, Some(false));
        let a = PrincipalArgs::try_parse_flags([
            "--enable-resource-proxy",
            "--resource-proxy-cert-path",
            "/c",
            "--resource-proxy-key-path",
            "/k",
            "--resource-proxy-ca-path",
            "/ca",
        ])
        .unwrap();
        assert_eq!(a.proxy.enable_resource_proxy, Some(true));
        assert_eq!(a.proxy.resource_proxy_ca_path, Some(PathBuf::from("/ca")));
        let a = crate::cli::agent::AgentArgs::try_parse_flags([
            "--server-address",
            "p",
            "--enable-resource-proxy=false",
        ]);
        assert!(!a.unwrap().enable_resource_proxy);
        let a = crate::cli::agent::AgentArgs::try_parse_flags(["--server-address", "p"]).unwrap();
        assert!(a.enable_resource_proxy);
    }
}
