//! Cross-cluster HA, interoperable with the peer's (argocd-agent `docs/concepts/ha.md`,
//! `pkg/ha`, `pkg/replication`, `principal/apis/{replication,haadmin}`): two principals in two
//! clusters, one active, the other a replica mirroring its hub; an operator promotes and demotes
//! them (`argocd-pull ctl ha promote|demote|status`). Agents reach whichever is active through
//! one DNS name / GSLB that follows `/healthz`.
//!
//! # States (the peer's names and moves)
//!
//! ```text
//!                 --ha-preferred-role=primary
//!   RECOVERING ─────────────────────────────────> ACTIVE  (serves agents, /healthz 200)
//!       │                                          │  ▲
//!       │ --ha-preferred-role=replica        demote│  │promote (from REPLICATING only
//!       ▼                                          ▼  │         with --force)
//!    SYNCING ── snapshot applied ──────────> REPLICATING <─── stream back ───┐
//!       │                                          │                        │
//!       │ --ha-failover-timeout without            │ stream lost            │
//!       │ reaching the peer (ours)                 ▼                        │
//!       └────────────────────────────────────> DISCONNECTED ────────────────┘
//!                                                  │ promote
//!                                                  ▼
//!                                                ACTIVE
//! ```
//!
//! `/healthz` and `/readyz` answer 200 only when ACTIVE (503 with `X-HA-State: <state>` and
//! `HA state: <state> - not accepting traffic` otherwise, as the peer), and only an ACTIVE
//! principal accepts agents: the others refuse them with `UNAVAILABLE`, which agents retry. No
//! principal ever promotes itself.
//!
//! # What runs in each state
//!
//! The public ports (agent gRPC, resource proxy, Redis proxy) are bound once, by TCP fronts
//! (the same splice as `--leader-elect`'s, `super::front`). When ACTIVE the principal runs as
//! after any start — from its hub's objects and each agent's resync — on loopback behind the
//! fronts, and its gRPC server also serves the replication API; the [`source`] watches the hub
//! and numbers every change. In every other state no principal runs (so nothing acts on a hub
//! that replication is writing): a small standby server behind the gRPC front serves the
//! replication API, which refuses to be a source (`FAILED_PRECONDITION`, naming the state), and
//! refuses agents; the replication [`client`] writes the primary's objects into this hub.
//!
//! # Replication flow (the peer's wire: `replicationapi.Replication`)
//!
//! 1. The replica dials `--ha-peer-address` (mTLS with its own principal certificate; the
//!    primary identifies it with its `--auth` rule and checks `--ha-allowed-replication-clients`).
//! 2. `Subscribe` first — the primary buffers events for it from then on — then `GetSnapshot`:
//!    every replicated object with its JSON, at sequence `n`.
//! 3. The replica writes the snapshot, asks `ConfirmMissingResources` about objects it holds
//!    from replication that the snapshot lacks (deleting those the primary says are deleted),
//!    and sends its first ACK (`n`): SYNCING/DISCONNECTED → REPLICATING. The primary waits at
//!    most `--ha-replication-initial-ack-timeout` for it.
//! 4. Events after `n` follow in sequence: CloudEvents as the principal sends them to agents
//!    (`outbound` hub objects; `inbound` status updates), written by a pool that keeps each
//!    object's order; ACKs report what is written. A gap (the primary dropped events for a slow
//!    replica) fetches a snapshot at once; a `Status` check every minute catches a stalled stream.
//! 5. The stream breaks: REPLICATING → DISCONNECTED, reconnecting with the peer's backoff (1 s,
//!    ×1.5, at most 30 s).
//!
//! # Promotion and demotion
//!
//! * `demote` (ACTIVE → REPLICATING): the principal stops (agents are dropped and reconnect
//!   elsewhere), then the primary waits until every replica has acknowledged every event (at
//!   most 10 s), ends their streams, and starts replicating from its peer. A clean switchover —
//!   `demote` on the active, then `promote` on the replica — loses nothing.
//! * `promote` (REPLICATING with `--force`, or DISCONNECTED → ACTIVE): the replica stops its
//!   client once everything received is written, then starts the principal on its hub. Agents
//!   reconnect to the same address; their resync finds the same specs (checksums match), so
//!   nothing is sent again, and the new principal's identity (`principaluid`, the ConfigMap
//!   `argocd-agent-principal-identity`) tells them to adopt the new hub UIDs in place instead of
//!   recreating their Applications (the peer's principal transition).
//! * Promoting while the stream is up (the peer is active) without `--force` is refused with the
//!   fix named.
//!
//! # With `--leader-elect`
//!
//! Refused for now (`--ha-enabled` names the alternative): both decide which process serves, and
//! a promotion would have to outlive the Lease holder that received it. Run one principal per
//! cluster with `--ha-enabled` (Kubernetes restarts it in place).

