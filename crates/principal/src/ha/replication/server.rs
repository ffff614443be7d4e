//! The replication API on the principal's gRPC port (peer: principal/apis/replication/server.go,
//! principal/auth.go `authenticateReplication`) and the HA admin API on loopback (peer:
//! principal/apis/haadmin/server.go).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::Stream;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use argocd_pull_agent_core::proto::haadminapi as admin_api;
use argocd_pull_agent_core::proto::haadminapi::ha_admin_server::HaAdmin;
use argocd_pull_agent_core::proto::replicationapi as api;
use argocd_pull_agent_core::proto::replicationapi::replication_server::Replication;

use super::{Command, Shared};

/// At most this many replicas stream at once (the peer's `MaxReplicaConnections`).
pub const MAX_REPLICAS: usize = 10;

/// The replication service (mounted on the principal's gRPC server and on the standby server).
#[derive(Clone)]
pub struct ReplicationSvc {
    pub(super) shared: Arc<Shared>,
}

impl ReplicationSvc {
    /// The peer's `authenticateReplication`: the caller's identity as the principal reads an
    /// agent's (client certificate and `--auth`), checked against
    /// `--ha-allowed-replication-clients` when that is set.
    fn authorize<T>(&self, req: &Request<T>) -> Result<String, Status> {
        let s = &self.shared;
        let identity = match &s.auth.header {
            Some(h) => req
                .metadata()
                .get(h.as_str())
                .and_then(|v| v.to_str().ok())
                .and_then(|v| s.auth.regex.captures(v))
                .and_then(|c| c.get(1))
                .map(|m| m.as_str().to_string())
                .ok_or_else(|| format!("header {h:?} missing or not matching the --auth regex")),
            None => {
                let leaf = req
                    .peer_certs()
                    .and_then(|c| c.first().cloned())
                    .ok_or_else(|| "a client certificate is required".to_string());
                leaf.and_then(|leaf| {
                    match s.auth.from_uri {
                        true => argocd_pull_agent_core::tls::identity_from_uri(
                            leaf.as_ref(),
                            &s.auth.regex,
                        ),
                        false => argocd_pull_agent_core::tls::identity_from_cert(
                            leaf.as_ref(),
                            &s.auth.regex,
                        ),
                    }
                    .map_err(|e| e.to_string())
                })
            }
        };
        let identity = identity.map_err(|e| {
            tracing::warn!(error = %e, "replication request rejected: authentication failed");
            s.metrics.ha.replication_errors.inc();
            Status::unauthenticated(format!("replication auth failed: {e}"))
        })?;
        let allowed = &s.settings.allowed_clients;
        if !allowed.is_empty() && !allowed.contains(&identity) {
            tracing::warn!(
                identity,
                allowed = ?allowed,
                "replication request rejected: identity not in allowed clients; add it to --ha-allowed-replication-clients (ARGOCD_PRINCIPAL_HA_ALLOWED_REPLICATION_CLIENTS) on this principal, or leave that empty to allow every authenticated peer"
            );
            s.metrics.ha.replication_errors.inc();
            return Err(Status::permission_denied(format!(
                "identity {identity:?} not in allowed replication clients (--ha-allowed-replication-clients on the primary)"
            )));
        }
        Ok(identity)
    }

