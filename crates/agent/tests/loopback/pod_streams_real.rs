//! Container logs and the web terminal with real tools: `kubectl logs` / `exec` through the
//! proxy (skipped with `SKIP:` when kubectl is not on PATH) and the real managed cluster's answers
//! (env-gated on `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`).

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use tokio::io::AsyncWriteExt;

use crate::fake_pods::{LOG, Seen};
use crate::harness::*;
use crate::pod_streams::{pods, sessions_drain, with_agent};
use crate::resource_proxy::{agent_on, rig};

/// Env-gated: the agent in front of the real managed cluster (`ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`).
/// No kubelet runs there, so no pod has a log or a shell: what is checked is that the real API
/// server's refusal reaches the caller through the principal and the agent unchanged.
#[tokio::test]
async fn real_cluster_log_and_exec_errors_pass_through() {
    let Ok(kc) = std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG") else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: real_cluster_log_and_exec_errors_pass_through needs ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"
        );
        return;
    };
    let kc = kube::config::Kubeconfig::read_from(&kc).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    let real = kube::Client::try_from(cfg).unwrap();
    let mut r = rig(&[], |_| {}).await;
    let a = agent_on(&r.pki, &r.principal, "real", real.clone()).await;
    let api = pods(&r, "real").await;
    match api.logs("no-such-pod-e2e", &LogParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"), "{s:?}");
            assert!(s.message.contains("no-such-pod-e2e"), "{s:?}");
        }
        other => panic!("want the real API server's 404, got {other:?}"),
    }
    let mut p = api
        .exec("no-such-pod-e2e", ["sh"], &AttachParams::interactive_tty())
        .await
        .unwrap();
    let st = tokio::time::timeout(T, p.take_status().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st.status.as_deref(), Some("Failure"), "{st:?}");
    assert!(
        st.message.unwrap_or_default().contains("not found"),
        "the API server's reason reaches the user"
    );
    // a pod that exists but never gets a node: whatever the API server answers for its log
    // (kube-apiserver 1.24: an empty 200) is what the caller gets through the proxy
    let ns = format!("pod-streams-e2e-{}", &uuid::Uuid::new_v4().to_string()[..8]);
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(real.clone());
    let pp = kube::api::PostParams::default();
    let nso = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
    namespaces.create(&pp, &nso).await.unwrap();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let direct = Api::<Pod>::namespaced(real.clone(), &ns);
    direct.create(&pp, &pod).await.unwrap();
    let proxied = Api::<Pod>::namespaced(r.client("real").await, &ns);
    let lp = LogParams {
        tail_lines: Some(10),
        ..Default::default()
    };
    let via_proxy = proxied.logs("p", &lp).await.map_err(|e| e.to_string());
    let straight = direct.logs("p", &lp).await.map_err(|e| e.to_string());
    let dp = kube::api::DeleteParams::default();
    let _ = direct.delete("p", &dp).await;
    let _ = namespaces.delete(&ns, &dp).await;
    assert_eq!(
        via_proxy, straight,
        "the proxy answers what the API server answers"
    );
    sessions_drain(&r).await;
    a.shutdown().await;
    r.agents.clear();
}

