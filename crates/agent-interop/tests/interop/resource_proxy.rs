//! The resource proxy on the peer's wire: a peer principal's `NewResourceRequestEvent` answered by
//! OUR agent (from its own API server, an embedded hub), and OUR principal's resource request
//! answered by a peer-style agent.

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::resource::proxy_client;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_interop::emitter::{self, ty};
use argocd_pull_agent_interop::peer_agent::T;
use argocd_pull_agent_interop::sdk::{Event, go_json_sorted};
use argocd_pull_principal::{Principal, PrincipalConfig, ResourceProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig, ResourceProxyClient};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{Value, json};

use crate::common::*;

async fn hub_with_configmap() -> argocd_pull_hub::Hub {
    let hub = argocd_pull_hub::Hub::new();
    let req = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(Bytes::from(
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
                   "data": {"greeting": "<hello & bye>"}})
            .to_string(),
        ))
        .unwrap();
    let (st, _, body) = hub.raw_request(req).await;
    assert_eq!(st.as_u16(), 201, "{body:?}");
    hub
}

async fn hub_get(hub: &argocd_pull_hub::Hub, uri: &str) -> Value {
    let req = http::Request::builder()
        .uri(uri)
        .body(Bytes::new())
        .unwrap();
    let (_, _, body) = hub.raw_request(req).await;
    serde_json::from_slice(&body).unwrap()
}

fn data(e: &Event) -> Value {
    serde_json::from_slice(&e.data).expect("JSON payload")
}

#[tokio::test]
async fn a_peer_principals_resource_request_is_answered_by_our_agent() {
    init();
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let hub = hub_with_configmap().await;
    let mut c = AgentConfig::new(pp.addr, pki.agent("agent-rp").unwrap(), Mode::Managed);
    c.reconnect_max = Duration::from_millis(500);
    c.resource_proxy = Some(ResourceProxyClient(hub.client()));
    let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    pp.wait_streams(1).await;

    // GET one object
    let uuid = emitter::new_uuid();
    let ev = emitter::sent(
        pp.emitter.resource_request(
            &uuid,
            ("", "v1", "configmaps"),
            "default",
            "web",
            "",
            "GET",
            b"",
            &[],
        ),
        SENT_AT,
    );
    pp.send(&ev).await;
    // the request is ACKed as every processed event (at once: the answer follows when the API
    // server has answered), and answered
    let (mut response, mut acked) = (None, false);
    while response.is_none() || !acked {
        let i = pp
            .expect("the resource response and the ACK of the request", |i| {
                i.event.ext("eventid") == Some(uuid.as_str())
                    && (i.event.typ == ty("response")
                        || (i.event.typ == ty("processed")
                            && i.event.dataschema == "eventProcessed"
                            && i.event.ext("resourceid") == Some(uuid.as_str())))
            })
            .await;
        if i.event.typ == ty("response") {
            response = Some(i);
        } else {
            acked = true;
        }
    }
    let r = response.expect("loop ends with the response");
    assert_eq!(r.event.dataschema, "resource");
    let rid = r.event.ext("resourceid").unwrap_or_default();
    assert!(!rid.is_empty() && rid != uuid, "a fresh resourceid: {rid}");
    // the payload as the peer's NewResourceResponseEvent writes it, `resource` as the peer's
    // json.Marshal of the unstructured object (sorted keys, Go escaping)
    let want_obj = hub_get(&hub, "/api/v1/namespaces/default/configmaps/web").await;
    let want_resource = String::from_utf8(go_json_sorted(&want_obj)).unwrap();
    assert!(want_resource.contains("\\u003chello \\u0026 bye\\u003e"));
    let want = argocd_pull_agent_interop::sdk::go_json(&json!({
        "uuid": uuid, "status": 200, "resource": want_resource
    }));
    assert_eq!(
        String::from_utf8_lossy(&r.event.data),
        String::from_utf8_lossy(&want)
    );

    // a list with a label selector
    let uuid = emitter::new_uuid();
    pp.send(&emitter::sent(
        pp.emitter.resource_request(
            &uuid,
            ("", "v1", "configmaps"),
            "default",
            "",
            "",
            "GET",
            b"",
            &[("labelSelector", "app=web")],
        ),
        SENT_AT,
    ))
    .await;
    let r = pp
        .expect("the list response", |i| {
            i.event.typ == ty("response") && i.event.ext("eventid") == Some(uuid.as_str())
        })
        .await;
    let list: Value = serde_json::from_str(data(&r.event)["resource"].as_str().unwrap()).unwrap();
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    assert_eq!(
        list["items"][0]["kind"], "ConfigMap",
        "items carry their kind as client-go sets it"
    );

    // not found: the status, and (our addition) the API server's Status body
    let uuid = emitter::new_uuid();
    pp.send(&emitter::sent(
        pp.emitter.resource_request(
            &uuid,
            ("", "v1", "configmaps"),
            "default",
            "nope",
            "",
            "GET",
            b"",
            &[],
        ),
        SENT_AT,
    ))
    .await;
    let r = pp
        .expect("the 404 response", |i| {
            i.event.typ == ty("response") && i.event.ext("eventid") == Some(uuid.as_str())
        })
        .await;
    let d = data(&r.event);
    assert_eq!(d["status"], 404);
    let st: Value = serde_json::from_str(d["resource"].as_str().unwrap()).unwrap();
    assert_eq!(st["reason"], "NotFound");
    a.shutdown().await;
    pp.shutdown().await;
}

