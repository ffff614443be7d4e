//! The principal's side (`--enable-websocket`): one listener serves native gRPC (HTTP/2, h2 or
//! h2c) and gRPC over WebSocket (an HTTP/1.1 upgrade with subprotocol `grpc-ws`), both into the
//! same tonic routes, as the peer's `grpchttp1server.CreateDowngradingHandler` does.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, Stream, StreamExt};
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame as BodyFrame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};
use tokio_tungstenite::tungstenite::{Message, handshake::derive_accept_key};
use tonic::service::Routes;
use tonic::transport::server::Connected;
use tower::{Layer, ServiceExt};

use super::frame::{self, Frame, Reframer};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// How often the principal pings a WebSocket (keeps idle proxies from timing it out).
const PING: Duration = Duration::from_secs(30);

/// HTTP/2 settings of the native path.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

/// Serves `routes` on every connection `incoming` yields until `stop` resolves; dropping the
/// future drops every connection.
pub async fn serve<I, IO, E>(
    routes: Routes,
    incoming: I,
    settings: Settings,
    stop: impl Future<Output = ()>,
) where
    I: Stream<Item = Result<IO, E>>,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    E: std::fmt::Display,
{
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.keepalive_interval)
        .keep_alive_timeout(settings.keepalive_timeout);
    builder.http1().timer(TokioTimer::new());
    let routes = routes.prepare();
    let mut conns = JoinSet::new();
    let mut incoming = std::pin::pin!(incoming);
    let mut stop = std::pin::pin!(stop);
    loop {
        let io = tokio::select! {
            _ = &mut stop => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            io = incoming.next() => match io {
                Some(Ok(io)) => io,
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "accepting a connection failed");
                    continue;
                }
                None => break,
            },
        };
        let info = io.connect_info();
        let routes = routes.clone();
        let builder = builder.clone();
        conns.spawn(async move {
            // an accepted upgrade hands its request over to run once the HTTP exchange ends
            let (up_tx, up_rx) = mpsc::unbounded_channel::<Request<Incoming>>();
            let up_routes = routes.clone();
            let svc = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(info.clone());
                let routes = routes.clone();
                let up_tx = up_tx.clone();
                async move { Ok::<_, Infallible>(dispatch(routes, req, up_tx).await) }
            });
            let r = builder
                .serve_connection_with_upgrades(TokioIo::new(io), svc)
                .await;
            if let Err(e) = r {
                tracing::debug!(error = %e, "serving a connection failed");
            }
            run_upgrades(up_rx, up_routes).await;
        });
    }
}

/// What the listener does with one request.
async fn dispatch(
    routes: Routes,
    req: Request<Incoming>,
    upgrades: mpsc::UnboundedSender<Request<Incoming>>,
) -> Response<tonic::body::Body> {
    match websocket_upgrade(req.headers()) {
        Err(msg) => return plain(StatusCode::BAD_REQUEST, msg),
        Ok(Some(key)) => {
            let accept = derive_accept_key(key.as_bytes());
            let _ = upgrades.send(req);
            return Response::builder()
                .status(StatusCode::SWITCHING_PROTOCOLS)
                .header(http::header::CONNECTION, "Upgrade")
                .header(http::header::UPGRADE, "websocket")
                .header(http::header::SEC_WEBSOCKET_ACCEPT, accept)
                .header(http::header::SEC_WEBSOCKET_PROTOCOL, frame::SUBPROTOCOL)
                .body(tonic::body::Body::empty())
                .expect("static response parts");
        }
        Ok(None) => {}
    }
    if is_grpc_web(req.headers()) {
        // the peer's handleGRPCWeb (PreferGRPCWeb): gRPC-Web answered as gRPC-Web, over HTTP/1.1
        // or HTTP/2 (unary and server-streaming calls; a browser-style client has no other way)
        let svc = tonic_web::GrpcWebLayer::new().layer(routes);
        return match svc.oneshot(req).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
    }
    if req.version() != Version::HTTP_2 {
        return plain(
            StatusCode::NOT_FOUND,
            "this port serves gRPC over HTTP/2, gRPC-Web, and gRPC over WebSocket (an HTTP/1.1 upgrade with Sec-WebSocket-Protocol: grpc-ws)",
        );
    }
    match routes.oneshot(req.map(tonic::body::Body::new)).await {
        Ok(r) => r,
        Err(e) => match e {},
    }
}

