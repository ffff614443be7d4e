//! gRPC call spans, as the peer's `otelgrpc` stats handlers (v0.70, default semantic conventions):
//! span name `<package>.<Service>/<Method>`, kind server or client, attributes `rpc.system.name`
//! (`grpc`), `rpc.method` (the span name), `rpc.response.status_code` (`OK`, `UNAVAILABLE`, …),
//! `server.address` / `server.port`; the span ends with the call (for a stream, when it closes).
//! The client puts its span's context in the `traceparent` / `tracestate` metadata and the server
//! continues it, so an agent of the peer calling this principal (or the other way round) gets one
//! trace per call. Status: the client marks every non-`OK` answer an error; the server only
//! `UNKNOWN`, `DEADLINE_EXCEEDED`, `UNIMPLEMENTED`, `INTERNAL`, `UNAVAILABLE` and `DATA_LOSS`
//! (otelgrpc's `serverStatus`).
//!
//! With tracing off the server's services are not wrapped ([`add_service`]) and the client's
//! wrapper passes calls and bodies through untouched.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use argocd_pull_ops::otel::{self as ops, TARGET};
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use tonic::body::Body as TonicBody;
use tonic::server::NamedService;
use tonic::service::Routes;
use tower::Service;
use tracing::field::Empty;

/// Adds `svc` to `routes`, in a server span per call when tracing is on.
pub fn add_service<S>(routes: Routes, svc: S) -> Routes
where
    S: Service<Request<TonicBody>, Response = Response<TonicBody>, Error = Infallible>
        + NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    if ops::enabled() {
        routes.add_service(Traced { inner: svc })
    } else {
        routes.add_service(svc)
    }
}

/// A server-side service in a span per call.
#[derive(Clone)]
pub struct Traced<S> {
    inner: S,
}

impl<S: NamedService> NamedService for Traced<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<TonicBody>> for Traced<S>
where
    S: Service<Request<TonicBody>, Response = Response<TonicBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<TonicBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<TonicBody>) -> Self::Future {
        let method = req.uri().path().trim_start_matches('/').to_string();
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "grpc",
            otel.name = %method,
            otel.kind = "server",
            "rpc.system.name" = "grpc",
            "rpc.method" = %method,
            "server.address" = Empty,
            "server.port" = Empty,
            "rpc.response.status_code" = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        if let Some(tp) = header(req.headers(), "traceparent") {
            ops::set_parent(&span, tp, header(req.headers(), "tracestate"));
        }
        if let Some(local) = local_addr(&req) {
            span.record("server.address", tracing::field::display(local.ip()));
            span.record("server.port", local.port());
        }
        let fut = {
            let _g = span.enter();
            self.inner.call(req)
        };
        Box::pin(async move {
            let resp = fut.await?;
            let (parts, body) = resp.into_parts();
            let call = Call {
                span,
                side: Side::Server,
            };
            // a trailers-only answer (an error before any message) has its status in the headers
            let body = match call.finish_from(&parts.headers) {
                Some(call) => TonicBody::new(TracedBody {
                    inner: body,
                    call: Some(call),
                }),
                None => body,
            };
            Ok(Response::from_parts(parts, body))
        })
    }
}

fn local_addr<B>(req: &Request<B>) -> Option<std::net::SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::local_addr)
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|t| t.get_ref().local_addr())
        })
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The client side: every call through this channel in a client span (when tracing is on).
#[derive(Clone)]
pub struct Client<S> {
    inner: S,
    host: String,
    port: u16,
}

impl<S> Client<S> {
    /// `inner` (a tonic `Channel`) talking to `host:port` (`server.address`, `server.port`).
    pub fn new(inner: S, host: &str, port: u16) -> Self {
        Client {
            inner,
            host: host.to_string(),
            port,
        }
    }
}

