//! `grpc_server_*` (principal) and `grpc_client_*` (agent): the metrics of go-grpc-middleware's
//! `providers/prometheus` that the peer wires into its gRPC server and client
//! (argocd-agent internal/metrics/grpc.go, principal/listen.go, pkg/client/remote.go), with the
//! same names, help, labels and label values:
//! * `grpc_{server,client}_started_total{grpc_type,grpc_service,grpc_method}`: +1 per call;
//! * `grpc_{server,client}_handled_total{…,grpc_code}`: +1 when the call ends, by its status in
//!   Go's spelling (`OK`, `Canceled`, `Unavailable`, …);
//! * `grpc_{server,client}_msg_{received,sent}_total{…}`: gRPC messages of the call;
//! * `grpc_{server,client}_handling_seconds{…}`: call start to status, `prometheus.DefBuckets`.
//!
//! `grpc_type` is the method's kind from the .proto files (`unary`, `client_stream`,
//! `server_stream`, `bidi_stream`). As the peer's `InitializeMetrics`, the server's series of
//! every method of every wrapped service (and of every code for `handled`) exist at zero from the
//! start; the client's appear with their first call. Calls to methods the services do not have
//! are not counted (grpc-go answers them without running interceptors).
//!
//! A call is observed at the HTTP level: messages are counted from the length-prefixed frames of
//! the bodies, the status is `grpc-status` of the trailers (or of a trailers-only answer). A call
//! dropped before its status (the other side went away, the agent closed its stream) ends as
//! `Canceled`, as grpc-go reports a cancelled context; a client call whose connection fails ends
//! as `Unavailable`.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use argocd_pull_ops::metrics::Registry;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, Request, Response};
use http_body::{Body, Frame};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tonic::body::Body as TonicBody;
use tonic::server::NamedService;
use tower::Service;

mod methods {
    include!(concat!(env!("OUT_DIR"), "/grpc_methods.rs"));
}

/// `(service, method, grpc_type)` of every method of the .proto files.
pub use methods::METHODS;

/// The default buckets of the Go Prometheus client (`prometheus.DefBuckets`).
const DEF_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn histogram() -> Histogram {
    Histogram::new(DEF_BUCKETS)
}

/// A call's labels (in the order Go's client prints them: sorted by name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub grpc_method: &'static str,
    pub grpc_service: &'static str,
    pub grpc_type: &'static str,
}

/// A finished call's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandledLabels {
    pub grpc_code: &'static str,
    pub grpc_method: &'static str,
    pub grpc_service: &'static str,
    pub grpc_type: &'static str,
}

/// The method of a request path `/<package>.<Service>/<Method>`, if the .proto files have it.
pub fn call_of(path: &str) -> Option<CallLabels> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    METHODS
        .iter()
        .find(|(s, m, _)| *s == service && *m == method)
        .map(|(s, m, t)| CallLabels {
            grpc_method: m,
            grpc_service: s,
            grpc_type: t,
        })
}

/// Every gRPC code, as grpc-go's `codes.Code.String()` spells it (`interceptors.AllCodes`).
pub const GO_CODE_NAMES: [&str; 17] = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// Go's name of a `grpc-status` value; a code outside 0..=16 is `Unknown` (as tonic reads it).
pub fn go_code_name(code: i32) -> &'static str {
    usize::try_from(code)
        .ok()
        .and_then(|i| GO_CODE_NAMES.get(i))
        .copied()
        .unwrap_or("Unknown")
}

fn status_of(h: &HeaderMap) -> Option<&'static str> {
    let v = h.get("grpc-status")?;
    Some(go_code_name(
        v.to_str()
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(2),
    ))
}

/// One side's families (`grpc_server_*` or `grpc_client_*`); clones share the series.
#[derive(Clone, Debug)]
pub struct GrpcMetrics {
    started: Family<CallLabels, Counter>,
    handled: Family<HandledLabels, Counter>,
    msg_received: Family<CallLabels, Counter>,
    msg_sent: Family<CallLabels, Counter>,
    handling: Family<CallLabels, Histogram, fn() -> Histogram>,
}

impl GrpcMetrics {
    /// Families registered nowhere (replaced by [`Self::server`] / [`Self::client`]).
    pub fn unregistered() -> Self {
        GrpcMetrics {
            started: Default::default(),
            handled: Default::default(),
            msg_received: Default::default(),
            msg_sent: Default::default(),
            handling: Family::new_with_constructor(histogram),
        }
    }