/// `application/grpc-web`, `application/grpc-web+proto`, `application/grpc-web-text`, ...
fn is_grpc_web(h: &HeaderMap) -> bool {
    h.get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/grpc-web"))
}

fn plain(status: StatusCode, msg: &str) -> Response<tonic::body::Body> {
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(tonic::body::Body::new(http_body_util::Full::new(
            Bytes::from(format!("{msg}\n")),
        )))
        .expect("static response parts")
}

/// The upgrade's `Sec-WebSocket-Key` when the request is a gRPC-WebSocket upgrade (the peer's
/// isWebSocketUpgrade: the subprotocol decides, the upgrade headers must then be there).
fn websocket_upgrade(h: &HeaderMap) -> Result<Option<String>, &'static str> {
    let offered = h
        .get_all(http::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == frame::SUBPROTOCOL);
    if !offered {
        return Ok(None);
    }
    let has = |name: http::header::HeaderName, want: &str| {
        h.get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(want))
    };
    if !has(http::header::CONNECTION, "upgrade") {
        return Err(
            "missing 'Connection: Upgrade' header in gRPC-websocket request (this usually means your proxy or load balancer does not support websockets)",
        );
    }
    if !has(http::header::UPGRADE, "websocket") {
        return Err(
            "missing 'Upgrade: websocket' header in gRPC-websocket request (this usually means your proxy or load balancer does not support websockets)",
        );
    }
    h.get(http::header::SEC_WEBSOCKET_KEY)
        .and_then(|k| k.to_str().ok())
        .map(|k| Some(k.to_string()))
        .ok_or("missing 'Sec-WebSocket-Key' header in gRPC-websocket request")
}

/// Runs the calls of the connection's accepted upgrades (one per HTTP/1.1 connection).
async fn run_upgrades(mut rx: mpsc::UnboundedReceiver<Request<Incoming>>, routes: Routes) {
    let mut calls = JoinSet::new();
    while let Some(req) = rx.recv().await {
        calls.spawn(bridge(req, routes.clone()));
    }
    while calls.join_next().await.is_some() {}
}

/// Headers of the upgrade request that are not the call's metadata (the peer's handleGRPCWS).
fn websocket_only(name: &str) -> bool {
    matches!(name, "connection" | "upgrade" | "content-length" | "host")
        || name.starts_with("sec-websocket-")
}

