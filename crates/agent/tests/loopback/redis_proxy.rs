//! The Redis proxy end to end with real servers: a Redis client (the `redis` crate, as Argo CD's
//! go-redis would) → our principal's proxy → the hub `redis-server` or, for an agent's live-state
//! keys, the agent's stream → our agent → the agent's own `redis-server`. Skipped (`SKIP:`) when
//! `redis-server` is not installed (`apt-get install redis-server`).

use std::time::Duration;

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::redis_proxy::UpstreamTls;
use argocd_pull_principal::{Principal, RedisProxyConfig};
use argocd_pull_spoke::{Agent, LocalRedisProxy, LocalRedisTls};
use futures::StreamExt;
use redis::AsyncCommands;

use crate::harness::*;
use crate::redis_server::{RedisServer, available};

const BIG: usize = 200 * 1024 * 1024;

struct Rig {
    principal: Principal,
    hub: RedisServer,
    agents: Vec<(String, Agent, RedisServer)>,
    _pki: LocalPki,
}

impl Rig {
    fn proxy_url(&self, resp3: bool) -> String {
        let a = self.principal.redis_proxy_addr().unwrap();
        if resp3 {
            format!("redis://{a}/?protocol=resp3")
        } else {
            format!("redis://{a}/")
        }
    }

    async fn client(&self) -> redis::aio::MultiplexedConnection {
        let cfg =
            redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
        redis::Client::open(self.proxy_url(false))
            .unwrap()
            .get_multiplexed_async_connection_with_config(&cfg)
            .await
            .unwrap()
    }

    fn agent_redis(&self, name: &str) -> &RedisServer {
        &self.agents.iter().find(|a| a.0 == name).unwrap().2
    }

    fn metrics(&self) -> String {
        self.principal.metrics().encode()
    }
}

fn skip() -> bool {
    if available() {
        return false;
    }
    println!(
        "SKIP: redis-server is not installed (apt-get install redis-server); Redis proxy test not run"
    );
    true
}

async fn rig(names: &[&str], f: impl FnOnce(&mut RedisProxyConfig)) -> Rig {
    rig_with(names, f, |_| {}).await
}

async fn rig_with(
    names: &[&str],
    f: impl FnOnce(&mut RedisProxyConfig),
    g: impl Fn(&mut LocalRedisProxy),
) -> Rig {
    init();
    let pki = LocalPki::new().unwrap();
    let hub = RedisServer::start().await;
    let mut rp = RedisProxyConfig::new("127.0.0.1:0".parse().unwrap(), &hub.addr);
    f(&mut rp);
    let principal = principal_with(&pki, &MemStore::new(), "127.0.0.1:0", |c| {
        c.redis_proxy = Some(rp);
        c.max_event_size = BIG;
    })
    .await;
    let mut agents = Vec::new();
    for n in names {
        let r = RedisServer::start().await;
        let a = agent_with(&pki, &principal, n, Mode::Managed, &MemStore::new(), |c| {
            c.max_event_size = BIG;
            let mut l = LocalRedisProxy::new(&r.addr);
            g(&mut l);
            c.redis_proxy = Some(l);
        })
        .await;
        agents.push((n.to_string(), a, r));
    }
    wait_idle(|| principal.connected_agents().len() == names.len()).await;
    Rig {
        principal,
        hub,
        agents,
        _pki: pki,
    }
}

const TREE_A: &str = "app|resources-tree|agent-a_guestbook|1.8.3.gz";
const TREE_B: &str = "app|resources-tree|agent-b_guestbook|1.8.3.gz";
/// What the agents' Argo CD writes (no namespace part).
const LOCAL_TREE: &str = "app|resources-tree|guestbook|1.8.3.gz";
const LOCAL_MANAGED: &str = "app|managed-resources|guestbook|1.8.3";

