//! Container logs through the resource proxy (the peer's principal/resource.go `log` branch and
//! principal/apis/logstreamapi): a `GET …/pods/<p>/log` becomes a container-log request event;
//! the agent streams the bytes back over `LogStreamService.StreamLogs`, which are written to the
//! HTTP response as they come. Follow mode lasts until the HTTP client goes away, which ends the
//! agent's stream (`Canceled`, as the peer) so the agent stops reading.
//!
//! Differences from the peer (the wire is the same): the response headers wait for the agent's
//! first frame, so an API-server error from this project's agent (it sends the `Status` JSON)
//! reaches the caller with its real HTTP status instead of an empty 200; a stream may only carry
//! a request that was sent to the agent it authenticated as; an agent that disconnects, or whose
//! log stream breaks, ends the response at once (502 before the first frame).

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::Response;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use tokio::sync::mpsc;
use tonic::{Request, Status};

use argocd_pull_agent_core::container::{ContainerLogRequest, error_to_status};
use argocd_pull_agent_core::event::HttpMethod;
use argocd_pull_agent_core::proto::logstreamapi::{
    LogStreamData, LogStreamResponse, log_stream_service_server::LogStreamService,
};
use argocd_pull_agent_core::resource::PathParams;
use argocd_pull_agent_core::session::Outbox;

use super::resource_proxy::reply::{Resp, failure};
use super::server::Svc;
use super::{Inner, SOURCE};

/// Frames buffered between the agent's stream and the HTTP response (back-pressure beyond).
const BUFFER: usize = 16;

enum LogMsg {
    /// The agent's first, empty frame: its log stream is open.
    Started,
    Data(Bytes),
    Eof,
    Error(String),
}

struct Session {
    agent: String,
    /// weak: once the HTTP side stops holding a sender, the response ends with the agent's stream
    tx: mpsc::WeakSender<LogMsg>,
}

/// Log requests waiting for or receiving their agent's stream, by request UUID.
#[derive(Default, Clone)]
pub(super) struct LogSessions {
    map: Arc<Mutex<HashMap<String, Session>>>,
}

/// Removes the session when the HTTP request ends.
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

impl LogSessions {
    /// The returned sender keeps the session open until the agent's stream attaches.
    fn register(
        &self,
        uuid: &str,
        agent: &str,
    ) -> (mpsc::Sender<LogMsg>, mpsc::Receiver<LogMsg>, Registration) {
        let (tx, rx) = mpsc::channel(BUFFER);
        self.map.lock().unwrap_or_else(|e| e.into_inner()).insert(
            uuid.to_string(),
            Session {
                agent: agent.to_string(),
                tx: tx.downgrade(),
            },
        );
        let reg = Registration {
            map: self.map.clone(),
            uuid: uuid.to_string(),
        };
        (tx, rx, reg)
    }

    /// The sender of `uuid`'s session, if it was sent to `agent`.
    fn sender(&self, uuid: &str, agent: &str) -> Result<mpsc::Sender<LogMsg>, Status> {
        let g = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match g.get(uuid) {
            None => Err(Status::not_found("unknown request id")),
            Some(s) if s.agent != agent => {
                tracing::warn!(agent, owner = %s.agent, uuid, "log stream for another agent's request refused");
                Err(Status::permission_denied(format!(
                    "log request {uuid} was not sent to agent {agent:?}"
                )))
            }
            // a stream attaches once: after it the request ends with it (as the peer, which
            // finalizes the session when the agent's stream ends)
            Some(s) => {
                s.tx.upgrade()
                    .ok_or_else(|| Status::not_found("request id no longer streaming"))
            }
        }
    }

    /// Log requests in flight.
    pub(super) fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn text_response(body: http_body_util::combinators::BoxBody<Bytes, Infallible>) -> Resp {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache, no-transform"),
    );
    r
}

