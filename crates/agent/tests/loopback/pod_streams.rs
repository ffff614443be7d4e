//! Container logs and the web terminal end to end: kube's own client (`Api::<Pod>::logs`,
//! `log_stream`, `exec`) with an agent's certificate → our principal's resource proxy → the
//! agent's event stream and its `LogStreamService` / `TerminalStreamService` streams → our agent
//! → the agent's API server (a fake serving one pod's log and exec: no kubelet here).

use futures::{AsyncBufReadExt, SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams, TerminalSize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fake_pods::{FakePods, LOG, Seen};
use crate::harness::*;
use crate::resource_proxy::{Rig, agent_on, rig};

async fn with_agent(names: &[&str]) -> (Rig, Vec<FakePods>) {
    let mut r = rig(&[], |_| {}).await;
    let mut fakes = Vec::new();
    for n in names {
        let f = FakePods::start(&format!("web-{n}")).await;
        let a = agent_on(&r.pki, &r.principal, n, f.client()).await;
        r.agents
            .push((n.to_string(), a, argocd_pull_hub::Hub::new()));
        fakes.push(f);
    }
    (r, fakes)
}

async fn pods(r: &Rig, agent: &str) -> Api<Pod> {
    Api::namespaced(r.client(agent).await, "default")
}

async fn sessions_drain(r: &Rig) {
    tokio::time::timeout(T, async {
        while r.principal.log_and_terminal_sessions() != (0, 0) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the principal forgets finished log and terminal sessions");
}

#[tokio::test]
async fn static_logs_arrive_whole_with_the_callers_parameters() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let lp = LogParams {
        container: Some("main".into()),
        tail_lines: Some(2),
        timestamps: true,
        ..Default::default()
    };
    let text = tokio::time::timeout(T, api.logs("web-a", &lp))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        text,
        "2026-11-25T10:00:00.000000000Z line 1\n2026-11-25T10:00:00.000000000Z line 2\n"
    );
    let Seen::Log(q) = f[0].next().await else {
        panic!("a log request")
    };
    for p in ["container=main", "tailLines=2", "timestamps=true"] {
        assert!(q.contains(p), "{p} reaches the agent's API server: {q}");
    }
    assert!(!q.contains("follow"), "{q}");
    // without timestamps the bytes are the API server's, untouched
    let plain = api.logs("web-a", &LogParams::default()).await.unwrap();
    assert_eq!(plain, LOG);
    sessions_drain(&r).await;
    let m = r.principal.metrics().encode();
    assert!(
        m.contains("argocd_principal_resource_proxy_requests_total{agent_name=\"a\"} 2"),
        "{m}"
    );
}

#[tokio::test]
async fn follow_streams_until_the_reader_leaves_then_the_agent_stops_reading() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let lp = LogParams {
        follow: true,
        ..Default::default()
    };
    let stream = tokio::time::timeout(T, api.log_stream("web-a", &lp))
        .await
        .unwrap()
        .unwrap();
    let mut lines = stream.lines();
    let mut next = async || {
        tokio::time::timeout(T, lines.next())
            .await
            .expect("a line in time")
            .unwrap()
            .unwrap()
    };
    assert_eq!(next().await, "line 1");
    assert_eq!(next().await, "line 2");
    assert!(matches!(f[0].next().await, Seen::Log(q) if q.contains("follow=true")));
    // written later in the container: streamed as it comes
    f[0].push("line 3\n");
    assert_eq!(next().await, "line 3");
    f[0].push("line 4\n");
    assert_eq!(next().await, "line 4");
    drop(lines);
    // the reader left: the principal cancels the agent's stream, the agent drops its request
    assert_eq!(f[0].until(|s| *s == Seen::LogClosed).await, Seen::LogClosed);
    sessions_drain(&r).await;
}

#[tokio::test]
async fn a_missing_pod_is_the_api_servers_404_and_callers_reach_only_their_agent() {
    let (r, _f) = with_agent(&["a", "b"]).await;
    let a = pods(&r, "a").await;
    let b = pods(&r, "b").await;
    assert_eq!(a.logs("web-a", &LogParams::default()).await.unwrap(), LOG);
    // b's API server has no pod web-a: b's caller never sees a's pod
    match b.logs("web-a", &LogParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 404, "{s:?}");
            assert_eq!(s.reason, "NotFound");
            assert!(s.message.contains("web-a"), "{s:?}");
        }
        other => panic!("want the API server's 404, got {other:?}"),
    }
    // an agent that is not connected: 502 naming it
    match pods(&r, "ghost")
        .await
        .logs("web-a", &LogParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 502);
            assert!(s.message.contains("ghost"), "{s:?}");
        }
        other => panic!("want 502, got {other:?}"),
    }
    sessions_drain(&r).await;
}

