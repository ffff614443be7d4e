//! Cross-cluster HA through the binary: two principals (`--ha-enabled`) on two hubs, one agent
//! behind a GSLB that follows `/healthz`, `argocd-pull ctl ha status|promote|demote`.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{BIN, Proc, STARTUP, demo_hub, free_port, http_get, pki, temp_dir};

/// A GSLB: each connection goes to the first backend whose `/healthz` answers 200.
fn gslb(backends: Vec<(u16, u16)>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let backends = backends.clone();
            std::thread::spawn(move || {
                let Some((grpc, _)) = backends.iter().find(|(_, health)| {
                    http_get(*health, "/healthz").is_some_and(|(s, _)| s == 200)
                }) else {
                    return; // nobody healthy: the agent retries
                };
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", *grpc)) else {
                    return;
                };
                let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
                let t = std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut up2);
                    let _ = up2.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.shutdown(std::net::Shutdown::Write);
                let _ = t.join();
            });
        }
    });
    port
}

/// One runtime for every API call (a kube client's background task lives in the runtime that
/// made it).
fn rt() -> &'static tokio::runtime::Runtime {
    static RT: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn kube(kubeconfig: &Path) -> kube::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    rt().block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
        let c = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        kube::Client::try_from(c).unwrap()
    })
}

fn apps(c: &kube::Client, ns: &str) -> kube::Api<kube::api::DynamicObject> {
    let gvk = kube::core::GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "applications");
    kube::Api::namespaced_with(c.clone(), ns, &ar)
}

fn ensure_ns(c: &kube::Client, name: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let api: kube::Api<Namespace> = kube::Api::all(c.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let _ = rt().block_on(api.create(&Default::default(), &ns));
}

fn create_app(c: &kube::Client, ns: &str, name: &str) {
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://example.com/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}
    }))
    .unwrap();
    rt().block_on(apps(c, ns).create(&Default::default(), &obj))
        .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"));
}

