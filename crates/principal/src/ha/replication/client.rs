//! The replica's side of replication (peer: pkg/replication/client.go, the handlers in
//! principal/ha_integration.go): subscribe, fetch and apply the snapshot, acknowledge it, then
//! apply every event, acknowledging what is written.
//!
//! Events are written by a pool of workers; all events of one object go to the same worker, so
//! each object's changes land in order while different objects are written in parallel (a real
//! API server takes a few milliseconds per write; one at a time would cap replication far below
//! 1,000 changes/s). A worker that falls behind collapses the queued changes of one object into
//! the newest ([`coalesce`]). The acknowledged sequence is the highest one below which everything is
//! written. A sequence gap (the primary dropped events for a slow replica) or a write given up
//! makes the replica fetch a new snapshot at once (the peer waits for its next minute tick).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use argocd_pull_agent_core::event::{Event, SdkEvent};
use argocd_pull_agent_core::proto::replicationapi as api;
use argocd_pull_agent_core::proto::replicationapi::replication_client::ReplicationClient;
use argocd_pull_agent_core::store::{Store, StoreError};
use argocd_pull_agent_core::tls::TlsMaterial;

use super::Shared;
use super::apply::{self, REPLICATED, Write, Writer};
use super::pool::{Pool, now_unix};
use super::source::RKind;

/// The replica's settings.
#[derive(Clone)]
pub struct ClientConfig {
    /// `--ha-peer-address` (`host:port` of the primary's gRPC port).
    pub peer: String,
    /// This principal's certificate and key (the client certificate, as the peer's) and its CA.
    pub tls: TlsMaterial,
    pub allow_tls12: bool,
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    pub backoff_factor: f64,
    /// Periodic ACKs (the peer's 5 s); ACKs also go out as soon as the written sequence moves.
    pub ack_interval: Duration,
    /// The peer's periodic `Status` check (1 min).
    pub reconcile_interval: Duration,
    /// The principal's namespace (where autonomous agents' AppProjects live).
    pub principal_ns: String,
}

/// Why a replication stream ended.
#[derive(Debug)]
enum End {
    /// Asked to stop (promotion, shutdown): everything received is written.
    Stopped,
    Failed(anyhow::Error),
}

/// Runs until `stop` turns true: connects (with the peer's backoff), replicates, reconnects.
/// Every event received before the stop is written when this returns.
pub async fn run(
    shared: Arc<Shared>,
    cfg: ClientConfig,
    store: Arc<dyn Store>,
    mut stop: watch::Receiver<bool>,
) {
    let writer = Writer::new(store.clone(), shared.metrics.clone());
    let mut backoff = cfg.backoff_initial;
    loop {
        if *stop.borrow() {
            return;
        }
        match replicate(&shared, &cfg, &writer, &mut stop).await {
            End::Stopped => return,
            End::Failed(e) => {
                shared.controller.on_replication_disconnected();
                shared.metrics.ha.client.connected.set(0);
                shared.metrics.ha.client.reconnect_attempts.inc();
                tracing::warn!(peer = %cfg.peer, error = %format!("{e:#}"), ?backoff, "replication from the HA peer failed; will retry");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stopped(&mut stop) => return,
        }
        backoff = Duration::from_secs_f64(
            (backoff.as_secs_f64() * cfg.backoff_factor).min(cfg.backoff_max.as_secs_f64()),
        );
    }
}

/// Resolves once `stop` is true.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn connect(cfg: &ClientConfig) -> anyhow::Result<Channel> {
    let (host, port) = split_host_port(&cfg.peer)?;
    let addr: SocketAddr = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "HA peer {:?} cannot be resolved ({e}): check --ha-peer-address (host:port of the other principal's gRPC port)",
                cfg.peer
            )
        })?
        .next()
        .ok_or_else(|| anyhow::anyhow!("HA peer {:?} resolves to no address", cfg.peer))?;
    let tls = Arc::new(argocd_pull_agent_core::tls::client_config(
        &cfg.tls,
        cfg.allow_tls12,
    )?);
    let ep = Endpoint::from_shared(format!("http://{}", cfg.peer))?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .tcp_nodelay(true);
    ep.connect_with_connector(argocd_pull_agent_core::tls::connector(tls, addr, host.clone()))
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot reach HA peer {} ({addr}): {}; check --ha-peer-address and that the peer's certificate names {host:?} and is signed by this principal's CA",
                cfg.peer,
                chain(&e)
            )
        })
}

