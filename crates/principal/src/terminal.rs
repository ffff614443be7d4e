//! The web terminal through the resource proxy (the peer's principal/terminal.go and
//! principal/apis/terminalstream): `…/pods/<p>/exec` upgrades to the Kubernetes exec WebSocket
//! (`v5.channel.k8s.io` first, as the peer's upgrader), a terminal-request event asks the agent to
//! exec in the pod, and the agent bridges it over the bidirectional
//! `TerminalStreamService.StreamTerminal`: stdin and resizes go down, stdout/stderr come up,
//! end of stdin (the v5 close signal) and the agent's EOF / error close the session.
//!
//! Differences from the peer, for Kubernetes clients (the gRPC wire is the same): the agent's
//! error and its clean exit are written as a `Status` on the error channel (3) as an API server
//! does, not as a text message; the v5 "close stdin" frame becomes an EOF to the agent instead of
//! stdin bytes; a stream may only attach to a session of the agent it authenticated as.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, Stream, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};
use tonic::Status;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::container::{ContainerTerminalRequest, error_to_status};
use argocd_pull_agent_core::proto::terminalstreamapi::{
    TerminalStreamData, terminal_stream_service_server::TerminalStreamService,
};
use argocd_pull_agent_core::resource::PathParams;

use super::resource_proxy::reply::{Resp, failure};
use super::server::Svc;
use super::{Inner, SOURCE};

pub const CHANNEL_STDIN: u8 = 0;
pub const CHANNEL_STDOUT: u8 = 1;
pub const CHANNEL_STDERR: u8 = 2;
pub const CHANNEL_ERROR: u8 = 3;
pub const CHANNEL_RESIZE: u8 = 4;
/// v5: "this stream is closed" (`[255, <channel>]`).
pub const CHANNEL_CLOSE: u8 = 255;
/// The peer's `terminalChannelBufferSize`.
const BUFFER: usize = 100;
/// The peer's `terminalSessionTimeout`.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// The server's subprotocols in order of preference (the peer's upgrader: v5, then client-go's
/// `SupportedStreamingProtocols`).
pub const SUBPROTOCOLS: [&str; 5] = [
    "v5.channel.k8s.io",
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

struct Session {
    agent: String,
    from_agent: mpsc::Sender<TerminalStreamData>,
    to_agent: Option<mpsc::Receiver<TerminalStreamData>>,
}

/// Terminal sessions waiting for or bridged to their agent's stream, by session UUID.
#[derive(Default, Clone)]
pub(super) struct TerminalSessions {
    map: Arc<Mutex<HashMap<String, Session>>>,
}

struct Registration {
    map: Arc<Mutex<HashMap<String, Session>>>,
    uuid: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.uuid);
    }
}

