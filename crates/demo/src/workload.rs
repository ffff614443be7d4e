//! The objects the demo applies: what a user (or Argo CD's ApplicationSet controller) would.

use anyhow::Context as _;
use argocd_pull_api::argocd::ApplicationSet;
use argocd_pull_api::names;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

/// The Argo CD namespace on the hub (and on every managed cluster).
pub const ARGO_NAMESPACE: &str = "argocd";
/// The demo's GitOpsCluster (the name of ACM's example).
pub const GITOPSCLUSTER: &str = "argo-acm-importer";
/// The Placement of the GitOpsCluster: every cluster of the fleet.
pub const GITOPS_PLACEMENT: &str = "all-clusters";

const APP_NAMES: &[&str] = &[
    "guestbook",
    "helm-guestbook",
    "kustomize-guestbook",
    "jsonnet-guestbook",
    "sock-shop",
];

/// The name of the `i`-th sample app.
pub fn app_name(i: usize) -> String {
    APP_NAMES
        .get(i)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("app{}", i + 1))
}

/// The Placement of an app's ApplicationSet.
pub fn placement_name(app: &str) -> String {
    format!("{app}-app-placement")
}

/// The ApplicationSet of an app.
pub fn appset_name(app: &str) -> String {
    format!("{app}-app")
}

/// A Placement in the Argo CD namespace selecting every simulated cluster (`vendor: Kubernetes`).
pub fn placement(name: &str) -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": name, "namespace": ARGO_NAMESPACE},
        "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {
            "matchExpressions": [{"key": "vendor", "operator": "In", "values": ["Kubernetes"]}]}}}]},
    })
}

/// The Argo CD server Service the GitOpsCluster controller looks for.
pub fn argocd_server_service() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "argocd-server", "namespace": ARGO_NAMESPACE,
            "labels": {
                "app.kubernetes.io/component": "server",
                "app.kubernetes.io/part-of": "argocd",
                "app.kubernetes.io/name": "argocd-server",
            },
        },
        "spec": {
            "selector": {"app.kubernetes.io/name": "argocd-server"},
            "ports": [{"name": "https", "port": 443, "targetPort": 8080}],
        },
    })
}

/// The GitOpsCluster registering the clusters of `placement` with the hub's Argo CD.
pub fn gitopscluster(placement: &str) -> Value {
    json!({
        "apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
        "metadata": {"name": GITOPSCLUSTER, "namespace": ARGO_NAMESPACE},
        "spec": {
            "argoServer": {"argoNamespace": ARGO_NAMESPACE},
            "placementRef": {
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "Placement",
                "name": placement,
            },
        },
    })
}

fn app_spec(app: &str, server: Value) -> Value {
    json!({
        "project": "default",
        "source": {
            "repoURL": "https://github.com/argoproj/argocd-example-apps.git",
            "targetRevision": "HEAD",
            "path": app,
        },
        "destination": {"server": server, "namespace": app},
        "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
    })
}

/// The ApplicationSet of `app` (the spec's "ApplicationSet shape").
pub fn application_set(app: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": appset_name(app), "namespace": ARGO_NAMESPACE},
        "spec": {
            "generators": [{"clusterDecisionResource": {
                "configMapRef": "acm-placement",
                "labelSelector": {"matchLabels": {names::LABEL_PLACEMENT: placement_name(app)}},
                "requeueAfterSeconds": 180,
            }}],
            "template": {
                "metadata": {
                    "name": format!("{{{{name}}}}-{app}-app"),
                    "labels": {names::LABEL_PULL_TO_OCM: "true"},
                    "annotations": {
                        names::ANNOTATION_SKIP_RECONCILE: "true",
                        names::ANNOTATION_OCM_MANAGED_CLUSTER: "{{name}}",
                        names::ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE: ARGO_NAMESPACE,
                    },
                },
                "spec": app_spec(app, json!(names::IN_CLUSTER_SERVER)),
            },
        },
    })
}

/// What the ApplicationSet controller would generate for `cluster` (template rendered with
/// `{{name}}` = the cluster, owned by the ApplicationSet).
pub fn generate_application(appset: &ApplicationSet, cluster: &str) -> anyhow::Result<Value> {
    let template = appset
        .spec
        .template
        .as_ref()
        .context("ApplicationSet without a template")?;
    let rendered = template
        .to_string()
        .replace("{{name}}", cluster)
        .replace("{{clusterName}}", cluster);
    let mut app: Value = serde_json::from_str(&rendered)?;
    app["apiVersion"] = json!("argoproj.io/v1alpha1");
    app["kind"] = json!("Application");
    app["metadata"]["namespace"] =
        json!(appset.namespace().unwrap_or_else(|| ARGO_NAMESPACE.into()));
    let owner = appset
        .controller_owner_ref(&())
        .context("ApplicationSet without a uid")?;
    app["metadata"]["ownerReferences"] = json!([owner]);
    Ok(app)
}

/// A plain Argo CD Application `app` in `namespace` (the agent model: the agent's namespace on
/// the hub, or `argocd` on a cluster in autonomous mode), deploying to the cluster it runs on.
pub fn application(namespace: &str, app: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": app, "namespace": namespace},
        "spec": app_spec(app, json!(names::IN_CLUSTER_SERVER)),
    })
}

/// Marks an Application (JSON) to fail its sync in the simulated Argo CD.
pub fn make_failing(app: &mut Value) {
    app["metadata"]["annotations"][argocd_pull_sim::FAIL_ANNOTATION] = json!("sync");
}
