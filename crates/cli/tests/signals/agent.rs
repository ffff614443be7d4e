//! `argocd-pull principal` and `argocd-pull agent`.

use std::net::SocketAddr;
use std::path::Path;

use crate::{Proc, demo_hub, free_port, run, temp_dir};

fn agent_args(pki: &Path, server: SocketAddr, healthz: u16) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "agent".into(),
        format!("--server-address={}", server.ip()),
        format!("--server-port={}", server.port()),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        "--namespace=edge-local".into(),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f("edge.crt")),
        format!("--tls-client-key={}", f("edge.key")),
        "--metrics-port=0".into(),
        format!("--healthz-port={healthz}"),
    ]
}

#[test]
fn principal_and_agent_exit_0_within_10s_on_sigterm_and_sigint_whatever_the_connections() {
    let dir = temp_dir("agent");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);

    // a Kubernetes API for both components
    let hub = demo_hub(&kubeconfig);

    // 1. an agent that cannot reach its principal (nothing listens there)
    let nowhere: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let lonely = Proc::spawn(
        "lonely-agent",
        &agent_args(&pki, nowhere, free_port()),
        Some(&kubeconfig),
    );
    lonely.wait_for_line("connection to principal failed");
    let (st, took) = lonely.stop("TERM");
    assert_eq!(st.code(), Some(0), "agent without principal: {st:?}");
    eprintln!("agent without a principal stopped in {took:?}");

    // 2. a principal with a connected agent: SIGINT the principal, then SIGTERM the agent that
    //    lost it
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let f = |n: &str| pki.join(n).display().to_string();
    let principal = Proc::spawn(
        "principal",
        &[
            // every level: the secrets check below reads all of it
            "--log-level=trace".into(),
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
            // the Redis proxy (on by default, as the peer) on a free port, not the shared 6379
            format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
        ],
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let mut args = vec!["--log-level=trace".to_string()];
    args.extend(agent_args(&pki, grpc, free_port()));
    let agent = Proc::spawn("agent", &args, Some(&kubeconfig));
    // the principal logs each agent that opens its event stream
    principal.wait_for_line("agent subscribed");
    let (principal_log, agent_log) = (principal.log.clone(), agent.log.clone());
    let (st, took) = principal.stop("INT");
    assert_eq!(
        st.code(),
        Some(0),
        "principal with a connected agent: {st:?}"
    );
    eprintln!("principal with a connected agent stopped in {took:?}");
    let (st, took) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0), "agent that lost its principal: {st:?}");
    eprintln!("agent that lost its principal stopped in {took:?}");

    // No secret in any log line, at trace level: not the private keys, not a JWT (the agent
    // logs in with mTLS and gets access/refresh tokens), not an Authorization header.
    let key_lines: Vec<String> = ["jwt.key", "principal.key", "edge.key", "ca.key"]
        .iter()
        .filter_map(|k| std::fs::read_to_string(pki.join(k)).ok())
        .flat_map(|pem| {
            pem.lines()
                .filter(|l| !l.starts_with("-----") && l.len() >= 40)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(!key_lines.is_empty(), "the PKI has private keys");
    for (who, log) in [("principal", principal_log), ("agent", agent_log)] {
        let log = log.lock().unwrap();
        assert!(log.len() > 20, "{who} logged at trace level");
        for line in log.iter() {
            for needle in ["PRIVATE KEY", "eyJhbGci", "Bearer ", "authorization: "] {
                assert!(
                    !line.contains(needle),
                    "{who} logged a secret ({needle:?}): {line}"
                );
            }
            for k in &key_lines {
                assert!(
                    !line.contains(&k[..40]),
                    "{who} logged key material: {line}"
                );
            }
        }
    }

    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}