impl<S, B, RB> Service<Request<B>> for Client<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display + Send + 'static,
    RB: Body + Unpin + Send + 'static,
{
    type Response = Response<TracedBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if !ops::enabled() {
            let fut = self.inner.call(req);
            return Box::pin(async move {
                let resp = fut.await?;
                Ok(resp.map(|inner| TracedBody { inner, call: None }))
            });
        }
        let method = req.uri().path().trim_start_matches('/').to_string();
        let span = tracing::info_span!(
            target: TARGET,
            "grpc",
            otel.name = %method,
            otel.kind = "client",
            "rpc.system.name" = "grpc",
            "rpc.method" = %method,
            "server.address" = %self.host,
            "server.port" = self.port,
            "rpc.response.status_code" = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        if let Some(tc) = ops::context_of(&span) {
            let h = req.headers_mut();
            if let Ok(v) = HeaderValue::from_str(&tc.traceparent) {
                h.insert("traceparent", v);
            }
            if let Some(ts) = tc.tracestate.and_then(|s| HeaderValue::from_str(&s).ok()) {
                h.insert("tracestate", ts);
            }
        }
        let fut = self.inner.call(req);
        Box::pin(async move {
            let call = Call {
                span,
                side: Side::Client,
            };
            match fut.await {
                Ok(resp) => {
                    let (parts, inner) = resp.into_parts();
                    let call = call.finish_from(&parts.headers);
                    Ok(Response::from_parts(parts, TracedBody { inner, call }))
                }
                Err(e) => {
                    call.fail(code_name(tonic::Code::Unavailable), &e.to_string());
                    Err(e)
                }
            }
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Server,
    Client,
}

/// A call's span until its status is known.
struct Call {
    span: tracing::Span,
    side: Side,
}

impl Call {
    /// Records the status if `headers` carry one (then the call is over: `None`).
    fn finish_from(self, headers: &HeaderMap) -> Option<Call> {
        match header(headers, "grpc-status") {
            Some(_) => {
                self.status(headers);
                None
            }
            None => Some(self),
        }
    }

    fn status(&self, h: &HeaderMap) {
        let code = header(h, "grpc-status")
            .and_then(|s| s.parse::<i32>().ok())
            .map_or(tonic::Code::Unknown, tonic::Code::from_i32);
        let name = code_name(code);
        self.span.record("rpc.response.status_code", name);
        let error = match self.side {
            Side::Client => code != tonic::Code::Ok,
            Side::Server => matches!(
                code,
                tonic::Code::Unknown
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Unimplemented
                    | tonic::Code::Internal
                    | tonic::Code::Unavailable
                    | tonic::Code::DataLoss
            ),
        };
        if error {
            let msg = header(h, "grpc-message").unwrap_or_default();
            self.span.record("otel.status_code", "error");
            self.span.record(
                "otel.status_description",
                tracing::field::display(percent_decode(msg)),
            );
        }
    }

    fn fail(&self, code: &'static str, msg: &str) {
        self.span.record("rpc.response.status_code", code);
        self.span.record("otel.status_code", "error");
        self.span.record("otel.status_description", msg);
    }
}

/// A response body that ends its call's span with the stream (status from the trailers).
pub struct TracedBody<B> {
    inner: B,
    call: Option<Call>,
}

impl<B: Body + Unpin> Body for TracedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        if this.call.is_some() {
            match &r {
                Poll::Ready(Some(Ok(f))) => {
                    if let Some(t) = f.trailers_ref()
                        && let Some(c) = this.call.take()
                    {
                        c.status(t);
                    }
                }
                Poll::Ready(Some(Err(_))) => {
                    if let Some(c) = this.call.take() {
                        c.fail(code_name(tonic::Code::Unavailable), "stream failed");
                    }
                }
                Poll::Ready(None) => {
                    this.call = None;
                }
                Poll::Pending => {}
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The canonical name of a gRPC code (`OK`, `CANCELLED`, …).
pub fn code_name(c: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match c {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `grpc-message` is percent-encoded.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |c: u8| (c as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_message_is_percent_decoded() {
        assert_eq!(percent_decode("token%20expired%3A x"), "token expired: x");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(code_name(tonic::Code::from_i32(14)), "UNAVAILABLE");
    }
}
