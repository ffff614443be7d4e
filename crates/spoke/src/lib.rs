//! The agent: dials the principal, authenticates, keeps one event stream, reconnects with backoff,
//! and keeps the local Argo CD namespace in sync (managed: replica; autonomous: source of truth).

mod agent_info;
mod application;
mod appproject;
mod cache_info;
mod config;
mod connect;
mod handler;
mod logs;
pub mod mapping;
mod periodic_resync;
mod podstream;
mod redis_proxy;
mod repository;
mod resource;
mod resource_scope;
mod resync;
mod send;
mod terminal;
pub mod update_buffer;
mod watch;

pub use agent_info::KubeVersionSource;
use application::strip_local;
use appproject::strip_project;
pub use cache_info::LocalRedis;
pub use config::AgentConfig;
pub use redis_proxy::{LocalRedisProxy, LocalRedisTls};
pub use resource::ResourceProxyClient;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::queue::SendQueue;
use argocd_pull_agent_core::session::Outbox;
use argocd_pull_agent_core::store::{Kind, Store};
use argocd_pull_agent_core::tls::{self, TlsMaterial};

/// The agent's queues in `<prefix>_workqueue_*{queue}`: the peer's queue pair `default`.
pub const SEND_QUEUE: &str = "default-send";
pub const RECV_QUEUE: &str = "default-recv";

struct Inner {
    cfg: AgentConfig,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    queue: Arc<SendQueue>,
    source: Mutex<String>,
    /// managed: principal copies (local form) by name
    copies: Mutex<HashMap<String, Arc<Value>>>,
    /// last sent status hash (managed) / object hash (autonomous) by name
    sent: Mutex<HashMap<String, String>>,
    /// local objects by name (kept by the local watcher)
    cache: Mutex<HashMap<String, Arc<Value>>>,
    connected: AtomicBool,
    locks: o::KeyedLocks,
    last_error: Mutex<Option<String>>,
    connected_tx: tokio::sync::watch::Sender<u64>,
    /// managed: AppProjects the principal gave us (local form) by name
    proj_copies: Mutex<HashMap<String, Value>>,
    /// autonomous: last sent AppProject hash by name
    proj_sent: Mutex<HashMap<String, String>>,
    /// local AppProjects by name (kept by the local project watcher)
    proj_cache: Mutex<HashMap<String, Arc<Value>>>,
    /// managed: repository Secrets and the GPG keys ConfigMap the principal gave us (local
    /// form) by queue key (`repository/<name>`, `gpgkey/<name>`)
    data_copies: Mutex<HashMap<String, Value>>,
    /// managed: Applications the principal marked for deletion (deletionTimestamp) that we are
    /// deleting locally; `delete` is reported once the local object is gone
    deleting: Mutex<std::collections::HashSet<String>>,
    /// the resync requests of this process went out (the peer's `resyncedOnStart`): they are sent
    /// on the first stream only
    resynced_on_start: AtomicBool,
    /// the live stream's direct sender (periodic cluster cache info goes here)
    outbox: Mutex<Option<Outbox>>,
    /// slots for resource requests performed at once
    resource_requests: Arc<tokio::sync::Semaphore>,
    /// container logs and web terminals: the principal connection and requests in flight
    pod_streams: podstream::PodStreams,
    /// the Redis proxy's local connections and subscriptions
    redis: redis_proxy::RedisState,
    /// the principal's namespace from the last login (`AuthResponse.principalNamespace`)
    principal_ns: Mutex<String>,
    /// the cluster's Kubernetes version as last read (`None`: not read yet)
    kube_version: Mutex<Option<Result<String, String>>>,
    /// the local Argo CD's cache counts as last read (the peer's three fields)
    cache_counts: Mutex<Option<Value>>,
    /// the extensions the principal of the current stream understands
    principal_features: Mutex<agent_info::Features>,
}

/// A running agent.
pub struct Agent {
    inner: Arc<Inner>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// the TLS configuration of the next connection attempt ([`Agent::reload_tls`])
    client_tls: Arc<Mutex<Option<Arc<rustls::ClientConfig>>>>,
}