#[tokio::test]
async fn a_follow_stream_ends_when_its_agent_vanishes() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let lp = LogParams {
        follow: true,
        ..Default::default()
    };
    let mut lines = api.log_stream("web-a", &lp).await.unwrap().lines();
    assert_eq!(lines.next().await.unwrap().unwrap(), "line 1");
    assert!(r.principal.disconnect_agent("a"));
    // the response ends instead of hanging
    let rest = tokio::time::timeout(T, async {
        let mut n = 0;
        while let Some(Ok(_)) = lines.next().await {
            n += 1;
        }
        n
    })
    .await
    .expect("the follow stream ends when the agent's stream does");
    assert!(rest <= 1, "only what was already sent: {rest}");
    // and the agent stops reading from its API server
    f[0].until(|s| *s == Seen::LogClosed).await;
    sessions_drain(&r).await;
    let m = r.principal.metrics().encode();
    assert!(m.contains("reason=\"agent_disconnected\""), "{m}");
}

async fn read_until(out: &mut (impl tokio::io::AsyncRead + Unpin), want: &str) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(T, async {
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&got).contains(want) {
            let n = out.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "stdout ended before {want:?}: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{want:?} on stdout in time"));
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn terminal_carries_stdin_stdout_resize_and_the_pods_exit() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let ap = AttachParams::interactive_tty().container("main");
    let mut p = tokio::time::timeout(T, api.exec("web-a", ["sh"], &ap))
        .await
        .unwrap()
        .unwrap();
    let Seen::Exec(q, proto) = f[0].next().await else {
        panic!("an exec request")
    };
    assert_eq!(proto, "v5.channel.k8s.io");
    for w in [
        "command=sh",
        "container=main",
        "stdin=true",
        "stdout=true",
        "tty=true",
    ] {
        assert!(q.contains(w), "{w} in {q}");
    }
    // the agent's default size, then the user's
    assert_eq!(f[0].next().await, Seen::Resize(80, 24));
    let mut size = p.terminal_size().unwrap();
    size.send(TerminalSize {
        width: 120,
        height: 40,
    })
    .await
    .unwrap();
    assert_eq!(
        f[0].until(|s| matches!(s, Seen::Resize(..))).await,
        Seen::Resize(120, 40)
    );
    let mut stdin = p.stdin().unwrap();
    let mut stdout = p.stdout().unwrap();
    let status = p.take_status().unwrap();
    stdin.write_all(b"echo hello\n").await.unwrap();
    assert_eq!(
        f[0].until(|s| matches!(s, Seen::Stdin(_))).await,
        Seen::Stdin(b"echo hello\n".to_vec())
    );
    read_until(&mut stdout, "ECHO HELLO\n").await;
    // the shell exits: the session closes with the API server's Success
    stdin.write_all(b"exit\n").await.unwrap();
    let st = tokio::time::timeout(T, status).await.unwrap().unwrap();
    assert_eq!(st.status.as_deref(), Some("Success"), "{st:?}");
    f[0].until(|s| *s == Seen::ExecClosed).await;
    sessions_drain(&r).await;
}

#[tokio::test]
async fn terminal_close_from_the_user_and_a_failing_command() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let ap = AttachParams::interactive_tty();

    // the user closes stdin (v5): the pod sees its stdin end and the session ends cleanly
    let mut p = api.exec("web-a", ["sh"], &ap).await.unwrap();
    let status = p.take_status().unwrap();
    let mut stdin = p.stdin().unwrap();
    stdin.shutdown().await.unwrap();
    f[0].until(|s| *s == Seen::StdinClosed).await;
    let st = tokio::time::timeout(T, status).await.unwrap().unwrap();
    assert_eq!(st.status.as_deref(), Some("Success"), "{st:?}");
    f[0].until(|s| *s == Seen::ExecClosed).await;

    // a failing command: the exit code reaches the caller in the Status, as from an API server
    let mut p = api.exec("web-a", ["sh"], &ap).await.unwrap();
    let status = p.take_status().unwrap();
    p.stdin().unwrap().write_all(b"fail\n").await.unwrap();
    let st = tokio::time::timeout(T, status).await.unwrap().unwrap();
    assert_eq!(st.status.as_deref(), Some("Failure"), "{st:?}");
    assert_eq!(st.reason.as_deref(), Some("NonZeroExitCode"));
    let causes = st.details.and_then(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].message.as_deref(), Some("3"), "{causes:?}");
    f[0].until(|s| *s == Seen::ExecClosed).await;

    // the user drops the connection: the agent's exec ends
    let p = api.exec("web-a", ["sh"], &ap).await.unwrap();
    f[0].until(|s| matches!(s, Seen::Resize(80, 24))).await;
    p.abort();
    f[0].until(|s| *s == Seen::ExecClosed).await;
    sessions_drain(&r).await;
}

