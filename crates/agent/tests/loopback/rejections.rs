use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::pki::Ca;
use argocd_pull_agent_core::proto::authapi::{
    AuthRequest, authentication_client::AuthenticationClient,
};
use argocd_pull_agent_core::proto::eventstreamapi::{self, event_stream_client::EventStreamClient};
use argocd_pull_agent_core::proto::versionapi::{VersionRequest, version_client::VersionClient};
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_core::tls::TlsMaterial;
use futures::StreamExt;
use serde_json::json;
use tonic::Code;

use crate::harness::*;

#[tokio::test]
async fn wrong_ca_and_expired_certificates_are_rejected() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    // a client certificate from another CA
    let other = Ca::new("other").unwrap();
    let c = other.issue_agent("evil").unwrap();
    let m = TlsMaterial {
        cert_pem: c.cert_pem.into(),
        key_pem: c.key_pem.into(),
        ca_pem: pki.ca.cert_pem.clone().into(),
    };
    let r = match mtls_channel(p.local_addr(), &m).await {
        Err(e) => Err(e),
        Ok(ch) => VersionClient::new(ch)
            .version(VersionRequest {})
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    assert!(
        r.is_err(),
        "a certificate from a foreign CA must not get through"
    );
    // expired certificate from the right CA
    let c = pki
        .ca
        .issue_agent_with("old", Some(((2020, 1, 1), (2021, 1, 1))))
        .unwrap();
    let m = TlsMaterial {
        cert_pem: c.cert_pem.into(),
        key_pem: c.key_pem.into(),
        ca_pem: pki.ca.cert_pem.clone().into(),
    };
    let r = match mtls_channel(p.local_addr(), &m).await {
        Err(e) => Err(e),
        Ok(ch) => VersionClient::new(ch)
            .version(VersionRequest {})
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    };
    assert!(r.is_err(), "an expired certificate must be rejected");
    assert!(p.metrics().tls_handshake_failures.get() >= 2);
}

#[tokio::test]
async fn identity_mismatch_and_unknown_mode_are_rejected() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let ch_a = mtls_channel(p.local_addr(), &pki.agent("agent-a").unwrap())
        .await
        .unwrap();
    let ch_b = mtls_channel(p.local_addr(), &pki.agent("agent-b").unwrap())
        .await
        .unwrap();
    let e = login(ch_a.clone(), "bogus").await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("unknown agent mode \"bogus\""),
        "{}",
        e.message()
    );
    // a claimed client ID that is not the certificate's
    let e = AuthenticationClient::new(ch_a.clone())
        .authenticate(AuthRequest {
            method: "mtls".into(),
            mode: "managed".into(),
            credentials: [("clientID".to_string(), "agent-b".to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // agent-a's token on agent-b's connection
    let token = login(ch_a, "managed").await.unwrap();
    let (_tx, rx) = tokio::sync::mpsc::channel::<eventstreamapi::Event>(1);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("authorization", token.parse().unwrap());
    let e = EventStreamClient::new(ch_b.clone())
        .subscribe(req)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("agent-a") && e.message().contains("agent-b"),
        "{}",
        e.message()
    );
    // no token at all
    let (_tx, rx) = tokio::sync::mpsc::channel::<eventstreamapi::Event>(1);
    let e = EventStreamClient::new(ch_b)
        .subscribe(tonic::Request::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn malformed_and_oversized_events_get_error_events_and_the_stream_survives() {
    let pki = LocalPki::new().unwrap();
    let hub = MemStore::new();
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| c.max_event_size = 64 * 1024).await;
    let ch = mtls_channel(p.local_addr(), &pki.agent("raw").unwrap())
        .await
        .unwrap();
    let token = login(ch.clone(), "managed").await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<eventstreamapi::Event>(8);
    let mut req = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    req.metadata_mut()
        .insert("authorization", token.parse().unwrap());
    let mut inbound = EventStreamClient::new(ch)
        .max_decoding_message_size(1 << 20)
        .subscribe(req)
        .await
        .unwrap()
        .into_inner();
    let next_of = |ty: EventType| {
        let ty = ty.full();
        async move { ty }
    };
    let _ = next_of;
    async fn next_type(
        inbound: &mut tonic::Streaming<eventstreamapi::Event>,
        ty: EventType,
    ) -> Event {
        tokio::time::timeout(T, async {
            loop {
                let m = inbound
                    .next()
                    .await
                    .expect("stream open")
                    .expect("no stream error");
                let e = Event::from_wire(&m).unwrap();
                if e.ty == ty {
                    return e;
                }
            }
        })
        .await
        .expect("answer arrives")
    }
    // unknown event type
    let mut w =
        Event::request("raw", EventType::SpecUpdate, Target::Application, json!({})).to_wire();
    w.event.as_mut().unwrap().r#type = "io.argoproj.argocd-agent.event.explode".into();
    tx.send(w).await.unwrap();
    let e = next_type(&mut inbound, EventType::Error).await;
    assert_eq!(e.data["reason"], "malformed");
    assert!(e.data["message"].as_str().unwrap().contains("explode"));
    // oversized
    let big = json!({"metadata": {"name": "big", "namespace": "raw", "uid": "u", "resourceVersion": "1"}, "spec": {"blob": "x".repeat(100 * 1024)}});
    let ev = Event::for_object("raw", EventType::StatusUpdate, Target::Application, &big);
    tx.send(ev.to_wire()).await.unwrap();
    let e = next_type(&mut inbound, EventType::Error).await;
    assert_eq!(e.data["reason"], "oversized");
    assert_eq!(
        e.event_id, ev.event_id,
        "the error names the rejected event so the sender stops resending"
    );
    // the stream is still alive
    tx.send(
        Event::request(
            "raw",
            EventType::Ping,
            Target::Heartbeat,
            serde_json::Value::Null,
        )
        .to_wire(),
    )
    .await
    .unwrap();
    // a ping is ACKed with `processed` (the peer's rule), not answered with `pong`
    next_type(&mut inbound, EventType::Processed).await;
}
