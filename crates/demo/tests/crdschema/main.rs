//! Every object argocd-pull writes validates against the schema of its CRD (the vendored
//! upstream CRDs, `crates/api/crds/`, equal to `../shared/crds/`): required fields, types, enums,
//! patterns, and no field the API server would prune. See [`schema`] for what JSON schema checks
//! and what it does not.
//!
//! * what the CMP generates (works for clusters, a ManifestWorkReplicaSet for a Placement, split
//!   parts, feedback rules);
//! * what the basic pull model's controller writes (ManifestWorks, with and without ACM's extras
//!   and ApplicationSet feedback);
//! * what the GitOpsCluster automation plans (`argoCDAgentAddon`: ManifestWorks, AddOnTemplate,
//!   AddOnDeploymentConfig, ManagedClusterAddOn, ClusterManagementAddOn), a custom ArgoCD CR list
//!   included;
//! * everything the controllers left on the embedded hub after `argocd-pull demo` (basic and agent
//!   models): works, addon objects, Placements (tolerations), hub Applications (status),
//!   GitOpsClusters (status; v1beta1 against ACM's schema, v1alpha1 against
//!   argocd-pull-integration's) and ApplicationSet reports.

mod schema;

use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::crds;
use argocd_pull_cmp::{GenerateOptions, Input, Target};
use argocd_pull_demo::{Demo, DemoArgs, DemoModel};
use argocd_pull_domain::{WorkOptions, desired_work};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Value, json};

use schema::Schemas;

/// The schemas our objects are checked against: the OCM and Argo CD CRDs, and for our own
/// kinds the peers' CRDs (our own CRD keeps unknown fields in `spec`/`status`, so it checks
/// nothing there).
fn schemas() -> Schemas {
    let mut all: Vec<&str> = crds::OCM_HUB.iter().chain(crds::ARGOCD).copied().collect();
    all.extend([
        crds::GITOPSCLUSTER_V1BETA1,
        crds::GITOPSCLUSTER_V1ALPHA1,
        crds::APPSET_REPORT,
    ]);
    Schemas::load(&all)
}

fn documents(text: &str) -> Vec<Value> {
    text.split("\n---\n")
        .filter(|d| !d.trim().is_empty())
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}:\n{d}")))
        .collect()
}

const WORKLOADS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.27"}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: shop}
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "postgres:17"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: shop}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: "busybox:1.36"}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: migrate, namespace: shop}
spec:
  template:
    spec: {restartPolicy: Never, containers: [{name: m, image: "busybox:1.36"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: debug, namespace: shop}
spec: {containers: [{name: d, image: "busybox:1.36"}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {a: "1"}
"#;

fn cmp_options(target: Target, max_work_bytes: usize) -> GenerateOptions {
    GenerateOptions {
        work_name: "shop".into(),
        app_name: "shop".into(),
        app_namespace: "argocd".into(),
        target,
        max_work_bytes,
        default_namespace: None,
        allow_empty: false,
        display_prefix: None,
    }
}

#[test]
fn what_the_cmp_generates_validates() {
    let s = schemas();
    let input = Input::Stream {
        name: "<test>".into(),
        text: WORKLOADS.into(),
    };
    let mut n = 0;
    for target in [
        Target::Clusters(vec!["cluster1".into(), "cluster2".into()]),
        Target::Placement {
            namespace: "apps".into(),
            name: "all-clusters".into(),
        },
    ] {
        // one work, and the same split into parts of at most 1,500 bytes
        for budget in [argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES, 1_500] {
            let out = argocd_pull_cmp::generate(&input, &cmp_options(target.clone(), budget))
                .expect("generate");
            let docs = documents(&out);
            assert!(budget == argocd_pull_cmp::DEFAULT_MAX_WORK_BYTES || docs.len() > 2);
            n += s.assert_valid(&format!("cmp generate {target:?}"), &docs);
        }
    }
    assert!(n >= 8, "{n} objects");
}

#[test]
fn what_the_basic_model_writes_validates() {
    let s = schemas();
    let mut app: Application = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": "guestbook", "namespace": "argocd", "uid": "0a1b2c3d-0000-4000-8000-000000000000",
            "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
            "annotations": {"apps.open-cluster-management.io/ocm-managed-cluster": "cluster1",
                            "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace": "argocd"},
            "finalizers": ["resources-finalizer.argocd.argoproj.io"],
            "ownerReferences": [{"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
                "name": "guestbook", "uid": "1a1b2c3d-0000-4000-8000-000000000000", "controller": true}]},
        "spec": {"project": "default",
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
            "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps", "path": "guestbook", "targetRevision": "HEAD"},
            "syncPolicy": {"automated": {"prune": true}}},
        "operation": {"sync": {"revision": "HEAD"}}
    }))
    .unwrap();
    let mut works = Vec::new();
    for opts in [
        WorkOptions::default(),
        WorkOptions {
            acm_extras: true,
            appset_feedback: argocd_pull_gitops::report::extra_feedback_rules(),
        },
    ] {
        works.push(serde_json::to_value(desired_work(&app, &opts).unwrap()).unwrap());
    }
    app.operation = None;
    works.push(serde_json::to_value(desired_work(&app, &WorkOptions::default()).unwrap()).unwrap());
    s.assert_valid("the propagation controller", &works);
}

