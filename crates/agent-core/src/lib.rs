//! What both ends of the agent model share: the wire (the gRPC services of `proto/`, CloudEvents
//! encoding, checksums, the event session with its ACK/resend window, the WebSocket transport,
//! JWT authentication, TLS and the PKI), the Argo CD objects both ends read and keep (stores,
//! AppProject matching, repositories, the Redis cache's keys), the settings every command reads
//! (Secrets, Kubernetes client, durations), and the metrics both ends export under the peer's
//! names. The principal (`argocd-pull-principal`), the spoke agent (`argocd-pull-spoke`) and the
//! ctl (`argocd-pull-ctl`) are built on it; `argocd-pull-agent` puts them together.

pub mod agent_status;
pub mod argocd_cache;
pub mod auth;
pub mod blocklist;
pub mod checksum;
pub mod ciphers;
pub mod cluster_secret;
pub mod container;
pub mod env_tuning;
pub mod event;
pub mod full_detail;
pub mod grpc_metrics;
pub mod insecure;
pub mod kube_client;
pub mod metrics;
pub mod objects;
pub mod otel;
pub mod pki;
pub mod policy;
pub mod pprof;
pub mod process_metrics;
pub mod project_match;
pub mod proto;
pub mod queue;
pub mod recv_queue;
pub mod redis_wire;
pub mod repository;
pub mod resource;
pub mod rest_metrics;
pub mod selector;
pub mod session;
pub mod settings;
pub mod store;
pub mod tls;
pub mod validate;
pub mod workqueue_metrics;
pub mod ws;

/// Agent mode of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
pub enum Mode {
    /// The principal is the source of truth.
    Managed,
    /// The agent is the source of truth.
    Autonomous,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Managed => "managed",
            Mode::Autonomous => "autonomous",
        }
    }
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "managed" => Some(Mode::Managed),
            "autonomous" => Some(Mode::Autonomous),
            _ => None,
        }
    }
}

/// This implementation's protocol version (reported by `versionapi.Version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Default largest event (encoded bytes).
pub const DEFAULT_MAX_EVENT_SIZE: usize = 4 * 1024 * 1024;
/// Default per-peer queue capacity (queued events; in flight not counted).
pub const DEFAULT_QUEUE_CAPACITY: usize = 10_000;
/// Default number of received events processed concurrently per stream.
pub const DEFAULT_CONCURRENCY: usize = 64;