/// Serves `GET …/namespaces/<ns>/pods/<p>/log` for `agent` (connected, `outbox` its stream).
pub(super) async fn serve(
    inner: &Arc<Inner>,
    agent: &str,
    params: &PathParams,
    query: &BTreeMap<String, String>,
    method: HttpMethod,
    outbox: Outbox,
    timeout: Duration,
) -> Resp {
    if params.namespace.is_empty() || params.name.is_empty() {
        return failure(400, "Missing required parameters: namespace and pod");
    }
    let uuid = uuid::Uuid::new_v4().to_string();
    let req = ContainerLogRequest::from_params(&uuid, &params.namespace, &params.name, query);
    let follow = req.follow;
    let timestamps = req.timestamps;
    let (keep, mut rx, registration) = inner.relays.logs.register(&uuid, agent);
    // the agent's stream ending (disconnect) drops this waiter at once
    let (mut gone, pending) = inner.relays.requests.register(&uuid, agent);
    tracing::info!(agent, uuid, namespace = %req.namespace, pod = %req.pod_name, follow, "proxying pod log request");
    outbox.send(req.to_event(SOURCE, method)).await;

    let first = tokio::select! {
        m = rx.recv() => m,
        _ = &mut gone => {
            inner.metrics.resource_proxy_error(agent, "agent_disconnected");
            return failure(502, &format!("agent {agent:?} disconnected before streaming the logs"));
        }
        _ = tokio::time::sleep(timeout) => {
            inner.metrics.resource_proxy_error(agent, "timeout");
            return failure(504, &format!("agent {agent:?} did not start streaming the logs within {timeout:?}"));
        }
    };
    // from here the response lives as long as the agent's stream (a broken stream ends it)
    drop(keep);
    let head = match first {
        Some(LogMsg::Started) => Bytes::new(),
        Some(LogMsg::Data(b)) => b,
        Some(LogMsg::Eof) => {
            return text_response(http_body_util::Empty::new().boxed());
        }
        Some(LogMsg::Error(e)) => {
            inner.metrics.resource_proxy_error(agent, "agent_error");
            let (code, body) = error_to_status(&e);
            return super::resource_proxy::reply::respond(code, body.to_string());
        }
        None => {
            inner.metrics.resource_proxy_error(agent, "agent_error");
            return failure(
                502,
                &format!("agent {agent:?} ended its log stream without data"),
            );
        }
    };
    // static logs: the peer's limit (6 × the request timeout), then a notice in the body
    let deadline = (!follow).then(|| tokio::time::Instant::now() + timeout * 6);
    let agent_name = agent.to_string();
    let state = BodyState {
        rx,
        gone,
        deadline,
        timestamps,
        agent: agent_name,
        metrics: inner.metrics.clone(),
        _registration: registration,
        _pending: pending,
    };
    let head = (!head.is_empty()).then_some(head);
    let rest = futures::stream::unfold(Some(state), |st| async move {
        let mut st = st?;
        let next = tokio::select! {
            m = st.rx.recv() => m,
            _ = &mut st.gone => {
                st.metrics.resource_proxy_error(&st.agent, "agent_disconnected");
                tracing::info!(agent = %st.agent, "agent disconnected; ending its log stream");
                None
            }
            _ = async {
                match st.deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            } => {
                tracing::warn!(agent = %st.agent, "static logs timeout");
                let msg = if st.timestamps {
                    format!("{} Timeout fetching logs from agent\n", argocd_pull_agent_core::event::now_rfc3339())
                } else {
                    "Timeout fetching logs from agent\n".to_string()
                };
                return Some((Bytes::from(msg), None));
            }
        };
        match next {
            Some(LogMsg::Data(b)) => Some((b, Some(st))),
            Some(LogMsg::Started) => Some((Bytes::new(), Some(st))),
            Some(LogMsg::Error(e)) => {
                tracing::warn!(agent = %st.agent, error = %e, "log stream error from agent");
                None
            }
            Some(LogMsg::Eof) | None => None,
        }
    })
    .filter(|b| std::future::ready(!b.is_empty()));
    let body = futures::stream::iter(head)
        .chain(rest)
        .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    text_response(BodyExt::boxed(StreamBody::new(body)))
}

