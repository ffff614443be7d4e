//! Cross-cluster HA against the peer's replication wire (principal/apis/replication): OUR
//! replica replicating from a primary that serves and encodes as the peer's server.go, and a
//! replica that behaves as the peer's pkg/replication/client.go replicating from OUR primary;
//! the peer's haadmin.proto client against our HA admin API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_agent_interop::emitter::{Emitter, PRINCIPAL_SOURCE, ty};
use argocd_pull_agent_interop::pb::haadminapi::{self as admin, ha_admin_client::HaAdminClient};
use argocd_pull_agent_interop::pb::replicationapi as api;
use argocd_pull_agent_interop::peer_agent::T;
use argocd_pull_agent_interop::peer_replication::{PeerPrimary, PeerReplica, resource};
use argocd_pull_principal::PrincipalConfig;
use argocd_pull_principal::ha::replication::{
    self, Node, PreferredRole, REPLICATED, Settings, State,
};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::common::{init, tls};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Ours {
    store: MemStore,
    state: watch::Receiver<State>,
    metrics: Arc<Metrics>,
    grpc: SocketAddr,
    admin: SocketAddr,
    stop: argocd_pull_ops::CancellationToken,
}

fn ours(
    store: MemStore,
    pki: &LocalPki,
    role: PreferredRole,
    peer: &str,
    allowed: &[&str],
) -> Ours {
    init();
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cfg = PrincipalConfig::new(grpc, pki.principal.clone(), throwaway_jwt_key());
    cfg.namespace = "argocd".into();
    cfg.principal_uid = Some("ours".into());
    let settings = Settings {
        preferred_role: role,
        peer_address: peer.into(),
        failover_timeout: Duration::from_secs(30),
        admin_addr: admin,
        allowed_clients: allowed.iter().map(|s| s.to_string()).collect(),
        initial_ack_timeout: Duration::from_secs(60),
    };
    let metrics = Metrics::new("argocd_principal");
    let (tx, state) = watch::channel(State::Recovering);
    let node = Node {
        store: Arc::new(store.clone()),
        metrics: metrics.clone(),
        tls: None,
        state: Some(tx),
    };
    let stop = argocd_pull_ops::CancellationToken::new();
    tokio::spawn(replication::run(settings, cfg, node, stop.clone()));
    Ours {
        store,
        state,
        metrics,
        grpc,
        admin,
        stop,
    }
}

impl Ours {
    async fn wait_state(&mut self, want: State) {
        let ok = tokio::time::timeout(T, async {
            self.state.wait_for(|s| *s == want).await.is_ok()
        })
        .await;
        assert_eq!(ok, Ok(true), "state {want} not reached");
    }
}

