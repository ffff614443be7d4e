//! Every Kubernetes client the principal, the agent and `ctl` build: kube's own client stack
//! (TLS, proxies, authentication, kube's retry of 429/503/504) with what client-go's REST client
//! adds in the peer (`rest.Request`):
//! * the client-side rate limit of `ARGOCD_AGENT_KUBE_QPS` / `ARGOCD_AGENT_KUBE_BURST`
//!   ([`crate::env_tuning::kube_limits`]): a token bucket of `burst` tokens refilled at `qps` per
//!   second, each request waiting for its token in turn (golang.org/x/time/rate's `Wait`, which
//!   client-go's `flowcontrol.NewTokenBucketRateLimiter` is). As client-go, every attempt of a
//!   request waits, except a watch's first one and exec/attach/port-forward upgrades. Lease
//!   requests (leader election) take from a bucket of their own, as controller-runtime's leader
//!   election has a client of its own: a burst of writes never delays a lease renewal;
//! * `rest_client_*` ([`crate::rest_metrics`]).
//!
//! Stack, outermost first: the call (`rest_client_request_duration_seconds`, the attempt
//! counter) → kube's retry → the attempt (throttling, `rest_client_requests_total`,
//! `rest_client_request_retries_total`) → a buffer (kube's stack is not `Clone`, the retry needs
//! it) → kube's stack.
//!
//! The token bucket is hand-written (30 lines) rather than `governor`'s: `governor` has no
//! reservations, so waiters poll and overtake one another, while x/time/rate serves them in
//! the order they asked, which is what a user tuning the peer's QPS observes.

use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame};
use kube::client::{Body, ClientBuilder};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::env_tuning::KubeLimits;
use crate::rest_metrics::{RestClientMetrics, global};

/// A client for the cluster found the usual way (`KUBECONFIG` / `~/.kube/config`, then the
/// in-cluster service account), with the limits of the environment.
pub async fn infer() -> anyhow::Result<kube::Client> {
    let limits = crate::env_tuning::kube_limits()?;
    let config = kube::Config::infer().await?;
    with_limits(config, limits).context("creating the Kubernetes client")
}

/// A client for `config` limited by `limits` (`None`: no client-side limit).
pub fn with_limits(
    mut config: kube::Config,
    limits: Option<KubeLimits>,
) -> kube::Result<kube::Client> {
    let host: Arc<str> = config
        .cluster_url
        .authority()
        .map_or("none", |a| a.as_str())
        .into();
    let retry = std::mem::replace(&mut config.default_retry, false);
    let limiter = limits.map(|l| Arc::new(Limiter::new(l)));
    let attempt = AttemptLayer {
        host: host.clone(),
        limiter,
    };
    let retry = retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let builder = ClientBuilder::try_from(config)?
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&attempt)
        .with_layer(&tower::util::option_layer(retry))
        .with_layer(&CallLayer { host });
    Ok(builder.build())
}

/// A token bucket with x/time/rate's reservations: `burst` tokens at first, `qps` more per
/// second up to `burst`; a request takes one, waiting (in the order of asking) when none is left.
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    pub fn new(l: KubeLimits) -> Self {
        Self {
            qps: l.qps,
            burst: f64::from(l.burst),
            state: Mutex::new((f64::from(l.burst), Instant::now())),
        }
    }

    /// Takes a token: how long to wait until it is there.
    fn reserve(&self, now: Instant) -> Duration {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(s.1).as_secs_f64();
        let tokens = (s.0 + elapsed * self.qps).min(self.burst) - 1.0;
        *s = (tokens, now.max(s.1));
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-tokens / self.qps)
        }
    }

    /// Gives back a token not used (the waiting request went away).
    fn give_back(&self) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = (s.0 + 1.0).min(self.burst);
    }

    /// Waits for a token.
    pub async fn wait(&self) {
        let d = self.reserve(Instant::now());
        if d.is_zero() {
            return;
        }
        struct Reserved<'a>(Option<&'a TokenBucket>);
        impl Drop for Reserved<'_> {
            fn drop(&mut self) {
                if let Some(b) = self.0 {
                    b.give_back();
                }
            }
        }
        let mut r = Reserved(Some(self));
        tokio::time::sleep(d).await;
        r.0 = None;
    }
}

/// The buckets of one client.
struct Limiter {
    requests: TokenBucket,
    leases: TokenBucket,
}

impl Limiter {
    fn new(l: KubeLimits) -> Self {
        Self {
            requests: TokenBucket::new(l),
            leases: TokenBucket::new(l),
        }
    }

    fn bucket(&self, path: &str) -> &TokenBucket {
        if path.starts_with("/apis/coordination.k8s.io/") {
            &self.leases
        } else {
            &self.requests
        }
    }
}

