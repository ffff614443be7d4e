//! Cross-cluster HA (`--ha-enabled`): two principals with their own hubs, a managed agent behind
//! one address that follows whichever principal is active (a GSLB on `/healthz`), promotion and
//! demotion through the HA admin API.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::proto::haadminapi::{self as admin, ha_admin_client::HaAdminClient};
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_principal::PrincipalConfig;
use argocd_pull_principal::ha::replication::{self, Node, PreferredRole, Settings, State};
use argocd_pull_spoke::{Agent, AgentConfig};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::harness::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One principal of the pair.
struct Hub {
    store: MemStore,
    state: watch::Receiver<State>,
    metrics: Arc<Metrics>,
    grpc: SocketAddr,
    admin: SocketAddr,
    stop: argocd_pull_ops::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Hub {
    fn start(
        pki: &LocalPki,
        uid: &str,
        role: PreferredRole,
        peer: &str,
        f: impl FnOnce(&mut Settings),
    ) -> Hub {
        let store = MemStore::new();
        let grpc = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::start_on(store, grpc, pki, uid, role, peer, f)
    }

    fn start_on(
        store: MemStore,
        grpc: SocketAddr,
        pki: &LocalPki,
        uid: &str,
        role: PreferredRole,
        peer: &str,
        f: impl FnOnce(&mut Settings),
    ) -> Hub {
        init();
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cfg = PrincipalConfig::new(grpc, pki.principal.clone(), throwaway_jwt_key());
        cfg.namespace = "argocd".into();
        cfg.principal_uid = Some(uid.into());
        let mut settings = Settings {
            preferred_role: role,
            peer_address: peer.into(),
            failover_timeout: Duration::from_secs(30),
            admin_addr: admin,
            allowed_clients: vec![],
            initial_ack_timeout: Duration::from_secs(60),
        };
        f(&mut settings);
        let metrics = Metrics::new("argocd_principal");
        let (tx, state) = watch::channel(State::Recovering);
        let node = Node {
            store: Arc::new(store.clone()),
            metrics: metrics.clone(),
            tls: None,
            state: Some(tx),
        };
        let stop = argocd_pull_ops::CancellationToken::new();
        let task = tokio::spawn(replication::run(settings, cfg, node, stop.clone()));
        Hub {
            store,
            state,
            metrics,
            grpc,
            admin,
            stop,
            task,
        }
    }

    async fn wait_state(&mut self, want: State) {
        let reached = tokio::time::timeout(T, async {
            self.state.wait_for(|s| *s == want).await.is_ok()
        })
        .await;
        assert!(
            reached == Ok(true),
            "state {want} not reached; now {}",
            *self.state.borrow()
        );
    }

    async fn admin(&self) -> HaAdminClient<tonic::transport::Channel> {
        HaAdminClient::connect(format!("http://{}", self.admin))
            .await
            .unwrap()
    }

    /// `/healthz` as the admin server answers it.
    fn healthy(&self) -> bool {
        self.metrics.ready.gate().is_some_and(|g| g.healthy)
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = tokio::time::timeout(T, self.task).await;
    }
}

/// A GSLB: each connection goes to the address `target` names now.
async fn gslb(target: watch::Receiver<SocketAddr>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut c, _)) = l.accept().await else {
                return;
            };
            let to = *target.borrow();
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut up).await;
                }
            });
        }
    });
    addr
}

