//! Real-cluster end-to-end test, run only when these are set:
//! `ARGOCD_PULL_E2E_HUB_KUBECONFIG`, `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`,
//! `ARGOCD_PULL_E2E_CLUSTER` (the ManagedCluster name of the managed cluster). The hub needs OCM
//! and the Application CRD; the managed cluster an OCM work agent and the Application CRD. When
//! no Argo CD runs on the managed cluster (`../shared/realenv` has none), the test plays its part:
//! it writes the spoke Application's sync and health status, as Argo CD would, and checks that
//! exactly that status comes back to the hub.
//!
//! Its controller reconciles every pull-labelled Application of the hub, so it holds the
//! real-env lock of this binary ([`crate::support::REAL_ENV`]) against the fault tests; its
//! Application (`e2e-pull-guestbook` in `argocd`, on the hub and the spoke) and its works are
//! removed before and after the test, also when it fails.

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{
    ANNOTATION_HUB_APPLICATION_NAME, ANNOTATION_HUB_APPLICATION_NAMESPACE, LABEL_PULL_TO_OCM,
};
use argocd_pull_api::ocm::work::ManifestWork;
use argocd_pull_controller::{ControllerConfig, start};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

const NAME: &str = "e2e-pull-guestbook";
/// The work agent applies within seconds and syncs status every 5 s on the real env.
const STEP: Duration = Duration::from_secs(120);

async fn client(path: &str) -> Client {
    let kc = Kubeconfig::read_from(path).unwrap();
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(cfg).unwrap()
}

/// Whether an Argo CD application controller runs on the cluster (as a StatefulSet, its default
/// form, or a Deployment, in any namespace).
async fn argocd_installed(c: &Client) -> bool {
    let lp = ListParams::default().fields("metadata.name=argocd-application-controller");
    let sts = Api::<StatefulSet>::all(c.clone()).list(&lp).await;
    let deploy = Api::<Deployment>::all(c.clone()).list(&lp).await;
    sts.is_ok_and(|l| !l.items.is_empty()) || deploy.is_ok_and(|l| !l.items.is_empty())
}

/// Deletes the test's Application on the hub (finalizers stripped), its works and the spoke's
/// copy, and waits until they are gone.
async fn remove(
    hub_apps: &Api<Application>,
    spoke_apps: &Api<Application>,
    works: &Api<ManifestWork>,
) {
    if let Ok(list) = works
        .list(&ListParams::default().labels(LABEL_PULL_TO_OCM))
        .await
    {
        for w in list.items {
            let a = w.metadata.annotations.clone().unwrap_or_default();
            if a.get(ANNOTATION_HUB_APPLICATION_NAME).map(String::as_str) == Some(NAME)
                && a.get(ANNOTATION_HUB_APPLICATION_NAMESPACE)
                    .map(String::as_str)
                    == Some("argocd")
            {
                let _ = works
                    .delete(
                        w.metadata.name.as_deref().unwrap_or_default(),
                        &DeleteParams::default(),
                    )
                    .await;
            }
        }
    }
    for api in [hub_apps, spoke_apps] {
        if api.get_opt(NAME).await.ok().flatten().is_some() {
            let _ = api.delete(NAME, &DeleteParams::default()).await;
        }
    }
    let gone = async {
        loop {
            let hub = hub_apps.get_opt(NAME).await.ok().flatten();
            let spoke = spoke_apps.get_opt(NAME).await.ok().flatten();
            if hub.is_none() && spoke.is_none() {
                return;
            }
            // the controller removes the hub's finalizer once the work is gone; without a
            // controller (an interrupted run), nothing would
            for (api, o) in [(hub_apps, hub), (spoke_apps, spoke)] {
                if o.is_some_and(|o| o.metadata.deletion_timestamp.is_some()) {
                    let strip = json!({"metadata": {"finalizers": null}});
                    let _ = api
                        .patch(NAME, &PatchParams::default(), &Patch::Merge(&strip))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    if tokio::time::timeout(STEP, gone).await.is_err() {
        eprintln!("e2e: {NAME} still present after {STEP:?}");
    }
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
    argocd_pull_controller::install_crypto_provider();
    let _real_env = crate::support::REAL_ENV.lock().await;
    let hub = client(&hub).await;
    let managed = client(&managed).await;
    let hub_apps: Api<Application> = Api::namespaced(hub.clone(), "argocd");
    let spoke_apps: Api<Application> = Api::namespaced(managed.clone(), "argocd");
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), &cluster);
    let play_argocd = !argocd_installed(&managed).await;
    if play_argocd {
        eprintln!(
            "e2e: no Argo CD application controller on the managed cluster: the test writes the spoke Application's status itself"
        );
    }
    remove(&hub_apps, &spoke_apps, &works).await; // left by an interrupted run
    let running = start(hub.clone(), ControllerConfig::default())
        .await
        .unwrap();
    running.wait_ready().await;

    // The body runs as a task, so that a failing step still cleans up below.
    let body = tokio::spawn(round_trip(
        hub_apps.clone(),
        spoke_apps.clone(),
        cluster,
        play_argocd,
    ));
    let result = body.await;
    remove(&hub_apps, &spoke_apps, &works).await;
    running.shutdown().await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn round_trip(
    hub_apps: Api<Application>,
    spoke_apps: Api<Application>,
    cluster: String,
    play_argocd: bool,
) {
    let mut v = crate::support::app_json(NAME, &cluster);
    v["spec"]["destination"]["namespace"] = json!("e2e-guestbook");
    v["spec"]["syncPolicy"] = json!({"automated": {}, "syncOptions": ["CreateNamespace=true"]});
    let app: Application = serde_json::from_value(v).unwrap();
    hub_apps.create(&PostParams::default(), &app).await.unwrap();

    tokio::time::timeout(STEP, async {
        loop {
            if spoke_apps.get_opt(NAME).await.unwrap().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("Application reached the managed cluster");
    if play_argocd {
        // What Argo CD's application controller writes once it synced (no status subresource
        // on the Application CRD: a merge patch of the object).
        let status = json!({"status": {
            "sync": {"status": "Synced", "revision": "e2e-revision"},
            "health": {"status": "Healthy"}}});
        spoke_apps
            .patch(NAME, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("spoke Application status written");
    }
    let a = tokio::time::timeout(STEP, async {
        loop {
            let a = hub_apps.get(NAME).await.unwrap();
            if a.sync_status().is_some() && a.health_status().is_some() {
                break a;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
    .await
    .expect("status came back to the hub");
    if play_argocd {
        assert_eq!(
            (a.sync_status(), a.health_status()),
            (Some("Synced"), Some("Healthy")),
            "the spoke's status, on the hub"
        );
    }
}