/// An error with its causes (tonic's transport error says only "transport error").
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `host:port` (IPv6 in brackets).
pub fn split_host_port(s: &str) -> anyhow::Result<(String, u16)> {
    let (h, p) = s.rsplit_once(':').ok_or_else(|| {
        anyhow::anyhow!(
            "--ha-peer-address {s:?} is not host:port (e.g. principal.region-b.example.com:8443)"
        )
    })?;
    let port = p
        .parse()
        .map_err(|_| anyhow::anyhow!("--ha-peer-address {s:?}: {p:?} is not a port"))?;
    let host = h.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        anyhow::bail!("--ha-peer-address {s:?} has no host");
    }
    Ok((host.to_string(), port))
}

/// Decodes a replicated event into the write it asks for.
fn write_of(ev: &api::ReplicatedEvent, principal_ns: &str) -> Result<Write, String> {
    let ce = ev
        .event
        .as_ref()
        .ok_or("replicated event without a CloudEvent")?;
    let sdk = SdkEvent::from_proto(ce).map_err(|e| e.to_string())?;
    let e = Event::from_sdk(sdk).map_err(|e| e.to_string())?;
    let Some(kind) = RKind::from_target(e.target) else {
        return Ok(Write::Skip("target not replicated"));
    };
    Ok(apply::for_event(
        kind,
        e.ty,
        ev.direction == "inbound",
        &ev.agent_name,
        &e.data,
        principal_ns,
    ))
}

