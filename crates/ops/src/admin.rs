//! The admin HTTP server: `/metrics`, `/healthz`, `/readyz`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// A readiness flag: false until the component says it is ready (e.g. its caches are filled),
/// and a set of named problems (e.g. a missing CRD) that keep `/readyz` at 503 and are listed in
/// its body until they are cleared.
#[derive(Clone, Debug)]
pub struct Readiness {
    tx: Arc<watch::Sender<bool>>,
    problems: Arc<Mutex<BTreeMap<String, String>>>,
    /// The replica's role in a leader election (shown on `/healthz`), when it takes part in one.
    role: Arc<Mutex<Option<String>>>,
    /// When set, `/healthz` follows the flag too: 503 with this reason while it is false.
    health_gate: Arc<Mutex<Option<String>>>,
    /// A component's own verdict for `/healthz` and `/readyz` (see [`Gate`]).
    gate: Arc<Mutex<Option<Gate>>>,
}

/// A component's own health verdict: e.g. a principal in cross-cluster HA that is not active
/// answers `/healthz` with 503, so that a global load balancer sends agents elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    pub healthy: bool,
    /// Extra response headers (e.g. `X-HA-State`).
    pub headers: Vec<(String, String)>,
    /// The body when not healthy.
    pub body: String,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            tx: Arc::new(watch::channel(false).0),
            problems: Arc::default(),
            role: Arc::default(),
            health_gate: Arc::default(),
            gate: Arc::default(),
        }
    }
}

impl Readiness {
    /// Records (or replaces) the problem `key`, shown on `/readyz` until [`Readiness::clear_problem`].
    pub fn set_problem(&self, key: impl Into<String>, message: impl Into<String>) {
        self.lock().insert(key.into(), message.into());
    }

    pub fn clear_problem(&self, key: &str) {
        self.lock().remove(key);
    }

    /// The current problems' messages, ordered by key.
    pub fn problems(&self) -> Vec<String> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, String>> {
        self.problems.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the role `/healthz` reports (e.g. `active`, `standby (active: pod-a)`).
    pub fn set_role(&self, role: impl Into<String>) {
        *self.role.lock().unwrap_or_else(|e| e.into_inner()) = Some(role.into());
    }

    /// The role `/healthz` reports, if any.
    pub fn role(&self) -> Option<String> {
        self.role.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Makes `/healthz` answer 503 with `reason` while the flag is false (argocd-agent's agent
    /// answers 503 unless it is connected to its principal, and its chart's probes rely on it).
    pub fn health_follows_readiness(&self, reason: impl Into<String>) {
        *self.health_gate.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason.into());
    }

    /// The reason `/healthz` is 503 now, if it is.
    pub fn unhealthy(&self) -> Option<String> {
        if self.get() {
            return None;
        }
        self.health_gate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets (or clears) the component's own verdict for `/healthz` and `/readyz`.
    pub fn set_gate(&self, gate: Option<Gate>) {
        *self.gate.lock().unwrap_or_else(|e| e.into_inner()) = gate;
    }

    /// The current verdict, if any.
    pub fn gate(&self) -> Option<Gate> {
        self.gate.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set(&self, ready: bool) {
        self.tx.send_replace(ready);
    }
    pub fn get(&self) -> bool {
        *self.tx.borrow()
    }
    /// Resolves once the flag is true.
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // the sender lives in `self`, so the channel cannot close while we wait
        let _ = rx.wait_for(|r| *r).await;
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Registry>,
    ready: Readiness,
}

/// The admin routes, to mount elsewhere or serve with [`serve`].
pub fn router(registry: Arc<Registry>, ready: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AdminState { registry, ready })
}

async fn metrics(State(s): State<AdminState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        axum::body::Body::from_stream(futures::stream::iter(
            crate::metrics::render_chunks(&s.registry)
                .into_iter()
                .map(Ok::<_, std::convert::Infallible>),
        )),
    )
}

/// `ok`, and the replica's role when it takes part in a leader election (`role: active`); 503
/// with the reason while a health gate is closed ([`Readiness::health_follows_readiness`]); the
/// component's [`Gate`] when it set one (503 with its body when not healthy).
async fn healthz(State(s): State<AdminState>) -> axum::response::Response {
    if let Some(reason) = s.ready.unhealthy() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("unhealthy: {reason}\n"),
        )
            .into_response();
    }
    let ok = match s.ready.role() {
        Some(role) => format!("ok\nrole: {role}\n"),
        None => "ok".into(),
    };
    match s.ready.gate() {
        None => ok.into_response(),
        Some(g) => gated(&g, ok),
    }
}

fn gated(g: &Gate, ok: String) -> axum::response::Response {
    let (code, body) = match g.healthy {
        true => (StatusCode::OK, ok),
        false => (StatusCode::SERVICE_UNAVAILABLE, g.body.clone()),
    };
    let mut r = (code, body).into_response();
    for (k, v) in &g.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::try_from(k.as_str()),
            axum::http::HeaderValue::try_from(v.as_str()),
        ) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

async fn readyz(State(s): State<AdminState>) -> axum::response::Response {
    if let Some(g) = s.ready.gate().filter(|g| !g.healthy) {
        return gated(&g, String::new());
    }
    readyz_problems(s).await.into_response()
}

