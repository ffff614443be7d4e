//! The Argo CD health checks printed by `argocd-pull cmp install`, run in Lua 5.1 against
//! ManifestWork and ManifestWorkReplicaSet states: what the hub's Argo CD shows for each.

use argocd_pull_cmp::install::{MANIFESTWORK_HEALTH_LUA, MANIFESTWORKREPLICASET_HEALTH_LUA};
use serde_json::{Value, json};

use crate::support::{argocd_health, corpus, ok, run_cmp};

fn cond(t: &str, status: &str, observed: i64) -> Value {
    json!({"type": t, "status": status, "reason": format!("{t}{status}"),
           "message": format!("{t} is {status}"), "observedGeneration": observed})
}

fn feedback(kind: &str, name: &str, values: &[(&str, Value)]) -> Value {
    json!({
        "resourceMeta": {"group": "apps", "version": "v1", "kind": kind, "resource": "x",
                         "namespace": "guestbook", "name": name},
        "conditions": [cond("Applied", "True", 1), {"type": "StatusFeedbackSynced", "status": "True"}],
        "statusFeedback": {"values": values.iter().map(|(n, v)| {
            let field = match v {
                Value::Number(_) => json!({"type": "Integer", "integer": v}),
                _ => json!({"type": "String", "string": v}),
            };
            json!({"name": n, "fieldValue": field})
        }).collect::<Vec<_>>()},
    })
}

fn work(conditions: Value, manifests: Value) -> Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": "guestbook", "namespace": "cluster1", "generation": 1},
        "spec": {"workload": {"manifests": []}},
        "status": {"conditions": conditions, "resourceStatus": {"manifests": manifests}},
    })
}

fn health(obj: &Value) -> (String, String) {
    argocd_health(MANIFESTWORK_HEALTH_LUA, obj)
}

#[test]
fn manifestwork_health_follows_conditions_and_feedback() {
    let applied = || json!([cond("Applied", "True", 1), cond("Available", "True", 1)]);
    let deploy = |values: &[(&str, Value)]| json!([feedback("Deployment", "ui", values)]);
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "no status yet",
            json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                   "metadata": {"name": "w", "generation": 1}}),
            "Progressing",
            "Waiting for the work agent",
        ),
        (
            "apply failed",
            work(json!([cond("Applied", "False", 1)]), json!([])),
            "Degraded",
            "Not applied: Applied is False",
        ),
        (
            "conditions of an older generation",
            {
                let mut w = work(applied(), json!([]));
                w["metadata"]["generation"] = json!(2);
                w
            },
            "Progressing",
            "Waiting for the work agent",
        ),
        (
            "applied, not yet available",
            work(
                json!([cond("Applied", "True", 1), cond("Available", "Unknown", 1)]),
                json!([]),
            ),
            "Progressing",
            "Waiting for the resources to exist",
        ),
        (
            "rollout in progress",
            work(
                applied(),
                deploy(&[
                    ("DesiredReplicas", json!(3)),
                    ("AvailableReplicas", json!(1)),
                    ("UpdatedReplicas", json!(2)),
                ]),
            ),
            "Progressing",
            "Deployment guestbook/ui: 1/3 replicas available",
        ),
        (
            "rolled out but replicas unavailable",
            work(
                applied(),
                deploy(&[
                    ("DesiredReplicas", json!(3)),
                    ("AvailableReplicas", json!(1)),
                    ("UpdatedReplicas", json!(3)),
                ]),
            ),
            "Degraded",
            "Deployment guestbook/ui: 1/3 replicas available",
        ),
        (
            "deployment available",
            work(
                applied(),
                deploy(&[
                    ("DesiredReplicas", json!(3)),
                    ("AvailableReplicas", json!(3)),
                    ("UpdatedReplicas", json!(3)),
                ]),
            ),
            "Healthy",
            "All resources applied and available",
        ),
        (
            "job failed",
            work(
                applied(),
                json!([feedback("Job", "migrate", &[("JobFailed", json!("True"))])]),
            ),
            "Degraded",
            "Job guestbook/migrate: failed",
        ),
        (
            "job running",
            work(
                applied(),
                json!([feedback(
                    "Job",
                    "migrate",
                    &[("JobComplete", json!("False"))]
                )]),
            ),
            "Progressing",
            "Job guestbook/migrate: not complete",
        ),
        (
            "statefulset not ready",
            work(
                applied(),
                json!([feedback(
                    "StatefulSet",
                    "redis",
                    &[
                        ("DesiredReplicas", json!(2)),
                        ("ReadyReplicas", json!(1)),
                        ("UpdatedReplicas", json!(2))
                    ]
                )]),
            ),
            "Progressing",
            "StatefulSet guestbook/redis: 1/2 replicas ready",
        ),
        (
            "daemonset available",
            work(
                applied(),
                json!([feedback(
                    "DaemonSet",
                    "agent",
                    &[
                        ("DesiredNumberScheduled", json!(4)),
                        ("NumberAvailable", json!(4))
                    ]
                )]),
            ),
            "Healthy",
            "All resources applied and available",
        ),
        (
            "one manifest failed to apply",
            {
                let mut m = feedback("ConfigMap", "cfg", &[]);
                m["conditions"] = json!([cond("Applied", "False", 1)]);
                work(applied(), json!([m]))
            },
            "Degraded",
            "ConfigMap guestbook/cfg: Applied is False",
        ),
    ];
    for (what, obj, status, message) in cases {
        let (got_status, got_message) = health(&obj);
        assert_eq!(got_status, status, "{what}: {got_message}");
        assert!(
            got_message.contains(message),
            "{what}: message {got_message:?} should contain {message:?}"
        );
    }
}

