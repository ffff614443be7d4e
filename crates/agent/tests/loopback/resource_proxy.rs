//! The resource proxy end to end: a real HTTPS client (kube's, and `kubectl` when installed)
//! with an agent's client certificate → our principal → the agent's stream → our agent → the
//! agent's own API server (an embedded hub).

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::resource::proxy_client;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_principal::{Principal, PrincipalConfig, ResourceProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig, ResourceProxyClient};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::harness::*;

pub struct Rig {
    pub pki: LocalPki,
    pub principal: Principal,
    pub agents: Vec<(String, Agent, argocd_pull_hub::Hub)>,
    pub url: String,
}

impl Rig {
    pub async fn client(&self, agent: &str) -> kube::Client {
        proxy_client(&self.url, &self.pki.agent(agent).unwrap(), agent)
            .await
            .unwrap()
    }
}

pub async fn agent_on(pki: &LocalPki, p: &Principal, name: &str, api: kube::Client) -> Agent {
    agent_with(pki, p, name, api, |_| {}).await
}

pub async fn agent_with(
    pki: &LocalPki,
    p: &Principal,
    name: &str,
    api: kube::Client,
    f: impl FnOnce(&mut AgentConfig),
) -> Agent {
    let mut c = AgentConfig::new(p.local_addr(), pki.agent(name).unwrap(), Mode::Managed);
    f(&mut c);
    c.reconnect_max = Duration::from_millis(500);
    c.resource_proxy = Some(ResourceProxyClient(api));
    let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(T, a.wait_connected(0))
        .await
        .expect("agent connects");
    a
}

pub async fn rig(names: &[&str], f: impl FnOnce(&mut ResourceProxyConfig)) -> Rig {
    init();
    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    let mut rp = ResourceProxyConfig::new("127.0.0.1:0".parse().unwrap(), pki.principal.clone());
    f(&mut rp);
    cfg.resource_proxy = Some(rp);
    let principal = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let url = format!("https://{}", principal.resource_proxy_addr().unwrap());
    let mut agents = Vec::new();
    for n in names {
        let hub = argocd_pull_hub::Hub::new();
        let a = agent_on(&pki, &principal, n, hub.client()).await;
        agents.push((n.to_string(), a, hub));
    }
    Rig {
        pki,
        principal,
        agents,
        url,
    }
}

pub fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "data": {"k": "v"}
    }))
    .unwrap()
}

pub async fn raw(c: &kube::Client, method: &str, uri: &str, body: Vec<u8>) -> (u16, Value) {
    raw_with(c, method, uri, body, None).await
}

async fn raw_with(
    c: &kube::Client,
    method: &str,
    uri: &str,
    body: Vec<u8>,
    bearer: Option<&str>,
) -> (u16, Value) {
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json");
    if let Some(t) = bearer {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    let req = b.body(kube::client::Body::from(body)).unwrap();
    let resp = tokio::time::timeout(T, c.send(req)).await.unwrap().unwrap();
    let status = resp.status().as_u16();
    use http_body_util::BodyExt;
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&b).unwrap_or(Value::Null))
}