async fn readyz_problems(s: AdminState) -> impl IntoResponse {
    let problems = s.ready.problems();
    if s.ready.get() && problems.is_empty() {
        return (StatusCode::OK, "ready".to_string());
    }
    let mut body = String::from("not ready");
    if let Some(reason) = s.ready.unhealthy() {
        body.push_str("\n- ");
        body.push_str(&reason);
    } else if !s.ready.get() {
        body.push_str("\n- caches are not filled yet");
    }
    for p in problems {
        body.push_str("\n- ");
        body.push_str(&p);
    }
    body.push('\n');
    (StatusCode::SERVICE_UNAVAILABLE, body)
}

/// Binds `addr` and serves the admin routes until `shutdown` is cancelled.
/// Returns the bound address (useful with port 0) and the server future.
pub async fn bind(
    addr: SocketAddr,
    registry: Arc<Registry>,
    ready: Readiness,
    shutdown: CancellationToken,
) -> anyhow::Result<(SocketAddr, impl Future<Output = anyhow::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot bind the admin server to {addr}: {e}"))?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "admin server (/metrics, /healthz, /readyz) listening");
    let app = router(registry, ready);
    let fut = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(anyhow::Error::from)
    };
    Ok((local, fut))
}

/// Binds and serves the admin routes until `shutdown` is cancelled.
pub async fn serve(
    addr: SocketAddr,
    registry: Arc<Registry>,
    ready: Readiness,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (_, fut) = bind(addr, registry, ready, shutdown).await?;
    fut.await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get(app: Router, path: &str) -> (StatusCode, String) {
        let res = app
            .oneshot(axum::http::Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readiness_flips_and_metrics_render() {
        let mut registry = Registry::default();
        let c = Counter::<u64>::default();
        registry.register("things", "Things done", c.clone());
        c.inc();
        let ready = Readiness::default();
        let app = router(Arc::new(registry), ready.clone());
        assert_eq!(get(app.clone(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(app.clone(), "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        ready.set(true);
        ready.wait().await;
        assert_eq!(get(app.clone(), "/readyz").await.0, StatusCode::OK);
        ready.set_problem("crd/x", "CRD x is not installed: run y");
        let (status, body) = get(app.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "not ready\n- CRD x is not installed: run y\n");
        ready.clear_problem("crd/x");
        assert_eq!(
            get(app.clone(), "/readyz").await,
            (StatusCode::OK, "ready".into())
        );
        // a replica in a leader election says which role it has
        assert_eq!(get(app.clone(), "/healthz").await.1, "ok");
        ready.set_role("standby (active: principal-0@10.0.0.7)");
        assert_eq!(
            get(app.clone(), "/healthz").await,
            (
                StatusCode::OK,
                "ok\nrole: standby (active: principal-0@10.0.0.7)\n".into()
            )
        );
        // a component's own verdict (an HA replica: 503 so that a GSLB sends agents elsewhere)
        ready.set_gate(Some(Gate {
            healthy: false,
            headers: vec![("X-HA-State".into(), "replicating".into())],
            body: "HA state: replicating - not accepting traffic\n".into(),
        }));
        let res = app
            .clone()
            .oneshot(
                axum::http::Request::get("/healthz")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()["x-ha-state"], "replicating");
        assert_eq!(
            get(app.clone(), "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "HA state: replicating - not accepting traffic\n".into()
            )
        );
        ready.set_gate(Some(Gate {
            healthy: true,
            headers: vec![("X-HA-State".into(), "active".into())],
            body: String::new(),
        }));
        assert_eq!(get(app.clone(), "/healthz").await.0, StatusCode::OK);
        assert_eq!(get(app.clone(), "/readyz").await.0, StatusCode::OK);
        let (status, body) = get(app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("things_total 1"), "{body}");
    }

    #[tokio::test]
    async fn healthz_follows_readiness_when_gated() {
        let ready = Readiness::default();
        let app = router(Arc::new(Registry::default()), ready.clone());
        assert_eq!(
            get(app.clone(), "/healthz").await.0,
            StatusCode::OK,
            "ungated"
        );
        ready.health_follows_readiness("not connected to the principal");
        assert_eq!(
            get(app.clone(), "/healthz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "unhealthy: not connected to the principal\n".into()
            )
        );
        assert_eq!(
            get(app.clone(), "/readyz").await.1,
            "not ready\n- not connected to the principal\n"
        );
        ready.set(true);
        assert_eq!(
            get(app.clone(), "/healthz").await,
            (StatusCode::OK, "ok".into())
        );
        ready.set(false);
        assert_eq!(
            get(app, "/healthz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test]
    async fn server_stops_on_cancel() {
        let token = CancellationToken::new();
        let (addr, fut) = bind(
            "127.0.0.1:0".parse().unwrap(),
            Arc::new(Registry::default()),
            Readiness::default(),
            token.clone(),
        )
        .await
        .unwrap();
        let task = tokio::spawn(fut);
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut buf = String::new();
        stream.read_to_string(&mut buf).await.unwrap();
        assert!(buf.starts_with("HTTP/1.1 200"), "{buf}");
        token.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), task)
            .await
            .expect("server stops after cancel")
            .unwrap()
            .unwrap();
    }
}