impl Agent {
    /// Starts the local watcher and the connection loop.
    pub async fn start(
        cfg: AgentConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Agent> {
        if cfg.destination_based_mapping && cfg.mode == Mode::Autonomous {
            anyhow::bail!(
                "destination-based mapping is not supported for autonomous agents: remove --destination-based-mapping (ARGOCD_AGENT_DESTINATION_BASED_MAPPING) or run the agent in managed mode"
            );
        }
        if cfg.create_namespace && !cfg.destination_based_mapping {
            anyhow::bail!(
                "cannot create namespaces if destination based mapping is disabled: remove --create-namespace (ARGOCD_AGENT_CREATE_NAMESPACE) or add --destination-based-mapping"
            );
        }
        let client_tls = match cfg.insecure_plaintext {
            true => None,
            false => Some(Arc::new(tls::client_config_opts(
                &cfg.tls,
                cfg.allow_tls12,
                cfg.cipher_suites.as_deref(),
                cfg.insecure_tls,
            )?)),
        };
        let client_tls = Arc::new(Mutex::new(client_tls));
        // the peer's queue pair `default` (agent/agent.go `defaultQueueName`)
        let queue = Arc::new(
            SendQueue::new(cfg.queue_capacity, cfg.backoff)
                .with_workqueue(metrics.workqueues.queue(SEND_QUEUE)),
        );
        metrics.workqueues.queue(RECV_QUEUE);
        let inner = Arc::new(Inner {
            cfg: cfg.clone(),
            store,
            metrics,
            queue: queue.clone(),
            source: Mutex::new("agent".into()),
            copies: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
            cache: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            locks: o::KeyedLocks::default(),
            last_error: Mutex::new(None),
            connected_tx: tokio::sync::watch::channel(0).0,
            proj_copies: Mutex::new(HashMap::new()),
            proj_sent: Mutex::new(HashMap::new()),
            proj_cache: Mutex::new(HashMap::new()),
            data_copies: Mutex::new(HashMap::new()),
            deleting: Mutex::new(Default::default()),
            resynced_on_start: AtomicBool::new(false),
            outbox: Mutex::new(None),
            resource_requests: Arc::new(tokio::sync::Semaphore::new(resource::CONCURRENT_REQUESTS)),
            pod_streams: Default::default(),
            redis: Default::default(),
            principal_ns: Mutex::new(String::new()),
            kube_version: Mutex::new(None),
            cache_counts: Mutex::new(None),
            principal_features: Mutex::new(Default::default()),
        });
        let me = Arc::downgrade(&inner);
        queue.set_regenerate(Arc::new(move |key: &str| {
            me.upgrade().map(|m| m.regenerate(key)).unwrap_or_default()
        }));
        let deadline = tokio::time::Instant::now() + cfg.informer_sync_timeout;
        let sync = cfg.informer_sync_timeout;
        if cfg.mode == Mode::Managed {
            // what the principal last gave us survives an agent restart in the local objects
            // (with destination-based mapping: in every namespace)
            let apps = tokio::time::timeout_at(
                deadline,
                inner.store.list(Kind::Application, inner.app_scope()),
            )
            .await
            .map_err(|_| not_synced("Application", sync))??;
            for obj in apps {
                if !o::source_uid(&obj).is_empty() {
                    inner
                        .copies
                        .lock()
                        .expect("poisoned")
                        .insert(inner.lkey(&obj), Arc::new(strip_local(&obj)));
                }
            }
            match tokio::time::timeout_at(
                deadline,
                inner.store.list(Kind::AppProject, Some(&cfg.namespace)),
            )
            .await
            .map_err(|_| not_synced("AppProject", sync))?
            {
                Ok(list) => {
                    for p in list.iter().filter(|p| !o::source_uid(p).is_empty()) {
                        inner
                            .proj_copies
                            .lock()
                            .expect("poisoned")
                            .insert(o::name(p).to_string(), strip_project(p));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "listing local AppProjects failed"),
            }
            for dk in argocd_pull_agent_core::repository::DataKind::ALL {
                match tokio::time::timeout_at(
                    deadline,
                    inner.store.list(dk.kind(), Some(&cfg.namespace)),
                )
                .await
                .map_err(|_| not_synced(dk.kind().as_str(), sync))?
                {
                    Ok(list) => {
                        for r in list
                            .iter()
                            .filter(|r| dk.selects(r) && !o::source_uid(r).is_empty())
                        {
                            inner.data_copies.lock().expect("poisoned").insert(
                                o::qkey(dk.target(), o::name(r)),
                                argocd_pull_agent_core::repository::strip_local(r, dk),
                            );
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, kind = dk.kind().as_str(), "listing local objects failed")
                    }
                }
            }
        }
        let mut tasks = Vec::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move { w.watch_local(ready_tx).await }));
        let (pready_tx, pready_rx) = tokio::sync::oneshot::channel();
        let w = inner.clone();
        tasks.push(tokio::spawn(async move {
            w.watch_local_projects(pready_tx).await
        }));
        let mut waits = vec![("Application", ready_rx), ("AppProject", pready_rx)];
        if cfg.mode == Mode::Managed {
            for dk in argocd_pull_agent_core::repository::DataKind::ALL {
                let (rready_tx, rready_rx) = tokio::sync::oneshot::channel();
                let w = inner.clone();
                tasks.push(tokio::spawn(async move {
                    w.watch_local_data(dk, rready_tx).await
                }));
                waits.push((dk.kind().as_str(), rready_rx));
            }
        }
        for (what, rx) in waits {
            if tokio::time::timeout_at(deadline, rx).await.is_err() {
                for t in &tasks {
                    t.abort();
                }
                return Err(not_synced(what, sync));
            }
        }
        if let (Mode::Managed, Some(r)) = (cfg.mode, cfg.local_redis.clone()) {
            let w = inner.clone();
            let every = cfg.cache_refresh_interval;
            tasks.push(tokio::spawn(async move {
                w.send_cache_info_loop(r, every).await
            }));
        }
        let c = inner.clone();
        let tls_for_loop = client_tls.clone();
        tasks.push(tokio::spawn(
            async move { c.connect_loop(tls_for_loop).await },
        ));
        Ok(Agent {
            inner,
            tasks,
            client_tls,
        })
    }