mod apply;
mod client;
mod pool;
mod server;
mod source;
mod standby;
mod state;
mod written;

pub use apply::REPLICATED;
pub use client::split_host_port;
pub use source::SUBSCRIBER_BACKLOG;
pub use state::{
    Controller, PreferredRole, Refused, State, check_demote, check_promote, valid_transition,
};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argocd_pull_ops::CancellationToken;
use regex::Regex;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::{Principal, PrincipalConfig};
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::proto::haadminapi::ha_admin_server::HaAdminServer;
use argocd_pull_agent_core::proto::replicationapi::replication_server::ReplicationServer;
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::tls::TlsMaterial;

use super::{Listener, View};

/// The peer's default `--ha-admin-port`.
pub const DEFAULT_ADMIN_PORT: u16 = 8405;
/// The peer's default `--ha-failover-timeout`.
pub const DEFAULT_FAILOVER_TIMEOUT: Duration = Duration::from_secs(30);
/// The peer's default `--ha-replication-initial-ack-timeout`.
pub const DEFAULT_INITIAL_ACK_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a demote waits for the replicas to acknowledge everything.
const DRAIN: Duration = Duration::from_secs(10);
/// A demote's drain ends once nothing new was numbered for this long (the hub watch has
/// delivered the stopped principal's last writes).
const QUIET: Duration = Duration::from_millis(500);

/// `--ha-*` settings.
#[derive(Clone, Debug)]
pub struct Settings {
    pub preferred_role: PreferredRole,
    /// `--ha-peer-address` (required for a replica).
    pub peer_address: String,
    pub failover_timeout: Duration,
    /// Where the HA admin API listens (the peer: `127.0.0.1:--ha-admin-port`).
    pub admin_addr: SocketAddr,
    pub allowed_clients: Vec<String>,
    pub initial_ack_timeout: Duration,
}

impl Settings {
    /// The peer's `Options.Validate`, with the fix named.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.preferred_role == PreferredRole::Replica && self.peer_address.is_empty() {
            anyhow::bail!(
                "--ha-enabled with --ha-preferred-role=replica needs --ha-peer-address (host:port of the primary principal's gRPC port): peer address is required for replica role"
            );
        }
        if !self.peer_address.is_empty() {
            split_host_port(&self.peer_address)?;
        }
        Ok(())
    }
}

/// How the principal identifies callers (`--auth`), for the replication API.
pub(crate) struct Auth {
    pub regex: Regex,
    pub from_uri: bool,
    pub header: Option<String>,
}

/// An operator's request, carried out by the runner.
pub(crate) enum Command {
    Promote {
        force: bool,
        reply: oneshot::Sender<Result<String, String>>,
    },
    Demote {
        reply: oneshot::Sender<Result<String, String>>,
    },
}

/// What the services share.
pub(crate) struct Shared {
    pub controller: Controller,
    pub source: Arc<source::Source>,
    pub settings: Settings,
    pub auth: Auth,
    pub metrics: Arc<Metrics>,
    /// agents connected to the running principal
    pub connected: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
    /// the replica's last sequence received and when (unix seconds)
    pub client_status: Mutex<(u64, i64)>,
    pub commands: mpsc::Sender<Command>,
    /// a replica acknowledged something
    pub acked: Notify,
}

/// What one HA principal runs with besides its settings.
pub struct Node {
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    /// Re-read TLS material (certificate rotation).
    pub tls: Option<watch::Receiver<TlsMaterial>>,
    /// Every state change.
    pub state: Option<watch::Sender<State>>,
}

/// The `/healthz` verdict of a state (the peer's `HAHealthzHandler`).
fn gate(s: State) -> argocd_pull_ops::admin::Gate {
    argocd_pull_ops::admin::Gate {
        healthy: s.is_healthy(),
        headers: vec![("X-HA-State".into(), s.as_str().into())],
        body: format!("HA state: {s} - not accepting traffic\n"),
    }
}

