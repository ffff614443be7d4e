//! A stand-in for an agent's API server where no kubelet exists: plain HTTP serving one pod's
//! `log` (chunked; `follow=true` keeps the body open and streams what the test pushes) and its
//! `exec` (the Kubernetes exec WebSocket, v5 or v4: stdin is echoed upper-cased on stdout,
//! `exit` ends with a Success status, `fail` with exit code 3, a v5 "stdin closed" frame ends it).
//! Every request and what it carried is reported on `events`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

#[derive(Debug, Clone, PartialEq)]
pub enum Seen {
    /// a log request with its query string
    Log(String),
    /// the body of a follow log request was dropped (the reader went away)
    LogClosed,
    /// an exec request: its query string and the negotiated subprotocol
    Exec(String, String),
    Stdin(Vec<u8>),
    Resize(u64, u64),
    StdinClosed,
    /// the exec WebSocket ended
    ExecClosed,
}

pub struct FakePods {
    pub url: String,
    events: tokio::sync::Mutex<mpsc::UnboundedReceiver<Seen>>,
    follow: broadcast::Sender<Bytes>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakePods {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct State {
    pod: String,
    seen: mpsc::UnboundedSender<Seen>,
    follow: broadcast::Sender<Bytes>,
}

type Body = BoxBody<Bytes, Infallible>;

pub const LOG: &str = "line 1\nline 2\n";

impl FakePods {
    pub async fn start(pod: &str) -> FakePods {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (seen, events) = mpsc::unbounded_channel();
        let (follow, _) = broadcast::channel(64);
        let st = Arc::new(State {
            pod: pod.to_string(),
            seen,
            follow: follow.clone(),
        });
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, Infallible>(serve(st, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(s), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakePods {
            url,
            events: tokio::sync::Mutex::new(events),
            follow,
            task,
        }
    }

    /// A kube client for this API server (what the agent uses).
    pub fn client(&self) -> kube::Client {
        let mut cfg = kube::Config::new(self.url.parse().unwrap());
        cfg.default_retry = false;
        kube::Client::try_from(cfg).unwrap()
    }

    /// Appends to every open follow stream.
    pub fn push(&self, line: &str) {
        let _ = self.follow.send(Bytes::from(line.to_string()));
    }

    /// The next thing the server saw (within the test timeout).
    pub async fn next(&self) -> Seen {
        tokio::time::timeout(crate::harness::T, self.events.lock().await.recv())
            .await
            .expect("the fake API server saw nothing in time")
            .expect("fake API server gone")
    }

    /// Skips to the first event `f` accepts.
    pub async fn until(&self, f: impl Fn(&Seen) -> bool) -> Seen {
        loop {
            let s = self.next().await;
            if f(&s) {
                return s;
            }
        }
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

fn reply(code: u16, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::from_u16(code).unwrap();
    r
}

/// Reports `LogClosed` when the follow body is dropped.
struct OnDrop(mpsc::UnboundedSender<Seen>);
impl Drop for OnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(Seen::LogClosed);
    }
}

async fn serve(st: Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let json_reply = |v: Value| {
        let mut r = reply(200, Full::new(Bytes::from(v.to_string())).boxed());
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            "application/json".parse().unwrap(),
        );
        r
    };
    // discovery and the pod object, for kubectl
    match path.as_str() {
        "/api" => {
            return json_reply(json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}));
        }
        "/apis" => {
            return json_reply(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}));
        }
        "/api/v1" => {
            return json_reply(
                json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                 "verbs": ["get", "list"], "shortNames": ["po"]},
                {"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]},
                {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions",
                 "verbs": ["create", "get"]}]}),
            );
        }
        _ => {}
    }
    let prefix = "/api/v1/namespaces/default/pods/";
    let Some(rest) = path.strip_prefix(prefix) else {
        return reply(404, Full::new(Bytes::from("no such path")).boxed());
    };
    let (pod, sub) = rest.split_once('/').unwrap_or((rest, ""));
    if sub.is_empty() && pod == st.pod {
        return json_reply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default", "uid": "1"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
            "status": {"phase": "Running"}}));
    }
    if pod == "hang" {
        // an API server that never answers
        std::future::pending::<()>().await;
    }
    if pod != st.pod {
        let s = status(404, "NotFound", &format!("pods \"{pod}\" not found"));
        return reply(404, Full::new(Bytes::from(s.to_string())).boxed());
    }
    match sub {
        "log" => {
            let _ = st.seen.send(Seen::Log(query.clone()));
            let ts = query.contains("timestamps=true");
            let text: String = LOG
                .lines()
                .map(|l| match ts {
                    true => format!("2026-11-25T10:00:00.000000000Z {l}\n"),
                    false => format!("{l}\n"),
                })
                .collect();
            if !query.contains("follow=true") {
                return reply(200, Full::new(Bytes::from(text)).boxed());
            }
            let rx = st.follow.subscribe();
            let guard = OnDrop(st.seen.clone());
            let more = futures::stream::unfold((rx, guard), |(mut rx, g)| async move {
                match rx.recv().await {
                    Ok(b) => Some((b, (rx, g))),
                    Err(_) => None,
                }
            });
            let body = futures::stream::iter([Bytes::from(text)])
                .chain(more)
                .map(|b| Ok::<_, Infallible>(Frame::data(b)));
            reply(200, BodyExt::boxed(StreamBody::new(body)))
        }
        "exec" => exec(st, req, query).await,
        _ => reply(404, Full::new(Bytes::from("unknown subresource")).boxed()),
    }
}

