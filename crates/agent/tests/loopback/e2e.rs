//! Real clusters (env-gated): `ARGOCD_PULL_E2E_HUB_KUBECONFIG` and
//! `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`, both with the Argo CD CRDs installed. Runs a principal
//! against the hub and one managed agent against the managed cluster in this process, over loopback
//! mTLS with a throwaway PKI. The agent is named `e2e-<random>` (its namespace on the hub); on the
//! managed cluster it works in namespace `argocd` (created when missing). Without the variables the
//! test prints `SKIP: …` on stderr (not captured) and passes.
use std::io::Write;

use argocd_pull_agent::Mode;
use argocd_pull_agent::start_local;
use argocd_pull_agent::store::{Kind, KubeStore, Store, StoreEvent};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::harness::*;

const E2E_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

async fn client(path: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path)
        .unwrap_or_else(|e| panic!("reading kubeconfig {path}: {e}"));
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("kubeconfig {path}: {e}"));
    kube::Client::try_from(cfg).expect("kube client")
}

async fn wait_kube(
    s: &KubeStore,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(Option<&Value>) -> bool,
) -> Option<Value> {
    let mut w = s.watch(Kind::Application, Some(ns));
    let r = tokio::time::timeout(E2E_TIMEOUT, async {
        loop {
            let cur = s.get(Kind::Application, ns, name).await.unwrap();
            if pred(cur.as_ref()) {
                return cur;
            }
            match w.next().await {
                Some(Ok(
                    StoreEvent::Restarted(_) | StoreEvent::Applied(_) | StoreEvent::Deleted(_),
                )) => {}
                Some(Err(e)) => panic!("watch failed: {e}"),
                None => panic!("watch ended"),
            }
        }
    })
    .await;
    r.unwrap_or_else(|_| panic!("timed out waiting for {ns}/{name}: {what}"))
}

#[tokio::test]
async fn real_clusters_managed_round_trip() {
    let (Ok(hub_kc), Ok(managed_kc)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: real_clusters_managed_round_trip needs ARGOCD_PULL_E2E_HUB_KUBECONFIG and \
             ARGOCD_PULL_E2E_MANAGED_KUBECONFIG (Argo CD CRDs installed on both)"
        );
        return;
    };
    round_trip(&hub_kc, &managed_kc).await;
}

/// The same round trip against two embedded hubs served over HTTP, reached through kubeconfig
/// files (checks the e2e path itself without real clusters).
#[tokio::test]
async fn round_trip_through_kubeconfigs_of_served_embedded_hubs() {
    let dir = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    let mut paths = Vec::new();
    for n in ["hub", "managed"] {
        let h = argocd_pull_hub::Hub::new();
        h.install_crds_yaml(include_str!(
            "../../../api/crds/argocd/application-crd.yaml"
        ))
        .unwrap();
        h.install_crds_yaml(include_str!("../../../api/crds/argocd/appproject-crd.yaml"))
            .unwrap();
        let srv = h.serve("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let p = dir.path().join(format!("{n}.kubeconfig"));
        srv.write_kubeconfig(&p).unwrap();
        paths.push(p.to_string_lossy().to_string());
        servers.push((h, srv));
    }
    round_trip(&paths[0], &paths[1]).await;
}

async fn round_trip(hub_kc: &str, managed_kc: &str) {
    init();
    let (hub_c, managed_c) = (client(hub_kc).await, client(managed_kc).await);
    let (hub, managed) = (
        KubeStore::new(hub_c.clone()),
        KubeStore::new(managed_c.clone()),
    );
    managed.ensure_namespace("argocd").await.unwrap();
    let agent = format!("e2e-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let name = "e2e-guestbook";
    let d = start_local(hub_c, vec![(agent.clone(), managed_c)], Mode::Managed)
        .await
        .unwrap();
    d.wait_connected(E2E_TIMEOUT).await.unwrap();
    let _ = managed.delete(Kind::Application, "argocd", name).await;

    // hub -> managed
    let mut a = app(&agent, name, "guestbook");
    a.as_object_mut().unwrap().remove("unknownTopLevel");
    hub.create(Kind::Application, a).await.unwrap();
    let l = wait_kube(
        &managed,
        "argocd",
        name,
        "created on the managed cluster",
        |o| o.is_some(),
    )
    .await
    .unwrap();
    assert_eq!(l["spec"]["destination"]["name"], "in-cluster");

    // managed -> hub: status
    managed
        .merge_patch(
            Kind::Application,
            "argocd",
            name,
            json!({"status": {"sync": {"status": "OutOfSync"}, "health": {"status": "Missing"}}}),
        )
        .await
        .unwrap();
    // a real application controller may rewrite the status: wait until both sides agree
    tokio::time::timeout(E2E_TIMEOUT, async {
        loop {
            let m = managed
                .get(Kind::Application, "argocd", name)
                .await
                .unwrap();
            let h = hub.get(Kind::Application, &agent, name).await.unwrap();
            if let (Some(m), Some(h)) = (m, h)
                && !m["status"].is_null()
                && m["status"] == h["status"]
            {
                return;
            }
            // two clusters, no single watch covers both: poll
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("status reaches the hub");

    // delete on the hub: gone on both sides (finalizers, if any, are handled by the agent flow)
    hub.delete(Kind::Application, &agent, name).await.unwrap();
    wait_kube(
        &managed,
        "argocd",
        name,
        "deleted on the managed cluster",
        |o| o.is_none(),
    )
    .await;
    wait_kube(&hub, &agent, name, "deleted on the hub", |o| o.is_none()).await;
    d.shutdown().await;
}
