//! The demo on a small fleet.

use std::process::ExitCode;
use std::time::Duration;

mod models;

use argocd_pull_demo::{DemoArgs, DemoModel, generate_application, parse_duration, run};
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    demo: DemoArgs,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_fleet_converges_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc.yaml");
    let args = DemoArgs {
        clusters: 2,
        apps: 2,
        kubeconfig_out: Some(kubeconfig.clone()),
        timeout: Duration::from_secs(60),
        sync_delay: Duration::from_millis(20),
        ..Default::default()
    };
    let code = run(args).await.unwrap();
    assert_eq!(code, ExitCode::SUCCESS);
    let kc = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(kc.contains("http://127.0.0.1:"), "{kc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let args = DemoArgs {
        clusters: 1,
        apps: 1,
        kubeconfig_out: Some(dir.path().join("kc.yaml")),
        timeout: Duration::from_millis(1),
        sync_delay: Duration::from_secs(30),
        ..Default::default()
    };
    assert_eq!(run(args).await.unwrap(), ExitCode::from(1));
}

#[test]
fn flags_defaults_and_errors() {
    let cli = Cli::try_parse_from(["demo"]).unwrap();
    assert_eq!(cli.demo.clusters, 5);
    assert_eq!(cli.demo.apps, 2);
    assert_eq!(cli.demo.model, DemoModel::Basic);
    assert_eq!(cli.demo.timeout, Duration::from_secs(60));
    let cli = Cli::try_parse_from([
        "demo",
        "--clusters",
        "3",
        "--timeout",
        "2m",
        "--keep-running",
    ])
    .unwrap();
    assert_eq!(
        (cli.demo.clusters, cli.demo.timeout, cli.demo.keep_running),
        (3, Duration::from_secs(120), true)
    );
    let e = Cli::try_parse_from(["demo", "--timeout", "soon"])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("soon"), "{e}");
    assert!(!cli.demo.with_failure);
    let cli = Cli::try_parse_from(["demo", "--model", "agent", "--with-failure"]).unwrap();
    assert_eq!(
        (cli.demo.model, cli.demo.with_failure),
        (DemoModel::Agent, true)
    );
    let e = Cli::try_parse_from(["demo", "--model", "push"])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("push") && e.contains("autonomous"), "{e}");
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert!(parse_duration("5d").unwrap_err().contains("5d"));
}

#[test]
fn generated_application_matches_the_applicationset_shape() {
    let mut set: argocd_pull_api::argocd::ApplicationSet =
        serde_json::from_value(argocd_pull_demo::application_set("guestbook")).unwrap();
    set.metadata.uid = Some("uid-1".into());
    let app = generate_application(&set, "cluster7").unwrap();
    assert_eq!(app["metadata"]["name"], "cluster7-guestbook-app");
    assert_eq!(
        app["metadata"]["labels"]["apps.open-cluster-management.io/pull-to-ocm-managed-cluster"],
        "true"
    );
    let ann = &app["metadata"]["annotations"];
    assert_eq!(ann["argocd.argoproj.io/skip-reconcile"], "true");
    assert_eq!(
        ann["apps.open-cluster-management.io/ocm-managed-cluster"],
        "cluster7"
    );
    assert_eq!(
        ann["apps.open-cluster-management.io/ocm-managed-cluster-app-namespace"],
        "argocd"
    );
    assert_eq!(
        app["spec"]["destination"]["server"],
        "https://kubernetes.default.svc"
    );
    let owner = &app["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["uid"].as_str()
        ),
        (Some("ApplicationSet"), Some("guestbook-app"), Some("uid-1"))
    );
    let typed: argocd_pull_api::argocd::Application = serde_json::from_value(app).unwrap();
    assert_eq!(typed.owning_application_set(), Some("guestbook-app"));
}
