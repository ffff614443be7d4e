//! The peer's cross-cluster HA wire from its own proto (principal/apis/replication):
//!
//! * [`PeerPrimary`] — a primary as principal/apis/replication/server.go serves it: `Subscribe`
//!   registers a buffering adapter before anything else, waits for the replica's first ACK
//!   (then flushes what was buffered, including events at or below the snapshot), and sends
//!   every forwarded event as `format.ToProto` encodes its CloudEvent; `GetSnapshot` reports the
//!   forwarder's current sequence; `ConfirmMissingResources` answers `unknown` once the sequence
//!   moved on (its `unknownMissingResourcesResponse`), else from the known objects.
//! * [`PeerReplica`] — a replica as pkg/replication/client.go runs: `Subscribe` first, then
//!   `GetSnapshot`, the initial ACK with the snapshot's sequence, then events with gap
//!   detection and an ACK per processed event.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::Stream;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};
use tonic::{Request, Response, Status};

use crate::pb::replicationapi::{
    self as api,
    replication_client::ReplicationClient,
    replication_server::{Replication, ReplicationServer},
};
use crate::peer_agent::Tls;
use crate::sdk::{self, Event};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// A resource as the peer's `serverStateProvider` serializes it (`json.Marshal` of the object).
pub fn resource(kind: &str, obj: &Value) -> api::Resource {
    let m = &obj["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    api::Resource {
        name: s("name"),
        namespace: s("namespace"),
        kind: kind.into(),
        uid: s("uid"),
        spec_checksum: Vec::new(),
        data: sdk::go_json(obj),
    }
}

#[derive(Default)]
struct PrimaryState {
    seq: u64,
    agents: Vec<api::AgentState>,
    principal_resources: Vec<api::Resource>,
    /// the peer's buffering adapters: (buffering, buffer, sender)
    replicas: Vec<Arc<Mutex<Adapter>>>,
    /// what `ConfirmMissingResources` knows exists (kind/namespace/name → resource)
    existing: HashMap<String, api::Resource>,
}

struct Adapter {
    buffering: bool,
    buffer: Vec<api::ReplicatedEvent>,
    tx: mpsc::Sender<Result<api::ReplicatedEvent, Status>>,
}

/// A peer primary (see the module doc). Mutual TLS like the peer's gRPC server.
pub struct PeerPrimary {
    pub addr: SocketAddr,
    state: Arc<Mutex<PrimaryState>>,
    /// Every ACK received, in order.
    pub acks: Arc<Mutex<Vec<u64>>>,
    acked: watch::Sender<u64>,
    /// Every `ConfirmMissingResources` request.
    pub confirms: Arc<Mutex<Vec<api::ConfirmMissingResourcesRequest>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Clone)]
struct PrimarySvc {
    state: Arc<Mutex<PrimaryState>>,
    acks: Arc<Mutex<Vec<u64>>>,
    acked: watch::Sender<u64>,
    confirms: Arc<Mutex<Vec<api::ConfirmMissingResourcesRequest>>>,
}

fn key(r: &api::Resource) -> String {
    format!("{}/{}/{}", r.kind, r.namespace, r.name)
}