async fn exec(st: Arc<State>, req: Request<Incoming>, query: String) -> Response<Body> {
    let key = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec());
    let offered = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let Some(key) = key else {
        let s = status(400, "BadRequest", "exec needs a WebSocket upgrade");
        return reply(400, Full::new(Bytes::from(s.to_string())).boxed());
    };
    let proto = ["v5.channel.k8s.io", "v4.channel.k8s.io"]
        .into_iter()
        .find(|p| offered.split(',').any(|o| o.trim() == *p))
        .unwrap_or("v4.channel.k8s.io");
    let _ = st.seen.send(Seen::Exec(query, proto.to_string()));
    let v5 = proto.starts_with("v5");
    let seen = st.seen.clone();
    tokio::spawn(async move {
        let Ok(up) = hyper::upgrade::on(req).await else {
            return;
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(up), Role::Server, None).await;
        let (mut tx, mut rx) = ws.split();
        let finish = |st: Value| {
            let mut f = vec![3u8];
            f.extend_from_slice(st.to_string().as_bytes());
            Message::binary(f)
        };
        let ok = json!({"metadata": {}, "status": "Success"});
        while let Some(Ok(m)) = rx.next().await {
            let Message::Binary(d) = m else {
                if matches!(m, Message::Close(_)) {
                    break;
                }
                continue;
            };
            match d.first() {
                Some(0) => {
                    let data = d[1..].to_vec();
                    let _ = seen.send(Seen::Stdin(data.clone()));
                    let text = String::from_utf8_lossy(&data).to_string();
                    if text.contains("exit") {
                        let _ = tx.send(finish(ok.clone())).await;
                        break;
                    }
                    if text.contains("fail") {
                        let st = json!({"metadata": {}, "status": "Failure",
                            "message": "command terminated with non-zero exit code: error executing command [sh], exit code 3",
                            "reason": "NonZeroExitCode",
                            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}});
                        let _ = tx.send(finish(st)).await;
                        break;
                    }
                    let mut out = vec![1u8];
                    out.extend_from_slice(text.to_uppercase().as_bytes());
                    let _ = tx.send(Message::binary(out)).await;
                }
                Some(4) => {
                    let v: Value = serde_json::from_slice(&d[1..]).unwrap_or_default();
                    let _ = seen.send(Seen::Resize(
                        v["Width"].as_u64().unwrap_or(0),
                        v["Height"].as_u64().unwrap_or(0),
                    ));
                }
                Some(255) if v5 && d.get(1) == Some(&0) => {
                    let _ = seen.send(Seen::StdinClosed);
                    let _ = tx.send(finish(ok.clone())).await;
                    break;
                }
                _ => {}
            }
        }
        let _ = tx.close().await;
        let _ = seen.send(Seen::ExecClosed);
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    let mut r = reply(101, Full::new(Bytes::new()).boxed());
    let h = r.headers_mut();
    h.insert(http::header::UPGRADE, "websocket".parse().unwrap());
    h.insert(http::header::CONNECTION, "Upgrade".parse().unwrap());
    h.insert(http::header::SEC_WEBSOCKET_ACCEPT, accept.parse().unwrap());
    h.insert(http::header::SEC_WEBSOCKET_PROTOCOL, proto.parse().unwrap());
    r
}