fn get_app(c: &kube::Client, ns: &str, name: &str) -> Option<Value> {
    rt().block_on(apps(c, ns).get_opt(name))
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

/// Waits (polling the API: these are other processes) until `ns/name` exists.
fn wait_app(c: &kube::Client, ns: &str, name: &str, what: &str) -> Value {
    let deadline = Instant::now() + STARTUP;
    loop {
        if let Some(v) = get_app(c, ns, name) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{ns}/{name} never appeared: {what}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `argocd-pull ctl ha …` with `stdin`: (exit code, stdout, stderr).
fn ctl(args: &[&str], stdin: &str) -> (Option<i32>, String, String) {
    let mut child = Command::new(BIN)
        .arg("ctl")
        .arg("ha")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_health(port: u16, code: u16) -> String {
    let deadline = Instant::now() + STARTUP;
    loop {
        if let Some((c, body)) = http_get(port, "/healthz")
            && c == code
        {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "/healthz on {port} never answered {code}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Principal {
    proc: Proc,
    grpc: u16,
    health: u16,
    admin: String,
}

fn principal(
    name: &str,
    role: &str,
    pki: &Path,
    kubeconfig: &Path,
    grpc: u16,
    peer: u16,
) -> Principal {
    let f = |n: &str| pki.join(n).display().to_string();
    let (health, admin) = (free_port(), free_port());
    let proc = Proc::spawn(
        name,
        &[
            "principal".into(),
            "--ha-enabled".into(),
            format!("--ha-preferred-role={role}"),
            format!("--ha-peer-address=127.0.0.1:{peer}"),
            format!("--ha-admin-port={admin}"),
            "--ha-failover-timeout=5s".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={grpc}"),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            "--namespace=argocd".into(),
            "--enable-resource-proxy=false".into(),
            "--disable-redis-proxy".into(),
            "--metrics-port=0".into(),
            format!("--healthz-port={health}"),
        ],
        &[("KUBECONFIG", kubeconfig)],
    );
    Principal {
        proc,
        grpc,
        health,
        admin: format!("127.0.0.1:{admin}"),
    }
}

#[test]
fn two_principals_one_agent_switch_over_with_ctl_ha() {
    let dir = temp_dir("cross");
    let pki_dir = dir.join("pki");
    pki(&pki_dir, "edge");
    let (ka, kb, ke) = (
        dir.join("a.kubeconfig"),
        dir.join("b.kubeconfig"),
        dir.join("edge.kubeconfig"),
    );
    let _hub_a = demo_hub("hub-a", &ka);
    let _hub_b = demo_hub("hub-b", &kb);
    let _edge = demo_hub("edge-cluster", &ke);
    let (ca, cb, ce) = (kube(&ka), kube(&kb), kube(&ke));
    ensure_ns(&ca, "edge");
    ensure_ns(&ce, "edge-local");
    create_app(&ca, "edge", "before");

    let (ga, gb) = (free_port(), free_port());
    let a = principal("principal-a", "primary", &pki_dir, &ka, ga, gb);
    let b = principal("principal-b", "replica", &pki_dir, &kb, gb, ga);
    wait_health(a.health, 200);
    // a replica answers 503 with its state, for the GSLB
    let body = wait_health(b.health, 503);
    assert!(body.to_ascii_lowercase().contains("x-ha-state: "), "{body}");
    let deadline = Instant::now() + STARTUP;
    loop {
        let (code, out, _) = ctl(&["status", "--address", &b.admin], "");
        assert_eq!(code, Some(0));
        if out.contains("State:             replicating") {
            assert!(out.contains("Preferred Role:    replica"), "{out}");
            assert!(
                out.contains(&format!("Peer Address:      127.0.0.1:{ga}")),
                "{out}"
            );
            assert!(out.contains("Replicating:       true"), "{out}");
            break;
        }
        assert!(Instant::now() < deadline, "B never replicating: {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_app(&cb, "edge", "before", "snapshot on B");

    // one agent, one address: the GSLB
    let front = gslb(vec![(a.grpc, a.health), (b.grpc, b.health)]);
    let f = |n: &str| pki_dir.join(n).display().to_string();
    let agent = Proc::spawn(
        "agent",
        &[
            "agent".into(),
            "--server-address=127.0.0.1".into(),
            format!("--server-port={front}"),
            "--server-name=localhost".into(),
            "--agent-mode=managed".into(),
            "--namespace=edge-local".into(),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--tls-client-cert={}", f("edge.crt")),
            format!("--tls-client-key={}", f("edge.key")),
            "--metrics-port=0".into(),
            format!("--healthz-port={}", free_port()),
        ],
        &[("KUBECONFIG", &ke)],
    );
    let local = wait_app(&ce, "edge-local", "before", "delivered by A");
    let local_uid = local["metadata"]["uid"].as_str().unwrap().to_string();
    create_app(&ca, "edge", "during");
    wait_app(&ce, "edge-local", "during", "delivered by A");
    wait_app(&cb, "edge", "during", "replicated to B");

    // promote while A is active: refused (the peer's prompt answered y), exit 1, fix named
    let (code, out, err) = ctl(&["promote", "--address", &b.admin], "y\n");
    assert!(out.contains("Proceed? [y/N]: "), "{out}");
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("promote failed: rpc error: code = FailedPrecondition desc = still replicating from peer"), "{err}");
    assert!(err.contains("--force"), "{err}");
    // no answer: nothing happens
    let (code, out, _) = ctl(&["promote", "--address", &b.admin], "");
    assert_eq!(
        (code, out.trim_end().ends_with("Operation cancelled.")),
        (Some(0), true),
        "{out}"
    );

    // clean switchover
    let (code, out, err) = ctl(&["demote", "--address", &a.admin, "--force"], "");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "Demoted. State is now: replicating\n");
    wait_health(a.health, 503);
    let (code, out, err) = ctl(&["promote", "--address", &b.admin], "y\n");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("Promoted. State is now: active\n"), "{out}");
    wait_health(b.health, 200);
    let (code, out, _) = ctl(&["status", "--address", &b.admin, "-o", "json"], "");
    assert_eq!(code, Some(0));
    let j: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (j["state"].as_str(), j["preferred_role"].as_str()),
        (Some("active"), Some("replica"))
    );

    // the agent, same address, is served by B; what it had stays (same UID, not recreated)
    create_app(&cb, "edge", "after");
    wait_app(&ce, "edge-local", "after", "delivered by B");
    let now = get_app(&ce, "edge-local", "before").unwrap();
    assert_eq!(now["metadata"]["uid"].as_str(), Some(local_uid.as_str()));
    // and A replicates from B
    wait_app(&ca, "edge", "after", "replicated back to A");
    let (code, out, _) = ctl(&["status", "--address", &a.admin, "-o", "yaml"], "");
    assert_eq!(code, Some(0));
    assert!(
        out.starts_with("state: replicating\npreferredrole: primary\n"),
        "{out}"
    );
    // a wrong address: exit 1 naming it
    let (code, _, err) = ctl(&["status", "--address", "127.0.0.1:1", "-t", "2s"], "");
    assert_eq!(code, Some(1));
    assert!(err.contains("127.0.0.1:1"), "{err}");

    let logs = a.proc.log.lock().unwrap().join("\n");
    assert!(logs.contains("principal identity"), "A logs its identity");
    drop(agent);
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