#[tokio::test]
async fn get_list_write_and_errors_reach_the_agents_api_server() {
    let r = rig(&["c1"], |_| {}).await;
    let own = Api::<ConfigMap>::namespaced(r.agents[0].2.client(), "default");
    own.create(&PostParams::default(), &cm("a", json!({"app": "web"})))
        .await
        .unwrap();
    own.create(&PostParams::default(), &cm("b", json!({"app": "db"})))
        .await
        .unwrap();
    let c = r.client("c1").await;
    let api = Api::<ConfigMap>::namespaced(c.clone(), "default");

    // get
    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    // list with a label selector
    let l = api
        .list(&ListParams::default().labels("app=db"))
        .await
        .unwrap();
    let names: Vec<_> = l
        .items
        .iter()
        .map(|i| i.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["b"]);
    // not found: the API server's Status comes through
    match api.get("missing").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 404);
            assert_eq!(s.reason, "NotFound");
            assert!(s.message.contains("missing"), "{}", s.message);
        }
        other => panic!("want 404, got {other:?}"),
    }
    // create, conflict (409), patch, delete
    api.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .unwrap();
    match api
        .create(&PostParams::default(), &cm("c", json!({})))
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("want 409, got {other:?}"),
    }
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"patched": "yes"}})),
    )
    .await
    .unwrap();
    assert_eq!(own.get("c").await.unwrap().data.unwrap()["patched"], "yes");
    api.delete("c", &DeleteParams::default()).await.unwrap();
    assert!(own.get_opt("c").await.unwrap().is_none());

    // discovery through the proxy: core and named groups
    let d = kube::discovery::Discovery::new(c.clone())
        .run()
        .await
        .unwrap();
    let groups: Vec<String> = d.groups().map(|g| g.name().to_string()).collect();
    assert!(groups.contains(&"".to_string()), "{groups:?}");
    assert!(groups.contains(&"apps".to_string()), "{groups:?}");

    // PUT is refused as by the peer
    let (st, body) = raw(
        &c,
        "PUT",
        "/api/v1/namespaces/default/configmaps/a",
        b"{}".to_vec(),
    )
    .await;
    assert_eq!(st, 403);
    assert!(body["message"].as_str().unwrap().contains("PUT"), "{body}");
    // a watch is refused with a clear message, not hung
    let (st, body) = raw(&c, "GET", "/api/v1/configmaps?watch=true", vec![]).await;
    assert_eq!(st, 405);
    assert!(body["message"].as_str().unwrap().contains("watch"));

    let m = r.principal.metrics().encode();
    assert!(
        m.contains("argocd_principal_resource_proxy_requests_total{agent_name=\"c1\"}"),
        "{m}"
    );
    assert!(
        m.contains(
            "argocd_principal_resource_proxy_errors_total{agent_name=\"c1\",reason=\"agent_error\"}"
        ),
        "{m}"
    );
    assert_eq!(r.principal.pending_resource_requests(), 0);
}

#[tokio::test]
async fn a_caller_reaches_only_the_agent_its_certificate_names() {
    let r = rig(&["c1", "c2"], |_| {}).await;
    Api::<ConfigMap>::namespaced(r.agents[0].2.client(), "default")
        .create(&PostParams::default(), &cm("only-on-c1", json!({})))
        .await
        .unwrap();
    let c1 = Api::<ConfigMap>::namespaced(r.client("c1").await, "default");
    let c2 = Api::<ConfigMap>::namespaced(r.client("c2").await, "default");
    assert!(c1.get_opt("only-on-c1").await.unwrap().is_some());
    assert!(c2.get_opt("only-on-c1").await.unwrap().is_none());
    // a certificate of an agent that is not connected: 502, not another agent's data
    let (st, body) = raw(
        &r.client("c3").await,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        vec![],
    )
    .await;
    assert_eq!(st, 502);
    assert!(
        body["message"].as_str().unwrap().contains("not connected"),
        "{body}"
    );
}

#[tokio::test]
async fn a_resource_proxy_bearer_token_names_the_agent_over_a_shared_certificate() {
    let r = rig(&["c1", "c2"], |_| {}).await;
    Api::<ConfigMap>::namespaced(r.agents[1].2.client(), "default")
        .create(&PostParams::default(), &cm("on-c2", json!({})))
        .await
        .unwrap();
    // one shared client certificate (a self-registered cluster secret), the token picks the agent
    let shared = r.client("shared-client").await;
    let issuer = argocd_pull_agent_core::auth::TokenIssuer::from_pem(&throwaway_jwt_key()).unwrap();
    let token = issuer.issue_resource_proxy("c2").unwrap();
    let uri = "/api/v1/namespaces/default/configmaps/on-c2";
    let (st, body) = raw_with(&shared, "GET", uri, vec![], Some(&token)).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["metadata"]["name"], "on-c2");
    let (st, body) = raw_with(&shared, "GET", uri, vec![], Some("not-a-jwt")).await;
    assert_eq!(st, 401);
    assert!(
        body["message"].as_str().unwrap().contains("bearer"),
        "{body}"
    );
}

