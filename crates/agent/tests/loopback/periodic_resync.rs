//! Issue 30 point 4: `--resync-interval` (agent) recovers a lost event without a reconnect, in
//! both modes; a round resends nothing when nothing changed; `--resync-min-interval` (principal)
//! refuses rounds that come too soon. An event is lost here the way the protocol loses one: the
//! receiver's write fails permanently (422), it answers `error`, the sender gives the event up.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreError, StoreEvent, StoreResult};
use argocd_pull_principal::{Principal, PrincipalConfig};
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde_json::{Value, json};

use crate::harness::*;

/// A store whose next write of an Application with one of the armed names fails with 422.
#[derive(Clone)]
struct Lossy {
    inner: MemStore,
    armed: Arc<Mutex<Vec<String>>>,
    lost: tokio::sync::watch::Sender<u32>,
}

impl Lossy {
    fn new(inner: MemStore) -> Self {
        Lossy {
            inner,
            armed: Arc::default(),
            lost: tokio::sync::watch::channel(0).0,
        }
    }
    fn lose_next_write_of(&self, name: &str) {
        self.armed.lock().unwrap().push(name.to_string());
    }
    fn check(&self, kind: Kind, name: &str) -> StoreResult<()> {
        let mut a = self.armed.lock().unwrap();
        match a
            .iter()
            .position(|n| kind == Kind::Application && n == name)
        {
            Some(i) => {
                a.remove(i);
                self.lost.send_modify(|n| *n += 1);
                Err(StoreError::Invalid(format!("{name}: injected 422")))
            }
            None => Ok(()),
        }
    }
    async fn wait_lost(&self, n: u32) {
        let mut rx = self.lost.subscribe();
        tokio::time::timeout(T, rx.wait_for(|l| *l >= n))
            .await
            .expect("the armed write happened")
            .unwrap();
    }
}

#[async_trait]
impl Store for Lossy {
    async fn list(&self, kind: Kind, ns: Option<&str>) -> StoreResult<Vec<Value>> {
        self.inner.list(kind, ns).await
    }
    async fn get(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<Option<Value>> {
        self.inner.get(kind, ns, name).await
    }
    async fn create(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.check(kind, obj["metadata"]["name"].as_str().unwrap_or_default())?;
        self.inner.create(kind, obj).await
    }
    async fn replace(&self, kind: Kind, obj: Value) -> StoreResult<Value> {
        self.check(kind, obj["metadata"]["name"].as_str().unwrap_or_default())?;
        self.inner.replace(kind, obj).await
    }
    async fn merge_patch(
        &self,
        kind: Kind,
        ns: &str,
        name: &str,
        patch: Value,
    ) -> StoreResult<Value> {
        self.check(kind, name)?;
        self.inner.merge_patch(kind, ns, name, patch).await
    }
    async fn delete(&self, kind: Kind, ns: &str, name: &str) -> StoreResult<()> {
        self.inner.delete(kind, ns, name).await
    }
    async fn ensure_namespace(&self, ns: &str) -> StoreResult<()> {
        self.inner.ensure_namespace(ns).await
    }
    async fn ensure_namespace_labelled(
        &self,
        ns: &str,
        labels: &BTreeMap<String, String>,
    ) -> StoreResult<()> {
        self.inner.ensure_namespace_labelled(ns, labels).await
    }
    fn watch(&self, kind: Kind, ns: Option<&str>) -> BoxStream<'static, StoreResult<StoreEvent>> {
        self.inner.watch(kind, ns)
    }
}

fn path(v: Option<&Value>) -> Option<&str> {
    v?["spec"]["source"]["path"].as_str()
}

fn sent(p: &Principal, ty: &str) -> u64 {
    Metrics::total(&p.metrics().events_sent, ty)
}

