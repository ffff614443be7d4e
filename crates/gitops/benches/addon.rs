//! argoCDAgentAddon benchmark: one GitOpsCluster whose Placement selects 1,000 clusters, on the
//! embedded hub (in process).
//!
//! `cargo bench -p argocd-pull-gitops --bench addon` (env `BENCH_CLUSTERS` to scale).
//! Measures: time from the GitOpsCluster's creation to every object existing and every condition
//! True; the API writes of that set-up; then a steady-state pass (the GitOpsCluster touched): its
//! duration and its writes (target 0 besides the touch); then one cluster leaving.

use std::time::{Duration, Instant};

use argocd_pull_api::crds;
use argocd_pull_gitops::GitOpsConfig;
use argocd_pull_hub::{Hub, Verb};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn dynamic(
    client: &kube::Client,
    av: &str,
    kind: &str,
    plural: &str,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    let (g, v) = av.split_once('/').unwrap_or(("", av));
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn create(client: &kube::Client, plural: &str, obj: Value) {
    let av = obj["apiVersion"].as_str().unwrap().to_string();
    let kind = obj["kind"].as_str().unwrap().to_string();
    let ns = obj["metadata"]["namespace"].as_str().map(String::from);
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    dynamic(client, &av, &kind, plural, ns.as_deref())
        .create(&PostParams::default(), &o)
        .await
        .unwrap();
}

async fn conditions_true(client: &kube::Client) -> usize {
    let gc = dynamic(
        client,
        "apps.open-cluster-management.io/v1alpha1",
        "GitOpsCluster",
        "gitopsclusters",
        Some("argocd"),
    )
    .get("gc")
    .await
    .unwrap();
    let v = serde_json::to_value(gc).unwrap();
    v["status"]["conditions"]
        .as_array()
        .map(|c| c.iter().filter(|c| c["status"] == "True").count())
        .unwrap_or(0)
}

async fn until<F, Fut>(what: &str, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = Instant::now();
    let poll = async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(600), poll)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"));
    t.elapsed()
}

#[tokio::main]
async fn main() {
    let n = env_usize("BENCH_CLUSTERS", 1000);
    let hub = Hub::new();
    for set in [crds::OCM_HUB, crds::OWN] {
        for crd in set {
            hub.install_crds_yaml(crd).unwrap();
        }
    }
    let client = hub.client();
    let clusters: Vec<String> = (0..n).map(|i| format!("cluster-{i:04}")).collect();
    for ns in std::iter::once("argocd".to_string()).chain(clusters.iter().cloned()) {
        create(
            &client,
            "namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    create(
        &client,
        "placements",
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "placement", "namespace": "argocd"}, "spec": {}}),
    )
    .await;
    // OCM splits decisions into objects of at most 100 clusters.
    for (i, chunk) in clusters.chunks(100).enumerate() {
        let name = format!("placement-decision-{}", i + 1);
        create(&client, "placementdecisions", json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
            "metadata": {"name": name, "namespace": "argocd", "labels": {"cluster.open-cluster-management.io/placement": "placement"}}})).await;
        let d: Vec<Value> = chunk
            .iter()
            .map(|c| json!({"clusterName": c, "reason": ""}))
            .collect();
        dynamic(
            &client,
            "cluster.open-cluster-management.io/v1beta1",
            "PlacementDecision",
            "placementdecisions",
            Some("argocd"),
        )
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"decisions": d}})),
        )
        .await
        .unwrap();
    }
    let running = argocd_pull_gitops::start(
        client.clone(),
        GitOpsConfig {
            gitopscluster: false,
            report: false,
            ..GitOpsConfig::default()
        },
    )
    .await
    .unwrap();

    let before = hub.counters();
    let t0 = Instant::now();
    create(&client, "gitopsclusters", json!({"apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
        "metadata": {"name": "gc", "namespace": "argocd"},
        "spec": {"placementRef": {"kind": "Placement", "name": "placement"},
                 "argoCDAgentAddon": {"principalServerAddress": "principal.example.com", "principalServerPort": "443"}}})).await;
    until("every object and condition", || async {
        hub.object_count("managedclusteraddons") == n
            && hub.object_count("manifestworks") == 2 * n
            && conditions_true(&client).await >= 13
    })
    .await;
    let setup = t0.elapsed();
    let setup_writes = hub.counters().since(&before).writes();
    let objects = [
        "secrets",
        "manifestworks",
        "addondeploymentconfigs",
        "managedclusteraddons",
        "addontemplates",
    ]
    .map(|r| format!("{r} {}", hub.object_count(r)));
    println!("clusters: {n}");
    println!(
        "set-up: {:.2} s to every object and 13 conditions True; {setup_writes} API writes",
        setup.as_secs_f64()
    );
    println!("objects: {}", objects.join(", "));

    // Steady state. Quiesce first (no request for 1 s: the passes triggered by the set-up's own
    // status writes are over), then touch the GitOpsCluster and time the pass that follows: the
    // one that lists the ManagedClusterAddOns after the touch.
    loop {
        let t = hub.counters().total();
        tokio::time::sleep(Duration::from_secs(1)).await;
        if hub.counters().total() == t {
            break;
        }
    }
    let reconciles =
        |r: &argocd_pull_gitops::Running| r.metrics.reconcile.reconciles("argocd-agent-addon");
    let before = hub.counters();
    let t = Instant::now();
    dynamic(
        &client,
        "apps.open-cluster-management.io/v1alpha1",
        "GitOpsCluster",
        "gitopsclusters",
        Some("argocd"),
    )
    .patch(
        "gc",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"touch": "1"}}})),
    )
    .await
    .unwrap();
    until("the pass lists", || async {
        hub.counters()
            .since(&before)
            .get(Verb::List, "managedclusteraddons")
            >= 1
    })
    .await;
    let r1 = reconciles(&running);
    until("the pass ends", || async { reconciles(&running) > r1 }).await;
    let steady = t.elapsed();
    let delta = hub.counters().since(&before);
    println!(
        "steady state: the pass after a touch ends {:.3} s after it; {} API writes (1 is the touch itself), {} requests",
        steady.as_secs_f64(),
        delta.writes(),
        delta.total()
    );

    // One cluster leaves.
    let before = hub.counters();
    let t = Instant::now();
    let last = clusters.last().unwrap().clone();
    let d: Vec<Value> = clusters[(n - 1) / 100 * 100..n - 1]
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    dynamic(
        &client,
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        "placementdecisions",
        Some("argocd"),
    )
    .patch_status(
        &format!("placement-decision-{}", (n - 1) / 100 + 1),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"decisions": d}})),
    )
    .await
    .unwrap();
    let leave = until("the leaving cluster's objects deleted", || async {
        hub.object_count("managedclusteraddons") == n - 1
    })
    .await;
    println!(
        "leave: {last}'s objects deleted {:.3} s after the decision change; {} API writes",
        leave.as_secs_f64(),
        hub.counters().since(&before).writes()
    );
    let _ = t;
    running.shutdown().await;
}
