//! The agents' cluster info where Argo CD reads it: a real `redis-server` as the hub Redis (the
//! test prints `SKIP:` when `redis-server`/`redis-cli` are not installed).

use std::io::Read;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::argocd_cache::ArgoCacheConfig;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::{Principal, PrincipalConfig};
use serde_json::Value;

use crate::harness::*;

fn on_path(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

struct Redis {
    port: u16,
    _child: tokio::process::Child,
}

async fn redis() -> Redis {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = tokio::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // a started process announces nothing we can await: poll its port under a timeout
    tokio::time::timeout(T, async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("redis-server listens");
    Redis {
        port,
        _child: child,
    }
}

async fn cli(port: u16, args: &[&str]) -> Vec<u8> {
    let out = tokio::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "--raw"])
        .args(args)
        .output()
        .await
        .unwrap();
    let mut v = out.stdout;
    if v.last() == Some(&b'\n') {
        v.pop(); // redis-cli's own newline
    }
    v
}

async fn info(port: u16, key: &str) -> Option<Value> {
    let raw = cli(port, &["GET", key]).await;
    if raw.is_empty() {
        return None;
    }
    let mut s = String::new();
    flate2::read::GzDecoder::new(&raw[..])
        .read_to_string(&mut s)
        .ok()?;
    assert!(s.ends_with('\n'), "json.Encoder's newline: {s:?}");
    serde_json::from_str(&s).ok()
}

