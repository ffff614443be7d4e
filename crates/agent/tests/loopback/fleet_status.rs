//! Issue 30: each agent's state on its cluster secret (the embedded hub's Secrets) and in Argo
//! CD's cluster info: `Successful` while the stream is up, `Failed` with the reason within 2 ×
//! the heartbeat interval after it drops, never `Failed` across a quick reconnect or a principal
//! restart; the agent's and its cluster's versions (unknown with the reason when they cannot be
//! read); no write in a steady state; the events queued for a disconnected agent.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::agent_status as st;
use argocd_pull_agent_core::store::{KubeStore, MemStore, Store};
use argocd_pull_principal::Principal;
use argocd_pull_principal::cluster_secrets::SecretsClient;
use argocd_pull_spoke::{Agent, KubeVersionSource};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::watcher;

use crate::harness::*;

const HEARTBEAT: Duration = Duration::from_secs(2);

struct Hub {
    hub: argocd_pull_hub::Hub,
    secrets: Api<Secret>,
}

async fn hub_with_cluster_secrets(pki: &LocalPki, agents: &[&str]) -> Hub {
    init();
    let hub = argocd_pull_hub::Hub::new();
    let client = hub.client();
    KubeStore::new(client.clone())
        .ensure_namespace("argocd")
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client, "argocd");
    for a in agents {
        let m = pki.agent(a).unwrap();
        let s = argocd_pull_agent_core::cluster_secret::cluster_secret(
            a,
            "argocd",
            &format!("https://argocd-agent-resource-proxy:9090?agentName={a}"),
            Default::default(),
            &m.cert_pem,
            &m.key_pem,
            &m.ca_pem,
        )
        .unwrap();
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    Hub { hub, secrets }
}

async fn principal_on(pki: &LocalPki, hub: &Hub, store: &MemStore, addr: &str) -> Principal {
    let client = hub.hub.client();
    principal_with(pki, store, addr, |c| {
        c.heartbeat = HEARTBEAT;
        c.cluster_secrets = Some(SecretsClient(client));
    })
    .await
}

async fn agent_version_source(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    mode: Mode,
    kube: Result<&'static str, &'static str>,
) -> Agent {
    agent_with(pki, p, name, mode, &MemStore::new(), |c| {
        c.kube_version = Some(KubeVersionSource::from_fn(move || {
            Box::pin(async move { kube.map(str::to_string).map_err(str::to_string) })
        }));
    })
    .await
}

fn annotations(s: &Secret) -> std::collections::BTreeMap<String, String> {
    s.metadata.annotations.clone().unwrap_or_default()
}

fn published(s: &Secret) -> Option<st::AgentStatus> {
    st::AgentStatus::from_annotations(&annotations(s))
}

/// Waits on the secret's watch events until `pred` holds for what it shows.
async fn wait_shown(
    secrets: &Api<Secret>,
    agent: &str,
    what: &str,
    pred: impl Fn(&st::AgentStatus) -> bool,
) -> st::AgentStatus {
    let name = format!("cluster-{agent}");
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut w = watcher::watcher(secrets.clone(), cfg).boxed();
    let r = tokio::time::timeout(T, async {
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = e
                && let Some(p) = published(&s)
                && pred(&p)
            {
                return p;
            }
        }
        panic!("watch ended");
    })
    .await;
    match r {
        Ok(p) => p,
        Err(_) => panic!(
            "timed out waiting for {agent}: {what}; shown: {:?}",
            secrets.get(&name).await.ok().map(|s| annotations(&s))
        ),
    }
}

/// Records every state a secret shows from now on.
fn record(secrets: &Api<Secret>, agent: &str) -> Arc<Mutex<Vec<st::AgentStatus>>> {
    let seen: Arc<Mutex<Vec<st::AgentStatus>>> = Arc::default();
    let s2 = seen.clone();
    let cfg = watcher::Config::default().fields(&format!("metadata.name=cluster-{agent}"));
    let mut w = watcher::watcher(secrets.clone(), cfg).boxed();
    tokio::spawn(async move {
        while let Some(e) = w.next().await {
            if let Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) = e
                && let Some(p) = published(&s)
            {
                s2.lock().unwrap().push(p);
            }
        }
    });
    seen
}

