//! Real-cluster end-to-end test, run only when these are set:
//! `ARGOCD_PULL_E2E_HUB_KUBECONFIG`, `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`,
//! `ARGOCD_PULL_E2E_CLUSTER` (the ManagedCluster name of the managed cluster). The hub needs OCM
//! and the Application CRD; the managed cluster an OCM work agent and Argo CD.

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_controller::{ControllerConfig, start};
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

async fn client(path: &str) -> Client {
    let kc = Kubeconfig::read_from(path).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

#[tokio::test]
async fn real_cluster_round_trip() {
    let (Ok(hub), Ok(managed), Ok(cluster)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_CLUSTER"),
    ) else {
        // Written to stderr directly: libtest does not capture it, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: real-cluster e2e needs ARGOCD_PULL_E2E_HUB_KUBECONFIG, ARGOCD_PULL_E2E_MANAGED_KUBECONFIG and ARGOCD_PULL_E2E_CLUSTER"
        );
        return;
    };
    let hub = client(&hub).await;
    let managed = client(&managed).await;
    let running = start(hub.clone(), ControllerConfig::default())
        .await
        .unwrap();
    running.wait_ready().await;

    let name = format!("e2e-guestbook-{}", std::process::id());
    let mut v = crate::support::app_json(&name, &cluster);
    v["spec"]["destination"]["namespace"] = json!("e2e-guestbook");
    v["spec"]["syncPolicy"] = json!({"automated": {}, "syncOptions": ["CreateNamespace=true"]});
    let app: Application = serde_json::from_value(v).unwrap();
    let hub_apps: Api<Application> = Api::namespaced(hub.clone(), "argocd");
    hub_apps.create(&PostParams::default(), &app).await.unwrap();

    let spoke_apps: Api<Application> = Api::namespaced(managed, "argocd");
    let deadline = Duration::from_secs(300);
    tokio::time::timeout(deadline, async {
        loop {
            if spoke_apps.get_opt(&name).await.unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await
    .expect("Application reached the managed cluster");
    tokio::time::timeout(deadline, async {
        loop {
            let a = hub_apps.get(&name).await.unwrap();
            if a.sync_status().is_some() && a.health_status().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
    .await
    .expect("status came back to the hub");
    hub_apps
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    running.shutdown().await;
}
