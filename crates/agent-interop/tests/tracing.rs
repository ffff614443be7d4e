//! OTLP tracing on the wire: OUR principal with tracing on stamps the CloudEvents distributed
//! tracing extension (`traceparent`, the peer's `InjectTraceContext`) on the events it sends, and
//! a peer agent (this crate's SDK rules) still reads every event and finds the trace context
//! where the peer's `ExtractTraceContext` looks for it. Its own test binary: tracing is
//! process-wide.

#[allow(dead_code)]
#[path = "interop/common.rs"]
mod common;

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::store::{Kind, MemStore, Store};
use argocd_pull_agent_interop::emitter::ty;
use argocd_pull_ops::otel::{OtlpSettings, Telemetry};
use serde_json::json;

use common::*;

/// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`, ids not all zero (W3C trace context).
fn is_traceparent(s: &str) -> bool {
    let p: Vec<&str> = s.split('-').collect();
    let hex = |x: &str, n: usize| x.len() == n && x.bytes().all(|b| b.is_ascii_hexdigit());
    p.len() == 4
        && p[0] == "00"
        && hex(p[1], 32)
        && hex(p[2], 16)
        && hex(p[3], 2)
        && p[1].bytes().any(|b| b != b'0')
        && p[2].bytes().any(|b| b != b'0')
}

#[tokio::test]
async fn the_peer_agent_reads_our_events_and_their_trace_context() {
    init();
    // tracing on, spans sent nowhere (a closed port: exports fail, nothing else is affected)
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let telemetry = Telemetry::start(OtlpSettings {
        address: format!("127.0.0.1:{port}"),
        insecure: true,
        service_name: "principal".into(),
        env_prefix: "ARGOCD_PRINCIPAL",
    })
    .expect("telemetry");
    argocd_pull_ops::logging::LogArgs::default()
        .init_with_layer(Some(telemetry.layer()))
        .unwrap();
    assert!(argocd_pull_ops::otel::enabled());

    let pki = LocalPki::new().expect("pki");
    let hub = MemStore::new();
    let p = our_principal(&pki, &hub).await;
    let (_l, mut s) = peer_agent(&pki, &p, "agent-tr", "managed").await;
    hub.create(Kind::Application, app("agent-tr", "guestbook", "guestbook"))
        .await
        .expect("create");
    let create = s
        .expect("create", |e| {
            e.typ == ty("create") && e.dataschema == "application"
        })
        .await;
    let tp_create = create.ext("traceparent").expect("traceparent").to_string();
    assert!(is_traceparent(&tp_create), "{tp_create}");
    assert_eq!(
        create.json().expect("json")["spec"]["source"]["path"],
        "guestbook"
    );

    hub.merge_patch(
        Kind::Application,
        "agent-tr",
        "guestbook",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await
    .expect("patch");
    let update = s
        .expect("spec-update", |e| {
            e.typ == ty("spec-update") && e.dataschema == "application"
        })
        .await;
    let tp_update = update.ext("traceparent").expect("traceparent");
    assert!(is_traceparent(tp_update), "{tp_update}");
    // each hub change is its own trace (the peer's watch callbacks start one each)
    assert_ne!(tp_update[3..35], tp_create[3..35]);
    assert!(s.unreadable.is_empty(), "{}", s.describe());
    p.shutdown().await;
    telemetry.shutdown().await;
}
