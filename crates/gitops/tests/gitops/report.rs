//! The ApplicationSet report and the `AdditionalStatusReport` condition.

use argocd_pull_gitops::GitOpsConfig;
use serde_json::{Value, json};

use crate::util::{Env, eventually};

const REPORT_API: &str = "apps.open-cluster-management.io/v1alpha1";
const REPORT: &str = "MulticlusterApplicationSetReport";

fn report_only() -> GitOpsConfig {
    GitOpsConfig {
        gitopscluster: false,
        report_debounce: std::time::Duration::from_millis(50),
        ..GitOpsConfig::default()
    }
}

async fn appset(env: &Env, name: &str) -> Value {
    env.create(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": "argocd"},
        "spec": {"generators": [], "template": {"metadata": {}, "spec": {
            "project": "default", "destination": {"namespace": "gb"},
            "source": {"repoURL": "https://example.com/repo.git", "path": "gb"}}}}
    }))
    .await
}

fn sv(name: &str, value: &str) -> Value {
    json!({"name": name, "fieldValue": {"type": "String", "string": value}})
}

fn raw(name: &str, value: Value) -> Value {
    json!({"name": name, "fieldValue": {"type": "JsonRaw", "jsonRaw": value.to_string()}})
}

/// A work of ApplicationSet `argocd/<appset>` on `cluster`, with these feedback values.
async fn work(env: &Env, appset: &str, cluster: &str, feedback: Vec<Value>) {
    let name = format!("{cluster}-{appset}-abcde");
    let app = format!("{cluster}-{appset}");
    env.create(json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": cluster,
            "labels": {"apps.open-cluster-management.io/application-set": "true",
                       "apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
            "annotations": {"apps.open-cluster-management.io/hosting-applicationset": format!("argocd/{appset}"),
                            "apps.open-cluster-management.io/hub-application-name": app,
                            "apps.open-cluster-management.io/hub-application-namespace": "argocd"}},
        "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": app, "namespace": "argocd"}, "spec": {}}]}}
    }))
    .await;
    set_feedback(env, cluster, &name, &app, feedback).await;
}

async fn set_feedback(env: &Env, cluster: &str, work: &str, app: &str, feedback: Vec<Value>) {
    env.patch(
        "work.open-cluster-management.io/v1", "ManifestWork", Some(cluster), work,
        json!({"status": {"conditions": [], "resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1",
                             "kind": "Application", "resource": "applications", "name": app, "namespace": "argocd"},
            "statusFeedback": {"values": feedback},
            "conditions": []}]}}}),
        true,
    )
    .await;
}

async fn setup(env: &Env) {
    for ns in ["argocd", "c1", "c2", "c3"] {
        env.namespace(ns, &[]).await;
    }
}

async fn report(env: &Env, name: &str) -> Option<Value> {
    env.get(REPORT_API, REPORT, Some("argocd"), name).await
}

