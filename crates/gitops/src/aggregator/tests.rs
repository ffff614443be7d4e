//! Unit tests of the aggregator: the compact work view and the stored-report digest.

use argocd_pull_api::names;
use argocd_pull_api::ocm::work::ManifestWork;
use serde_json::json;

use super::index::{Decision, Index};
use super::work_view::WorkView;
use crate::report::{self, AppSetKey};

fn full_work() -> serde_json::Value {
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {
            "name": "c1-gb-abcde", "namespace": "c1", "resourceVersion": "42", "uid": "u",
            "labels": {names::LABEL_APPLICATION_SET: "true", "other": "x"},
            "annotations": {
                names::HOSTING_APPLICATIONSET: "argocd/gb",
                names::ANNOTATION_HUB_APPLICATION_NAME: "c1-gb",
                "kubectl.kubernetes.io/last-applied-configuration": "{\"huge\": true}",
            },
            "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:workload": {}}}}],
        },
        "spec": {"workload": {"manifests": [{"apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application", "metadata": {"name": "c1-gb"}, "spec": {"project": "default"}}]}},
        "status": {
            "conditions": [{"type": "Applied", "status": "True", "reason": "r", "message": "m",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "resourceStatus": {"manifests": [
                {"resourceMeta": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap",
                    "resource": "configmaps", "name": "cm", "namespace": "argocd"},
                 "statusFeedback": {"values": [{"name": "healthStatus",
                    "fieldValue": {"type": "String", "string": "Wrong"}}]}},
                {"resourceMeta": {"ordinal": 1, "group": "argoproj.io", "version": "v1alpha1",
                    "kind": "Application", "resource": "applications", "name": "c1-gb", "namespace": "argocd"},
                 "statusFeedback": {"values": [
                    {"name": "healthStatus", "fieldValue": {"type": "String", "string": "Degraded"}},
                    {"name": "condition.SyncError", "fieldValue": {"type": "String", "string": "boom"}},
                    {"name": "resources.kind", "fieldValue": {"type": "JsonRaw", "jsonRaw": "[\"Service\"]"}},
                    {"name": "resources.name", "fieldValue": {"type": "JsonRaw", "jsonRaw": "[\"gb\"]"}}]},
                 "conditions": []}]}
        }
    })
}

#[test]
fn compact_work_view_yields_the_same_report_entry_as_the_full_work() {
    let doc = full_work();
    let full: ManifestWork = serde_json::from_value(doc.clone()).unwrap();
    let view: WorkView = serde_json::from_slice(&serde_json::to_vec(&doc).unwrap()).unwrap();
    let appset = report::work_appset(&view.metadata).unwrap();
    assert_eq!(appset, report::work_appset(&full.metadata).unwrap());
    let entry = report::work_entry(&appset, &view.metadata, view.status.as_ref());
    assert_eq!(
        entry,
        report::work_entry(&appset, &full.metadata, full.status.as_ref())
    );
    assert_eq!(entry.condition.health_status, "Degraded");
    assert_eq!(entry.condition.conditions.len(), 1);
    assert_eq!(entry.resources.len(), 1);
    // What the watcher needs, and nothing the report does not use.
    assert_eq!(view.metadata.resource_version.as_deref(), Some("42"));
    assert_eq!(view.metadata.annotations.as_ref().unwrap().len(), 2);
    assert_eq!(view.metadata.labels.as_ref().unwrap().len(), 1);
    assert!(view.metadata.managed_fields.is_none());
}

#[test]
fn compact_work_view_of_a_bare_work() {
    let view: WorkView = serde_json::from_value(json!({"metadata": {"name": "w", "namespace": "c",
            "labels": null, "deletionTimestamp": "2026-01-01T00:00:00Z"}}))
    .unwrap();
    assert_eq!(view.metadata.labels, None);
    assert!(view.metadata.deletion_timestamp.is_some());
    assert!(report::application_feedback(view.status.as_ref()).is_empty());
}

#[test]
fn stored_report_digest_detects_any_change() {
    let mut index = Index::default();
    let meta = full_work()["metadata"].clone();
    let view: WorkView = serde_json::from_value(json!({"metadata": meta})).unwrap();
    index.apply_work(&view.metadata, None);
    let k = AppSetKey::parse("argocd/gb").unwrap();
    let desired = index.desired(&k);
    let first = index.flush(false);
    assert!(matches!(first.as_slice(), [Decision::Write(..)]));
    // Stored as written: nothing to do.
    index.set_report(&desired);
    index.mark_all();
    assert!(index.flush(false).is_empty());
    // Stored report differs (someone edited it, or the label): rewritten.
    let mut edited = desired.clone();
    edited.statuses.as_mut().unwrap().cluster_conditions[0].sync_status = "Synced".into();
    index.set_report(&edited);
    index.mark_all();
    assert!(matches!(
        index.flush(false).as_slice(),
        [Decision::Write(..)]
    ));
    let mut relabelled = desired.clone();
    relabelled.metadata.labels = None;
    index.set_report(&relabelled);
    index.mark_all();
    assert!(matches!(
        index.flush(false).as_slice(),
        [Decision::Write(..)]
    ));
}
