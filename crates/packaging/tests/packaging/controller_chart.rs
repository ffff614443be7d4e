//! charts/argocd-pull: the hub controller.

use serde_json::json;

use crate::helm::{self, assert_hardened, container, env, grants};

const CHART: &str = "argocd-pull";

fn grant(g: &str, r: &str, v: &str) -> (String, String, String) {
    (g.into(), r.into(), v.into())
}

#[test]
fn default_render_is_the_controller_with_least_privilege() {
    let Some(h) = helm::helm("controller chart") else {
        return;
    };
    let objs = h.template(CHART, "argocd-pull", "argocd-pull", &[]);
    let ids: Vec<(String, String)> = [
        ("ClusterRole", "argocd-pull-controller"),
        ("ClusterRole", "argocd-pull-gitops"),
        ("ClusterRoleBinding", "argocd-pull-controller"),
        ("ClusterRoleBinding", "argocd-pull-gitops"),
        ("Deployment", "argocd-pull-controller"),
        ("Role", "argocd-pull-controller-leader-election"),
        ("RoleBinding", "argocd-pull-controller-leader-election"),
        ("Service", "argocd-pull-controller-metrics"),
        ("ServiceAccount", "argocd-pull-controller"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(objs.ids(), ids, "no ServiceMonitor unless asked for");

    let d = objs.get("Deployment", "argocd-pull-controller");
    assert_eq!(d["metadata"]["namespace"], "argocd-pull");
    assert_hardened(d);
    let c = container(d);
    assert_eq!(
        c["image"], "ghcr.io/argocd-pull/argocd-pull:0.1.0",
        "appVersion tag"
    );
    assert_eq!(c["args"], json!(["controller"]));
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "admin"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "admin"})
    );
    assert_eq!(c["ports"][0]["containerPort"], 8080);
    let e = env(c);
    assert_eq!(e["ARGOCD_PULL_LEADER_ELECT"], "true");
    assert_eq!(e["ARGOCD_PULL_ADMIN_ADDR"], "0.0.0.0:8080");
    assert_eq!(
        e["POD_NAMESPACE"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["serviceAccountName"],
        "argocd-pull-controller"
    );

    // RBAC: exactly the calls the controllers make, nothing cluster-wide on secrets for the
    // basic controller, leader election only in its namespace.
    let basic = grants(objs.get("ClusterRole", "argocd-pull-controller"));
    assert!(basic.contains(&grant(
        "work.open-cluster-management.io",
        "manifestworks",
        "create"
    )));
    assert!(basic.contains(&grant("argoproj.io", "applications", "patch")));
    assert!(!basic.iter().any(|(_, r, _)| r == "secrets"), "{basic:?}");
    assert!(
        !basic.iter().any(|(_, _, v)| v == "*" || v == "update"),
        "{basic:?}"
    );
    let gitops = grants(objs.get("ClusterRole", "argocd-pull-gitops"));
    assert!(gitops.contains(&grant("", "secrets", "create")));
    // the argoCDAgentAddon automation: OCM addon objects and the Placement tolerations
    for (g, r, v) in [
        (
            "addon.open-cluster-management.io",
            "addontemplates",
            "patch",
        ),
        (
            "addon.open-cluster-management.io",
            "managedclusteraddons",
            "delete",
        ),
        (
            "addon.open-cluster-management.io",
            "clustermanagementaddons",
            "get",
        ),
        ("cluster.open-cluster-management.io", "placements", "patch"),
        ("work.open-cluster-management.io", "manifestworks", "patch"),
        ("", "nodes", "list"),
    ] {
        assert!(gitops.contains(&grant(g, r, v)), "{g}/{r} {v}");
    }
    assert!(gitops.contains(&grant(
        "apps.open-cluster-management.io",
        "gitopsclusters/status",
        "patch"
    )));
    assert!(
        !gitops
            .iter()
            .any(|(g, r, v)| g == "*" || r == "*" || v == "*")
    );
    let le = objs.get("Role", "argocd-pull-controller-leader-election");
    assert_eq!(le["metadata"]["namespace"], "argocd-pull");
    assert_eq!(
        grants(le),
        ["get", "create", "patch"]
            .iter()
            .map(|v| grant("coordination.k8s.io", "leases", v))
            .collect()
    );
    for b in objs.of_kind("ClusterRoleBinding") {
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": "argocd-pull-controller", "namespace": "argocd-pull"}])
        );
    }

    let svc = objs.get("Service", "argocd-pull-controller-metrics");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "admin");
    assert_eq!(
        svc["spec"]["selector"], d["spec"]["selector"]["matchLabels"],
        "the Service selects the controller's pods"
    );
}

