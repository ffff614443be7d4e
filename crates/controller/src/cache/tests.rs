use super::*;
use argocd_pull_api::argocd::Application;
use argocd_pull_domain::MetaView;
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
    // labels and annotations apart from the metadata, the same entries
    assert_eq!(lite.labels().map(Pairs::to_map), full.metadata.labels);
    assert_eq!(
        lite.annotations().map(Pairs::to_map),
        full.metadata.annotations
    );
    assert_eq!(lite.metadata.labels, None);
    assert_eq!(lite.metadata.annotations, None);
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

/// Labels and annotations of every shape: absent, empty, several (with the last-applied
/// annotation, which the caches drop).
fn tag_cases() -> Vec<(serde_json::Value, serde_json::Value)> {
    let absent = serde_json::Value::Null;
    let labels = json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true",
        "team": "a", "app.kubernetes.io/part-of": ""});
    let annotations = json!({"apps.open-cluster-management.io/ocm-managed-cluster": "c1",
        "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
        "argocd.argoproj.io/refresh": "hard", "note": "ü ∞ \" \\n", "": "empty key"});
    vec![
        (absent.clone(), absent.clone()),
        (json!({}), json!({})),
        (json!({}), absent.clone()),
        (absent.clone(), json!({})),
        (labels.clone(), absent.clone()),
        (absent, annotations.clone()),
        (labels, annotations),
        (
            json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"}),
            json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"}),
        ),
    ]
}

fn with_tags(
    mut v: serde_json::Value,
    labels: &serde_json::Value,
    annotations: &serde_json::Value,
) -> serde_json::Value {
    for (field, value) in [("labels", labels), ("annotations", annotations)] {
        let meta = v["metadata"].as_object_mut().unwrap();
        if value.is_null() {
            meta.remove(field);
        } else {
            meta.insert(field.into(), value.clone());
        }
    }
    v
}

/// `meta` as the caches keep it: no managedFields, no last-applied annotation.
fn stripped(mut meta: ObjectMeta) -> ObjectMeta {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(ANNOTATION_LAST_APPLIED);
    }
    meta
}

#[test]
fn a_cached_application_gives_back_its_labels_and_annotations_exactly() {
    let base = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u1", "resourceVersion": "3",
            "managedFields": [{"manager": "x"}]},
        "spec": {"project": "default"}});
    for (labels, annotations) in tag_cases() {
        let v = with_tags(base.clone(), &labels, &annotations);
        let typed: Application = serde_json::from_value(v.clone()).unwrap();
        let lite: AppLite = serde_json::from_value(v).unwrap();
        let from_typed = AppLite::from(typed.clone());
        assert_eq!(
            (&lite.metadata, &lite.tags),
            (&from_typed.metadata, &from_typed.tags),
            "{labels} {annotations}"
        );
        assert_eq!(
            (&lite.metadata.labels, &lite.metadata.annotations),
            (&None, &None)
        );
        let back = lite.to_application().unwrap();
        // absent stays absent, empty stays empty
        assert_eq!(
            back.metadata,
            stripped(typed.metadata.clone()),
            "{labels} {annotations}"
        );
        for (k, v) in typed.metadata.labels.iter().flatten() {
            assert_eq!(lite.label(k), Some(v.as_str()));
        }
        for (k, v) in back.metadata.annotations.iter().flatten() {
            assert_eq!(lite.annotation(k), Some(v.as_str()));
        }
        assert_eq!(lite.annotation(ANNOTATION_LAST_APPLIED), None);
        assert_eq!(lite.label("absent"), None);
    }
}

#[test]
fn a_cached_work_keeps_its_labels_and_annotations_exactly() {
    for (labels, annotations) in tag_cases() {
        let v = with_tags(work_json(), &labels, &annotations);
        let full: ManifestWork = serde_json::from_value(v.clone()).unwrap();
        let lite: WorkLite = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(lite, WorkLite::from_work(&full), "{labels} {annotations}");
        let want = stripped(full.metadata.clone());
        assert_eq!(lite.labels().map(Pairs::to_map), want.labels);
        assert_eq!(lite.annotations().map(Pairs::to_map), want.annotations);
        assert_eq!(
            (&lite.metadata.labels, &lite.metadata.annotations),
            (&None, &None)
        );
        // the answer to our create: the same
        let answer: MetaOnly = serde_json::from_value(v).unwrap();
        let created = WorkLite::created(answer, &full, lite.spec_digest);
        assert_eq!(created.tags, lite.tags);
    }
}

