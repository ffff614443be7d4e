//! Active/active principal replicas (`--ha-mode active-active`): three replicas sharing 32 shard
//! Leases on the embedded hub, agents reaching any of them through one Service-like balancer.
//! Every replica serves its share and forwards the other agents' calls to their owner; a replica
//! stopped (SIGTERM) hands its shards over, one killed loses them when their Leases expire; in
//! both cases its agents come back through the others, nothing is lost and nothing re-created.
//! Prints the figures recorded in docs/reliability.md
//! (`cargo test -p argocd-pull-agent --test loopback active_active -- --nocapture`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_principal::ha::active_active::{self, ActiveActive};
use argocd_pull_principal::ha::{Replica as ReplicaDeps, Role};
use argocd_pull_principal::{PrincipalConfig, RedisProxyConfig, ResourceProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::fake_pods::{FakePods, Seen};
use crate::harness::*;
use argocd_pull_agent_core::resource::kubeconfig_yaml;
use argocd_pull_spoke::{LocalRedisProxy, ResourceProxyClient};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AGENTS: usize = 30;
const REPLICAS: usize = 3;
const SHARDS: u32 = 32;
const LEASE: Duration = Duration::from_secs(3);

/// One replica on its own runtime and thread: dropping the runtime is a SIGKILL (no Lease
/// released, every socket gone), closing the channel a SIGTERM.
struct Replica {
    metrics: Arc<Metrics>,
    crash: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    fn start(
        i: usize,
        ports: Ports,
        client: kube::Client,
        hub: MemStore,
        pki: &LocalPki,
        jwt: &str,
    ) -> Self {
        let host = format!("127.0.0.{}", i + 2);
        let mut cfg = PrincipalConfig::new(
            format!("{host}:{}", ports.grpc).parse().unwrap(),
            pki.principal.clone(),
            jwt.to_string(),
        );
        cfg.namespace = "argocd".into();
        if let Some((p, hub)) = &ports.redis {
            cfg.redis_proxy = Some(RedisProxyConfig::new(
                format!("{host}:{p}").parse().unwrap(),
                hub,
            ));
        }
        if let Some(p) = ports.proxy {
            cfg.resource_proxy = Some(ResourceProxyConfig::new(
                format!("{host}:{p}").parse().unwrap(),
                pki.principal.clone(),
            ));
        }
        let aa = ActiveActive::new(
            "argocd-agent-principal",
            "argocd",
            &format!("principal-{i}"),
            &host,
            LEASE,
            SHARDS,
            ports.replica,
        )
        .unwrap();
        let metrics = Metrics::new("argocd_principal");
        let m = metrics.clone();
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
                let deps = ReplicaDeps {
                    client,
                    store: Arc::new(hub),
                    metrics: m,
                    role: watch::channel(Role::Recovering).0,
                    tls: None,
                    lease_config: None,
                };
                active_active::run(aa, cfg, deps, t).await
            });
            match crashed.recv() {
                Ok(()) => rt.shutdown_background(),
                Err(_) => {
                    token.cancel();
                    rt.block_on(run).unwrap().expect("a replica stops cleanly");
                }
            }
        });
        Replica {
            metrics,
            crash: Some(crash),
            thread: Some(thread),
        }
    }

    fn crash(&mut self) {
        let _ = self.crash.take().unwrap().send(());
        self.thread.take().unwrap().join().unwrap();
    }

    /// SIGTERM: returns once the replica has stopped.
    fn stop(&mut self) {
        drop(self.crash.take());
        self.thread.take().unwrap().join().unwrap();
    }

    fn gauge(&self, name: &str) -> f64 {
        metric(&self.metrics, name)
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

/// The sum of a metric's series in the text exposition.
fn metric(m: &Metrics, name: &str) -> f64 {
    m.encode()
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with(' ') || r.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The value of one exact series (`name{labels}`), 0 when absent.
fn metric_of(m: &Metrics, series: &str) -> f64 {
    m.encode()
        .lines()
        .filter_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
        .sum()
}

/// The replicas' ports: the same on each replica's address, as pods behind a Service.
#[derive(Clone)]
struct Ports {
    grpc: u16,
    replica: u16,
    proxy: Option<u16>,
    /// the Redis proxy's port and the hub Redis
    redis: Option<(u16, String)>,
}

/// Free ports on 127.0.0.2 (`proxy`: with the resource proxy).
async fn ports(proxy: bool) -> Ports {
    let free = || async {
        let l = TcpListener::bind("127.0.0.2:0").await.unwrap();
        (l.local_addr().unwrap().port(), l)
    };
    let ((grpc, _a), (replica, _b), (p, _c)) = (free().await, free().await, free().await);
    Ports {
        grpc,
        replica,
        proxy: proxy.then_some(p),
        redis: None,
    }
}

/// `n` replicas of the embedded `hub` and the Service in front of them.
async fn replicas(
    h: &argocd_pull_hub::Hub,
    hub: &MemStore,
    pki: &LocalPki,
    n: usize,
    ports: Ports,
) -> (Vec<Replica>, SocketAddr) {
    let ns: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(h.client());
    ns.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "argocd"}})).unwrap(),
    )
    .await
    .unwrap();
    // every replica signs with the same key (the `argocd-agent-jwt` Secret)
    let jwt = throwaway_jwt_key();
    let replicas: Vec<Replica> = (0..n)
        .map(|i| Replica::start(i, ports.clone(), h.client(), hub.clone(), pki, &jwt))
        .collect();
    let backends = (0..n)
        .map(|i| format!("127.0.0.{}:{}", i + 2, ports.grpc).parse().unwrap())
        .collect();
    let svc = argocd_pull_agent::local::balancer(backends).await.unwrap();
    // the shards split evenly, every one held once
    until("a fair split of the shards", || {
        let held: Vec<f64> = replicas
            .iter()
            .map(|r| r.gauge("argocd_principal_ha_shards_held"))
            .collect();
        held.iter().sum::<f64>() == f64::from(SHARDS)
            && held.iter().all(|&k| {
                k == f64::from(SHARDS / n as u32) || k == f64::from(SHARDS / n as u32 + 1)
            })
    })
    .await;
    (replicas, svc)
}