#[test]
fn what_the_gitopscluster_automation_plans_validates() {
    use argocd_pull_gitops::addon::desired::{Inputs, plan};
    use argocd_pull_gitops::addon::{ArgoCDAgentAddonSpec, pki};
    let s = schemas();
    let clusters = ["cluster1".to_string(), "local-cluster".to_string()];
    let secrets = Default::default();
    let jwt = pki::jwt_key().unwrap();
    for spec in [
        json!({"mode": "managed", "agentNamespace": "argocd"}),
        json!({"mode": "autonomous", "operatorNamespace": "argocd-operator",
            "argoCDCRManifestWork": {"manifests": [
                {"apiVersion": "argoproj.io/v1beta1", "kind": "ArgoCD", "metadata": {"name": "custom"},
                 "spec": {"argoCDAgent": {"agent": {"client": {"principalServerAddress": ""}}}}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "namespace": "argocd"}}]}}),
    ] {
        let spec: ArgoCDAgentAddonSpec = serde_json::from_value(spec).unwrap();
        let p = plan(&Inputs {
            name: "gc",
            namespace: "argocd",
            spec: &spec,
            placement: "placement",
            address: "principal.example.com",
            port: "443",
            principal_service: None,
            nodes: &[],
            clusters: &clusters,
            secrets: &secrets,
            bundle: None,
            agent_image: "example.invalid/argocd-pull:test",
            new_jwt: Some(jwt.clone()),
            now: time::OffsetDateTime::now_utc(),
        })
        .unwrap();
        // Built-in kinds (Secret, ConfigMap) have no CRD here.
        let crs: Vec<&Value> = p
            .objects
            .iter()
            .filter(|o| o["apiVersion"].as_str().is_some_and(|a| a.contains('.')))
            .collect();
        assert!(crs.len() >= 6, "{} custom resources planned", crs.len());
        s.assert_valid("the argoCDAgentAddon controller", crs);
    }
}

/// The validator finds what the API server's client-side validation would reject: a required
/// field left out (the ManifestWorkReplicaSet without `cascadeDeletionPolicy` the CMP once
/// wrote), a value outside an enum, a wrong type, a field the server would prune.
#[test]
fn the_validator_catches_missing_required_fields_bad_enums_types_and_unknown_fields() {
    let s = schemas();
    let mwrs = |spec: Value| {
        json!({"apiVersion": "work.open-cluster-management.io/v1alpha1", "kind": "ManifestWorkReplicaSet",
            "metadata": {"name": "x", "namespace": "apps"}, "spec": spec})
    };
    let template = json!({"workload": {"manifests": []}});
    let ok = mwrs(
        json!({"placementRefs": [{"name": "p"}], "cascadeDeletionPolicy": "Background",
        "manifestWorkTemplate": template}),
    );
    assert_eq!(s.errors(&ok).unwrap(), Vec::<String>::new());
    for (bad, want) in [
        (
            mwrs(json!({"placementRefs": [{"name": "p"}], "manifestWorkTemplate": template})),
            "\"cascadeDeletionPolicy\" is a required property",
        ),
        (
            mwrs(
                json!({"placementRefs": [{"name": "p"}], "cascadeDeletionPolicy": "Sometimes", "manifestWorkTemplate": template}),
            ),
            "/spec/cascadeDeletionPolicy",
        ),
        (
            mwrs(
                json!({"placementRefs": [{"name": 7}], "cascadeDeletionPolicy": "Background", "manifestWorkTemplate": template}),
            ),
            "/spec/placementRefs/0/name",
        ),
        (
            mwrs(
                json!({"placementRefs": [{"name": "p"}], "cascadeDeletionPolicy": "Background", "manifestWorkTemplate": template, "cascadeDeletion": "x"}),
            ),
            "cascadeDeletion",
        ),
    ] {
        let e = s.errors(&bad).unwrap().join("\n");
        assert!(e.contains(want), "{bad}: wanted {want:?} in {e:?}");
    }
    assert!(
        s.errors(&json!({"apiVersion": "example.com/v1", "kind": "Nope"}))
            .is_err()
    );
}