#[test]
fn manifestworkreplicaset_health_follows_the_summary() {
    let mwrs = |status: Value| {
        json!({"apiVersion": "work.open-cluster-management.io/v1alpha1",
               "kind": "ManifestWorkReplicaSet", "metadata": {"name": "guestbook"},
               "status": status})
    };
    let summary = |total: i64, available: i64, degraded: i64| {
        json!({"conditions": [{"type": "PlacementVerified", "status": "True"}],
               "summary": {"total": total, "available": available, "degraded": degraded,
                           "applied": total, "progressing": 0}})
    };
    for (what, obj, status, message) in [
        (
            "no status",
            mwrs(Value::Null),
            "Progressing",
            "Waiting for the ManifestWorkReplicaSet controller",
        ),
        (
            "placement missing",
            mwrs(
                json!({"conditions": [{"type": "PlacementVerified", "status": "False", "reason": "PlacementDecisionNotFound"}]}),
            ),
            "Degraded",
            "Placement not verified: PlacementDecisionNotFound",
        ),
        (
            "no cluster selected",
            mwrs(summary(0, 0, 0)),
            "Progressing",
            "No cluster selected",
        ),
        (
            "some clusters pending",
            mwrs(summary(3, 1, 0)),
            "Progressing",
            "1 of 3 cluster(s) available",
        ),
        (
            "a cluster degraded",
            mwrs(summary(3, 2, 1)),
            "Degraded",
            "1 of 3 cluster(s) degraded",
        ),
        (
            "available everywhere",
            mwrs(summary(3, 3, 0)),
            "Healthy",
            "Available on 3 cluster(s)",
        ),
    ] {
        let (got_status, got_message) = argocd_health(MANIFESTWORKREPLICASET_HEALTH_LUA, &obj);
        assert_eq!(got_status, status, "{what}: {got_message}");
        assert!(
            got_message.contains(message),
            "{what}: {got_message:?} ⊉ {message:?}"
        );
    }
}

/// The scripts users apply are the ones tested here: the `argocd-cm` patch printed by
/// `cmp install` carries them verbatim.
#[test]
fn the_install_patch_carries_the_tested_scripts() {
    let patch = ok(&run_cmp(
        &corpus("plain"),
        &["install", "--only", "health-patch"],
        &[],
        None,
    ));
    let patch: Value = serde_saphyr::from_str(&patch).expect("the patch is YAML");
    let data = &patch["data"];
    assert_eq!(
        data["resource.customizations.health.work.open-cluster-management.io_ManifestWork"],
        MANIFESTWORK_HEALTH_LUA
    );
    assert_eq!(
        data["resource.customizations.health.work.open-cluster-management.io_ManifestWorkReplicaSet"],
        MANIFESTWORKREPLICASET_HEALTH_LUA
    );
}