#[tokio::test]
async fn terminal_fails_cleanly_for_a_missing_pod_a_vanished_agent_and_spdy() {
    let (r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let ap = AttachParams::interactive_tty();
    // the API server refuses the exec: its Status reaches the user
    let mut p = api.exec("nope", ["sh"], &ap).await.unwrap();
    let st = tokio::time::timeout(T, p.take_status().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(st.status.as_deref(), Some("Failure"));
    assert!(
        st.message
            .unwrap_or_default()
            .contains("\"nope\" not found")
    );

    // SPDY (or no upgrade at all) is refused with the reason
    let c = r.client("a").await;
    let req = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/pods/web-a/exec?command=sh")
        .header("upgrade", "SPDY/3.1")
        .header("connection", "Upgrade")
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = c.send(req).await.unwrap();
    assert_eq!(resp.status(), 400);
    use http_body_util::BodyExt;
    let b = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&b).contains("WebSocket"));

    // the agent vanishes mid-session: the terminal closes with an error, no hang
    let mut p = api.exec("web-a", ["sh"], &ap).await.unwrap();
    f[0].until(|s| matches!(s, Seen::Resize(80, 24))).await;
    let status = p.take_status().unwrap();
    assert!(r.principal.disconnect_agent("a"));
    let st = tokio::time::timeout(T, status).await.unwrap().unwrap();
    assert!(
        st.message.unwrap_or_default().contains("disconnected"),
        "the user is told why"
    );
    f[0].until(|s| *s == Seen::ExecClosed).await;

    sessions_drain(&r).await;
    drop(f);
}

#[tokio::test]
async fn terminal_is_for_managed_agents_only_as_the_peer() {
    let (mut r, _f) = with_agent(&[]).await;
    let fake = FakePods::start("web-auto").await;
    let auto =
        crate::resource_proxy::agent_with(&r.pki, &r.principal, "auto", fake.client(), |c| {
            c.mode = argocd_pull_agent::Mode::Autonomous
        })
        .await;
    let api = pods(&r, "auto").await;
    match api
        .exec("web-auto", ["sh"], &AttachParams::interactive_tty())
        .await
    {
        Err(e) => assert!(e.to_string().contains("400"), "{e}"),
        Ok(_) => panic!("an autonomous agent's pod must not get a terminal"),
    }
    // logs are served for every mode
    assert_eq!(
        api.logs("web-auto", &LogParams::default()).await.unwrap(),
        LOG
    );
    auto.shutdown().await;
    r.agents.clear();
}

#[tokio::test]
async fn an_agent_that_stops_ends_its_log_streams() {
    let (mut r, f) = with_agent(&["a"]).await;
    let api = pods(&r, "a").await;
    let lp = LogParams {
        follow: true,
        ..Default::default()
    };
    let mut lines = api.log_stream("web-a", &lp).await.unwrap().lines();
    assert_eq!(lines.next().await.unwrap().unwrap(), "line 1");
    let (_, a, _) = r.agents.remove(0);
    a.shutdown().await;
    // the agent's read of its API server stops, and the caller's response ends
    f[0].until(|s| *s == Seen::LogClosed).await;
    tokio::time::timeout(T, async { while let Some(Ok(_)) = lines.next().await {} })
        .await
        .expect("the follow response ends with its agent");
    sessions_drain(&r).await;
}

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
        argocd_pull_agent::resource::kubeconfig_yaml(&r.url, &r.pki.agent("a").unwrap(), "a"),
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

#[tokio::test]
async fn a_silent_agent_gives_504_and_never_holds_up_others() {
    let mut r = rig(&[], |rp| rp.timeout = std::time::Duration::from_millis(500)).await;
    let f = FakePods::start("web-a").await;
    let a = agent_on(&r.pki, &r.principal, "a", f.client()).await;
    r.agents.push(("a".into(), a, argocd_pull_hub::Hub::new()));
    let api = pods(&r, "a").await;
    // the agent's API server never answers this pod's log: 504 at the proxy's timeout
    let hung = {
        let api = api.clone();
        tokio::spawn(async move { api.logs("hang", &LogParams::default()).await })
    };
    // meanwhile another log request of the same agent is served
    assert_eq!(api.logs("web-a", &LogParams::default()).await.unwrap(), LOG);
    match tokio::time::timeout(T, hung).await.unwrap().unwrap() {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 504, "{s:?}");
            assert!(s.message.contains("did not start streaming"), "{s:?}");
        }
        other => panic!("want 504, got {other:?}"),
    }
    sessions_drain(&r).await;
    let m = r.principal.metrics().encode();
    assert!(m.contains("reason=\"timeout\""), "{m}");
}