#[tokio::test]
async fn report_aggregates_feedback_and_follows_changes() {
    let env = Env::start(report_only()).await;
    setup(&env).await;
    appset(&env, "gb").await;
    work(
        &env,
        "gb",
        "c2",
        vec![
            sv("healthStatus", "Progressing"),
            sv("syncStatus", "OutOfSync"),
            sv("operationStatePhase", "Running"),
            sv("operationStateStartedAt", "2026-01-01T00:00:00Z"),
            sv("syncRevision", "abc"),
            sv("condition.SyncError", "one or more objects failed to apply"),
            raw("resources.kind", json!(["Service", "Deployment"])),
            raw("resources.name", json!(["gb", "gb"])),
            raw("resources.version", json!(["v1", "v1"])),
            sv("resources.group", "apps"),
            raw("resources.namespace", json!(["gb", "gb"])),
        ],
    )
    .await;
    work(
        &env,
        "gb",
        "c1",
        vec![sv("healthStatus", "Healthy"), sv("syncStatus", "Synced")],
    )
    .await;
    work(&env, "gb", "c3", vec![]).await;

    let r = eventually("report with 3 clusters", || async {
        let r = report(&env, "gb").await?;
        (r["statuses"]["summary"]["clusters"] == "3").then_some(r)
    })
    .await;
    let st = &r["statuses"];
    assert_eq!(
        st["summary"],
        json!({"clusters": "3", "synced": "1", "notSynced": "2", "healthy": "1", "notHealthy": "2", "inProgress": "1"})
    );
    assert_eq!(
        r["metadata"]["labels"]["apps.open-cluster-management.io/hosting-applicationset"],
        "argocd.gb"
    );
    let clusters: Vec<&str> = st["clusterConditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["cluster"].as_str().unwrap())
        .collect();
    assert_eq!(clusters, ["c1", "c2", "c3"]);
    let c2 = &st["clusterConditions"][1];
    assert_eq!(
        *c2,
        json!({"cluster": "c2", "app": "argocd/c2-gb/c2/c2-gb-abcde", "syncStatus": "OutOfSync",
               "healthStatus": "Progressing", "operationStateStartedAt": "2026-01-01T00:00:00Z",
               "operationStatePhase": "Running", "syncRevision": "abc",
               "conditions": [{"type": "SyncError", "message": "one or more objects failed to apply"}]})
    );
    assert_eq!(
        st["clusterConditions"][2]["healthStatus"], "Unknown",
        "no feedback yet"
    );
    assert_eq!(
        st["resources"],
        json!([{"apiVersion": "apps/v1", "kind": "Deployment", "name": "gb", "namespace": "gb"},
               {"apiVersion": "v1", "kind": "Service", "name": "gb", "namespace": "gb"}])
    );

    // One cluster's status changes: reflected.
    set_feedback(
        &env,
        "c1",
        "c1-gb-abcde",
        "c1-gb",
        vec![sv("healthStatus", "Degraded"), sv("syncStatus", "Synced")],
    )
    .await;
    eventually("c1 degraded", || async {
        let r = report(&env, "gb").await?;
        (r["statuses"]["summary"]["healthy"] == "0"
            && r["statuses"]["summary"]["notHealthy"] == "3")
            .then_some(())
    })
    .await;

    // Only what changed is written: a second ApplicationSet's work writes its report only.
    appset(&env, "other").await;
    let before = env.hub.counters();
    work(
        &env,
        "other",
        "c1",
        vec![sv("healthStatus", "Healthy"), sv("syncStatus", "Synced")],
    )
    .await;
    eventually("other report", || report(&env, "other")).await;
    let since = env.hub.counters().since(&before);
    assert_eq!(
        since.writes_to("multiclusterapplicationsetreports"),
        1,
        "{:?}",
        since.entries()
    );
    env.stop().await;
}

#[tokio::test]
async fn deleted_applicationset_takes_its_report_and_works() {
    let env = Env::start(report_only()).await;
    setup(&env).await;
    appset(&env, "gb").await;
    appset(&env, "keep").await;
    work(&env, "gb", "c1", vec![sv("healthStatus", "Healthy")]).await;
    work(&env, "gb", "c2", vec![sv("healthStatus", "Healthy")]).await;
    work(&env, "keep", "c1", vec![sv("healthStatus", "Healthy")]).await;
    eventually("gb report", || report(&env, "gb")).await;
    eventually("keep report", || report(&env, "keep")).await;

    env.delete(
        "argoproj.io/v1alpha1",
        "ApplicationSet",
        Some("argocd"),
        "gb",
    )
    .await;
    eventually("gb report deleted", || async {
        report(&env, "gb").await.is_none().then_some(())
    })
    .await;
    for c in ["c1", "c2"] {
        eventually("gb works deleted", || async {
            env.get(
                "work.open-cluster-management.io/v1",
                "ManifestWork",
                Some(c),
                &format!("{c}-gb-abcde"),
            )
            .await
            .is_none()
            .then_some(())
        })
        .await;
    }
    assert!(report(&env, "keep").await.is_some());
    assert!(
        env.get(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("c1"),
            "c1-keep-abcde"
        )
        .await
        .is_some()
    );
    env.stop().await;
}

#[tokio::test]
async fn applicationset_owned_applications_get_additional_status_report() {
    let env = Env::start(report_only()).await;
    setup(&env).await;
    let set = appset(&env, "gb").await;
    let uid = set["metadata"]["uid"].as_str().unwrap().to_string();
    let app = |name: &str, owned: bool, conditions: Option<Value>| {
        let mut a = json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": "argocd",
                "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
                "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "c1"}},
            "spec": {"project": "default", "destination": {"namespace": "gb"}, "source": {"repoURL": "https://example.com/r.git"}}
        });
        if owned {
            a["metadata"]["ownerReferences"] = json!([{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "gb", "uid": uid}]);
        }
        if let Some(c) = conditions {
            a["status"] = json!({"conditions": c});
        }
        a
    };
    env.create(app("owned", true, None)).await;
    env.create(app("standalone", false, None)).await;
    env.create(app(
        "has-conditions",
        true,
        Some(json!([{"type": "SyncError", "message": "boom"}])),
    ))
    .await;

    let a = eventually("condition on owned app", || async {
        let a = env
            .get(
                "argoproj.io/v1alpha1",
                "Application",
                Some("argocd"),
                "owned",
            )
            .await?;
        let has = a["status"]["conditions"]
            .as_array()
            .is_some_and(|c| !c.is_empty());
        has.then_some(a)
    })
    .await;
    assert_eq!(
        a["status"]["conditions"],
        json!([{"type": "AdditionalStatusReport", "message":
            "kubectl get multiclusterapplicationsetreports -n argocd gb\nAdditional details available in ManagedCluster c1\nkubectl get applications -n argocd owned"}])
    );
    let s = env
        .get(
            "argoproj.io/v1alpha1",
            "Application",
            Some("argocd"),
            "standalone",
        )
        .await
        .unwrap();
    assert!(
        s["status"]["conditions"].is_null(),
        "not ApplicationSet-owned: {s}"
    );
    let h = env
        .get(
            "argoproj.io/v1alpha1",
            "Application",
            Some("argocd"),
            "has-conditions",
        )
        .await
        .unwrap();
    assert_eq!(
        h["status"]["conditions"],
        json!([{"type": "SyncError", "message": "boom"}])
    );
    env.stop().await;
}
