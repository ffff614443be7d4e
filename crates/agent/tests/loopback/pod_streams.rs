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

pub async fn with_agent(names: &[&str]) -> (Rig, Vec<FakePods>) {
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

pub async fn pods(r: &Rig, agent: &str) -> Api<Pod> {
    Api::namespaced(r.client(agent).await, "default")
}

pub async fn sessions_drain(r: &Rig) {
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
            c.mode = argocd_pull_agent_core::Mode::Autonomous
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