    /// `grpc_server_*`, registered in `reg`.
    pub fn server(reg: &mut Registry) -> Self {
        let m = Self::unregistered();
        reg.register(
            "grpc_server_started",
            "Total number of RPCs started on the server.",
            m.started.clone(),
        );
        reg.register(
            "grpc_server_handled",
            "Total number of RPCs completed on the server, regardless of success or failure.",
            m.handled.clone(),
        );
        reg.register(
            "grpc_server_msg_received",
            "Total number of RPC stream messages received on the server.",
            m.msg_received.clone(),
        );
        reg.register(
            "grpc_server_msg_sent",
            "Total number of gRPC stream messages sent by the server.",
            m.msg_sent.clone(),
        );
        reg.register(
            "grpc_server_handling_seconds",
            "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
            m.handling.clone(),
        );
        m
    }

    /// `grpc_client_*`, registered in `reg`.
    pub fn client(reg: &mut Registry) -> Self {
        let m = Self::unregistered();
        reg.register(
            "grpc_client_started",
            "Total number of RPCs started on the client.",
            m.started.clone(),
        );
        reg.register(
            "grpc_client_handled",
            "Total number of RPCs completed by the client, regardless of success or failure.",
            m.handled.clone(),
        );
        reg.register(
            "grpc_client_msg_received",
            "Total number of RPC stream messages received by the client.",
            m.msg_received.clone(),
        );
        reg.register(
            "grpc_client_msg_sent",
            "Total number of gRPC stream messages sent by the client.",
            m.msg_sent.clone(),
        );
        reg.register(
            "grpc_client_handling_seconds",
            "Histogram of response latency (seconds) of the gRPC until it is finished by the application.",
            m.handling.clone(),
        );
        m
    }

    /// The series of every method of `service` at zero (the peer's `InitializeMetrics`).
    pub fn initialize(&self, service: &str) {
        for (s, m, t) in METHODS.iter().filter(|(s, _, _)| *s == service) {
            let call = CallLabels {
                grpc_method: m,
                grpc_service: s,
                grpc_type: t,
            };
            let _ = self.started.get_or_create(&call);
            let _ = self.msg_received.get_or_create(&call);
            let _ = self.msg_sent.get_or_create(&call);
            let _ = self.handling.get_or_create(&call);
            for code in GO_CODE_NAMES {
                let _ = self.handled.get_or_create(&handled(&call, code));
            }
        }
    }

    fn start(&self, call: CallLabels) -> Pending {
        self.started.get_or_create(&call).inc();
        Pending {
            m: self.clone(),
            call,
            start: Instant::now(),
            done: false,
        }
    }
}

fn handled(c: &CallLabels, code: &'static str) -> HandledLabels {
    HandledLabels {
        grpc_code: code,
        grpc_method: c.grpc_method,
        grpc_service: c.grpc_service,
        grpc_type: c.grpc_type,
    }
}

/// A call until its status is known; dropped before that, it ends as `Canceled`.
struct Pending {
    m: GrpcMetrics,
    call: CallLabels,
    start: Instant,
    done: bool,
}

impl Pending {
    fn finish(&mut self, code: &'static str) {
        if self.done {
            return;
        }
        self.done = true;
        self.m
            .handled
            .get_or_create(&handled(&self.call, code))
            .inc();
        self.m
            .handling
            .get_or_create(&self.call)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.finish("Canceled");
    }
}

/// Counts the gRPC messages (5-byte prefix: compressed flag, big-endian length) of a byte stream.
#[derive(Debug, Default)]
pub struct MessageFrames {
    header: [u8; 5],
    header_len: usize,
    remaining: u64,
}

impl MessageFrames {
    /// The messages completed by `b`.
    pub fn feed(&mut self, mut b: &[u8]) -> u64 {
        let mut n = 0;
        while !b.is_empty() {
            if self.header_len < 5 {
                let take = (5 - self.header_len).min(b.len());
                self.header[self.header_len..self.header_len + take].copy_from_slice(&b[..take]);
                self.header_len += take;
                b = &b[take..];
                if self.header_len == 5 {
                    let len = [
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ];
                    self.remaining = u64::from(u32::from_be_bytes(len));
                }
            } else {
                let take = usize::try_from(self.remaining).map_or(b.len(), |r| r.min(b.len()));
                self.remaining -= take as u64;
                b = &b[take..];
            }
            if self.header_len == 5 && self.remaining == 0 {
                n += 1;
                self.header_len = 0;
            }
        }
        n
    }
}

