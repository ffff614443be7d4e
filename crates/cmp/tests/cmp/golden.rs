//! Golden outputs over the corpus (insta), and determinism.

use crate::support::{corpus, documents, ok, run_cmp};

const APP: (&str, &str) = ("ARGOCD_APP_NAME", "guestbook");

#[test]
fn plain_directory_to_two_clusters() {
    let out = ok(&run_cmp(
        &corpus("plain"),
        &["generate"],
        &[APP, ("ARGOCD_ENV_TARGET_CLUSTER", "cluster2,cluster1")],
        None,
    ));
    insta::assert_snapshot!("plain_two_clusters", out);
    let docs = documents(&out);
    assert_eq!(docs.len(), 2);
    assert_eq!(
        docs[0]["metadata"]["namespace"], "cluster1",
        "clusters in sorted order"
    );
    assert_eq!(docs[1]["metadata"]["namespace"], "cluster2");
    assert_eq!(
        docs[0]["spec"], docs[1]["spec"],
        "every cluster gets the same work"
    );
    let kinds: Vec<&str> = docs[0]["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    // sync wave -1 first, then Argo CD's kind order, custom resources last; the hidden
    // .github directory and README.md are not read.
    assert_eq!(
        kinds,
        [
            "Job",
            "Namespace",
            "ConfigMap",
            "CustomResourceDefinition",
            "Service",
            "DaemonSet",
            "Deployment",
            "StatefulSet",
            "Widget"
        ]
    );
    let deploy = &docs[0]["spec"]["workload"]["manifests"][6];
    let env = &deploy["spec"]["template"]["spec"]["containers"][0]["env"];
    for (i, v) in ["0755", "yes", "1.10", "on"].iter().enumerate() {
        assert_eq!(env[i]["value"], *v, "quoted scalars stay strings");
    }
    assert_eq!(
        deploy["spec"]["template"]["spec"]["volumes"][0]["configMap"]["defaultMode"],
        420
    );
}

#[test]
fn multidoc_with_empty_and_comment_only_documents() {
    let out = ok(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[APP, ("ARGOCD_ENV_TARGET_CLUSTER", "cluster1")],
        None,
    ));
    insta::assert_snapshot!("multidoc", out);
    let docs = documents(&out);
    let names: Vec<&str> = docs[0]["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["app", "creds", "settings", "reader"],
        "List items expanded, empty docs skipped"
    );
}

#[test]
fn json_files() {
    let out = ok(&run_cmp(
        &corpus("json"),
        &["generate"],
        &[APP, ("ARGOCD_ENV_TARGET_CLUSTER", "cluster1")],
        None,
    ));
    insta::assert_snapshot!("json", out);
    assert!(
        out.contains("\"big\": 12345678901234567890"),
        "large integers are kept exactly"
    );
}

#[test]
fn helm_output_on_stdin() {
    let helm = std::fs::read_to_string(corpus("streams/helm.yaml")).unwrap();
    let out = ok(&run_cmp(
        &corpus("streams"),
        &["generate", "--stdin"],
        &[
            APP,
            ("ARGOCD_ENV_TARGET_CLUSTER", "cluster1"),
            ("ARGOCD_ENV_DEFAULT_NAMESPACE", "podinfo"),
        ],
        Some(&helm),
    ));
    insta::assert_snapshot!("helm_stdin", out);
    let docs = documents(&out);
    let manifests = docs[0]["spec"]["workload"]["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 2);
    assert!(
        manifests
            .iter()
            .all(|m| m["metadata"]["namespace"] == "podinfo"),
        "default namespace applied"
    );
    assert!(
        manifests[1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].is_null()
    );
}

#[test]
fn kustomize_output_on_stdin_via_env() {
    let text = std::fs::read_to_string(corpus("streams/kustomize.yaml")).unwrap();
    let out = ok(&run_cmp(
        &corpus("streams"),
        &["generate"],
        &[
            APP,
            ("ARGOCD_ENV_TARGET_CLUSTER", "cluster1"),
            ("ARGOCD_ENV_STDIN", "true"),
        ],
        Some(&text),
    ));
    insta::assert_snapshot!("kustomize_stdin", out);
}

#[test]
fn placement_gives_one_replicaset() {
    let out = ok(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[
            APP,
            ("ARGOCD_APP_NAMESPACE", "apps"),
            ("ARGOCD_ENV_PLACEMENT", "all-clusters"),
        ],
        None,
    ));
    insta::assert_snapshot!("placement", out);
    let docs = documents(&out);
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["kind"], "ManifestWorkReplicaSet");
    assert_eq!(
        docs[0]["apiVersion"],
        "work.open-cluster-management.io/v1alpha1"
    );
    assert_eq!(
        docs[0]["metadata"]["namespace"], "apps",
        "placement namespace = destination namespace"
    );
    assert_eq!(docs[0]["spec"]["placementRefs"][0]["name"], "all-clusters");
    assert_eq!(
        docs[0]["spec"]["manifestWorkTemplate"]["workload"]["manifests"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // an explicit namespace wins
    let out = ok(&run_cmp(
        &corpus("multidoc"),
        &["generate", "--placement", "fleet/prod"],
        &[APP, ("ARGOCD_APP_NAMESPACE", "apps")],
        None,
    ));
    let docs = documents(&out);
    assert_eq!(docs[0]["metadata"]["namespace"], "fleet");
    assert_eq!(docs[0]["spec"]["placementRefs"][0]["name"], "prod");
}

#[test]
fn install_output() {
    let out = ok(&run_cmp(&corpus("."), &["install"], &[], None));
    insta::assert_snapshot!("install", out);
    let health = ok(&run_cmp(
        &corpus("."),
        &["install", "--only", "health-patch"],
        &[],
        None,
    ));
    assert!(health.starts_with("# kubectl -n argocd patch configmap argocd-cm"));
    assert!(health.contains(
        "resource.customizations.health.work.open-cluster-management.io_ManifestWork: |"
    ));
}

#[test]
fn output_is_deterministic_and_independent_of_file_layout() {
    let env = [APP, ("ARGOCD_ENV_TARGET_CLUSTER", "c1,c2")];
    let a = ok(&run_cmp(&corpus("plain"), &["generate"], &env, None));
    let b = ok(&run_cmp(&corpus("plain"), &["generate"], &env, None));
    assert_eq!(a, b, "same input, byte-identical output");

    // The same manifests concatenated into one stream in reverse file order.
    let mut files: Vec<_> = [
        "namespace.yaml",
        "app/config.yaml",
        "app/deployment.yaml",
        "app/service.yml",
        "app/workloads.yaml",
        "crds/widget-crd.yaml",
        "crds/widget.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(corpus("plain").join(f)).unwrap())
    .collect();
    files.reverse();
    let stream = files.join("\n---\n");
    let c = ok(&run_cmp(
        &corpus("plain"),
        &["generate", "--stdin"],
        &env,
        Some(&stream),
    ));
    assert_eq!(
        a, c,
        "order of files and documents does not change the output"
    );
}
