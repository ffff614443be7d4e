//! Through the real binaries: `rest_client_*` (every Kubernetes request of the principal and the
//! agent, as client-go counts them in the peer) and `<prefix>_workqueue_*` (the send and receive
//! queues), and the peer's env-only settings `ARGOCD_AGENT_KUBE_QPS` / `ARGOCD_AGENT_KUBE_BURST`
//! (client-side throttling) and `ARGOCD_AGENT_RECV_QUEUE_SIZE` / `ARGOCD_AGENT_SEND_QUEUE_SIZE`
//! (queue bounds).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::health::{get, samples};
use crate::otlp::Hub;
use crate::{BIN, Proc, demo_hub, free_port, run, temp_dir};

/// `host:port` of the API server a kubeconfig names (the `host` label of `rest_client_*`).
fn api_host(kubeconfig: &Path) -> String {
    let kc = std::fs::read_to_string(kubeconfig).unwrap();
    let server = kc
        .lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .expect("a server in the kubeconfig")
        .trim()
        .trim_matches('"');
    server
        .split_once("://")
        .unwrap()
        .1
        .trim_end_matches('/')
        .to_string()
}

/// The value of `name{labels}` on `port`'s `/metrics` (0 when there is no such series).
fn value(port: u16, name: &str, labels: &str) -> f64 {
    samples(&get(port, "/metrics").1, name)
        .into_iter()
        .find(|(l, _)| l == labels)
        .map_or(0.0, |(_, v)| v)
}

