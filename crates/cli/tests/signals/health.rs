//! The agent's `/healthz` and `/readyz` as argocd-agent's `healthzHandler`: 503 unless a stream
//! to the principal is up — through the real binaries, before the principal exists, while it
//! serves, and after it went away. And `/metrics` as the peer's: every family it registers as a
//! plain counter or gauge is there from the start.

use std::io::{Read, Write};
use std::net::SocketAddr;

use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// The peer's plain (unlabelled) counters and gauges (internal/metrics/metrics.go), and
/// `argocd_agent_build_info`.
const PRINCIPAL_FAMILIES: &[&str] = &[
    "argocd_principal_connected_agents",
    "principal_agent_avg_connection_time",
    "principal_applications_created",
    "principal_applications_updated",
    "principal_applications_deleted",
    "principal_app_projects_created",
    "principal_app_projects_updated",
    "principal_app_projects_deleted",
    "principal_repositories_created",
    "principal_repositories_updated",
    "principal_repositories_deleted",
    "argocd_principal_appsets_created",
    "argocd_principal_appsets_updated",
    "argocd_principal_appsets_deleted",
    "argocd_principal_gpg_keys_count",
    "principal_events_received",
    "principal_events_sent",
    "argocd_agent_build_info",
];
const AGENT_FAMILIES: &[&str] = &[
    "agent_events_received",
    "agent_events_sent",
    "argocd_agent_connection_status",
    "argocd_agent_connection_start_timestamp_seconds",
    "argocd_agent_connections_total",
    "argocd_agent_auth_failures_total",
    "argocd_agent_resource_proxy_requests_total",
    "argocd_agent_resource_proxy_errors_total",
    "argocd_agent_build_info",
];

/// The samples of family `name` in a Prometheus text exposition: `(labels, value)`.
pub(crate) fn samples(body: &str, name: &str) -> Vec<(String, f64)> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => {
                    let (labels, v) = r.split_once("} ")?;
                    (labels.to_string(), v)
                }
                None => (String::new(), rest.strip_prefix(' ')?),
            };
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// `(status, body)` of `GET <path>` on the admin port.
pub(crate) fn get(port: u16, path: &str) -> (u16, String) {
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
    // every plain family of the peer is exposed before anything happened
    let (code, body) = get(metrics, "/metrics");
    assert_eq!(code, 200);
    for name in AGENT_FAMILIES {
        let s = samples(&body, name);
        assert!(
            !s.is_empty(),
            "{name} missing from the agent's /metrics:\n{body}"
        );
        let want = if *name == "argocd_agent_build_info" {
            1.0
        } else {
            0.0
        };
        assert!(s.iter().all(|(_, v)| *v == want), "{name}: {s:?}");
    }

    // 2. the principal comes up: the agent connects
    let principal_admin = free_port();
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
            format!("--healthz-port={principal_admin}"),
            format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
            "--enable-resource-proxy=false".into(),
        ],
        Some(&kubeconfig),
    );
    // the line after the stream is up (an earlier one logs the principal's version)
    agent.wait_for_line("mode=\"managed\"");
    assert_eq!(get(healthz, "/healthz"), (200, "ok".to_string()));
    let (_, body) = get(principal_admin, "/metrics");
    for name in PRINCIPAL_FAMILIES {
        assert!(
            !samples(&body, name).is_empty(),
            "{name} missing from the principal's /metrics:\n{body}"
        );
    }
    for name in [
        "argocd_principal_appsets_created",
        "argocd_principal_gpg_keys_count",
    ] {
        assert_eq!(samples(&body, name), [(String::new(), 0.0)], "{name}");
    }
    let (_, body) = get(metrics, "/metrics");
    assert_eq!(
        samples(&body, "argocd_agent_connection_status"),
        [(String::new(), 1.0)]
    );
    assert_eq!(
        samples(&body, "argocd_agent_connections_total"),
        [(String::new(), 1.0)]
    );
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