fn loopback(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(_) => ([127, 0, 0, 1], 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::LOCALHOST, 0).into(),
    }
}

/// The principal as one of a cross-cluster pair, until `shutdown`.
pub async fn run(
    settings: Settings,
    cfg: PrincipalConfig,
    node: Node,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    settings.validate()?;
    let Node {
        store,
        metrics,
        mut tls,
        state: state_out,
    } = node;
    // every public port and the admin port are bound before anything starts
    let mut public = vec![(Listener::Grpc, cfg.listen)];
    let mut local_cfg = cfg.clone();
    local_cfg.listen = loopback(cfg.listen);
    if let Some(rp) = local_cfg.resource_proxy.as_mut() {
        public.push((Listener::ResourceProxy, rp.listen));
        rp.listen = loopback(rp.listen);
    }
    if let Some(rp) = local_cfg.redis_proxy.as_mut() {
        public.push((Listener::Redis, rp.listen));
        rp.listen = loopback(rp.listen);
    }
    let mut listeners = Vec::new();
    for (kind, addr) in public {
        let l = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("binding {kind:?} on {addr}: {e}"))?;
        tracing::info!(listener = ?kind, addr = %l.local_addr()?, "HA front listening");
        listeners.push((kind, l));
    }
    let admin_listener = tokio::net::TcpListener::bind(settings.admin_addr)
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "failed to listen on admin port {}: {e} (set --ha-admin-port to a free port)",
                settings.admin_addr
            )
        })?;
    let admin_addr = admin_listener.local_addr()?;

    let (commands_tx, mut commands) = mpsc::channel(8);
    let controller = Controller::new(metrics.clone(), &settings.peer_address);
    let principal: Arc<Mutex<Option<Arc<Principal>>>> = Arc::default();
    let connected = {
        let p = principal.clone();
        Arc::new(move || {
            p.lock()
                .expect("poisoned")
                .as_ref()
                .map(|p| p.connected_agents())
                .unwrap_or_default()
        })
    };
    let auth = Auth {
        regex: Regex::new(&cfg.identity_regex)
            .map_err(|e| anyhow::anyhow!("invalid identity regex: {e}"))?,
        from_uri: cfg.identity_from_uri,
        header: cfg.identity_header.clone(),
    };
    let shared = Arc::new(Shared {
        controller: controller.clone(),
        source: source::Source::new(metrics.clone(), &cfg.namespace),
        settings: settings.clone(),
        auth,
        metrics: metrics.clone(),
        connected,
        client_status: Mutex::new((0, 0)),
        commands: commands_tx,
        acked: Notify::new(),
    });
    // the replication API on the principal's own gRPC server
    let svc = server::ReplicationSvc {
        shared: shared.clone(),
    };
    // (counted in grpc_server_*, as the peer's interceptors count it)
    let grpc_metrics = metrics.grpc.clone();
    local_cfg.extra_services = Some(crate::ExtraServices::new(move |routes| {
        routes.add_service(argocd_pull_agent_core::grpc_metrics::Metered::new(
            ReplicationServer::new(svc.clone())
                .max_encoding_message_size(usize::MAX)
                .max_decoding_message_size(usize::MAX),
            &grpc_metrics,
        ))
    }));

    let fronts = CancellationToken::new();
    let (view_tx, view_rx) = watch::channel(View::default());
    let me: Arc<str> = "ha-enabled".into();
    let mut tasks = Vec::new();
    for (kind, l) in listeners {
        tasks.push(tokio::spawn(super::front::serve(
            l,
            kind,
            me.clone(),
            view_rx.clone(),
            fronts.clone(),
        )));
    }
    let admin = tonic::transport::Server::builder()
        .add_service(HaAdminServer::new(server::AdminSvc {
            shared: shared.clone(),
        }))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(admin_listener),
            fronts.clone().cancelled_owned(),
        );
    tasks.push(tokio::spawn(async move {
        if let Err(e) = admin.await {
            tracing::error!(error = %e, "HA admin gRPC server error");
        }
    }));
    tracing::info!(addr = %admin_addr, "starting HA admin gRPC server");

    let mut runner = Runner {
        shared: shared.clone(),
        cfg: local_cfg,
        store,
        metrics: metrics.clone(),
        view: view_tx,
        principal,
        source_task: None,
        standby: None,
        client: None,
    };
    // RECOVERING → the preferred role's state
    let first = settings.preferred_role.initial_state();
    tracing::info!(
        preferred_role = settings.preferred_role.as_str(),
        "starting HA controller"
    );
    let mut states = controller.subscribe();
    let publish = |s: State| {
        metrics.ready.set_gate(Some(gate(s)));
        metrics.ready.set(true);
        if let Some(tx) = &state_out {
            tx.send_replace(s);
        }
    };
    publish(State::Recovering);
    let result = async {
        runner.enter(first).await?;
        controller.transition(first);
        if first == State::Syncing {
            runner.arm_failover_timeout();
        }
        loop {
            publish(*states.borrow_and_update());
            let tls_changed = async {
                match tls.as_mut() {
                    Some(t) => t.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = states.changed() => {}
                c = commands.recv() => match c {
                    Some(Command::Promote { force, reply }) => {
                        // checked again under the controller's lock by `promote`
                        let r = match check_promote(controller.state(), force, &settings.peer_address) {
                            Err(e) => Err(e.to_string()),
                            Ok(()) => {
                                runner.leave_replica().await;
                                match controller.promote(force) {
                                    Ok(s) => match runner.enter(State::Active).await {
                                        Ok(()) => Ok(s.as_str().to_string()),
                                        Err(e) => Err(format!("promoted, but the principal did not start: {e:#}")),
                                    },
                                    Err(e) => {
                                        // the state moved meanwhile: replicate again
                                        let _ = runner.enter(controller.state()).await;
                                        Err(e.to_string())
                                    }
                                }
                            }
                        };
                        let _ = reply.send(r);
                    }
                    Some(Command::Demote { reply }) => {
                        let r = match controller.demote() {
                            Err(e) => Err(e.to_string()),
                            Ok(s) => {
                                runner.leave_active().await;
                                match runner.enter(s).await {
                                    Ok(()) => Ok(s.as_str().to_string()),
                                    Err(e) => Err(format!("demoted, but replication did not start: {e:#}")),
                                }
                            }
                        };
                        let _ = reply.send(r);
                    }
                    None => return Ok(()),
                },
                ok = tls_changed => match ok {
                    true => {
                        let m = tls.as_mut().expect("tls watched").borrow_and_update().clone();
                        runner.reload_tls(m);
                    }
                    false => tls = None,
                },
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
    }
    .await;
    runner.leave_active().await;
    runner.leave_replica().await;
    if let Some(sb) = runner.standby.take() {
        sb.shutdown().await;
    }
    fronts.cancel();
    // the public ports are free again when this returns (a restart binds them at once)
    for t in tasks {
        t.abort();
        let _ = t.await;
    }
    result
}

/// Starts and stops what each state runs.
struct Runner {
    shared: Arc<Shared>,
    cfg: PrincipalConfig,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    view: watch::Sender<View>,
    principal: Arc<Mutex<Option<Arc<Principal>>>>,
    source_task: Option<tokio::task::JoinHandle<()>>,
    standby: Option<standby::Standby>,
    client: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>,
}

impl Runner {
    /// Starts what `s` runs.
    async fn enter(&mut self, s: State) -> anyhow::Result<()> {
        if s == State::Active {
            if self.source_task.is_none() {
                let src = self.shared.source.clone();
                self.source_task = Some(tokio::spawn(src.run(self.store.clone())));
            }
            if self.principal.lock().expect("poisoned").is_none() {
                let t0 = Instant::now();
                let p =
                    Principal::start(self.cfg.clone(), self.store.clone(), self.metrics.clone())
                        .await?;
                let mut local = HashMap::from([(Listener::Grpc, p.local_addr())]);
                if let Some(a) = p.resource_proxy_addr() {
                    local.insert(Listener::ResourceProxy, a);
                }
                if let Some(a) = p.redis_proxy_addr() {
                    local.insert(Listener::Redis, a);
                }
                *self.principal.lock().expect("poisoned") = Some(Arc::new(p));
                self.view.send_modify(|v| v.local = Some(local));
                if let Some(sb) = self.standby.take() {
                    sb.shutdown().await;
                }
                tracing::info!(took = ?t0.elapsed(), "HA: this principal is ACTIVE: serving agents");
            }
            return Ok(());
        }
        if self.standby.is_none() {
            let sb =
                standby::Standby::start(self.shared.clone(), &self.cfg, self.cfg.listen).await?;
            self.view
                .send_modify(|v| v.local = Some(HashMap::from([(Listener::Grpc, sb.addr)])));
            self.standby = Some(sb);
        }
        if self.client.is_none() {
            if self.shared.settings.peer_address.is_empty() {
                tracing::warn!(
                    "HA: no --ha-peer-address: this principal cannot replicate from a peer; promote it or restart it with the peer's address"
                );
            } else {
                let (stop_tx, stop_rx) = watch::channel(false);
                let ccfg = client::ClientConfig {
                    peer: self.shared.settings.peer_address.clone(),
                    tls: self.cfg.tls.clone(),
                    allow_tls12: self.cfg.allow_tls12,
                    backoff_initial: Duration::from_secs(1),
                    backoff_max: Duration::from_secs(30),
                    backoff_factor: 1.5,
                    ack_interval: Duration::from_secs(5),
                    reconcile_interval: Duration::from_secs(60),
                    principal_ns: self.cfg.namespace.clone(),
                };
                tracing::info!(peer = %ccfg.peer, "HA: starting replication client");
                let t = tokio::spawn(client::run(
                    self.shared.clone(),
                    ccfg,
                    self.store.clone(),
                    stop_rx,
                ));
                self.client = Some((stop_tx, t));
            }
        }
        Ok(())
    }

    /// A replica stops replicating (everything received is written when this returns).
    async fn leave_replica(&mut self) {
        if let Some((stop, t)) = self.client.take() {
            let _ = stop.send(true);
            let _ = t.await;
            self.shared.metrics.ha.client.connected.set(0);
            tracing::info!("HA: replication client stopped");
        }
    }

    /// The active principal stops serving, then lets its replicas catch up and ends their
    /// streams.
    async fn leave_active(&mut self) {
        let p = self.principal.lock().expect("poisoned").take();
        if let Some(p) = p {
            self.view.send_modify(|v| v.local = None);
            match Arc::try_unwrap(p) {
                Ok(p) => p.shutdown().await,
                Err(p) => drop(p),
            }
            tracing::info!("HA: principal stopped; draining the replicas");
        }
        if let Some(t) = self.source_task.take() {
            let src = &self.shared.source;
            let deadline = tokio::time::Instant::now() + DRAIN;
            let mut last_seq = src.sequence();
            let mut quiet_since = tokio::time::Instant::now();
            loop {
                let now = tokio::time::Instant::now();
                let seq = src.sequence();
                if seq != last_seq {
                    last_seq = seq;
                    quiet_since = now;
                }
                if (src.all_acked() && now - quiet_since >= QUIET) || now >= deadline {
                    break;
                }
                let acked = self.shared.acked.notified();
                let _ = tokio::time::timeout(Duration::from_millis(100), acked).await;
            }
            if !src.all_acked() {
                let (seq, pending, _, _) = src.status();
                tracing::warn!(
                    sequence = seq,
                    pending,
                    "HA: replicas did not acknowledge everything within {DRAIN:?}; they fetch a snapshot when they reconnect"
                );
            }
            src.disconnect_all();
            t.abort();
        }
    }

    fn arm_failover_timeout(&self) {
        let c = self.shared.controller.clone();
        let t = self.shared.settings.failover_timeout;
        let peer = self.shared.settings.peer_address.clone();
        tokio::spawn(async move {
            tokio::time::sleep(t).await;
            if c.state() == State::Syncing {
                tracing::warn!(%peer, timeout = ?t, "HA: the peer has not been reached since start; counting it as unreachable (it can be promoted now)");
                c.on_peer_unreachable();
            }
        });
    }

    fn reload_tls(&mut self, m: TlsMaterial) {
        if let Some(p) = self.principal.lock().expect("poisoned").as_ref()
            && let Err(e) = p.reload_tls(&m)
        {
            tracing::warn!(error = %format!("{e:#}"), "reloading TLS material failed; keeping the current one");
            return;
        }
        self.cfg.tls = m;
    }
}
