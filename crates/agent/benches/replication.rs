//! Cross-cluster HA (`--ha-enabled`): replication lag, promotion to serving, events lost across
//! a promotion. `cargo bench -p argocd-pull-agent --bench replication`; results in
//! docs/perf/replication.md and docs/performance.md.
//!
//! With `ARGOCD_PULL_E2E_HUB_KUBECONFIG` and `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG` the primary's
//! hub is the first API server and the replica's hub the second (real kube-apiservers); without
//! them both are in-memory stores. Only objects labelled `ha-bench=<run>` are seen (the
//! principals run with that label selector), in a fresh namespace deleted afterwards.
//!
//! Scenarios: (1) `BENCH_RATE` (1,000) Application changes/s for `BENCH_SECS` (10) over
//! `BENCH_APPS` (200) Applications: replication lag = change visible on the replica's API
//! server − write acknowledged by the primary's; (2) a clean switchover under that load
//! (demote the primary, promote the replica): changes acknowledged before the demote that the
//! replica lacks, and promotion → an agent served; (3) the primary killed under load (no
//! demote), the replica promoted: changes acknowledged by the dead primary that the replica
//! lacks.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::proto::haadminapi::{self as admin, ha_admin_client::HaAdminClient};
use argocd_pull_agent_core::store::{Kind, KubeStore, MemStore, Store, StoreEvent};
use argocd_pull_principal::PrincipalConfig;
use argocd_pull_principal::ha::replication::{self, Node, PreferredRole, Settings, State};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

fn env<T: std::str::FromStr>(k: &str, d: T) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn kube_store(var: &str) -> Option<Arc<dyn Store>> {
    let path = std::env::var(var).ok()?;
    let c = argocd_pull_agent_core::settings::kube_client(Some(&path.into()), None)
        .await
        .unwrap();
    Some(Arc::new(KubeStore::new(c)))
}

fn selected(store: Arc<dyn Store>, run: &str) -> Arc<dyn Store> {
    let sel = argocd_pull_agent_core::selector::parse(&format!("ha-bench={run}")).unwrap();
    Arc::new(argocd_pull_agent_core::selector::SelectedStore::new(
        store,
        sel,
        vec![Kind::Application, Kind::AppProject, Kind::Secret],
    ))
}

/// One principal, on a runtime of its own so that [`Principal::kill`] takes everything it runs
/// (its gRPC server, its replication streams, its listeners) away at once, as a killed process.
struct Principal {
    state: watch::Receiver<State>,
    grpc: SocketAddr,
    admin: SocketAddr,
    stop: argocd_pull_ops::CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl Principal {
    /// Gone without a drain or a demote: every task and socket of this principal dropped.
    fn kill(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Principal {
    fn drop(&mut self) {
        self.kill();
    }
}

#[allow(clippy::too_many_arguments)]
fn start(
    store: Arc<dyn Store>,
    grpc: SocketAddr,
    pki: &LocalPki,
    uid: &str,
    role: PreferredRole,
    peer: SocketAddr,
    ns: &str,
) -> Principal {
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut cfg = PrincipalConfig::new(grpc, pki.principal.clone(), throwaway_jwt_key());
    cfg.namespace = ns.into();
    cfg.principal_uid = Some(uid.into());
    let settings = Settings {
        preferred_role: role,
        peer_address: peer.to_string(),
        failover_timeout: Duration::from_secs(2),
        admin_addr: admin,
        allowed_clients: vec![],
        initial_ack_timeout: Duration::from_secs(300),
    };
    let (tx, state) = watch::channel(State::Recovering);
    let node = Node {
        store,
        metrics: Metrics::new("argocd_principal"),
        tls: None,
        state: Some(tx),
    };
    let stop = argocd_pull_ops::CancellationToken::new();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(format!("principal-{uid}"))
        .enable_all()
        .build()
        .unwrap();
    let task = rt.spawn(replication::run(settings, cfg, node, stop.clone()));
    Principal {
        state,
        grpc,
        admin,
        stop,
        task,
        rt: Some(rt),
    }
}

async fn wait_state(p: &mut Principal, s: State) {
    tokio::time::timeout(Duration::from_secs(120), p.state.wait_for(|x| *x == s))
        .await
        .unwrap_or_else(|_| panic!("state {s} not reached"))
        .unwrap();
}

fn app(ns: &str, name: &str, run: &str, rev: u64) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns, "labels": {"ha-bench": run}},
        "spec": {"project": "default",
            "source": {"repoURL": "https://example.com/repo.git", "path": "guestbook", "targetRevision": format!("r{rev}")},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}})
}

