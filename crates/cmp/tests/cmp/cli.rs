//! Option sources: flags, plugin env (`ARGOCD_ENV_*`), parameters (`ARGOCD_APP_PARAMETERS`),
//! and the in-process entry point the `argocd-pull` binary uses.

use crate::support::{corpus, documents, ok, run_cmp};
use argocd_pull_cmp::cli::{CmpArgs, CmpCommand, GenerateArgs, run_with_io};

#[test]
fn parameters_give_targets_and_options() {
    let params = r#"[{"name":"target-cluster","array":["east","west"]},{"name":"work-name","string":"gb"},{"name":"include","string":"{config,service}.y*ml"}]"#;
    let out = ok(&run_cmp(
        &corpus("plain/app"),
        &["generate"],
        &[
            ("ARGOCD_APP_NAME", "guestbook"),
            ("ARGOCD_APP_PARAMETERS", params),
        ],
        None,
    ));
    let docs = documents(&out);
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["metadata"]["name"], "gb");
    assert_eq!(docs[1]["metadata"]["namespace"], "west");
    let kinds: Vec<&str> = docs[0]["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Service"]);
}

#[test]
fn plugin_env_wins_over_parameters() {
    let params = r#"[{"name":"target-cluster","string":"from-param"}]"#;
    let out = ok(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[
            ("ARGOCD_APP_NAME", "a"),
            ("ARGOCD_APP_PARAMETERS", params),
            ("ARGOCD_ENV_TARGET_CLUSTER", "from-env"),
        ],
        None,
    ));
    assert_eq!(documents(&out)[0]["metadata"]["namespace"], "from-env");
}

#[test]
fn apps_in_any_namespace_name_form() {
    let out = ok(&run_cmp(
        &corpus("multidoc"),
        &["generate"],
        &[
            ("ARGOCD_APP_NAME", "team-a_guestbook"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "c1"),
        ],
        None,
    ));
    let doc = &documents(&out)[0];
    assert_eq!(doc["metadata"]["name"], "guestbook");
    assert_eq!(
        doc["metadata"]["annotations"]["apps.open-cluster-management.io/hub-application-namespace"],
        "team-a"
    );
    assert_eq!(
        doc["metadata"]["annotations"]["apps.open-cluster-management.io/hub-application-name"],
        "guestbook"
    );
}

#[test]
fn exclude_and_no_recurse() {
    let out = ok(&run_cmp(
        &corpus("plain"),
        &["generate", "--exclude", "crds/*,app/workloads.yaml"],
        &[
            ("ARGOCD_APP_NAME", "a"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "c1"),
        ],
        None,
    ));
    let kinds: Vec<String> = documents(&out)[0]["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["kind"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(kinds, ["Namespace", "ConfigMap", "Service", "Deployment"]);
    let out = ok(&run_cmp(
        &corpus("plain"),
        &["generate"],
        &[
            ("ARGOCD_APP_NAME", "a"),
            ("ARGOCD_ENV_TARGET_CLUSTER", "c1"),
            ("ARGOCD_ENV_RECURSE", "false"),
        ],
        None,
    ));
    let manifests = documents(&out)[0]["spec"]["workload"]["manifests"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(manifests, 1, "only namespace.yaml at the top level");
}

#[test]
fn in_process_entry_point_buffers_output() {
    let args = CmpArgs {
        command: CmpCommand::Generate(Box::new(GenerateArgs {
            source_dir: corpus("bad"),
            app_name: Some("a".into()),
            target_cluster: vec!["c1".into()],
            ..Default::default()
        })),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with_io(args, &mut std::io::empty(), &mut out, &mut err);
    assert_eq!(code, std::process::ExitCode::FAILURE);
    assert!(
        out.is_empty(),
        "nothing on stdout even though some files are valid"
    );
    assert!(String::from_utf8(err).unwrap().contains("document"));

    let args = CmpArgs {
        command: CmpCommand::Generate(Box::new(GenerateArgs {
            source_dir: corpus("multidoc"),
            app_name: Some("a".into()),
            target_cluster: vec!["c1".into()],
            ..Default::default()
        })),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        run_with_io(args, &mut std::io::empty(), &mut out, &mut err),
        std::process::ExitCode::SUCCESS
    );
    assert!(err.is_empty());
    assert_eq!(documents(&String::from_utf8(out).unwrap()).len(), 1);
}