async fn managed_agent(pki: &LocalPki, at: SocketAddr, store: &MemStore) -> Agent {
    let mut c = AgentConfig::new(at, pki.agent("edge").unwrap(), Mode::Managed);
    c.server_name = "localhost".into();
    c.reconnect_max = Duration::from_millis(300);
    Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap()
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn ns(store: &MemStore, name: &str) {
    store.ensure_namespace(name).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_switchover_loses_nothing_and_the_agent_keeps_its_applications() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = argocd_pull_ops::logging::init(argocd_pull_ops::logging::LogFormat::Text);
    }
    let pki = LocalPki::new().unwrap();
    // each names the other as its peer
    let (ga, gb): (SocketAddr, SocketAddr) = (
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    );
    let mut a = Hub::start_on(
        MemStore::new(),
        ga,
        &pki,
        "principal-a",
        PreferredRole::Primary,
        &gb.to_string(),
        |_| {},
    );
    a.wait_state(State::Active).await;
    let mut b = Hub::start_on(
        MemStore::new(),
        gb,
        &pki,
        "principal-b",
        PreferredRole::Replica,
        &ga.to_string(),
        |_| {},
    );
    ns(&a.store, "edge").await;
    // objects from before the replica connects come with its snapshot
    for i in 0..5 {
        put(&a.store, app("edge", &format!("early-{i}"), "guestbook")).await;
    }
    b.wait_state(State::Replicating).await;
    assert!(
        a.healthy() && !b.healthy(),
        "/healthz 200 only on the active one"
    );

    let (to, target) = watch::channel(a.grpc);
    let front = gslb(target).await;
    let local = MemStore::new();
    let agent = managed_agent(&pki, front, &local).await;
    // objects after it come as events; the agent's status flows to A's hub and on to B's
    for i in 0..20 {
        put(&a.store, app("edge", &format!("app-{i}"), "guestbook")).await;
    }
    for i in 0..20 {
        let n = format!("app-{i}");
        let got = wait_for(&local, "argocd", &n, "delivered to the agent", |o| {
            o.is_some()
        })
        .await;
        let mut s = got.unwrap();
        s["status"] = json!({"sync": {"status": "Synced"}, "health": {"status": "Healthy"}});
        local.replace(Kind::Application, s).await.unwrap();
    }
    for i in (0..5)
        .map(|i| format!("early-{i}"))
        .chain((0..20).map(|i| format!("app-{i}")))
    {
        wait_for(&b.store, "edge", &i, "replicated", |o| o.is_some()).await;
    }
    for i in 0..20 {
        wait_for(
            &b.store,
            "edge",
            &format!("app-{i}"),
            "status replicated",
            |o| o.is_some_and(|o| o["status"]["sync"]["status"] == "Synced"),
        )
        .await;
    }
    let before: Vec<(String, String)> = local
        .list(Kind::Application, Some("argocd"))
        .await
        .unwrap()
        .iter()
        .map(|o| (o["metadata"]["name"].as_str().unwrap().to_string(), uid(o)))
        .collect();
    assert_eq!(before.len(), 25);

    // a promote while A is active (B's stream is up) is refused, naming the fix
    let e = b
        .admin()
        .await
        .promote(admin::PromoteRequest { force: false })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    assert!(
        e.message().contains("still replicating from peer"),
        "{}",
        e.message()
    );
    assert!(
        e.message().contains("demote the peer first"),
        "{}",
        e.message()
    );
    assert_eq!(*b.state.borrow(), State::Replicating);

    // a last change just before the switchover is not lost
    put(&a.store, app("edge", "last-minute", "guestbook")).await;
    // clean switchover: demote A (it drains B), then promote B without --force
    let r = a
        .admin()
        .await
        .demote(admin::DemoteRequest {})
        .await
        .unwrap();
    assert_eq!(r.into_inner().state, "replicating");
    b.wait_state(State::Disconnected).await;
    assert!(!a.healthy());
    let r = b
        .admin()
        .await
        .promote(admin::PromoteRequest { force: false })
        .await
        .unwrap();
    assert_eq!(r.into_inner().state, "active");
    assert!(b.healthy());
    wait_for(
        &b.store,
        "edge",
        "last-minute",
        "replicated before the switchover",
        |o| o.is_some(),
    )
    .await;

    // the GSLB follows /healthz: same agent address, now B
    to.send_replace(b.grpc);
    tokio::time::timeout(T, agent.wait_connected(1))
        .await
        .expect("agent reconnects to B");
    put(&b.store, app("edge", "after", "guestbook")).await;
    wait_for(&local, "argocd", "after", "B serves the agent", |o| {
        o.is_some()
    })
    .await;
    wait_for(&local, "argocd", "last-minute", "delivered", |o| {
        o.is_some()
    })
    .await;
    // a change of an old Application: adopted in place (a failover, not a recreation)
    patch(
        &b.store,
        "edge",
        "app-3",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await;
    let hub_uid = uid(&b
        .store
        .get(Kind::Application, "edge", "app-3")
        .await
        .unwrap()
        .unwrap());
    let got = wait_for(&local, "argocd", "app-3", "updated from B", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await
    .unwrap();
    assert_eq!(
        got["metadata"]["annotations"]["argocd.argoproj.io/source-uid"],
        hub_uid.as_str()
    );
    assert_eq!(
        got["metadata"]["annotations"]["argocd.argoproj.io/principal-uid"],
        "principal-b"
    );
    // nothing was recreated on the agent: every Application keeps its UID
    for (name, u) in &before {
        let now = local
            .get(Kind::Application, "argocd", name)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&uid(&now), u, "{name} was recreated");
    }
    // and A gets B's changes
    wait_for(&a.store, "edge", "after", "replicated back to A", |o| {
        o.is_some()
    })
    .await;
    let m = b.metrics.encode();
    assert!(m.contains("argocd_agent_ha_failovers_total 1"), "{m}");
    assert!(
        a.metrics
            .encode()
            .contains("argocd_agent_ha_failbacks_total 1")
    );
    drop(agent);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_unknown_peers_are_named_and_the_primary_keeps_serving() {
    let pki = LocalPki::new().unwrap();
    let mut a = Hub::start(&pki, "principal-a", PreferredRole::Primary, "", |s| {
        s.allowed_clients = vec!["region-b".into()];
    });
    a.wait_state(State::Active).await;
    // B's identity (CN argocd-agent-principal) is not allowed: it never replicates, and after
    // --ha-failover-timeout it counts A as unreachable
    let mut b = Hub::start(
        &pki,
        "principal-b",
        PreferredRole::Replica,
        &a.grpc.to_string(),
        |s| s.failover_timeout = Duration::from_millis(500),
    );
    b.wait_state(State::Disconnected).await;
    let m = a.metrics.encode();
    let errors: f64 = m
        .lines()
        .find(|l| l.starts_with("argocd_agent_ha_replication_errors_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap();
    assert!(errors >= 1.0, "{m}");
    // A keeps serving its agent meanwhile
    ns(&a.store, "edge").await;
    let local = MemStore::new();
    let _agent = managed_agent(&pki, a.grpc, &local).await;
    put(&a.store, app("edge", "served", "guestbook")).await;
    wait_for(&local, "argocd", "served", "A serves", |o| o.is_some()).await;
    assert!(
        b.store
            .get(Kind::Application, "edge", "served")
            .await
            .unwrap()
            .is_none(),
        "nothing replicated to a refused replica"
    );

    // an unknown peer: the replica stays unhealthy, can be promoted once it counts the peer as
    // unreachable, and serves
    let mut c = Hub::start(
        &pki,
        "principal-c",
        PreferredRole::Replica,
        "nowhere.invalid:8443",
        |s| s.failover_timeout = Duration::from_millis(300),
    );
    c.wait_state(State::Disconnected).await;
    assert!(!c.healthy());
    let r = c
        .admin()
        .await
        .promote(admin::PromoteRequest { force: false })
        .await
        .unwrap();
    assert_eq!(r.into_inner().state, "active");
    assert!(c.healthy());
    // a replica refuses agents with UNAVAILABLE naming its state
    let refused = refused_agent(
        {
            let mut cfg = AgentConfig::new(b.grpc, pki.agent("edge").unwrap(), Mode::Managed);
            cfg.server_name = "localhost".into();
            cfg
        },
        &MemStore::new(),
        "not accepting connections in state disconnected",
    )
    .await;
    drop(refused);
    let m = b.metrics.encode();
    assert!(
        m.contains("argocd_agent_ha_connections_rejected_total{state=\"disconnected\",reason=\"not accepting connections\"}"),
        "{m}"
    );
    a.stop().await;
    b.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_catches_up_after_a_break_and_deletes_what_the_primary_deleted() {
    let pki = LocalPki::new().unwrap();
    let mut a = Hub::start(&pki, "principal-a", PreferredRole::Primary, "", |_| {});
    a.wait_state(State::Active).await;
    ns(&a.store, "edge").await;
    for i in 0..10 {
        put(&a.store, app("edge", &format!("app-{i}"), "guestbook")).await;
    }
    // a project and a repository Secret of the principal's namespace travel too
    ns(&a.store, "argocd").await;
    a.store
        .create(
            Kind::AppProject,
            json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
                   "metadata": {"name": "team", "namespace": "argocd"}, "spec": {"sourceRepos": ["*"]}}),
        )
        .await
        .unwrap();
    a.store
        .create(
            Kind::Secret,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "repo", "namespace": "argocd",
                   "labels": {"argocd.argoproj.io/secret-type": "repository"}}, "data": {"url": "aHR0cHM6Ly9leGFtcGxlLmNvbQ=="}}),
        )
        .await
        .unwrap();
    let mut b = Hub::start(
        &pki,
        "principal-b",
        PreferredRole::Replica,
        &a.grpc.to_string(),
        |_| {},
    );
    b.wait_state(State::Replicating).await;
    wait_for(&b.store, "edge", "app-9", "snapshot", |o| o.is_some()).await;
    wait_for_kind(
        &b.store,
        Kind::AppProject,
        "argocd",
        "team",
        "project",
        |o| o.is_some(),
    )
    .await;
    wait_for_kind(
        &b.store,
        Kind::Secret,
        "argocd",
        "repo",
        "repository",
        |o| o.is_some(),
    )
    .await;
    // something made by hand on B's hub is never touched
    put(&b.store, app("edge", "local-only", "x")).await;
    // B goes away; A changes meanwhile
    let (b_store, b_grpc) = (b.store.clone(), b.grpc);
    b.stop().await;
    del(&a.store, "edge", "app-0").await;
    patch(
        &a.store,
        "edge",
        "app-1",
        json!({"spec": {"source": {"path": "changed"}}}),
    )
    .await;
    put(&a.store, app("edge", "new", "guestbook")).await;
    let mut b = Hub::start_on(
        b_store,
        b_grpc,
        &pki,
        "principal-b",
        PreferredRole::Replica,
        &a.grpc.to_string(),
        |_| {},
    );
    b.wait_state(State::Replicating).await;
    wait_for(&b.store, "edge", "app-0", "deleted on the replica", |o| {
        o.is_none()
    })
    .await;
    wait_for(&b.store, "edge", "app-1", "changed", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "changed")
    })
    .await;
    wait_for(&b.store, "edge", "new", "created", |o| o.is_some()).await;
    assert!(
        b.store
            .get(Kind::Application, "edge", "local-only")
            .await
            .unwrap()
            .is_some()
    );
    a.stop().await;
    b.stop().await;
}
