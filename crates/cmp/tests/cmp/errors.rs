//! Every bad input: a message naming the file and document, non-zero exit, nothing on stdout.

use crate::support::{corpus, fails, run_cmp};

const APP: (&str, &str) = ("ARGOCD_APP_NAME", "guestbook");
const TARGET: (&str, &str) = ("ARGOCD_ENV_TARGET_CLUSTER", "cluster1");

fn bad_file(file: &str) -> String {
    fails(&run_cmp(
        &corpus("bad"),
        &["generate", "--include", file],
        &[APP, TARGET],
        None,
    ))
}

#[test]
fn bad_documents_name_file_and_document() {
    let cases = [
        (
            "invalid-yaml.yaml",
            "invalid-yaml.yaml: document 2 (line 5): invalid YAML",
        ),
        (
            "invalid-json.json",
            "invalid-json.json: document 2 (line 2): invalid JSON",
        ),
        (
            "missing-apiversion.yaml",
            "missing-apiversion.yaml: document 2 (line 5): missing apiVersion",
        ),
        (
            "missing-kind.yaml",
            "missing-kind.yaml: document 1 (line 1): missing kind",
        ),
        (
            "missing-name.yaml",
            "missing-name.yaml: document 2 (line 3): missing metadata.name",
        ),
        (
            "name-not-string.yaml",
            "name-not-string.yaml: document 1 (line 1): metadata.name must be a string, found a number",
        ),
        (
            "not-a-mapping.yaml",
            "not-a-mapping.yaml: document 1 (line 1): a manifest must be a mapping, found a list",
        ),
        (
            "duplicate-key.yaml",
            "duplicate-key.yaml: document 1 (line 1): invalid YAML",
        ),
        (
            "duplicate-resource.yaml",
            "duplicate resource ConfigMap x/dup: duplicate-resource.yaml: document 1 (line 1) and duplicate-resource.yaml: document 2 (line 4)",
        ),
    ];
    let mut all = String::new();
    for (file, expected) in cases {
        let err = bad_file(file);
        assert!(
            err.contains(expected),
            "{file}: expected {expected:?} in:\n{err}"
        );
        all.push_str(&format!("== {file}\n{err}"));
    }
    insta::assert_snapshot!("bad_documents", all);
}

#[test]
fn invalid_yaml_reports_the_line_in_the_file() {
    let err = bad_file("invalid-yaml.yaml");
    assert!(
        err.contains("line 9"),
        "the YAML error points into the file, not the document: {err}"
    );
}

#[test]
fn source_path_prefixes_file_names() {
    let err = fails(&run_cmp(
        &corpus("bad"),
        &["generate", "--include", "missing-kind.yaml"],
        &[
            APP,
            TARGET,
            ("ARGOCD_APP_SOURCE_PATH", "apps/guestbook"),
            ("ARGOCD_APP_REVISION", "abc123"),
        ],
        None,
    ));
    assert!(
        err.contains("apps/guestbook/missing-kind.yaml: document 1"),
        "{err}"
    );
    assert!(err.contains("revision abc123"), "{err}");
}

#[test]
fn no_target() {
    let err = fails(&run_cmp(&corpus("multidoc"), &["generate"], &[APP], None));
    assert!(
        err.contains("no target: set ARGOCD_ENV_TARGET_CLUSTER"),
        "{err}"
    );
}

#[test]
fn both_targets() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[APP, TARGET, ("ARGOCD_ENV_PLACEMENT", "ns/p")],
        None,
    ));
    assert!(err.contains("both TARGET_CLUSTER and PLACEMENT"), "{err}");
}

#[test]
fn placement_without_namespace() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate", "--placement", "p"],
        &[APP],
        None,
    ));
    assert!(err.contains("placement \"p\" has no namespace"), "{err}");
}

#[test]
fn no_application_name() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[TARGET],
        None,
    ));
    assert!(err.contains("ARGOCD_APP_NAME is not set"), "{err}");
}

#[test]
fn unknown_flag() {
    let o = run_cmp(
        &corpus("multidoc"),
        &["generate", "--target-clusters", "x"],
        &[APP],
        None,
    );
    let err = fails(&o);
    assert!(
        err.contains("unexpected argument '--target-clusters'"),
        "{err}"
    );
}

#[test]
fn unknown_parameter() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[
            APP,
            (
                "ARGOCD_APP_PARAMETERS",
                r#"[{"name":"target-clusters","string":"c1"}]"#,
            ),
        ],
        None,
    ));
    assert!(
        err.contains("unknown parameter \"target-clusters\""),
        "{err}"
    );
}

#[test]
fn invalid_names() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[APP, ("ARGOCD_ENV_TARGET_CLUSTER", "Cluster_1")],
        None,
    ));
    assert!(
        err.contains("target cluster \"Cluster_1\" is not a valid DNS-1123 label"),
        "{err}"
    );
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[("ARGOCD_APP_NAME", "Guest.Book"), TARGET],
        None,
    ));
    assert!(
        err.contains("work name \"Guest.Book\" is not a valid DNS-1123 subdomain"),
        "{err}"
    );
}

#[test]
fn bad_byte_budget() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[APP, TARGET, ("ARGOCD_ENV_MAX_WORK_BYTES", "lots")],
        None,
    ));
    assert!(
        err.contains("max work bytes \"lots\" is not a size"),
        "{err}"
    );
}

#[test]
fn invalid_glob() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate", "--include", "a[b"],
        &[APP, TARGET],
        None,
    ));
    assert!(err.contains("invalid include glob \"a[b\""), "{err}");
}

#[test]
fn empty_input() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate", "--include", "*.nothing"],
        &[APP, TARGET],
        None,
    ));
    assert!(err.contains("no manifests found in"), "{err}");
    let o = run_cmp(
        &corpus("multidoc"),
        &["generate", "--include", "*.nothing", "--allow-empty"],
        &[APP, TARGET],
        None,
    );
    assert!(o.status.success());
    assert!(o.stdout.is_empty());
}

#[test]
fn invalid_yaml_on_stdin() {
    let err = fails(&run_cmp(
        &corpus("multidoc"),
        &["generate", "--stdin"],
        &[APP, TARGET],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n"),
    ));
    assert!(
        err.contains("<stdin>: document 2 (line 4): invalid YAML"),
        "{err}"
    );
}
