//! argocd-agent flags through the binaries: each one changes what the process does.

use std::net::SocketAddr;
use std::process::Command;

use crate::{BIN, Proc, demo_hub, free_port, run, temp_dir};

pub(crate) fn principal_args(
    pki: &std::path::Path,
    grpc: SocketAddr,
    extra: &[&str],
) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    let mut v: Vec<String> = vec![
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
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

pub(crate) fn agent_args(pki: &std::path::Path, grpc: SocketAddr, extra: &[&str]) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    let mut v: Vec<String> = vec![
        "agent".into(),
        format!("--server-address={}", grpc.ip()),
        format!("--server-port={}", grpc.port()),
        "--server-name=localhost".into(),
        "--agent-mode=managed".into(),
        "--namespace=edge-local".into(),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f("edge.crt")),
        format!("--tls-client-key={}", f("edge.key")),
        "--metrics-port=0".into(),
        format!("--healthz-port={}", free_port()),
    ];
    // an extra `--flag=value` replaces the default one
    for e in extra {
        if let Some((flag, _)) = e.split_once('=') {
            v.retain(|d| !d.starts_with(&format!("{flag}=")));
        }
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

#[test]
fn client_cert_subject_match_refuses_an_agent_whose_common_name_is_not_its_name() {
    let dir = temp_dir("subject-match");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);
    // the identity regex names the agent "ed" while its certificate's CN is "edge"
    let auth = "--auth=mtls:subject:^CN=(ed)ge$";

    // without the flag the agent "ed" works
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let principal = Proc::spawn(
        "principal",
        &principal_args(&pki, grpc, &[auth]),
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn("agent", &agent_args(&pki, grpc, &[]), Some(&kubeconfig));
    agent.wait_for_line("mode=\"managed\"");
    drop(agent);
    drop(principal);

    // with it (env, as the peer's chart sets it) every authenticated call is refused
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = principal_args(&pki, grpc, &[auth]);
    args.push("--client-cert-subject-match".into());
    let principal = Proc::spawn("principal", &args, Some(&kubeconfig));
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn("agent", &agent_args(&pki, grpc, &[]), Some(&kubeconfig));
    principal.wait_for_line("the TLS subject 'edge' does not match agent name 'ed'");
    agent.wait_for_line("invalid authentication data");
    assert!(
        !agent
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("mode=\"managed\"")),
        "the agent never got a stream"
    );
}

#[test]
fn redis_creds_dir_path_is_read_at_startup() {
    let dir = temp_dir("redis-creds");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);
    let missing = dir.join("no-creds");
    std::fs::create_dir_all(&missing).unwrap();
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    for (who, args) in [
        ("agent", agent_args(&pki, grpc, &[])),
        ("principal", principal_args(&pki, grpc, &[])),
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("REDIS_CREDS_DIR_PATH", &missing)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{who}: {err}");
        assert!(
            err.contains(&format!(
                "Failed loading Redis credentials: failed reading password from '{}/auth'",
                missing.display()
            )),
            "{who}: {err}"
        );
        // a password flag beside the directory is a contradiction
        let out = Command::new(BIN)
            .args(&args)
            .arg("--redis-password=x")
            .env("KUBECONFIG", &kubeconfig)
            .env("REDIS_CREDS_DIR_PATH", &missing)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot be combined"), "{who}: {err}");
    }
}

