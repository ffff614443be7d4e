use super::*;
use argocd_pull_api::ocm::work::{
    FieldValue, ManifestCondition, ManifestResourceMeta, ManifestResourceStatus,
    StatusFeedbackResult,
};

fn cc(cluster: &str, health: &str, sync: &str) -> ClusterCondition {
    ClusterCondition {
        cluster: cluster.into(),
        health_status: health.into(),
        sync_status: sync.into(),
        ..Default::default()
    }
}

fn summary(v: [u64; 6]) -> ReportSummary {
    let s = |i: usize| v[i].to_string();
    ReportSummary {
        clusters: s(0),
        synced: s(1),
        not_synced: s(2),
        healthy: s(3),
        not_healthy: s(4),
        in_progress: s(5),
    }
}

#[test]
fn summary_arithmetic_table() {
    // [clusters, synced, notSynced, healthy, notHealthy, inProgress]
    type Row<'a> = (Vec<(&'a str, &'a str)>, [u64; 6]);
    let table: Vec<Row> = vec![
        (vec![], [0, 0, 0, 0, 0, 0]),
        (vec![("Healthy", "Synced")], [1, 1, 0, 1, 0, 0]),
        (vec![("Progressing", "Synced")], [1, 1, 0, 0, 1, 1]),
        (vec![("Degraded", "OutOfSync")], [1, 0, 1, 0, 1, 0]),
        (vec![("Unknown", "Unknown")], [1, 0, 1, 0, 1, 0]),
        (vec![("Missing", "Synced")], [1, 1, 0, 0, 1, 0]),
        (vec![("Suspended", "Synced")], [1, 1, 0, 0, 1, 0]),
        (vec![("healthy", "synced")], [1, 0, 1, 0, 1, 0]),
        (
            vec![
                ("Healthy", "Synced"),
                ("Healthy", "OutOfSync"),
                ("Progressing", "OutOfSync"),
                ("Degraded", "Synced"),
                ("Unknown", "Unknown"),
            ],
            [5, 2, 3, 2, 3, 1],
        ),
    ];
    for (rows, expect) in table {
        let conds: Vec<_> = rows
            .iter()
            .enumerate()
            .map(|(i, (h, s))| cc(&format!("c{i}"), h, s))
            .collect();
        assert_eq!(summarize(&conds), summary(expect), "{rows:?}");
    }
}

fn fv(name: &str, value: FieldValue) -> FeedbackValue {
    FeedbackValue {
        name: name.into(),
        field_value: value,
    }
}

fn raw(json: &str) -> FieldValue {
    FieldValue {
        type_: "JsonRaw".into(),
        json_raw: Some(json.into()),
        ..Default::default()
    }
}

fn work_meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        labels: Some(BTreeMap::from([(
            names::LABEL_APPLICATION_SET.to_string(),
            "true".to_string(),
        )])),
        annotations: Some(BTreeMap::from([
            (
                names::HOSTING_APPLICATIONSET.to_string(),
                "argocd/guestbook".to_string(),
            ),
            (
                names::ANNOTATION_HUB_APPLICATION_NAME.to_string(),
                format!("{ns}-guestbook"),
            ),
            (
                names::ANNOTATION_HUB_APPLICATION_NAMESPACE.to_string(),
                "argocd".to_string(),
            ),
        ])),
        ..Default::default()
    }
}

fn status(values: Vec<FeedbackValue>) -> ManifestWorkStatus {
    ManifestWorkStatus {
        conditions: vec![],
        resource_status: Some(ManifestResourceStatus {
            manifests: vec![ManifestCondition {
                resource_meta: ManifestResourceMeta {
                    ordinal: 0,
                    group: "argoproj.io".into(),
                    version: "v1alpha1".into(),
                    kind: "Application".into(),
                    resource: "applications".into(),
                    name: "x".into(),
                    namespace: "argocd".into(),
                },
                status_feedback: Some(StatusFeedbackResult { values }),
                conditions: vec![],
            }],
        }),
    }
}

