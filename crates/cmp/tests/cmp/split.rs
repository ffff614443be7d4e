//! Splitting over several works under the byte budget.

use crate::support::{documents, fails, ok, run_cmp};

fn configmaps(n: usize, payload: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\n  namespace: demo\ndata:\n  blob: \"{}\"\n",
                "x".repeat(payload)
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

fn compact_len(v: &serde_json::Value) -> usize {
    serde_json::to_string(v).unwrap().len()
}

#[test]
fn splits_deterministically_under_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let stream = configmaps(40, 1000);
    let env = [
        ("ARGOCD_APP_NAME", "big"),
        ("ARGOCD_ENV_TARGET_CLUSTER", "c1,c2"),
        ("ARGOCD_ENV_MAX_WORK_BYTES", "10Ki"),
    ];
    let out = ok(&run_cmp(
        dir.path(),
        &["generate", "--stdin"],
        &env,
        Some(&stream),
    ));
    let again = ok(&run_cmp(
        dir.path(),
        &["generate", "--stdin"],
        &env,
        Some(&stream),
    ));
    assert_eq!(out, again);
    let docs = documents(&out);
    let per_cluster = docs.len() / 2;
    assert!(
        per_cluster >= 4,
        "40 KB over 10 KiB works: {per_cluster} parts"
    );
    let mut names = Vec::new();
    let mut all = Vec::new();
    for d in &docs[..per_cluster] {
        assert!(
            compact_len(d) <= 10 * 1024,
            "{} is {} bytes",
            d["metadata"]["name"],
            compact_len(d)
        );
        names.push(d["metadata"]["name"].as_str().unwrap().to_string());
        for m in d["spec"]["workload"]["manifests"].as_array().unwrap() {
            all.push(m["metadata"]["name"].as_str().unwrap().to_string());
        }
    }
    assert_eq!(names[0], "big");
    assert_eq!(names[1], "big-part-2");
    assert_eq!(names.last().unwrap(), &format!("big-part-{per_cluster}"));
    let expected: Vec<String> = (0..40).map(|i| format!("cm-{i:03}")).collect();
    assert_eq!(all, expected, "every manifest exactly once, in order");
    // the second cluster gets the same parts
    for (a, b) in docs[..per_cluster].iter().zip(&docs[per_cluster..]) {
        assert_eq!(a["metadata"]["name"], b["metadata"]["name"]);
        assert_eq!(a["spec"], b["spec"]);
        assert_eq!(b["metadata"]["namespace"], "c2");
    }
}

#[test]
fn small_input_is_one_work_named_after_the_app() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&run_cmp(
        dir.path(),
        &["generate", "--stdin"],
        &[
            ("ARGOCD_APP_NAME", "small"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "c1"),
        ],
        Some(&configmaps(40, 1000)),
    ));
    let docs = documents(&out);
    assert_eq!(docs.len(), 1);
    assert_eq!(docs[0]["metadata"]["name"], "small");
}

#[test]
fn object_over_budget_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut stream = configmaps(3, 100);
    stream.push_str("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: huge\n  namespace: demo\ndata:\n  blob: \"");
    stream.push_str(&"y".repeat(20_000));
    stream.push_str("\"\n");
    let err = fails(&run_cmp(
        dir.path(),
        &["generate", "--stdin", "--max-work-bytes", "10Ki"],
        &[
            ("ARGOCD_APP_NAME", "big"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "c1"),
        ],
        Some(&stream),
    ));
    assert!(
        err.contains("<stdin>: document 4 (line 24): ConfigMap/huge is 20"),
        "{err}"
    );
    assert!(
        err.contains("larger than the per-work budget of 10240 bytes"),
        "{err}"
    );
}

#[test]
fn placement_splits_into_several_replicasets() {
    let dir = tempfile::tempdir().unwrap();
    let out = ok(&run_cmp(
        dir.path(),
        &[
            "generate",
            "--stdin",
            "--placement",
            "fleet/all",
            "--max-work-bytes",
            "10Ki",
        ],
        &[("ARGOCD_APP_NAME", "big")],
        Some(&configmaps(40, 1000)),
    ));
    let docs = documents(&out);
    assert!(docs.len() >= 4);
    for d in &docs {
        assert_eq!(d["kind"], "ManifestWorkReplicaSet");
        assert_eq!(d["spec"]["placementRefs"][0]["name"], "all");
        assert!(compact_len(d) <= 10 * 1024);
    }
}
