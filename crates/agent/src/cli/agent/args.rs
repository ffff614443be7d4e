//! The flags and environment variables of `argocd-pull agent` (argocd-agent's `agent` command)
//! and what follows from them alone.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::settings::parse_duration;

/// `argocd-pull agent`
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// Address (host name or IP) of the principal to connect to. Our previous release's
    /// `host:port` form is still accepted when --server-port is not given.
    #[arg(long = "server-address", env = "ARGOCD_AGENT_REMOTE_SERVER")]
    pub server_address: String,
    /// Port on the principal to connect to (default 443).
    #[arg(long = "server-port", env = "ARGOCD_AGENT_REMOTE_PORT")]
    pub server_port: Option<u16>,
    /// Name expected in the principal's certificate (default: the host of --server-address).
    #[arg(long = "server-name", env = "ARGOCD_AGENT_REMOTE_SERVER_NAME")]
    pub server_name: Option<String>,
    /// Mode of operation.
    #[arg(
        long = "agent-mode",
        env = "ARGOCD_AGENT_MODE",
        value_enum,
        default_value = "autonomous"
    )]
    pub mode: Mode,
    /// Credentials to use when connecting to the principal (mtls: only; empty means mtls).
    #[arg(long = "creds", env = "ARGOCD_AGENT_CREDS", default_value = "")]
    pub creds: String,

    /// Secret holding the client certificate (kubernetes.io/tls), used without --tls-client-cert.
    #[arg(long = "tls-secret-name", env = "ARGOCD_AGENT_TLS_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_CLIENT_TLS)]
    pub tls_secret_name: String,
    /// Client certificate (PEM file).
    #[arg(long = "tls-client-cert", env = "ARGOCD_AGENT_TLS_CLIENT_CERT_PATH")]
    pub tls_cert: Option<PathBuf>,
    /// Client key (PEM file).
    #[arg(long = "tls-client-key", env = "ARGOCD_AGENT_TLS_CLIENT_KEY_PATH")]
    pub tls_key: Option<PathBuf>,
    /// Secret holding the root CA (every field is read), used without --root-ca-path.
    #[arg(long = "root-ca-secret-name", env = "ARGOCD_AGENT_TLS_ROOT_CA_SECRET_NAME", default_value = argocd_pull_agent_core::settings::SECRET_CA)]
    pub root_ca_secret_name: String,
    /// CA of the principal's certificate (PEM file).
    #[arg(
        long = "root-ca-path",
        alias = "tls-root-ca-path",
        env = "ARGOCD_AGENT_TLS_ROOT_CA_PATH"
    )]
    pub root_ca_path: Option<PathBuf>,
    /// Minimum TLS version (tls1.2, tls1.3; empty: tls1.2).
    #[arg(
        long = "tls-min-version",
        env = "ARGOCD_AGENT_TLS_MIN_VERSION",
        default_value = ""
    )]
    pub tls_min_version: String,
    /// Maximum TLS version (tls1.3; empty: the highest).
    #[arg(
        long = "tls-max-version",
        env = "ARGOCD_AGENT_TLS_MAX_VERSION",
        default_value = ""
    )]
    pub tls_max_version: String,
    /// Our previous release: allow TLS 1.2.
    #[arg(
        long = "tls-allow-1.2",
        env = "ARGOCD_AGENT_TLS_ALLOW_12",
        default_value_t = false,
        hide = true
    )]
    pub tls_allow_12: bool,
    /// Comma-separated list of TLS cipher suites to use, Go's names (`list` prints them and
    /// exits). Naming TLS 1.3 suites restricts TLS 1.3 too (Go cannot).
    #[arg(
        long = "tls-ciphersuites",
        env = "ARGOCD_AGENT_TLS_CIPHERSUITES",
        value_delimiter = ','
    )]
    pub tls_ciphersuites: Vec<String>,
    /// INSECURE: Do not verify remote TLS certificate (no root CA is read).
    #[arg(long = "insecure-tls", env = "ARGOCD_AGENT_TLS_INSECURE",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub insecure_tls: bool,

    /// Namespace to manage applications in.
    #[arg(
        short = 'n',
        long,
        env = "ARGOCD_AGENT_NAMESPACE",
        default_value = "argocd"
    )]
    pub namespace: String,
    /// Path to a kubeconfig file to use.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Override the default kube context.
    #[arg(long)]
    pub kubecontext: Option<String>,

    /// Maximum gRPC message size in bytes (the largest event accepted or sent).
    #[arg(long = "grpc-max-message-size", alias = "max-event-size", env = "ARGOCD_AGENT_GRPC_MAX_MESSAGE_SIZE", default_value_t = argocd_pull_agent_core::settings::DEFAULT_GRPC_MAX_MESSAGE_SIZE)]
    pub grpc_max_message_size: usize,
    /// Our previous release's env name for the size limit.
    #[arg(
        long = "max-event-size-legacy",
        env = "ARGOCD_AGENT_MAX_EVENT_SIZE",
        hide = true
    )]
    pub max_event_size_legacy: Option<usize>,
    /// Send queue capacity (events).
    /// Answer the principal's resource-proxy requests (also container logs and web terminals)
    /// against this cluster's API server.
    #[arg(long = "enable-resource-proxy", env = "ARGOCD_AGENT_ENABLE_RESOURCE_PROXY", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_resource_proxy: bool,
    /// Serve only resources Argo CD manages (tracking label/annotation or owner chain) and list
    /// only events through the resource proxy, as argocd-agent does (default: the agent's RBAC).
    #[arg(long = "resource-proxy-managed-only", env = "ARGOCD_AGENT_RESOURCE_PROXY_MANAGED_ONLY", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub resource_proxy_managed_only: bool,
    /// The local Argo CD's Redis (host:port): its cluster info is reported to the principal.
    #[arg(
        long = "redis-addr",
        env = "REDIS_ADDR",
        default_value = "argocd-redis:6379"
    )]
    pub redis_addr: String,
    /// The password to connect to the local Redis with.
    #[arg(long = "redis-password", env = "REDIS_PASSWORD", default_value = "")]
    pub redis_password: String,
    /// The username to connect to the local Redis with (Redis proxy requests).
    #[arg(long = "redis-username", env = "REDIS_USERNAME", default_value = "")]
    pub redis_username: String,
    /// The redis directory with 'auth_username' file for Redis username (optional) and 'auth'
    /// for Redis password (instead of --redis-username / --redis-password).
    #[arg(long = "redis-creds-dir-path", env = "REDIS_CREDS_DIR_PATH")]
    pub redis_creds_dir_path: Option<PathBuf>,
    /// TLS to the local Redis.
    #[command(flatten)]
    pub redis_tls: crate::cli::redis::AgentRedisTlsArgs,
    /// Interval to refresh cluster cache info in principal.
    #[arg(long = "cache-refresh-interval", env = "ARGOCD_AGENT_CACHE_REFRESH_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub cache_refresh_interval: Duration,
    /// Timeout to wait for Application/AppProject/Repository/GPG informers to sync at startup.
    #[arg(long = "informer-sync-timeout", env = "ARGOCD_AGENT_INFORMER_SYNC_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub informer_sync_timeout: Duration,
    /// Send queue capacity (events); beyond it resources are deferred, never dropped.
    /// Default 10000, or the peer's ARGOCD_AGENT_SEND_QUEUE_SIZE.
    #[arg(long = "queue-capacity", env = "ARGOCD_AGENT_QUEUE_CAPACITY")]
    pub queue_capacity: Option<usize>,
    /// Version string sent at login; the principal demands it equal to its own (the peer's rule).
    /// Set it to the argocd-agent release of a mixed fleet (e.g. `0.5.0`) to join a peer principal.
    #[arg(long = "report-version", env = "ARGOCD_AGENT_REPORT_VERSION", default_value = argocd_pull_agent_core::VERSION)]
    pub report_version: String,
    /// Use compression while sending data to the principal.
    #[arg(
        long = "enable-compression",
        env = "ARGOCD_AGENT_ENABLE_COMPRESSION",
        default_value_t = false
    )]
    pub compression: bool,
    /// HTTP/2 keepalive ping interval towards the principal (0: the built-in 30 s).
    #[arg(long = "keep-alive-ping-interval", env = "ARGOCD_AGENT_KEEP_ALIVE_PING_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub keepalive: Duration,
    /// Interval for application-level heartbeats over the Subscribe stream (e.g., 30s). Set to 0
    /// to disable. Useful to keep connections alive through service meshes like Istio.
    #[arg(long = "heartbeat-interval", env = "ARGOCD_AGENT_HEARTBEAT_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// Interval at which the agent resyncs its resources with the principal while connected, in
    /// addition to the resync at start (e.g., 10m): recovers from a lost event without a
    /// reconnect; checksums keep anything already in sync from being sent again. 0 disables it.
    /// Keep it above the principal's --resync-min-interval.
    #[arg(long = "resync-interval", env = "ARGOCD_AGENT_RESYNC_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub resync_interval: Duration,

    /// Port the metrics server listens on (0: off).
    #[arg(
        long = "metrics-port",
        env = "ARGOCD_AGENT_METRICS_PORT",
        default_value_t = 8181
    )]
    pub metrics_port: u16,
    /// Port the health check server listens on (0: off).
    #[arg(
        long = "healthz-port",
        env = "ARGOCD_AGENT_HEALTH_CHECK_PORT",
        default_value_t = 8001
    )]
    pub healthz_port: u16,
    /// Our previous release's metrics/health address (one server); overrides the ports.
    #[arg(long = "metrics-addr", env = "ARGOCD_AGENT_METRICS_ADDR", hide = true)]
    pub metrics_addr: Option<SocketAddr>,
    /// Port the pprof server will listen on (127.0.0.1 only; 0: off). Serves
    /// /debug/pprof/profile?seconds=N, a CPU profile for `go tool pprof`.
    #[arg(
        long = "pprof-port",
        env = "ARGOCD_AGENT_PPROF_PORT",
        default_value_t = 0
    )]
    pub pprof_port: u16,
    /// Enable full detail logging for specified categories. Comma-separated list of: all,
    /// actions, events, informers (the whole object in their debug lines).
    #[arg(
        long = "full-detail",
        env = "ARGOCD_AGENT_FULL_DETAIL",
        value_delimiter = ','
    )]
    pub full_detail: Vec<String>,
    /// Minimum interval that detected local Application 'update' events wait in a buffer before
    /// being sent to the principal: redundant updates within it collapse into the latest one;
    /// updates further apart are not delayed (0: off).
    #[arg(long = "buffer-informer-event-interval", env = "ARGOCD_AGENT_BUFFER_INFORMER_EVENT_INTERVAL", default_value = "0", value_parser = parse_duration)]
    pub buffer_informer_event_interval: Duration,

    /// Policy for source-UID mismatches: recreate (delete and recreate, default) or upsert
    /// (update in-place). The annotation argocd.argoproj.io/source-uid-mismatch-policy on the
    /// principal's Application overrides it.
    #[arg(
        long = "source-uid-mismatch-policy",
        env = "ARGOCD_AGENT_SOURCE_UID_MISMATCH_POLICY",
        value_enum,
        default_value_t = argocd_pull_agent_core::policy::MismatchPolicy::Recreate
    )]
    pub source_uid_mismatch_policy: argocd_pull_agent_core::policy::MismatchPolicy,
    /// Set the adoption policy for applications that already exist on a managed agent (always or
    /// never). The annotation argocd.argoproj.io/adoption-policy on the existing Application
    /// overrides it.
    #[arg(
        long = "adoption-policy",
        env = "ARGOCD_AGENT_ADOPTION_POLICY",
        value_enum,
        default_value_t = argocd_pull_agent_core::policy::AdoptionPolicy::Always
    )]
    pub adoption_policy: argocd_pull_agent_core::policy::AdoptionPolicy,
    /// Action after recreating an app from unauthorized deletion (managed mode only): ignore
    /// (default), clear-status, or resync.
    #[arg(
        long = "on-application-recreate",
        env = "ARGOCD_AGENT_ON_APPLICATION_RECREATE",
        value_enum,
        default_value_t = argocd_pull_agent_core::policy::RecreateAction::Ignore
    )]
    pub on_application_recreate: argocd_pull_agent_core::policy::RecreateAction,
    /// Kubernetes label selector to restrict which resources the agent watches (Applications,
    /// AppProjects, repository Secrets).
    #[arg(
        long = "label-selector",
        env = "ARGOCD_AGENT_LABEL_SELECTOR",
        default_value = ""
    )]
    pub label_selector: String,
    /// argocd-agent's destination-based mapping (managed agents only, with the same flag on the
    /// principal): Applications keep the principal's namespace here instead of `--namespace`.
    #[arg(long = "destination-based-mapping", env = "ARGOCD_AGENT_DESTINATION_BASED_MAPPING",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub destination_based_mapping: bool,
    /// Create an Application's missing namespace (needs --destination-based-mapping).
    #[arg(long = "create-namespace", env = "ARGOCD_AGENT_CREATE_NAMESPACE",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub create_namespace: bool,
    /// Namespaces besides --namespace that Applications may be written in (globs or `/regex/`;
    /// used with --destination-based-mapping).
    #[arg(
        long = "allowed-namespaces",
        env = "ARGOCD_AGENT_ALLOWED_NAMESPACES",
        value_delimiter = ','
    )]
    pub allowed_namespaces: Vec<String>,
    /// Ignore Applications without the source-UID annotation during resync. argocd-pull's
    /// managed agent always does (it only reports what the principal gave it).
    #[arg(long = "ignore-unmanaged-apps", env = "ARGOCD_AGENT_IGNORE_UNMANAGED_APPS",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub ignore_unmanaged_apps: bool,
    /// INSECURE: connect to the principal without TLS (behind a service mesh whose sidecar
    /// provides mTLS and the identity header; use with --creds header:).
    #[arg(long = "insecure-plaintext", env = "ARGOCD_AGENT_INSECURE_PLAINTEXT",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub insecure_plaintext: bool,
    /// Carry every call to the principal over a WebSocket (gRPC over HTTP/1.1, as the peer's
    /// grpc-http1 bridge): for proxies and load balancers that do not speak HTTP/2. The principal
    /// needs --enable-websocket too.
    #[arg(long = "enable-websocket", env = "ARGOCD_AGENT_ENABLE_WEBSOCKET",
          default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub enable_websocket: bool,
    /// OTLP tracing: `--otlp-address`, `--otlp-insecure` (set up by the binary before the agent
    /// starts, see `argocd_pull_ops::otel`).
    #[command(flatten)]
    pub otlp: argocd_pull_ops::otel::AgentOtlpArgs,
}

impl AgentArgs {
    /// (host, port) of the principal. A `host:port` --server-address (our previous release) is
    /// split when --server-port is absent.
    pub fn server(&self) -> anyhow::Result<(String, u16)> {
        let a = self.server_address.trim();
        if a.is_empty() {
            bail!("No remote specified: set --server-address (ARGOCD_AGENT_REMOTE_SERVER)");
        }
        if let Some(p) = self.server_port {
            if p == 0 {
                bail!("--server-port must be between 1 and 65535");
            }
            return Ok((a.trim_matches(['[', ']']).to_string(), p));
        }
        if let Ok(sa) = a.parse::<SocketAddr>() {
            return Ok((sa.ip().to_string(), sa.port()));
        }
        if let Some((h, p)) = a.rsplit_once(':')
            && !h.contains(':')
            && let Ok(p) = p.parse::<u16>()
        {
            return Ok((h.to_string(), p));
        }
        Ok((a.trim_matches(['[', ']']).to_string(), 443))
    }
}