async fn our_principal_with_proxy(pki: &LocalPki) -> Principal {
    init();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    let mut rp = ResourceProxyConfig::new("127.0.0.1:0".parse().unwrap(), pki.principal.clone());
    rp.timeout = T;
    cfg.resource_proxy = Some(rp);
    // an agent gone is shown Failed after half of it
    cfg.heartbeat = Duration::from_secs(2);
    Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap()
}

async fn get(c: &kube::Client, uri: &str) -> (u16, String) {
    let req = http::Request::builder()
        .uri(uri)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let resp = c.send(req).await.unwrap();
    let st = resp.status().as_u16();
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (st, String::from_utf8_lossy(&b).into_owned())
}

#[tokio::test]
async fn our_principals_resource_request_is_answered_by_a_peer_agent() {
    let pki = LocalPki::new().expect("pki");
    let p = our_principal_with_proxy(&pki).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-pa", "managed").await;
    let url = format!("https://{}", p.resource_proxy_addr().unwrap());
    let client = proxy_client(&url, &pki.agent("agent-pa").unwrap(), "agent-pa")
        .await
        .unwrap();

    let c = client.clone();
    let call = tokio::spawn(async move {
        get(
            &c,
            "/apis/apps/v1/namespaces/guestbook/deployments/web?resourceVersion=0",
        )
        .await
    });
    let req = s
        .expect("a resource request", |e| e.dataschema == "resource")
        .await;
    assert_eq!(req.typ, "GET", "the type is the raw HTTP method");
    let uuid = data(&req)["uuid"].as_str().unwrap().to_string();
    assert_eq!(req.ext("resourceid"), Some(uuid.as_str()));
    assert_eq!(req.ext("eventid"), Some(uuid.as_str()));
    // byte for byte the peer's NewResourceRequestEvent payload
    let want = s.emitter.resource_request(
        &uuid,
        ("apps", "v1", "deployments"),
        "guestbook",
        "web",
        "",
        "GET",
        b"",
        &[("resourceVersion", "0")],
    );
    assert_eq!(
        String::from_utf8_lossy(&req.data),
        String::from_utf8_lossy(&want.data)
    );
    let body = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"}}"#;
    let resp = s.emitter.resource_response(&uuid, 200, body);
    s.send(&resp).await;
    let (st, got) = tokio::time::timeout(T, call).await.unwrap().unwrap();
    assert_eq!((st, got.as_str()), (200, body));
    // our principal ACKs the response (the peer agent's event writer resends it otherwise)
    let (rid, eid) = (resp.ext("resourceid"), resp.ext("eventid"));
    s.expect("ACK of the response", |e| {
        e.dataschema == "eventProcessed" && e.ext("resourceid") == rid && e.ext("eventid") == eid
    })
    .await;

    // a peer agent's failure carries the status only: the caller still gets a Status body
    let c = client.clone();
    let call = tokio::spawn(async move { get(&c, "/api/v1/namespaces/default/secrets/x").await });
    let req = s
        .expect("a second resource request", |e| e.dataschema == "resource")
        .await;
    let uuid = data(&req)["uuid"].as_str().unwrap().to_string();
    s.send(&s.emitter.resource_response(&uuid, 404, "")).await;
    let (st, got) = tokio::time::timeout(T, call).await.unwrap().unwrap();
    assert_eq!(st, 404);
    let v: Value = serde_json::from_str(&got).unwrap();
    assert_eq!(
        (v["kind"].as_str(), v["reason"].as_str()),
        (Some("Status"), Some("NotFound"))
    );
    p.shutdown().await;
}