#[test]
fn entry_from_work_with_full_feedback() {
    let meta = work_meta("cluster1", "cluster1-guestbook-abcde");
    let appset = work_appset(&meta).unwrap();
    assert_eq!(appset.to_string(), "argocd/guestbook");
    let st = status(vec![
        fv(HEALTH_STATUS, FieldValue::string("Degraded")),
        fv(SYNC_STATUS, FieldValue::string("OutOfSync")),
        fv(OPERATION_STATE_PHASE, FieldValue::string("Failed")),
        fv(SYNC_REVISION, FieldValue::string("abc123")),
        fv(
            "condition.SyncError",
            FieldValue::string("one or more objects failed"),
        ),
        fv("condition.SharedResourceWarning", raw(r#"["w1","w2"]"#)),
        fv(
            RESOURCE_KINDS,
            raw(r#"["Service","Deployment","Pod","ClusterRole"]"#),
        ),
        fv(RESOURCE_NAMES, raw(r#"["gb","gb","gb-1","reader"]"#)),
        fv(RESOURCE_VERSIONS, raw(r#"["v1","v1","v1","v1"]"#)),
        fv(
            RESOURCE_GROUPS,
            raw(r#"["apps","rbac.authorization.k8s.io"]"#),
        ),
        fv(
            RESOURCE_NAMESPACES,
            raw(r#"["guestbook","guestbook","guestbook"]"#),
        ),
    ]);
    let e = work_entry(&appset, &meta, Some(&st));
    assert_eq!(
        e.condition,
        ClusterCondition {
            cluster: "cluster1".into(),
            app: "argocd/cluster1-guestbook/cluster1/cluster1-guestbook-abcde".into(),
            sync_status: "OutOfSync".into(),
            health_status: "Degraded".into(),
            operation_state_started_at: "Unknown".into(),
            operation_state_phase: "Failed".into(),
            sync_revision: "abc123".into(),
            conditions: vec![
                ReportCondition {
                    type_: "SyncError".into(),
                    message: "one or more objects failed".into()
                },
                ReportCondition {
                    type_: "SharedResourceWarning".into(),
                    message: "w1".into()
                },
                ReportCondition {
                    type_: "SharedResourceWarning".into(),
                    message: "w2".into()
                },
            ],
        }
    );
    let r = |api: &str, kind: &str, name: &str, ns: &str| ResourceRef {
        api_version: api.into(),
        kind: kind.into(),
        name: name.into(),
        namespace: ns.into(),
    };
    assert_eq!(
        e.resources,
        vec![
            r("v1", "Service", "gb", "guestbook"),
            r("apps/v1", "Deployment", "gb", "guestbook"),
            r("rbac.authorization.k8s.io/v1", "ClusterRole", "reader", ""),
        ]
    );
}

#[test]
fn entry_without_feedback_is_unknown() {
    let meta = work_meta("c9", "w");
    let appset = work_appset(&meta).unwrap();
    let e = work_entry(&appset, &meta, None);
    assert_eq!(e.condition.health_status, "Unknown");
    assert_eq!(e.condition.sync_status, "Unknown");
    assert_eq!(e.condition.sync_revision, "Unknown");
    assert!(e.condition.conditions.is_empty());
    assert!(e.resources.is_empty());
}

#[test]
fn single_resource_scalars_and_unalignable_lists() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // One resource: scalar values, namespace present.
    let one = resources_from_lists(
        &s(&["Deployment"]),
        &s(&["d"]),
        &s(&["v1"]),
        &s(&["apps"]),
        &s(&["ns"]),
    );
    assert_eq!(one[0].api_version, "apps/v1");
    // A custom cluster-scoped kind the table does not know: namespaces cannot be aligned
    // and are dropped rather than shifted onto the wrong resources.
    let r = resources_from_lists(
        &s(&["Foo", "Deployment"]),
        &s(&["f", "d"]),
        &s(&["v1", "v1"]),
        &s(&["example.com", "apps"]),
        &s(&["ns"]),
    );
    assert_eq!(r[0].namespace, "");
    assert_eq!(r[1].namespace, "");
    assert_eq!(r[1].api_version, "apps/v1");
    // Kinds and names that disagree: nothing.
    assert!(resources_from_lists(&s(&["A"]), &s(&[]), &s(&[]), &s(&[]), &s(&[])).is_empty());
}

#[test]
fn aggregate_sorts_by_cluster_and_unions_resources() {
    let res = ResourceRef {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: "gb".into(),
        namespace: "gb".into(),
    };
    let entries = vec![
        WorkEntry {
            condition: cc("c3", "Healthy", "Synced"),
            resources: vec![res.clone()],
        },
        WorkEntry {
            condition: cc("c1", "Progressing", "OutOfSync"),
            resources: vec![res.clone()],
        },
        WorkEntry {
            condition: cc("c2", "Healthy", "Synced"),
            resources: vec![],
        },
    ];
    let st = aggregate(&entries);
    let order: Vec<_> = st
        .cluster_conditions
        .iter()
        .map(|c| c.cluster.as_str())
        .collect();
    assert_eq!(order, ["c1", "c2", "c3"]);
    assert_eq!(st.resources, vec![res]);
    assert_eq!(st.summary, Some(summary([3, 2, 1, 2, 1, 1])));
}

#[test]
fn report_label_and_appset_parsing() {
    let k = AppSetKey::parse("argocd/guestbook").unwrap();
    assert_eq!(report_label(&k), "argocd.guestbook");
    let long = AppSetKey {
        namespace: "n".repeat(40),
        name: "a".repeat(40),
    };
    assert_eq!(report_label(&long).len(), 63);
    assert!(report_label(&long).starts_with(&format!("{}.", "n".repeat(40))));
    for bad in ["", "a", "/b", "a/", "a/b/c"] {
        assert_eq!(AppSetKey::parse(bad), None, "{bad}");
    }
    let rep = report(&k, ReportStatuses::default());
    assert_eq!(rep.metadata.name.as_deref(), Some("guestbook"));
    assert_eq!(
        rep.metadata.labels.unwrap()[names::HOSTING_APPLICATIONSET],
        "argocd.guestbook"
    );
}

#[test]
fn work_without_label_or_annotation_is_ignored() {
    let mut meta = work_meta("c", "w");
    meta.labels = None;
    assert_eq!(work_appset(&meta), None);
    let mut meta = work_meta("c", "w");
    meta.annotations
        .as_mut()
        .unwrap()
        .remove(names::HOSTING_APPLICATIONSET);
    assert_eq!(work_appset(&meta), None);
}

#[test]
fn extra_rules_are_valid_and_unique() {
    let rules = extra_feedback_rules();
    assert_eq!(rules.len(), CONDITION_TYPES.len() + 5);
    let names: BTreeSet<_> = rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.len(), rules.len());
    for basic in [
        HEALTH_STATUS,
        SYNC_STATUS,
        OPERATION_STATE_PHASE,
        OPERATION_STATE_STARTED_AT,
        SYNC_REVISION,
    ] {
        assert!(!names.contains(basic));
    }
    assert!(
        rules
            .iter()
            .any(|r| r.path == r#".status.conditions[?(@.type=="SyncError")].message"#)
    );
    assert!(rules.iter().all(|r| r.path.starts_with(".status.")));
}
