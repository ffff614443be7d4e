//! Certificate rotation without an outage: the principal's server certificate and the CA are
//! replaced while an agent is connected; its stream never fails, and new connections use the new
//! material (issue 14 point 5, the principal and agent side).

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::pki::Ca;
use argocd_pull_agent_core::store::MemStore;
use argocd_pull_agent_core::tls::TlsMaterial;

use crate::harness::*;

fn bundle(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = a.to_vec();
    if !v.ends_with(b"\n") {
        v.push(b'\n');
    }
    v.extend_from_slice(b);
    v
}

#[tokio::test]
async fn ca_and_principal_certificate_rotate_while_an_agent_stays_connected() {
    let pki = LocalPki::new().unwrap();
    let (hub, spoke, fresh) = (MemStore::new(), MemStore::new(), MemStore::new());
    let p = principal(&pki, &hub, "127.0.0.1:0").await;
    let a = agent(&pki, &p, "rot", Mode::Managed, &spoke).await;
    put(&hub, app("rot", "one", "v1")).await;
    wait_for(&spoke, "argocd", "one", "before the rotation", |o| {
        o.is_some()
    })
    .await;
    let streams = a.connections();

    // a new CA; both sides trust old + new while leaves are re-issued
    let new_ca = Ca::new("rotated CA").unwrap();
    let both = bundle(pki.ca.cert_pem.as_bytes(), new_ca.cert_pem.as_bytes());
    let server = new_ca.issue_server(&[]).unwrap();
    p.reload_tls(&TlsMaterial {
        cert_pem: server.cert_pem.into_bytes(),
        key_pem: server.key_pem.into_bytes(),
        ca_pem: both.clone(),
    })
    .unwrap();
    let leaf = new_ca.issue_agent("rot").unwrap();
    a.reload_tls(&TlsMaterial {
        cert_pem: leaf.cert_pem.into_bytes(),
        key_pem: leaf.key_pem.into_bytes(),
        ca_pem: both.clone(),
    })
    .unwrap();

    // the stream that was up never failed
    put(&hub, app("rot", "two", "v1")).await;
    wait_for(&spoke, "argocd", "two", "after the rotation", |o| {
        o.is_some()
    })
    .await;
    assert_eq!(a.connections(), streams, "no reconnect during the rotation");
    assert!(a.is_connected());

    // new connections use the new material: the agent's next stream, and an agent that knows
    // only the new CA
    assert!(p.disconnect_agent("rot"));
    tokio::time::timeout(T, a.wait_connected(streams))
        .await
        .expect("reconnects with its new certificate against the new server certificate");
    let only_new = new_ca.issue_agent("fresh").unwrap();
    let b = agent_with(&pki, &p, "fresh", Mode::Managed, &fresh, |c| {
        c.tls = TlsMaterial {
            cert_pem: only_new.cert_pem.into_bytes(),
            key_pem: only_new.key_pem.into_bytes(),
            ca_pem: new_ca.cert_pem.clone().into_bytes(),
        }
    })
    .await;
    assert!(b.is_connected());
    a.shutdown().await;
    b.shutdown().await;
    p.shutdown().await;
}
