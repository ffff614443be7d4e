//! The agent's `/healthz` and `/readyz` as argocd-agent's `healthzHandler`: 503 unless a stream
//! to the principal is up — through the real binaries, before the principal exists, while it
//! serves, and after it went away.

use std::io::{Read, Write};
use std::net::SocketAddr;

use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// `(status, body)` of `GET <path>` on the admin port.
fn get(port: u16, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

#[test]
fn agent_healthz_is_503_unless_connected_to_its_principal() {
    let dir = temp_dir("health");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);
    let f = |n: &str| pki.join(n).display().to_string();
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (healthz, metrics) = (free_port(), free_port());

    // 1. no principal yet
    let agent = Proc::spawn(
        "agent",
        &[
            "agent".into(),
            format!("--server-address={}", grpc.ip()),
            format!("--server-port={}", grpc.port()),
            "--server-name=localhost".into(),
            "--agent-mode=managed".into(),
            "--namespace=edge-local".into(),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--tls-client-cert={}", f("edge.crt")),
            format!("--tls-client-key={}", f("edge.key")),
            format!("--metrics-port={metrics}"),
            format!("--healthz-port={healthz}"),
        ],
        Some(&kubeconfig),
    );
    agent.wait_for_line("connection to principal failed");
    let (code, body) = get(healthz, "/healthz");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("not connected to the principal"), "{body}");
    assert_eq!(get(healthz, "/readyz").0, 503);
    assert_eq!(get(metrics, "/healthz").0, 503, "same on the metrics port");

    // 2. the principal comes up: the agent connects
    let principal = Proc::spawn(
        "principal",
        &[
            "principal".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={}", grpc.port()),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            "--namespace=argocd".into(),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
            format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
            "--enable-resource-proxy=false".into(),
        ],
        Some(&kubeconfig),
    );
    agent.wait_for_line("connected to principal");
    assert_eq!(get(healthz, "/healthz"), (200, "ok".to_string()));
    assert_eq!(get(healthz, "/readyz").0, 200);

    // 3. the principal goes away: 503 again once the agent noticed
    let (st, _) = principal.stop("TERM");
    assert_eq!(st.code(), Some(0));
    agent.wait_for_line("connection to principal failed");
    assert_eq!(get(healthz, "/healthz").0, 503);
    assert_eq!(get(healthz, "/readyz").0, 503);
    let (st, _) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0));
}