type Out = Pin<Box<dyn Stream<Item = Result<api::ReplicatedEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Replication for PrimarySvc {
    type SubscribeStream = Out;

    async fn subscribe(
        &self,
        req: Request<tonic::Streaming<api::ReplicationAck>>,
    ) -> Result<Response<Out>, Status> {
        let (tx, rx) = mpsc::channel(1024);
        let adapter = Arc::new(Mutex::new(Adapter {
            buffering: true,
            buffer: Vec::new(),
            tx,
        }));
        self.state.lock().unwrap().replicas.push(adapter.clone());
        let mut acks = req.into_inner();
        let (log, acked) = (self.acks.clone(), self.acked.clone());
        tokio::spawn(async move {
            // the first ACK flushes the buffer (server.go: adapter.Flush())
            let Ok(Some(first)) = acks.message().await else {
                return;
            };
            log.lock().unwrap().push(first.acked_sequence_num);
            acked.send_replace(first.acked_sequence_num);
            let (buffered, tx) = {
                let mut a = adapter.lock().unwrap();
                a.buffering = false;
                (std::mem::take(&mut a.buffer), a.tx.clone())
            };
            for ev in buffered {
                if tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
            while let Ok(Some(a)) = acks.message().await {
                log.lock().unwrap().push(a.acked_sequence_num);
                acked.send_replace(a.acked_sequence_num);
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn get_snapshot(
        &self,
        _r: Request<api::SnapshotRequest>,
    ) -> Result<Response<api::ReplicationSnapshot>, Status> {
        let s = self.state.lock().unwrap();
        Ok(Response::new(api::ReplicationSnapshot {
            agents: s.agents.clone(),
            last_sequence_num: s.seq,
            principal_resources: s.principal_resources.clone(),
        }))
    }

    async fn status(
        &self,
        _r: Request<api::StatusRequest>,
    ) -> Result<Response<api::ReplicationStatus>, Status> {
        let s = self.state.lock().unwrap();
        Ok(Response::new(api::ReplicationStatus {
            current_sequence_num: s.seq,
            pending_events: 0,
            last_event_unix: 0,
            connected_replicas: s.replicas.len() as i32,
        }))
    }

    async fn confirm_missing_resources(
        &self,
        r: Request<api::ConfirmMissingResourcesRequest>,
    ) -> Result<Response<api::ConfirmMissingResourcesResponse>, Status> {
        let r = r.into_inner();
        self.confirms.lock().unwrap().push(r.clone());
        let s = self.state.lock().unwrap();
        let results = r
            .resources
            .iter()
            .map(|res| {
                if s.seq != r.snapshot_sequence_num {
                    return api::ConfirmMissingResourceResult {
                        resource: Some(res.clone()),
                        status: "unknown".into(),
                        reason: format!(
                            "snapshot sequence {} no longer current, current sequence {}",
                            r.snapshot_sequence_num, s.seq
                        ),
                    };
                }
                match s.existing.get(&key(res)) {
                    Some(e) => api::ConfirmMissingResourceResult {
                        resource: Some(e.clone()),
                        status: "exists".into(),
                        reason: String::new(),
                    },
                    None => api::ConfirmMissingResourceResult {
                        resource: Some(res.clone()),
                        status: "deleted".into(),
                        reason: String::new(),
                    },
                }
            })
            .collect();
        Ok(Response::new(api::ConfirmMissingResourcesResponse {
            results,
        }))
    }
}

impl PeerPrimary {
    pub async fn start(tls: &Tls) -> anyhow::Result<PeerPrimary> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state: Arc<Mutex<PrimaryState>> = Arc::default();
        let acks: Arc<Mutex<Vec<u64>>> = Arc::default();
        let confirms: Arc<Mutex<Vec<_>>> = Arc::default();
        let (acked, _) = watch::channel(0);
        let svc = PrimarySvc {
            state: state.clone(),
            acks: acks.clone(),
            acked: acked.clone(),
            confirms: confirms.clone(),
        };
        let cfg = ServerTlsConfig::new()
            .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
            .client_ca_root(Certificate::from_pem(&tls.ca_pem));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = Server::builder()
            .tls_config(cfg)?
            .add_service(ReplicationServer::new(svc));
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(PeerPrimary {
            addr,
            state,
            acks,
            acked,
            confirms,
            stop: Some(stop),
        })
    }

    /// The state `GetSnapshot` returns (`agents`: name, mode, connected, resources) and what
    /// `ConfirmMissingResources` knows exists.
    pub fn set_snapshot(&self, agents: Vec<api::AgentState>, principal: Vec<api::Resource>) {
        let mut s = self.state.lock().unwrap();
        s.existing = agents
            .iter()
            .flat_map(|a| a.resources.iter())
            .chain(principal.iter())
            .map(|r| (key(r), r.clone()))
            .collect();
        s.agents = agents;
        s.principal_resources = principal;
    }

    /// The forwarder's `Forward`: the next sequence number, buffered or sent to each replica.
    pub async fn forward(&self, ev: &Event, agent: &str, direction: &str) -> u64 {
        let (seq, targets) = {
            let mut s = self.state.lock().unwrap();
            s.seq += 1;
            let r = api::ReplicatedEvent {
                event: Some(convert(ev)),
                agent_name: agent.into(),
                direction: direction.into(),
                sequence_num: s.seq,
                processed_at_unix: now(),
            };
            let mut targets = Vec::new();
            for a in &s.replicas {
                let mut a = a.lock().unwrap();
                if a.buffering {
                    a.buffer.push(r.clone());
                } else {
                    targets.push((a.tx.clone(), r.clone()));
                }
            }
            (s.seq, targets)
        };
        for (tx, r) in targets {
            let _ = tx.send(Ok(r)).await;
        }
        seq
    }

    /// Skips sequence numbers (the peer's forwarder dropping events on a full queue).
    pub fn drop_events(&self, n: u64) {
        self.state.lock().unwrap().seq += n;
    }

    /// Waits until an ACK of at least `seq` arrived.
    pub async fn wait_acked(&self, seq: u64) {
        let mut rx = self.acked.subscribe();
        let _ = rx.wait_for(|a| *a >= seq).await;
    }

    /// Ends every replica's stream (the primary going away).
    pub fn end_streams(&self) {
        for a in self.state.lock().unwrap().replicas.drain(..) {
            let _ = a
                .lock()
                .unwrap()
                .tx
                .try_send(Err(Status::unavailable("primary shutting down")));
        }
    }
}

impl Drop for PeerPrimary {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// `format.ToProto` in the peer's own proto types.
fn convert(ev: &Event) -> crate::pb::io::cloudevents::v1::CloudEvent {
    sdk::to_proto(ev)
}

/// One event as a peer replica received it.
#[derive(Clone, Debug)]
pub struct Received {
    pub seq: u64,
    pub agent: String,
    pub direction: String,
    pub event: Event,
}

/// A peer replica (see the module doc).
pub struct PeerReplica {
    pub snapshot: api::ReplicationSnapshot,
    pub events: mpsc::UnboundedReceiver<Received>,
    /// Sequence gaps seen (`sequence_gaps_total`).
    pub gaps: Arc<Mutex<Vec<(u64, u64)>>>,
    pub client: ReplicationClient<Channel>,
    task: tokio::task::JoinHandle<()>,
}

impl PeerReplica {
    pub async fn channel(addr: SocketAddr, tls: &Tls) -> anyhow::Result<Channel> {
        let cfg = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_pem))
            .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
            .domain_name("localhost");
        Ok(Endpoint::from_shared(format!("https://{addr}"))?
            .tls_config(cfg)?
            .connect()
            .await?)
    }

    /// `runEventStream`: subscribe, snapshot, initial ACK, then events (each ACKed).
    pub async fn connect(addr: SocketAddr, tls: &Tls) -> Result<PeerReplica, Status> {
        let ch = Self::channel(addr, tls)
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let mut client = ReplicationClient::new(ch);
        let (ack_tx, ack_rx) = mpsc::channel::<api::ReplicationAck>(64);
        let mut stream = client
            .subscribe(tokio_stream::wrappers::ReceiverStream::new(ack_rx))
            .await?
            .into_inner();
        let snapshot = client
            .get_snapshot(api::SnapshotRequest {
                since_sequence_num: 0,
            })
            .await?
            .into_inner();
        let snap_seq = snapshot.last_sequence_num;
        ack_tx
            .send(api::ReplicationAck {
                acked_sequence_num: snap_seq,
            })
            .await
            .map_err(|_| Status::unavailable("ack stream closed"))?;
        let (tx, events) = mpsc::unbounded_channel();
        let gaps: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
        let g = gaps.clone();
        let task = tokio::spawn(async move {
            let mut expected = snap_seq + 1;
            while let Ok(Some(ev)) = stream.message().await {
                if ev.sequence_num > expected {
                    g.lock().unwrap().push((expected, ev.sequence_num));
                }
                expected = ev.sequence_num + 1;
                let Some(ce) = ev.event.as_ref() else {
                    continue;
                };
                let Ok(event) = sdk::from_proto(ce) else {
                    continue;
                };
                let _ = tx.send(Received {
                    seq: ev.sequence_num,
                    agent: ev.agent_name.clone(),
                    direction: ev.direction.clone(),
                    event,
                });
                let _ = ack_tx
                    .send(api::ReplicationAck {
                        acked_sequence_num: ev.sequence_num,
                    })
                    .await;
            }
        });
        Ok(PeerReplica {
            snapshot,
            events,
            gaps,
            client,
            task,
        })
    }
}

impl Drop for PeerReplica {
    fn drop(&mut self) {
        self.task.abort();
    }
}