#[test]
fn non_default_values_change_what_a_user_expects() {
    let Some(h) = helm::helm("controller chart values") else {
        return;
    };
    let objs = h.template(
        CHART,
        "hub",
        "ocm",
        &[
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "leaderElection.enabled=false",
            "--set",
            "controller.gitOpsCluster=false",
            "--set",
            "controller.appSetReport=false",
            "--set",
            "controller.cleanup=false",
            "--set",
            "log.format=text",
            "--set",
            "image.tag=v9.9.9",
        ],
    );
    // Release "hub": names carry the release and chart name.
    let d = objs.get("Deployment", "hub-argocd-pull-controller");
    assert_eq!(d["metadata"]["namespace"], "ocm");
    let c = container(d);
    assert_eq!(c["image"], "ghcr.io/argocd-pull/argocd-pull:v9.9.9");
    let e = env(c);
    assert_eq!(e["ARGOCD_PULL_LEADER_ELECT"], "false");
    assert_eq!(e["ARGOCD_PULL_DISABLE_CLEANUP"], "true");
    assert_eq!(e["ARGOCD_PULL_GITOPSCLUSTER"], "false");
    assert_eq!(e["ARGOCD_PULL_LOG_FORMAT"], "text");
    assert!(!e.contains_key("ARGOCD_PULL_DISABLE_STATUS"));
    assert!(
        objs.of_kind("Role").is_empty(),
        "no Lease RBAC without leader election"
    );
    assert!(objs.find("ClusterRole", "hub-argocd-pull-gitops").is_none());
    let sm = objs.get("ServiceMonitor", "hub-argocd-pull-controller");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(
        sm["spec"]["namespaceSelector"]["matchNames"],
        json!(["ocm"])
    );

    let digest = format!("sha256:{}", "ab".repeat(32));
    let set = format!("image.digest={digest}");
    let objs = h.template(CHART, "argocd-pull", "x", &["--set", &set]);
    let c = container(objs.get("Deployment", "argocd-pull-controller"));
    assert_eq!(
        c["image"],
        format!("ghcr.io/argocd-pull/argocd-pull@{digest}")
    );
}

#[test]
fn invalid_values_fail_naming_the_value_and_what_is_allowed() {
    let Some(h) = helm::helm("controller chart schema") else {
        return;
    };
    let e = h.template_err(CHART, &["--set", "log.format=xml"]);
    assert!(
        e.contains("/log/format") && e.contains("'text', 'json'"),
        "{e}"
    );
    let e = h.template_err(CHART, &["--set", "controler.cleanup=false"]);
    assert!(e.contains("'controler' not allowed"), "{e}");
    let e = h.template_err(CHART, &["--set", "controller.concurrency=0"]);
    assert!(
        e.contains("/controller/concurrency") && e.contains("minimum"),
        "{e}"
    );
    let e = h.template_err(CHART, &["--set", "controller.sweepInterval=soon"]);
    assert!(e.contains("/controller/sweepInterval"), "{e}");
    let e = h.template_err(CHART, &["--set", "image.pullPolicy=Sometimes"]);
    assert!(
        e.contains("/image/pullPolicy") && e.contains("IfNotPresent"),
        "{e}"
    );
    let e = h.template_err(
        CHART,
        &[
            "--set",
            "replicaCount=2",
            "--set",
            "leaderElection.enabled=false",
        ],
    );
    assert!(
        e.contains("replicaCount > 1 needs leaderElection.enabled=true"),
        "{e}"
    );
}

/// The chart's CRDs are the ones `argocd-pull crds` prints (no helm needed).
#[test]
fn chart_crds_are_what_the_binary_prints() {
    let chart = include_str!("../../../../charts/argocd-pull/crds/argocd-pull-crds.yaml");
    let mut printed = String::new();
    for doc in argocd_pull_api::crds::OWN {
        printed.push_str("---\n");
        printed.push_str(doc.trim_start_matches("---\n").trim_end());
        printed.push('\n');
    }
    assert_eq!(
        chart, printed,
        "run `argocd-pull crds > charts/argocd-pull/crds/argocd-pull-crds.yaml` and hack/gen-deploy.sh"
    );
    let names: Vec<String> = helm::parse(chart)
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "gitopsclusters.apps.open-cluster-management.io",
            "multiclusterapplicationsetreports.apps.open-cluster-management.io"
        ]
    );
}

#[test]
fn every_chart_passes_strict_lint() {
    let Some(h) = helm::helm("helm lint --strict") else {
        return;
    };
    for chart in ["argocd-pull", "argocd-pull-principal", "argocd-pull-agent"] {
        let (ok, report) = h.lint_strict(chart);
        assert!(
            ok && report.contains("0 chart(s) failed"),
            "{chart}:\n{report}"
        );
        let root = helm::root().join("charts").join(chart);
        for f in [
            "values.schema.json",
            "README.md",
            "Chart.yaml",
            "values.yaml",
        ] {
            assert!(root.join(f).is_file(), "{chart} has {f}");
        }
    }
}
