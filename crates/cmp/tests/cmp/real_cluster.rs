//! End-to-end against a real OCM hub, gated by environment: ARGOCD_PULL_E2E_HUB_KUBECONFIG (a
//! kubeconfig for the hub) and ARGOCD_PULL_E2E_CLUSTER (a managed cluster whose work agent is
//! running). Without them the test prints "SKIP: ..." and passes.
//!
//! generate → server-side apply the ManifestWork on the hub → wait (watch, with a timeout) until
//! the work is Applied and Available and the Deployment's status feedback reports an available
//! replica → delete the work.

use std::io::Write as _;
use std::time::Duration;

use argocd_pull_cmp::{GenerateOptions, Input, Target};
use futures::TryStreamExt as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::wait::await_condition;
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::support::{condition_true, feedback};

#[tokio::test]
async fn e2e_generate_apply_and_see_feedback_on_a_real_hub() {
    let (Ok(kubeconfig), Ok(cluster)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_CLUSTER"),
    ) else {
        // Written to stderr directly: libtest does not capture it, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: set ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_CLUSTER to run the real-cluster CMP e2e test"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("read hub kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("hub kubeconfig");
    let client = kube::Client::try_from(config).expect("hub client");

    let suffix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        % 100_000;
    let app = format!("e2e-cmp-{suffix}");
    let ns = format!("argocd-pull-e2e-{suffix}");
    let stream = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pause\n  namespace: {ns}\n\
         spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: pause}}}}\n  template:\n    metadata: {{labels: {{app: pause}}}}\n\
         \x20   spec:\n      containers: [{{name: pause, image: \"registry.k8s.io/pause:3.9\"}}]\n"
    );
    let options = GenerateOptions {
        work_name: app.clone(),
        app_name: app.clone(),
        app_namespace: "argocd".into(),
        target: Target::Clusters(vec![cluster.clone()]),
        max_work_bytes: argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES,
        default_namespace: None,
        allow_empty: false,
        display_prefix: None,
    };
    let out = argocd_pull_cmp::generate(
        &Input::Stream {
            name: "<e2e>".into(),
            text: stream,
        },
        &options,
    )
    .expect("generate");
    let work: DynamicObject = serde_json::from_str(&out).expect("one work");

    let gvk = GroupVersionKind::gvk("work.open-cluster-management.io", "v1", "ManifestWork");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "manifestworks");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &cluster, &ar);
    api.patch(
        &app,
        &PatchParams::apply("argocd-pull-e2e").force(),
        &Patch::Apply(&work),
    )
    .await
    .expect("apply the ManifestWork to the hub");

    let ready = await_condition(api.clone(), &app, |w: Option<&DynamicObject>| {
        w.is_some_and(|w| {
            condition_true(w, "Applied")
                && condition_true(w, "Available")
                // `Replicas` comes from the managed cluster's deployment controller; a real
                // environment with no kubelet (../shared/realenv) never runs the pod, so
                // `AvailableReplicas` would never come back
                && feedback(w, "Deployment", "pause", "Replicas") == Some(1)
        })
    });
    let result = tokio::time::timeout(Duration::from_secs(300), ready).await;
    let last = api.get(&app).await.ok();
    let _ = api.delete(&app, &DeleteParams::foreground()).await;
    let work = result
        .unwrap_or_else(|_| {
            panic!(
                "work not Applied/Available with Replicas feedback in 300s; last seen: {last:#?}"
            )
        })
        .expect("watch")
        .expect("work exists");
    assert_eq!(
        feedback(&work, "Deployment", "pause", "DesiredReplicas"),
        Some(1)
    );
}

/// `--placement` on the real env: the ManifestWorkReplicaSet the CMP generates is accepted as
/// written (server-side apply, no defaulting needed), OCM's own ManifestWorkReplicaSet
/// controller (the work hub manager) fans it out to a ManifestWork in the selected cluster's
/// namespace, the work agent applies it, the replica set's summary counts it, and our health
/// check (`manifestworkreplicaset.lua`) calls it Healthy. Everything lives in namespace
/// `cmp-e2e-mwrs` on the hub (a ManagedClusterSetBinding of the `default` set, a Placement of
/// it), deleted at the end, also when the test fails; deleting the replica set removes the work
/// (`cascadeDeletionPolicy: Background`) and so what it applied on the spoke.
#[tokio::test]
async fn e2e_placement_fans_out_through_ocms_replicaset_controller() {
    let (Ok(kubeconfig), Ok(cluster)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_CLUSTER"),
    ) else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: set ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_CLUSTER to run the real-cluster CMP placement e2e test"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("read hub kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("hub kubeconfig");
    let client = kube::Client::try_from(config).expect("hub client");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    remove_namespace(&namespaces, MWRS_NS).await; // left by an interrupted run
    let result = tokio::spawn(fan_out(client.clone(), cluster)).await;
    remove_namespace(&namespaces, MWRS_NS).await;
    if let Err(e) = result {
        std::panic::resume_unwind(e.into_panic());
    }
}

const MWRS_NS: &str = "cmp-e2e-mwrs";

