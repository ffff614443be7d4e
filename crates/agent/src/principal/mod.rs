//! The principal: gRPC server on the hub, one send queue per agent, the hub watcher.

mod agents;
mod application;
mod appproject;
pub mod cluster_info;
pub mod cluster_secrets;
pub mod connection;
mod hub;
pub mod identity;
mod logs;
pub mod mapping;
pub mod redis_proxy;
mod registration;
mod repository;
pub mod resource_proxy;
mod resync;
mod resync_limit;
mod routing;
mod server;
mod status_writer;
mod terminal;

pub use redis_proxy::RedisProxyConfig;
pub use registration::{LABEL_SELF_REGISTERED, SelfRegistration};
pub use resource_proxy::ResourceProxyConfig;
use server::Svc;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regex::Regex;
use serde_json::Value;
use tokio_stream::wrappers::ReceiverStream;

use crate::Mode;
use crate::auth::TokenIssuer;
use crate::metrics::Metrics;
use crate::objects as o;
use crate::proto::authapi::authentication_server::AuthenticationServer;
use crate::proto::eventstreamapi::event_stream_server::EventStreamServer;
use crate::proto::versionapi::version_server::VersionServer;
use crate::queue::{Backoff, SendQueue};
use crate::store::Store;
use crate::tls::{self, TlsMaterial};

pub const SOURCE: &str = "argocd-agent-principal";

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
    /// Received events waiting for a handler at most (`ARGOCD_AGENT_RECV_QUEUE_SIZE`).
    pub recv_queue_size: usize,
    pub concurrency: usize,
    pub compression: bool,
    pub keepalive_min_interval: Duration,
    /// `--heartbeat-interval`: every agent connection is pinged (HTTP/2 PING) this often; an
    /// agent whose stream dropped is shown `Failed` after half of it (see [`connection`]), and
    /// the send queues are sampled this often.
    pub heartbeat: Duration,
    /// `--resync-min-interval`: the least time between two resync rounds an agent asks for
    /// (zero: no limit; see `resync_limit`).
    pub resync_min_interval: Duration,
    /// `--publish-agent-status`: each agent's status goes on its cluster secret (needs
    /// `cluster_secrets`; see [`crate::agent_status`]).
    pub publish_agent_status: bool,
    pub backoff: Backoff,
    /// The resource proxy (`None`: disabled, the peer's `--enable-resource-proxy=false`).
    pub resource_proxy: Option<ResourceProxyConfig>,
    /// The Redis proxy for Argo CD (`None`: disabled, the peer's `--disable-redis-proxy`).
    pub redis_proxy: Option<RedisProxyConfig>,
    /// Where agents' cluster info is written for Argo CD (`None`: kept in memory only).
    pub argocd_cache: Option<crate::argocd_cache::ArgoCacheConfig>,
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
    /// `spec.destination.name` names it, in their own namespace (see [`mapping`]).
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
    Arc<dyn Fn(tonic::service::Routes) -> tonic::service::Routes + Send + Sync>,
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
            version: crate::VERSION.into(),
            max_event_size: crate::DEFAULT_MAX_EVENT_SIZE,
            queue_capacity: crate::DEFAULT_QUEUE_CAPACITY,
            recv_queue_size: crate::env_tuning::DEFAULT_RECV_QUEUE_SIZE,
            concurrency: crate::DEFAULT_CONCURRENCY,
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

/// Hub Applications by namespace, then name, each as its JSON bytes.
type HubCache = HashMap<String, HashMap<String, Arc<[u8]>>>;

/// The cache form of a hub object: its JSON as the wire carries it (Go's encoding), so that a
/// `create` for an agent shares these bytes instead of copying and encoding the object again.
fn compact(h: &Value) -> Arc<[u8]> {
    crate::event::gojson::to_vec(h).into()
}

#[derive(Default, Clone)]
struct View {
    /// spec checksum the agent has (managed) / the agent's (autonomous)
    spec: String,
    op: String,
    status: String,
    /// autonomous: the hub form of the agent's object (what hub edits are reverted to)
    copy: Option<Value>,
    /// managed: the hub object's deletionTimestamp was sent to the agent
    deleting: bool,
    /// the refresh annotation (`argocd.argoproj.io/refresh`) last forwarded to the agent
    refresh: String,
}

