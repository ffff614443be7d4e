//! The Redis proxy on the peer's wire: a peer principal's `NewRedisRequestEvent`s answered by OUR
//! agent from a real `redis-server`, and OUR principal's Redis proxy answered by a peer-style
//! agent (`NewRedisResponseEvent`, `pushFromSubscribe`). `SKIP:` without `redis-server`.

#[path = "../../../agent/tests/loopback/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::Duration;

use argocd_pull_agent::local::LocalPki;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::auth::throwaway_jwt_key;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_interop::emitter::{self, Emitter, ty};
use argocd_pull_agent_interop::peer_agent::T;
use argocd_pull_agent_interop::sdk::{Event, go_json};
use argocd_pull_principal::{Principal, PrincipalConfig, RedisProxyConfig};
use argocd_pull_spoke::{Agent, AgentConfig, LocalRedisProxy};
use futures::StreamExt;
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::common::*;
use redis_server::RedisServer;

fn skip() -> bool {
    if redis_server::available() {
        return false;
    }
    println!("SKIP: redis-server is not installed (apt-get install redis-server)");
    true
}

fn data(e: &Event) -> Value {
    serde_json::from_slice(&e.data).expect("JSON payload")
}

const TREE: &str = "app|resources-tree|agent-rd_guestbook|1.8.3.gz";
const LOCAL_TREE: &str = "app|resources-tree|guestbook|1.8.3.gz";

#[tokio::test]
async fn a_peer_principals_redis_requests_are_answered_by_our_agent() {
    if skip() {
        return;
    }
    init();
    let pki = LocalPki::new().expect("pki");
    let pp = peer_principal(&pki, argocd_pull_agent_core::VERSION).await;
    let local = RedisServer::start().await;
    let mut r = local.conn().await;
    let _: () = r
        .set(LOCAL_TREE, b"tree\x00bytes".as_slice())
        .await
        .unwrap();
    let mut c = AgentConfig::new(pp.addr, pki.agent("agent-rd").unwrap(), Mode::Managed);
    c.reconnect_max = Duration::from_millis(500);
    c.redis_proxy = Some(LocalRedisProxy::new(&local.addr));
    let a = Agent::start(c, Arc::new(MemStore::new()), Metrics::new("argocd_agent"))
        .await
        .unwrap();
    pp.wait_streams(1).await;
    let conn = emitter::new_uuid();

    // GET: answered with the value, byte for byte the peer agent's NewRedisResponseEvent payload
    let uuid = emitter::new_uuid();
    pp.send(&emitter::sent(
        pp.emitter
            .redis_request(&uuid, &conn, json!({"get": {"key": TREE}})),
        SENT_AT,
    ))
    .await;
    // answered, and ACKed as every processed event (in either order)
    let (mut resp, mut acked) = (None, false);
    while resp.is_none() || !acked {
        let i = pp
            .expect("the GET response and the ACK of the request", |i| {
                i.event.ext("eventid") == Some(uuid.as_str())
                    && (i.event.typ == ty("redis-response")
                        || (i.event.typ == ty("processed")
                            && i.event.ext("resourceid") == Some(uuid.as_str())))
            })
            .await;
        if i.event.typ == ty("redis-response") {
            resp = Some(i);
        } else {
            acked = true;
        }
    }
    let resp = resp.expect("loop ends with the response");
    assert_eq!(resp.event.dataschema, "redis");
    let rid = resp.event.ext("resourceid").unwrap_or_default();
    assert!(!rid.is_empty() && rid != uuid, "a fresh resourceid: {rid}");
    let want = Emitter::redis_get_body(Some(b"tree\x00bytes"), true, "");
    assert_eq!(
        String::from_utf8_lossy(&resp.event.data),
        String::from_utf8_lossy(&go_json(
            &json!({"uuid": uuid, "connectionUuid": conn, "body": want})
        ))
    );

    // a miss: bytes null, cacheHit false
    let uuid = emitter::new_uuid();
    pp.send(&pp.emitter.redis_request(
        &uuid,
        &conn,
        json!({"get": {"key": "app|managed-resources|agent-rd_none|1.8.3"}}),
    ))
    .await;
    let resp = pp
        .expect("the miss", |i| {
            i.event.typ == ty("redis-response") && i.event.ext("eventid") == Some(uuid.as_str())
        })
        .await;
    assert_eq!(
        data(&resp.event)["body"],
        Emitter::redis_get_body(None, false, "")
    );

    // SUBSCRIBE, then a PUBLISH on the agent's Redis comes back as pushFromSubscribe carrying
    // the SUBSCRIBE's UUID and the channel as the principal named it
    let sub = emitter::new_uuid();
    pp.send(
        &pp.emitter
            .redis_request(&sub, &conn, json!({"subscribe": {"channel": TREE}})),
    )
    .await;
    let resp = pp
        .expect("the SUBSCRIBE response", |i| {
            i.event.typ == ty("redis-response") && i.event.ext("eventid") == Some(sub.as_str())
        })
        .await;
    assert_eq!(
        data(&resp.event)["body"],
        json!({"subscribeResponse": {"error": ""}})
    );
    let n: i64 = r.publish(LOCAL_TREE, "").await.unwrap();
    assert_eq!(n, 1);
    let push = pp
        .expect("the push", |i| {
            i.event.typ == ty("redis-response")
                && i.event.ext("eventid") == Some(sub.as_str())
                && data(&i.event)["body"].get("pushFromSubscribe").is_some()
        })
        .await;
    assert_eq!(
        data(&push.event),
        json!({"uuid": sub, "connectionUuid": conn,
               "body": {"pushFromSubscribe": {"channelName": TREE}}})
    );

    // ping → pong
    let ping = emitter::new_uuid();
    pp.send(&pp.emitter.redis_request(&ping, &conn, json!({"ping": {}})))
        .await;
    let pong = pp
        .expect("the pong", |i| {
            i.event.typ == ty("redis-response") && i.event.ext("eventid") == Some(ping.as_str())
        })
        .await;
    assert_eq!(data(&pong.event)["body"], json!({"pong": {}}));
    a.shutdown().await;
    pp.shutdown().await;
}