#[tokio::test]
async fn get_reads_agent_keys_from_the_agent_and_the_rest_from_the_hub() {
    if skip() {
        return;
    }
    let r = rig(&["agent-a", "agent-b"], |_| {}).await;
    let mut hub = r.hub.conn().await;
    let _: () = hub.set(TREE_A, "stale hub copy").await.unwrap();
    let _: () = hub
        .set("cluster|info|x|1.8.3.gz", "hub value")
        .await
        .unwrap();
    let _: () = hub
        .set("app|resources-tree|local-app|1.8.3.gz", "hub tree")
        .await
        .unwrap();
    let mut a = r.agent_redis("agent-a").conn().await;
    let _: () = a
        .set(LOCAL_TREE, b"tree of a\x00\xff".as_slice())
        .await
        .unwrap();
    let _: () = a.set(LOCAL_MANAGED, "managed of a").await.unwrap();
    let _: () = a
        .set("secret|of|agent-a", "never via the proxy")
        .await
        .unwrap();
    let mut b = r.agent_redis("agent-b").conn().await;
    let _: () = b.set(LOCAL_TREE, "tree of b").await.unwrap();

    let mut c = r.client().await;
    let v: Vec<u8> = c.get(TREE_A).await.unwrap();
    assert_eq!(v, b"tree of a\x00\xff", "binary values pass unchanged");
    let v: String = c.get(TREE_B).await.unwrap();
    assert_eq!(v, "tree of b", "each agent answers for its own keys");
    let v: String = c
        .get("app|managed-resources|agent-a_guestbook|1.8.3")
        .await
        .unwrap();
    assert_eq!(v, "managed of a");
    let v: Option<String> = c
        .get("app|resources-tree|agent-a_missing|1.8.3.gz")
        .await
        .unwrap();
    assert_eq!(
        v, None,
        "an agent's cache miss is Redis' nil (a cache miss for Argo CD)"
    );
    // everything else is the hub's
    let v: String = c.get("cluster|info|x|1.8.3.gz").await.unwrap();
    assert_eq!(v, "hub value");
    let v: String = c
        .get("app|resources-tree|local-app|1.8.3.gz")
        .await
        .unwrap();
    assert_eq!(
        v, "hub tree",
        "apps in the principal's namespace (no '_') stay on the hub"
    );
    let v: Option<String> = c.get("secret|of|agent-a").await.unwrap();
    assert_eq!(v, None, "other keys never reach an agent's Redis");
    let _: () = c.set("written|via|proxy", "x").await.unwrap();
    let v: String = hub.get("written|via|proxy").await.unwrap();
    assert_eq!(v, "x", "writes go to the hub Redis");
    // a pipeline mixing hub commands keeps working on the same connection
    let (x, y): (String, String) = redis::pipe()
        .get("cluster|info|x|1.8.3.gz")
        .get("written|via|proxy")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!((x.as_str(), y.as_str()), ("hub value", "x"));

    let m = r.metrics();
    assert!(
        m.contains(
            r#"argocd_principal_redis_proxy_requests_total{agent_name="agent-a",command="get"} 3"#
        ),
        "{m}"
    );
    assert!(
        m.contains(
            r#"argocd_principal_redis_proxy_requests_total{agent_name="agent-b",command="get"} 1"#
        ),
        "{m}"
    );
}

async fn subscribe_and_get_pushed(resp3: bool) {
    let r = rig(&["agent-a"], |_| {}).await;
    let client = redis::Client::open(r.proxy_url(resp3)).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    // returns once the proxy confirmed, i.e. after the agent subscribed on its Redis
    ps.subscribe(TREE_A).await.unwrap();
    assert_eq!(r.agents[0].1.redis_subscriptions(), 1);
    let mut msgs = ps.on_message();
    let mut a = r.agent_redis("agent-a").conn().await;
    // Argo CD's controller notifies with an empty payload after writing the tree
    let receivers: i64 = a.publish(LOCAL_TREE, "").await.unwrap();
    assert_eq!(receivers, 1, "the agent subscribed on its own Redis");
    let m = tokio::time::timeout(T, msgs.next())
        .await
        .expect("pushed within the timeout")
        .expect("a message");
    assert_eq!(m.get_channel_name(), TREE_A, "named as Argo CD subscribed");
    assert!(m.get_payload_bytes().is_empty());
    // a second update arrives as well
    let _: i64 = a.publish(LOCAL_TREE, "").await.unwrap();
    tokio::time::timeout(T, msgs.next()).await.unwrap().unwrap();
    let m = r.metrics();
    assert!(
        m.contains(r#"argocd_principal_redis_proxy_requests_total{agent_name="agent-a",command="subscribe"} 1"#),
        "{m}"
    );
    drop(msgs);
    drop(ps);
    // Argo CD's connection is gone: the principal forgets it
    wait_idle(|| r.principal.redis_proxy_load() == (0, 0)).await;
}

#[tokio::test]
async fn subscribe_gets_the_agents_updates_resp3() {
    if skip() {
        return;
    }
    subscribe_and_get_pushed(true).await;
}

#[tokio::test]
async fn subscribe_gets_the_agents_updates_resp2() {
    if skip() {
        return;
    }
    subscribe_and_get_pushed(false).await;
}

#[tokio::test]
async fn an_agent_not_connected_fails_the_command_with_a_reason() {
    if skip() {
        return;
    }
    let r = rig(&["agent-a"], |_| {}).await;
    let mut c = r.client().await;
    let e = c
        .get::<_, Option<String>>("app|resources-tree|agent-z_guestbook|1.8.3.gz")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("agent \"agent-z\" is not connected"),
        "{e}"
    );
    // as the peer, the connection is closed after the failure; a new one works
    let mut c = r.client().await;
    let v: Option<String> = c
        .get("app|resources-tree|agent-a_nothing|1.8.3.gz")
        .await
        .unwrap();
    assert_eq!(v, None);
    assert!(r.metrics().contains(
        r#"argocd_principal_redis_proxy_errors_total{agent_name="agent-z",command="get"} 1"#
    ));
}