struct BodyState {
    rx: mpsc::Receiver<LogMsg>,
    gone: tokio::sync::oneshot::Receiver<argocd_pull_agent_core::resource::ResourceResponse>,
    deadline: Option<tokio::time::Instant>,
    timestamps: bool,
    agent: String,
    metrics: Arc<argocd_pull_agent_core::metrics::Metrics>,
    _registration: Registration,
    _pending: super::resource_proxy::pending::Registration,
}

#[tonic::async_trait]
impl LogStreamService for Svc {
    async fn stream_logs(
        &self,
        req: Request<tonic::Streaming<LogStreamData>>,
    ) -> Result<tonic::Response<LogStreamResponse>, Status> {
        let agent = self.stream_identity(&req)?;
        if let super::forward::Via::Owner(ch) =
            self.inner.route_call(&agent, self.forwarded).await?
        {
            return super::forward::stream_logs(&self.inner, ch, &agent, req).await;
        }
        let mut inbound = req.into_inner();
        let mut uuid = String::new();
        let mut tx: Option<mpsc::Sender<LogMsg>> = None;
        let mut lines = 0i32;
        loop {
            let msg = match &tx {
                Some(t) => tokio::select! {
                    m = inbound.message() => m,
                    _ = t.closed() => {
                        tracing::debug!(agent, uuid, "HTTP client of the log request went away; ending the agent's stream");
                        return Err(Status::cancelled("client detached timeout"));
                    }
                },
                None => inbound.message().await,
            };
            let msg = match msg {
                Ok(Some(m)) => m,
                // the agent closed its side: done
                Ok(None) => break,
                Err(s) if s.code() == tonic::Code::Cancelled => {
                    return Err(Status::cancelled("client detached timeout"));
                }
                Err(s) => return Err(s),
            };
            if tx.is_none() {
                uuid = msg.request_uuid.clone();
                tx = Some(self.inner.relays.logs.sender(&uuid, &agent)?);
                tracing::info!(agent, uuid, "LogStream started");
            }
            let t = tx.as_ref().expect("set above");
            if msg.request_uuid != uuid {
                return Err(Status::invalid_argument(format!(
                    "a log stream carries one request; got {} after {uuid}",
                    msg.request_uuid
                )));
            }
            let m = if !msg.error.is_empty() {
                LogMsg::Error(msg.error.clone())
            } else if msg.eof {
                LogMsg::Eof
            } else if msg.data.is_empty() {
                LogMsg::Started
            } else {
                lines += 1;
                LogMsg::Data(msg.data.into())
            };
            let end = matches!(m, LogMsg::Error(_) | LogMsg::Eof);
            let err = match &m {
                LogMsg::Error(e) => Some(e.clone()),
                _ => None,
            };
            if t.send(m).await.is_err() {
                return Err(Status::cancelled("client detached timeout"));
            }
            if let Some(e) = err {
                return Err(Status::internal(e));
            }
            if end {
                break;
            }
        }
        Ok(tonic::Response::new(LogStreamResponse {
            request_uuid: uuid,
            status: 200,
            error: String::new(),
            lines_received: lines,
        }))
    }
}

impl Svc {
    /// The agent behind a log or terminal stream: as `Subscribe`, the client certificate (or the
    /// mesh header) and the access token must name the same agent.
    pub(super) fn stream_identity<T>(&self, req: &Request<T>) -> Result<String, Status> {
        Ok(self.verified_agent(req)?.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_attaches_only_to_its_own_agents_request() {
        let s = LogSessions::default();
        let (keep, _rx, reg) = s.register("u1", "a");
        assert_eq!(
            s.sender("u1", "b").unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        let attached = s.sender("u1", "a").unwrap();
        assert_eq!(
            s.sender("u2", "a").unwrap_err().code(),
            tonic::Code::NotFound
        );
        // once the HTTP side lets go and the first stream ends, no other stream can attach
        drop((keep, attached));
        assert_eq!(
            s.sender("u1", "a").unwrap_err().code(),
            tonic::Code::NotFound
        );
        drop(reg);
        assert_eq!(s.len(), 0);
    }
}