async fn replicate(
    shared: &Arc<Shared>,
    cfg: &ClientConfig,
    writer: &Writer,
    stop: &mut watch::Receiver<bool>,
) -> End {
    let channel = match connect(cfg).await {
        Ok(c) => c,
        Err(e) => return End::Failed(e),
    };
    let mut client = ReplicationClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX);
    // 1. subscribe first: the primary buffers events for us from now on. The call is awaited
    //    later: a primary may send its response headers only after our first ACK.
    let (ack_tx, ack_rx) = mpsc::channel::<api::ReplicationAck>(64);
    let sub_client = client.clone();
    let subscribe = tokio::spawn(async move {
        let mut c = sub_client;
        c.subscribe(ReceiverStream::new(ack_rx)).await
    });
    struct AbortOnDrop(
        tokio::task::JoinHandle<
            Result<tonic::Response<tonic::Streaming<api::ReplicatedEvent>>, tonic::Status>,
        >,
    );
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let mut subscribe = AbortOnDrop(subscribe);
    // 2. the snapshot, written before anything else
    let pool = Pool::new(writer, shared);
    let snap_seq = match sync_snapshot(shared, cfg, writer, &mut client).await {
        Ok(s) => s,
        Err(e) => return End::Failed(e),
    };
    shared.controller.on_replication_connected();
    shared.metrics.ha.client.connected.set(1);
    // 3. the initial ACK releases the buffered events
    if ack_tx
        .send(api::ReplicationAck {
            acked_sequence_num: snap_seq,
        })
        .await
        .is_err()
    {
        return End::Failed(anyhow::anyhow!("the replication stream closed"));
    }
    let mut stream = match (&mut subscribe.0).await {
        Ok(Ok(r)) => r.into_inner(),
        Ok(Err(s)) => {
            return End::Failed(anyhow::anyhow!(
                "subscribing to the HA peer's replication stream: {}",
                describe_status(&s)
            ));
        }
        Err(e) => return End::Failed(anyhow::anyhow!("subscribe task: {e}")),
    };
    tracing::info!(peer = %cfg.peer, acked_seq = snap_seq, "subscribed to the primary's replication stream");
    // 4. events
    let mut floor = snap_seq;
    let mut expected = snap_seq + 1;
    let mut last_acked = snap_seq;
    let mut progress = pool.progress.subscribe();
    let mut ack_tick = tokio::time::interval(cfg.ack_interval);
    let mut reconcile_tick = tokio::time::interval_at(
        tokio::time::Instant::now() + cfg.reconcile_interval,
        cfg.reconcile_interval,
    );
    let mut needs_reconcile = false;
    let mut seen_since_tick = false;
    let last_seq = AtomicU64::new(snap_seq);
    let end = loop {
        if needs_reconcile || pool.failed.swap(false, Ordering::SeqCst) {
            // written state first, then the snapshot over it, then only newer events
            pool.drain().await;
            match sync_snapshot(shared, cfg, writer, &mut client).await {
                Ok(s) => {
                    shared.metrics.ha.client.reconciliations.inc();
                    floor = floor.max(s);
                    expected = expected.max(s + 1);
                    needs_reconcile = false;
                }
                Err(e) => break End::Failed(e),
            }
        }
        tokio::select! {
            m = stream.message() => match m {
                Ok(Some(ev)) => {
                    let m = &shared.metrics.ha.client;
                    m.events_received.inc();
                    seen_since_tick = true;
                    let seq = ev.sequence_num;
                    if seq <= floor {
                        continue; // already in the snapshot
                    }
                    if seq > expected {
                        tracing::warn!(expected, got = seq, "sequence gap detected, fetching a snapshot");
                        m.sequence_gaps.inc();
                        needs_reconcile = true;
                    }
                    expected = seq + 1;
                    last_seq.store(seq, Ordering::Relaxed);
                    m.last_sequence_number.set(seq as i64);
                    {
                        let mut c = shared.client_status.lock().expect("poisoned");
                        *c = (seq, now_unix());
                    }
                    match write_of(&ev, &cfg.principal_ns) {
                        Ok(w) => pool.submit(seq, w, ev.processed_at_unix).await,
                        Err(e) => {
                            m.events_errors.inc();
                            m.events_dropped.inc();
                            tracing::warn!(sequence = seq, error = %e, "undecodable replicated event dropped");
                            pool.mark.dispatched(seq);
                            pool.mark.done(seq);
                        }
                    }
                }
                Ok(None) => break End::Failed(anyhow::anyhow!("replication stream closed by the primary")),
                Err(s) => break End::Failed(anyhow::anyhow!("replication stream: {}", describe_status(&s))),
            },
            _ = progress.changed() => {
                let w = pool.mark.written(floor);
                if w > last_acked && ack_tx.try_send(api::ReplicationAck { acked_sequence_num: w }).is_ok() {
                    last_acked = w;
                }
            }
            _ = ack_tick.tick() => {
                let w = pool.mark.written(floor);
                if w > last_acked && ack_tx.send(api::ReplicationAck { acked_sequence_num: w }).await.is_ok() {
                    last_acked = w;
                }
            }
            _ = reconcile_tick.tick() => {
                // the peer's periodic check: a primary ahead of us while nothing arrives is a
                // stalled stream
                match client.status(api::StatusRequest {}).await {
                    Ok(st) => {
                        let remote = st.into_inner().current_sequence_num;
                        if remote > last_seq.load(Ordering::Relaxed) && !seen_since_tick {
                            tracing::info!(local = last_seq.load(Ordering::Relaxed), remote, "reconciling: re-fetching snapshot");
                            needs_reconcile = true;
                        }
                    }
                    Err(s) => tracing::warn!(error = %describe_status(&s), "replication status check failed"),
                }
                seen_since_tick = false;
            }
            _ = stopped(stop) => break End::Stopped,
        }
    };
    // everything received is written before the caller goes on (a promotion starts serving
    // from this hub)
    pool.drain().await;
    let w = pool.mark.written(floor);
    if w > last_acked {
        let _ = ack_tx.try_send(api::ReplicationAck {
            acked_sequence_num: w,
        });
    }
    end
}