/// Real `kubectl logs` (static and `-f`) and `kubectl exec -i` through the proxy (skipped with
/// `SKIP:` when kubectl is not on PATH).
#[tokio::test]
async fn kubectl_logs_and_exec_through_the_proxy() {
    let Some(k) = which_kubectl() else {
        skip("SKIP: kubectl not on PATH; kubectl logs/exec through the proxy did not run");
        return;
    };
    let (r, f) = with_agent(&["a"]).await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        argocd_pull_agent_core::resource::kubeconfig_yaml(&r.url, &r.pki.agent("a").unwrap(), "a"),
    )
    .unwrap();
    let run_with = |k: &std::path::Path, args: &[&str]| {
        let mut c = tokio::process::Command::new(k);
        c.arg("--kubeconfig")
            .arg(&kc)
            .args(args)
            .env("HOME", dir.path())
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "true")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        c.spawn().unwrap()
    };
    let run = |args: &[&str]| run_with(&k, args);
    let out = tokio::time::timeout(T, run(&["logs", "web-a", "--tail=5"]).wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), LOG);
    let Seen::Log(q) = f[0].until(|s| matches!(s, Seen::Log(_))).await else {
        unreachable!()
    };
    assert!(q.contains("tailLines=5"), "{q}");

    // -f: lines as they are written, until kubectl is stopped; then the agent stops reading
    let mut follow = run(&["logs", "-f", "web-a"]);
    let mut out = tokio::io::BufReader::new(follow.stdout.take().unwrap());
    let mut line = String::new();
    use tokio::io::AsyncBufReadExt as _;
    for want in ["line 1\n", "line 2\n"] {
        line.clear();
        tokio::time::timeout(T, out.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(line, want);
    }
    f[0].push("line 3\n");
    line.clear();
    tokio::time::timeout(T, out.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(line, "line 3\n");
    follow.kill().await.unwrap();
    f[0].until(|s| *s == Seen::LogClosed).await;

    // exec -i: stdin in, stdout out, and the pod's exit ends kubectl with success
    // exec over WebSocket needs kubectl >= 1.30 (older ones speak SPDY only, refused here as by
    // the peer): a version-dispatching kubectl picks its binary from the server's version, which
    // the proxy reports as the peer's 1.28, so use a newer sibling binary when there is one
    let Some(k) = websocket_kubectl(&k) else {
        skip("SKIP: no kubectl >= 1.30 found; kubectl exec through the proxy did not run");
        return;
    };
    let mut ex = run_with(&k, &["exec", "-i", "web-a", "--", "sh"]);
    let mut stdin = ex.stdin.take().unwrap();
    stdin.write_all(b"echo hi\n").await.unwrap();
    let mut out = tokio::io::BufReader::new(ex.stdout.take().unwrap());
    line.clear();
    tokio::time::timeout(T, out.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    if line != "ECHO HI\n" {
        let mut err = String::new();
        use tokio::io::AsyncReadExt as _;
        let _ = ex.stderr.take().unwrap().read_to_string(&mut err).await;
        panic!("kubectl exec printed {line:?}; stderr: {err}");
    }
    stdin.write_all(b"exit\n").await.unwrap();
    let st = tokio::time::timeout(T, ex.wait()).await.unwrap().unwrap();
    assert!(
        st.success(),
        "kubectl exec ends cleanly when the shell exits"
    );
    let (_, proto) = match f[0].until(|s| matches!(s, Seen::Exec(..))).await {
        Seen::Exec(q, p) => (q, p),
        _ => unreachable!(),
    };
    assert!(
        proto.starts_with("v5") || proto.starts_with("v4"),
        "{proto}"
    );
    sessions_drain(&r).await;
}

fn which_kubectl() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("kubectl"))
            .find(|f| f.is_file())
    })
}

fn skip(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// A kubectl that speaks the exec WebSocket: `kubectl.1.3x` beside a version dispatcher (the
/// newest), else `kubectl` itself when its client version is 1.30 or later.
fn websocket_kubectl(k: &std::path::Path) -> Option<std::path::PathBuf> {
    let real = std::fs::canonicalize(k).ok()?;
    let mut found: Vec<(u32, std::path::PathBuf)> = std::fs::read_dir(real.parent()?)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let minor: u32 = name.strip_prefix("kubectl.1.")?.parse().ok()?;
            (minor >= 30).then(|| (minor, e.path()))
        })
        .collect();
    found.sort();
    if let Some((_, p)) = found.pop() {
        return Some(p);
    }
    let out = std::process::Command::new(k)
        .args(["version", "--client", "-o", "json"])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let minor: u32 = v["clientVersion"]["minor"]
        .as_str()?
        .trim_end_matches('+')
        .parse()
        .ok()?;
    (minor >= 30).then(|| k.to_path_buf())
}