fn rev_of(v: &Value) -> u64 {
    v["spec"]["source"]["targetRevision"]
        .as_str()
        .and_then(|r| r.strip_prefix('r'))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Writes `rate` changes/s to `store` for `secs` seconds (until `stop`); returns, per change
/// number, the app and the time its write was acknowledged.
#[allow(clippy::too_many_arguments)]
async fn load(
    store: Arc<dyn Store>,
    ns: String,
    apps: usize,
    rate: u64,
    secs: u64,
    first_rev: u64,
    acked: Arc<Mutex<HashMap<u64, (usize, Instant)>>>,
    stop: watch::Receiver<bool>,
) -> u64 {
    let total = rate * secs;
    let t0 = Instant::now();
    // one worker per app slot: each app's writes are sequential, so its revisions only grow
    const W: usize = 64;
    let mut txs = Vec::new();
    let mut workers = Vec::new();
    for _ in 0..W {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, usize)>(1024);
        txs.push(tx);
        let (store, ns, acked) = (store.clone(), ns.clone(), acked.clone());
        workers.push(tokio::spawn(async move {
            while let Some((rev, i)) = rx.recv().await {
                let name = format!("app-{i}");
                let p = json!({"spec": {"source": {"targetRevision": format!("r{rev}")}}});
                if store
                    .merge_patch(Kind::Application, &ns, &name, p)
                    .await
                    .is_ok()
                {
                    acked.lock().unwrap().insert(rev, (i, Instant::now()));
                }
            }
        }));
    }
    let mut sent = 0;
    for n in 0..total {
        if *stop.borrow() {
            break;
        }
        let due = t0 + Duration::from_secs_f64(n as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let i = (n as usize) % apps;
        if txs[i % W].send((first_rev + n, i)).await.is_err() {
            break;
        }
        sent += 1;
    }
    drop(txs);
    for w in workers {
        let _ = w.await;
    }
    sent
}

/// Records when each revision becomes visible on `store` (its watch).
fn observe(store: Arc<dyn Store>, ns: String) -> Arc<Mutex<HashMap<u64, Instant>>> {
    let seen: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        let mut w = store.watch(Kind::Application, Some(&ns));
        while let Some(ev) = w.next().await {
            let now = Instant::now();
            let objs = match ev {
                Ok(StoreEvent::Applied(o)) => vec![o],
                Ok(StoreEvent::Restarted(l)) => l,
                _ => continue,
            };
            let mut g = s.lock().unwrap();
            for o in objs {
                g.entry(rev_of(&o)).or_insert(now);
            }
        }
    });
    seen
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Changes acknowledged by the primary before `cut` whose app's final revision on `replica` is
/// older (lost).
async fn lost_before(
    replica: &dyn Store,
    ns: &str,
    acked: &HashMap<u64, (usize, Instant)>,
    cut: Instant,
) -> (usize, usize) {
    let mut want: HashMap<usize, u64> = HashMap::new();
    let mut counted = 0;
    for (rev, (i, at)) in acked {
        if *at < cut {
            counted += 1;
            let e = want.entry(*i).or_default();
            *e = (*e).max(*rev);
        }
    }
    let mut lost = 0;
    for (i, rev) in &want {
        let have = replica
            .get(Kind::Application, ns, &format!("app-{i}"))
            .await
            .unwrap()
            .map(|o| rev_of(&o))
            .unwrap_or(0);
        if have < *rev {
            // every acknowledged change of this app after the replica's revision is lost
            lost += acked
                .iter()
                .filter(|(r, (j, at))| j == i && *at < cut && **r > have)
                .count();
        }
    }
    (lost, counted)
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let apps: usize = env("BENCH_APPS", 200);
    let rate: u64 = env("BENCH_RATE", 1000);
    let secs: u64 = env("BENCH_SECS", 10);
    let run_id = format!("{:x}", std::process::id());
    let ns = format!("ha-bench-{run_id}");
    let pns = format!("ha-bench-{run_id}-p");
    let (a_raw, b_raw, real) = match (
        kube_store("ARGOCD_PULL_E2E_HUB_KUBECONFIG").await,
        kube_store("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG").await,
    ) {
        (Some(a), Some(b)) => (a, b, true),
        _ => (
            Arc::new(MemStore::new()) as Arc<dyn Store>,
            Arc::new(MemStore::new()) as Arc<dyn Store>,
            false,
        ),
    };
    println!(
        "hubs: {} | {apps} Applications, {rate} changes/s for {secs} s",
        if real {
            "real API servers (primary: hub, replica: managed cluster)"
        } else {
            "in-memory stores"
        }
    );
    let (a_store, b_store) = (
        selected(a_raw.clone(), &run_id),
        selected(b_raw.clone(), &run_id),
    );
    for s in [&a_raw, &b_raw] {
        s.ensure_namespace(&ns).await.unwrap();
        s.ensure_namespace(&pns).await.unwrap();
    }
    for i in 0..apps {
        a_store
            .create(Kind::Application, app(&ns, &format!("app-{i}"), &run_id, 0))
            .await
            .unwrap();
    }
    let pki = LocalPki::new().unwrap();
    let (ga, gb): (SocketAddr, SocketAddr) = (
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        format!("127.0.0.1:{}", free_port()).parse().unwrap(),
    );
    let mut a = start(
        a_store.clone(),
        ga,
        &pki,
        "bench-a",
        PreferredRole::Primary,
        gb,
        &pns,
    );
    wait_state(&mut a, State::Active).await;
    let t = Instant::now();
    let mut b = start(
        b_store.clone(),
        gb,
        &pki,
        "bench-b",
        PreferredRole::Replica,
        ga,
        &pns,
    );
    wait_state(&mut b, State::Replicating).await;
    println!("initial sync of {apps} Applications: {:?}", t.elapsed());

    // 1. lag at the rate
    let seen = observe(b_store.clone(), ns.clone());
    let acked: Arc<Mutex<HashMap<u64, (usize, Instant)>>> = Arc::default();
    let (_never, no_stop) = watch::channel(false);
    let t = Instant::now();
    let sent = load(
        a_store.clone(),
        ns.clone(),
        apps,
        rate,
        secs,
        1,
        acked.clone(),
        no_stop.clone(),
    )
    .await;
    let took = t.elapsed();
    let acked_n = acked.lock().unwrap().len();
    // every change becomes visible (the last write of each app at least)
    let deadline = Instant::now() + Duration::from_secs(120);
    let max_rev = acked.lock().unwrap().keys().max().copied().unwrap_or(0);
    while !seen.lock().unwrap().contains_key(&max_rev) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut lags: Vec<f64> = {
        let a = acked.lock().unwrap();
        let s = seen.lock().unwrap();
        a.iter()
            .filter_map(|(rev, (_, at))| {
                s.get(rev)
                    .map(|v| v.saturating_duration_since(*at).as_secs_f64() * 1000.0)
            })
            .collect()
    };
    let observed = lags.len();
    println!(
        "load: {sent} changes sent, {acked_n} acknowledged by the primary in {took:.1?} ({:.0}/s)",
        acked_n as f64 / took.as_secs_f64()
    );
    println!(
        "replication lag (primary write acknowledged → visible on the replica's API server), {observed} changes observed (coalesced ones are not): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(&mut lags, 0.5),
        pct(&mut lags, 0.99),
        pct(&mut lags, 1.0)
    );

    // 2. clean switchover under load
    let acked2: Arc<Mutex<HashMap<u64, (usize, Instant)>>> = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let loader = tokio::spawn(load(
        a_store.clone(),
        ns.clone(),
        apps,
        rate,
        60,
        1_000_000,
        acked2.clone(),
        stop_rx,
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cut = Instant::now();
    let mut ac = HaAdminClient::connect(format!("http://{}", a.admin))
        .await
        .unwrap();
    ac.demote(admin::DemoteRequest {}).await.unwrap();
    let demoted = Instant::now();
    let _ = stop_tx.send(true);
    let _ = loader.await;
    wait_state(&mut b, State::Disconnected).await;
    let acked_now = acked2.lock().unwrap().clone();
    let (lost, counted) = lost_before(b_store.as_ref(), &ns, &acked_now, cut).await;
    println!(
        "clean switchover: demote took {:?}; changes acknowledged before the demote: {counted}, lost on the replica: {lost}",
        demoted - cut
    );
    // promotion → an agent served (its address follows the active one)
    let local = MemStore::new();
    let t = Instant::now();
    let mut bc = HaAdminClient::connect(format!("http://{}", b.admin))
        .await
        .unwrap();
    bc.promote(admin::PromoteRequest { force: false })
        .await
        .unwrap();
    let promoted = t.elapsed();
    let mut c = AgentConfig::new(b.grpc, pki.agent(&ns).unwrap(), Mode::Managed);
    c.server_name = "localhost".into();
    c.reconnect_max = Duration::from_millis(200);
    let agent = Agent::start(c, Arc::new(local.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    agent.wait_connected(0).await;
    let connected = t.elapsed();
    // every Application of the agent's namespace reaches it from the promoted replica
    let deadline = Instant::now() + Duration::from_secs(120);
    while local
        .list(Kind::Application, Some("argocd"))
        .await
        .unwrap()
        .len()
        < apps
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "promotion: the principal serving after {promoted:?}, an agent connected after {connected:?}, its {} Applications delivered after {:?}",
        local
            .list(Kind::Application, Some("argocd"))
            .await
            .unwrap()
            .len(),
        t.elapsed()
    );
    drop(agent);
    wait_state(&mut a, State::Replicating).await;

    // 3. the primary (now B) killed under load, A promoted without a demote
    let acked3: Arc<Mutex<HashMap<u64, (usize, Instant)>>> = Arc::default();
    let (stop_tx, stop_rx) = watch::channel(false);
    let loader = tokio::spawn(load(
        b_store.clone(),
        ns.clone(),
        apps,
        rate,
        60,
        2_000_000,
        acked3.clone(),
        stop_rx,
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let crash = Instant::now();
    b.kill(); // no drain, no demote: the process is gone
    let _ = stop_tx.send(true);
    let _ = loader.await;
    wait_state(&mut a, State::Disconnected).await;
    let mut ac = HaAdminClient::connect(format!("http://{}", a.admin))
        .await
        .unwrap();
    ac.promote(admin::PromoteRequest { force: false })
        .await
        .unwrap();
    let acked_now = acked3.lock().unwrap().clone();
    let (lost, counted) = lost_before(a_store.as_ref(), &ns, &acked_now, crash).await;
    println!(
        "primary killed under load, replica promoted: changes acknowledged before the kill: {counted}, lost: {lost} ({:.0} ms of load at {rate}/s)",
        lost as f64 / rate as f64 * 1000.0
    );

    a.stop.cancel();
    b.stop.cancel();
    let _ = (&mut a.task).await;
    // clean up what this run created
    for s in [&a_raw, &b_raw] {
        if let Ok(l) = s.list(Kind::Application, Some(&ns)).await {
            for o in l {
                let n = o["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let _ = s
                    .merge_patch(
                        Kind::Application,
                        &ns,
                        &n,
                        json!({"metadata": {"finalizers": null}}),
                    )
                    .await;
                let _ = s.delete(Kind::Application, &ns, &n).await;
            }
        }
    }
    if real {
        for var in [
            "ARGOCD_PULL_E2E_HUB_KUBECONFIG",
            "ARGOCD_PULL_E2E_MANAGED_KUBECONFIG",
        ] {
            let path = std::env::var(var).unwrap();
            let c = argocd_pull_agent_core::settings::kube_client(Some(&path.into()), None)
                .await
                .unwrap();
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(c);
            for n in [&ns, &pns] {
                let _ = api.delete(n, &Default::default()).await;
            }
        }
    }
}
