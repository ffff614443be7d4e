//! Tests of the desired work built from an Application (names, payload, destination, feedback
//! rules, ACM extras) and the fixtures shared with `compare`.

use super::*;
use serde_json::json;

mod compare;

fn app(v: Value) -> Application {
    serde_json::from_value(v).unwrap()
}

fn base() -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {
            "name": "app1",
            "namespace": "argocd",
            "uid": "abcdefghijk",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            "labels": {LABEL_PULL_TO_OCM: "true", "team": "a"},
            "annotations": {
                ANNOTATION_OCM_MANAGED_CLUSTER: "cluster1",
                ANNOTATION_SKIP_RECONCILE: "true",
                ANNOTATION_LAST_APPLIED: "{\"leak\": true}",
                "note": "kept"
            },
            "finalizers": ["resources-finalizer.argocd.argoproj.io"]
        },
        "spec": {
            "project": "default",
            "destination": {"server": "https://hub.example:6443", "namespace": "guestbook"},
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook"},
            "syncPolicy": {"automated": {"prune": true}}
        },
        "status": {"health": {"status": "Healthy"}}
    })
}

#[test]
fn work_name_table() {
    for (name, uid, want) in [
        ("app1", "abcdefghijk", "app1-abcde"),
        ("app1", "abc", "app1-abc"),
        ("x", "0123456789", "x-01234"),
    ] {
        assert_eq!(work_name(name, uid), want);
    }
}

#[test]
fn payload_namespace_precedence() {
    let cases = [
        (Some("spoke-ns"), Some("hub-ns"), "spoke-ns"),
        (Some(""), Some("hub-ns"), "hub-ns"),
        (None, Some("hub-ns"), "hub-ns"),
        (None, None, "argocd"),
        (Some(""), Some(""), "argocd"),
    ];
    for (annotation, namespace, want) in cases {
        let mut a = app(base());
        a.metadata.namespace = namespace.map(Into::into);
        if let Some(ns) = annotation {
            a.metadata.annotations.as_mut().unwrap().insert(
                ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE.into(),
                ns.into(),
            );
        }
        assert_eq!(payload_namespace(&a), want, "{annotation:?} {namespace:?}");
    }
}

#[test]
fn desired_work_shape() {
    let w = desired_work(&app(base()), &WorkOptions::default()).unwrap();
    let got = serde_json::to_value(&w).unwrap();
    let want = json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": "app1-abcde",
            "namespace": "cluster1",
            "labels": {LABEL_PULL_TO_OCM: "true"},
            "annotations": {
                ANNOTATION_HUB_APPLICATION_NAME: "app1",
                ANNOTATION_HUB_APPLICATION_NAMESPACE: "argocd"
            }
        },
        "spec": {
            "workload": {"manifests": [{
                "apiVersion": "argoproj.io/v1alpha1",
                "kind": "Application",
                "metadata": {
                    "name": "app1",
                    "namespace": "argocd",
                    "labels": {"team": "a"},
                    "annotations": {"note": "kept"},
                    "finalizers": ["resources-finalizer.argocd.argoproj.io"]
                },
                "spec": {
                    "destination": {"server": IN_CLUSTER_SERVER, "name": "", "namespace": "guestbook"},
                    "project": "default",
                    "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook"},
                    "syncPolicy": {"automated": {"prune": true}}
                }
            }]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "argoproj.io", "resource": "applications", "namespace": "argocd", "name": "app1"},
                "feedbackRules": [{"type": "JSONPaths", "jsonPaths": [
                    {"name": "healthStatus", "path": ".status.health.status"},
                    {"name": "syncStatus", "path": ".status.sync.status"},
                    {"name": "operationStateStartedAt", "path": ".status.operationState.startedAt"},
                    {"name": "operationStatePhase", "path": ".status.operationState.phase"},
                    {"name": "syncRevision", "path": ".status.sync.revision"}
                ]}],
                "updateStrategy": {"type": "ServerSideApply", "serverSideApply": {
                    "force": true,
                    "fieldManager": "work-agent",
                    "ignoreFields": [{"condition": "OnSpokeChange", "jsonPaths": [
                        ".operation",
                        ".metadata.annotations[\"argocd.argoproj.io/refresh\"]"
                    ]}]
                }},
                "feedbackScrapeType": "Poll"
            }]
        }
    });
    assert_eq!(got, want);
}

