//! The agent's side (`--enable-websocket`): a tonic [`Channel`] whose connections go to an
//! in-process HTTP/2 endpoint that carries every call over its own WebSocket to the principal, as
//! the peer's `grpchttp1client.ConnectViaProxy(..., UseWebSocket(true))` does. Every gRPC client
//! built on the channel (authentication, version, the event stream, ...) works unchanged.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};
use tokio_tungstenite::tungstenite::{Message, handshake::derive_accept_key};
use tonic::transport::{Channel, Endpoint};

use super::frame::{self, Frame, Reframer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = http_body_util::combinators::BoxBody<Bytes, BoxError>;
type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// How long dialling, TLS and the upgrade of one call may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how the WebSocket connections go.
#[derive(Clone)]
pub struct Target {
    pub addr: SocketAddr,
    /// The `Host` of the upgrade request and the TLS server name.
    pub host: String,
    /// TLS (`None`: plaintext, `--insecure-plaintext`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// WebSocket ping interval (zero: none); a connection with no message from the principal
    /// for this long plus `keepalive_timeout` is given up.
    pub keepalive: Duration,
    pub keepalive_timeout: Duration,
}

impl Target {
    fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "wss" } else { "ws" };
        format!("{scheme}://{}:{}", self.host, self.addr.port())
    }
}

/// A channel to the principal over WebSocket. `endpoint` carries the per-call settings (its
/// HTTP/2 settings apply to the in-process hop only).
pub async fn channel(
    endpoint: Endpoint,
    target: Target,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = target.tls.as_deref().cloned();
    if let Some(t) = tls.as_mut() {
        // an HTTP/1.1 connection: offering only `h2` makes an HTTP/1.1 proxy refuse the handshake
        t.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    let target = Arc::new(Target {
        tls: tls.map(Arc::new),
        ..target
    });
    let connector = tower::service_fn(move |_uri: http::Uri| {
        let target = target.clone();
        async move {
            let (near, far) = tokio::io::duplex(256 * 1024);
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let target = target.clone();
                    async move { Ok::<_, Infallible>(call(&target, req).await) }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(far), svc)
                    .await;
            });
            Ok::<_, std::io::Error>(TokioIo::new(near))
        }
    });
    endpoint.connect_with_connector(connector).await
}

/// A gRPC status as a trailers-only response (what the peer's proxy answers on a transport error).
fn status(s: tonic::Status) -> Response<Body> {
    s.into_http::<Body>()
}

fn empty() -> Body {
    http_body_util::Empty::new().map_err(|e| match e {}).boxed()
}

/// One gRPC call: its own WebSocket.
async fn call(target: &Target, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let opened = tokio::time::timeout(OPEN_TIMEOUT, open(target, &path, &parts.headers)).await;
    let ws = match opened.unwrap_or_else(|_| Err(OpenError::Timeout(target.url(), OPEN_TIMEOUT))) {
        Ok(ws) => ws,
        Err(e) => {
            tracing::debug!(error = %e, path, "WebSocket to the principal failed");
            return status(tonic::Status::unavailable(format!("transport: {e}")));
        }
    };
    let (sink, mut stream) = ws.split();
    // request messages go out beside the response
    let writer = tokio::spawn(write_requests(sink, body, target.keepalive));
    let idle = (!target.keepalive.is_zero()).then(|| target.keepalive + target.keepalive_timeout);
    let headers = match next_frame(&mut stream, idle).await {
        Ok(Some(Frame::Metadata(h))) => h2_safe(h),
        Ok(_) => {
            writer.abort();
            return status(tonic::Status::internal(
                "transport: the principal's first gRPC-WebSocket message is not the response headers",
            ));
        }
        Err(e) => {
            writer.abort();
            return status(tonic::Status::unavailable(format!(
                "transport: reading response header: {e}"
            )));
        }
    };
    let mut resp = Response::new(empty());
    if headers.contains_key("grpc-status") {
        // trailers-only
        writer.abort();
        *resp.headers_mut() = headers;
        return resp;
    }
    let (tx, rx) = mpsc::channel::<Result<BodyFrame<Bytes>, BoxError>>(64);
    tokio::spawn(async move {
        let trailers = loop {
            tokio::select! {
                f = next_frame(&mut stream, idle) => match f {
                    Ok(Some(Frame::Data(d))) => {
                        if tx.send(Ok(BodyFrame::data(d))).await.is_err() {
                            break None; // the call was dropped
                        }
                    }
                    Ok(Some(Frame::Metadata(t))) => break Some(h2_safe(t)),
                    Ok(Some(Frame::EndOfStream)) => {
                        break Some(transport_error("the principal sent an end-of-stream frame"))
                    }
                    Ok(None) => break Some(transport_error("the principal closed the WebSocket before the trailers")),
                    Err(e) => break Some(transport_error(&format!("reading response body: {e}"))),
                },
                _ = tx.closed() => break None,
            }
        };
        writer.abort();
        if let Some(t) = trailers {
            let _ = tx.send(Ok(BodyFrame::trailers(t))).await;
        }
    });
    *resp.headers_mut() = headers;
    *resp.body_mut() = BodyExt::boxed(StreamBody::new(ReceiverStream::new(rx)));
    resp
}

