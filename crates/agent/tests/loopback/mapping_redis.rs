//! The Redis proxy under destination-based mapping (peer: redisproxy.go `GetAgentForApp`,
//! agent/inbound_redis.go): Argo CD's key names the Application (`<ns>_<app>`, or `<app>` in
//! the principal's namespace); the agent its destination names answers from its own Redis with
//! the key unchanged. Skipped (`SKIP:`) without `redis-server`.

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::RedisProxyConfig;
use argocd_pull_spoke::LocalRedisProxy;
use redis::AsyncCommands;
use serde_json::json;

use crate::harness::*;
use crate::redis_server::{RedisServer, available};

#[tokio::test]
async fn keys_go_to_the_agent_the_app_is_routed_to_unchanged() {
    if !available() {
        println!("SKIP: redis-server is not installed (apt-get install redis-server)");
        return;
    }
    init();
    let pki = LocalPki::new().unwrap();
    let (hub, sx) = (MemStore::new(), MemStore::new());
    let hub_redis = RedisServer::start().await;
    let x_redis = RedisServer::start().await;
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.destination_based_mapping = true;
        c.redis_proxy = Some(RedisProxyConfig::new(
            "127.0.0.1:0".parse().unwrap(),
            &hub_redis.addr,
        ));
    })
    .await;
    // an autonomous agent's copies (hub namespace `au`) stay its own under mapping
    let (sa, au_redis) = (MemStore::new(), RedisServer::start().await);
    let au = agent_with(&pki, &p, "au", Mode::Autonomous, &sa, |c| {
        c.redis_proxy = Some(LocalRedisProxy::new(&au_redis.addr));
    })
    .await;
    put(&sa, app("argocd", "mine", "v1")).await;
    wait_for(&hub, "au", "mine", "copied to the hub", |o| o.is_some()).await;
    let mut r = au_redis.conn().await;
    let _: () = r
        .set("app|resources-tree|mine|1.8.3.gz", "tree of au/mine")
        .await
        .unwrap();
    let ax = agent_with(&pki, &p, "agent-x", Mode::Managed, &sx, |c| {
        c.destination_based_mapping = true;
        c.allowed_namespaces = vec!["team-a".into()];
        c.redis_proxy = Some(LocalRedisProxy::new(&x_redis.addr));
    })
    .await;
    for (ns, name) in [("team-a", "gb"), ("argocd", "top")] {
        let mut a = app(ns, name, "v1");
        a["spec"]["destination"] = json!({"name": "agent-x", "namespace": "gb"});
        put(&hub, a).await;
        wait_for(&sx, ns, name, "delivered", |o| o.is_some()).await;
    }
    // what the agent's Argo CD writes: `<ns>_<app>` outside its own namespace, `<app>` in it
    let mut x = x_redis.conn().await;
    let _: () = x
        .set("app|resources-tree|team-a_gb|1.8.3.gz", "tree of team-a/gb")
        .await
        .unwrap();
    let _: () = x
        .set("app|resources-tree|top|1.8.3.gz", "tree of argocd/top")
        .await
        .unwrap();
    let mut h = hub_redis.conn().await;
    let _: () = h
        .set("app|resources-tree|team-b_other|1.8.3.gz", "hub tree")
        .await
        .unwrap();

    let a = p.redis_proxy_addr().unwrap();
    let mut c = redis::Client::open(format!("redis://{a}/"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let v: String = c
        .get("app|resources-tree|team-a_gb|1.8.3.gz")
        .await
        .unwrap();
    assert_eq!(v, "tree of team-a/gb");
    let v: String = c.get("app|resources-tree|top|1.8.3.gz").await.unwrap();
    assert_eq!(v, "tree of argocd/top", "no `_`: the principal's namespace");
    let v: String = c
        .get("app|resources-tree|team-b_other|1.8.3.gz")
        .await
        .unwrap();
    assert_eq!(v, "hub tree", "an app routed to no agent stays on the hub");
    let v: String = c.get("app|resources-tree|au_mine|1.8.3.gz").await.unwrap();
    assert_eq!(
        v, "tree of au/mine",
        "an autonomous agent's copy: its agent answers"
    );
    au.shutdown().await;
    ax.shutdown().await;
    p.shutdown().await;
}