async fn until(port: u16, key: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    // Redis offers no event for a key written by another client without keyspace notifications
    // set up; poll under a timeout
    let r = tokio::time::timeout(T, async {
        loop {
            if let Some(v) = info(port, key).await
                && pred(&v)
            {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("timed out waiting for {key}: {what}"))
}

#[tokio::test]
async fn connection_state_is_written_to_argocds_redis() {
    if !on_path("redis-server") || !on_path("redis-cli") {
        skip(
            "SKIP: redis-server/redis-cli not installed; the Argo CD cluster-info test did not run",
        );
        return;
    }
    init();
    let r = redis().await;
    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.argocd_cache = Some(ArgoCacheConfig {
        address: format!("127.0.0.1:{}", r.port),
        password: None,
        gzip: true,
        resource_proxy_address: "argocd-agent-resource-proxy:9090".into(),
    });
    // Failed half an interval after the stream ends
    cfg.heartbeat = std::time::Duration::from_secs(2);
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let a = agent(
        &pki,
        &p,
        "cluster-9",
        argocd_pull_agent_core::Mode::Managed,
        &MemStore::new(),
    )
    .await;
    let key = "cluster|info|https://argocd-agent-resource-proxy:9090?agentName=cluster-9|1.8.3.gz";
    let v = until(r.port, key, "connected", |v| {
        v["connectionState"]["status"] == "Successful"
    })
    .await;
    assert_eq!(
        v["connectionState"]["message"],
        "Agent: 'cluster-9' is connected with principal"
    );
    let ttl: u64 = String::from_utf8(cli(r.port, &["PTTL", key]).await)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        ttl > 0 && ttl <= 600_000,
        "expires as Argo CD's 10 minutes: {ttl}"
    );
    a.shutdown().await;
    let v = until(r.port, key, "disconnected", |v| {
        v["connectionState"]["status"] == "Failed"
    })
    .await;
    // the peer's message, with the reason
    let msg = v["connectionState"]["message"].as_str().unwrap();
    assert!(
        msg.starts_with("Agent: 'cluster-9' is disconnected with principal: "),
        "{msg}"
    );
    p.shutdown().await;
}

#[tokio::test]
async fn the_agents_local_argocd_cache_counts_reach_the_hub_cache() {
    if !on_path("redis-server") || !on_path("redis-cli") {
        skip("SKIP: redis-server/redis-cli not installed; the cluster-cache-info test did not run");
        return;
    }
    init();
    let (hub_redis, local_redis) = (redis().await, redis().await);
    // what the managed cluster's Argo CD application controller caches about its own cluster
    let local = argocd_pull_agent_core::argocd_cache::RedisClient::new(
        &format!("127.0.0.1:{}", local_redis.port),
        None,
    );
    let argo = ArgoCacheConfig {
        address: String::new(),
        password: None,
        gzip: true,
        resource_proxy_address: String::new(),
    };
    let info = serde_json::json!({"connectionState": {"status": "Successful", "message": "", "attemptedAt": "2026-11-25T09:00:00Z"},
                                  "serverVersion": "1.24", "cacheInfo": {"resourcesCount": 812, "apisCount": 40}, "applicationsCount": 5});
    let key = argocd_pull_agent_core::argocd_cache::cluster_info_key(
        "https://kubernetes.default.svc",
        true,
    );
    local
        .call(&[b"SET", key.as_bytes(), &argo.value(&info)])
        .await
        .unwrap();

    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.argocd_cache = Some(ArgoCacheConfig {
        address: format!("127.0.0.1:{}", hub_redis.port),
        password: None,
        gzip: true,
        resource_proxy_address: "rp.example:9090".into(),
    });
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let mut c = argocd_pull_spoke::AgentConfig::new(
        p.local_addr(),
        pki.agent("cluster-7").unwrap(),
        argocd_pull_agent_core::Mode::Managed,
    );
    c.local_redis = Some(argocd_pull_spoke::LocalRedis {
        address: format!("127.0.0.1:{}", local_redis.port),
        password: None,
    });
    c.cache_refresh_interval = Duration::from_millis(100);
    let a =
        argocd_pull_spoke::Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
            .await
            .unwrap();
    let hub_key = "cluster|info|https://rp.example:9090?agentName=cluster-7|1.8.3.gz";
    let v = until(hub_redis.port, hub_key, "the agent's counts", |v| {
        v["applicationsCount"] == 5
    })
    .await;
    assert_eq!(
        v["cacheInfo"],
        serde_json::json!({"resourcesCount": 812, "apisCount": 40})
    );
    assert_eq!(v["connectionState"]["status"], "Successful");
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn the_cluster_secrets_server_url_names_the_key() {
    if !on_path("redis-server") || !on_path("redis-cli") {
        skip(
            "SKIP: redis-server/redis-cli not installed; the cluster-secret mapping test did not run",
        );
        return;
    }
    init();
    let r = redis().await;
    // the hub: an Argo CD cluster secret maps the agent to a server URL of its own
    let hub = argocd_pull_hub::Hub::new();
    let client = hub.client();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "argocd"}})).unwrap(),
        )
        .await
        .unwrap();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cluster-cluster-5", "namespace": "argocd",
                     "labels": {"argocd.argoproj.io/secret-type": "cluster",
                                "argocd-agent.argoproj-labs.io/agent-name": "cluster-5"}},
        "stringData": {"server": "https://proxy.example.com:443?agentName=cluster-5", "name": "cluster-5", "config": "{}"}
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "argocd")
        .create(&Default::default(), &secret)
        .await
        .unwrap();
    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.argocd_cache = Some(ArgoCacheConfig {
        address: format!("127.0.0.1:{}", r.port),
        password: None,
        gzip: true,
        resource_proxy_address: "argocd-agent-resource-proxy:9090".into(),
    });
    cfg.cluster_secrets = Some(argocd_pull_principal::cluster_secrets::SecretsClient(
        client,
    ));
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let a = agent(
        &pki,
        &p,
        "cluster-5",
        argocd_pull_agent_core::Mode::Managed,
        &MemStore::new(),
    )
    .await;
    let key = "cluster|info|https://proxy.example.com:443?agentName=cluster-5|1.8.3.gz";
    let v = until(r.port, key, "connected under the secret's server", |v| {
        v["connectionState"]["status"] == "Successful"
    })
    .await;
    assert_eq!(
        v["connectionState"]["message"],
        "Agent: 'cluster-5' is connected with principal"
    );
    a.shutdown().await;
    p.shutdown().await;
}

/// Prints a `SKIP:` line straight to stderr (not captured by the test harness, so CI shows it).
fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
