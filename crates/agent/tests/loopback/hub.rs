//! Against the embedded hub (kube::Client backends).
use argocd_pull_agent::start_local;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::{Kind, KubeStore, Store, StoreEvent};
use futures::StreamExt;
use serde_json::json;

use crate::harness::*;

const APP_CRD: &str = include_str!("../../../api/crds/argocd/application-crd.yaml");
const PROJECT_CRD: &str = include_str!("../../../api/crds/argocd/appproject-crd.yaml");

fn hub() -> argocd_pull_hub::Hub {
    let h = argocd_pull_hub::Hub::new();
    h.install_crds_yaml(APP_CRD).unwrap();
    h.install_crds_yaml(PROJECT_CRD).unwrap();
    h
}

async fn wait_kube(
    s: &KubeStore,
    ns: &str,
    name: &str,
    pred: impl Fn(Option<&serde_json::Value>) -> bool,
) {
    let mut w = s.watch(Kind::Application, Some(ns));
    tokio::time::timeout(T, async {
        loop {
            if pred(s.get(Kind::Application, ns, name).await.unwrap().as_ref()) {
                return;
            }
            match w.next().await {
                Some(Ok(
                    StoreEvent::Restarted(_) | StoreEvent::Applied(_) | StoreEvent::Deleted(_),
                )) => {}
                other => panic!("watch ended: {other:?}"),
            }
        }
    })
    .await
    .expect("condition reached");
}

#[tokio::test]
async fn managed_mode_over_the_embedded_hub_and_simulated_cluster() {
    init();
    let (h, spoke) = (hub(), hub());
    let d = start_local(
        h.client(),
        vec![("cluster-1".into(), spoke.client())],
        Mode::Managed,
    )
    .await
    .unwrap();
    d.wait_connected(T).await.unwrap();
    let hs = KubeStore::new(h.client());
    let ss = KubeStore::new(spoke.client());
    hs.ensure_namespace("cluster-1").await.unwrap();
    ss.ensure_namespace("argocd").await.unwrap();
    hs.create(Kind::Application, app("cluster-1", "guestbook", "v1"))
        .await
        .unwrap();
    wait_kube(&ss, "argocd", "guestbook", |o| o.is_some()).await;
    hs.merge_patch(
        Kind::Application,
        "cluster-1",
        "guestbook",
        json!({"spec": {"source": {"path": "v2"}}}),
    )
    .await
    .unwrap();
    wait_kube(&ss, "argocd", "guestbook", |o| {
        o.is_some_and(|o| o["spec"]["source"]["path"] == "v2")
    })
    .await;
    ss.merge_patch(
        Kind::Application,
        "argocd",
        "guestbook",
        json!({"status": {"health": {"status": "Healthy"}}}),
    )
    .await
    .unwrap();
    wait_kube(&hs, "cluster-1", "guestbook", |o| {
        o.is_some_and(|o| o["status"]["health"]["status"] == "Healthy")
    })
    .await;
    hs.delete(Kind::Application, "cluster-1", "guestbook")
        .await
        .unwrap();
    wait_kube(&ss, "argocd", "guestbook", |o| o.is_none()).await;
    d.shutdown().await;
}