struct AgentState {
    name: String,
    mode: Mutex<Mode>,
    queue: Arc<SendQueue>,
    views: Mutex<HashMap<String, View>>,
    generation: AtomicU64,
    session: Mutex<Option<(u64, tokio::task::AbortHandle)>>,
    connected: AtomicBool,
    locks: o::KeyedLocks,
    /// managed: AppProjects the agent has, by name -> hash of the agent form sent
    projects: Mutex<HashMap<String, String>>,
    /// managed: repository Secrets the agent has, by name -> hash of the form sent
    repos: Mutex<HashMap<String, String>>,
    /// managed: the GPG keys ConfigMap the agent has, by name -> hash of the form sent
    gpg: Mutex<HashMap<String, String>>,
    /// this principal process has resynced with the agent (the peer's `resyncStatus`): the resync
    /// requests go out on the first stream only
    resynced: AtomicBool,
    /// the live stream's direct sender (with its generation): resource requests go here
    outbox: Mutex<Option<(u64, crate::session::Outbox)>>,
    /// when the last resync round this agent asked for was served (`--resync-min-interval`)
    resync_round: Mutex<Option<tokio::time::Instant>>,
    /// the principal asked this managed agent for a resync round: its answer is always served
    resync_solicited: AtomicBool,
    /// destination-based mapping routes this agent's Applications (mapping on, managed); read
    /// without the mode lock (the send path runs under the views lock)
    mapped: AtomicBool,
}

struct Inner {
    cfg: PrincipalConfig,
    store: Arc<dyn Store>,
    tokens: TokenIssuer,
    identity: Regex,
    metrics: Arc<Metrics>,
    agents: Mutex<HashMap<String, Arc<AgentState>>>,
    /// hub Applications by namespace and name (kept by the hub watcher), as compact JSON: a
    /// parsed `Value` takes ~5× the bytes, and 100,000 Applications are read only to rebuild a
    /// deferred key's events
    cache: Mutex<HubCache>,
    /// hub AppProjects in the principal's namespace by name (kept by the project watcher)
    projects: Mutex<HashMap<String, Value>>,
    /// resource-proxy requests waiting for their agent's answer
    pending: resource_proxy::Pending,
    /// container-log requests and web-terminal sessions (logs.rs, terminal.rs)
    logs: logs::LogSessions,
    terminals: terminal::TerminalSessions,
    /// Redis-proxy requests waiting for their agent, and Argo CD's connections
    redis: redis_proxy::Tracker,
    /// agents whose cluster info changed, for the Argo CD cache writer
    cluster_changed: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// ... and for the hub writer (`--publish-agent-status`)
    status_changed: Option<tokio::sync::mpsc::UnboundedSender<String>>,
    /// connection state, versions and cache counts of each agent (what Argo CD and the hub show)
    clusters: Mutex<HashMap<String, cluster_info::ClusterState>>,
    /// what each agent's cluster secret shows of it (kept by the cluster-secret watch)
    hub_secrets: Mutex<HashMap<String, crate::agent_status::SecretState>>,
    /// the cluster-secret watch has its first list
    secrets_synced: tokio::sync::watch::Sender<bool>,
    /// when this principal started (agents the hub shows connected must reconnect after it)
    started_at: jiff::Timestamp,
    /// agent → server URL from Argo CD cluster secrets
    cluster_servers: Mutex<HashMap<String, String>>,
    /// hub Secrets of the principal's namespace that matter to agents, by name: repository /
    /// repo-creds Secrets and agent cluster secrets (see `crate::repository::is_watched`)
    secrets: Mutex<HashMap<String, Value>>,
    /// the GPG keys ConfigMap of the principal's namespace (at most one entry)
    gpg: Mutex<HashMap<String, Value>>,
    /// blocked client certificates (ConfigMap `argocd-agent-tls-blocklist`)
    blocklist: crate::blocklist::Blocklist,
    /// each agent's own namespace, from its `AuthRequest.agentNamespace` (peer:
    /// `setAgentNamespace`)
    agent_namespaces: Mutex<HashMap<String, String>>,
    /// destination-based mapping: the agent each hub Application was routed to
    routes: Mutex<mapping::Routes>,
}

/// The principal's TLS configuration (with `--enable-websocket` it offers HTTP/1.1 too).
fn server_tls(cfg: &PrincipalConfig, m: &TlsMaterial) -> anyhow::Result<rustls::ServerConfig> {
    let mut c = tls::server_config_with(m, cfg.allow_tls12, cfg.cipher_suites.as_deref())?;
    if cfg.enable_websocket {
        crate::ws::offer_http1(&mut c);
    }
    Ok(c)
}

/// The connections the gRPC server takes: TLS-terminated here, or plaintext behind a mesh.
enum Incoming {
    Tls(
        ReceiverStream<
            Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>, std::io::Error>,
        >,
    ),
    Plain(tokio_stream::wrappers::TcpListenerStream),
}

