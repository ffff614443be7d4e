//! The principal's settings ([`PrincipalConfig`]) and the parts of them that are types of their
//! own: more gRPC services on the agents' port, automatic creation of hub namespaces.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;

use super::redis_proxy::RedisProxyConfig;
use super::resource_proxy::ResourceProxyConfig;
use super::{cluster_secrets, registration};
use argocd_pull_agent_core::queue::Backoff;
use argocd_pull_agent_core::tls::{self, TlsMaterial};

/// The default `--heartbeat-interval` (the HTTP/2 keepalive interval the principal always had).
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(30);

/// Principal settings.
#[derive(Clone, Debug)]
pub struct PrincipalConfig {
    pub listen: SocketAddr,
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    /// `--tls-ciphersuites` (`None`: every ring suite).
    pub cipher_suites: Option<Vec<rustls::SupportedCipherSuite>>,
    pub identity_regex: String,
    /// `--auth mtls:uri:<regex>`: the regex applies to the client certificate's URI SANs (SPIFFE
    /// IDs) instead of its subject.
    pub identity_from_uri: bool,
    /// `--auth header:<name>:<regex>`: the identity comes only from this request header (set by
    /// a service-mesh sidecar that terminated the agent's mTLS); needs `insecure_plaintext`.
    pub identity_header: Option<String>,
    /// `--client-cert-subject-match`: the common name of the client certificate must equal the
    /// agent name of the access token on every authenticated call (peer: principal/auth.go
    /// `clientCertificateMatches`).
    pub client_cert_subject_match: bool,
    /// `--insecure-plaintext`: serve gRPC over plain HTTP/2 (h2c) behind a service mesh.
    pub insecure_plaintext: bool,
    /// `--enable-websocket`: the listener also takes gRPC over WebSocket (HTTP/1.1 upgrades).
    pub enable_websocket: bool,
    /// RSA PKCS#8 PEM signing key for JWTs.
    pub jwt_key_pem: String,
    /// The principal's own namespace (reported to agents).
    pub namespace: String,
    /// Version string reported to agents and required of them (string equality, as the peer).
    pub version: String,
    pub max_event_size: usize,
    pub queue_capacity: usize,
    /// `--max-events-in-flight`: events sent to one agent and not yet ACKed at most.
    pub max_in_flight: usize,
    /// Received events waiting for a handler at most (`ARGOCD_AGENT_RECV_QUEUE_SIZE`).
    pub recv_queue_size: usize,
    pub concurrency: usize,
    pub compression: bool,
    pub keepalive_min_interval: Duration,
    /// `--heartbeat-interval`: every agent connection is pinged (HTTP/2 PING) this often; an
    /// agent whose stream dropped is shown `Failed` after half of it (see [`connection`](super::connection)), and
    /// the send queues are sampled this often.
    pub heartbeat: Duration,
    /// `--resync-min-interval`: the least time between two resync rounds an agent asks for
    /// (zero: no limit; see `resync_limit`).
    pub resync_min_interval: Duration,
    /// `--publish-agent-status`: each agent's status goes on its cluster secret (needs
    /// `cluster_secrets`; see [`argocd_pull_agent_core::agent_status`]).
    pub publish_agent_status: bool,
    pub backoff: Backoff,
    /// The resource proxy (`None`: disabled, the peer's `--enable-resource-proxy=false`).
    pub resource_proxy: Option<ResourceProxyConfig>,
    /// The Redis proxy for Argo CD (`None`: disabled, the peer's `--disable-redis-proxy`).
    pub redis_proxy: Option<RedisProxyConfig>,
    /// Where agents' cluster info is written for Argo CD (`None`: kept in memory only).
    pub argocd_cache: Option<argocd_pull_agent_core::argocd_cache::ArgoCacheConfig>,
    /// Reads Argo CD cluster secrets (agent → server URL) in the principal's namespace.
    pub cluster_secrets: Option<cluster_secrets::SecretsClient>,
    /// `--enable-self-cluster-registration` (needs `cluster_secrets`).
    pub self_registration: Option<registration::SelfRegistration>,
    /// `--namespace-create-*`: create the hub namespace of an autonomous agent when its
    /// Applications arrive (`None`: never, the peer's default).
    pub namespace_create: Option<NamespaceCreate>,
    /// `--allowed-namespaces`: the hub namespaces whose Applications the principal handles
    /// (globs or `/regex/`); empty: all (**Decision**: the peer then handles none).
    pub allowed_namespaces: Vec<String>,
    /// `--destination-based-mapping`: a managed agent gets the hub Applications whose
    /// `spec.destination.name` names it, in their own namespace (see [`mapping`](super::mapping)).
    pub destination_based_mapping: bool,
    /// This principal's persistent identity (ConfigMap `argocd-agent-principal-identity`), sent
    /// as the `principaluid` extension of its events: agents tell a failover to another
    /// principal from a recreated object by it.
    pub principal_uid: Option<String>,
    /// More gRPC services on the agents' port (cross-cluster HA's replication API).
    pub extra_services: Option<ExtraServices>,
}

/// Adds gRPC services to the principal's routes.
#[derive(Clone)]
pub struct ExtraServices(
    pub(super) Arc<dyn Fn(tonic::service::Routes) -> tonic::service::Routes + Send + Sync>,
);

impl ExtraServices {
    pub fn new(
        f: impl Fn(tonic::service::Routes) -> tonic::service::Routes + Send + Sync + 'static,
    ) -> Self {
        ExtraServices(Arc::new(f))
    }
}

impl std::fmt::Debug for ExtraServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ExtraServices")
    }
}

/// Automatic creation of autonomous agents' hub namespaces (peer: `WithAutoNamespaceCreate`).
#[derive(Clone, Debug, Default)]
pub struct NamespaceCreate {
    /// Only names this regex matches (anywhere, as Go's `MatchString`); `None`: all.
    pub pattern: Option<Regex>,
    /// Labels of a created namespace.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl PrincipalConfig {
    pub fn new(listen: SocketAddr, tls: TlsMaterial, jwt_key_pem: String) -> Self {
        Self {
            listen,
            tls,
            allow_tls12: false,
            cipher_suites: None,
            identity_regex: tls::DEFAULT_IDENTITY_REGEX.into(),
            identity_from_uri: false,
            identity_header: None,
            client_cert_subject_match: false,
            insecure_plaintext: false,
            enable_websocket: false,
            jwt_key_pem,
            namespace: "argocd".into(),
            version: argocd_pull_agent_core::VERSION.into(),
            max_event_size: argocd_pull_agent_core::DEFAULT_MAX_EVENT_SIZE,
            queue_capacity: argocd_pull_agent_core::DEFAULT_QUEUE_CAPACITY,
            recv_queue_size: argocd_pull_agent_core::env_tuning::DEFAULT_RECV_QUEUE_SIZE,
            max_in_flight: argocd_pull_agent_core::queue::DEFAULT_MAX_IN_FLIGHT,
            concurrency: argocd_pull_agent_core::DEFAULT_CONCURRENCY,
            compression: false,
            keepalive_min_interval: Duration::from_secs(10),
            heartbeat: DEFAULT_HEARTBEAT,
            resync_min_interval: Duration::ZERO,
            publish_agent_status: true,
            backoff: Backoff::default(),
            namespace_create: None,
            allowed_namespaces: Vec::new(),
            destination_based_mapping: false,
            principal_uid: None,
            extra_services: None,
            resource_proxy: None,
            redis_proxy: None,
            argocd_cache: None,
            cluster_secrets: None,
            self_registration: None,
        }
    }
}
