//! Agent-based pull model: principal and agent over mTLS gRPC streams, wire-compatible with
//! argoproj-labs/argocd-agent. See `README.md` for the design and every deviation from the peer.
pub mod argocd_cache;
pub mod auth;
pub mod blocklist;
pub mod checksum;
pub mod ciphers;
pub mod container;
pub mod env_tuning;
pub mod event;
pub mod full_detail;
pub mod grpc_metrics;
pub mod insecure;
pub mod kube_client;
pub mod metrics;
pub mod otel;
pub mod process_metrics;
pub mod proto;
pub mod queue;
pub mod recv_queue;
pub mod redis_wire;
pub mod resource;
pub mod rest_metrics;
pub mod session;
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

pub mod agent;
pub mod agent_status;
pub mod cli;
pub mod ctl;
pub mod ha;
pub mod local;
pub mod pki;
pub use local::{LocalDeployment, start_local, start_local_stores};
pub mod objects;
pub mod policy;
pub mod pprof;
pub mod principal;
pub mod project_match;
pub mod repository;
pub mod selector;

/// This implementation's protocol version (reported by `versionapi.Version`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Default largest event (encoded bytes).
pub const DEFAULT_MAX_EVENT_SIZE: usize = 4 * 1024 * 1024;
/// Default per-peer queue capacity (queued events; in flight not counted).
pub const DEFAULT_QUEUE_CAPACITY: usize = 10_000;
/// Default number of received events processed concurrently per stream.
pub const DEFAULT_CONCURRENCY: usize = 64;