/// Drops from a metadata frame what HTTP/2 forbids or what no longer holds on the in-process hop
/// (connection-specific headers, a length, announced trailers): the local HTTP/2 server would
/// reset the call over them.
fn h2_safe(mut h: HeaderMap) -> HeaderMap {
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "content-length",
        "trailer",
    ] {
        h.remove(name);
    }
    h
}

/// Trailers carrying `Unavailable` (writeErrorIfNecessary).
fn transport_error(msg: &str) -> HeaderMap {
    let (parts, ()) = tonic::Status::unavailable(format!("transport: {msg}"))
        .into_http::<()>()
        .into_parts();
    let mut h = parts.headers;
    h.remove(http::header::CONTENT_TYPE);
    h
}

/// The next gRPC frame from the principal; `None` once it closed the WebSocket.
async fn next_frame(
    stream: &mut futures::stream::SplitStream<Ws>,
    idle: Option<Duration>,
) -> Result<Option<Frame>, String> {
    loop {
        let next = match idle {
            Some(d) => tokio::time::timeout(d, stream.next())
                .await
                .map_err(|_| format!("no message or pong from the principal for {d:?}"))?,
            None => stream.next().await,
        };
        match next {
            None | Some(Ok(Message::Close(_))) => return Ok(None),
            Some(Ok(Message::Binary(b))) => {
                return frame::decode(b).map(Some).map_err(|e| e.to_string());
            }
            Some(Ok(Message::Text(_))) => {
                return Err(
                    "incorrect message type; expected a binary message but got text".into(),
                );
            }
            Some(Ok(_)) => continue, // ping, pong
            Some(Err(e)) => return Err(e.to_string()),
        }
    }
}

/// Request messages (one WebSocket message each), then the end-of-stream frame; pings meanwhile.
async fn write_requests(
    mut sink: futures::stream::SplitSink<Ws, Message>,
    mut body: Incoming,
    keepalive: Duration,
) {
    let mut ping = tokio::time::interval(if keepalive.is_zero() {
        Duration::from_secs(3600 * 24 * 365)
    } else {
        keepalive
    });
    ping.tick().await;
    let mut reframer = Reframer::default();
    let mut body_done = false;
    loop {
        tokio::select! {
            f = body.frame(), if !body_done => match f {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        reframer.push(d);
                        while let Some(m) = reframer.next_frame() {
                            if sink.feed(Message::Binary(m)).await.is_err() {
                                return;
                            }
                        }
                        if sink.flush().await.is_err() {
                            return;
                        }
                    }
                }
                Some(Err(e)) => {
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: CloseCode::Error,
                            reason: format!("request body: {e}").chars().take(100).collect::<String>().into(),
                        })))
                        .await;
                    return;
                }
                None => {
                    body_done = true;
                    if sink.send(Message::Binary(Bytes::from_static(&frame::END_OF_STREAM))).await.is_err() {
                        return;
                    }
                }
            },
            _ = ping.tick(), if !keepalive.is_zero() => {
                if sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
            }
            // request sent, no pings: hold the WebSocket open until the response ends (the
            // caller aborts this task then)
            else => std::future::pending::<()>().await,
        }
    }
}

/// Why an upgrade failed, in words an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("connecting to {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error(
        "TLS handshake with {0} for a WebSocket (HTTP/1.1) failed: {1}; a principal without --enable-websocket refuses HTTP/1.1 (ALPN \"http/1.1\"): set --enable-websocket on the principal too"
    )]
    Alpn(SocketAddr, std::io::Error),
    #[error("TLS handshake with {0}: {1}")]
    Tls(SocketAddr, std::io::Error),
    #[error(
        "{0} did not answer the WebSocket upgrade request ({1}); a principal without --enable-websocket speaks only HTTP/2: set --enable-websocket on the principal too"
    )]
    NoAnswer(String, hyper::Error),
    #[error(
        "{url} answered the WebSocket upgrade with {status} instead of 101 Switching Protocols: {body}; the principal and every proxy in between must allow WebSocket upgrades (the principal with --enable-websocket)"
    )]
    Refused {
        url: String,
        status: StatusCode,
        body: String,
    },
    #[error("{0}: no WebSocket within {1:?}")]
    Timeout(String, Duration),
    #[error("{0}: invalid WebSocket handshake answer: {1}")]
    Handshake(String, String),
}