impl Drop for Ours {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Waits (on the store's watch) until `pred` holds for `kind` `ns/name`.
async fn wait_obj(
    store: &MemStore,
    kind: Kind,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let mut w = store.watch(kind, Some(ns));
    let r = tokio::time::timeout(T, async {
        loop {
            let cur = store.get(kind, ns, name).await.unwrap();
            if pred(cur.as_ref()) {
                return cur;
            }
            match w.next().await {
                Some(Ok(
                    StoreEvent::Restarted(_) | StoreEvent::Applied(_) | StoreEvent::Deleted(_),
                )) => {}
                other => panic!("watch ended: {other:?}"),
            }
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("{kind:?} {ns}/{name}: {what}"))
}

fn hub_app(ns: &str, name: &str, uid: &str, path: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "10",
            "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
        "spec": {"project": "default",
            "source": {"repoURL": "https://example.com/repo.git", "path": path, "targetRevision": "HEAD"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}})
}

fn counter(m: &Metrics, name: &str) -> f64 {
    m.encode()
        .lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_replica_replicates_from_a_primary_speaking_the_peers_api() {
    init();
    let pki = LocalPki::new().unwrap();
    let peer = PeerPrimary::start(&tls(&pki.principal)).await.unwrap();
    let project = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": "team", "namespace": "argocd", "uid": "p1"}, "spec": {"sourceRepos": ["*"]}});
    let repo = json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "repo-1", "namespace": "argocd", "uid": "s1",
            "labels": {"argocd.argoproj.io/secret-type": "repository"}},
        "data": {"url": "aHR0cHM6Ly9leGFtcGxlLmNvbS9yZXBvLmdpdA=="}});
    peer.set_snapshot(
        vec![api::AgentState {
            name: "edge".into(),
            mode: "managed".into(),
            connected: true,
            resources: vec![resource(
                "Application",
                &hub_app("edge", "guestbook", "u1", "v1"),
            )],
        }],
        vec![
            resource("AppProject", &project),
            resource("Repository", &repo),
        ],
    );
    // our replica's hub: an object it holds from replication that the primary no longer has,
    // and one made there by hand
    let store = MemStore::new();
    let mut stale = hub_app("edge", "stale", "x", "v1");
    stale["metadata"]["annotations"] = json!({REPLICATED: "true"});
    store.ensure_namespace("edge").await.unwrap();
    store.create(Kind::Application, stale).await.unwrap();
    store
        .create(Kind::Application, hub_app("edge", "by-hand", "y", "v1"))
        .await
        .unwrap();
    let mut me = ours(
        store.clone(),
        &pki,
        PreferredRole::Replica,
        &peer.addr.to_string(),
        &[],
    );
    me.wait_state(State::Replicating).await;
    peer.wait_acked(0).await;
    let got = wait_obj(
        &store,
        Kind::Application,
        "edge",
        "guestbook",
        "snapshot",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(got["spec"]["source"]["path"], "v1");
    assert_eq!(
        got["metadata"]["finalizers"],
        json!(["resources-finalizer.argocd.argoproj.io"])
    );
    wait_obj(
        &store,
        Kind::AppProject,
        "argocd",
        "team",
        "snapshot",
        |o| o.is_some(),
    )
    .await;
    wait_obj(&store, Kind::Secret, "argocd", "repo-1", "snapshot", |o| {
        o.is_some()
    })
    .await;
    // the primary confirmed "stale" deleted (same sequence); "by-hand" is not ours to touch
    wait_obj(
        &store,
        Kind::Application,
        "edge",
        "stale",
        "confirmed deleted",
        |o| o.is_none(),
    )
    .await;
    assert!(
        store
            .get(Kind::Application, "edge", "by-hand")
            .await
            .unwrap()
            .is_some()
    );
    let asked = peer.confirms.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        (
            asked[0].agent_name.as_str(),
            asked[0].resources[0].name.as_str()
        ),
        ("edge", "stale")
    );

    // events as the peer's callbacks forward them
    let em = Emitter::new(PRINCIPAL_SOURCE);
    let created = hub_app("edge", "new", "u2", "v1");
    peer.forward(
        &em.object_event(&ty("create"), "application", &created),
        "edge",
        "outbound",
    )
    .await;
    let mut spec = hub_app("edge", "guestbook", "u1", "v2");
    spec["status"] = json!({"sync": {"status": "OutOfSync"}});
    peer.forward(
        &em.object_event(&ty("spec-update"), "application", &spec),
        "edge",
        "outbound",
    )
    .await;
    // a managed agent's status (its own namespace on the agent)
    let agent_em = Emitter::new("argocd-agent-agent");
    let status = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "guestbook", "namespace": "argocd", "uid": "agent-local"},
        "spec": {}, "status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}},
        "operation": {"sync": {"revision": "abc"}}});
    peer.forward(
        &agent_em.object_event(&ty("status-update"), "application", &status),
        "edge",
        "inbound",
    )
    .await;
    // an autonomous agent's own Application
    let own = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "mine", "namespace": "argocd", "uid": "auto-uid"},
        "spec": {"project": "default", "destination": {"server": "https://kubernetes.default.svc", "namespace": "x"}}});
    peer.forward(
        &agent_em.object_event(&ty("create"), "application", &own),
        "auto",
        "inbound",
    )
    .await;
    let seq = peer
        .forward(
            &em.object_event(&ty("delete"), "application", &created),
            "edge",
            "outbound",
        )
        .await;
    peer.wait_acked(seq).await;
    assert!(
        store
            .get(Kind::Application, "edge", "new")
            .await
            .unwrap()
            .is_none(),
        "created, then deleted"
    );
    let g = store
        .get(Kind::Application, "edge", "guestbook")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g["spec"]["source"]["path"], "v2");
    assert_eq!(
        g["status"]["health"]["status"], "Healthy",
        "the inbound status"
    );
    assert_eq!(g["operation"]["sync"]["revision"], "abc");
    let m = store
        .get(Kind::Application, "auto", "mine")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m["spec"]["project"], "auto-default");
    assert_eq!(
        m["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        "auto-uid"
    );
    // ACKs carry what is written, in order
    let acks = peer.acks.lock().unwrap().clone();
    assert_eq!(acks.first(), Some(&0));
    assert!(acks.windows(2).all(|w| w[0] <= w[1]), "{acks:?}");

    // the peer's forwarder drops events on a full queue: our replica sees the gap and fetches
    // a snapshot at once
    peer.set_snapshot(
        vec![api::AgentState {
            name: "edge".into(),
            mode: "managed".into(),
            connected: true,
            resources: vec![
                resource("Application", &hub_app("edge", "guestbook", "u1", "v2")),
                resource("Application", &hub_app("edge", "while-dropped", "u3", "v1")),
            ],
        }],
        vec![
            resource("AppProject", &project),
            resource("Repository", &repo),
        ],
    );
    peer.drop_events(3);
    let late = hub_app("edge", "late", "u4", "v1");
    let seq = peer
        .forward(
            &em.object_event(&ty("create"), "application", &late),
            "edge",
            "outbound",
        )
        .await;
    wait_obj(
        &store,
        Kind::Application,
        "edge",
        "while-dropped",
        "repaired by a snapshot",
        |o| o.is_some(),
    )
    .await;
    wait_obj(&store, Kind::Application, "edge", "late", "created", |o| {
        o.is_some()
    })
    .await;
    peer.wait_acked(seq).await;
    assert_eq!(
        counter(
            &me.metrics,
            "argocd_agent_replication_client_sequence_gaps_total"
        ),
        1.0
    );
    assert!(
        counter(
            &me.metrics,
            "argocd_agent_replication_client_reconciliations_total"
        ) >= 1.0
    );

    // the primary goes away: disconnected, back to replicating when it returns
    peer.end_streams();
    me.wait_state(State::Disconnected).await;
    me.wait_state(State::Replicating).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_behaving_as_the_peers_client_replicates_from_our_primary() {
    init();
    let pki = LocalPki::new().unwrap();
    let store = MemStore::new();
    store.ensure_namespace("edge").await.unwrap();
    store.ensure_namespace("argocd").await.unwrap();
    store
        .create(Kind::Application, hub_app("edge", "guestbook", "", "v1"))
        .await
        .unwrap();
    store
        .create(
            Kind::AppProject,
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                "metadata": {"name": "team", "namespace": "argocd"}, "spec": {}}),
        )
        .await
        .unwrap();
    let mut me = ours(store.clone(), &pki, PreferredRole::Primary, "", &[]);
    me.wait_state(State::Active).await;
    let mut r = PeerReplica::connect(me.grpc, &tls(&pki.principal))
        .await
        .unwrap();
    let snap = &r.snapshot;
    let edge = snap
        .agents
        .iter()
        .find(|a| a.name == "edge")
        .expect("agent edge");
    assert_eq!(edge.mode, "managed");
    assert_eq!(edge.resources.len(), 1);
    let data: Value = serde_json::from_slice(&edge.resources[0].data).unwrap();
    assert_eq!(
        (
            data["metadata"]["name"].as_str(),
            edge.resources[0].kind.as_str()
        ),
        (Some("guestbook"), "Application")
    );
    assert!(
        snap.principal_resources
            .iter()
            .any(|p| p.kind == "AppProject" && p.name == "team")
    );
    let snap_seq = snap.last_sequence_num;

    // a change becomes the peer's event, in sequence
    store
        .create(Kind::Application, {
            // no finalizers: its deletion is immediate
            let mut a = hub_app("edge", "new", "", "v1");
            a["metadata"]["finalizers"] = json!([]);
            a
        })
        .await
        .unwrap();
    let e = tokio::time::timeout(T, r.events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.seq, snap_seq + 1);
    assert_eq!(
        (e.agent.as_str(), e.direction.as_str()),
        ("edge", "outbound")
    );
    assert_eq!(e.event.typ, ty("create"));
    assert_eq!(e.event.dataschema, "application");
    assert_eq!(e.event.subject, "edge/new");
    assert_eq!(e.event.json().unwrap()["metadata"]["name"], "new");
    // a status change is the inbound status-update the peer's replica applies with UpdateStatus
    store
        .merge_patch(
            Kind::Application,
            "edge",
            "new",
            json!({"status": {"sync": {"status": "Synced"}}}),
        )
        .await
        .unwrap();
    let e = tokio::time::timeout(T, r.events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (e.event.typ.clone(), e.direction.as_str()),
        (ty("status-update"), "inbound")
    );
    assert_eq!(
        e.event.json().unwrap()["status"]["sync"]["status"],
        "Synced"
    );
    store
        .delete(Kind::Application, "edge", "new")
        .await
        .unwrap();
    let e = tokio::time::timeout(T, r.events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(e.event.typ, ty("delete"));
    assert!(r.gaps.lock().unwrap().is_empty());
    // the peer's periodic Status check sees everything acknowledged
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let st = r
            .client
            .status(api::StatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if st.pending_events == 0 {
            assert_eq!((st.current_sequence_num, st.connected_replicas), (e.seq, 1));
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not acknowledged: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ConfirmMissingResources: "deleted" for what is gone, "exists" with data otherwise
    let c = r
        .client
        .confirm_missing_resources(api::ConfirmMissingResourcesRequest {
            agent_name: "edge".into(),
            snapshot_sequence_num: snap_seq,
            resources: vec![
                api::Resource {
                    name: "new".into(),
                    namespace: "edge".into(),
                    kind: "Application".into(),
                    ..Default::default()
                },
                api::Resource {
                    name: "guestbook".into(),
                    namespace: "edge".into(),
                    kind: "Application".into(),
                    ..Default::default()
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(c.results[0].status, "deleted");
    assert_eq!(c.results[1].status, "exists");
    assert!(!c.results[1].resource.as_ref().unwrap().data.is_empty());

    // the peer's argocd-agentctl talks to our HA admin API
    let mut a = HaAdminClient::connect(format!("http://{}", me.admin))
        .await
        .unwrap();
    let st = a
        .status(admin::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            st.state.as_str(),
            st.preferred_role.as_str(),
            st.connected_replicas
        ),
        ("active", "primary", 1)
    );
    let e = a
        .promote(admin::PromoteRequest { force: true })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (tonic::Code::FailedPrecondition, "already active")
    );
    me.store
        .get(Kind::Application, "edge", "guestbook")
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_replica_outside_the_allowed_clients_is_refused_naming_the_flag() {
    init();
    let pki = LocalPki::new().unwrap();
    let mut me = ours(
        MemStore::new(),
        &pki,
        PreferredRole::Primary,
        "",
        &["region-b"],
    );
    me.wait_state(State::Active).await;
    let e = match PeerReplica::connect(me.grpc, &tls(&pki.principal)).await {
        Err(e) => e,
        Ok(_) => panic!("a replica outside --ha-allowed-replication-clients replicates"),
    };
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("identity \"argocd-agent-principal\" not in allowed replication clients"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("--ha-allowed-replication-clients"),
        "{}",
        e.message()
    );
}