/// Waits until `cond` holds, re-checking as the replicas' state moves (a guard bounds it).
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + T * 3;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn uid(o: &Value) -> String {
    o["metadata"]["uid"].as_str().unwrap_or("").to_string()
}

async fn uids(agents: &[(Agent, MemStore)], app: &str) -> Vec<String> {
    let mut v = Vec::new();
    for (_, s) in agents {
        let o = s.get(Kind::Application, "argocd", app).await.unwrap();
        v.push(o.as_ref().map(uid).unwrap_or_default());
    }
    v
}

/// The agents the `replicas` serve, together.
fn served(replicas: &[Replica]) -> i64 {
    replicas
        .iter()
        .map(|r| r.metrics.connected_agents.get())
        .sum()
}

/// Each agent gets a new Application `name`; returns when every agent has it.
async fn deliver(hub: &MemStore, agents: &[(Agent, MemStore)], name: &str) -> Duration {
    let t0 = Instant::now();
    for i in 0..agents.len() {
        put(hub, app(&format!("agent-{i}"), name, "v1")).await;
    }
    for (i, (_, s)) in agents.iter().enumerate() {
        wait_for(s, "argocd", name, &format!("agent-{i} gets {name}"), |o| {
            o.is_some()
        })
        .await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_its_share_and_agents_survive_a_stopped_and_a_killed_replica() {
    init();
    let h = argocd_pull_hub::Hub::new();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let (mut replicas, svc) = replicas(&h, &hub, &pki, REPLICAS, ports(false).await).await;
    for r in &replicas {
        assert_eq!(
            r.gauge("argocd_principal_ha_shard_count"),
            f64::from(SHARDS)
        );
    }

    // agents reach the replicas round robin: most land on one that does not serve them
    let t0 = Instant::now();
    let agents = managed_agents(&hub, &pki, svc, AGENTS).await;
    let first = t0.elapsed();
    // each agent is served by exactly one replica: the connected agents add up to the fleet
    until("every agent served once", || {
        served(&replicas) == AGENTS as i64
    })
    .await;
    // each replica keeps only the hub Applications of the agents it serves
    for r in &replicas {
        assert_eq!(
            r.gauge("argocd_principal_hub_applications_cached"),
            r.metrics.connected_agents.get() as f64,
            "a replica's cache holds its share of the fleet's Applications"
        );
    }
    let forwarded: f64 = replicas
        .iter()
        .map(|r| r.gauge("argocd_principal_ha_streams_forwarded_total"))
        .sum();
    assert!(
        forwarded >= 1.0,
        "agents that reached a replica not serving them were forwarded"
    );
    // the agents' status reaches the hub through the owner
    for (_, s) in &agents {
        patch(
            s,
            "argocd",
            "app",
            json!({"status": {"health": {"status": "Healthy"}}}),
        )
        .await;
    }
    for i in 0..AGENTS {
        wait_for(&hub, &format!("agent-{i}"), "app", "status", |o| {
            o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
        })
        .await;
    }
    let before = uids(&agents, "app").await;

    // SIGTERM: the replica hands its shards over, its agents come back through the others
    let conns: Vec<u64> = agents.iter().map(|(a, _)| a.connections()).collect();
    let t1 = Instant::now();
    replicas[0].stop();
    until("two replicas hold every shard", || {
        replicas[1..]
            .iter()
            .map(|r| r.gauge("argocd_principal_ha_shards_held"))
            .sum::<f64>()
            == f64::from(SHARDS)
    })
    .await;
    let handed_over = t1.elapsed();
    until("the other replicas serve every agent", || {
        served(&replicas[1..]) == AGENTS as i64
    })
    .await;
    let stop_served = t1.elapsed();
    let after_stop = deliver(&hub, &agents, "app-2").await;
    let stop_back = t1.elapsed();
    let moved = (0..AGENTS)
        .filter(|&i| agents[i].0.connections() > conns[i])
        .count();

    // SIGKILL: its shards are taken when their Leases expire
    let t2 = Instant::now();
    replicas[1].crash();
    until("the last replica holds every shard", || {
        replicas[2].gauge("argocd_principal_ha_shards_held") == f64::from(SHARDS)
    })
    .await;
    let taken_over = t2.elapsed();
    let after_kill = deliver(&hub, &agents, "app-3").await;
    let kill_back = t2.elapsed();
    until("the last replica serves every agent", || {
        replicas[2].metrics.connected_agents.get() == AGENTS as i64
    })
    .await;
    until("the last replica caches every agent's Applications", || {
        replicas[2].gauge("argocd_principal_hub_applications_cached") == (AGENTS * 3) as f64
    })
    .await;

    assert_eq!(
        uids(&agents, "app").await,
        before,
        "no Application re-created on an agent"
    );
    println!(
        "active/active, {AGENTS} agents, {REPLICAS} replicas, {SHARDS} shards, Lease {LEASE:?}: \
         all connected with their Application in {first:?} ({forwarded} calls forwarded); \
         SIGTERM: shards handed over in {handed_over:?}, every agent served again after \
         {stop_served:?}, {} agents moved, a new Application on every agent {after_stop:?} later ({stop_back:?} after the stop); SIGKILL: shards taken in \
         {taken_over:?}, a new Application on every agent {after_kill:?} later ({kill_back:?} \
         after the kill); 0 lost, 0 re-created",
        moved
    );
    for (a, _) in agents {
        a.shutdown().await;
    }
}

/// A replica added to a running pair takes its share of the shards from the others and nothing
/// else moves: only the agents of the shards it took reconnect (their old owner ends their
/// streams), they reach it through the replicas they reconnect to, and nothing is lost or
/// re-created.
/// A login that reaches a replica while the owner of the agent's shard has just been killed (its
/// Leases still held, its port refusing connections) waits for the replica that takes the shard
/// and is answered, instead of failing: the agent does not back off for a replica's death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_forwarded_to_a_killed_owner_waits_for_the_new_one() {
    let pki = LocalPki::new().unwrap();
    let h = argocd_pull_hub::Hub::new();
    let hub = MemStore::new();
    let ports = ports(false).await;
    let (mut replicas, _svc) = replicas(&h, &hub, &pki, 2, ports.clone()).await;
    // the logins go to replica 0 directly; the killed replica 1 holds half of the shards, so
    // about half of these agents are its
    let survivor: SocketAddr = format!("127.0.0.2:{}", ports.grpc).parse().unwrap();
    let mut channels = Vec::new();
    for i in 0..20 {
        let m = pki.agent(&format!("agent-{i}")).unwrap();
        channels.push(mtls_channel(survivor, &m).await.unwrap());
    }
    let t = Instant::now();
    replicas[1].crash();
    let logins = channels.into_iter().enumerate().map(|(i, ch)| async move {
        login(ch, "managed")
            .await
            .map_err(|e| format!("agent-{i}: {e}"))
    });
    let answers = tokio::time::timeout(T, futures::future::join_all(logins))
        .await
        .expect("every login answered");
    let took = t.elapsed();
    let failed: Vec<&String> = answers.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "logins failed: {failed:?}");
    assert!(
        replicas[0].gauge("argocd_principal_ha_shards_held") == f64::from(SHARDS),
        "the survivor took every shard"
    );
    let forwarded = metric_of(
        &replicas[0].metrics,
        "argocd_principal_ha_streams_forwarded_total{call=\"authenticate\"}",
    );
    assert!(
        forwarded >= 1.0,
        "some of the logins were for the killed replica's agents (forwarded {forwarded})"
    );
    eprintln!(
        "20 logins through the survivor right after its peer was killed: all answered after {took:?} \
         ({forwarded} first sent to the killed replica)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_added_later_takes_its_share_and_only_its_agents_move() {
    init();
    let h = argocd_pull_hub::Hub::new();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = ports(false).await;
    let (mut replicas, svc) = replicas(&h, &hub, &pki, 2, p.clone()).await;
    let agents = managed_agents(&hub, &pki, svc, AGENTS).await;
    until("every agent served once", || {
        served(&replicas) == AGENTS as i64
    })
    .await;
    let before = uids(&agents, "app").await;
    let conns: Vec<u64> = agents.iter().map(|(a, _)| a.connections()).collect();

    // the third replica joins (the Service still sends agents to the first two)
    let t0 = Instant::now();
    replicas.push(Replica::start(
        2,
        p,
        h.client(),
        hub.clone(),
        &pki,
        &throwaway_jwt_key(),
    ));
    until("the three replicas split the shards fairly", || {
        let held: Vec<f64> = replicas
            .iter()
            .map(|r| r.gauge("argocd_principal_ha_shards_held"))
            .collect();
        held.iter().sum::<f64>() == f64::from(SHARDS)
            && held.iter().all(|&k| k == 10.0 || k == 11.0)
    })
    .await;
    let taken = t0.elapsed();
    let moved = || {
        (0..AGENTS)
            .filter(|&i| agents[i].0.connections() > conns[i])
            .count()
    };
    let on_new = || replicas[2].metrics.connected_agents.get() as usize;
    // only the agents of the shards the new replica took reconnect (had another agent
    // reconnected, more would have moved than the new replica serves, and this would time out)
    until(
        "the moved agents served by the new replica, every agent once",
        || served(&replicas) == AGENTS as i64 && on_new() > 0 && moved() == on_new(),
    )
    .await;
    let served = t0.elapsed();
    let delivered = deliver(&hub, &agents, "app-2").await;
    let joined = on_new();
    assert_eq!(moved(), joined, "no agent reconnected since");
    for r in &replicas {
        assert_eq!(
            r.gauge("argocd_principal_hub_applications_cached"),
            (r.metrics.connected_agents.get() * 2) as f64,
            "each replica caches the Applications of the agents it serves"
        );
    }
    assert_eq!(
        uids(&agents, "app").await,
        before,
        "no Application re-created on an agent"
    );
    println!(
        "active/active, a replica joining 2 with {AGENTS} agents: its shards taken in {taken:?}, \
         its {joined} agents served by it after {served:?} (no other agent reconnected), a new \
         Application on every agent {delivered:?} later; 0 lost, 0 re-created"
    );
    for (a, _) in agents {
        a.shutdown().await;
    }
}

/// More agents than one HTTP/2 connection's default stream limit (200) reach a replica that
/// serves none of them: the replica link to their owner carries every one of their streams, so
/// none waits for a free stream, and each gets its Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_forwards_more_agents_than_an_http2_connection_s_default_stream_limit() {
    init();
    const MANY: usize = 210;
    let h = argocd_pull_hub::Hub::new();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let ports = ports(false).await;
    let (replicas, _svc) = replicas(&h, &hub, &pki, 2, ports.clone()).await;
    // the agents that replica 1 serves, from the shard Leases
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(h.client(), "argocd");
    let count = argocd_pull_ops::shards::ShardCount::new(SHARDS).unwrap();
    let mut theirs = std::collections::BTreeSet::new();
    for k in count.iter() {
        let l = leases
            .get(&argocd_pull_ops::shards::shard_lease_name(
                "argocd-agent-principal",
                k,
            ))
            .await
            .unwrap();
        let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        if holder.starts_with("principal-1@") {
            theirs.insert(k);
        }
    }
    let names: Vec<String> = (0..)
        .map(|i| format!("agent-{i}"))
        .filter(|n| theirs.contains(&argocd_pull_ops::shards::shard_of(n, count)))
        .take(MANY)
        .collect();
    // every one of them reaches replica 0 directly
    let at_zero: SocketAddr = format!("127.0.0.2:{}", ports.grpc).parse().unwrap();
    let mut agents = Vec::new();
    for name in &names {
        put(&hub, app(name, "app", "v0")).await;
        let store = MemStore::new();
        let c = AgentConfig::new(at_zero, pki.agent(name).unwrap(), Mode::Managed);
        let a = Agent::start(c, Arc::new(store.clone()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        agents.push((a, store));
    }
    for (name, (a, s)) in names.iter().zip(&agents) {
        tokio::time::timeout(T, a.wait_connected(0))
            .await
            .unwrap_or_else(|_| panic!("{name} connected through replica 0: {:?}", a.last_error()));
        wait_for(s, "argocd", "app", &format!("{name} app"), |o| o.is_some()).await;
    }
    assert_eq!(replicas[1].metrics.connected_agents.get(), MANY as i64);
    assert_eq!(
        replicas[0].gauge("argocd_principal_ha_forwarded_streams"),
        MANY as f64,
        "every agent's event stream forwarded to its owner"
    );
    for (a, _) in agents {
        a.shutdown().await;
    }
}

/// Argo CD's client for `agent`'s cluster, at the resource proxy of one replica (its address is
/// not in the principal's certificate: the name checked is `localhost`, which is).
async fn proxy_at(url: &str, pki: &LocalPki, agent: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig_yaml(
        url,
        &pki.agent(agent).unwrap(),
        agent,
    ))
    .unwrap();
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    cfg.tls_server_name = Some("localhost".into());
    cfg.default_retry = false;
    kube::Client::try_from(cfg).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_cd_reaches_every_agents_logs_and_terminal_through_any_replica() {
    init();
    let h = argocd_pull_hub::Hub::new();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let ports = ports(true).await;
    let (replicas, svc) = replicas(&h, &hub, &pki, REPLICAS, ports.clone()).await;
    let names = ["a", "b", "c"];
    let mut agents = Vec::new();
    let mut fakes = Vec::new();
    for n in names {
        let f = FakePods::start(&format!("web-{n}")).await;
        let mut c = AgentConfig::new(svc, pki.agent(n).unwrap(), Mode::Managed);
        c.reconnect_max = Duration::from_millis(500);
        c.resource_proxy = Some(ResourceProxyClient(f.client()));
        let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
        agents.push(a);
        fakes.push(f);
    }
    // Argo CD's requests for every agent, through every replica: two of three are forwarded
    for (k, n) in names.iter().enumerate() {
        for i in 0..REPLICAS {
            let url = format!("https://127.0.0.{}:{}", i + 2, ports.proxy.unwrap());
            let api: Api<Pod> = Api::namespaced(proxy_at(&url, &pki, n).await, "default");
            let pod = format!("web-{n}");
            let text = tokio::time::timeout(T, api.logs(&pod, &LogParams::default()))
                .await
                .expect("logs in time")
                .unwrap_or_else(|e| panic!("logs of agent {n} through replica {i}: {e}"));
            assert!(text.contains("line 1"), "{text}");
            let mut p =
                tokio::time::timeout(T, api.exec(&pod, ["sh"], &AttachParams::interactive_tty()))
                    .await
                    .expect("exec in time")
                    .unwrap_or_else(|e| panic!("exec on agent {n} through replica {i}: {e}"));
            let mut stdin = p.stdin().unwrap();
            let mut stdout = p.stdout().unwrap();
            stdin.write_all(b"echo hi\n").await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(T, async {
                while !String::from_utf8_lossy(&got).contains("ECHO HI") {
                    let mut buf = [0u8; 256];
                    let n = stdout.read(&mut buf).await.unwrap();
                    assert!(n > 0, "stdout ended early");
                    got.extend_from_slice(&buf[..n]);
                }
            })
            .await
            .expect("the terminal answers");
            stdin.write_all(b"exit\n").await.unwrap();
            let st = tokio::time::timeout(T, p.take_status().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(st.status.as_deref(), Some("Success"), "{st:?}");
            fakes[k].until(|s| *s == Seen::ExecClosed).await;
        }
    }
    let forwarded: f64 = replicas
        .iter()
        .map(|r| {
            metric_of(
                &r.metrics,
                "argocd_principal_ha_streams_forwarded_total{call=\"resource\"}",
            ) + metric_of(
                &r.metrics,
                "argocd_principal_ha_streams_forwarded_total{call=\"exec\"}",
            )
        })
        .sum();
    assert_eq!(
        forwarded,
        (2 * 2 * names.len()) as f64,
        "each agent's logs and terminal were forwarded by the two replicas not serving it"
    );
    for a in agents {
        a.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_cd_s_redis_reaches_every_agent_through_any_replica() {
    use redis::AsyncCommands;
    if !crate::redis_server::available() {
        println!(
            "SKIP: redis-server is not installed (apt-get install redis-server); active/active Redis proxy test not run"
        );
        return;
    }
    init();
    let h = argocd_pull_hub::Hub::new();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let hub_redis = crate::redis_server::RedisServer::start().await;
    let mut ports = ports(false).await;
    let redis_port = TcpListener::bind("127.0.0.2:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    ports.redis = Some((redis_port, hub_redis.addr.clone()));
    let (replicas, svc) = replicas(&h, &hub, &pki, REPLICAS, ports).await;
    let names = ["agent-a", "agent-b", "agent-c"];
    let mut agents = Vec::new();
    for n in names {
        let r = crate::redis_server::RedisServer::start().await;
        let mut c = AgentConfig::new(svc, pki.agent(n).unwrap(), Mode::Managed);
        c.reconnect_max = Duration::from_millis(500);
        c.redis_proxy = Some(LocalRedisProxy::new(&r.addr));
        let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
        tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
        let mut conn = r.conn().await;
        let _: () = conn
            .set(
                "app|resources-tree|guestbook|1.8.3.gz",
                format!("tree of {n}"),
            )
            .await
            .unwrap();
        agents.push((a, r));
    }
    let url = |i: usize| format!("redis://127.0.0.{}:{redis_port}/?protocol=resp3", i + 2);
    // one Argo CD connection per replica reads every agent's key: most are served elsewhere
    for i in 0..REPLICAS {
        let mut c = redis::Client::open(url(i))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for n in names {
            let v: String = c
                .get(format!("app|resources-tree|{n}_guestbook|1.8.3.gz"))
                .await
                .unwrap_or_else(|e| panic!("GET of {n} through replica {i}: {e}"));
            assert_eq!(v, format!("tree of {n}"));
        }
    }
    // one subscription connection for every agent's channel, on one replica
    let mut ps = redis::Client::open(url(0))
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    for n in names {
        ps.subscribe(format!("app|resources-tree|{n}_guestbook|1.8.3.gz"))
            .await
            .unwrap();
    }
    let mut msgs = ps.on_message();
    for (k, n) in names.iter().enumerate() {
        let mut a = agents[k].1.conn().await;
        let receivers: i64 = a
            .publish("app|resources-tree|guestbook|1.8.3.gz", "")
            .await
            .unwrap();
        assert_eq!(receivers, 1, "{n} subscribed on its own Redis");
        let m = tokio::time::timeout(T, msgs.next())
            .await
            .expect("pushed in time")
            .expect("a message");
        assert_eq!(
            m.get_channel_name(),
            format!("app|resources-tree|{n}_guestbook|1.8.3.gz")
        );
    }
    let forwarded: f64 = replicas
        .iter()
        .map(|r| {
            metric_of(
                &r.metrics,
                "argocd_principal_ha_streams_forwarded_total{call=\"redis\"}",
            )
        })
        .sum();
    assert!(
        forwarded >= 1.0,
        "commands for agents served elsewhere were relayed"
    );
    drop(msgs);
    for (a, _) in agents {
        a.shutdown().await;
    }
}
