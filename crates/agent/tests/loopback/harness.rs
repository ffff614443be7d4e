use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::{Value, json};

pub const T: Duration = Duration::from_secs(20);

/// A gRPC channel to `addr` over mutual TLS with the agent certificate `m` (an agent's own
/// calls, without the agent around them).
pub async fn mtls_channel(
    addr: std::net::SocketAddr,
    m: &argocd_pull_agent_core::tls::TlsMaterial,
) -> Result<tonic::transport::Channel, String> {
    use argocd_pull_agent_core::tls;
    let cfg = Arc::new(tls::client_config(m, false).unwrap());
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_with_connector(tls::connector(cfg, addr, "localhost".into()))
        .await
        .map_err(|e| format!("{e:?}"))
}

/// An `Authenticate` as our agent sends it (`mtls`, in `mode`); the access token.
pub async fn login(ch: tonic::transport::Channel, mode: &str) -> Result<String, tonic::Status> {
    use argocd_pull_agent_core::proto::authapi::{
        AuthRequest, authentication_client::AuthenticationClient,
    };
    AuthenticationClient::new(ch)
        .authenticate(AuthRequest {
            method: "mtls".into(),
            mode: mode.into(),
            version: argocd_pull_agent_core::VERSION.into(),
            ..Default::default()
        })
        .await
        .map(|r| r.into_inner().access_token)
}

pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os("DEBUG_LOG").is_some() {
        let _ = argocd_pull_ops::logging::init(argocd_pull_ops::logging::LogFormat::Text);
    }
}

pub async fn principal(pki: &LocalPki, hub: &MemStore, addr: &str) -> Principal {
    principal_with(pki, hub, addr, |_| {}).await
}

pub async fn principal_with(
    pki: &LocalPki,
    hub: &MemStore,
    addr: &str,
    f: impl FnOnce(&mut PrincipalConfig),
) -> Principal {
    init();
    let wanted: std::net::SocketAddr = addr.parse().unwrap();
    let mut cfg = PrincipalConfig::new(wanted, pki.principal.clone(), throwaway_jwt_key());
    f(&mut cfg);
    // A test that restarts the principal binds again the port the first one had, so that port
    // must not be one any other socket can be handed meanwhile: for `:0` the principal listens
    // below the kernel's ephemeral range (32768-60999 on Linux), where outgoing connections of
    // the tests running in parallel (or an agent's reconnect, self-connecting) never land.
    // Taken ports are skipped; the same port again is retried, bounded.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let deadline = tokio::time::Instant::now() + T;
    loop {
        if wanted.port() == 0 {
            let n = std::process::id()
                .wrapping_mul(7919)
                .wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed));
            cfg.listen = std::net::SocketAddr::new(wanted.ip(), 20_000 + (n % 12_000) as u16);
        }
        match Principal::start(
            cfg.clone(),
            Arc::new(hub.clone()),
            Metrics::new("argocd_principal"),
        )
        .await
        {
            Ok(p) => return p,
            Err(e) if addr_in_use(&e) && tokio::time::Instant::now() < deadline => {
                if wanted.port() != 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
            }
            Err(e) => panic!("principal on {}: {e:#}", cfg.listen),
        }
    }
}

fn addr_in_use(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::AddrInUse)
    })
}

pub async fn agent(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    mode: Mode,
    store: &MemStore,
) -> Agent {
    agent_with(pki, p, name, mode, store, |_| {}).await
}

pub async fn agent_with(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    mode: Mode,
    store: &MemStore,
    f: impl FnOnce(&mut AgentConfig),
) -> Agent {
    let mut c = AgentConfig::new(p.local_addr(), pki.agent(name).unwrap(), mode);
    c.reconnect_max = Duration::from_millis(500);
    f(&mut c);
    let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(T, a.wait_connected(0))
        .await
        .expect("agent connects");
    a
}

/// Starts an agent that the principal is expected to refuse; returns it once its last error
/// names `want`.
pub async fn refused_agent(mut c: AgentConfig, store: &MemStore, want: &str) -> Agent {
    c.reconnect_max = Duration::from_millis(200);
    let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    wait_idle(|| a.last_error().is_some_and(|e| e.contains(want))).await;
    assert!(!a.is_connected(), "refused: {want}");
    a
}

pub fn app(ns: &str, name: &str, path: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns, "labels": {"team": "a"}, "annotations": {"keep": "me"}},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://example.com/repo.git", "path": path, "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}},
        "unknownTopLevel": {"kept": true}
    })
}

/// Waits (on watch events, not sleeps) until `pred` holds for the Application (None = absent).
pub async fn wait_for(
    store: &MemStore,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    wait_for_kind(store, Kind::Application, ns, name, what, pred).await
}

/// Waits (on watch events, not sleeps) until `pred` holds for the object of `kind` (None = absent).
pub async fn wait_for_kind(
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
    match r {
        Ok(v) => v,
        Err(_) => panic!(
            "timed out waiting for {kind:?} {ns}/{name}: {what}; now: {:?}",
            store.get(kind, ns, name).await.unwrap()
        ),
    }
}

pub async fn put(store: &MemStore, obj: Value) -> Value {
    store.create(Kind::Application, obj).await.unwrap()
}

pub async fn patch(store: &MemStore, ns: &str, name: &str, p: Value) -> Value {
    store
        .merge_patch(Kind::Application, ns, name, p)
        .await
        .unwrap()
}

pub async fn try_patch(store: &MemStore, ns: &str, name: &str, p: Value) {
    let _ = store.merge_patch(Kind::Application, ns, name, p).await;
}

pub async fn del(store: &MemStore, ns: &str, name: &str) {
    store.delete(Kind::Application, ns, name).await.unwrap()
}

pub async fn wait_idle(f: impl Fn() -> bool) {
    // queue drains are internal state without an event to await: poll briefly under a timeout
    tokio::time::timeout(T, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("queue drained");
}

/// `n` managed agents `agent-<i>` through `svc`, each with its hub Application `app`; returns
/// once every one is connected and holds it.
pub async fn managed_agents(
    hub: &MemStore,
    pki: &LocalPki,
    svc: std::net::SocketAddr,
    n: usize,
) -> Vec<(Agent, MemStore)> {
    let mut agents: Vec<(Agent, MemStore)> = Vec::new();
    for i in 0..n {
        let name = format!("agent-{i}");
        put(hub, app(&name, "app", "v0")).await;
        let store = MemStore::new();
        let c = AgentConfig::new(svc, pki.agent(&name).unwrap(), Mode::Managed);
        let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((a, store));
    }
    for (i, (a, s)) in agents.iter().enumerate() {
        tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
        wait_for(s, "argocd", "app", &format!("agent-{i} app"), |o| {
            o.is_some()
        })
        .await;
    }
    agents
}