impl TerminalSessions {
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Serves `…/namespaces/<ns>/pods/<p>/exec` for `agent`: a WebSocket upgrade bridged to the agent.
pub(super) async fn serve(
    inner: &Arc<Inner>,
    agent: &str,
    params: &PathParams,
    req: Request<Incoming>,
) -> Resp {
    let Some(a) = inner.agent(agent) else {
        inner
            .metrics
            .resource_proxy_error(agent, "agent_disconnected");
        return failure(
            502,
            &format!("agent {agent:?} is not connected to the principal"),
        );
    };
    if *a.mode.lock().expect("poisoned") != Mode::Managed {
        return failure(400, "web terminal is only supported for managed agents");
    }
    let outbox = a
        .outbox
        .lock()
        .expect("poisoned")
        .as_ref()
        .map(|(_, o)| o.clone());
    let outbox = match outbox {
        Some(o) if a.connected.load(std::sync::atomic::Ordering::SeqCst) => o,
        _ => {
            inner
                .metrics
                .resource_proxy_error(agent, "agent_disconnected");
            return failure(
                502,
                &format!("agent {agent:?} is not connected to the principal"),
            );
        }
    };
    if params.namespace.is_empty() || params.name.is_empty() || params.resource != "pods" {
        return failure(
            400,
            "exec needs a pod: /api/v1/namespaces/<namespace>/pods/<pod>/exec",
        );
    }
    let h = req.headers();
    let has = |name: http::HeaderName, want: &str| {
        h.get_all(name).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(want)))
        })
    };
    let key = h
        .get(http::header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec());
    let (true, true, true, Some(key)) = (
        req.method() == http::Method::GET,
        has(http::header::UPGRADE, "websocket"),
        has(http::header::CONNECTION, "upgrade"),
        key,
    ) else {
        inner.metrics.resource_proxy_error(agent, "bad_upgrade");
        return failure(
            400,
            "exec through the resource proxy needs a WebSocket upgrade (GET with Upgrade: websocket, subprotocol v5.channel.k8s.io or v4.channel.k8s.io); SPDY is not supported",
        );
    };
    let offered: Vec<String> = h
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_string()))
        .collect();
    let protocol = SUBPROTOCOLS
        .into_iter()
        .find(|p| offered.iter().any(|o| o == p));
    let mut container = String::new();
    let mut command = Vec::new();
    for (k, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "container" if container.is_empty() => container = v.into_owned(),
            "command" => command.push(v.into_owned()),
            _ => {}
        }
    }
    let treq = ContainerTerminalRequest {
        uuid: uuid::Uuid::new_v4().to_string(),
        namespace: params.namespace.clone(),
        pod_name: params.name.clone(),
        container_name: container,
        command,
        tty: true,
        stdin: true,
        stdout: true,
        stderr: true,
    };
    tracing::info!(agent, session = %treq.uuid, namespace = %treq.namespace, pod = %treq.pod_name, container = %treq.container_name, command = ?treq.command, "processing web terminal request");
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
    let inner2 = inner.clone();
    let agent2 = agent.to_string();
    let timeout = inner
        .cfg
        .resource_proxy
        .as_ref()
        .map(|r| r.timeout)
        .unwrap_or(super::resource_proxy::config::DEFAULT_TIMEOUT);
    let modern = protocol.is_some_and(|p| p.starts_with("v4.") || p.starts_with("v5."));
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(req).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(error = %e, "web terminal: WebSocket upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        bridge(&inner2, &agent2, outbox, treq, ws, modern, timeout).await;
    });
    let mut r = Response::new(Empty::new().boxed());
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let hm = r.headers_mut();
    hm.insert(
        http::header::UPGRADE,
        http::HeaderValue::from_static("websocket"),
    );
    hm.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("Upgrade"),
    );
    if let Ok(v) = http::HeaderValue::from_str(&accept) {
        hm.insert(http::header::SEC_WEBSOCKET_ACCEPT, v);
    }
    if let Some(p) = protocol {
        hm.insert(
            http::header::SEC_WEBSOCKET_PROTOCOL,
            http::HeaderValue::from_static(p),
        );
    }
    r
}

/// What a client's WebSocket message asks of the agent (the peer's `webSocketToAgentChannel`).
fn from_client(uuid: &str, data: &[u8]) -> Option<TerminalStreamData> {
    let base = || TerminalStreamData {
        request_uuid: uuid.to_string(),
        ..Default::default()
    };
    if data.is_empty() {
        return None;
    }
    if data[0] == CHANNEL_CLOSE {
        // v5: the client closed a stream; stdin closed is EOF for the agent
        return (data.get(1) == Some(&CHANNEL_STDIN)).then(|| TerminalStreamData {
            eof: true,
            ..base()
        });
    }
    if let Some((cols, rows)) = resize_of(data) {
        return Some(TerminalStreamData {
            resize: true,
            cols,
            rows,
            ..base()
        });
    }
    let stdin = if data[0] == CHANNEL_STDIN {
        &data[1..]
    } else {
        data
    };
    if data[0] == CHANNEL_RESIZE {
        return None;
    }
    Some(TerminalStreamData {
        data: stdin.to_vec(),
        stream_type: "stdin".into(),
        ..base()
    })
}

/// A resize: channel 4 with `{"Width":c,"Height":r}`, or a JSON message (optionally after a
/// channel byte) in that form or `{"operation":"resize","cols":c,"rows":r}`. Field names match
/// case-insensitively, as Go's `encoding/json`.
fn resize_of(data: &[u8]) -> Option<(u32, u32)> {
    // channel 4, or a JSON message after a channel byte 0-3, or bare JSON
    let channel_json = data.len() > 1
        && (data[0] == CHANNEL_RESIZE || (data[0] < CHANNEL_RESIZE && data[1] == b'{'));
    let payload = if channel_json { &data[1..] } else { data };
    if payload.first() != Some(&b'{') {
        return None;
    }
    let v: Value = serde_json::from_slice(payload).ok()?;
    let obj = v.as_object()?;
    let field = |name: &str| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    };
    let num = |name: &str| -> Option<u32> {
        match field(name) {
            None => Some(0),
            Some(v) => v.as_u64().and_then(|n| u32::try_from(n).ok()),
        }
    };
    if let (Some(w), Some(h)) = (num("width"), num("height"))
        && (w != 0 || h != 0)
    {
        return Some((w, h));
    }
    if field("operation").and_then(|o| o.as_str()) == Some("resize") {
        return Some((num("cols")?, num("rows")?));
    }
    None
}

