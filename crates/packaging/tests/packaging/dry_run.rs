//! Every chart's default render accepted by a real API server (`kubectl apply --dry-run=server`).
//! Env-gated: ARGOCD_PULL_E2E_HUB_KUBECONFIG (the real env's hub, /work/shared/realenv).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::helm;

#[test]
fn default_renders_pass_server_side_dry_run() {
    let Ok(kubeconfig) = std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG") else {
        println!("SKIP: server-side dry-run of the charts: ARGOCD_PULL_E2E_HUB_KUBECONFIG not set");
        return;
    };
    let Some(h) = helm::helm("server-side dry-run") else {
        return;
    };
    let kube_version =
        std::env::var("ARGOCD_PULL_E2E_KUBE_VERSION").unwrap_or_else(|_| "v1.24.1".into());
    for chart in ["argocd-pull", "argocd-pull-principal", "argocd-pull-agent"] {
        let yaml = h
            .template_raw(
                chart,
                chart,
                "default",
                &["--include-crds", "--kube-version", &kube_version],
            )
            .unwrap_or_else(|e| panic!("{chart}: {e}"));
        let mut child = Command::new("kubectl")
            .args([
                "apply",
                "--dry-run=server",
                "-f",
                "-",
                "--kubeconfig",
                &kubeconfig,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(yaml.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{chart}: the API server rejected the default render:\n{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let accepted = stdout
            .lines()
            .filter(|l| l.contains("(server dry run)"))
            .count();
        assert_eq!(
            accepted,
            helm::parse(&yaml).len(),
            "{chart}: every object accepted:\n{stdout}"
        );
        println!("{chart}: {accepted} objects accepted by the API server (dry run)");
    }
}