    /// Replaces the client certificate, key and trusted CA bundle: the next connection uses
    /// them, the current stream is not touched. During a CA rotation give the old and the new CA
    /// together in `ca_pem`.
    pub fn reload_tls(&self, m: &TlsMaterial) -> anyhow::Result<()> {
        let mut g = self.client_tls.lock().expect("poisoned");
        if g.is_none() {
            anyhow::bail!("the agent dials plaintext (--insecure-plaintext): no TLS to reload");
        }
        *g = Some(Arc::new(tls::client_config_opts(
            m,
            self.inner.cfg.allow_tls12,
            self.inner.cfg.cipher_suites.as_deref(),
            self.inner.cfg.insecure_tls,
        )?));
        tracing::info!("agent TLS certificate and CA bundle reloaded");
        Ok(())
    }

    pub fn is_connected(&self) -> bool {
        self.inner.connected.load(Ordering::SeqCst)
    }

    /// The last connection/authentication error, if the agent is not connected.
    /// Redis subscriptions forwarded to the principal's Redis proxy.
    pub fn redis_subscriptions(&self) -> usize {
        self.inner.redis.subscriptions()
    }

    pub fn last_error(&self) -> Option<String> {
        self.inner.last_error.lock().expect("poisoned").clone()
    }

    /// Waits until the stream is up (counting connections: returns once more than `after` streams
    /// have been established).
    pub async fn wait_connected(&self, after: u64) -> u64 {
        let mut rx = self.inner.connected_tx.subscribe();
        rx.wait_for(|n| *n > after)
            .await
            .map(|v| *v)
            .unwrap_or(after)
    }

    /// Number of streams established so far.
    pub fn connections(&self) -> u64 {
        *self.inner.connected_tx.borrow()
    }

    /// Whether the send queue is empty (everything ACKed).
    pub fn idle(&self) -> bool {
        self.inner.queue.is_idle()
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.inner.metrics.clone()
    }

    pub async fn shutdown(mut self) {
        self.inner.pod_streams.abort_all();
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        self.inner.connected.store(false, Ordering::SeqCst);
        self.inner.metrics.ready.set(false);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.inner.pod_streams.abort_all();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Inner {
    /// The namespaces Applications are watched in: the agent's, or all with mapping.
    fn app_scope(&self) -> Option<&str> {
        match self.cfg.destination_based_mapping {
            true => None,
            false => Some(&self.cfg.namespace),
        }
    }

    /// The key of a local Application in the agent's maps: its name, `<ns>/<name>` with mapping.
    fn lkey(&self, obj: &Value) -> String {
        self.lkey_of(o::namespace(obj), o::name(obj))
    }

    fn lkey_of(&self, ns: &str, name: &str) -> String {
        match self.cfg.destination_based_mapping {
            true => mapping::key(ns, name),
            false => name.to_string(),
        }
    }

    /// The send-queue / lock key of a local Application.
    fn app_qkey(&self, ns: &str, name: &str) -> String {
        match self.cfg.destination_based_mapping {
            true => o::app_qkey(ns, name),
            false => name.to_string(),
        }
    }

    fn principal_ns(&self) -> String {
        self.principal_ns.lock().expect("poisoned").clone()
    }

    fn source(&self) -> String {
        self.source.lock().expect("poisoned").clone()
    }
}

/// The agent's caches did not fill in time (peer: "unable to sync <kind> informer").
fn not_synced(what: &str, within: Duration) -> anyhow::Error {
    anyhow::anyhow!(
        "unable to sync {what} informer: the local API server did not list and watch it within {within:?}; check the agent's access to it (RBAC, network) or raise --informer-sync-timeout (ARGOCD_AGENT_INFORMER_SYNC_TIMEOUT)"
    )
}
