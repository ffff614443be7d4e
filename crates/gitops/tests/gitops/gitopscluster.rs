//! GitOpsCluster and basic-mode cluster secrets.

use argocd_pull_gitops::{GitOpsConfig, StaleSecretPolicy};
use serde_json::{Value, json};

use crate::util::{Env, b64, eventually, secret_value};

const AUTH: &str = "apps.open-cluster-management.io/gitops-argo-namespace";

fn gitops_only(policy: StaleSecretPolicy) -> GitOpsConfig {
    GitOpsConfig {
        report: false,
        stale_secret_policy: policy,
        ..GitOpsConfig::default()
    }
}

async fn cluster(env: &Env, name: &str, labels: Value) {
    env.create(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
        "metadata": {"name": name, "labels": labels},
        "spec": {"hubAcceptsClient": true}
    }))
    .await;
}

async fn decide(env: &Env, ns: &str, placement: &str, clusters: &[&str]) {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    env.patch(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        Some(ns),
        &format!("{placement}-decision-1"),
        json!({"status": {"decisions": decisions}}),
        true,
    )
    .await;
}

/// Namespace `apps` (GitOpsCluster, Placement `p1`), Argo CD in `argocd` (authorised, server
/// Service), clusters c1 (env=prod) and c2 decided.
async fn fleet(env: &Env, argo_labels: &[(&str, &str)]) {
    env.namespace("apps", &[]).await;
    env.namespace("argocd", argo_labels).await;
    env.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "argocd-server", "namespace": "argocd", "labels": {
            "app.kubernetes.io/component": "server", "app.kubernetes.io/part-of": "argocd"}},
        "spec": {"ports": [{"port": 443}]}
    }))
    .await;
    cluster(env, "c1", json!({"env": "prod"})).await;
    cluster(env, "c2", json!({})).await;
    env.create(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "p1", "namespace": "apps"}, "spec": {}
    }))
    .await;
    env.create(json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
        "metadata": {"name": "p1-decision-1", "namespace": "apps",
                     "labels": {"cluster.open-cluster-management.io/placement": "p1"}}
    }))
    .await;
    decide(env, "apps", "p1", &["c1", "c2"]).await;
}