/// What client-go does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Do`: throttled, timed.
    Call,
    /// `Stream` (pod logs): throttled, not timed.
    Stream,
    /// `Watch`: its first attempt not throttled, not timed.
    Watch,
    /// exec / attach / port-forward: not a `rest.Request` (neither throttled nor counted).
    Upgrade,
}

fn kind(req: &Request<Body>) -> Kind {
    if req.headers().contains_key(http::header::UPGRADE) {
        return Kind::Upgrade;
    }
    let watch = req.uri().query().is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes()).any(|(k, v)| k == "watch" && (v == "true" || v == "1"))
    });
    if watch {
        Kind::Watch
    } else if req.uri().path().ends_with("/log") {
        Kind::Stream
    } else {
        Kind::Call
    }
}

/// Attempts made of one call so far (shared by the retry's copies of the request).
#[derive(Clone, Default)]
struct Attempts(Arc<AtomicU32>);

#[derive(Clone)]
struct CallLayer {
    host: Arc<str>,
}

impl<S> Layer<S> for CallLayer {
    type Service = CallService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        CallService {
            inner,
            host: self.host.clone(),
        }
    }
}

struct CallService<S> {
    inner: S,
    host: Arc<str>,
}

impl<S, B> Service<Request<Body>> for CallService<S>
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError>,
    S::Future: Send + 'static,
    B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
{
    type Response = Response<TimedBody<B>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        req.extensions_mut().insert(Attempts::default());
        let timer = (kind(&req) == Kind::Call).then(|| Timer {
            start: Instant::now(),
            verb: req.method().as_str().to_string(),
            host: self.host.clone(),
            m: global(),
        });
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(resp) => Ok(resp.map(|body| TimedBody { body, timer })),
                Err(e) => {
                    drop(timer);
                    Err(e)
                }
            }
        })
    }
}

/// Observes `rest_client_request_duration_seconds` once, when dropped.
struct Timer {
    start: Instant,
    verb: String,
    host: Arc<str>,
    m: &'static RestClientMetrics,
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.m
            .call(&self.verb, &self.host, self.start.elapsed().as_secs_f64());
    }
}

/// A response body that ends its call's timer when it is read to the end, fails or is dropped.
pub struct TimedBody<B> {
    body: B,
    timer: Option<Timer>,
}

impl<B> HttpBody for TimedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.timer = None;
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[derive(Clone)]
struct AttemptLayer {
    host: Arc<str>,
    limiter: Option<Arc<Limiter>>,
}

impl<S> Layer<S> for AttemptLayer {
    type Service = AttemptService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        AttemptService {
            inner,
            host: self.host.clone(),
            limiter: self.limiter.clone(),
        }
    }
}

#[derive(Clone)]
struct AttemptService<S> {
    inner: S,
    host: Arc<str>,
    limiter: Option<Arc<Limiter>>,
}

impl<S> Service<Request<Body>> for AttemptService<S>
where
    S: Service<Request<Body>, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Response: HasStatus,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // readiness is awaited in `call`, after the rate limiter: a throttled request holds no
        // slot of the buffer below
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let inner = self.inner.clone();
        let kind = kind(&req);
        let attempt = req
            .extensions()
            .get::<Attempts>()
            .map_or(0, |a| a.0.fetch_add(1, Ordering::Relaxed));
        let (host, limiter) = (self.host.clone(), self.limiter.clone());
        Box::pin(async move {
            if kind == Kind::Upgrade {
                return inner.oneshot(req).await;
            }
            let method = req.method().as_str().to_string();
            let m = global();
            if let Some(l) = limiter
                && (kind != Kind::Watch || attempt > 0)
            {
                let t0 = Instant::now();
                l.bucket(req.uri().path()).wait().await;
                m.throttled(&method, &host, t0.elapsed().as_secs_f64());
            }
            let r = inner.oneshot(req).await;
            let status = r.as_ref().ok().map(HasStatus::status);
            m.attempt(status, &method, &host, attempt > 0);
            r
        })
    }
}

/// A response's status code.
pub trait HasStatus {
    fn status(&self) -> u16;
}

impl<B> HasStatus for Response<B> {
    fn status(&self) -> u16 {
        Response::status(self).as_u16()
    }
}

/// One GET through a client [`with_limits`] builds, to a throwaway API server (metric tests).
#[cfg(test)]
pub(crate) async fn one_request() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let app = axum::Router::new()
        .fallback(|| async { r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}"# });
    tokio::spawn(async move { axum::serve(l, app).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = with_limits(
        config,
        crate::env_tuning::kube_limits_of(None, None).unwrap(),
    )
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .get("a")
        .await
        .unwrap();
}

#[cfg(test)]
mod tests;