#[test]
fn appset_owned_application() {
    let mut v = base();
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "guestbook-set", "uid": "u1"
    }]);
    let w = desired_work(&app(v), &WorkOptions::default()).unwrap();
    let labels = w.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_APPLICATION_SET], "true");
    assert_eq!(
        labels[LABEL_APPLICATION_SET_HASH],
        appset_hash("argocd", "guestbook-set")
    );
    assert_eq!(
        w.metadata.annotations.as_ref().unwrap()[HOSTING_APPLICATIONSET],
        "argocd/guestbook-set"
    );
    let payload = &w.spec.workload.manifests[0];
    assert_eq!(
        payload["metadata"]["labels"],
        json!({LABEL_APPLICATION_SET: "true", "team": "a"})
    );
    assert_eq!(
        payload["metadata"]["annotations"],
        json!({HOSTING_APPLICATIONSET: "argocd/guestbook-set", "note": "kept"})
    );
    assert!(payload["metadata"].get("ownerReferences").is_none());
}

#[test]
fn appset_hash_is_sha1_of_namespace_and_name() {
    // sha1("argocd/guestbook-set")
    assert_eq!(appset_hash("argocd", "guestbook-set").len(), 40);
    assert_eq!(
        appset_hash("a", "b"),
        "3ec69c85a4ff96830024afeef2d4e512181c8f7b"
    );
    assert_ne!(appset_hash("a", "b"), appset_hash("a", "c"));
}

#[test]
fn payload_drops_server_fields_and_status() {
    let p = payload(&app(base()));
    let meta = p["metadata"].as_object().unwrap();
    let keys: Vec<&str> = meta.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["name", "namespace", "labels", "annotations", "finalizers"]
    );
    let top: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(top, ["apiVersion", "kind", "metadata", "spec"]);
}

#[test]
fn payload_annotation_filtering_table() {
    let stripped = [
        ANNOTATION_OCM_MANAGED_CLUSTER,
        ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE,
        ANNOTATION_SKIP_RECONCILE,
        ANNOTATION_DESTINATION_NAME,
        ANNOTATION_DESTINATION_SERVER,
        ANNOTATION_LAST_APPLIED,
    ];
    for key in stripped {
        let mut v = base();
        v["metadata"]["annotations"][key] = json!("x");
        let p = payload(&app(v));
        assert!(
            p["metadata"]["annotations"].get(key).is_none(),
            "{key} leaked"
        );
    }
    for key in [
        ANNOTATION_REFRESH,
        "example.com/other",
        HOSTING_APPLICATIONSET,
    ] {
        let mut v = base();
        v["metadata"]["annotations"][key] = json!("x");
        let p = payload(&app(v));
        assert_eq!(p["metadata"]["annotations"][key], "x", "{key} dropped");
    }
    // the pull label is the only label removed
    let p = payload(&app(base()));
    assert_eq!(p["metadata"]["labels"], json!({"team": "a"}));
}

#[test]
fn payload_without_labels_annotations_or_finalizers_omits_them() {
    let a = app(json!({
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u",
            "labels": {LABEL_PULL_TO_OCM: "true"},
            "annotations": {ANNOTATION_OCM_MANAGED_CLUSTER: "c"}},
        "spec": {}
    }));
    let p = payload(&a);
    assert_eq!(p["metadata"], json!({"name": "a", "namespace": "argocd"}));
}

#[test]
fn destination_rewrite_table() {
    let cases = [
        (None, None, json!({"name": "", "server": IN_CLUSTER_SERVER})),
        (Some("spoke"), None, json!({"name": "spoke", "server": ""})),
        (
            None,
            Some("https://x:6443"),
            json!({"name": "", "server": "https://x:6443"}),
        ),
        (
            Some("spoke"),
            Some("https://x:6443"),
            json!({"name": "spoke", "server": "https://x:6443"}),
        ),
        (
            Some(""),
            Some(""),
            json!({"name": "", "server": IN_CLUSTER_SERVER}),
        ),
    ];
    for (name, server, want) in cases {
        let mut v = base();
        v["spec"]["destination"]["name"] = json!("hub-name");
        if let Some(n) = name {
            v["metadata"]["annotations"][ANNOTATION_DESTINATION_NAME] = json!(n);
        }
        if let Some(s) = server {
            v["metadata"]["annotations"][ANNOTATION_DESTINATION_SERVER] = json!(s);
        }
        let a = app(v);
        let p = payload(&a);
        let d = &p["spec"]["destination"];
        assert_eq!(d["name"], want["name"], "{name:?} {server:?}");
        assert_eq!(d["server"], want["server"], "{name:?} {server:?}");
        assert_eq!(d["namespace"], "guestbook");
        // the hub object is never modified
        assert_eq!(
            a.spec.destination.server.as_deref(),
            Some("https://hub.example:6443")
        );
        assert_eq!(a.spec.destination.name.as_deref(), Some("hub-name"));
    }
}

