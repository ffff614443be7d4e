//! Active/active replicas: a resource-proxy request (Argo CD's Kubernetes API calls, container
//! logs, the web terminal) for an agent another replica serves goes, as it is, to that replica's
//! [replica port](super::replica_port) for the agent this replica authenticated. Plain requests
//! share the replica link's HTTP/2 connection; an upgrade (the terminal's WebSocket) gets an
//! HTTP/1.1 connection of its own, spliced once both sides have switched protocols.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tower::ServiceExt;

use super::Inner;
use super::forward::FORWARDED_AGENT;
use super::resource_proxy::reply::{Resp, failure};
use super::router::Remote;

/// Headers of one connection that never travel on to another (RFC 9110 §7.6.1; HTTP/2 refuses
/// them).
const HOP_BY_HOP: [&str; 7] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "host",
];

impl Inner {
    /// Where a resource-proxy request for `agent` is served: `None` here, else the owner's
    /// replica port; `Err`: the answer to give now (503).
    pub(super) async fn route_request(
        &self,
        agent: &str,
        forwarded: bool,
    ) -> Result<Option<Remote<'_>>, Resp> {
        self.owner(agent, forwarded)
            .await
            .map_err(|why| failure(503, &why))
    }
}

/// Forwards `req` for `agent` to its owner and returns the owner's answer.
pub(super) async fn resource(
    inner: &Arc<Inner>,
    owner: Remote<'_>,
    agent: &str,
    req: Request<Incoming>,
) -> Resp {
    let upgrade = req
        .headers()
        .get(http::header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.to_ascii_lowercase().contains("upgrade"));
    inner
        .metrics
        .ha
        .shards
        .forwarded(if upgrade { "exec" } else { "resource" });
    let result = match upgrade {
        true => upgraded(&owner, agent, req).await,
        false => plain(&owner, agent, req).await,
    };
    result.unwrap_or_else(|e| {
        tracing::warn!(agent, owner = %owner.addr, error = %format!("{e:#}"), "forwarding a resource-proxy request failed");
        failure(
            502,
            &format!("the principal replica serving agent {agent:?} could not be reached: {e:#}"),
        )
    })
}

fn onward_headers(h: &mut HeaderMap, agent: &str) -> anyhow::Result<()> {
    h.remove(FORWARDED_AGENT);
    h.insert(FORWARDED_AGENT, agent.parse()?);
    Ok(())
}

/// The body of an answer from another replica, relayed until it ends (or its connection broke).
fn relay<B>(b: B) -> http_body_util::combinators::BoxBody<Bytes, Infallible>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Send,
{
    let (tx, rx) = tokio::sync::mpsc::channel::<hyper::body::Frame<Bytes>>(16);
    tokio::spawn(async move {
        let mut frames = std::pin::pin!(BodyStream::new(b));
        while let Some(Ok(f)) = frames.next().await {
            if tx.send(f).await.is_err() {
                return;
            }
        }
    });
    BodyExt::boxed(StreamBody::new(
        tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok),
    ))
}

async fn plain(owner: &Remote<'_>, agent: &str, req: Request<Incoming>) -> anyhow::Result<Resp> {
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    parts.uri = format!("http://{}{pq}", owner.addr).parse()?;
    parts.version = http::Version::HTTP_2;
    for h in HOP_BY_HOP {
        parts.headers.remove(h);
    }
    onward_headers(&mut parts.headers, agent)?;
    let channel = owner.channel();
    let resp = channel
        .oneshot(Request::from_parts(parts, tonic::body::Body::new(body)))
        .await?;
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, relay(body)))
}

async fn upgraded(
    owner: &Remote<'_>,
    agent: &str,
    mut req: Request<Incoming>,
) -> anyhow::Result<Resp> {
    let down = hyper::upgrade::on(&mut req);
    let io = owner.connect_http1().await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let (mut parts, body) = req.into_parts();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .to_string();
    parts.uri = pq.parse()?;
    parts.version = http::Version::HTTP_11;
    onward_headers(&mut parts.headers, agent)?;
    let mut resp = sender
        .send_request(Request::from_parts(parts, body))
        .await?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let up = hyper::upgrade::on(&mut resp);
        tokio::spawn(async move {
            match tokio::try_join!(down, up) {
                Ok((d, u)) => {
                    let _ =
                        tokio::io::copy_bidirectional(&mut TokioIo::new(d), &mut TokioIo::new(u))
                            .await;
                }
                Err(e) => tracing::warn!(error = %e, "forwarding an upgraded connection failed"),
            }
        });
    }
    let (parts, body) = resp.into_parts();
    Ok(Response::from_parts(parts, relay(body)))
}