/// One call over an upgraded connection.
async fn bridge(mut req: Request<Incoming>, routes: Routes) {
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (mut parts, _) = req.into_parts();
    let upgraded = match on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, "WebSocket upgrade failed");
            return;
        }
    };
    let ws = WebSocketStream::from_raw_socket(
        TokioIo::new(upgraded),
        Role::Server,
        Some(super::ws_config()),
    )
    .await;
    let (sink, mut stream) = ws.split();
    // the call as an HTTP/2 gRPC request
    let (body_tx, body_rx) = mpsc::channel::<Result<BodyFrame<Bytes>, BoxError>>(64);
    let mut call = Request::new(tonic::body::Body::new(StreamBody::new(
        ReceiverStream::new(body_rx),
    )));
    *call.method_mut() = Method::POST;
    *call.version_mut() = Version::HTTP_2;
    *call.uri_mut() = parts.uri.clone();
    for (k, v) in &parts.headers {
        if !websocket_only(k.as_str()) {
            call.headers_mut().append(k, v.clone());
        }
    }
    *call.extensions_mut() = std::mem::take(&mut parts.extensions);
    let reader = async move {
        // `None` after the end of stream: the call's request body has ended (io.EOF)
        let mut body_tx = Some(body_tx);
        while let Some(m) = stream.next().await {
            let m = match m {
                Ok(Message::Binary(b)) => b,
                Ok(Message::Close(_)) => break,
                Ok(Message::Text(_)) => {
                    fail(
                        &body_tx,
                        "incorrect message type; expected a binary message but got text".into(),
                    )
                    .await;
                    return;
                }
                Ok(_) => continue,
                Err(e) => {
                    fail(&body_tx, e.into()).await;
                    return;
                }
            };
            let Some(tx) = &body_tx else {
                continue; // after the end of stream nothing more goes into the call
            };
            match frame::decode(m) {
                Ok(Frame::Data(d)) => {
                    if tx.send(Ok(BodyFrame::data(d))).await.is_err() {
                        body_tx = None;
                    }
                }
                Ok(Frame::EndOfStream) => body_tx = None,
                Ok(Frame::Metadata(_)) => {
                    fail(&body_tx, "message is not a gRPC data frame".into()).await;
                    return;
                }
                Err(e) => {
                    fail(&body_tx, e.into()).await;
                    return;
                }
            }
        }
        // closed by the agent before the end of stream: the call sees its request fail
        fail(
            &body_tx,
            "the WebSocket closed before the end of stream".into(),
        )
        .await;
    };
    let writer = respond(routes, call, sink);
    tokio::pin!(reader, writer);
    tokio::select! {
        _ = &mut writer => {}
        _ = &mut reader => {
            // the agent went away: the call is dropped with its response
        }
    }
}

/// Writes the call's response: headers, one message per gRPC frame, trailers; then closes.
async fn respond(
    routes: Routes,
    call: Request<tonic::body::Body>,
    mut sink: futures::stream::SplitSink<Ws, Message>,
) {
    let resp = match routes.oneshot(call).await {
        Ok(r) => r,
        Err(e) => match e {},
    };
    let (parts, mut body) = resp.into_parts();
    let mut headers = parts.headers;
    headers.remove(http::header::CONTENT_LENGTH);
    headers.remove(http::header::TRAILER);
    if sink
        .send(Message::Binary(frame::metadata(&headers)))
        .await
        .is_err()
    {
        return;
    }
    if headers.contains_key("grpc-status") {
        // trailers-only
        close(sink, CloseCode::Normal, "").await;
        return;
    }
    let mut reframer = Reframer::default();
    let mut ping = tokio::time::interval(PING);
    ping.tick().await;
    let mut trailers = None;
    loop {
        tokio::select! {
            f = body.frame() => match f {
                Some(Ok(f)) => match f.into_data() {
                    Ok(d) => {
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
                    Err(f) => {
                        if let Ok(t) = f.into_trailers() {
                            trailers = Some(t);
                        }
                    }
                },
                Some(Err(e)) => {
                    close(sink, CloseCode::Error, &e.to_string()).await;
                    return;
                }
                None => break,
            },
            _ = ping.tick() => {
                if sink.send(Message::Ping(Bytes::new())).await.is_err() {
                    return;
                }
            }
        }
    }
    let trailers = trailers.unwrap_or_else(|| {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        t
    });
    if sink
        .send(Message::Binary(frame::metadata(&trailers)))
        .await
        .is_ok()
    {
        close(sink, CloseCode::Normal, "").await;
    }
}

async fn close(mut sink: futures::stream::SplitSink<Ws, Message>, code: CloseCode, reason: &str) {
    let reason: String = reason.chars().take(100).collect();
    let _ = sink
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

/// Fails the call's request body (when it has not ended).
async fn fail(tx: &Option<mpsc::Sender<Result<BodyFrame<Bytes>, BoxError>>>, e: BoxError) {
    if let Some(tx) = tx {
        let _ = tx.send(Err(e)).await;
    }
}
