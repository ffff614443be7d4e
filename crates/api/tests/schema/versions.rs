//! The one GitOpsCluster CRD `argocd-pull crds` emits serves both peers' schemas.

use argocd_pull_api::{addon, crds};
use serde_json::Value;

use crate::{assert_fields_exist, crd_schema};

fn parse(yaml: &str) -> Value {
    serde_saphyr::from_str(yaml).expect("CRD parses")
}

/// What `crds/own/gen.py` does, restated: each reference version, unchanged except that `spec`
/// and `status` keep unknown fields, conversion None, storage v1beta1.
#[test]
fn merged_gitopscluster_crd_is_the_two_references() {
    let merged = parse(crds::GITOPSCLUSTER);
    assert_eq!(merged["spec"]["conversion"]["strategy"], "None");
    let versions = merged["spec"]["versions"].as_array().unwrap();
    let names: Vec<&str> = versions
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["v1alpha1", "v1beta1"]);
    for (reference, name, storage) in [
        (crds::GITOPSCLUSTER_V1ALPHA1, "v1alpha1", false),
        (crds::GITOPSCLUSTER_V1BETA1, "v1beta1", true),
    ] {
        let mut want = parse(reference)["spec"]["versions"][0].clone();
        want["storage"] = Value::Bool(storage);
        for k in ["spec", "status"] {
            want["schema"]["openAPIV3Schema"]["properties"][k]["x-kubernetes-preserve-unknown-fields"] =
                Value::Bool(true);
        }
        let got = versions.iter().find(|v| v["name"] == name).unwrap();
        assert_eq!(
            got, &want,
            "version {name} differs from its reference plus the preserve flags"
        );
    }
    assert_eq!(
        merged["spec"]["names"]["shortNames"],
        serde_json::json!(["gitopscluster", "goc"])
    );
}

#[test]
fn v1alpha1_types_match_the_reference() {
    assert_fields_exist::<addon::GitOpsClusterSpec>(
        crds::GITOPSCLUSTER_V1ALPHA1,
        "v1alpha1",
        "spec",
    );
    assert_fields_exist::<addon::GitOpsClusterStatus>(
        crds::GITOPSCLUSTER_V1ALPHA1,
        "v1alpha1",
        "status",
    );
    // The merged CRD's v1alpha1 schema is the reference one (checked above).
    let _ = crd_schema(crds::GITOPSCLUSTER, "v1alpha1");
}

/// An object written in either shape reads through both types without error (a v1alpha1
/// object in the v1beta1 controller's watch must not break its list).
#[test]
fn either_shape_deserializes_through_both_types() {
    let alpha = serde_json::json!({
        "apiVersion": "apps.open-cluster-management.io/v1alpha1", "kind": "GitOpsCluster",
        "metadata": {"name": "a", "namespace": "n"},
        "spec": {"placementRef": {"kind": "Placement", "name": "p"},
                 "argoCDAgentAddon": {"principalServerAddress": "1.2.3.4", "mode": "autonomous"}}});
    let beta = serde_json::json!({
        "apiVersion": "apps.open-cluster-management.io/v1beta1", "kind": "GitOpsCluster",
        "metadata": {"name": "b", "namespace": "n"},
        "spec": {"placementRef": {"kind": "Placement", "name": "p"},
                 "argoServer": {"argoNamespace": "argocd"}}});
    let a: addon::GitOpsCluster = serde_json::from_value(alpha.clone()).unwrap();
    assert_eq!(
        a.spec.argo_cd_agent_addon.unwrap().mode.as_deref(),
        Some("autonomous")
    );
    let a_as_beta: argocd_pull_api::gitops::GitOpsCluster = serde_json::from_value(alpha).unwrap();
    assert!(a_as_beta.spec.argo_server.argo_namespace.is_empty());
    let b: addon::GitOpsCluster = serde_json::from_value(beta).unwrap();
    assert!(b.spec.argo_cd_agent_addon.is_none());
}