/// Dials the principal and upgrades to a `grpc-ws` WebSocket for `path`, the call's headers on
/// the upgrade request.
async fn open(target: &Target, path: &str, call_headers: &HeaderMap) -> Result<Ws, OpenError> {
    let tcp = TcpStream::connect(target.addr)
        .await
        .map_err(|e| OpenError::Connect(target.addr, e))?;
    let _ = tcp.set_nodelay(true);
    let url = format!("{}{path}", target.url());
    match &target.tls {
        None => upgrade(TokioIo::new(tcp), target, path, call_headers, &url).await,
        Some(cfg) => {
            let name =
                rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(|e| {
                    OpenError::Tls(
                        target.addr,
                        std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
                    )
                })?;
            let tls = tokio_rustls::TlsConnector::from(cfg.clone())
                .connect(name, tcp)
                .await
                .map_err(|e| {
                    let alpn = e
                        .get_ref()
                        .and_then(|i| i.downcast_ref::<rustls::Error>())
                        .is_some_and(|r| {
                            matches!(
                                r,
                                rustls::Error::AlertReceived(
                                    rustls::AlertDescription::NoApplicationProtocol
                                )
                            )
                        });
                    if alpn {
                        OpenError::Alpn(target.addr, e)
                    } else {
                        OpenError::Tls(target.addr, e)
                    }
                })?;
            upgrade(TokioIo::new(tls), target, path, call_headers, &url).await
        }
    }
}

/// Headers of a call that must not go on the upgrade request (hop-by-hop, or set here).
fn skip_header(name: &str) -> bool {
    matches!(
        name,
        "host" | "connection" | "upgrade" | "content-length" | "transfer-encoding" | "keep-alive"
    ) || name.starts_with("sec-websocket-")
}

async fn upgrade<IO>(
    io: IO,
    target: &Target,
    path: &str,
    call_headers: &HeaderMap,
    url: &str,
) -> Result<Ws, OpenError>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut send, conn) =
        hyper::client::conn::http1::handshake::<_, http_body_util::Empty<Bytes>>(io)
            .await
            .map_err(|e| OpenError::NoAnswer(url.to_string(), e))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    let mut req = Request::get(path)
        .header(
            http::header::HOST,
            format!("{}:{}", target.host, target.addr.port()),
        )
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_VERSION, "13")
        .header(http::header::SEC_WEBSOCKET_KEY, &key)
        .header(http::header::SEC_WEBSOCKET_PROTOCOL, frame::SUBPROTOCOL)
        .body(http_body_util::Empty::new())
        .expect("static request parts");
    for (k, v) in call_headers {
        if !skip_header(k.as_str()) {
            req.headers_mut().append(k, v.clone());
        }
    }
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| OpenError::NoAnswer(url.to_string(), e))?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        let status = resp.status();
        let body = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
            .await
            .ok()
            .and_then(|b| b.ok())
            .map(|b| {
                String::from_utf8_lossy(&b.to_bytes())
                    .trim()
                    .chars()
                    .take(300)
                    .collect()
            })
            .unwrap_or_default();
        return Err(OpenError::Refused {
            url: url.to_string(),
            status,
            body,
        });
    }
    let accept = derive_accept_key(key.as_bytes());
    if resp.headers().get(http::header::SEC_WEBSOCKET_ACCEPT)
        != Some(&HeaderValue::from_str(&accept).expect("base64"))
    {
        return Err(OpenError::Handshake(
            url.to_string(),
            "wrong Sec-WebSocket-Accept".into(),
        ));
    }
    // (coder/websocket, the peer's server, answers without a subprotocol; one it names must be ours)
    if let Some(p) = resp.headers().get(http::header::SEC_WEBSOCKET_PROTOCOL)
        && p != frame::SUBPROTOCOL
    {
        return Err(OpenError::Handshake(
            url.to_string(),
            format!("unexpected subprotocol {p:?}"),
        ));
    }
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| OpenError::Handshake(url.to_string(), e.to_string()))?;
    Ok(WebSocketStream::from_raw_socket(
        TokioIo::new(upgraded),
        Role::Client,
        Some(super::ws_config()),
    )
    .await)
}