#[tokio::test]
async fn disconnected_agent_gives_502_and_a_silent_one_504() {
    let mut r = rig(&["c1"], |rp| rp.timeout = Duration::from_millis(500)).await;
    // an agent whose API server never answers: the principal gives up at its timeout
    let hang = kube::Client::new(
        tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            std::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
                .await
        }),
        "default",
    );
    let slow = agent_on(&r.pki, &r.principal, "slow", hang).await;
    let c1 = r.client("c1").await;
    // the slow agent never blocks another agent's requests
    let slow_req = {
        let c = r.client("slow").await;
        tokio::spawn(async move {
            raw(&c, "GET", "/api/v1/namespaces/default/configmaps", vec![]).await
        })
    };
    let (st, _) = raw(&c1, "GET", "/api/v1/namespaces/default/configmaps", vec![]).await;
    assert_eq!(st, 200);
    let (st, body) = slow_req.await.unwrap();
    assert_eq!(st, 504, "{body}");
    assert!(body["message"].as_str().unwrap().contains("did not answer"));

    let (_, a, _) = r.agents.remove(0);
    a.shutdown().await;
    // wait for the principal to see the stream end (an event, polled under a timeout)
    tokio::time::timeout(T, async {
        while r.principal.connected_agents().contains(&"c1".to_string()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    let (st, body) = raw(&c1, "GET", "/api/v1/namespaces/default/configmaps", vec![]).await;
    assert_eq!(st, 502);
    assert!(body["message"].as_str().unwrap().contains("c1"));
    let m = r.principal.metrics().encode();
    assert!(m.contains("reason=\"timeout\""), "{m}");
    assert!(m.contains("reason=\"agent_disconnected\""), "{m}");
    slow.shutdown().await;
}

#[tokio::test]
async fn oversized_request_body_is_refused_with_the_limit_named() {
    let r = rig(&["c1"], |rp| rp.max_body = 1024).await;
    let c = r.client("c1").await;
    let big = serde_json::to_vec(&json!({
        "metadata": {"name": "big", "namespace": "default"}, "data": {"k": "x".repeat(4096)}
    }))
    .unwrap();
    let (st, body) = raw(&c, "POST", "/api/v1/namespaces/default/configmaps", big).await;
    assert_eq!(st, 413);
    assert!(body["message"].as_str().unwrap().contains("1024"), "{body}");
    assert!(
        Api::<ConfigMap>::namespaced(r.agents[0].2.client(), "default")
            .get_opt("big")
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn managed_only_agents_serve_argocd_managed_resources_as_the_peer() {
    let r = rig(&[], |_| {}).await;
    let own = argocd_pull_hub::Hub::new();
    let deploy: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "default", "labels": {"app.kubernetes.io/instance": "guestbook"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
    }))
    .unwrap();
    let d = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(own.client(), "default")
        .create(&PostParams::default(), &deploy)
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(own.client(), "default");
    cms.create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .unwrap();
    let mut child = cm("child", json!({}));
    child.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": d.metadata.uid.clone().unwrap()
    }))
    .unwrap()]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    let _a = agent_with(&r.pki, &r.principal, "strict", own.client(), |c| {
        c.resource_proxy_managed_only = true
    })
    .await;
    let c = r.client("strict").await;
    let ns = "/api/v1/namespaces/default";
    // tracked directly, and through its owner
    let (st, _) = raw(
        &c,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments/web",
        vec![],
    )
    .await;
    assert_eq!(st, 200);
    let (st, body) = raw(&c, "GET", &format!("{ns}/configmaps/child"), vec![]).await;
    assert_eq!(st, 200, "{body}");
    // not managed: forbidden, also for writes, nothing changes
    let (st, body) = raw(&c, "GET", &format!("{ns}/configmaps/plain"), vec![]).await;
    assert_eq!(st, 403);
    assert!(
        body["message"].as_str().unwrap().contains("not managed"),
        "{body}"
    );
    let (st, _) = raw(
        &c,
        "PATCH",
        &format!("{ns}/configmaps/plain"),
        br#"{"data":{"x":"y"}}"#.to_vec(),
    )
    .await;
    assert_eq!(st, 403);
    assert!(
        !cms.get("plain")
            .await
            .unwrap()
            .data
            .unwrap()
            .contains_key("x")
    );
    // lists: events only
    let (st, body) = raw(&c, "GET", &format!("{ns}/configmaps"), vec![]).await;
    assert_eq!(st, 403);
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not authorized to list"),
        "{body}"
    );
    let (st, _) = raw(&c, "GET", &format!("{ns}/events"), vec![]).await;
    assert_eq!(st, 200);
    // a missing object keeps the API server's 404
    let (st, body) = raw(&c, "GET", &format!("{ns}/configmaps/nope"), vec![]).await;
    assert_eq!((st, body["reason"].as_str()), (404, Some("NotFound")));
}

