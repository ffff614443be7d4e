//! The fleet of the fault tests: the test's namespace, its GitOpsCluster and Placement, the
//! `gfaults` clusters, and the outage itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::harness::*;
use super::view::*;

/// The test's namespace (its GitOpsCluster, Placement and, for v1beta1, the Argo CD namespace
/// with a stand-in server Service) and the `gfaults` clusters.
pub struct Scene {
    pub hub: Client,
    pub ns: String,
}

impl Scene {
    /// Removes what an interrupted run left, then makes the namespace, the cluster set, its
    /// binding and the Placement.
    pub async fn new(real: &Real, ns: &str) -> Scene {
        let scene = Scene {
            hub: real.hub.clone(),
            ns: ns.to_string(),
        };
        let crd: Value = serde_saphyr::from_str(argocd_pull_api::crds::GITOPSCLUSTER).unwrap();
        apply(
            &scene.hub,
            &ar(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            crd,
        )
        .await;
        scene.delete_gitopscluster().await;
        scene.delete_all_clusters().await;
        let namespaces = dapi(&scene.hub, &ar("v1", "Namespace", "namespaces"), None);
        for n in clusters(0..TOTAL).iter().chain([&scene.ns]) {
            eventually(&format!("namespace {n} not terminating"), || async {
                namespaces
                    .get_opt(n)
                    .await
                    .ok()
                    .flatten()
                    .is_none_or(|o| o.metadata.deletion_timestamp.is_none())
            })
            .await;
        }
        apply(
            &scene.hub,
            &ar("v1", "Namespace", "namespaces"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                "managedclustersets",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
                "kind": "ManagedClusterSet", "metadata": {"name": CLUSTERSET},
                "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}),
        )
        .await;
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSetBinding",
                "managedclustersetbindings",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2",
                "kind": "ManagedClusterSetBinding",
                "metadata": {"name": CLUSTERSET, "namespace": ns},
                "spec": {"clusterSet": CLUSTERSET}}),
        )
        .await;
        // no agent runs for these clusters: OCM taints them unreachable
        apply(
            &scene.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta1",
                "Placement",
                "placements",
            ),
            json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
                "metadata": {"name": PLACEMENT, "namespace": ns},
                "spec": {"clusterSets": [CLUSTERSET], "tolerations": [
                    {"key": "cluster.open-cluster-management.io/unreachable", "operator": "Exists"},
                    {"key": "cluster.open-cluster-management.io/unavailable", "operator": "Exists"}]}}),
        )
        .await;
        scene
    }

    /// The Argo CD server Service the v1beta1 controller looks for (a stand-in: nothing serves
    /// it).
    pub async fn argo_server(&self) {
        apply(
            &self.hub,
            &ar("v1", "Service", "services"),
            json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "gfaults-argocd-server", "namespace": self.ns, "labels": {
                    "app.kubernetes.io/component": "server", "app.kubernetes.io/part-of": "argocd"}},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 8080}]}}),
        )
        .await;
    }

    /// Creates clusters `range` (0-based: `gfaults-<i+1>`), five at once, each with its
    /// namespace first (as OCM's registration would; the addon writes into it), retrying while
    /// the API server is down.
    pub async fn create_clusters(&self, range: std::ops::Range<usize>) {
        let namespaces = dapi(&self.hub, &ar("v1", "Namespace", "namespaces"), None);
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        futures::stream::iter(range)
            .map(|i| {
                let (namespaces, mcs) = (namespaces.clone(), mcs.clone());
                async move {
                    let name = cluster(i + 1);
                    let ns: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))
                    .unwrap();
                    let mc: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "cluster.open-cluster-management.io/v1",
                        "kind": "ManagedCluster",
                        "metadata": {"name": name, "labels": {CLUSTERSET_LABEL: CLUSTERSET}},
                        "spec": {"hubAcceptsClient": true}}))
                    .unwrap();
                    for (api, obj) in [(&namespaces, &ns), (&mcs, &mc)] {
                        let what = format!("create {} {name}", obj.types.as_ref().unwrap().kind);
                        retrying_unless(&what, CONVERGE, 409, || async {
                            api.create(&PostParams::default(), obj).await
                        })
                        .await;
                    }
                }
            })
            .buffer_unordered(5)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes ManagedClusters `range` (0-based), five at once, retrying while the API server
    /// is down; then removes OCM's finalizers from them, so that they go at once rather than
    /// when OCM's registration controller has recovered from the outage too (50 to 80 s on the
    /// real env): what is measured is this controller's recovery. (No finalizer can be added
    /// once the deletion started; the test deletes the clusters' namespaces at the end.)
    pub async fn delete_clusters(&self, range: std::ops::Range<usize>) {
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        futures::stream::iter(range)
            .map(|i| {
                let mcs = mcs.clone();
                async move {
                    let name = cluster(i + 1);
                    let what = format!("delete ManagedCluster {name}");
                    retrying_unless(&what, CONVERGE, 404, || async {
                        mcs.delete(&name, &DeleteParams::default()).await
                    })
                    .await;
                    let strip = json!({"metadata": {"finalizers": null}});
                    let what = format!("finalizers of ManagedCluster {name}");
                    retrying_unless(&what, CONVERGE, 404, || async {
                        mcs.patch(&name, &PatchParams::default(), &Patch::Merge(&strip))
                            .await
                    })
                    .await;
                }
            })
            .buffer_unordered(5)
            .collect::<Vec<()>>()
            .await;
    }

    /// Deletes every ManagedCluster of the `gfaults` set and waits until they are gone.
    pub async fn delete_all_clusters(&self) {
        let mcs = dapi(&self.hub, &managed_clusters(), None);
        let lp = ListParams::default().labels(&format!("{CLUSTERSET_LABEL}={CLUSTERSET}"));
        let left = mcs
            .list_metadata(&lp)
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        for m in &left {
            let _ = mcs.delete(&m.name_any(), &DeleteParams::default()).await;
        }
        eventually("the gfaults ManagedClusters deleted", || async {
            mcs.list_metadata(&lp)
                .await
                .is_ok_and(|l| l.items.is_empty())
        })
        .await;
    }

    /// Deletes the GitOpsCluster (a running controller removes the addon's finalizer after
    /// cleaning up) and waits until it is gone; without a controller, strips the finalizer.
    pub async fn delete_gitopscluster(&self) {
        let gcs = dapi(&self.hub, &gitopsclusters("v1beta1"), Some(&self.ns));
        if gcs.get_opt(GC).await.ok().flatten().is_none() {
            return;
        }
        let _ = gcs.delete(GC, &DeleteParams::default()).await;
        let t0 = Instant::now();
        while gcs.get_opt(GC).await.ok().flatten().is_some() {
            if t0.elapsed() > Duration::from_secs(60) {
                let strip = json!({"metadata": {"finalizers": null}});
                let _ = gcs
                    .patch(GC, &PatchParams::default(), &Patch::Merge(&strip))
                    .await;
            }
            assert!(t0.elapsed() < CONVERGE, "GitOpsCluster {GC} not deleted");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Removes everything: the GitOpsCluster (first, while the controller runs), the clusters,
    /// their namespaces, the test's namespace and the cluster set.
    pub async fn finish(&self, controller: Controller) {
        self.delete_gitopscluster().await;
        drop(controller);
        self.delete_all_clusters().await;
        let namespaces = dapi(&self.hub, &ar("v1", "Namespace", "namespaces"), None);
        for n in clusters(0..TOTAL).iter().chain([&self.ns]) {
            let _ = namespaces.delete(n, &DeleteParams::default()).await;
        }
        let _ = dapi(
            &self.hub,
            &ar(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                "managedclustersets",
            ),
            None,
        )
        .delete(CLUSTERSET, &DeleteParams::default())
        .await;
    }

    /// Polls (every 100 ms) until the API server answers a list of the test's GitOpsClusters;
    /// returns when it first did.
    pub async fn until_answers(&self) -> Instant {
        let api = dapi(&self.hub, &gitopsclusters("v1beta1"), Some(&self.ns));
        argocd_pull_realenv_faults::until_answers(&api).await
    }

    /// The view of a test: the fleet's ManagedClusters, the Placement's decisions, the
    /// GitOpsCluster, and `more`.
    pub async fn view(&self, version: &str, more: Vec<Watched>) -> View {
        let mut watched = vec![
            Watched {
                name: "clusters",
                ar: managed_clusters(),
                ns: None,
                labels: format!("{CLUSTERSET_LABEL}={CLUSTERSET}"),
            },
            Watched {
                name: "decisions",
                ar: decisions(),
                ns: Some(self.ns.clone()),
                labels: format!("{}={PLACEMENT}", argocd_pull_api::names::LABEL_PLACEMENT),
            },
            Watched {
                name: "gc",
                ar: gitopsclusters(version),
                ns: Some(self.ns.clone()),
                labels: String::new(),
            },
        ];
        watched.extend(more);
        View::start(&self.hub, watched).await
    }
}

/// Kills the hub API server, lets `killed` go, keeps the API server down for [`OUTAGE`] (the
/// length of the fault, not a synchronisation), starts it again and returns when it first
/// answered, with `up.sh` (still waiting for the rest of the env).
pub async fn outage(real: &Real, scene: &Scene, killed: &Notify) -> (Instant, JoinHandle<()>) {
    let down = tokio::task::block_in_place(|| real.kill_hub_apiserver());
    killed.notify_one();
    tokio::time::sleep(OUTAGE).await;
    eprintln!("gitops-faults: {} starting the hub API server", utc());
    let up = tokio::task::spawn_blocking(move || drop(down));
    let back = scene.until_answers().await;
    eprintln!("gitops-faults: {} the hub API server answers again", utc());
    (back, up)
}

// ----- GitOpsCluster v1beta1 --------------------------------------------------------------------

pub const V1BETA1_NS_CREATE: &str = "gfaults-create";
pub const V1BETA1_NS_DELETE: &str = "gfaults-delete";

/// The cluster secret of `cluster` (the default ManagedServiceAccount's name).
pub fn secret_name(cluster: &str) -> String {
    argocd_pull_gitops::secrets::cluster_secret_name(
        cluster,
        argocd_pull_gitops::secrets::DEFAULT_MANAGED_SERVICE_ACCOUNT,
    )
}

/// The GitOpsCluster's secrets as watched: name → the cluster it names.
pub fn owned_secrets(view: &View, ns: &str) -> BTreeMap<String, String> {
    let owner = format!("{ns}/{GC}");
    view.objects("secrets")
        .iter()
        .filter(|s| {
            s.annotations()
                .get(argocd_pull_gitops::secrets::ANNOTATION_GITOPSCLUSTER)
                == Some(&owner)
        })
        .map(|s| {
            (
                s.name_any(),
                s.labels()
                    .get(argocd_pull_api::names::LABEL_CLUSTER_NAME)
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// Exactly the secrets of `want`, each naming its cluster.
pub fn has_secrets_of(view: &View, ns: &str, want: &BTreeSet<String>) -> (bool, String) {
    let got = owned_secrets(view, ns);
    let expected: BTreeMap<String, String> =
        want.iter().map(|c| (secret_name(c), c.clone())).collect();
    let missing = expected.keys().filter(|k| !got.contains_key(*k)).count();
    let extra = got.keys().filter(|k| !expected.contains_key(*k)).count();
    (
        got == expected,
        format!(
            "{} secrets, {missing} missing, {extra} not wanted",
            got.len()
        ),
    )
}

/// The GitOpsCluster's status says every cluster of `want` is registered.
pub fn status_lists(view: &View, ns: &str, want: &BTreeSet<String>) -> (bool, String) {
    let names: Vec<String> = want.iter().cloned().collect();
    let expected = argocd_pull_gitops::status::success_message(&names, ns);
    let Some(gc) = view.gitopscluster() else {
        return (false, "no GitOpsCluster".into());
    };
    let phase = gc["status"]["phase"].as_str().unwrap_or_default();
    let message = gc["status"]["message"].as_str().unwrap_or_default();
    (
        phase == "successful" && message == expected,
        format!("phase {phase:?}, message {message:.200}"),
    )
}

pub async fn v1beta1_scene(real: &Real, ns: &str) -> (Scene, View) {
    let scene = Scene::new(real, ns).await;
    scene.argo_server().await;
    apply(
        &scene.hub,
        &gitopsclusters("v1beta1"),
        json!({"apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
            "metadata": {"name": GC, "namespace": ns},
            "spec": {"argoServer": {"argoNamespace": ns},
                     "placementRef": {"kind": "Placement", "name": PLACEMENT}}}),
    )
    .await;
    let view = scene
        .view(
            "v1beta1",
            vec![Watched {
                name: "secrets",
                ar: secrets(),
                ns: Some(ns.to_string()),
                labels: format!(
                    "{}=cluster",
                    argocd_pull_api::names::LABEL_ARGOCD_SECRET_TYPE
                ),
            }],
        )
        .await;
    (scene, view)
}

/// The cluster secrets in `ns` as a fresh LIST reads them: `secrets/<ns>/<name>` → UID.
pub async fn cluster_secret_uids(hub: &Client, ns: &str) -> BTreeMap<String, String> {
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), ns)
        .list(&ListParams::default().labels(argocd_pull_api::names::LABEL_ACM_CLUSTER))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|s| {
            (
                format!("secrets/{ns}/{}", s.name_any()),
                s.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}
