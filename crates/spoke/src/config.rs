//! The agent's settings ([`AgentConfig`]) and their defaults.

use std::net::SocketAddr;
use std::time::Duration;

use super::agent_info::KubeVersionSource;
use super::cache_info::LocalRedis;
use super::redis_proxy::LocalRedisProxy;
use super::resource::ResourceProxyClient;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::queue::Backoff;
use argocd_pull_agent_core::tls::TlsMaterial;

/// Agent settings.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub principal: SocketAddr,
    /// Name in the principal's server certificate.
    pub server_name: String,
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    /// `--tls-ciphersuites` (`None`: every ring suite).
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
    /// `--insecure-tls`: the principal's certificate is not verified.
    pub insecure_tls: bool,
    pub mode: Mode,
    /// Local Argo CD namespace.
    pub namespace: String,
    /// Version string sent at login (a peer principal demands string equality with its own).
    pub version: String,
    pub max_event_size: usize,
    pub queue_capacity: usize,
    /// Received events waiting for a handler at most (`ARGOCD_AGENT_RECV_QUEUE_SIZE`).
    pub recv_queue_size: usize,
    pub concurrency: usize,
    pub compression: bool,
    pub keepalive_interval: Duration,
    /// How long connecting, logging in and opening the event stream may take together before
    /// the attempt is abandoned and retried (a principal that accepted the connection and never
    /// answers must not hold the agent; default 30 s).
    pub login_timeout: Duration,
    pub backoff: Backoff,
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// `--heartbeat-interval`: a `ping` event every interval on the stream (zero: none)
    pub heartbeat_interval: Duration,
    /// `--resync-interval`: the resync of the start again every interval while connected (zero:
    /// off; see `periodic_resync`)
    pub resync_interval: Duration,
    /// Where the cluster's Kubernetes version is read (`None`: reported as unknown).
    pub kube_version: Option<KubeVersionSource>,
    /// `--source-uid-mismatch-policy`
    pub mismatch_policy: argocd_pull_agent_core::policy::MismatchPolicy,
    /// `--adoption-policy`
    pub adoption_policy: argocd_pull_agent_core::policy::AdoptionPolicy,
    /// `--on-application-recreate`
    pub on_recreate: argocd_pull_agent_core::policy::RecreateAction,
    /// `--insecure-plaintext`: dial the principal over plain HTTP/2 (a service-mesh sidecar
    /// provides mTLS and the identity header); `tls` is not used.
    pub insecure_plaintext: bool,
    /// `--enable-websocket`: every call goes over a WebSocket (HTTP/1.1 proxies in between).
    pub enable_websocket: bool,
    /// The login method (`mtls`, or `header` with `--creds header:`).
    pub auth_method: String,
    /// Answer resource requests (the peer's `--enable-resource-proxy`, default true).
    pub enable_resource_proxy: bool,
    /// The agent's own API server for resource requests (`None`: requests are answered 403).
    pub resource_proxy: Option<ResourceProxyClient>,
    /// The peer's rule: serve only resources Argo CD manages (and list only events).
    pub resource_proxy_managed_only: bool,
    /// The local Argo CD's Redis (managed mode: its cluster info goes to the principal).
    pub local_redis: Option<LocalRedis>,
    /// The local Argo CD's Redis the principal's Redis proxy reads live state from (`None`:
    /// redis requests are answered with an error).
    pub redis_proxy: Option<LocalRedisProxy>,
    /// How often the cluster cache info is sent (the peer's `--cache-refresh-interval`).
    pub cache_refresh_interval: Duration,
    /// `--informer-sync-timeout`: the initial list of the local Applications, AppProjects,
    /// repositories and GPG keys and their watches must be in place within this time, else the
    /// agent does not start (peer: `EnsureSynced(informerSyncTimeout)`).
    pub informer_sync_timeout: Duration,
    /// `--destination-based-mapping` (managed only): the principal's Applications keep their
    /// namespace here (see [`mapping`](super::mapping)).
    pub destination_based_mapping: bool,
    /// `--create-namespace` (with mapping): create an Application's missing namespace.
    pub create_namespace: bool,
    /// `--allowed-namespaces` (with mapping): namespaces besides `namespace` Applications may
    /// be written in (globs or `/regex/`).
    pub allowed_namespaces: Vec<String>,
    /// `--buffer-informer-event-interval`: updates of one local Application are handled at
    /// most once per interval, the latest one winning (zero: unbuffered; see [`update_buffer`](super::update_buffer)).
    pub informer_event_buffer_interval: Duration,
}

impl AgentConfig {
    pub fn new(principal: SocketAddr, tls: TlsMaterial, mode: Mode) -> Self {
        Self {
            principal,
            server_name: "localhost".into(),
            tls,
            allow_tls12: false,
            cipher_suites: None,
            insecure_tls: false,
            mode,
            namespace: "argocd".into(),
            version: argocd_pull_agent_core::VERSION.into(),
            max_event_size: argocd_pull_agent_core::DEFAULT_MAX_EVENT_SIZE,
            queue_capacity: argocd_pull_agent_core::DEFAULT_QUEUE_CAPACITY,
            recv_queue_size: argocd_pull_agent_core::env_tuning::DEFAULT_RECV_QUEUE_SIZE,
            concurrency: argocd_pull_agent_core::DEFAULT_CONCURRENCY,
            compression: false,
            keepalive_interval: Duration::from_secs(30),
            login_timeout: Duration::from_secs(30),
            backoff: Backoff::default(),
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(30),
            heartbeat_interval: Duration::ZERO,
            resync_interval: Duration::ZERO,
            kube_version: None,
            mismatch_policy: Default::default(),
            adoption_policy: Default::default(),
            on_recreate: Default::default(),
            insecure_plaintext: false,
            enable_websocket: false,
            auth_method: "mtls".into(),
            enable_resource_proxy: true,
            resource_proxy: None,
            resource_proxy_managed_only: false,
            local_redis: None,
            redis_proxy: None,
            cache_refresh_interval: Duration::from_secs(10),
            informer_sync_timeout: Duration::from_secs(30),
            destination_based_mapping: false,
            create_namespace: false,
            allowed_namespaces: Vec::new(),
            informer_event_buffer_interval: Duration::ZERO,
        }
    }
}
