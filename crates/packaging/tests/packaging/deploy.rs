//! deploy/ (`kubectl apply -k deploy/`) is the hub chart's default render: the two never drift.

use std::path::Path;

use serde_json::Value;

use crate::helm::{self, id, parse};

/// The files `kubectl apply -k <dir>` applies, following kustomizations into sub-directories.
fn kustomize_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let k = std::fs::read_to_string(dir.join("kustomization.yaml"))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let k: Value = serde_saphyr::from_str(&k).expect("kustomization");
    let mut out = Vec::new();
    for r in k["resources"].as_array().expect("resources") {
        let p = dir.join(r.as_str().unwrap());
        if p.is_dir() {
            out.extend(kustomize_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Drops the labels only Helm sets (managed-by, chart, version).
fn strip_helm_labels(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::Object(labels)) = m.get_mut("labels") {
                for k in [
                    "app.kubernetes.io/managed-by",
                    "helm.sh/chart",
                    "app.kubernetes.io/version",
                ] {
                    labels.remove(k);
                }
            }
            m.values_mut().for_each(strip_helm_labels);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_helm_labels),
        _ => {}
    }
}

#[test]
fn deploy_is_the_charts_default_render() {
    let root = helm::root();
    let mut deployed: Vec<Value> = kustomize_files(&root.join("deploy"))
        .iter()
        .flat_map(|f| parse(&std::fs::read_to_string(f).unwrap()))
        .collect();
    // The Namespace (Helm's --create-namespace does that) and the CRDs (the chart's crds/,
    // checked byte for byte below) are the only extras.
    let crds = std::fs::read_to_string(root.join("deploy/crds/argocd-pull-crds.yaml")).unwrap();
    let chart_crds =
        std::fs::read_to_string(root.join("charts/argocd-pull/crds/argocd-pull-crds.yaml"))
            .unwrap();
    assert_eq!(
        crds, chart_crds,
        "deploy/crds and the chart's crds/ differ: run hack/gen-deploy.sh"
    );
    let ns = deployed
        .iter()
        .find(|o| o["kind"] == "Namespace")
        .expect("deploy/ creates the namespace");
    assert_eq!(ns["metadata"]["name"], "argocd-pull");
    deployed.retain(|o| o["kind"] != "Namespace" && o["kind"] != "CustomResourceDefinition");

    let Some(h) = helm::helm("deploy/ equals the chart") else {
        return;
    };
    let mut rendered = h
        .template("argocd-pull", "argocd-pull", "argocd-pull", &[])
        .0;
    rendered.iter_mut().for_each(strip_helm_labels);
    deployed.sort_by_key(id);
    rendered.sort_by_key(id);
    assert_eq!(
        deployed.iter().map(id).collect::<Vec<_>>(),
        rendered.iter().map(id).collect::<Vec<_>>(),
        "objects differ: run hack/gen-deploy.sh"
    );
    for (d, r) in deployed.iter().zip(&rendered) {
        assert_eq!(
            d,
            r,
            "{:?} differs from the chart: run hack/gen-deploy.sh",
            id(d)
        );
    }
}