#[tokio::test]
async fn an_agent_that_disconnects_closes_the_connections_using_it() {
    if skip() {
        return;
    }
    let r = rig(&["agent-a"], |_| {}).await;
    let client = redis::Client::open(r.proxy_url(true)).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(TREE_A).await.unwrap();
    let mut msgs = ps.on_message();
    assert!(r.principal.disconnect_agent("agent-a"));
    // the subscription's connection ends (Argo CD's client reconnects and subscribes again)
    let next = tokio::time::timeout(T, msgs.next())
        .await
        .expect("closed within the timeout");
    assert!(next.is_none(), "connection closed: {next:?}");
}

#[tokio::test]
async fn a_slow_agent_times_out_without_holding_up_other_clients() {
    if skip() {
        return;
    }
    // agent-slow's "Redis" accepts connections and never answers
    let blackhole = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hole = blackhole.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Ok((s, _)) = blackhole.accept().await {
            keep.push(s);
        }
    });
    let r = rig(&["agent-a"], |c| c.timeout = Duration::from_secs(4)).await;
    let pki = &r._pki;
    let slow = agent_with(
        pki,
        &r.principal,
        "agent-slow",
        Mode::Managed,
        &MemStore::new(),
        |c| {
            c.redis_proxy = Some(LocalRedisProxy::new(&hole.clone()));
        },
    )
    .await;
    wait_idle(|| r.principal.connected_agents().len() == 2).await;
    let mut a = r.agent_redis("agent-a").conn().await;
    let _: () = a.set(LOCAL_TREE, "tree of a").await.unwrap();

    let mut sc = r.client().await;
    let stuck = tokio::spawn(async move {
        let t0 = std::time::Instant::now();
        let e = sc
            .get::<_, Option<String>>("app|resources-tree|agent-slow_guestbook|1.8.3.gz")
            .await
            .unwrap_err();
        (e.to_string(), t0.elapsed())
    });
    // while agent-slow's GET waits, other clients are served
    for _ in 0..20 {
        let mut c = r.client().await;
        let v: String = c.get(TREE_A).await.unwrap();
        assert_eq!(v, "tree of a");
    }
    assert!(!stuck.is_finished(), "the slow GET is still waiting");
    let (e, took) = tokio::time::timeout(T, stuck).await.unwrap().unwrap();
    assert!(e.contains("did not answer within 4s"), "{e}");
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert_eq!(
        r.principal.redis_proxy_load().0,
        0,
        "no request left waiting"
    );
    drop(slow);
    held.abort();
}

#[tokio::test]
async fn a_25_mb_resource_tree_passes() {
    if skip() {
        return;
    }
    let r = rig(&["agent-a"], |_| {}).await;
    let value: Vec<u8> = (0..25 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    let mut a = r.agent_redis("agent-a").conn().await;
    let _: () = a.set(LOCAL_TREE, value.as_slice()).await.unwrap();
    let mut c = r.client().await;
    let got: Vec<u8> = tokio::time::timeout(Duration::from_secs(120), c.get(TREE_A))
        .await
        .expect("answered within 120s")
        .unwrap();
    assert_eq!(got.len(), value.len());
    assert!(got == value, "the 25 MB value arrives unchanged");
}

#[tokio::test]
async fn a_value_over_the_agents_message_limit_is_refused_with_the_fix() {
    if skip() {
        return;
    }
    init();
    let pki = LocalPki::new().unwrap();
    let hub = RedisServer::start().await;
    let local = RedisServer::start().await;
    let principal = principal_with(&pki, &MemStore::new(), "127.0.0.1:0", |c| {
        c.redis_proxy = Some(RedisProxyConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            &hub.addr,
        ));
    })
    .await;
    let _agent = agent_with(
        &pki,
        &principal,
        "agent-a",
        Mode::Managed,
        &MemStore::new(),
        |c| {
            c.redis_proxy = Some(LocalRedisProxy::new(&local.addr.clone()));
        },
    )
    .await;
    wait_idle(|| principal.connected_agents().len() == 1).await;
    let mut a = local.conn().await;
    let _: () = a.set(LOCAL_TREE, vec![7u8; 5 * 1024 * 1024]).await.unwrap();
    let url = format!("redis://{}/", principal.redis_proxy_addr().unwrap());
    let mut c = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let e = c.get::<_, Vec<u8>>(TREE_A).await.unwrap_err().to_string();
    assert!(e.contains("--grpc-max-message-size"), "{e}");
}