fn dynamic(
    c: &kube::Client,
    gvk: (&str, &str, &str),
    plural: &str,
    ns: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(gvk.0, gvk.1, gvk.2);
    Api::namespaced_with(
        c.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

/// Deletes a namespace (the replica set in it first, so that OCM removes its works) and waits
/// until it is gone.
async fn remove_namespace(namespaces: &Api<k8s_openapi::api::core::v1::Namespace>, ns: &str) {
    let sets = dynamic(
        &namespaces.clone().into_client(),
        (
            "work.open-cluster-management.io",
            "v1alpha1",
            "ManifestWorkReplicaSet",
        ),
        "manifestworkreplicasets",
        ns,
    );
    if let Ok(list) = sets.list(&Default::default()).await {
        for s in list.items {
            let _ = sets
                .delete(
                    &s.metadata.name.unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
    let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    let gone = async {
        while namespaces.get_opt(ns).await.ok().flatten().is_some() {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), gone)
        .await
        .is_err()
    {
        eprintln!("cmp e2e: namespace {ns} still terminating after 120 s");
    }
}

async fn fan_out(client: kube::Client, cluster: String) {
    let ssa = PatchParams::apply("argocd-pull-e2e").force();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(MWRS_NS, &ssa, &Patch::Apply(serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MWRS_NS}})))
        .await
        .expect("namespace");
    dynamic(&client, ("cluster.open-cluster-management.io", "v1beta2", "ManagedClusterSetBinding"), "managedclustersetbindings", MWRS_NS)
        .patch("default", &ssa, &Patch::Apply(serde_json::json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
            "metadata": {"name": "default", "namespace": MWRS_NS}, "spec": {"clusterSet": "default"}})))
        .await
        .expect("ManagedClusterSetBinding");
    dynamic(&client, ("cluster.open-cluster-management.io", "v1beta1", "Placement"), "placements", MWRS_NS)
        .patch("fleet", &ssa, &Patch::Apply(serde_json::json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "fleet", "namespace": MWRS_NS}, "spec": {"clusterSets": ["default"]}})))
        .await
        .expect("Placement");

    let spoke_ns = "cmp-e2e-mwrs-app";
    let stream = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {spoke_ns}\n---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {spoke_ns}\ndata:\n  from: cmp-placement\n"
    );
    let options = GenerateOptions {
        work_name: "cmp-e2e".into(),
        app_name: "cmp-e2e".into(),
        app_namespace: "argocd".into(),
        target: Target::Placement {
            namespace: MWRS_NS.into(),
            name: "fleet".into(),
        },
        max_work_bytes: argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES,
        default_namespace: None,
        allow_empty: false,
        display_prefix: None,
    };
    let out = argocd_pull_cmp::generate(
        &Input::Stream {
            name: "<e2e>".into(),
            text: stream,
        },
        &options,
    )
    .expect("generate");
    let set: serde_json::Value = serde_json::from_str(&out).expect("one replica set");
    assert_eq!(set["spec"]["cascadeDeletionPolicy"], "Background");
    let sets = dynamic(
        &client,
        (
            "work.open-cluster-management.io",
            "v1alpha1",
            "ManifestWorkReplicaSet",
        ),
        "manifestworkreplicasets",
        MWRS_NS,
    );
    sets.patch("cmp-e2e", &ssa, &Patch::Apply(&set))
        .await
        .expect("apply the ManifestWorkReplicaSet");

    // OCM's controller writes the work into the cluster's namespace (named after the replica
    // set with a generated suffix: `generateName`), labelled with the replica set; the work agent
    // applies it.
    let works = dynamic(
        &client,
        ("work.open-cluster-management.io", "v1", "ManifestWork"),
        "manifestworks",
        &cluster,
    );
    let owner_label =
        format!("work.open-cluster-management.io/manifestworkreplicaset={MWRS_NS}.cmp-e2e");
    let applied = async {
        let mut events = std::pin::pin!(
            watcher(
                works.clone(),
                watcher::Config::default().labels(&owner_label)
            )
            .applied_objects()
        );
        while let Some(w) = events.try_next().await.expect("watch") {
            if condition_true(&w, "Applied") {
                return w;
            }
        }
        panic!("the watch of {cluster}'s works ended");
    };
    let work = tokio::time::timeout(Duration::from_secs(120), applied)
        .await
        .unwrap_or_else(|_| {
            panic!("no Applied ManifestWork labelled {owner_label} in {cluster} in 120 s")
        });
    let work_name = work.metadata.name.clone().expect("work name");
    assert!(
        work_name.starts_with("cmp-e2e"),
        "written by OCM's ManifestWorkReplicaSet controller as cmp-e2e<suffix>: {work_name}"
    );
    assert_eq!(
        work.data["spec"]["workload"], set["spec"]["manifestWorkTemplate"]["workload"],
        "the template, as generated"
    );
    let healthy = await_condition(sets.clone(), "cmp-e2e", |s: Option<&DynamicObject>| {
        s.is_some_and(|s| {
            let obj = serde_json::to_value(s).unwrap();
            crate::support::argocd_health(
                argocd_pull_cmp::install::MANIFESTWORKREPLICASET_HEALTH_LUA,
                &obj,
            )
            .0 == "Healthy"
        })
    });
    let Ok(set) = tokio::time::timeout(Duration::from_secs(120), healthy).await else {
        let last = sets.get_opt("cmp-e2e").await.ok().flatten();
        panic!("the replica set is not Healthy (summary available = total) in 120 s: {last:#?}");
    };
    let set = set.expect("watch").expect("replica set");
    assert!(
        set.data["status"]["summary"]["total"].as_i64() >= Some(1),
        "{:#?}",
        set.data["status"]
    );

    // Deleting the replica set removes the work (Background).
    sets.delete("cmp-e2e", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = await_condition(works, &work_name, |w: Option<&DynamicObject>| w.is_none());
    tokio::time::timeout(Duration::from_secs(120), gone)
        .await
        .expect("the work is removed with its replica set")
        .expect("watch");
}