/// A gRPC status as a sentence naming the fix where there is one.
fn describe_status(s: &tonic::Status) -> String {
    match s.code() {
        tonic::Code::PermissionDenied => format!(
            "{} — add this principal's identity to the primary's --ha-allowed-replication-clients",
            s.message()
        ),
        tonic::Code::Unauthenticated => format!(
            "{} — the primary must trust this principal's certificate (same CA) and its --auth must match it",
            s.message()
        ),
        tonic::Code::Unimplemented => format!(
            "{} — the HA peer does not serve replication: start it with --ha-enabled",
            s.message()
        ),
        tonic::Code::FailedPrecondition => s.message().to_string(),
        _ => format!("{:?}: {}", s.code(), s.message()),
    }
}

/// Fetches and writes a snapshot; returns its sequence number. Objects this hub holds from
/// replication that the snapshot lacks are confirmed with the primary and deleted when it says
/// so.
async fn sync_snapshot(
    shared: &Arc<Shared>,
    cfg: &ClientConfig,
    writer: &Writer,
    client: &mut ReplicationClient<Channel>,
) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    let m = &shared.metrics.ha.client;
    let snap = match client
        .get_snapshot(api::SnapshotRequest {
            since_sequence_num: 0,
        })
        .await
    {
        Ok(s) => s.into_inner(),
        Err(s) => {
            m.snapshot_fetch_errors.inc();
            anyhow::bail!("fetching the snapshot: {}", describe_status(&s));
        }
    };
    m.snapshot_agents.set(snap.agents.len() as i64);
    m.last_sequence_number.set(snap.last_sequence_num as i64);
    let mut writes: Vec<(RKind, Value)> = Vec::new();
    let mut bad = 0usize;
    for r in snap
        .principal_resources
        .iter()
        .chain(snap.agents.iter().flat_map(|a| a.resources.iter()))
    {
        match (
            RKind::parse(&r.kind),
            serde_json::from_slice::<Value>(&r.data),
        ) {
            (Some(k), Ok(v)) if !r.data.is_empty() => writes.push((k, v)),
            _ => {
                bad += 1;
                tracing::warn!(kind = %r.kind, name = %r.name, "HA: snapshot resource without usable data skipped");
            }
        }
    }
    let total = writes.len();
    // principal-scoped objects first (AppProjects before the Applications that use them)
    let (first, rest): (Vec<_>, Vec<_>) = writes
        .into_iter()
        .partition(|(k, _)| *k != RKind::Application);
    for batch in [first, rest] {
        let results = futures::future::join_all(batch.chunks(64).map(|chunk| async move {
            let mut errs = 0;
            for (k, v) in chunk {
                if writer.apply(&apply::for_resource(*k, v)).await.is_err() {
                    errs += 1;
                }
            }
            errs
        }))
        .await;
        bad += results.into_iter().sum::<usize>();
    }
    if bad > 0 {
        m.snapshot_apply_errors.inc();
    }
    // what this hub holds from replication but the snapshot lacks
    let missing = missing_here(writer.store.as_ref(), &snap, &cfg.principal_ns).await?;
    let mut deleted = 0;
    for (agent, resources) in missing {
        let resp = client
            .confirm_missing_resources(api::ConfirmMissingResourcesRequest {
                agent_name: agent.clone(),
                snapshot_sequence_num: snap.last_sequence_num,
                resources,
            })
            .await;
        let results = match resp {
            Ok(r) => r.into_inner().results,
            Err(s) => {
                tracing::warn!(agent, error = %describe_status(&s), "HA: failed to confirm missing snapshot resources");
                continue;
            }
        };
        for r in results {
            let Some(res) = r.resource else { continue };
            let Some(kind) = RKind::parse(&res.kind) else {
                continue;
            };
            match r.status.as_str() {
                "exists" if !res.data.is_empty() => {
                    if let Ok(v) = serde_json::from_slice::<Value>(&res.data) {
                        let _ = writer.apply(&apply::for_resource(kind, &v)).await;
                    }
                }
                "deleted" => {
                    let w = Write::Delete {
                        kind,
                        namespace: res.namespace.clone(),
                        name: res.name.clone(),
                    };
                    if writer.apply(&w).await.is_ok() {
                        deleted += 1;
                    }
                }
                other => {
                    tracing::warn!(kind = %res.kind, name = %res.name, status = other, reason = %r.reason, "HA: primary could not confirm missing resource");
                }
            }
        }
    }
    tracing::info!(
        sequence = snap.last_sequence_num,
        agents = snap.agents.len(),
        resources = total,
        deleted,
        took = ?t0.elapsed(),
        "HA: snapshot from the primary applied"
    );
    if bad > 0 {
        anyhow::bail!(
            "{bad} resources of the snapshot could not be written (see the warnings above)"
        );
    }
    Ok(snap.last_sequence_num)
}

