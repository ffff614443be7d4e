//! `grpc_server_*` on the principal's and `grpc_client_*` on the agent's `/metrics`, and
//! `process_*` on both, as argocd-agent exposes them (go-grpc-middleware's
//! providers/prometheus, client_golang's process collector) — through the real binaries.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::health::{get, samples};
use crate::{Proc, demo_hub, free_port, run, temp_dir};

const PROCESS_FAMILIES: &[&str] = &[
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
    "process_resident_memory_bytes",
    "process_start_time_seconds",
    "process_network_receive_bytes_total",
    "process_network_transmit_bytes_total",
];

const SUBSCRIBE: &str = "grpc_method=\"Subscribe\",grpc_service=\"eventstreamapi.EventStream\",grpc_type=\"bidi_stream\"";
const AUTHENTICATE: &str =
    "grpc_method=\"Authenticate\",grpc_service=\"authapi.Authentication\",grpc_type=\"unary\"";

/// The value of `name{labels}` in `/metrics` of `port` (`None`: no such series).
fn value(port: u16, name: &str, labels: &str) -> Option<f64> {
    samples(&get(port, "/metrics").1, name)
        .into_iter()
        .find(|(l, _)| l == labels)
        .map(|(_, v)| v)
}

/// `(code, value)` of every `grpc_*_handled_total` series of a call.
fn handled(port: u16, side: &str, call: &str) -> Vec<(String, f64)> {
    samples(
        &get(port, "/metrics").1,
        &format!("grpc_{side}_handled_total"),
    )
    .into_iter()
    .filter_map(|(l, v)| {
        let rest = l.strip_prefix("grpc_code=\"")?;
        let (code, call_labels) = rest.split_once("\",")?;
        (call_labels == call).then(|| (code.to_string(), v))
    })
    .collect()
}

/// Waits (scraping) until a call of `side` has ended with some code; that code.
fn ended(port: u16, side: &str, call: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done: Vec<_> = handled(port, side, call)
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .collect();
        if !done.is_empty() {
            assert_eq!(done.len(), 1, "one call, one end: {done:?}");
            assert_eq!(done[0].1, 1.0, "{done:?}");
            return done[0].0.clone();
        }
        assert!(Instant::now() < deadline, "{side} {call} never ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn assert_process_metrics(port: u16, who: &str) {
    let body = get(port, "/metrics").1;
    for name in PROCESS_FAMILIES {
        let s = samples(&body, name);
        assert_eq!(s.len(), 1, "{name} on the {who}'s /metrics:\n{body}");
        assert!(s[0].1 >= 0.0, "{name}: {s:?}");
    }
    assert!(samples(&body, "process_resident_memory_bytes")[0].1 > 1e6);
    assert!(samples(&body, "process_open_fds")[0].1 >= 3.0);
    let start = samples(&body, "process_start_time_seconds")[0].1;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        start <= now + 1.0 && start > now - 600.0,
        "started {start}, now {now}"
    );
}