/// TLS everywhere: Argo CD → proxy, proxy → hub Redis, agent → its Redis (real TLS-only
/// redis-servers with certificates of one CA).
#[tokio::test]
async fn tls_on_every_redis_hop() {
    if skip() {
        return;
    }
    init();
    let pki = LocalPki::new().unwrap();
    let m = pki.principal.clone();
    let hub = RedisServer::start_tls(&m.cert_pem, &m.key_pem, &m.ca_pem).await;
    let local = RedisServer::start_tls(&m.cert_pem, &m.key_pem, &m.ca_pem).await;
    let certs = || {
        rustls_pemfile::certs(&mut &m.cert_pem[..])
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    };
    let key = rustls_pemfile::private_key(&mut &m.key_pem[..])
        .unwrap()
        .unwrap();
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs(), key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &m.ca_pem[..]) {
        roots.add(c.unwrap()).unwrap();
    }
    let upstream = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut rp = RedisProxyConfig::new("127.0.0.1:0".parse().unwrap(), &hub.addr);
    rp.server_tls = Some(std::sync::Arc::new(server));
    rp.upstream_tls = Some(UpstreamTls {
        config: std::sync::Arc::new(upstream),
        server_name: "127.0.0.1".into(),
    });
    let principal = principal_with(&pki, &MemStore::new(), "127.0.0.1:0", |c| {
        c.redis_proxy = Some(rp);
    })
    .await;
    let _agent = agent_with(
        &pki,
        &principal,
        "agent-a",
        Mode::Managed,
        &MemStore::new(),
        |c| {
            c.redis_proxy = Some(LocalRedisProxy {
                tls: Some(LocalRedisTls::Ca(m.ca_pem.clone())),
                ..LocalRedisProxy::new(&local.addr.clone())
            });
        },
    )
    .await;
    wait_idle(|| principal.connected_agents().len() == 1).await;
    let tls_client = |addr: String| {
        redis::Client::build_with_tls(
            format!("rediss://{addr}/"),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(m.ca_pem.clone()),
            },
        )
        .unwrap()
    };
    let mut a = tls_client(local.addr.clone())
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = a.set(LOCAL_TREE, "tree over tls").await.unwrap();
    let mut h = tls_client(hub.addr.clone())
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = h
        .set("cluster|info|x|1.8.3.gz", "hub over tls")
        .await
        .unwrap();
    let mut c = tls_client(principal.redis_proxy_addr().unwrap().to_string())
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v: String = c.get(TREE_A).await.unwrap();
    assert_eq!(v, "tree over tls");
    let v: String = c.get("cluster|info|x|1.8.3.gz").await.unwrap();
    assert_eq!(v, "hub over tls");
}

/// While Argo CD's connection is open the principal pings the agent and its subscription lives;
/// once the connection is gone the pings stop and the agent closes the subscription on its Redis
/// (the peer's 10 minutes, shortened here).
#[tokio::test]
async fn subscriptions_live_while_pinged_and_end_after_the_connection() {
    if skip() {
        return;
    }
    let idle = Duration::from_secs(2);
    let r = rig_with(
        &["agent-a"],
        |c| c.ping_interval = Duration::from_millis(300),
        |l| l.idle_timeout = idle,
    )
    .await;
    let client = redis::Client::open(r.proxy_url(true)).unwrap();
    let mut ps = client.get_async_pubsub().await.unwrap();
    ps.subscribe(TREE_A).await.unwrap();
    let agent = &r.agents[0].1;
    assert_eq!(agent.redis_subscriptions(), 1);
    // well past the idle timeout, still subscribed thanks to the pings, and still delivering
    tokio::time::sleep(idle * 2).await;
    assert_eq!(
        agent.redis_subscriptions(),
        1,
        "pings keep the subscription"
    );
    let mut a = r.agent_redis("agent-a").conn().await;
    let n: i64 = a.publish(LOCAL_TREE, "").await.unwrap();
    assert_eq!(n, 1);
    let mut msgs = ps.on_message();
    tokio::time::timeout(T, msgs.next()).await.unwrap().unwrap();
    drop(msgs);
    drop(ps);
    wait_idle(|| agent.redis_subscriptions() == 0).await;
    let n: i64 = a.publish(LOCAL_TREE, "").await.unwrap();
    assert_eq!(n, 0, "the agent unsubscribed on its Redis");
}
