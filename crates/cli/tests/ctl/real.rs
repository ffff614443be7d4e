//! Env-gated: the ctl against the real clusters (`ARGOCD_PULL_E2E_HUB_KUBECONFIG`,
//! `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`): PKI, agent, JWT, blocklist and validate in fresh
//! namespaces of the hub (principal) and the managed cluster (agent), deleted afterwards.

use std::path::Path;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::config::{Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};

use crate::Env;

/// One kubeconfig with contexts `hub` and `managed` from the two files (both name their
/// context `c` in the real env, so they cannot simply be merged through KUBECONFIG).
fn combined(hub: &Path, managed: &Path) -> Kubeconfig {
    let mut out = Kubeconfig::default();
    for (name, path) in [("hub", hub), ("managed", managed)] {
        let kc = Kubeconfig::read_from(path).unwrap();
        let ctx_name = kc.current_context.clone().unwrap();
        let ctx = kc
            .contexts
            .iter()
            .find(|c| c.name == ctx_name)
            .and_then(|c| c.context.clone())
            .unwrap();
        let cluster = kc
            .clusters
            .iter()
            .find(|c| c.name == ctx.cluster)
            .unwrap()
            .clone();
        let user = kc
            .auth_infos
            .iter()
            .find(|u| Some(&u.name) == ctx.user.as_ref())
            .unwrap()
            .clone();
        out.clusters.push(NamedCluster {
            name: name.into(),
            ..cluster
        });
        out.auth_infos.push(NamedAuthInfo {
            name: name.into(),
            ..user
        });
        let mut ctx = ctx.clone();
        ctx.cluster = name.into();
        ctx.user = Some(name.into());
        out.contexts.push(NamedContext {
            name: name.into(),
            context: Some(ctx),
            ..Default::default()
        });
    }
    out.current_context = Some("hub".into());
    out
}

async fn client(kc: &Kubeconfig, ctx: &str) -> kube::Client {
    let opts = kube::config::KubeConfigOptions {
        context: Some(ctx.into()),
        ..Default::default()
    };
    let cfg = kube::Config::from_custom_kubeconfig(kc.clone(), &opts)
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

#[test]
fn real_clusters_ctl_pki_agent_jwt_and_validate() {
    let (Ok(hub), Ok(managed)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        eprintln!(
            "SKIP: ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_MANAGED_KUBECONFIG are not set (real clusters)"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = combined(Path::new(&hub), Path::new(&managed));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_saphyr::to_string(&kc).unwrap()).unwrap();
    let env = Env {
        kubeconfig: path,
        home: dir.path().to_path_buf(),
    };
    let suffix = format!("{:08x}", std::process::id() ^ 0x05ee_dc71);
    let (pns, ans, agent) = (
        format!("e2e-ctl-p-{suffix}"),
        format!("e2e-ctl-a-{suffix}"),
        format!("e2e-ctl-{suffix}"),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (hc, mc) = rt.block_on(async { (client(&kc, "hub").await, client(&kc, "managed").await) });
    for (c, ns) in [(&hc, &pns), (&mc, &ans), (&hc, &agent)] {
        rt.block_on(async {
            let n: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
            Api::<Namespace>::all(c.clone())
                .create(&Default::default(), &n)
                .await
                .unwrap();
        });
    }
    let p = [
        "--principal-context=hub".to_string(),
        format!("--principal-namespace={pns}"),
    ];
    let a = [
        "--agent-context=managed".to_string(),
        format!("--agent-namespace={ans}"),
    ];
    let run = |extra: &[&str]| {
        let mut args: Vec<&str> = p.iter().chain(a.iter()).map(String::as_str).collect();
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(&["pki", "init", "--key-algorithm=ecdsa-p256"]).ok();
        run(&["pki", "issue", "principal", "--key-algorithm=ecdsa-p256"]).ok();
        run(&[
            "pki",
            "issue",
            "resource-proxy",
            "--dns=rp",
            "--key-algorithm=ecdsa-p256",
        ])
        .ok();
        assert_eq!(
            run(&[
                "pki",
                "issue",
                "agent",
                &agent,
                "--key-algorithm=ecdsa-p256"
            ])
            .ok(),
            format!(
                "Secret {ans}/argocd-agent-client-tls created\nAgent CA secret {ans}/argocd-agent-ca created\n"
            )
        );
        run(&["jwt", "create-key", "--key-size=2048"]).ok();
        assert_eq!(
            run(&["agent", "create", &agent, "--key-algorithm=ecdsa-p256"]).ok(),
            format!("Agent {agent} created\n")
        );
        assert_eq!(run(&["agent", "list"]).ok(), format!("{agent}\n"));
        let fp: serde_json::Value =
            serde_json::from_str(run(&["agent", "inspect", &agent]).ok()).unwrap();
        let fp = fp["fingerprint"].as_str().unwrap().to_string();
        run(&["blocklist", "tls", "add", &fp]).ok();
        assert_eq!(
            run(&["blocklist", "tls", "list"]).ok(),
            format!("FINGERPRINT\n{fp}\n")
        );
        let v = run(&["validate", "agent"]);
        // no Argo CD is installed in the real env: those checks fail, the PKI ones pass
        assert_eq!(v.code, 1, "{v:?}");
        for ok in [
            format!(
                "Verifying principal public CA certificate exists and is valid ({pns}/argocd-agent-ca): ✅"
            ),
            format!(
                "Verifying JWT signing key exists and is parseable ({pns}/argocd-agent-jwt): ✅"
            ),
            "Verifying agent cluster secrets contain correct query parameter on server url: ✅"
                .to_string(),
            "Verifying namespace on principal matches agent certificate subject: ✅".to_string(),
            "Verifying agent mTLS certificate is signed by principal CA certificate: ✅"
                .to_string(),
        ] {
            assert!(v.stdout.contains(&ok), "{ok}\n{v:?}");
        }
        assert!(
            v.stdout
                .contains("network policy for argo cd redis does not exist"),
            "{v:?}"
        );
    }));
    for (c, ns) in [(&hc, &pns), (&mc, &ans), (&hc, &agent)] {
        rt.block_on(async {
            let _ = Api::<Namespace>::all(c.clone())
                .delete(ns, &Default::default())
                .await;
        });
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
