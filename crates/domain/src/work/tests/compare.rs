//! Tests of comparing a stored work with the desired one: [`work_differs`], the spec digests a
//! cache compares instead, and the update patch.

use super::*;

fn stored(mut desired: ManifestWork) -> ManifestWork {
    desired.metadata.resource_version = Some("7".into());
    desired.metadata.uid = Some("w-uid".into());
    desired.metadata.generation = Some(1);
    desired
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("other.io/x".into(), "y".into());
    desired
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("other.io/a".into(), "b".into());
    desired.status = Some(Default::default());
    desired
}

/// The digest-based comparison (what a cache of work projections uses) decides like
/// [`work_differs`] on the full objects.
fn assert_digest_agrees(existing: &ManifestWork, desired: &ManifestWork, name: &str) {
    let by_digest = spec_digest(&existing.spec) != normalized_spec_digest(&desired.spec)
        || work_metadata_differs(existing, &desired.metadata);
    assert_eq!(by_digest, work_differs(existing, desired), "{name}");
}

#[test]
fn identical_work_does_not_differ() {
    let d = desired_work(&app(base()), &WorkOptions::default()).unwrap();
    let existing = stored(d.clone());
    assert!(!work_differs(&existing, &d));
    assert_digest_agrees(&existing, &d, "identical");
    assert_eq!(spec_digest(&existing.spec), spec_digest(&d.spec));
    assert_eq!(work_update_patch(&existing, &d), None);
}

#[test]
fn work_written_without_crd_defaults_does_not_differ() {
    // e.g. made by the Go controller on an API server that did not apply schema defaults
    let d = desired_work(&app(base()), &WorkOptions::default()).unwrap();
    let mut existing = stored(d.clone());
    let cfg = &mut existing.spec.manifest_configs[0];
    cfg.feedback_scrape_type = None;
    cfg.update_strategy
        .as_mut()
        .unwrap()
        .server_side_apply
        .as_mut()
        .unwrap()
        .field_manager = None;
    assert!(!work_differs(&existing, &d));
    assert_digest_agrees(&existing, &d, "without CRD defaults");
}

#[test]
fn differences_table() {
    let d = desired_work(&app(base()), &WorkOptions::default()).unwrap();
    type Mutate = fn(&mut ManifestWork);
    let cases: Vec<(&str, Mutate, Value)> = vec![
        (
            "label missing",
            |w| {
                w.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .remove(LABEL_PULL_TO_OCM);
            },
            json!({"metadata": {"labels": {LABEL_PULL_TO_OCM: "true"}}}),
        ),
        (
            "annotation changed",
            |w| {
                w.metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert(ANNOTATION_HUB_APPLICATION_NAME.into(), "x".into());
            },
            json!({"metadata": {"annotations": {ANNOTATION_HUB_APPLICATION_NAME: "app1"}}}),
        ),
        (
            "payload changed",
            |w| {
                w.spec.workload.manifests[0]["spec"]["project"] = json!("other");
            },
            json!({"spec": {"workload": {"manifests": [payload(&app(base()))]}}}),
        ),
        (
            "foreign delete option",
            |w| {
                w.spec.delete_option = Some(DeleteOption {
                    propagation_policy: Some("Orphan".into()),
                    ..Default::default()
                });
            },
            json!({"spec": {"deleteOption": null}}),
        ),
        (
            "refresh path lost (upstream HEAD)",
            |w| {
                w.spec.manifest_configs[0]
                    .update_strategy
                    .as_mut()
                    .unwrap()
                    .server_side_apply
                    .as_mut()
                    .unwrap()
                    .ignore_fields[0]
                    .json_paths
                    .pop();
            },
            json!({"spec": {"manifestConfigs": serde_json::to_value(&desired_work(&app(base()), &WorkOptions::default()).unwrap().spec.manifest_configs).unwrap()}}),
        ),
    ];
    for (name, mutate, want) in cases {
        let mut existing = stored(d.clone());
        mutate(&mut existing);
        assert!(work_differs(&existing, &d), "{name}");
        assert_digest_agrees(&existing, &d, name);
        assert_eq!(work_update_patch(&existing, &d), Some(want), "{name}");
    }
}

#[test]
fn payload_key_order_does_not_matter() {
    let d = desired_work(&app(base()), &WorkOptions::default()).unwrap();
    let mut existing = stored(d.clone());
    // as an API server might serialize it: keys sorted
    let sorted: Value = serde_json::from_str(
        &serde_json::to_string(
            &serde_json::from_value::<std::collections::BTreeMap<String, Value>>(
                existing.spec.workload.manifests[0].clone(),
            )
            .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    existing.spec.workload.manifests[0] = sorted;
    assert!(!work_differs(&existing, &d));
    assert_digest_agrees(&existing, &d, "key order");
    // a number of another representation, or an array in another order, is a change
    let mut reordered = stored(d.clone());
    reordered.spec.workload.manifests[0]["spec"]["x"] = json!([1, 2]);
    let mut other = stored(d.clone());
    other.spec.workload.manifests[0]["spec"]["x"] = json!([2, 1]);
    assert_ne!(spec_digest(&reordered.spec), spec_digest(&other.spec));
    other.spec.workload.manifests[0]["spec"]["x"] = json!([1.0, 2]);
    assert_ne!(spec_digest(&reordered.spec), spec_digest(&other.spec));
}

#[test]
fn payload_identifier_matches_by_name() {
    let d = desired_work(
        &app(base()),
        &WorkOptions {
            acm_extras: true,
            ..Default::default()
        },
    )
    .unwrap();
    let id = payload_identifier(&d, "app1").unwrap();
    assert_eq!(id, application_resource_identifier(&app(base())));
}

/// The digest is that of the canonical bytes fed to SHA-1 piece by piece (its first form), so
/// building them in one buffer changed no digest.
#[test]
fn the_digest_is_unchanged_by_buffering_the_canonical_form() {
    fn feed(v: &Value, h: &mut Sha1) {
        match v {
            Value::Null => h.update(b"n"),
            Value::Bool(b) => h.update(if *b { b"t" } else { b"f" }),
            Value::Number(n) => {
                let s = n.to_string();
                h.update(b"#");
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            Value::String(s) => {
                h.update(b"s");
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            Value::Array(a) => {
                h.update(b"[");
                h.update((a.len() as u64).to_le_bytes());
                for x in a {
                    feed(x, h);
                }
            }
            Value::Object(m) => {
                h.update(b"{");
                h.update((m.len() as u64).to_le_bytes());
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort_unstable();
                for k in keys {
                    h.update((k.len() as u64).to_le_bytes());
                    h.update(k.as_bytes());
                    feed(&m[k], h);
                }
            }
        }
    }
    let mut v = base();
    v["spec"]["x"] = json!([1, 2.5, null, true, {"b": 1, "a": [false]}]);
    let d = desired_work(&app(v), &WorkOptions::default()).unwrap();
    let mut h = Sha1::new();
    feed(&serde_json::to_value(&d.spec).unwrap(), &mut h);
    assert_eq!(
        normalized_spec_digest(&d.spec),
        SpecDigest(h.finalize().into())
    );
}
