//! The flags and environment variables of `argocd-pull principal` (argocd-agent's `principal`
//! command) and what follows from them alone.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use argocd_pull_agent_core::settings::parse_duration;

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
    #[arg(long = "tls-secret-name", env = "ARGOCD_PRINCIPAL_TLS_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_PRINCIPAL_TLS)]
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
    #[arg(long = "tls-ca-secret-name", env = "ARGOCD_PRINCIPAL_TLS_SERVER_ROOT_CA_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_CA)]
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
    #[arg(long = "jwt-secret-name", env = "ARGOCD_PRINCIPAL_JWT_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_JWT)]
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
    #[arg(long = "grpc-max-message-size", alias = "max-event-size", env = "ARGOCD_PRINCIPAL_GRPC_MAX_MESSAGE_SIZE", default_value_t = argocd_pull_agent_core::settings::DEFAULT_GRPC_MAX_MESSAGE_SIZE)]
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
    #[arg(long, env = "ARGOCD_PRINCIPAL_CONCURRENCY", default_value_t = argocd_pull_agent_core::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Per-agent send queue capacity (events); beyond it resources are deferred, never dropped.
    /// Default 10000, or the peer's ARGOCD_AGENT_SEND_QUEUE_SIZE.
    #[arg(long = "queue-capacity", env = "ARGOCD_PRINCIPAL_QUEUE_CAPACITY")]
    pub queue_capacity: Option<usize>,
    /// Version string reported to agents and required of them (the peer's rule: string equality).
    /// Set it to the argocd-agent release of a mixed fleet (e.g. `0.5.0`) so its agents log in.
    #[arg(long = "report-version", env = "ARGOCD_PRINCIPAL_REPORT_VERSION", default_value = argocd_pull_agent_core::VERSION)]
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
    /// Events sent to one agent and not yet acknowledged at most; the rest wait in its queue.
    /// Lower keeps less memory per agent while a whole fleet receives at once (10,000 agents
    /// with 10 Applications each over 3 replicas: 414-429 MiB per replica at 4, 468-488 MiB
    /// at 32), higher lets one agent with many Applications receive faster over a long round
    /// trip (events per second per agent ≈ this / round trip).
    #[arg(long = "max-events-in-flight", env = "ARGOCD_PRINCIPAL_MAX_EVENTS_IN_FLIGHT", default_value_t = argocd_pull_agent_core::queue::DEFAULT_MAX_IN_FLIGHT as u32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_events_in_flight: u32,
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
    pub ha: Box<crate::cli::ha::HaArgs>,
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
        default_value = argocd_pull_principal::resource_proxy::DEFAULT_LISTEN
    )]
    pub resource_proxy_listen: SocketAddr,
    /// Secret name of the resource proxy.
    #[arg(long = "resource-proxy-secret-name", env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_RESOURCE_PROXY_TLS)]
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
    #[arg(long = "resource-proxy-ca-secret-name", env = "ARGOCD_PRINCIPAL_RESOURCE_PROXY_CA_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_CA)]
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
    pub redis: crate::cli::redis::RedisProxyArgs,
}

impl PrincipalArgs {
    pub(super) fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
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
    pub(super) fn client_reason(&self, store_given: bool) -> Option<&'static str> {
        if self.needs_kube_for_material() {
            Some("the TLS material or the JWT key come from Secrets")
        } else if self.kubeconfig.is_some() || self.kubecontext.is_some() {
            Some("--kubeconfig / --kubecontext")
        } else if self.ha.leader_elect || self.ha.ha_mode.is_some() {
            Some("--leader-elect / --ha-mode (their Leases)")
        } else if self.enable_self_cluster_registration {
            Some("--enable-self-cluster-registration (the cluster secrets)")
        } else if !store_given {
            Some("the hub's Applications, AppProjects and Secrets")
        } else {
            None
        }
    }

    pub(super) fn needs_kube_for_material(&self) -> bool {
        (!self.insecure_plaintext
            && ((self.tls_cert.is_none() && !self.insecure_tls_generate)
                || self.root_ca_path.is_none()))
            || (self.jwt_key.is_none()
                && self.jwt_key_legacy.is_none()
                && !self.insecure_jwt_generate)
    }
}