#[test]
fn operation_is_copied() {
    let mut v = base();
    v["operation"] = json!({"sync": {"revision": "HEAD"}, "initiatedBy": {"username": "me"}});
    let p = payload(&app(v));
    assert_eq!(
        p["operation"],
        json!({"sync": {"revision": "HEAD"}, "initiatedBy": {"username": "me"}})
    );
}

#[test]
fn errors_name_what_is_missing() {
    let mut v = base();
    v["metadata"]["labels"][LABEL_PULL_TO_OCM] = json!("false");
    assert_eq!(
        desired_work(&app(v), &WorkOptions::default()).unwrap_err(),
        WorkError::NotSelected
    );
    let mut v = base();
    v["metadata"].as_object_mut().unwrap().remove("uid");
    let err = desired_work(&app(v), &WorkOptions::default()).unwrap_err();
    assert_eq!(err, WorkError::MissingUid("app1".into()));
    assert!(err.to_string().contains("metadata.uid"));
}

#[test]
fn appset_feedback_rules_are_appended_to_appset_owned_works_only() {
    let opts = WorkOptions {
        appset_feedback: vec![
            JsonPath {
                name: "conditions".into(),
                path: ".status.conditions".into(),
                version: None,
            },
            JsonPath {
                name: "healthStatus".into(),
                path: ".bogus".into(),
                version: None,
            },
        ],
        ..Default::default()
    };
    let defaults = [
        "healthStatus",
        "syncStatus",
        "operationStateStartedAt",
        "operationStatePhase",
        "syncRevision",
    ];
    let names_of = |w: &ManifestWork| -> Vec<String> {
        w.spec.manifest_configs[0].feedback_rules[0]
            .json_paths
            .iter()
            .map(|p| p.name.clone())
            .collect()
    };

    // Not owned by an ApplicationSet: the report never reads the work, so the five defaults only.
    let plain = desired_work(&app(base()), &opts).unwrap();
    assert_eq!(names_of(&plain), defaults);
    assert_eq!(
        plain.spec,
        desired_work(&app(base()), &WorkOptions::default())
            .unwrap()
            .spec
    );

    let mut v = base();
    v["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "guestbook-set", "uid": "u1"
    }]);
    let owned = desired_work(&app(v), &opts).unwrap();
    let mut want = defaults.map(String::from).to_vec();
    want.push("conditions".into());
    assert_eq!(names_of(&owned), want);
    let paths = &owned.spec.manifest_configs[0].feedback_rules[0].json_paths;
    assert_eq!(paths[0].path, ".status.health.status");
}

#[test]
fn acm_extras() {
    let opts = WorkOptions {
        acm_extras: true,
        ..Default::default()
    };
    let w = desired_work(&app(base()), &opts).unwrap();
    let kinds: Vec<&str> = w
        .spec
        .workload
        .manifests
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Namespace", "AppProject", "Application"]);
    assert_eq!(
        w.spec.workload.manifests[0]["metadata"]["name"],
        "guestbook"
    );
    assert_eq!(
        w.spec.workload.manifests[1]["metadata"],
        json!({"name": "default", "namespace": "argocd"})
    );
    let delete = serde_json::to_value(w.spec.delete_option.as_ref().unwrap()).unwrap();
    assert_eq!(
        delete,
        json!({
            "propagationPolicy": "SelectivelyOrphan",
            "selectivelyOrphans": {"orphaningRules": [
                {"resource": "namespaces", "name": "guestbook"},
                {"group": "argoproj.io", "resource": "appprojects", "namespace": "argocd", "name": "default"}
            ]}
        })
    );
    // the feedback still targets the Application
    assert_eq!(w.spec.manifest_configs.len(), 1);
    assert_eq!(
        w.spec.manifest_configs[0].resource_identifier.resource,
        "applications"
    );
}
