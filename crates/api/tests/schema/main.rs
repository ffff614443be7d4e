//! Every field our Rust types name must exist, at the same path, in the upstream CRD schema.
//! (A misspelt field would silently read as empty and be written where no server keeps it.)

use argocd_pull_api::{argocd, crds, gitops, ocm, report};
use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::Value;

mod versions;

/// The openAPIV3Schema of `version` in a CRD YAML.
fn crd_schema(yaml: &str, version: &str) -> Value {
    let crd: Value = serde_saphyr::from_str(yaml).expect("vendored CRD parses");
    crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == version)
        .unwrap_or_else(|| panic!("version {version} in CRD"))["schema"]["openAPIV3Schema"]
        .clone()
}

/// The inlined JSON schema of a Rust type.
fn rust_schema<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    serde_json::to_value(generator.into_root_schema_for::<T>()).unwrap()
}

/// Object properties of a schema node, looking through `items`, `allOf`/`anyOf`/`oneOf` and nullable wrappers.
fn properties(schema: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        out.extend(props.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for sub in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            out.extend(properties(sub));
        }
    }
    out
}

fn element(schema: &Value) -> Option<Value> {
    if let Some(items) = schema.get("items") {
        return Some(items.clone());
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        for sub in schema
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(e) = element(sub) {
                return Some(e);
            }
        }
    }
    None
}

fn check(ours: &Value, theirs: &Value, path: &str, missing: &mut Vec<String>) {
    if theirs.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        && theirs.get("properties").is_none()
    {
        return; // free-form upstream: anything goes
    }
    let their_props: std::collections::BTreeMap<String, Value> =
        properties(theirs).into_iter().collect();
    for (name, sub) in properties(ours) {
        let here = format!("{path}.{name}");
        match their_props.get(&name) {
            Some(t) => check(&sub, t, &here, missing),
            None => missing.push(here),
        }
    }
    if let (Some(a), Some(b)) = (element(ours), element(theirs)) {
        check(&a, &b, &format!("{path}[]"), missing);
    }
}

fn assert_fields_exist<T: JsonSchema>(crd_yaml: &str, version: &str, section: &str) {
    let theirs = crd_schema(crd_yaml, version);
    let mut missing = Vec::new();
    check(
        &rust_schema::<T>(),
        &theirs["properties"][section],
        section,
        &mut missing,
    );
    assert!(
        missing.is_empty(),
        "{} fields not in the CRD schema: {missing:?}",
        std::any::type_name::<T>()
    );
}

#[test]
fn argocd_types_match_crds() {
    assert_fields_exist::<argocd::ApplicationSpec>(crds::ARGOCD_APPLICATION, "v1alpha1", "spec");
    assert_fields_exist::<argocd::ApplicationStatus>(
        crds::ARGOCD_APPLICATION,
        "v1alpha1",
        "status",
    );
    assert_fields_exist::<argocd::ApplicationSetSpec>(
        crds::ARGOCD_APPLICATIONSET,
        "v1alpha1",
        "spec",
    );
    assert_fields_exist::<argocd::AppProjectSpec>(crds::ARGOCD_APPPROJECT, "v1alpha1", "spec");
}

#[test]
fn ocm_types_match_crds() {
    use ocm::{cluster, work};
    assert_fields_exist::<cluster::ManagedClusterSpec>(crds::OCM_MANAGED_CLUSTERS, "v1", "spec");
    assert_fields_exist::<cluster::ManagedClusterStatus>(
        crds::OCM_MANAGED_CLUSTERS,
        "v1",
        "status",
    );
    assert_fields_exist::<cluster::PlacementSpec>(crds::OCM_PLACEMENTS, "v1beta1", "spec");
    assert_fields_exist::<cluster::PlacementStatus>(crds::OCM_PLACEMENTS, "v1beta1", "status");
    assert_fields_exist::<cluster::PlacementDecisionStatus>(
        crds::OCM_PLACEMENT_DECISIONS,
        "v1beta1",
        "status",
    );
    assert_fields_exist::<work::ManifestWorkSpec>(crds::OCM_MANIFESTWORKS, "v1", "spec");
    assert_fields_exist::<work::ManifestWorkStatus>(crds::OCM_MANIFESTWORKS, "v1", "status");
    assert_fields_exist::<work::ManifestWorkReplicaSetSpec>(
        crds::OCM_MANIFESTWORK_REPLICASETS,
        "v1alpha1",
        "spec",
    );
    assert_fields_exist::<work::ManifestWorkReplicaSetStatus>(
        crds::OCM_MANIFESTWORK_REPLICASETS,
        "v1alpha1",
        "status",
    );
}

#[test]
fn own_types_match_reference_crds() {
    assert_fields_exist::<gitops::GitOpsClusterSpec>(
        crds::GITOPSCLUSTER_V1BETA1,
        "v1beta1",
        "spec",
    );
    assert_fields_exist::<gitops::GitOpsClusterStatus>(
        crds::GITOPSCLUSTER_V1BETA1,
        "v1beta1",
        "status",
    );
    assert_fields_exist::<report::ReportStatuses>(crds::APPSET_REPORT, "v1alpha1", "statuses");
}

#[test]
fn a_misspelt_field_is_caught() {
    #[derive(JsonSchema)]
    #[allow(dead_code)]
    struct Wrong {
        workload: (),
        delete_options: (), // the CRD says deleteOption
    }
    let theirs = crd_schema(crds::OCM_MANIFESTWORKS, "v1");
    let mut missing = Vec::new();
    check(
        &rust_schema::<Wrong>(),
        &theirs["properties"]["spec"],
        "spec",
        &mut missing,
    );
    assert_eq!(missing, vec!["spec.delete_options".to_string()]);
}

#[test]
fn every_vendored_crd_parses_and_names_itself() {
    for yaml in crds::ARGOCD.iter().chain(crds::OCM_HUB).chain(crds::OWN) {
        let crd: Value = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(crd["kind"], "CustomResourceDefinition");
        let name = crd["metadata"]["name"].as_str().unwrap();
        let plural = crd["spec"]["names"]["plural"].as_str().unwrap();
        let group = crd["spec"]["group"].as_str().unwrap();
        assert_eq!(name, format!("{plural}.{group}"));
    }
}
