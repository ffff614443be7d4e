//! Principal HA (`--leader-elect`): three replicas on one Lease of the embedded hub, 100 managed
//! agents behind a Service-like balancer, the active replica crashed (its runtime dropped: no
//! Lease release, every socket gone) under load. Prints the failover figures recorded in
//! docs/reliability.md (`cargo test -p argocd-pull-agent --test loopback ha:: -- --nocapture`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store, StoreEvent};
use argocd_pull_principal::PrincipalConfig;
use argocd_pull_principal::ha::{self, HaConfig, Role};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::harness::*;

const AGENTS: usize = 100;
const REPLICAS: usize = 3;

/// One replica on its own runtime and thread, so that dropping the runtime is a crash.
struct Replica {
    role: watch::Receiver<Role>,
    crash: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    fn start(
        i: usize,
        port: u16,
        client: kube::Client,
        hub: MemStore,
        pki: &LocalPki,
        jwt: &str,
    ) -> Self {
        let host = format!("127.0.0.{}", i + 2);
        let mut cfg = PrincipalConfig::new(
            format!("{host}:{port}").parse().unwrap(),
            pki.principal.clone(),
            jwt.to_string(),
        );
        cfg.namespace = "argocd".into();
        let ha = HaConfig::new(
            "argocd-agent-principal",
            "argocd",
            &format!("principal-{i}"),
            &host,
            Duration::from_secs(3),
        )
        .unwrap();
        let (role_tx, role) = watch::channel(Role::Recovering);
        let (crash, crashed) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let token = argocd_pull_ops::CancellationToken::new();
            let t = token.clone();
            let run = rt.spawn(async move {
                let replica = ha::Replica {
                    client,
                    store: Arc::new(hub),
                    metrics: Metrics::new("argocd_principal"),
                    role: role_tx,
                    tls: None,
                    lease_config: None,
                };
                ha::run(ha, cfg, replica, t).await
            });
            // a crash: every task is dropped where it stands (no Lease release, sockets closed);
            // a disconnect of the channel (test over) is a graceful stop
            match crashed.recv() {
                Ok(()) => rt.shutdown_background(),
                Err(_) => {
                    token.cancel();
                    let _ = rt.block_on(run);
                }
            }
        });
        Replica {
            role,
            crash: Some(crash),
            thread: Some(thread),
        }
    }

    fn crash(&mut self) {
        let _ = self.crash.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        drop(self.crash.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

async fn wait_role(r: &mut watch::Receiver<Role>, want: impl Fn(&Role) -> bool) {
    tokio::time::timeout(T, r.wait_for(|x| want(x)))
        .await
        .expect("role reached")
        .unwrap();
}

fn path_of(o: &Value) -> String {
    o["spec"]["source"]["path"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_principal_crash_under_load_fails_over_with_nothing_lost() {
    init();
    let h = argocd_pull_hub::Hub::new();
    let client = h.client();
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    ns.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "argocd"}})).unwrap(),
    )
    .await
    .unwrap();
    let pki = LocalPki::new().unwrap();
    // every replica signs with the same key (the `argocd-agent-jwt` Secret)
    let jwt = throwaway_jwt_key();
    let hub = MemStore::new();
    // the same port on three loopback addresses, as three pods behind one Service
    let port = TcpListener::bind("127.0.0.2:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut replicas: Vec<Replica> = (0..REPLICAS)
        .map(|i| Replica::start(i, port, h.client(), hub.clone(), &pki, &jwt))
        .collect();
    let backends = (0..REPLICAS)
        .map(|i| format!("127.0.0.{}:{port}", i + 2).parse().unwrap())
        .collect();
    let svc = argocd_pull_agent::local::balancer(backends).await.unwrap();
    // exactly one becomes active, the others stand by for it
    let active = tokio::time::timeout(T, async {
        loop {
            if let Some(i) = replicas
                .iter()
                .position(|r| *r.role.borrow() == Role::Active)
            {
                return i;
            }
            let mut rs: Vec<_> = replicas.iter().map(|r| r.role.clone()).collect();
            let _ = futures::future::select_all(rs.iter_mut().map(|r| Box::pin(r.changed()))).await;
        }
    })
    .await
    .expect("a replica becomes active");
    for (i, r) in replicas.iter_mut().enumerate() {
        if i != active {
            wait_role(&mut r.role, |x| {
                matches!(x, Role::Standby { active: Some(a) } if a.starts_with(&format!("principal-{active}@")))
            })
            .await;
        }
    }

    // 100 agents, one Application each
    let agents = managed_agents(&hub, &pki, svc, AGENTS).await;

    // duplicate side effects on the agents: a write that changes nothing, or an older spec
    // applied after a newer one (a stale event from the dead replica)
    let duplicates = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (_, s) in &agents {
        let (s, d) = (s.clone(), duplicates.clone());
        tokio::spawn(async move {
            let mut last: Option<(Value, u64)> = None;
            let mut w = s.watch(Kind::Application, Some("argocd"));
            while let Some(Ok(ev)) = w.next().await {
                if let StoreEvent::Applied(o) = ev {
                    let mut o = std::sync::Arc::unwrap_or_clone(o);
                    o["metadata"]
                        .as_object_mut()
                        .map(|m| m.remove("resourceVersion"));
                    let n = path_of(&o)[1..].parse::<u64>().unwrap_or(0);
                    if let Some((prev, pn)) = &last
                        && (*prev == o || n < *pn)
                    {
                        d.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    last = Some((o, n));
                }
            }
        });
    }

    // load: the hub changes one Application every 5 ms, round robin, through the crash
    let (stop_tx, stop_rx) = watch::channel(false);
    let writer = {
        let hub = hub.clone();
        tokio::spawn(async move {
            let mut last: HashMap<usize, String> = HashMap::new();
            let mut n = 0usize;
            while !*stop_rx.borrow() {
                let i = n % AGENTS;
                let v = format!("v{}", n + 1);
                patch(
                    &hub,
                    &format!("agent-{i}"),
                    "app",
                    json!({"spec": {"source": {"path": v}}}),
                )
                .await;
                last.insert(i, v);
                n += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (last, n)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await; // load before the crash (not a sync)
    let before: Vec<u64> = agents.iter().map(|(a, _)| a.connections()).collect();

    let t0 = Instant::now();
    replicas[active].crash();
    // agents report a status while no replica serves them
    for (_, s) in &agents {
        try_patch(
            s,
            "argocd",
            "app",
            json!({"status": {"health": {"status": "Degraded"}}}),
        )
        .await;
    }
    let mut survivors: Vec<usize> = (0..REPLICAS).filter(|i| *i != active).collect();
    let takeover = tokio::time::timeout(T, async {
        loop {
            if let Some(i) = survivors
                .iter()
                .copied()
                .find(|i| *replicas[*i].role.borrow() == Role::Active)
            {
                return (i, t0.elapsed());
            }
            let mut rs: Vec<_> = survivors
                .iter()
                .map(|i| replicas[*i].role.clone())
                .collect();
            let _ = futures::future::select_all(rs.iter_mut().map(|r| Box::pin(r.changed()))).await;
        }
    })
    .await
    .expect("a survivor takes over");
    survivors.retain(|i| *i != takeover.0);
    // each agent's own reconnection time (awaited concurrently)
    let mut reconnected: Vec<Duration> =
        futures::future::join_all(agents.iter().zip(&before).map(|((a, _), n)| async move {
            tokio::time::timeout(T, a.wait_connected(*n))
                .await
                .expect("agent back");
            t0.elapsed()
        }))
        .await;
    reconnected.sort();
    let all_back = *reconnected.iter().max().unwrap();
    let (last, writes) = {
        stop_tx.send(true).unwrap();
        writer.await.unwrap()
    };
    // nothing lost: every Application's last hub version reaches its agent, every agent's status
    // written during the outage reaches the hub
    for (i, (_, s)) in agents.iter().enumerate() {
        let want = last.get(&i).cloned().unwrap_or_else(|| "v0".into());
        wait_for(s, "argocd", "app", &format!("agent-{i} gets {want}"), |o| {
            o.is_some_and(|o| path_of(o) == want)
        })
        .await;
        wait_for(
            &hub,
            &format!("agent-{i}"),
            "app",
            "status from the agent",
            |o| o.is_some_and(|o| o["status"]["health"]["status"] == "Degraded"),
        )
        .await;
    }
    let converged = t0.elapsed();
    // one active replica, the last one standing by for it
    for i in &survivors {
        wait_role(&mut replicas[*i].role, |x| {
            matches!(x, Role::Standby { active: Some(a) } if a.starts_with(&format!("principal-{}@", takeover.0)))
        })
        .await;
    }
    let dups = duplicates.load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "HA failover, {AGENTS} agents, {REPLICAS} replicas, Lease 3s, {writes} hub writes at ~200/s: \
         takeover {:?}, agents back: first {:?}, median {:?}, last {:?}; everything converged {:?}, lost 0, duplicate applies {dups}",
        takeover.1,
        reconnected[0],
        reconnected[reconnected.len() / 2],
        all_back,
        converged
    );
    assert_eq!(
        dups, 0,
        "no agent wrote an Application without a change or went back to an older spec"
    );
    for (a, _) in agents {
        a.shutdown().await;
    }
}