async fn gitopscluster(env: &Env, name: &str, argo_ns: &str, extra: Value) {
    let mut spec = json!({
        "argoServer": {"argoNamespace": argo_ns},
        "placementRef": {"kind": "Placement", "name": "p1", "apiVersion": "cluster.open-cluster-management.io/v1beta1"}
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    env.create(json!({
        "apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
        "metadata": {"name": name, "namespace": "apps"}, "spec": spec
    }))
    .await;
}

async fn secret(env: &Env, ns: &str, name: &str) -> Option<Value> {
    env.get("v1", "Secret", Some(ns), name).await
}

async fn status(env: &Env, name: &str) -> Value {
    env.get(
        "apps.open-cluster-management.io/v1beta1",
        "GitOpsCluster",
        Some("apps"),
        name,
    )
    .await
    .expect("GitOpsCluster exists")["status"]
        .clone()
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("condition {type_} in {status}"))
}

#[tokio::test]
async fn placement_clusters_get_secrets_status_and_appset_resources() {
    let env = Env::start(gitops_only(StaleSecretPolicy::ClusterDeleted)).await;
    fleet(&env, &[(AUTH, "true")]).await;
    gitopscluster(&env, "g1", "argocd", json!({})).await;

    let s1 = eventually("secret of c1", || {
        secret(&env, "argocd", "c1-application-manager-cluster-secret")
    })
    .await;
    assert_eq!(s1["type"], "Opaque");
    assert_eq!(secret_value(&s1, "name").as_deref(), Some("c1"));
    assert_eq!(
        secret_value(&s1, "server").as_deref(),
        Some("https://c1-control-plane")
    );
    assert_eq!(
        secret_value(&s1, "config"),
        None,
        "blank source has no config"
    );
    let labels = &s1["metadata"]["labels"];
    assert_eq!(labels["argocd.argoproj.io/secret-type"], "cluster");
    assert_eq!(
        labels["apps.open-cluster-management.io/acm-cluster"],
        "true"
    );
    assert_eq!(labels["apps.open-cluster-management.io/cluster-name"], "c1");
    assert_eq!(labels["env"], "prod", "the ManagedCluster's own labels");
    eventually("secret of c2", || {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
    })
    .await;

    let st = eventually("successful status", || async {
        let s = status(&env, "g1").await;
        (s["phase"] == "successful").then_some(s)
    })
    .await;
    assert_eq!(
        st["message"],
        "Added managed clusters [c1 c2] to gitops namespace argocd"
    );
    for t in [
        "Ready",
        "ArgoServerVerified",
        "PlacementResolved",
        "ClustersRegistered",
        "ApplicationSetResourcesReady",
    ] {
        assert_eq!(condition(&st, t)["status"], "True", "{t}: {st}");
    }
    assert_eq!(condition(&st, "UnsupportedFields")["status"], "False");

    let cm = env
        .get("v1", "ConfigMap", Some("argocd"), "acm-placement")
        .await
        .expect("acm-placement");
    assert_eq!(
        cm["data"],
        json!({"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "placementdecisions",
               "statusListKey": "decisions", "matchKey": "clusterName"})
    );
    let legacy = env
        .get("v1", "ConfigMap", Some("argocd"), "acm-placementrule")
        .await
        .expect("legacy");
    assert_eq!(legacy["data"]["kind"], "placementrules");
    let role = env
        .get(
            "rbac.authorization.k8s.io/v1",
            "Role",
            Some("argocd"),
            "argocd-applicationset-controller-placement",
        )
        .await
        .expect("role");
    assert!(role["rules"].to_string().contains("placementdecisions"));
    let rb = env
        .get(
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            Some("argocd"),
            "argocd-applicationset-controller-placement",
        )
        .await
        .expect("binding");
    assert!(
        rb["subjects"]
            .to_string()
            .contains("argocd-applicationset-controller")
    );

    // Nothing is written again when nothing changed: touch the GitOpsCluster, await a reconcile.
    let before = env.hub.counters();
    let reconciles = env.reconciles("gitopscluster");
    env.patch(
        "apps.open-cluster-management.io/v1beta1",
        "GitOpsCluster",
        Some("apps"),
        "g1",
        json!({"metadata": {"annotations": {"touched": "yes"}}}),
        false,
    )
    .await;
    eventually("a reconcile after the touch", || async {
        (env.reconciles("gitopscluster") > reconciles).then_some(())
    })
    .await;
    let since = env.hub.counters().since(&before);
    assert_eq!(
        since.writes(),
        1,
        "only the test's own patch: {:?}",
        since.entries()
    );
    env.stop().await;
}

#[tokio::test]
async fn label_change_leave_and_cluster_deletion() {
    let env = Env::start(gitops_only(StaleSecretPolicy::ClusterDeleted)).await;
    fleet(&env, &[(AUTH, "true")]).await;
    gitopscluster(&env, "g1", "argocd", json!({})).await;
    eventually("secret of c2", || {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
    })
    .await;

    // A label change on the ManagedCluster reaches the secret (event-driven).
    env.patch(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "c1",
        json!({"metadata": {"labels": {"env": "dev", "tier": "edge"}}}),
        false,
    )
    .await;
    eventually("relabelled secret", || async {
        let s = secret(&env, "argocd", "c1-application-manager-cluster-secret").await?;
        let l = &s["metadata"]["labels"];
        (l["env"] == "dev" && l["tier"] == "edge").then_some(())
    })
    .await;
    // A removed label is removed from the secret.
    env.patch(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "c1",
        json!({"metadata": {"labels": {"tier": null}}}),
        false,
    )
    .await;
    eventually("label removed", || async {
        let s = secret(&env, "argocd", "c1-application-manager-cluster-secret").await?;
        s["metadata"]["labels"].get("tier").is_none().then_some(())
    })
    .await;

    // c2 leaves the placement: by default (ACM) its secret stays.
    let reconciles = env.reconciles("gitopscluster");
    decide(&env, "apps", "p1", &["c1"]).await;
    eventually("status lists only c1", || async {
        let s = status(&env, "g1").await;
        (s["message"] == "Added managed clusters [c1] to gitops namespace argocd").then_some(())
    })
    .await;
    assert!(env.reconciles("gitopscluster") > reconciles);
    assert!(
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
            .await
            .is_some(),
        "a cluster that left the placement keeps its secret by default"
    );

    // The ManagedCluster is deleted: its secret goes.
    env.delete(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "c2",
    )
    .await;
    eventually("c2 secret deleted", || async {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        secret(&env, "argocd", "c1-application-manager-cluster-secret")
            .await
            .is_some()
    );
    env.stop().await;
}

#[tokio::test]
async fn left_placement_policy_deletes_at_once() {
    let env = Env::start(gitops_only(StaleSecretPolicy::LeftPlacement)).await;
    fleet(&env, &[(AUTH, "true")]).await;
    gitopscluster(&env, "g1", "argocd", json!({})).await;
    eventually("secret of c2", || {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
    })
    .await;
    decide(&env, "apps", "p1", &["c1"]).await;
    eventually("c2 secret deleted when it leaves", || async {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        env.get(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            "c2"
        )
        .await
        .is_some()
    );
    env.stop().await;
}

#[tokio::test]
async fn foreign_secret_claiming_a_cluster_is_refused() {
    let env = Env::start(gitops_only(StaleSecretPolicy::ClusterDeleted)).await;
    fleet(&env, &[(AUTH, "true")]).await;
    env.create(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "hand-made", "namespace": "argocd",
                     "labels": {"argocd.argoproj.io/secret-type": "cluster"}},
        "type": "Opaque",
        "data": {"name": b64("c2"), "server": b64("https://c2.example.com")}
    }))
    .await;
    gitopscluster(&env, "g1", "argocd", json!({})).await;
    let st = eventually("failed status", || async {
        let s = status(&env, "g1").await;
        (s["phase"] == "failed").then_some(s)
    })
    .await;
    let c = condition(&st, "ClustersRegistered");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "ForeignClusterSecret");
    assert!(c["message"].as_str().unwrap().contains("c2"), "{c}");
    assert_eq!(condition(&st, "Ready")["status"], "False");
    assert!(
        secret(&env, "argocd", "c1-application-manager-cluster-secret")
            .await
            .is_some()
    );
    assert!(
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
            .await
            .is_none()
    );
    let hand = secret(&env, "argocd", "hand-made").await.unwrap();
    assert_eq!(
        secret_value(&hand, "server").as_deref(),
        Some("https://c2.example.com"),
        "untouched"
    );

    // Removing the foreign secret lets the cluster in.
    env.delete("v1", "Secret", Some("argocd"), "hand-made")
        .await;
    eventually("c2 registered", || {
        secret(&env, "argocd", "c2-application-manager-cluster-secret")
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn namespace_without_authorisation_label_gets_nothing() {
    let env = Env::start(gitops_only(StaleSecretPolicy::ClusterDeleted)).await;
    fleet(&env, &[]).await;
    gitopscluster(
        &env,
        "g1",
        "argocd",
        json!({"createPolicyTemplate": true, "gitopsAddon": {"enabled": true}}),
    )
    .await;
    let st = eventually("failed status", || async {
        let s = status(&env, "g1").await;
        (s["phase"] == "failed").then_some(s)
    })
    .await;
    let c = condition(&st, "ArgoServerVerified");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "NamespaceNotAuthorized");
    assert!(st["message"].as_str().unwrap().contains(AUTH), "{st}");
    assert_eq!(condition(&st, "PlacementResolved")["status"], "Unknown");
    assert_eq!(condition(&st, "Ready")["status"], "False");
    let unsupported = condition(&st, "UnsupportedFields");
    assert_eq!(unsupported["status"], "True");
    let msg = unsupported["message"].as_str().unwrap();
    assert!(
        msg.contains("spec.gitopsAddon") && msg.contains("spec.createPolicyTemplate"),
        "{msg}"
    );
    assert!(
        secret(&env, "argocd", "c1-application-manager-cluster-secret")
            .await
            .is_none()
    );
    assert!(
        env.get("v1", "ConfigMap", Some("argocd"), "acm-placement")
            .await
            .is_none()
    );

    // Labelling the namespace is enough (the failed state is retried).
    env.patch(
        "v1",
        "Namespace",
        None,
        "argocd",
        json!({"metadata": {"labels": {AUTH: "true"}}}),
        false,
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn missing_argo_server_and_missing_placement_fail_clearly() {
    let env = Env::start(gitops_only(StaleSecretPolicy::ClusterDeleted)).await;
    fleet(&env, &[(AUTH, "true")]).await;
    env.namespace("empty-argo", &[(AUTH, "true")]).await;
    gitopscluster(&env, "no-server", "empty-argo", json!({})).await;
    let st = eventually("failed status", || async {
        let s = status(&env, "no-server").await;
        (s["phase"] == "failed").then_some(s)
    })
    .await;
    assert_eq!(
        condition(&st, "ArgoServerVerified")["reason"],
        "ArgoServerNotFound"
    );

    env.create(json!({
        "apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
        "metadata": {"name": "no-placement", "namespace": "apps"},
        "spec": {"argoServer": {"argoNamespace": "argocd"}, "placementRef": {"kind": "Placement", "name": "nope"}}
    }))
    .await;
    let st = eventually("failed status", || async {
        let s = status(&env, "no-placement").await;
        (s["phase"] == "failed").then_some(s)
    })
    .await;
    assert_eq!(
        condition(&st, "PlacementResolved")["reason"],
        "PlacementNotFound"
    );
    env.stop().await;
}

#[tokio::test]
async fn basic_mode_writes_a_secret_per_managed_cluster() {
    let env = Env::start(GitOpsConfig {
        gitopscluster: false,
        report: false,
        basic_secrets_namespace: Some("argocd".into()),
        ..GitOpsConfig::default()
    })
    .await;
    env.namespace("argocd", &[]).await;
    cluster(&env, "edge-1", json!({"region": "eu"})).await;
    cluster(&env, "edge-2", json!({})).await;
    let s = eventually("edge-1-secret", || secret(&env, "argocd", "edge-1-secret")).await;
    assert_eq!(
        secret_value(&s, "server").as_deref(),
        Some("https://edge-1-control-plane:6443")
    );
    assert_eq!(secret_value(&s, "name").as_deref(), Some("edge-1"));
    assert_eq!(
        s["metadata"]["labels"]["argocd.argoproj.io/secret-type"],
        "cluster"
    );
    assert_eq!(s["metadata"]["labels"]["region"], "eu");
    eventually("edge-2-secret", || secret(&env, "argocd", "edge-2-secret")).await;

    env.patch(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "edge-1",
        json!({"metadata": {"labels": {"region": "us"}}}),
        false,
    )
    .await;
    eventually("relabelled", || async {
        let s = secret(&env, "argocd", "edge-1-secret").await?;
        (s["metadata"]["labels"]["region"] == "us").then_some(())
    })
    .await;
    // an owned Secret deleted by someone else is written again (the watch of the owned Secrets
    // reconciles their ManagedCluster)
    let uid = secret(&env, "argocd", "edge-1-secret").await.unwrap()["metadata"]["uid"].clone();
    env.delete("v1", "Secret", Some("argocd"), "edge-1-secret")
        .await;
    eventually("edge-1-secret written again", || async {
        let s = secret(&env, "argocd", "edge-1-secret").await?;
        (s["metadata"]["uid"] != uid).then_some(())
    })
    .await;
    env.delete(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "edge-2",
    )
    .await;
    eventually("edge-2-secret garbage-collected", || async {
        secret(&env, "argocd", "edge-2-secret")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    env.stop().await;
}