/// A running principal.
pub struct Principal {
    inner: Arc<Inner>,
    addr: SocketAddr,
    /// the gRPC server's TLS configuration, swapped by [`Principal::reload_tls`]
    tls: Option<tokio::sync::watch::Sender<Arc<rustls::ServerConfig>>>,
    resource_proxy_addr: Option<SocketAddr>,
    redis_proxy_addr: Option<SocketAddr>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Principal {
    /// Binds, starts the hub watcher and serves.
    pub async fn start(
        cfg: PrincipalConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Principal> {
        let identity = Regex::new(&cfg.identity_regex)
            .map_err(|e| anyhow::anyhow!("invalid identity regex: {e}"))?;
        let tokens = TokenIssuer::from_pem(&cfg.jwt_key_pem)?;
        if cfg.identity_header.is_some() != cfg.insecure_plaintext {
            anyhow::bail!(
                "header-based authentication requires --insecure-plaintext, and --insecure-plaintext requires --auth header:<name>:<regex> (no client certificate reaches a plaintext server)"
            );
        }
        let server_tls = match cfg.insecure_plaintext {
            true => None,
            false => Some(Arc::new(server_tls(&cfg, &cfg.tls)?)),
        };
        let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
        let addr = listener.local_addr()?;
        let mut tasks_pre = Vec::new();
        let (cluster_tx, cluster_rx) = match &cfg.argocd_cache {
            Some(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let publish = match (&cfg.cluster_secrets, cfg.publish_agent_status) {
            (Some(c), true) => Some(c.0.clone()),
            _ => None,
        };
        let (status_tx, status_rx) = match publish {
            Some(_) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            store,
            tokens,
            identity,
            metrics: metrics.clone(),
            agents: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            projects: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashMap::new()),
            gpg: Mutex::new(HashMap::new()),
            blocklist: Default::default(),
            pending: Default::default(),
            logs: Default::default(),
            terminals: Default::default(),
            redis: Default::default(),
            cluster_changed: cluster_tx,
            status_changed: status_tx,
            clusters: Mutex::new(HashMap::new()),
            hub_secrets: Mutex::new(HashMap::new()),
            secrets_synced: tokio::sync::watch::channel(false).0,
            started_at: jiff::Timestamp::now(),
            cluster_servers: Mutex::new(HashMap::new()),
            agent_namespaces: Mutex::new(HashMap::new()),
            routes: Mutex::new(Default::default()),
        });
        let mut secrets_synced = inner.secrets_synced.subscribe();
        if let Some(c) = cfg.cluster_secrets.clone() {
            let w = inner.clone();
            tasks_pre.push(tokio::spawn(
                async move { w.watch_cluster_secrets(c.0).await },
            ));
        } else {
            inner.secrets_synced.send_replace(true);
        }
        if let (Some(client), Some(rx)) = (publish, status_rx) {
            let w = inner.clone();
            tasks_pre.push(tokio::spawn(
                async move { w.publish_status(client, rx).await },
            ));
            let w = inner.clone();
            tasks_pre.push(tokio::spawn(async move { w.sweep_after_start().await }));
        }
        if let (Some(rx), Some(c)) = (cluster_rx, cfg.argocd_cache.clone()) {
            let w = inner.clone();
            tasks_pre.push(tokio::spawn(
                async move { w.write_cluster_info(c, rx).await },
            ));
        }
        let mut tasks = tasks_pre;
        // hub watchers (Applications, AppProjects)
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move { w.watch_hub(ready_tx).await }));
        let (pready_tx, pready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(
            async move { w.watch_projects(pready_tx).await },
        ));
        let (rready_tx, rready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(
            async move { w.watch_secrets(rready_tx).await },
        ));
        let (bready_tx, bready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(
            async move { w.watch_blocklist(bready_tx).await },
        ));
        let (gready_tx, gready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move { w.watch_gpg(gready_tx).await }));
        let _ = tokio::time::timeout(Duration::from_secs(30), ready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), pready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), rready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), gready_rx).await;
        let _ = tokio::time::timeout(Duration::from_secs(30), bready_rx).await;
        // what the hub shows of each agent is where its state starts from (a principal that
        // cannot read the cluster secrets starts without, after a while)
        if tokio::time::timeout(Duration::from_secs(10), secrets_synced.wait_for(|s| *s))
            .await
            .is_err()
        {
            tracing::warn!(
                "the Argo CD cluster secrets could not be listed within 10s: agents' states start from nothing known (check the principal's access to Secrets in its namespace)"
            );
        }

        let m = metrics.clone();
        let mut tls_tx = None;
        let (incoming, accept_task) = match server_tls {
            Some(server_tls) => {
                let (cfg_tx, cfg_rx) = tokio::sync::watch::channel(server_tls);
                tls_tx = Some(cfg_tx);
                let (rx, task) = tls::serve_tls_reloadable(
                    listener,
                    cfg_rx,
                    Arc::new(move |_| {
                        m.tls_handshake_failures.inc();
                    }),
                )
                .await;
                (Incoming::Tls(ReceiverStream::new(rx)), task)
            }
            None => {
                tracing::warn!(
                    "INSECURE: serving gRPC in plaintext (--insecure-plaintext); the service mesh must provide mTLS"
                );
                (
                    Incoming::Plain(tokio_stream::wrappers::TcpListenerStream::new(listener)),
                    tokio::spawn(async {}),
                )
            }
        };
        let svc = Svc {
            inner: inner.clone(),
        };
        let mut es = EventStreamServer::new(svc.clone())
            .max_decoding_message_size(cfg.max_event_size.saturating_mul(2).max(4096))
            .max_encoding_message_size(cfg.max_event_size.saturating_mul(2).max(4096));
        if cfg.compression {
            es = es
                .send_compressed(tonic::codec::CompressionEncoding::Gzip)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        } else {
            es = es.accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let (stx, srx) = tokio::sync::oneshot::channel::<()>();
        // every service goes into `routes`: native gRPC and --enable-websocket serve the same
        // (each in a server span per call when OTLP tracing is on, each counted in grpc_server_*)
        use crate::grpc_metrics::Metered;
        use crate::otel::grpc::add_service as add;
        let gm = &metrics.grpc;
        let routes = tonic::service::Routes::default();
        let routes = add(routes, Metered::new(VersionServer::new(svc.clone()), gm));
        let routes = add(
            routes,
            Metered::new(AuthenticationServer::new(svc.clone()), gm),
        );
        let routes = add(routes, Metered::new(es, gm));
        let routes = add(
            routes,
            Metered::new(
                crate::proto::logstreamapi::log_stream_service_server::LogStreamServiceServer::new(
                    svc.clone(),
                ),
                gm,
            ),
        );
        let routes = add(
            routes,
            Metered::new(
                crate::proto::terminalstreamapi::terminal_stream_service_server::TerminalStreamServiceServer::new(
                    svc.clone(),
                ),
                gm,
            ),
        );
        let routes = match &cfg.extra_services {
            Some(x) => (x.0)(routes),
            None => routes,
        };
        let ws = cfg.enable_websocket;
        let keepalive_timeout = connection::keepalive_timeout(cfg.heartbeat);
        let router = tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(cfg.heartbeat))
            .http2_keepalive_timeout(Some(keepalive_timeout))
            .add_routes(routes.clone());
        let ws_settings = crate::ws::server::Settings {
            keepalive_interval: cfg.heartbeat,
            keepalive_timeout,
        };
        tasks.push(tokio::spawn(async move {
            let stop = async {
                let _ = srx.await;
            };
            // --enable-websocket: one listener for HTTP/2 and WebSocket upgrades (HTTP/1.1)
            let r = match incoming {
                Incoming::Tls(i) if ws => {
                    crate::ws::server::serve(routes, i, ws_settings, stop).await;
                    Ok(())
                }
                Incoming::Plain(i) if ws => {
                    crate::ws::server::serve(routes, i, ws_settings, stop).await;
                    Ok(())
                }
                Incoming::Tls(i) => router.serve_with_incoming_shutdown(i, stop).await,
                Incoming::Plain(i) => router.serve_with_incoming_shutdown(i, stop).await,
            };
            if let Err(e) = r {
                tracing::error!(error = %e, "principal gRPC server failed");
            }
        }));
        tasks.push(accept_task);
        let resource_proxy_addr = match &cfg.resource_proxy {
            Some(rp) => {
                let (a, t) = resource_proxy::start(inner.clone(), rp).await?;
                tasks.extend(t);
                Some(a)
            }
            None => None,
        };
        let redis_proxy_addr = match &cfg.redis_proxy {
            Some(rp) => {
                let (a, t) = redis_proxy::start(inner.clone(), rp).await?;
                tasks.push(t);
                Some(a)
            }
            None => None,
        };
        metrics.ready.set(true);
        tracing::info!(%addr, "principal listening");
        Ok(Principal {
            inner,
            addr,
            tls: tls_tx,
            resource_proxy_addr,
            redis_proxy_addr,
            shutdown: Some(stx),
            tasks,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Drops an agent's stream (it logs in again, subject to the blocklist and the current TLS).
    pub fn disconnect_agent(&self, agent: &str) -> bool {
        self.inner.disconnect(agent)
    }

    /// Replaces the gRPC server's certificate, key and client-CA bundle: new connections use
    /// them, connected agents keep their streams. During a CA rotation give the old and the new
    /// CA together in `ca_pem` until every agent certificate is re-issued.
    pub fn reload_tls(&self, m: &TlsMaterial) -> anyhow::Result<()> {
        let Some(tx) = &self.tls else {
            anyhow::bail!(
                "the principal serves plaintext (--insecure-plaintext): no TLS to reload"
            );
        };
        let cfg = server_tls(&self.inner.cfg, m)?;
        tx.send_replace(Arc::new(cfg));
        tracing::info!("principal TLS certificate and client CA bundle reloaded");
        Ok(())
    }

    /// Where the resource proxy listens (`None`: disabled).
    pub fn resource_proxy_addr(&self) -> Option<SocketAddr> {
        self.resource_proxy_addr
    }

    /// Where the Redis proxy listens (`None`: disabled).
    pub fn redis_proxy_addr(&self) -> Option<SocketAddr> {
        self.redis_proxy_addr
    }

    /// Redis-proxy requests waiting for an agent's answer, and open Argo CD connections.
    pub fn redis_proxy_load(&self) -> (usize, usize) {
        (self.inner.redis.pending(), self.inner.redis.connections())
    }

    /// Argo CD's `ClusterInfo` for `agent` (connection state and cache counts), as the peer
    /// writes it to Argo CD's cache; `None` for an agent never seen.
    pub fn cluster_info(&self, agent: &str) -> Option<Value> {
        let s = self.inner.cluster_state(agent)?;
        Some(s.argocd_cluster_info(agent))
    }

    /// What this principal shows of `agent` on the hub (its cluster secret's annotations);
    /// `None` for an agent it knows nothing of.
    pub fn agent_status(&self, agent: &str) -> Option<crate::agent_status::AgentStatus> {
        Some(self.inner.cluster_state(agent)?.status(agent))
    }

    /// Resource-proxy requests waiting for an agent's answer.
    pub fn pending_resource_requests(&self) -> usize {
        self.inner.pending.len()
    }

    /// Container-log requests and web-terminal sessions in flight.
    pub fn log_and_terminal_sessions(&self) -> (usize, usize) {
        (self.inner.logs.len(), self.inner.terminals.len())
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    /// Agents with a live stream.
    pub fn connected_agents(&self) -> Vec<String> {
        let g = self.inner.agents.lock().expect("poisoned");
        let mut v: Vec<String> = g
            .values()
            .filter(|a| a.connected.load(Ordering::Relaxed))
            .map(|a| a.name.clone())
            .collect();
        v.sort();
        v
    }

    /// Whether an agent's send queue is empty (everything ACKed).
    pub fn agent_idle(&self, agent: &str) -> bool {
        let g = self.inner.agents.lock().expect("poisoned");
        g.get(agent).is_none_or(|a| a.queue.is_idle())
    }

    /// One line about an agent's state here (for diagnostics: benchmarks, support).
    pub fn agent_debug(&self, agent: &str) -> String {
        let Some(a) = self.inner.agent(agent) else {
            return format!("{agent}: never seen");
        };
        let q = a.queue.stats();
        format!(
            "{agent}: mode={} connected={} generation={} session={:?} resynced={} outbox={:?} queue(pending={} inflight={} deferred={}) views={}",
            a.mode.lock().expect("poisoned").as_str(),
            a.connected.load(Ordering::SeqCst),
            a.generation.load(Ordering::SeqCst),
            a.session
                .lock()
                .expect("poisoned")
                .as_ref()
                .map(|(g, _)| *g),
            a.resynced.load(Ordering::SeqCst),
            a.outbox.lock().expect("poisoned").as_ref().map(|(g, _)| *g),
            q.pending,
            q.inflight,
            q.deferred,
            a.views.lock().expect("poisoned").len(),
        )
    }

    /// Stops serving and drops every stream.
    pub async fn shutdown(mut self) {
        self.inner.metrics.ready.set(false);
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        for a in self.inner.agents.lock().expect("poisoned").values() {
            if let Some((_, h)) = a.session.lock().expect("poisoned").take() {
                h.abort();
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for Principal {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
        if let Ok(g) = self.inner.agents.lock() {
            for a in g.values() {
                if let Some((_, h)) = a.session.lock().expect("poisoned").take() {
                    h.abort();
                }
            }
        }
    }
}
