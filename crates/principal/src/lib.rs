//! The principal: the hub's end of the agent protocol. A principal is one [`Inner`] shared by
//! its tasks, made of five parts, each a type of its own:
//!
//! * [`sessions`]: the agents it serves, each with its send queue and live stream
//!   ([`state::AgentState`]);
//! * [`hub_index`]: what it knows of the hub, kept by its watches: Applications ([`hub`],
//!   [`hub_shards`] with active/active), AppProjects, repository Secrets, GPG keys and the
//!   certificate blocklist ([`namespace_watch`]);
//! * [`clusters`]: what Argo CD and the hub show of each agent ([`connection`],
//!   [`cluster_info`], [`cluster_secrets`], [`status_writer`]);
//! * [`relays`]: what waits on an agent's answer: the resource proxy ([`resource_proxy`]),
//!   container logs ([`logs`]), the web terminal ([`terminal`]) and the Redis proxy
//!   ([`redis_proxy`]);
//! * [`router`]: with active/active replicas, who serves each agent ([`owners`]) and the links
//!   to the others ([`replica_link`]); the calls of an agent served elsewhere are forwarded
//!   ([`forward`], [`forward_http`], [`replica_port`]).
//!
//! The gRPC services are in [`server`]; what an agent's events do, by target, in
//! [`application`], [`appproject`] and [`repository`]; the resync in [`resync`]; destination-based
//! mapping in [`mapping`] (the rules) and [`mapping_paths`] (where they apply).

mod agents;
mod application;
mod appproject;
pub mod cluster_info;
pub mod cluster_secrets;
mod clusters;
mod config;
pub mod connection;
pub mod forward;
mod forward_http;
pub mod ha;
mod hub;
mod hub_index;
mod hub_shards;
pub mod identity;
mod inspect;
mod logs;
pub mod mapping;
mod mapping_paths;
mod namespace_watch;
pub mod owners;
pub mod redis_proxy;
mod registration;
mod relays;
mod replica_link;
mod replica_port;
mod repository;
pub mod resource_proxy;
mod resync;
mod resync_limit;
mod router;
mod server;
mod sessions;
mod state;
mod status_writer;
mod terminal;

pub use config::{DEFAULT_HEARTBEAT, ExtraServices, NamespaceCreate, PrincipalConfig};
pub use redis_proxy::RedisProxyConfig;
pub use registration::{LABEL_SELF_REGISTERED, SelfRegistration};
pub use resource_proxy::ResourceProxyConfig;
use server::Svc;
use state::{AgentState, View};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use tokio_stream::wrappers::ReceiverStream;

use argocd_pull_agent_core::auth::TokenIssuer;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::tls::{self, TlsMaterial};

pub const SOURCE: &str = "argocd-agent-principal";

struct Inner {
    cfg: PrincipalConfig,
    store: Arc<dyn Store>,
    tokens: TokenIssuer,
    identity: Regex,
    metrics: Arc<Metrics>,
    /// the agents this principal serves: their state, queues and sessions
    sessions: sessions::Sessions,
    /// what it knows of the hub, kept by its watches
    hub: hub_index::HubIndex,
    /// what Argo CD and the hub show of each agent, and the writers' queues
    clusters: clusters::Clusters,
    /// what waits on an agent's answer (resource proxy, logs, terminal, Redis)
    relays: relays::Relays,
    /// active/active replicas: who serves each agent (`None`: this principal serves every agent)
    router: Option<router::Router>,
    /// when this principal started (agents the hub shows connected must reconnect after it)
    started_at: jiff::Timestamp,
    /// cancelled when the principal stops: the event streams it serves or forwards end with
    /// [`argocd_pull_agent_core::session::stopping_status`]
    stopping: argocd_pull_ops::CancellationToken,
}