#[tokio::test]
async fn agent_state_on_the_cluster_secret_follows_the_stream_and_never_flaps() {
    let pki = LocalPki::new().unwrap();
    let hub = hub_with_cluster_secrets(&pki, &["m1", "a1"]).await;
    let store = MemStore::new();
    let p = principal_on(&pki, &hub, &store, "127.0.0.1:0").await;
    let addr = p.local_addr().to_string();
    let m1 = agent_version_source(&pki, &p, "m1", Mode::Managed, Ok("v1.29.3+k3s1")).await;
    let a1 = agent_version_source(
        &pki,
        &p,
        "a1",
        Mode::Autonomous,
        Err("GET /version on the agent's API server failed: 503 Service Unavailable"),
    )
    .await;

    // versions, mode, connection: what the hub shows
    let m = wait_shown(&hub.secrets, "m1", "connected, versions known", |s| {
        s.connection == st::Connection::Successful
            && s.kubernetes_version.known() == Some("v1.29.3")
    })
    .await;
    assert_eq!(
        m.agent_version.known(),
        Some(argocd_pull_agent_core::VERSION)
    );
    assert_eq!(m.mode, Some(Mode::Managed));
    assert_eq!(m.mapping, Some(st::AppMapping::Namespace));
    assert_eq!(m.events_queued, "0");
    let a = wait_shown(
        &hub.secrets,
        "a1",
        "connected, cluster version unknown",
        |s| {
            s.connection == st::Connection::Successful
                && matches!(&s.kubernetes_version, st::Reported::Unknown(w) if w.contains("503"))
        },
    )
    .await;
    assert_eq!(a.mode, Some(Mode::Autonomous));
    let raw = annotations(&hub.secrets.get("cluster-a1").await.unwrap());
    assert_eq!(
        raw[st::KUBERNETES_VERSION],
        "unknown",
        "never a made-up version"
    );
    assert!(raw[st::VERSION_MESSAGE].contains("503"), "{raw:?}");
    // Argo CD's cluster info carries the version, or none when unknown
    assert_eq!(p.cluster_info("m1").unwrap()["serverVersion"], "v1.29.3");
    assert_eq!(p.cluster_info("a1").unwrap().get("serverVersion"), None);
    let since = m.since;

    // steady state: no write for 2 sampling periods
    let w0 = hub.hub.counters().writes_to("secrets");
    tokio::time::sleep(HEARTBEAT * 2 + HEARTBEAT / 2).await;
    assert_eq!(
        hub.hub.counters().writes_to("secrets") - w0,
        0,
        "a steady state writes nothing"
    );

    // a quick reconnect (the connection cut, the agent back within the grace period) and a
    // principal restart: never Failed, connected since the same time, nothing written
    let seen = record(&hub.secrets, "m1");
    let n = m1.connections();
    assert!(p.disconnect_agent("m1"));
    tokio::time::timeout(T, m1.wait_connected(n))
        .await
        .expect("reconnects");
    p.shutdown().await;
    let p = principal_on(&pki, &hub, &store, &addr).await;
    tokio::time::timeout(T, m1.wait_connected(n + 1))
        .await
        .expect("reconnects to the restarted principal");
    // the property holds over a window: 2 × the heartbeat interval after the reconnect
    tokio::time::sleep(HEARTBEAT * 2).await;
    let states = seen.lock().unwrap().clone();
    assert!(!states.is_empty());
    assert!(
        states
            .iter()
            .all(|s| s.connection == st::Connection::Successful && s.since == since),
        "never Failed, the same since: {states:?}"
    );
    assert_eq!(
        hub.hub.counters().writes_to("secrets") - w0,
        0,
        "nothing changed, nothing written"
    );

    // the agent goes away: Failed with the reason within 2 × the heartbeat interval
    let gone = Instant::now();
    m1.shutdown().await;
    let f = wait_shown(&hub.secrets, "m1", "Failed", |s| {
        s.connection == st::Connection::Failed
    })
    .await;
    let took = gone.elapsed();
    assert!(
        took <= HEARTBEAT * 2,
        "Failed {took:?} after the drop (heartbeat {HEARTBEAT:?})"
    );
    assert!(
        f.message
            .starts_with("Agent: 'm1' is disconnected with principal: "),
        "{}",
        f.message
    );
    let info = p.cluster_info("m1").unwrap();
    assert_eq!(info["connectionState"]["status"], "Failed");
    assert_eq!(info["connectionState"]["message"], f.message.as_str());
    // ... and back
    let m1 = agent_version_source(&pki, &p, "m1", Mode::Managed, Ok("v1.29.3")).await;
    wait_shown(&hub.secrets, "m1", "Successful again", |s| {
        s.connection == st::Connection::Successful && s.since > f.since
    })
    .await;

    // the principal stops while a1 is connected, a1 stops meanwhile: the next principal shows it
    // Failed twice the heartbeat interval after it started
    p.shutdown().await;
    a1.shutdown().await;
    let started = Instant::now();
    let p = principal_on(&pki, &hub, &store, &addr).await;
    let f = wait_shown(
        &hub.secrets,
        "a1",
        "Failed after the principal's start",
        |s| s.connection == st::Connection::Failed,
    )
    .await;
    assert!(
        started.elapsed() >= HEARTBEAT * 2,
        "{:?}",
        started.elapsed()
    );
    assert!(
        f.message
            .contains("has not connected to this principal since it started"),
        "{}",
        f.message
    );
    // m1 reconnected meanwhile and stays Successful
    let shown = published(&hub.secrets.get("cluster-m1").await.unwrap()).unwrap();
    assert_eq!(shown.connection, st::Connection::Successful);
    m1.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn events_queued_for_a_disconnected_agent_are_published_coarsely() {
    let pki = LocalPki::new().unwrap();
    let hub = hub_with_cluster_secrets(&pki, &["q1"]).await;
    let store = MemStore::new();
    let p = principal_on(&pki, &hub, &store, "127.0.0.1:0").await;
    let q1 = agent_version_source(&pki, &p, "q1", Mode::Managed, Ok("v1.30.0")).await;
    wait_shown(&hub.secrets, "q1", "connected", |s| {
        s.connection == st::Connection::Successful && s.kubernetes_version.known().is_some()
    })
    .await;
    q1.shutdown().await;
    store.ensure_namespace("q1").await.unwrap();
    for i in 0..15 {
        put(&store, app("q1", &format!("app-{i}"), "p")).await;
    }
    let s = wait_shown(&hub.secrets, "q1", "10-99 events queued", |s| {
        s.events_queued == "10-99"
    })
    .await;
    assert_eq!(s.connection, st::Connection::Failed);
    let q1 = agent_version_source(&pki, &p, "q1", Mode::Managed, Ok("v1.30.0")).await;
    wait_shown(&hub.secrets, "q1", "queue drained", |s| {
        s.events_queued == "0" && s.connection == st::Connection::Successful
    })
    .await;
    q1.shutdown().await;
    p.shutdown().await;
}