type Sink = futures::stream::SplitSink<WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>, Message>;

/// The error channel: a `Status` for v4/v5 clients, text for older ones.
fn error_frame(modern: bool, error: &str) -> Message {
    let body = if modern {
        error_to_status(error).1.to_string()
    } else {
        error.to_string()
    };
    let mut f = vec![CHANNEL_ERROR];
    f.extend_from_slice(body.as_bytes());
    Message::binary(f)
}

async fn close(sink: &mut Sink, code: CloseCode, reason: &str) {
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.to_string().into(),
        })))
        .await;
}

async fn bridge(
    inner: &Arc<Inner>,
    agent: &str,
    outbox: argocd_pull_agent_core::session::Outbox,
    treq: ContainerTerminalRequest,
    ws: WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>,
    modern: bool,
    start_timeout: Duration,
) {
    let uuid = treq.uuid.clone();
    let (to_agent, to_agent_rx) = mpsc::channel(BUFFER);
    let (from_agent_tx, mut from_agent) = mpsc::channel(BUFFER);
    inner.relays.terminals.map.lock().expect("poisoned").insert(
        uuid.clone(),
        Session {
            agent: agent.to_string(),
            from_agent: from_agent_tx,
            to_agent: Some(to_agent_rx),
        },
    );
    let _registration = Registration {
        map: inner.relays.terminals.map.clone(),
        uuid: uuid.clone(),
    };
    let (mut gone, _pending) = inner.relays.requests.register(&uuid, agent);
    outbox.send(treq.to_event(SOURCE)).await;
    tracing::info!(agent, session = %uuid, "web terminal request sent to agent");
    let (mut sink, mut stream) = ws.split();
    let started_by = tokio::time::Instant::now() + start_timeout;
    let session_end = tokio::time::Instant::now() + SESSION_TIMEOUT;
    let mut started = false;
    loop {
        tokio::select! {
            m = stream.next() => match m {
                Some(Ok(Message::Binary(d))) => {
                    if let Some(msg) = from_client(&uuid, &d) && to_agent.send(msg).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Text(t))) => {
                    if let Some(msg) = from_client(&uuid, t.as_bytes()) && to_agent.send(msg).await.is_err() {
                        break;
                    }
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    tracing::info!(agent, session = %uuid, "web terminal closed by the client");
                    break;
                }
                Some(Ok(_)) => {}
            },
            d = from_agent.recv() => match d {
                Some(d) => {
                    started = true;
                    if !d.error.is_empty() {
                        tracing::info!(agent, session = %uuid, error = %d.error, "agent reported an error; closing the web terminal");
                        let _ = sink.send(error_frame(modern, &d.error)).await;
                        close(&mut sink, CloseCode::Normal, "").await;
                        break;
                    }
                    if d.eof {
                        tracing::info!(agent, session = %uuid, "agent sent EOF; closing the web terminal");
                        if modern {
                            let ok = serde_json::json!({"metadata": {}, "status": "Success"}).to_string();
                            let mut f = vec![CHANNEL_ERROR];
                            f.extend_from_slice(ok.as_bytes());
                            let _ = sink.send(Message::binary(f)).await;
                        }
                        close(&mut sink, CloseCode::Normal, "").await;
                        break;
                    }
                    if d.data.is_empty() {
                        continue;
                    }
                    let ch = match d.stream_type.as_str() {
                        "stderr" => CHANNEL_STDERR,
                        "error" => CHANNEL_ERROR,
                        _ => CHANNEL_STDOUT,
                    };
                    let mut f = Vec::with_capacity(d.data.len() + 1);
                    f.push(ch);
                    f.extend_from_slice(&d.data);
                    if sink.send(Message::binary(Bytes::from(f))).await.is_err() {
                        break;
                    }
                }
                None => {
                    let _ = sink.send(error_frame(modern, "the agent ended the terminal stream")).await;
                    close(&mut sink, CloseCode::Away, "agent ended the terminal stream").await;
                    break;
                }
            },
            _ = &mut gone => {
                inner.metrics.resource_proxy_error(agent, "agent_disconnected");
                let _ = sink.send(error_frame(modern, &format!("agent {agent:?} disconnected"))).await;
                close(&mut sink, CloseCode::Away, "agent disconnected").await;
                break;
            }
            _ = tokio::time::sleep_until(started_by), if !started => {
                inner.metrics.resource_proxy_error(agent, "timeout");
                let msg = format!("agent {agent:?} did not open the terminal stream within {start_timeout:?}");
                let _ = sink.send(error_frame(modern, &msg)).await;
                close(&mut sink, CloseCode::Away, "timeout").await;
                break;
            }
            _ = tokio::time::sleep_until(session_end) => {
                tracing::warn!(agent, session = %uuid, "web terminal session timeout after 30 minutes");
                close(&mut sink, CloseCode::Normal, "session timeout").await;
                break;
            }
        }
    }
    // dropping `to_agent` ends the agent's stream: it stops the exec
}