#[tokio::test]
async fn managed_agent_recovers_a_lost_spec_update_without_reconnecting() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let (with, without) = (Lossy::new(MemStore::new()), Lossy::new(MemStore::new()));
    let start = |name: &'static str, store: Lossy, every: Duration| {
        let (pki, p) = (&pki, &p);
        async move {
            let mut c = argocd_pull_spoke::AgentConfig::new(
                p.local_addr(),
                pki.agent(name).unwrap(),
                Mode::Managed,
            );
            c.reconnect_max = Duration::from_millis(500);
            c.resync_interval = every;
            let a =
                argocd_pull_spoke::Agent::start(c, Arc::new(store), Metrics::new("argocd_agent"))
                    .await
                    .unwrap();
            tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
            a
        }
    };
    let r1 = start("r1", with.clone(), Duration::from_secs(1)).await;
    let r0 = start("r0", without.clone(), Duration::ZERO).await;
    for ns in ["r1", "r0"] {
        hub.ensure_namespace(ns).await.unwrap();
        put(&hub, app(ns, "web", "v1")).await;
    }
    for s in [&with, &without] {
        wait_for(&s.inner, "argocd", "web", "delivered", |a| {
            path(a) == Some("v1")
        })
        .await;
    }
    // the resync at start is over (each agent's own round and its answer to the principal's)
    wait_idle(|| {
        Metrics::total(&p.metrics().resync_requests, "accepted") >= 4
            && p.agent_idle("r1")
            && p.agent_idle("r0")
            && r1.idle()
            && r0.idle()
    })
    .await;
    let connections = r1.connections();

    // the next spec-update is lost on both agents
    with.lose_next_write_of("web");
    without.lose_next_write_of("web");
    for ns in ["r1", "r0"] {
        patch(&hub, ns, "web", json!({"spec": {"source": {"path": "v2"}}})).await;
    }
    with.wait_lost(1).await;
    without.wait_lost(1).await;

    // the periodic resync brings it, on the same stream
    wait_for(
        &with.inner,
        "argocd",
        "web",
        "recovered by the periodic resync",
        |a| path(a) == Some("v2"),
    )
    .await;
    assert_eq!(r1.connections(), connections, "no reconnect");
    assert_eq!(
        path(
            without
                .inner
                .get(Kind::Application, "argocd", "web")
                .await
                .unwrap()
                .as_ref()
        ),
        Some("v1"),
        "without --resync-interval the lost event stays lost"
    );

    // nothing changed since: two more rounds resend nothing
    wait_idle(|| p.agent_idle("r1") && r1.idle()).await;
    let before = (
        sent(&p, "spec-update"),
        sent(&p, "set-operation"),
        sent(&p, "delete"),
    );
    let rounds = Metrics::total(&r1.metrics().resync_requests, "sent");
    let accepted = Metrics::total(&p.metrics().resync_requests, "accepted");
    wait_idle(|| {
        Metrics::total(&r1.metrics().resync_requests, "sent") >= rounds + 2
            && Metrics::total(&p.metrics().resync_requests, "accepted") >= accepted + 2
    })
    .await;
    wait_idle(|| p.agent_idle("r1") && r1.idle()).await;
    assert_eq!(
        (
            sent(&p, "spec-update"),
            sent(&p, "set-operation"),
            sent(&p, "delete"),
        ),
        before,
        "rounds with nothing changed resend nothing"
    );
    r1.shutdown().await;
    r0.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn autonomous_agent_recovers_an_update_the_hub_lost() {
    init();
    let pki = LocalPki::new().unwrap();
    let hub = Lossy::new(MemStore::new());
    let cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    let p = Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .unwrap();
    let (l1, l0) = (MemStore::new(), MemStore::new());
    let u1 = agent_with(&pki, &p, "u1", Mode::Autonomous, &l1, |c| {
        c.resync_interval = Duration::from_secs(1)
    })
    .await;
    let u0 = agent(&pki, &p, "u0", Mode::Autonomous, &l0).await;
    for l in [&l1, &l0] {
        l.ensure_namespace("argocd").await.unwrap();
        put(l, app("argocd", "web", "v1")).await;
    }
    for ns in ["u1", "u0"] {
        wait_for(&hub.inner, ns, "web", "on the hub", |a| {
            path(a) == Some("v1")
        })
        .await;
    }
    // the resync at start is over: both agents' requests were served (the principal ACKs one
    // after queueing its answer, the agent's queue is idle once ACKed) and answered
    wait_idle(|| {
        Metrics::total(&p.metrics().resync_requests, "accepted") >= 2
            && p.agent_idle("u1")
            && p.agent_idle("u0")
            && u1.idle()
            && u0.idle()
    })
    .await;
    let connections = u1.connections();
    hub.lose_next_write_of("web");
    hub.lose_next_write_of("web");
    for l in [&l1, &l0] {
        patch(
            l,
            "argocd",
            "web",
            json!({"spec": {"source": {"path": "v2"}}}),
        )
        .await;
    }
    hub.wait_lost(2).await;
    wait_for(
        &hub.inner,
        "u1",
        "web",
        "recovered by the periodic resync",
        |a| path(a) == Some("v2"),
    )
    .await;
    assert_eq!(u1.connections(), connections, "no reconnect");
    assert_eq!(
        path(
            hub.inner
                .get(Kind::Application, "u0", "web")
                .await
                .unwrap()
                .as_ref()
        ),
        Some("v1"),
        "without --resync-interval the hub keeps the stale copy"
    );
    // nothing changed since: rounds resend nothing (the agent's side of the wire)
    wait_idle(|| p.agent_idle("u1") && u1.idle()).await;
    let before = Metrics::total(&u1.metrics().events_sent, "spec-update");
    let rounds = Metrics::total(&p.metrics().resync_requests, "accepted");
    wait_idle(|| Metrics::total(&p.metrics().resync_requests, "accepted") >= rounds + 2).await;
    wait_idle(|| p.agent_idle("u1") && u1.idle()).await;
    assert_eq!(
        Metrics::total(&u1.metrics().events_sent, "spec-update"),
        before,
        "rounds with nothing changed resend nothing"
    );
    u1.shutdown().await;
    u0.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn rounds_sooner_than_the_principals_minimum_are_refused() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.resync_min_interval = Duration::from_secs(3600)
    })
    .await;
    let m = agent_with(&pki, &p, "m", Mode::Managed, &MemStore::new(), |c| {
        c.resync_interval = Duration::from_millis(300)
    })
    .await;
    let a = agent_with(&pki, &p, "a", Mode::Autonomous, &MemStore::new(), |c| {
        c.resync_interval = Duration::from_millis(300)
    })
    .await;
    wait_idle(|| Metrics::total(&p.metrics().resync_requests, "refused") >= 4).await;
    // served: each agent's round at start, and the managed agent's answer to the principal's
    // own request
    assert_eq!(Metrics::total(&p.metrics().resync_requests, "accepted"), 3);
    let text = p.metrics().encode();
    assert!(
        text.contains("argocd_principal_resync_requests_total{result=\"refused\"}"),
        "{text}"
    );
    m.shutdown().await;
    a.shutdown().await;
    p.shutdown().await;
}