/// The work propagation builds from the cached Application is, byte for byte, the one built from
/// the Application as the API server sent it.
#[test]
fn the_work_built_from_the_cached_application_is_the_same() {
    let base = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "a", "namespace": "argocd", "uid": "u1abcdef", "resourceVersion": "3",
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                "name": "set", "uid": "s1"}],
            "managedFields": [{"manager": "x"}]},
        "spec": {"project": "default", "destination": {"server": "https://s", "namespace": "g"},
            "source": {"repoURL": "https://r", "path": "p"}},
        "operation": {"sync": {"revision": "r"}}});
    let selected = json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"});
    let mut cases = tag_cases();
    cases.push((
        json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true", "x": "1"}),
        json!({"apps.open-cluster-management.io/ocm-managed-cluster": "c1",
            "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace": "other",
            "apps.open-cluster-management.io/destination-name": "in-cluster",
            "argocd.argoproj.io/skip-reconcile": "true", "a": "b"}),
    ));
    let opts = WorkOptions {
        acm_extras: true,
        ..Default::default()
    };
    let mut built = 0;
    for (mut labels, mut annotations) in cases {
        // selected when both maps are there, whatever else they have
        if labels.is_object() && annotations.is_object() {
            labels
                .as_object_mut()
                .unwrap()
                .extend(selected.as_object().unwrap().clone());
            annotations
                .as_object_mut()
                .unwrap()
                .entry("apps.open-cluster-management.io/ocm-managed-cluster")
                .or_insert(json!("c1"));
        }
        let v = with_tags(base.clone(), &labels, &annotations);
        let typed: Application = serde_json::from_value(v.clone()).unwrap();
        let lite: AppLite = serde_json::from_value(v).unwrap();
        let from_lite = desired_work(&lite.to_application().unwrap(), &opts);
        let from_typed = desired_work(&typed, &opts);
        match (from_lite, from_typed) {
            (Ok(l), Ok(t)) => {
                assert_eq!(
                    serde_json::to_vec(&l).unwrap(),
                    serde_json::to_vec(&t).unwrap(),
                    "{labels} {annotations}"
                );
                built += 1;
            }
            (l, t) => assert_eq!(l.err(), t.err(), "{labels} {annotations}"),
        }
    }
    assert_eq!(built, 4, "the selected cases build a work");
}

/// The rules decide on the projections as on the typed objects.
#[test]
fn the_rules_read_the_projections_as_the_typed_objects() {
    use argocd_pull_domain::{
        hub_app_ref, hub_app_ref_of, is_orphan, is_orphan_of, selected_cluster,
        selected_cluster_of, work_metadata_differs,
    };
    let app_json = json!({"metadata": {"name": "app1", "namespace": "argocd", "uid": "abcdef-1"},
        "spec": {"project": "default"}});
    let desired = serde_json::from_value::<ManifestWork>(work_json()).unwrap();
    let selected = [
        json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"}),
        json!({"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "false"}),
    ];
    let clusters = [
        json!({"apps.open-cluster-management.io/ocm-managed-cluster": "c1"}),
        json!({"apps.open-cluster-management.io/ocm-managed-cluster": "c2"}),
        json!({"apps.open-cluster-management.io/hub-application-name": "other"}),
    ];
    let mut outcomes = std::collections::BTreeSet::new();
    let mut cases = tag_cases();
    for l in &selected {
        for a in &clusters {
            cases.push((l.clone(), a.clone()));
        }
    }
    for (labels, annotations) in &cases {
        let v = with_tags(app_json.clone(), labels, annotations);
        let (app, app_lite): (Application, AppLite) = (
            serde_json::from_value(v.clone()).unwrap(),
            serde_json::from_value(v).unwrap(),
        );
        assert_eq!(selected_cluster_of(&app_lite), selected_cluster(&app));
        for (wl, wa) in &cases {
            let mut v = work_json();
            v["metadata"]["namespace"] = json!("c1");
            v["metadata"]["name"] = json!("app1-abcde");
            for (field, add) in [("labels", wl), ("annotations", wa)] {
                for (k, x) in add.as_object().into_iter().flatten() {
                    v["metadata"][field][k] = x.clone();
                }
            }
            let work: ManifestWork = serde_json::from_value(v.clone()).unwrap();
            let lite: WorkLite = serde_json::from_value(v).unwrap();
            let case = format!("{labels} {annotations} / {wl} {wa}");
            assert_eq!(hub_app_ref_of(&lite), hub_app_ref(&work), "{case}");
            outcomes.insert((
                selected_cluster(&app).map(str::to_owned),
                hub_app_ref(&work).is_some(),
                is_orphan(&work, Some(&app)),
            ));
            assert_eq!(
                is_orphan_of(&lite, Some(&app_lite)),
                is_orphan(&work, Some(&app)),
                "{case}"
            );
            assert_eq!(
                is_orphan_of(&lite, None::<&AppLite>),
                is_orphan(&work, None),
                "{case}"
            );
            assert_eq!(
                work_metadata_differs(&lite, &desired.metadata),
                work_metadata_differs(&work, &desired.metadata),
                "{case}"
            );
        }
    }
    // the cases reach every outcome: not selected, another cluster, ours, not ours, orphaned
    let outcomes: Vec<_> = outcomes.into_iter().collect();
    assert_eq!(
        outcomes,
        [
            (None, false, false),
            (None, true, true),
            (Some("c1".into()), false, false),
            (Some("c1".into()), true, false),
            (Some("c2".into()), false, false),
            (Some("c2".into()), true, true),
        ]
    );
}