#[tokio::test]
async fn hanging_api_calls_never_hold_up_the_agents_application_events() {
    init();
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    let mut rp = ResourceProxyConfig::new("127.0.0.1:0".parse().unwrap(), pki.principal.clone());
    rp.timeout = Duration::from_secs(60);
    cfg.resource_proxy = Some(rp);
    let p = Principal::start(cfg, Arc::new(hub.clone()), Metrics::new("argocd_principal"))
        .await
        .unwrap();
    let hang = kube::Client::new(
        tower::service_fn(|_req: http::Request<kube::client::Body>| async {
            std::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
                .await
        }),
        "default",
    );
    let local = MemStore::new();
    let mut c = AgentConfig::new(p.local_addr(), pki.agent("slow").unwrap(), Mode::Managed);
    c.resource_proxy = Some(ResourceProxyClient(hang));
    let a = Agent::start(c, Arc::new(local.clone()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    tokio::time::timeout(T, a.wait_connected(0)).await.unwrap();
    // more hanging requests than the stream processes at once (64) and than API slots (32)
    let url = format!("https://{}", p.resource_proxy_addr().unwrap());
    let client = proxy_client(&url, &pki.agent("slow").unwrap(), "slow")
        .await
        .unwrap();
    let mut calls = Vec::new();
    for i in 0..100 {
        let c = client.clone();
        calls.push(tokio::spawn(async move {
            raw(
                &c,
                "GET",
                &format!("/api/v1/namespaces/default/configmaps/c{i}"),
                vec![],
            )
            .await
        }));
    }
    tokio::time::timeout(T, async {
        while p.pending_resource_requests() < 100 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("all requests are waiting");
    // an Application for the agent still arrives at once
    put(&hub, app("slow", "guestbook", "v1")).await;
    wait_for(
        &local,
        "argocd",
        "guestbook",
        "delivered despite 100 hanging requests",
        |o| o.is_some(),
    )
    .await;
    for c in calls {
        c.abort();
    }
    a.shutdown().await;
    p.shutdown().await;
}

#[tokio::test]
async fn an_answer_over_the_event_size_limit_is_refused_with_the_limit_named() {
    let r = rig(&[], |_| {}).await;
    let own = argocd_pull_hub::Hub::new();
    let mut big = cm("big", json!({}));
    big.data = Some([("k".to_string(), "x".repeat(8192))].into());
    Api::<ConfigMap>::namespaced(own.client(), "default")
        .create(&PostParams::default(), &big)
        .await
        .unwrap();
    let _a = agent_with(&r.pki, &r.principal, "small", own.client(), |c| {
        c.max_event_size = 4096
    })
    .await;
    let c = r.client("small").await;
    let (st, body) = raw(
        &c,
        "GET",
        "/api/v1/namespaces/default/configmaps/big",
        vec![],
    )
    .await;
    assert_eq!(st, 500, "{body}");
    let msg = body["message"].as_str().unwrap();
    assert!(msg.contains("4096") && msg.contains("limit"), "{msg}");
    // a small object still passes
    let (st, _) = raw(&c, "GET", "/api/v1/namespaces/default", vec![]).await;
    assert_eq!(st, 200);
}

#[tokio::test]
async fn an_answer_over_the_principals_limit_fails_its_request_at_once() {
    init();
    let pki = LocalPki::new().unwrap();
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.max_event_size = 4096;
    let mut rp = ResourceProxyConfig::new("127.0.0.1:0".parse().unwrap(), pki.principal.clone());
    rp.timeout = Duration::from_secs(60);
    cfg.resource_proxy = Some(rp);
    let p = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let own = argocd_pull_hub::Hub::new();
    let mut big = cm("big", json!({}));
    // over the principal's 4096-byte event limit, under the gRPC frame limit (twice that)
    big.data = Some([("k".to_string(), "x".repeat(5000))].into());
    Api::<ConfigMap>::namespaced(own.client(), "default")
        .create(&PostParams::default(), &big)
        .await
        .unwrap();
    let _a = agent_on(&pki, &p, "c1", own.client()).await;
    let url = format!("https://{}", p.resource_proxy_addr().unwrap());
    let c = proxy_client(&url, &pki.agent("c1").unwrap(), "c1")
        .await
        .unwrap();
    // answered well before the 60 s timeout
    let (st, body) = tokio::time::timeout(
        Duration::from_secs(10),
        raw(
            &c,
            "GET",
            "/api/v1/namespaces/default/configmaps/big",
            vec![],
        ),
    )
    .await
    .expect("no wait for the timeout");
    assert_eq!(st, 502, "{body}");
    assert!(body["message"].as_str().unwrap().contains("4096"), "{body}");
    assert_eq!(p.pending_resource_requests(), 0);
}
