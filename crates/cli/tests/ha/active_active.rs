//! Issue 29: `--ha-mode active-active` through the binary: two replicas on one embedded hub share
//! the shard Leases, each says so on `/metrics` and `/healthz`; one stopped with SIGTERM hands its
//! shards to the other and exits cleanly. Bad settings are refused before anything starts.

use std::time::{Duration, Instant};

use crate::{Proc, STARTUP, demo_hub, free_port, http_get, pki, run, temp_dir};

/// A metric's value on a replica's `/metrics` (0 when absent).
fn metric(port: u16, name: &str) -> f64 {
    let Some((200, body)) = http_get(port, "/metrics") else {
        return 0.0;
    };
    body.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        .sum()
}

/// Polls `/metrics` until `cond` holds (the replicas' shards move on their own schedule).
fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + STARTUP;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_active_active_replicas_split_the_shards_and_a_stopped_one_hands_them_over() {
    let dir = temp_dir("active-active");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki_dir = dir.join("pki");
    pki(&pki_dir, "edge");
    let hub = demo_hub("hub", &kubeconfig);
    let f = |n: &str| pki_dir.join(n).display().to_string();
    let (grpc, replica_port) = (free_port(), free_port());
    let replica = |i: usize, metrics: u16, healthz: u16| {
        let host = format!("127.0.0.{}", i + 2);
        Proc::spawn(
            &format!("principal-{i}"),
            &[
                "principal".into(),
                "--ha-mode=active-active".into(),
                "--ha-shards=8".into(),
                format!("--ha-replica-port={replica_port}"),
                format!("--ha-replica-name=principal-{i}"),
                format!("--ha-advertise-address={host}"),
                "--lease-duration=3s".into(),
                format!("--listen-host={host}"),
                format!("--listen-port={grpc}"),
                format!("--tls-cert={}", f("principal.crt")),
                format!("--tls-key={}", f("principal.key")),
                format!("--root-ca-path={}", f("ca.crt")),
                format!("--jwt-key={}", f("jwt.key")),
                "--namespace=argocd".into(),
                "--enable-resource-proxy=false".into(),
                "--disable-redis-proxy".into(),
                format!("--metrics-port={metrics}"),
                format!("--healthz-port={healthz}"),
            ],
            &[("KUBECONFIG", &kubeconfig)],
        )
    };
    let ports = [(free_port(), free_port()), (free_port(), free_port())];
    let mut a = replica(0, ports[0].0, ports[0].1);
    let b = replica(1, ports[1].0, ports[1].1);
    a.wait_for_line("serving as an active/active replica");
    b.wait_for_line("serving as an active/active replica");
    let held = |i: usize| metric(ports[i].0, "argocd_principal_ha_shards_held");
    until("a 4/4 split", || held(0) == 4.0 && held(1) == 4.0);
    for (m, h) in ports {
        assert_eq!(metric(m, "argocd_principal_ha_shard_count"), 8.0);
        let (code, body) = http_get(h, "/healthz").expect("healthz answers");
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("active/active"), "{body}");
    }
    // `ctl agent list` names the replica serving each agent, from the shard Leases
    let agents: Vec<String> = (0..8).map(|i| format!("edge-{i}")).collect();
    cluster_secrets(&kubeconfig, &agents);
    let serving = |want: &[&str]| {
        let rows = ctl_agent_list(&kubeconfig);
        assert_eq!(rows.len(), agents.len());
        let seen: std::collections::BTreeSet<&str> = rows
            .iter()
            .map(|r| r["replica"].as_str().unwrap_or("-"))
            .collect();
        let want: std::collections::BTreeSet<&str> = want.iter().copied().collect();
        assert_eq!(seen, want, "{rows:?}");
    };
    serving(&["principal-0@127.0.0.2", "principal-1@127.0.0.3"]);
    // SIGTERM: the shards go to the other replica, the process ends cleanly
    let t0 = Instant::now();
    let (code, _, err) = run_kill("-TERM", a.pid());
    assert_eq!(code, Some(0), "kill: {err}");
    a.wait_for_line("released the shard Leases");
    until("the other replica holds every shard", || held(1) == 8.0);
    let handed = t0.elapsed();
    let status = a.wait_exit(STARTUP);
    assert_eq!(status, Some(0), "a stopped replica exits 0");
    serving(&["principal-1@127.0.0.3"]);
    println!(
        "active/active through the binary: 8 shards split 4/4; SIGTERM handed them over in {handed:?}"
    );
    drop(b);
    drop(hub);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An Argo CD cluster secret for each of `agents` in the principal's namespace.
fn cluster_secrets(kubeconfig: &std::path::Path, agents: &[String]) {
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(kube::Client::try_from(cfg).unwrap(), "argocd");
        for a in agents {
            let s = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("cluster-{a}"), "labels": {
                    "argocd.argoproj.io/secret-type": "cluster",
                    "argocd-agent.argoproj-labs.io/agent-name": a}},
                "stringData": {"name": a, "server": format!("https://127.0.0.1:9090?agentName={a}")},
            }))
            .unwrap();
            secrets.create(&Default::default(), &s).await.unwrap();
        }
    });
}

/// `ctl agent list -o json` against the hub.
fn ctl_agent_list(kubeconfig: &std::path::Path) -> Vec<serde_json::Value> {
    let out = std::process::Command::new(crate::BIN)
        .args([
            "ctl",
            "agent",
            "list",
            "-o",
            "json",
            "--principal-namespace",
            "argocd",
        ])
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn run_kill(signal: &str, pid: u32) -> (Option<i32>, String, String) {
    let out = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_active_active_settings_are_refused_with_the_fix() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["--ha-mode=active-active", "--ha-replica-name=p"],
            "POD_IP",
        ),
        (
            &[
                "--ha-mode=active-active",
                "--ha-advertise-address=10.0.0.7",
                "--ha-shards=0",
            ],
            "1 to 1024",
        ),
        (
            &[
                "--ha-mode=active-active",
                "--leader-elect",
                "--ha-advertise-address=10.0.0.7",
            ],
            "drop it to run active/active",
        ),
        (&["--ha-mode=active-passive-ish"], "invalid value"),
    ];
    for (args, want) in cases {
        let mut all = vec![
            "principal",
            "--insecure-tls-generate",
            "--insecure-jwt-generate",
        ];
        all.extend_from_slice(args);
        let (code, _, err) = run(&all);
        assert_ne!(code, Some(0), "{args:?} is refused");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
