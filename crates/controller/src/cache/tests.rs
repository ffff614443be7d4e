use super::*;
use argocd_pull_api::argocd::Application;
use argocd_pull_domain::{WorkOptions, application_identifier, desired_work, spec_digest};
use serde_json::json;

fn work_json() -> serde_json::Value {
    let app: Application = serde_json::from_value(json!({
        "metadata": {"name": "app1", "namespace": "argocd", "uid": "abcdef-1",
            "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
            "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "c1"}},
        "spec": {"project": "default", "destination": {"namespace": "guestbook"}}
    }))
    .unwrap();
    let work = desired_work(&app, &WorkOptions::default()).unwrap();
    let mut v = serde_json::to_value(&work).unwrap();
    v["metadata"]["uid"] = json!("w-uid");
    v["metadata"]["resourceVersion"] = json!("7");
    v["metadata"]["generation"] = json!(1);
    v["metadata"]["managedFields"] = json!([{"manager": "x", "fieldsV1": {"f:spec": {}}}]);
    v["status"] = json!({
        "conditions": [{"type": "Applied", "status": "True", "reason": "x", "message": "m",
            "lastTransitionTime": "2024-01-01T00:00:00Z"}],
        "resourceStatus": {"manifests": [{
            "resourceMeta": {"ordinal": 0, "group": "argoproj.io", "version": "v1alpha1",
                "kind": "Application", "resource": "applications", "name": "app1", "namespace": "argocd"},
            "statusFeedback": {"values": [
                {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Healthy"}},
                {"name": "syncStatus", "fieldValue": {"type": "String", "string": "Synced"}}]},
            "conditions": [{"type": "Available", "status": "True", "reason": "x", "message": "m",
                "lastTransitionTime": "2024-01-01T00:00:00Z"}]
        }]}
    });
    v
}

#[test]
fn projection_keeps_what_the_rules_read() {
    let v = work_json();
    let full: ManifestWork = serde_json::from_value(v.clone()).unwrap();
    let lite: WorkLite = serde_json::from_value(v).unwrap();
    // decoding the wire form and projecting a typed work agree
    assert_eq!(lite, WorkLite::from_work(&full));
    assert_eq!(lite.metadata.name, full.metadata.name);
    assert_eq!(lite.metadata.labels, full.metadata.labels);
    assert_eq!(lite.metadata.annotations, full.metadata.annotations);
    assert_eq!(lite.metadata.resource_version.as_deref(), Some("7"));
    assert_eq!(lite.metadata.managed_fields, None);
    assert_eq!(lite.spec_digest, spec_digest(&full.spec));
    let id = application_identifier(&full, "app1").unwrap();
    assert_eq!(lite.application_identifier("app1"), Some(id.clone()));
    assert_eq!(
        lite.feedback_for(&id),
        FeedbackValues::from_work(&full, &id)
    );
    assert_eq!(lite.feedback_for(&id).health(), Some("Healthy"));
    assert!(lite.has_feedback());
}

#[test]
fn the_projection_of_our_create_equals_the_decoded_one() {
    let mut v = work_json();
    v.as_object_mut().unwrap().remove("status");
    let full: ManifestWork = serde_json::from_value(v.clone()).unwrap();
    let answer: MetaOnly = serde_json::from_value(v.clone()).unwrap();
    let created = WorkLite::created(answer, &full, spec_digest(&full.spec));
    assert_eq!(created, serde_json::from_value::<WorkLite>(v).unwrap());
}

#[test]
fn the_version_we_wrote_is_not_parsed_again() {
    let v = work_json();
    let ours: WorkLite = serde_json::from_value(v.clone()).unwrap();
    // the same uid and resourceVersion with a spec that would not even parse: taken over
    let mut wire = v.clone();
    wire["spec"] = json!({"workload": 5});
    let wire: WorkWire = serde_json::from_value(wire).unwrap();
    let spec = wire.spec_of(Some(&ours)).unwrap();
    assert_eq!(wire.clone().with_spec(spec), ours);
    // any other version is parsed
    let mut newer = ours.clone();
    newer.metadata.resource_version = Some("6".into());
    assert!(wire.spec_of(Some(&newer)).is_err());
    assert!(wire.spec_of(None).is_err());
    let mut other_uid = ours.clone();
    other_uid.metadata.uid = Some("other".into());
    assert!(wire.spec_of(Some(&other_uid)).is_err());
}

#[test]
fn a_work_without_status_has_no_feedback() {
    let mut v = work_json();
    v.as_object_mut().unwrap().remove("status");
    let lite: WorkLite = serde_json::from_value(v).unwrap();
    assert!(!lite.has_feedback());
    assert_eq!(
        lite.feedback_for(&lite.application_identifier("app1").unwrap()),
        FeedbackValues::default()
    );
}

#[test]
fn the_compact_application_parses_back_to_the_typed_one() {
    let v = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u1", "resourceVersion": "3",
            "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
            "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "c1",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "managedFields": [{"manager": "x"}]},
        "spec": {"project": "default", "destination": {"server": "https://s", "namespace": "g"},
            "source": {"repoURL": "https://r", "path": "p", "helm": {"values": "a: 1"}},
            "syncPolicy": {"automated": {"prune": true}}},
        "operation": {"sync": {"revision": "r"}},
        "status": {"health": {"status": "Healthy", "message": "m"}, "resources": [{"kind": "Pod"}]}
    });
    let lite: AppLite = serde_json::from_value(v.clone()).unwrap();
    let typed: Application = serde_json::from_value(v).unwrap();
    let expected = AppLite::from(typed.clone()).to_application().unwrap();
    let back = lite.to_application().unwrap();
    assert_eq!(back, expected);
    assert_eq!(back.spec, typed.spec);
    assert_eq!(back.operation, typed.operation);
    assert_eq!(back.metadata.managed_fields, None);
    assert_eq!(back.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
    assert_eq!(lite.health_status(), Some("Healthy"));
    assert_eq!(back.status.unwrap().resources, None);
}

#[test]
fn an_application_without_spec_or_operation_parses_to_the_defaults() {
    let v = json!({"metadata": {"name": "a", "namespace": "argocd"}});
    let lite: AppLite = serde_json::from_value(v.clone()).unwrap();
    let typed: Application = serde_json::from_value(v).unwrap();
    assert_eq!(lite.to_application().unwrap(), typed);
    assert_eq!(lite.operation_json(), None);
}

#[test]
fn compact_application_status_keeps_the_compared_fields() {
    let app: Application = serde_json::from_value(json!({
        "metadata": {"name": "a", "namespace": "argocd"},
        "status": {"health": {"status": "Healthy", "message": "m"},
            "sync": {"status": "Synced", "revision": "r1", "comparedTo": {"x": 1}},
            "operationState": {"phase": "Running", "startedAt": "t", "message": "m",
                "operation": {"sync": {"revision": "r"}}},
            "resources": [{"kind": "Pod", "name": "p"}],
            "history": [{"id": 1}]}
    }))
    .unwrap();
    let app = AppLite::from(app);
    assert_eq!(
        serde_json::to_value(app.status.unwrap()).unwrap(),
        json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "r1"},
            "operationState": {"phase": "Running", "startedAt": "t", "operation": {}}})
    );
}