#[test]
fn informer_sync_timeout_bounds_the_initial_cache_fill() {
    let dir = temp_dir("informer-sync");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    // an API server that accepts connections and never answers
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = hole.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in hole.incoming() {
            held.push(c);
        }
    });
    let kubeconfig = dir.join("hole.kubeconfig");
    crate::write_kubeconfig(&kubeconfig, &format!("http://127.0.0.1:{port}"));
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let t0 = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(agent_args(&pki, grpc, &[]))
        .env("KUBECONFIG", &kubeconfig)
        .env("ARGOCD_AGENT_INFORMER_SYNC_TIMEOUT", "2s")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("unable to sync Application informer")
            && err.contains("within 2s")
            && err.contains("--informer-sync-timeout"),
        "{err}"
    );
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(9),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn tls_ciphersuites_restrict_what_principal_and_agent_negotiate() {
    let dir = temp_dir("ciphers");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);

    // `list` prints Go's names and exits 0; an unknown name names the valid ones
    let out = Command::new(BIN)
        .args(["agent", "--server-address=x", "--tls-ciphersuites=list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.starts_with("Available TLS cipher suites:\n"), "{list}");
    assert!(
        list.contains("  TLS_AES_256_GCM_SHA384\n    Supported versions: TLS 1.3"),
        "{list}"
    );
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let out = Command::new(BIN)
        .args(principal_args(
            &pki,
            grpc,
            &["--tls-ciphersuites=TLS_RSA_WITH_RC4_128_SHA,TLS_NOPE"],
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--tls-ciphersuites: cipher suite TLS_RSA_WITH_RC4_128_SHA is not supported by argocd-pull"), "{err}");
    assert!(err.contains("valid names: TLS_AES_128_GCM_SHA256"), "{err}");

    let _hub = demo_hub(&kubeconfig);
    let principal = Proc::spawn(
        "principal",
        &principal_args(&pki, grpc, &["--tls-ciphersuites=TLS_AES_256_GCM_SHA384"]),
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    // no suite in common: the handshake fails
    let agent = Proc::spawn(
        "agent-chacha",
        &agent_args(
            &pki,
            grpc,
            &["--tls-ciphersuites=TLS_CHACHA20_POLY1305_SHA256"],
        ),
        Some(&kubeconfig),
    );
    let line = agent.wait_for_line("connection to principal failed");
    assert!(!line.contains("mode="), "{line}");
    drop(agent);
    // the principal's suite: connected
    let agent = Proc::spawn(
        "agent-aes256",
        &agent_args(&pki, grpc, &["--tls-ciphersuites=TLS_AES_256_GCM_SHA384"]),
        Some(&kubeconfig),
    );
    agent.wait_for_line("mode=\"managed\"");
}

#[test]
fn insecure_tls_accepts_a_principal_certificate_the_agent_cannot_verify() {
    let dir = temp_dir("insecure-tls");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let other = dir.join("other-pki");
    run(&["pki", "--dir", other.to_str().unwrap()]);
    let _hub = demo_hub(&kubeconfig);
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let principal = Proc::spawn(
        "principal",
        &principal_args(&pki, grpc, &[]),
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let wrong_ca = format!("--root-ca-path={}", other.join("ca.crt").display());
    // a root CA that did not sign the principal's certificate, and a name not in it
    let agent = Proc::spawn(
        "agent-verifying",
        &agent_args(&pki, grpc, &[&wrong_ca, "--server-name=wrong.example"]),
        Some(&kubeconfig),
    );
    agent.wait_for_line("connection to principal failed");
    drop(agent);
    // --insecure-tls: no root CA is read (the path does not exist) and nothing is verified
    let agent = Proc::spawn(
        "agent-insecure",
        &agent_args(
            &pki,
            grpc,
            &[
                "--root-ca-path=/nonexistent/ca.crt",
                "--server-name=wrong.example",
                "--insecure-tls",
            ],
        ),
        Some(&kubeconfig),
    );
    agent.wait_for_line("Not verifying remote TLS certificate");
    agent.wait_for_line("mode=\"managed\"");
}

/// `--max-events-in-flight` (`ARGOCD_PRINCIPAL_MAX_EVENTS_IN_FLIGHT`) takes 1 to 10,000; what it
/// does to the stream is tested against the peer agent (interop
/// `a_principal_sends_no_more_than_its_window_of_unacknowledged_events`).
#[test]
fn max_events_in_flight_outside_its_range_is_refused_naming_the_flag() {
    for (how, value) in [("flag", "0"), ("env", "10001")] {
        let mut c = Command::new(BIN);
        c.arg("principal");
        match how {
            "flag" => c.arg(format!("--max-events-in-flight={value}")),
            _ => c.env("ARGOCD_PRINCIPAL_MAX_EVENTS_IN_FLIGHT", value),
        };
        let out = c.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {err}");
        assert!(
            err.contains("--max-events-in-flight") && err.contains("1..=10000"),
            "{how}: {err}"
        );
    }
}