/// The vendored CRDs are the shared copies (`../shared/crds` beside the workspace, when there).
#[test]
fn the_vendored_crds_are_the_shared_ones() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let shared = root.join("../shared/crds");
    if !shared.is_dir() {
        eprintln!(
            "SKIP: the_vendored_crds_are_the_shared_ones: no {}",
            shared.display()
        );
        return;
    }
    let vendored = root.join("crates/api/crds");
    let mut n = 0;
    for dir in ["argocd", "ocm", "reference"] {
        for f in std::fs::read_dir(shared.join(dir)).unwrap() {
            let f = f.unwrap().path();
            let ours = vendored.join(dir).join(f.file_name().unwrap());
            assert_eq!(
                std::fs::read(&f).unwrap(),
                std::fs::read(&ours).unwrap_or_default(),
                "{} differs from {}",
                ours.display(),
                f.display()
            );
            n += 1;
        }
    }
    assert!(n >= 17, "{n} CRDs compared");
}

/// `(group, version, kind, plural, drop status)` of every kind the controllers write on the hub;
/// `drop status`: the status there is the simulated OCM's or Argo CD's, not ours.
const WRITTEN: &[(&str, &str, &str, &str, bool)] = &[
    (
        "work.open-cluster-management.io",
        "v1",
        "ManifestWork",
        "manifestworks",
        true,
    ),
    (
        "addon.open-cluster-management.io",
        "v1alpha1",
        "AddOnTemplate",
        "addontemplates",
        true,
    ),
    (
        "addon.open-cluster-management.io",
        "v1alpha1",
        "AddOnDeploymentConfig",
        "addondeploymentconfigs",
        true,
    ),
    (
        "addon.open-cluster-management.io",
        "v1alpha1",
        "ManagedClusterAddOn",
        "managedclusteraddons",
        true,
    ),
    (
        "addon.open-cluster-management.io",
        "v1alpha1",
        "ClusterManagementAddOn",
        "clustermanagementaddons",
        true,
    ),
    (
        "cluster.open-cluster-management.io",
        "v1beta1",
        "Placement",
        "placements",
        true,
    ),
    (
        "argoproj.io",
        "v1alpha1",
        "Application",
        "applications",
        false,
    ),
    (
        "argoproj.io",
        "v1alpha1",
        "ApplicationSet",
        "applicationsets",
        true,
    ),
    (
        "apps.open-cluster-management.io",
        "v1alpha1",
        "MulticlusterApplicationSetReport",
        "multiclusterapplicationsetreports",
        false,
    ),
    (
        "apps.open-cluster-management.io",
        "v1beta1",
        "GitOpsCluster",
        "gitopsclusters",
        false,
    ),
];

async fn hub_objects(hub: &kube::Client) -> Vec<Value> {
    let mut out = Vec::new();
    for (group, version, kind, plural, drop_status) in WRITTEN {
        let ar =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(hub.clone(), &ar);
        for o in api.list(&ListParams::default()).await.unwrap().items {
            let mut v = serde_json::to_value(o).unwrap();
            v["apiVersion"] = json!(format!("{group}/{version}"));
            v["kind"] = json!(kind);
            if *drop_status && let Some(m) = v.as_object_mut() {
                m.remove("status");
            }
            // A GitOpsCluster of the agent model is argocd-pull-integration's v1alpha1 shape.
            if *kind == "GitOpsCluster" && !v["spec"]["argoCDAgentAddon"].is_null() {
                v["apiVersion"] = json!(format!("{group}/v1alpha1"));
            }
            out.push(v);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_controllers_leave_on_the_hub_after_the_demo_validates() {
    let s = schemas();
    for model in [DemoModel::Basic, DemoModel::Agent] {
        let dir = tempfile::tempdir().unwrap();
        let demo = Demo::start(DemoArgs {
            clusters: 2,
            apps: 2,
            model,
            kubeconfig_out: Some(dir.path().join("kc.yaml")),
            timeout: Duration::from_secs(120),
            sync_delay: Duration::from_millis(20),
            ..Default::default()
        })
        .await
        .unwrap();
        let outcome = demo.drive().await.unwrap();
        assert!(outcome.converged, "{model:?}: {outcome:#?}");
        let objects = hub_objects(&demo.hub_client()).await;
        let kinds: std::collections::BTreeSet<&str> =
            objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        eprintln!("{model:?}: {} objects of {kinds:?}", objects.len());
        assert!(kinds.contains("ManifestWork") && kinds.contains("GitOpsCluster"));
        s.assert_valid(&format!("argocd-pull demo --model {model:?}"), &objects);
        demo.shutdown().await;
    }
}