/// The principal's TLS configuration (with `--enable-websocket` it offers HTTP/1.1 too).
fn server_tls(cfg: &PrincipalConfig, m: &TlsMaterial) -> anyhow::Result<rustls::ServerConfig> {
    let mut c = tls::server_config_with(m, cfg.allow_tls12, cfg.cipher_suites.as_deref())?;
    if cfg.enable_websocket {
        argocd_pull_agent_core::ws::offer_http1(&mut c);
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
    /// the replica port's TLS configuration (active/active)
    replica_tls: Option<tokio::sync::watch::Sender<Arc<rustls::ServerConfig>>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// the gRPC server: drained on shutdown (the streams' last status reaches the agents)
    server: Option<tokio::task::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Principal {
    /// Binds, starts the hub watcher and serves.
    pub async fn start(
        cfg: PrincipalConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Principal> {
        Self::start_with(cfg, store, metrics, None).await
    }

    /// [`Principal::start`] as one of several active/active replicas: it serves the agents of
    /// the shards `owners` says it holds, forwards the others' calls to their owners and takes
    /// the other replicas' forwarded calls on `owners.replica_listen`.
    pub async fn start_sharded(
        cfg: PrincipalConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        owners: owners::Owners,
    ) -> anyhow::Result<Principal> {
        Self::start_with(cfg, store, metrics, Some(owners)).await
    }

    async fn start_with(
        cfg: PrincipalConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        owners: Option<owners::Owners>,
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
        let listener = argocd_pull_ops::net::listen(cfg.listen)
            .map_err(|e| anyhow::anyhow!("binding the agents' gRPC port {}: {e}", cfg.listen))?;
        let addr = listener.local_addr()?;
        let replica_listener = match &owners {
            Some(o) => Some(argocd_pull_ops::net::listen(o.replica_listen).map_err(|e| {
                anyhow::anyhow!(
                    "binding the replica port {} (--ha-replica-port): {e}",
                    o.replica_listen
                )
            })?),
            None => None,
        };
        let links = match &owners {
            Some(_) => Some(replica_link::Links::new(
                (!cfg.insecure_plaintext).then_some(&cfg.tls),
                cfg.heartbeat,
            )?),
            None => None,
        };
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
        let router = match (owners, links) {
            (Some(o), Some(l)) => Some(router::Router::new(o, l)),
            _ => None,
        };
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            store,
            tokens,
            identity,
            metrics: metrics.clone(),
            sessions: Default::default(),
            hub: Default::default(),
            clusters: clusters::Clusters::new(cluster_tx, status_tx),
            relays: Default::default(),
            router,
            started_at: jiff::Timestamp::now(),
            stopping: Default::default(),
        });
        let mut secrets_synced = inner.clusters.secrets_synced.subscribe();
        if let Some(c) = cfg.cluster_secrets.clone() {
            let w = inner.clone();
            tasks_pre.push(tokio::spawn(
                async move { w.watch_cluster_secrets(c.0).await },
            ));
        } else {
            inner.clusters.secrets_synced.send_replace(true);
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
            forwarded: false,
        };
        let (stx, srx) = tokio::sync::oneshot::channel::<()>();
        let routes = server::routes(&svc, &cfg, &metrics);
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
        let ws_settings = argocd_pull_agent_core::ws::server::Settings {
            keepalive_interval: cfg.heartbeat,
            keepalive_timeout,
        };
        let server = tokio::spawn(async move {
            let stop = async {
                let _ = srx.await;
            };
            // --enable-websocket: one listener for HTTP/2 and WebSocket upgrades (HTTP/1.1)
            let r = match incoming {
                Incoming::Tls(i) if ws => {
                    argocd_pull_agent_core::ws::server::serve(routes, i, ws_settings, stop).await;
                    Ok(())
                }
                Incoming::Plain(i) if ws => {
                    argocd_pull_agent_core::ws::server::serve(routes, i, ws_settings, stop).await;
                    Ok(())
                }
                Incoming::Tls(i) => router.serve_with_incoming_shutdown(i, stop).await,
                Incoming::Plain(i) => router.serve_with_incoming_shutdown(i, stop).await,
            };
            if let Err(e) = r {
                tracing::error!(error = %e, "principal gRPC server failed");
            }
        });
        tasks.push(accept_task);
        let replica_tls = match replica_listener {
            Some(l) => {
                let (tls, t) = replica_port::serve(&inner, l).await?;
                tasks.extend(t);
                tls
            }
            None => None,
        };
        if let Some(r) = &inner.router {
            let w = inner.clone();
            let mut owned = r.owners.owned();
            tasks.push(tokio::spawn(async move {
                let mut before = std::collections::BTreeSet::new();
                loop {
                    let now = owned.borrow_and_update().clone();
                    w.shards_changed(&before, &now);
                    before = now;
                    if owned.changed().await.is_err() {
                        return;
                    }
                }
            }));
        }
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
            replica_tls,
            shutdown: Some(stx),
            server: Some(server),
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
        if let (Some(rtx), Some(router)) = (&self.replica_tls, &self.inner.router) {
            rtx.send_replace(Arc::new(replica_link::server_config(m)?));
            router.reload(m)?;
        }
        tx.send_replace(Arc::new(cfg));
        tracing::info!("principal TLS certificate and client CA bundle reloaded");
        Ok(())
    }

    /// Stops serving and drops every stream.
    pub async fn shutdown(mut self) {
        self.inner.metrics.ready.set(false);
        // the event streams served and forwarded end with the stopping status
        self.inner.stopping.cancel();
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        self.inner.sessions.abort_all();
        // the server drains its connections (their last status sent), within a bound
        if let Some(mut server) = self.server.take()
            && tokio::time::timeout(DRAIN, &mut server).await.is_err()
        {
            server.abort();
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
    }
}

/// How long a stopping principal waits for its agents' connections to close.
const DRAIN: Duration = Duration::from_secs(1);

impl Drop for Principal {
    fn drop(&mut self) {
        for t in self.tasks.iter().chain(&self.server) {
            t.abort();
        }
        self.inner.sessions.abort_all();
    }
}
