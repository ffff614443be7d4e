use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_agent_interop::emitter::{AGENT_SOURCE, Emitter};
use argocd_pull_agent_interop::peer_agent::{self, Login, PeerAgentConfig, PeerStream, T, Tls};
use argocd_pull_agent_interop::peer_principal::{PeerPrincipal, PeerPrincipalConfig};
use argocd_pull_principal::{Principal, PrincipalConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::{Value, json};

pub fn init() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub fn tls(m: &TlsMaterial) -> Tls {
    Tls {
        ca_pem: m.ca_pem.clone(),
        cert_pem: m.cert_pem.clone(),
        key_pem: m.key_pem.clone(),
    }
}

/// OUR principal over a MemStore hub.
pub async fn our_principal(pki: &LocalPki, hub: &MemStore) -> Principal {
    our_principal_reporting(pki, hub, argocd_pull_agent_core::VERSION).await
}

/// OUR principal reporting `version` (`--report-version`) over a MemStore hub.
pub async fn our_principal_reporting(pki: &LocalPki, hub: &MemStore, version: &str) -> Principal {
    our_principal_with(pki, hub, |cfg| cfg.version = version.into()).await
}

/// OUR principal over a MemStore hub, its configuration changed by `set`.
pub async fn our_principal_with(
    pki: &LocalPki,
    hub: &MemStore,
    set: impl FnOnce(&mut PrincipalConfig),
) -> Principal {
    init();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().expect("addr"),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    set(&mut cfg);
    Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .expect("principal starts")
}

pub fn peer_agent_cfg(pki: &LocalPki, p: &Principal, name: &str, mode: &str) -> PeerAgentConfig {
    PeerAgentConfig {
        principal: p.local_addr(),
        tls: tls(&pki.agent(name).expect("agent cert")),
        mode: mode.into(),
        // a peer build whose version string equals ours (the peer demands string equality)
        version: argocd_pull_agent_core::VERSION.into(),
        namespace: "argocd".into(),
    }
}

/// A peer agent logged in to OUR principal with one open stream.
pub async fn peer_agent(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    mode: &str,
) -> (Login, PeerStream) {
    let cfg = peer_agent_cfg(pki, p, name, mode);
    let login = tokio::time::timeout(T, peer_agent::login(&cfg))
        .await
        .expect("login in time")
        .unwrap_or_else(|s| panic!("peer agent login refused: {s:?}"));
    let stream = PeerStream::subscribe(&login, Emitter::new(AGENT_SOURCE))
        .await
        .expect("subscribe");
    (login, stream)
}

/// A peer principal with the given version string, serving the local PKI's server certificate.
pub async fn peer_principal(pki: &LocalPki, version: &str) -> PeerPrincipal {
    init();
    PeerPrincipal::start(PeerPrincipalConfig {
        tls: tls(&pki.principal),
        version: version.into(),
        namespace: "argocd".into(),
        jwt_key_pem: throwaway_jwt_key(),
    })
    .await
    .expect("peer principal starts")
}

/// OUR agent pointed at `pp` (not waited for).
pub async fn our_agent(
    pki: &LocalPki,
    pp: &PeerPrincipal,
    name: &str,
    mode: Mode,
    store: &MemStore,
) -> Agent {
    our_agent_reporting(pki, pp, name, mode, store, argocd_pull_agent_core::VERSION).await
}

/// OUR agent reporting `version` (`--report-version`) at login.
pub async fn our_agent_reporting(
    pki: &LocalPki,
    pp: &PeerPrincipal,
    name: &str,
    mode: Mode,
    store: &MemStore,
    version: &str,
) -> Agent {
    init();
    let mut c = AgentConfig::new(pp.addr, pki.agent(name).expect("agent cert"), mode);
    c.version = version.into();
    c.reconnect_max = Duration::from_millis(500);
    Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
        .await
        .expect("agent starts")
}

pub fn app(ns: &str, name: &str, path: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": path, "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
                 "project": "default"}
    })
}

pub fn project(ns: &str, name: &str, dest_name: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"sourceRepos": ["*"],
                 "destinations": [{"name": dest_name, "namespace": "*", "server": "*"}],
                 "sourceNamespaces": [dest_name]}
    })
}

/// Waits (on watch events, not sleeps) until `pred` holds for the object (None = absent).
pub async fn wait_for(
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
            let cur = store.get(kind, ns, name).await.expect("get");
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
            store.get(kind, ns, name).await.expect("get")
        ),
    }
}

/// `name_uid` / `name_uid_rv` of an object, as the peer's constructors build them.
pub fn ids(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or("").to_string();
    (
        format!("{}_{}", s("name"), s("uid")),
        format!("{}_{}_{}", s("name"), s("uid"), s("resourceVersion")),
    )
}

pub const SENT_AT: &str = "2026-11-25T06:00:00.123456789Z";
pub const PRINCIPAL_UID: &str = "6f1d7c2a-3b4e-4f5a-9c8d-7e6f5a4b3c2d";