    /// Only the active principal is a source: a replica (or a demoted primary) refuses, so that
    /// a replica's stream is up exactly while its peer is active.
    fn require_active(&self) -> Result<(), Status> {
        let st = self.shared.controller.state();
        if st.is_healthy() {
            return Ok(());
        }
        Err(Status::failed_precondition(format!(
            "this principal is not active (HA state {st}): replicate from the active principal"
        )))
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<api::ReplicatedEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Replication for ReplicationSvc {
    type SubscribeStream = EventStream;

    async fn subscribe(
        &self,
        req: Request<tonic::Streaming<api::ReplicationAck>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let who = self.authorize(&req)?;
        self.require_active()?;
        let s = self.shared.clone();
        if s.source.status().2 >= MAX_REPLICAS {
            tracing::warn!(identity = %who, "rejecting replica connection: max connections reached");
            return Err(Status::resource_exhausted(
                "max replica connections reached",
            ));
        }
        // subscribed before the replica asks for its snapshot: nothing falls in between
        let mut feed = s.source.subscribe();
        let mut acks = req.into_inner();
        let (tx, rx) = mpsc::channel::<Result<api::ReplicatedEvent, Status>>(256);
        let timeout = s.settings.initial_ack_timeout;
        tracing::info!(identity = %who, replica_id = feed.id, "replica connected for replication");
        tokio::spawn(async move {
            let id = feed.id;
            let end = async {
                // events wait until the replica has applied its snapshot (its first ACK)
                let first = match tokio::time::timeout(timeout, acks.message()).await {
                    Err(_) => {
                        let _ = tx
                            .send(Err(Status::deadline_exceeded(format!(
                                "waiting for initial ACK: timed out after {timeout:?} (raise --ha-replication-initial-ack-timeout on the primary for large snapshots)"
                            ))))
                            .await;
                        return "no initial ACK";
                    }
                    Ok(Ok(Some(a))) => a,
                    Ok(_) => return "closed before the initial ACK",
                };
                feed.acked.store(first.acked_sequence_num, Ordering::SeqCst);
                s.acked.notify_waiters();
                tracing::info!(
                    replica_id = id,
                    acked_seq = first.acked_sequence_num,
                    "replica snapshot applied, flushing buffered events"
                );
                loop {
                    tokio::select! {
                        ev = feed.rx.recv() => {
                            let Some(ev) = ev else { return "feed ended (this principal is no longer active)" };
                            feed.backlog.fetch_sub(1, Ordering::Relaxed);
                            s.metrics.ha.forwarder.queue_size.dec();
                            if tx.send(Ok((*ev).clone())).await.is_err() {
                                s.metrics.ha.forwarder.forwarding_errors.inc();
                                return "replica gone";
                            }
                            s.metrics.ha.forwarder.events_forwarded.inc();
                        }
                        a = acks.message() => match a {
                            Ok(Some(a)) => {
                                feed.acked.store(a.acked_sequence_num, Ordering::SeqCst);
                                s.acked.notify_waiters();
                            }
                            Ok(None) => return "replica closed its ACK stream",
                            Err(e) => {
                                tracing::debug!(error = %e, "ACK stream ended");
                                return "ACK stream ended";
                            }
                        },
                    }
                }
            };
            let why = end.await;
            s.source.unsubscribe(id);
            tracing::info!(
                replica_id = id,
                reason = why,
                "replica disconnected from replication"
            );
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn get_snapshot(
        &self,
        req: Request<api::SnapshotRequest>,
    ) -> Result<Response<api::ReplicationSnapshot>, Status> {
        self.authorize(&req)?;
        self.require_active()?;
        let s = &self.shared;
        tokio::time::timeout(Duration::from_secs(60), s.source.wait_synced())
            .await
            .map_err(|_| Status::unavailable("the hub watches have not synced yet; retry"))?;
        let connected = s.connected.clone();
        let snap = s.source.snapshot(&move || connected());
        Ok(Response::new(snap))
    }

    async fn status(
        &self,
        req: Request<api::StatusRequest>,
    ) -> Result<Response<api::ReplicationStatus>, Status> {
        self.authorize(&req)?;
        let (seq, pending, replicas, last) = self.shared.source.status();
        Ok(Response::new(api::ReplicationStatus {
            current_sequence_num: seq,
            pending_events: i32::try_from(pending).unwrap_or(i32::MAX),
            last_event_unix: last,
            connected_replicas: replicas as i32,
        }))
    }

    async fn confirm_missing_resources(
        &self,
        req: Request<api::ConfirmMissingResourcesRequest>,
    ) -> Result<Response<api::ConfirmMissingResourcesResponse>, Status> {
        self.authorize(&req)?;
        self.require_active()?;
        let r = req.into_inner();
        Ok(Response::new(api::ConfirmMissingResourcesResponse {
            results: self.shared.source.confirm_missing(&r),
        }))
    }
}

/// The HA admin service (`argocd-pull ctl ha`), served on `127.0.0.1:--ha-admin-port`.
#[derive(Clone)]
pub struct AdminSvc {
    pub(super) shared: Arc<Shared>,
}

/// How long `Promote` / `Demote` wait for the runner to act (a clean demote drains the
/// replicas first).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

impl AdminSvc {
    async fn command(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<String, String>>) -> Command,
    ) -> Result<String, Status> {
        let (tx, rx) = oneshot::channel();
        self.shared
            .commands
            .send(make(tx))
            .await
            .map_err(|_| Status::unavailable("the principal is shutting down"))?;
        match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(Ok(state))) => Ok(state),
            Ok(Ok(Err(refused))) => Err(Status::failed_precondition(refused)),
            Ok(Err(_)) => Err(Status::unavailable("the principal is shutting down")),
            Err(_) => Err(Status::deadline_exceeded(
                "the state change did not finish in time",
            )),
        }
    }
}

#[tonic::async_trait]
impl HaAdmin for AdminSvc {
    async fn status(
        &self,
        _r: Request<admin_api::StatusRequest>,
    ) -> Result<Response<admin_api::HaStatusResponse>, Status> {
        let s = &self.shared;
        let state = s.controller.state();
        let (last_seq, last_event) = {
            let c = s.client_status.lock().expect("poisoned");
            (c.0, c.1)
        };
        Ok(Response::new(admin_api::HaStatusResponse {
            state: state.as_str().into(),
            preferred_role: s.settings.preferred_role.as_str().into(),
            peer_address: s.settings.peer_address.clone(),
            peer_reachable: state == super::State::Replicating,
            peer_state: String::new(),
            connected_replicas: s.source.status().2 as i32,
            last_event_timestamp: last_event,
            last_sequence_num: last_seq,
            connected_agents: (s.connected)().len() as i32,
        }))
    }

    async fn promote(
        &self,
        r: Request<admin_api::PromoteRequest>,
    ) -> Result<Response<admin_api::PromoteResponse>, Status> {
        let force = r.into_inner().force;
        let state = self
            .command(|tx| Command::Promote { force, reply: tx })
            .await?;
        Ok(Response::new(admin_api::PromoteResponse { state }))
    }

    async fn demote(
        &self,
        _r: Request<admin_api::DemoteRequest>,
    ) -> Result<Response<admin_api::DemoteResponse>, Status> {
        let state = self.command(|tx| Command::Demote { reply: tx }).await?;
        Ok(Response::new(admin_api::DemoteResponse { state }))
    }
}