fn principal(pki: &Path, grpc: SocketAddr, admin: u16, extra: &[&str]) -> Vec<String> {
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
        format!("--healthz-port={admin}"),
        format!("--redis-proxy-listen-address=127.0.0.1:{}", free_port()),
        "--enable-resource-proxy=false".into(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn agent(pki: &Path, grpc: SocketAddr, admin: u16, mode: &str) -> Vec<String> {
    let f = |n: &str| pki.join(n).display().to_string();
    vec![
        "agent".into(),
        format!("--server-address={}", grpc.ip()),
        format!("--server-port={}", grpc.port()),
        "--server-name=localhost".into(),
        format!("--agent-mode={mode}"),
        "--namespace=edge-local".into(),
        format!("--root-ca-path={}", f("ca.crt")),
        format!("--tls-client-cert={}", f("edge.crt")),
        format!("--tls-client-key={}", f("edge.key")),
        "--metrics-port=0".into(),
        format!("--healthz-port={admin}"),
    ]
}

/// Scrapes until `cond` holds (at most two minutes).
fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !cond() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rest_client_and_workqueue_metrics_are_exposed_as_the_peers() {
    let dir = temp_dir("kube-metrics");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    hub.create_namespace("edge-local");
    hub.create_namespace("edge");
    let host = api_host(&kubeconfig);
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();

    let (p, a) = (free_port(), free_port());
    let principal = Proc::spawn(
        "principal",
        &principal(&pki, grpc, p, &[]),
        Some(&kubeconfig),
    );
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn("agent", &agent(&pki, grpc, a, "managed"), Some(&kubeconfig));
    principal.wait_for_line("agent subscribed");
    // the agent's queue pair exists from its start, the principal's once the agent is known
    for (port, q) in [
        (a, "argocd_agent_workqueue"),
        (p, "argocd_principal_workqueue"),
    ] {
        let name = if port == a { "default" } else { "edge" };
        for side in ["send", "recv"] {
            let l = format!("queue=\"{name}-{side}\"");
            let body = get(port, "/metrics").1;
            for family in [
                "depth",
                "adds_total",
                "retries_total",
                "queue_duration_seconds_count",
                "work_duration_seconds_count",
                "unfinished_work_seconds",
                "longest_running_processor_seconds",
            ] {
                assert_eq!(
                    samples(&body, &format!("{q}_{family}"))
                        .iter()
                        .filter(|(labels, _)| *labels == l)
                        .count(),
                    1,
                    "{q}_{family}{{{l}}}:\n{body}"
                );
            }
        }
    }

    // a hub Application goes through the principal's send queue and the agent's receive queue,
    // and is written to the agent's cluster (a POST)
    hub.create_app("edge", "guestbook");
    hub.wait_revision("edge-local", "guestbook", "HEAD");
    until("the agent's write is counted", || {
        value(
            a,
            "rest_client_requests_total",
            &format!("code=\"201\",host=\"{host}\",method=\"POST\""),
        ) >= 1.0
    });
    let q = |side: &str| format!("queue=\"edge-{side}\"");
    until("the principal's send queue took the Application", || {
        value(p, "argocd_principal_workqueue_adds_total", &q("send")) >= 1.0
            && value(
                p,
                "argocd_principal_workqueue_work_duration_seconds_count",
                &q("send"),
            ) >= 1.0
    });
    assert!(
        value(
            p,
            "argocd_principal_workqueue_queue_duration_seconds_count",
            &q("send")
        ) >= 1.0
    );
    let d = "queue=\"default-recv\"";
    until("the agent's receive queue handled it", || {
        value(a, "argocd_agent_workqueue_work_duration_seconds_count", d) >= 1.0
    });
    assert!(value(a, "argocd_agent_workqueue_adds_total", d) >= 1.0);
    assert!(value(a, "argocd_agent_workqueue_queue_duration_seconds_count", d) >= 1.0);
    // the agent's status updates come back through its send queue and the principal's receive
    // queue
    until("the principal received from the agent", || {
        value(
            p,
            "argocd_principal_workqueue_work_duration_seconds_count",
            &q("recv"),
        ) >= 1.0
    });
    until("the queues are empty", || {
        value(p, "argocd_principal_workqueue_depth", &q("send")) == 0.0
            && value(a, "argocd_agent_workqueue_depth", d) == 0.0
    });

    // every request of both processes, labelled as client-go labels them
    for (port, who) in [(p, "principal"), (a, "agent")] {
        let body = get(port, "/metrics").1;
        let gets = samples(&body, "rest_client_requests_total")
            .into_iter()
            .find(|(l, _)| *l == format!("code=\"200\",host=\"{host}\",method=\"GET\""));
        assert!(gets.is_some_and(|(_, v)| v >= 1.0), "{who}:\n{body}");
        let timed = format!("host=\"{host}\",verb=\"GET\"");
        for family in [
            "rest_client_request_duration_seconds_count",
            // the peer's default limit (100 per second) is on: every request asks it
            "rest_client_rate_limiter_duration_seconds_count",
        ] {
            let n = samples(&body, family)
                .into_iter()
                .find(|(l, _)| *l == timed)
                .map_or(0.0, |(_, v)| v);
            assert!(n >= 1.0, "{who} {family}{{{timed}}}:\n{body}");
        }
        assert!(
            body.contains("rest_client_request_duration_seconds_bucket{le=\"10.0\","),
            "prometheus.DefBuckets"
        );
        assert!(body.contains("# TYPE rest_client_request_retries counter"));
    }
    drop(agent);
}

#[test]
fn kube_qps_throttles_and_recv_queue_size_bounds_what_waits_for_a_handler() {
    let dir = temp_dir("kube-qps");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    hub.create_namespace("edge-local");
    hub.create_namespace("edge");
    const APPS: usize = 6;
    for i in 0..APPS {
        hub.create_app("edge-local", &format!("app-{i}"));
    }
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let p = free_port();
    // one handler, one request per second: what the agent sends waits in the receive queue
    let principal = Proc::spawn_env(
        "principal",
        &principal(&pki, grpc, p, &["--concurrency=1"]),
        Some(&kubeconfig),
        &[
            ("ARGOCD_AGENT_KUBE_QPS", "1"),
            ("ARGOCD_AGENT_KUBE_BURST", "1"),
            ("ARGOCD_AGENT_RECV_QUEUE_SIZE", "2"),
        ],
    );
    principal.wait_for_line("principal listening");
    let agent = Proc::spawn(
        "agent",
        &agent(&pki, grpc, free_port(), "autonomous"),
        Some(&kubeconfig),
    );
    let recv = "queue=\"edge-recv\"";
    let mut deepest = 0.0f64;
    until("every Application reached the hub", || {
        deepest = deepest.max(value(p, "argocd_principal_workqueue_depth", recv));
        hub.rt
            .block_on(hub.apps("edge").list(&Default::default()))
            .is_ok_and(|l| l.items.len() == APPS)
    });
    // the bound: never more than 2 waiting (without it the backlog of creates would wait there)
    assert_eq!(deepest, 2.0, "the deepest the receive queue got");
    // requests waited for the rate limiter: one a second
    let body = get(p, "/metrics").1;
    let waited: f64 = samples(&body, "rest_client_rate_limiter_duration_seconds_sum")
        .iter()
        .map(|(_, v)| v)
        .sum();
    assert!(
        waited >= (APPS - 2) as f64,
        "waited {waited} s for the rate limiter:\n{body}"
    );
    drop(agent);
}

#[test]
fn send_queue_size_bounds_the_agents_send_queue() {
    let dir = temp_dir("send-queue-size");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    hub.create_namespace("edge-local");
    for i in 0..5 {
        hub.create_app("edge-local", &format!("app-{i}"));
    }
    // no principal: what the agent has to send stays in its queue
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let run_agent = |env: &[(&str, &str)]| {
        let a = free_port();
        let proc = Proc::spawn_env(
            "agent",
            &agent(&pki, grpc, a, "autonomous"),
            Some(&kubeconfig),
            env,
        );
        // the agent connects once its local Applications are listed and handled
        proc.wait_for_line("connection to principal failed");
        value(a, "argocd_agent_workqueue_depth", "queue=\"default-send\"")
    };
    assert_eq!(run_agent(&[]), 5.0, "the default holds them all");
    assert_eq!(
        run_agent(&[("ARGOCD_AGENT_SEND_QUEUE_SIZE", "2")]),
        2.0,
        "2 queued, the rest deferred until there is room"
    );
}

/// `argocd-pull <args>` with `env`: (exit code, stderr).
fn fails(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_bad_value_stops_the_command_naming_the_variable() {
    let dir = temp_dir("kube-env-bad");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let a = agent(&pki, grpc, free_port(), "managed");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let p = principal(&pki, grpc, free_port(), &[]);
    let p: Vec<&str> = p.iter().map(String::as_str).collect();
    for (args, env, named) in [
        (
            &a,
            vec![("ARGOCD_AGENT_KUBE_QPS", "fast")],
            "ARGOCD_AGENT_KUBE_QPS=\"fast\" is not an integer",
        ),
        (
            &p,
            vec![("ARGOCD_AGENT_KUBE_QPS", "1.5")],
            "ARGOCD_AGENT_KUBE_QPS=\"1.5\" is not an integer",
        ),
        (
            &p,
            vec![
                ("ARGOCD_AGENT_KUBE_QPS", "10"),
                ("ARGOCD_AGENT_KUBE_BURST", "0"),
            ],
            "ARGOCD_AGENT_KUBE_BURST=0",
        ),
        (
            &a,
            vec![("ARGOCD_AGENT_RECV_QUEUE_SIZE", "0")],
            "ARGOCD_AGENT_RECV_QUEUE_SIZE=0: queue size must be greater than 0",
        ),
        (
            &p,
            vec![("ARGOCD_AGENT_SEND_QUEUE_SIZE", "-4")],
            "ARGOCD_AGENT_SEND_QUEUE_SIZE=-4: queue size must be greater than 0",
        ),
        (
            &p,
            vec![
                ("ARGOCD_AGENT_SEND_QUEUE_SIZE", "100"),
                ("ARGOCD_PRINCIPAL_QUEUE_CAPACITY", "50"),
            ],
            "--queue-capacity (ARGOCD_PRINCIPAL_QUEUE_CAPACITY) (50) and ARGOCD_AGENT_SEND_QUEUE_SIZE (100) both set",
        ),
        (
            &vec!["ctl", "agent", "list"],
            vec![("ARGOCD_AGENT_KUBE_BURST", "many")],
            "ARGOCD_AGENT_KUBE_BURST=\"many\" is not an integer",
        ),
    ] {
        let (code, err) = fails(args, &env);
        assert_eq!(code, Some(1), "{env:?}: {err}");
        assert!(err.contains(named), "{env:?}: {err}");
    }
}