type TerminalOut = Pin<Box<dyn Stream<Item = Result<TerminalStreamData, Status>> + Send>>;

#[tonic::async_trait]
impl TerminalStreamService for Svc {
    type StreamTerminalStream = TerminalOut;

    async fn stream_terminal(
        &self,
        req: tonic::Request<tonic::Streaming<TerminalStreamData>>,
    ) -> Result<tonic::Response<TerminalOut>, Status> {
        let agent = self.stream_identity(&req)?;
        if let super::forward::Via::Owner(ch) =
            self.inner.route_call(&agent, self.forwarded).await?
        {
            return super::forward::stream_terminal(&self.inner, ch, &agent, req).await;
        }
        let mut inbound = req.into_inner();
        let first = inbound.message().await?.ok_or_else(|| {
            Status::invalid_argument("the terminal stream ended before its handshake")
        })?;
        let uuid = first.request_uuid.clone();
        if uuid.is_empty() {
            return Err(Status::invalid_argument(
                "handshake message contains empty session UUID",
            ));
        }
        let (from_agent, to_agent) = {
            let mut g = self.inner.relays.terminals.map.lock().expect("poisoned");
            let s = g
                .get_mut(&uuid)
                .ok_or_else(|| Status::not_found(format!("session {uuid} not found")))?;
            if s.agent != agent {
                tracing::warn!(agent, owner = %s.agent, session = %uuid, "terminal stream for another agent's session refused");
                return Err(Status::permission_denied(format!(
                    "terminal session {uuid} was not sent to agent {agent:?}"
                )));
            }
            let rx = s.to_agent.take().ok_or_else(|| {
                Status::failed_precondition(format!("session {uuid} already has a stream"))
            })?;
            (s.from_agent.clone(), rx)
        };
        tracing::info!(agent, session = %uuid, "terminal session handshake completed with agent");
        tokio::spawn(async move {
            if from_agent.send(first).await.is_err() {
                return;
            }
            loop {
                let m = tokio::select! {
                    m = inbound.message() => m,
                    _ = from_agent.closed() => return,
                };
                match m {
                    Ok(Some(m)) if m.request_uuid == uuid || m.request_uuid.is_empty() => {
                        if from_agent.send(m).await.is_err() {
                            return;
                        }
                    }
                    Ok(Some(_)) => return,
                    Ok(None) | Err(_) => return,
                }
            }
        });
        let out = ReceiverStream::new(to_agent).map(Ok);
        Ok(tonic::Response::new(Box::pin(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_frames_become_agent_messages_as_the_peer_reads_them() {
        let m = from_client("u", b"\x00ls\n").unwrap();
        assert_eq!(
            (m.data.as_slice(), m.stream_type.as_str()),
            (&b"ls\n"[..], "stdin")
        );
        let m = from_client("u", b"\x04{\"Width\":120,\"Height\":40}").unwrap();
        assert!(m.resize);
        assert_eq!((m.cols, m.rows), (120, 40));
        // kube-rs and Go's case-insensitive field names
        let m = from_client("u", b"\x04{\"width\":100,\"height\":30}").unwrap();
        assert_eq!((m.cols, m.rows), (100, 30));
        let m = from_client("u", br#"{"operation":"resize","cols":90,"rows":20}"#).unwrap();
        assert_eq!((m.cols, m.rows), (90, 20));
        assert!(
            from_client("u", &[CHANNEL_CLOSE, CHANNEL_STDIN])
                .unwrap()
                .eof
        );
        assert!(from_client("u", b"").is_none());
        // a bare `{` typed at the prompt is stdin, not a resize
        let m = from_client("u", b"\x00{").unwrap();
        assert_eq!(m.data, b"{");
    }
}
