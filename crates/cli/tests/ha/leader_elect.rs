//! Issue 29: `--leader-elect` with TLS material from files and the cluster from `KUBECONFIG`.

use crate::{Proc, demo_hub, free_port, http_get, pki, temp_dir};

#[test]
fn leader_elect_with_tls_files_takes_its_cluster_from_kubeconfig() {
    let dir = temp_dir("leader-elect");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki_dir = dir.join("pki");
    pki(&pki_dir, "edge");
    let hub = demo_hub("hub", &kubeconfig);
    let f = |n: &str| pki_dir.join(n).display().to_string();
    let healthz = free_port();
    // no --kubeconfig, no Secrets: the client must come from KUBECONFIG, as for every mode
    let principal = Proc::spawn(
        "principal",
        &[
            "principal".into(),
            "--leader-elect".into(),
            "--ha-replica-name=principal-0".into(),
            "--ha-advertise-address=127.0.0.1".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={}", free_port()),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            "--namespace=argocd".into(),
            "--enable-resource-proxy=false".into(),
            "--disable-redis-proxy".into(),
            "--metrics-port=0".into(),
            format!("--healthz-port={healthz}"),
        ],
        &[("KUBECONFIG", &kubeconfig)],
    );
    principal.wait_for_line("this replica holds the Lease");
    let (code, body) = http_get(healthz, "/healthz").expect("healthz answers");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("role: active"), "{body}");
    drop(principal);
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}