#[tokio::test]
async fn a_peer_agents_cluster_cache_info_and_connection_state_are_kept_for_argocd() {
    let pki = LocalPki::new().expect("pki");
    let p = our_principal_with_proxy(&pki).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-ci", "managed").await;
    let uuid = emitter::new_uuid();
    let ev = emitter::sent(
        s.emitter.cluster_cache_info_update(&uuid, 3, 41, 950),
        SENT_AT,
    );
    s.send(&ev).await;
    s.expect("ACK of the cluster cache info", |e| {
        e.typ == ty("processed")
            && e.ext("resourceid") == Some(uuid.as_str())
            && e.ext("eventid") == Some(uuid.as_str())
    })
    .await;
    let info = p.cluster_info("agent-ci").expect("known agent");
    assert_eq!(
        info["connectionState"]["message"],
        "Agent: 'agent-ci' is connected with principal"
    );
    assert_eq!(info["connectionState"]["status"], "Successful");
    assert_eq!(info["applicationsCount"], 3);
    assert_eq!(
        info["cacheInfo"],
        json!({"resourcesCount": 950, "apisCount": 41})
    );
    // the stream ends: Failed, the counts stay
    drop(s);
    tokio::time::timeout(T, async {
        while !p.connected_agents().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the principal sees the stream end");
    // Failed once the agent has not been back for half the heartbeat interval (ours; the peer's
    // principal writes Failed at once)
    tokio::time::timeout(T, async {
        while p.cluster_info("agent-ci").unwrap()["connectionState"]["status"] != "Failed" {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("Failed after the grace period");
    let info = p.cluster_info("agent-ci").unwrap();
    assert_eq!(info["applicationsCount"], 3);
    p.shutdown().await;
}

#[tokio::test]
async fn our_agents_cluster_cache_info_reads_as_the_peers() {
    let on_path = |b: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(b).is_file()))
    };
    if !on_path("redis-server") {
        skip(
            "SKIP: redis-server not installed; our_agents_cluster_cache_info_reads_as_the_peers did not run",
        );
        return;
    }
    init();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _redis = tokio::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
        ])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    // a process start announces nothing to await: poll its port under a timeout
    tokio::time::timeout(T, async {
        while tokio::net::TcpStream::connect(&addr).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("redis-server listens");
    let cfg = argocd_pull_agent_core::argocd_cache::ArgoCacheConfig {
        address: addr.clone(),
        password: None,
        gzip: true,
        resource_proxy_address: String::new(),
    };
    let key = argocd_pull_agent_core::argocd_cache::cluster_info_key(
        "https://kubernetes.default.svc",
        true,
    );
    argocd_pull_agent_core::argocd_cache::RedisClient::new(&addr, None)
        .call(&[
            b"SET",
            key.as_bytes(),
            &cfg.value(&json!({"cacheInfo": {"resourcesCount": 812, "apisCount": 40}, "applicationsCount": 5})),
        ])
        .await
        .unwrap();

    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let mut c = AgentConfig::new(pp.addr, pki.agent("agent-cc").unwrap(), Mode::Managed);
    c.local_redis = Some(argocd_pull_spoke::LocalRedis {
        address: addr,
        password: None,
    });
    c.cache_refresh_interval = Duration::from_millis(100);
    let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    let r = pp
        .expect("a cluster cache info update", |i| {
            i.event.dataschema == "clusterCacheInfoUpdate"
        })
        .await;
    assert_eq!(r.event.typ, ty("cluster-cache-info-update"));
    let uuid = r.event.ext("eventid").unwrap().to_string();
    assert_eq!(r.event.ext("resourceid"), Some(uuid.as_str()));
    let want = pp.emitter.cluster_cache_info_update(&uuid, 5, 40, 812);
    assert_eq!(
        String::from_utf8_lossy(&r.event.data),
        String::from_utf8_lossy(&want.data)
    );
    a.shutdown().await;
    pp.shutdown().await;
}

/// Prints a `SKIP:` line straight to stderr (not captured by the test harness, so CI shows it).
fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}