/// Objects of this hub written by replication (annotation [`REPLICATED`]) that the snapshot does
/// not hold, per agent (principal-scoped ones under "").
async fn missing_here(
    store: &dyn Store,
    snap: &api::ReplicationSnapshot,
    principal_ns: &str,
) -> Result<Vec<(String, Vec<api::Resource>)>, StoreError> {
    use std::collections::{BTreeMap, HashSet};
    let have: HashSet<(String, String, String)> = snap
        .principal_resources
        .iter()
        .chain(snap.agents.iter().flat_map(|a| a.resources.iter()))
        .map(|r| {
            let kind = match r.kind.as_str() {
                "Repository" | "ClusterSecret" => "Secret".to_string(),
                k => k.to_string(),
            };
            (kind, r.namespace.clone(), r.name.clone())
        })
        .collect();
    let mut out: BTreeMap<String, Vec<api::Resource>> = BTreeMap::new();
    let lists = [
        (argocd_pull_agent_core::store::Kind::Application, None),
        (
            argocd_pull_agent_core::store::Kind::AppProject,
            Some(principal_ns),
        ),
        (
            argocd_pull_agent_core::store::Kind::ApplicationSet,
            Some(principal_ns),
        ),
        (
            argocd_pull_agent_core::store::Kind::Secret,
            Some(principal_ns),
        ),
    ];
    for (kind, ns) in lists {
        let items = match store.list(kind, ns).await {
            Ok(i) => i,
            Err(StoreError::NotFound) => continue,
            Err(e) if kind == argocd_pull_agent_core::store::Kind::ApplicationSet => {
                tracing::debug!(error = %e, "no ApplicationSets here");
                continue;
            }
            Err(e) => return Err(e),
        };
        for obj in items {
            if argocd_pull_agent_core::objects::annotation(&obj, REPLICATED) != Some("true") {
                continue;
            }
            let (ns, name) = (
                argocd_pull_agent_core::objects::namespace(&obj).to_string(),
                argocd_pull_agent_core::objects::name(&obj).to_string(),
            );
            if have.contains(&(kind.as_str().to_string(), ns.clone(), name.clone())) {
                continue;
            }
            let (rkind, agent) = match kind {
                argocd_pull_agent_core::store::Kind::Application => {
                    (RKind::Application, ns.clone())
                }
                argocd_pull_agent_core::store::Kind::AppProject => {
                    (RKind::AppProject, String::new())
                }
                argocd_pull_agent_core::store::Kind::ApplicationSet => {
                    (RKind::ApplicationSet, String::new())
                }
                _ => match super::source::secret_kind(&obj) {
                    Some(k) => (k, String::new()),
                    None => continue,
                },
            };
            out.entry(agent).or_default().push(api::Resource {
                name,
                namespace: ns,
                kind: rkind.as_str().into(),
                uid: argocd_pull_agent_core::objects::uid(&obj).to_string(),
                ..Default::default()
            });
        }
    }
    Ok(out.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_addresses_are_host_port() {
        assert_eq!(
            split_host_port("principal.region-b.internal:8443").unwrap(),
            ("principal.region-b.internal".into(), 8443)
        );
        assert_eq!(split_host_port("[::1]:8443").unwrap(), ("::1".into(), 8443));
        assert!(
            split_host_port("principal")
                .unwrap_err()
                .to_string()
                .contains("is not host:port")
        );
        assert!(split_host_port(":8443").is_err());
    }
}