#[test]
fn grpc_and_process_metrics_are_exposed_as_the_peers() {
    let dir = temp_dir("grpc-metrics");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);
    let f = |n: &str| pki.join(n).display().to_string();
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();

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
    principal.wait_for_line("principal listening");
    let p = principal_admin;
    // 1. before any call: every method of every service at zero (the peer's InitializeMetrics)
    assert_eq!(value(p, "grpc_server_started_total", SUBSCRIBE), Some(0.0));
    let codes = handled(p, "server", SUBSCRIBE);
    assert_eq!(codes.len(), 17, "every code: {codes:?}");
    for code in ["OK", "Canceled", "Unavailable", "Unauthenticated"] {
        assert!(
            codes.contains(&(code.to_string(), 0.0)),
            "{code}: {codes:?}"
        );
    }
    for name in [
        "grpc_server_msg_received_total",
        "grpc_server_msg_sent_total",
    ] {
        assert_eq!(value(p, name, SUBSCRIBE), Some(0.0), "{name}");
    }
    assert_eq!(
        value(p, "grpc_server_handling_seconds_count", SUBSCRIBE),
        Some(0.0)
    );
    for (method, service, typ) in [
        ("Push", "eventstreamapi.EventStream", "client_stream"),
        ("Ping", "eventstreamapi.EventStream", "unary"),
        ("RefreshToken", "authapi.Authentication", "unary"),
        ("Version", "versionapi.Version", "unary"),
        (
            "StreamLogs",
            "principal.apis.logstreamapi.LogStreamService",
            "client_stream",
        ),
        (
            "StreamTerminal",
            "terminalstreamapi.TerminalStreamService",
            "bidi_stream",
        ),
    ] {
        let l = format!("grpc_method=\"{method}\",grpc_service=\"{service}\",grpc_type=\"{typ}\"");
        assert_eq!(value(p, "grpc_server_started_total", &l), Some(0.0), "{l}");
    }
    assert_process_metrics(p, "principal");

    // 2. an agent connects: its login, version and event stream are counted on both sides
    let agent_admin = free_port();
    let spawn_agent = || {
        Proc::spawn(
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
                format!("--metrics-port={agent_admin}"),
                format!("--healthz-port={}", free_port()),
            ],
            Some(&kubeconfig),
        )
    };
    let agent = spawn_agent();
    let a = agent_admin;
    agent.wait_for_line("mode=\"managed\"");
    assert_eq!(value(p, "grpc_server_started_total", SUBSCRIBE), Some(1.0));
    assert_eq!(
        value(p, "grpc_server_started_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        handled(p, "server", AUTHENTICATE)
            .into_iter()
            .filter(|(_, v)| *v > 0.0)
            .collect::<Vec<_>>(),
        [("OK".to_string(), 1.0)]
    );
    assert_eq!(
        value(p, "grpc_server_msg_received_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        value(p, "grpc_server_msg_sent_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        value(p, "grpc_server_handling_seconds_count", AUTHENTICATE),
        Some(1.0)
    );
    let version = "grpc_method=\"Version\",grpc_service=\"versionapi.Version\",grpc_type=\"unary\"";
    assert_eq!(value(p, "grpc_server_started_total", version), Some(1.0));
    // the stream is open: started, not handled
    assert!(
        handled(p, "server", SUBSCRIBE)
            .iter()
            .all(|(_, v)| *v == 0.0)
    );

    assert_eq!(
        value(a, "grpc_client_started_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        handled(a, "client", AUTHENTICATE),
        [("OK".to_string(), 1.0)],
        "the client's series appear with their first call, for the code seen"
    );
    assert_eq!(
        value(a, "grpc_client_msg_sent_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        value(a, "grpc_client_msg_received_total", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(
        value(a, "grpc_client_handling_seconds_count", AUTHENTICATE),
        Some(1.0)
    );
    assert_eq!(value(a, "grpc_client_started_total", version), Some(1.0));
    assert_eq!(value(a, "grpc_client_started_total", SUBSCRIBE), Some(1.0));
    assert!(
        handled(a, "client", SUBSCRIBE).is_empty(),
        "stream still open"
    );
    assert_process_metrics(a, "agent");

    // 3. the agent goes away: the principal's Subscribe call ends
    let (st, _) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0));
    let code = ended(p, "server", SUBSCRIBE);
    // the agent's connection closed under the open call (or it half-closed first: OK)
    assert!(["OK", "Canceled"].contains(&code.as_str()), "{code}");

    // 4. it comes back, then the principal goes away: the agent's Subscribe call ends
    let agent = spawn_agent();
    agent.wait_for_line("mode=\"managed\"");
    assert_eq!(value(p, "grpc_server_started_total", SUBSCRIBE), Some(2.0));
    let (st, _) = principal.stop("TERM");
    assert_eq!(st.code(), Some(0));
    let code = ended(a, "client", SUBSCRIBE);
    // the principal's graceful stop ends the stream with its status (a reset: Unavailable)
    assert!(["OK", "Unavailable"].contains(&code.as_str()), "{code}");
    let (st, _) = agent.stop("TERM");
    assert_eq!(st.code(), Some(0));
}