/// A body whose gRPC messages are counted into `counter`; for a response body, the call ends
/// with the status of its trailers.
pub struct MeteredBody<B> {
    inner: B,
    frames: MessageFrames,
    counter: Counter,
    call: Option<Pending>,
    /// the status of a call whose body fails
    on_error: &'static str,
}

impl<B: Body<Data = Bytes> + Unpin> Body for MeteredBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let r = Pin::new(&mut this.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    let n = this.frames.feed(d);
                    if n > 0 {
                        this.counter.inc_by(n);
                    }
                } else if let Some(t) = f.trailers_ref()
                    && let Some(mut c) = this.call.take()
                {
                    c.finish(status_of(t).unwrap_or("Unknown"));
                }
            }
            Poll::Ready(Some(Err(_))) => {
                if let Some(mut c) = this.call.take() {
                    c.finish(this.on_error);
                }
            }
            Poll::Ready(None) | Poll::Pending => {}
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

/// A server-side service whose calls are counted in `grpc_server_*`.
#[derive(Clone)]
pub struct Metered<S> {
    inner: S,
    m: GrpcMetrics,
}

impl<S: NamedService> Metered<S> {
    /// `svc` metered into `m`; its methods' series start at zero.
    pub fn new(svc: S, m: &GrpcMetrics) -> Self {
        m.initialize(S::NAME);
        Metered {
            inner: svc,
            m: m.clone(),
        }
    }
}

impl<S: NamedService> NamedService for Metered<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request<TonicBody>> for Metered<S>
where
    S: Service<Request<TonicBody>, Response = Response<TonicBody>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<TonicBody>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response<TonicBody>, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<TonicBody>) -> Self::Future {
        let Some(call) = call_of(req.uri().path()) else {
            return Box::pin(self.inner.call(req));
        };
        let received = self.m.msg_received.get_or_create(&call).clone();
        let sent = self.m.msg_sent.get_or_create(&call).clone();
        let pending = self.m.start(call);
        let req = req.map(|inner| {
            TonicBody::new(MeteredBody {
                inner,
                frames: MessageFrames::default(),
                counter: received,
                call: None,
                on_error: "Unknown",
            })
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut.await?;
            let mut pending = pending;
            if let Some(code) = status_of(resp.headers()) {
                // trailers-only: the call ended before any message
                pending.finish(code);
            }
            Ok(resp.map(|inner| {
                TonicBody::new(MeteredBody {
                    inner,
                    frames: MessageFrames::default(),
                    counter: sent,
                    call: Some(pending),
                    on_error: "Unknown",
                })
            }))
        })
    }
}

/// The client side: every call through `inner` (a channel) counted in `grpc_client_*`.
#[derive(Clone)]
pub struct MeteredClient<S> {
    inner: S,
    m: GrpcMetrics,
}

impl<S> MeteredClient<S> {
    pub fn new(inner: S, m: &GrpcMetrics) -> Self {
        MeteredClient {
            inner,
            m: m.clone(),
        }
    }
}

/// A client call's response body: [`MeteredBody`], or the body of a call that is not counted.
pub type ClientBody<B> = MeteredBody<B>;

impl<S, RB> Service<Request<TonicBody>> for MeteredClient<S>
where
    S: Service<Request<TonicBody>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Unpin + Send + 'static,
{
    type Response = Response<ClientBody<RB>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<TonicBody>) -> Self::Future {
        let Some(call) = call_of(req.uri().path()) else {
            let fut = self.inner.call(req);
            return Box::pin(async move {
                let resp = fut.await?;
                Ok(resp.map(|inner| MeteredBody {
                    inner,
                    frames: MessageFrames::default(),
                    counter: Counter::default(),
                    call: None,
                    on_error: "Unavailable",
                }))
            });
        };
        let received = self.m.msg_received.get_or_create(&call).clone();
        let sent = self.m.msg_sent.get_or_create(&call).clone();
        let mut pending = self.m.start(call);
        let req = req.map(|inner| {
            TonicBody::new(MeteredBody {
                inner,
                frames: MessageFrames::default(),
                counter: sent,
                call: None,
                on_error: "Unavailable",
            })
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(resp) => {
                    if let Some(code) = status_of(resp.headers()) {
                        pending.finish(code);
                    }
                    Ok(resp.map(|inner| MeteredBody {
                        inner,
                        frames: MessageFrames::default(),
                        counter: received,
                        call: Some(pending),
                        on_error: "Unavailable",
                    }))
                }
                Err(e) => {
                    pending.finish("Unavailable");
                    Err(e)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests;
