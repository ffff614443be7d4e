//! `--pprof-port` (argocd-agent's `ARGOCD_PRINCIPAL_PPROF_PORT` / `ARGOCD_AGENT_PPROF_PORT`): a
//! CPU profile in pprof's format on 127.0.0.1, through the real binaries.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;

use pprof::protos::Message;

use crate::flags::{agent_args, principal_args};
use crate::{BIN, Proc, demo_hub, free_port, run, temp_dir};

/// `(status, body)` of `GET <path>` on 127.0.0.1:`port`.
fn get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete HTTP response");
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, out[end + 4..].to_vec())
}

/// A one-second CPU profile from the process on `port`: gzip-compressed pprof protobuf sampled
/// at Go's 100 Hz, as `go tool pprof` reads it.
fn assert_cpu_profile(who: &str, port: u16) {
    let (status, body) = get(port, "/debug/pprof/profile?seconds=1");
    assert_eq!(status, 200, "{who}: {}", String::from_utf8_lossy(&body));
    assert_eq!(&body[..2], &[0x1f, 0x8b], "{who}: gzip, as Go writes it");
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_end(&mut raw)
        .unwrap();
    let p = pprof::protos::Profile::decode(&raw[..]).expect("a pprof Profile message");
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = p.sample_type.iter().map(|t| (s(t.ty), s(t.unit))).collect();
    assert!(types.contains(&("cpu", "nanoseconds")), "{who}: {types:?}");
    let period = p.period_type.as_ref().expect("period type");
    assert_eq!((s(period.ty), s(period.unit)), ("cpu", "nanoseconds"));
    assert_eq!(p.period, 10_000_000, "{who}: 100 Hz");
    assert!(
        p.duration_nanos >= 1_000_000_000,
        "{who}: {}",
        p.duration_nanos
    );
    // the Go-only profiles are refused with what is served
    let (status, body) = get(port, "/debug/pprof/heap");
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, 404, "{who}: {body}");
    assert!(
        body.contains("/debug/pprof/profile?seconds=N"),
        "{who}: {body}"
    );
}

#[test]
fn pprof_port_serves_a_cpu_profile_on_loopback_and_a_taken_port_is_fatal() {
    let dir = temp_dir("pprof");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);

    // the principal: the flag
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let port = free_port();
    let principal = Proc::spawn(
        "principal",
        &principal_args(&pki, grpc, &[&format!("--pprof-port={port}")]),
        Some(&kubeconfig),
    );
    principal.wait_for_line(&format!("Starting pprof server on 127.0.0.1:{port}"));
    principal.wait_for_line("principal listening");
    assert_cpu_profile("principal", port);

    // the agent: the peer's environment variable
    let port = free_port();
    let agent = Proc::spawn_env(
        "agent",
        &agent_args(&pki, grpc, &[]),
        Some(&kubeconfig),
        &[("ARGOCD_AGENT_PPROF_PORT", &port.to_string())],
    );
    agent.wait_for_line(&format!("Starting pprof server on 127.0.0.1:{port}"));
    assert_cpu_profile("agent", port);
    drop(agent);
    drop(principal);

    // a port in use ends the command (the peer's Fatal), naming the flag
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    for (who, args) in [
        ("agent", agent_args(&pki, grpc, &[])),
        ("principal", principal_args(&pki, grpc, &[])),
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .arg(format!("--pprof-port={port}"))
            .env("KUBECONFIG", &kubeconfig)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{who}: {err}");
        assert!(
            err.contains(&format!(
                "Error starting pprof server: --pprof-port {port}: cannot listen on 127.0.0.1:{port}"
            )),
            "{who}: {err}"
        );
    }
}