#[tokio::test]
async fn our_principals_redis_proxy_is_answered_by_a_peer_agent() {
    if skip() {
        return;
    }
    init();
    let pki = LocalPki::new().expect("pki");
    let hub = RedisServer::start().await;
    let mut cfg = PrincipalConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        pki.principal.clone(),
        throwaway_jwt_key(),
    );
    cfg.redis_proxy = Some(RedisProxyConfig::new(
        "127.0.0.1:0".parse().unwrap(),
        &hub.addr,
    ));
    let p: Principal = Principal::start(
        cfg,
        Arc::new(MemStore::new()),
        Metrics::new("argocd_principal"),
    )
    .await
    .unwrap();
    let (_l, mut s) = peer_agent(&pki, &p, "agent-rd", "managed").await;
    let url = format!("redis://{}/?protocol=resp3", p.redis_proxy_addr().unwrap());
    let client = redis::Client::open(url).unwrap();

    // GET through our proxy → the peer agent sees the peer principal's request, byte for byte
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    let call = tokio::spawn(async move { c.get::<_, Vec<u8>>(TREE).await });
    let req = s
        .expect("a redis request", |e| e.dataschema == "redis")
        .await;
    assert_eq!(req.typ, ty("redis-request"));
    let d = data(&req);
    let (uuid, conn) = (
        d["uuid"].as_str().unwrap().to_string(),
        d["connectionUuid"].as_str().unwrap().to_string(),
    );
    assert_eq!(req.ext("resourceid"), Some(uuid.as_str()));
    assert_eq!(req.ext("eventid"), Some(uuid.as_str()));
    let want = s
        .emitter
        .redis_request(&uuid, &conn, json!({"get": {"key": TREE}}));
    assert_eq!(
        String::from_utf8_lossy(&req.data),
        String::from_utf8_lossy(&want.data)
    );
    s.send(&s.emitter.redis_response(
        &uuid,
        &conn,
        Emitter::redis_get_body(Some(b"from the peer agent"), true, ""),
    ))
    .await;
    let got = tokio::time::timeout(T, call)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got, b"from the peer agent");

    // SUBSCRIBE and a later pushFromSubscribe
    let mut ps = client.get_async_pubsub().await.unwrap();
    let subscribing = tokio::spawn(async move {
        ps.subscribe(TREE).await.unwrap();
        ps
    });
    let req = s
        .expect("a redis subscribe", |e| {
            e.dataschema == "redis" && data(e)["body"].get("subscribe").is_some()
        })
        .await;
    let d = data(&req);
    assert_eq!(d["body"], json!({"subscribe": {"channel": TREE}}));
    let (sub, conn) = (
        d["uuid"].as_str().unwrap().to_string(),
        d["connectionUuid"].as_str().unwrap().to_string(),
    );
    s.send(
        &s.emitter
            .redis_response(&sub, &conn, json!({"subscribeResponse": {"error": ""}})),
    )
    .await;
    let mut ps = tokio::time::timeout(T, subscribing).await.unwrap().unwrap();
    s.send(&s.emitter.redis_response(
        &sub,
        &conn,
        json!({"pushFromSubscribe": {"channelName": TREE}}),
    ))
    .await;
    let mut msgs = ps.on_message();
    let m = tokio::time::timeout(T, msgs.next()).await.unwrap().unwrap();
    assert_eq!(m.get_channel_name(), TREE);
}
