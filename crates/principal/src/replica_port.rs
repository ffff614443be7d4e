//! The replica port (`--ha-replica-port`): where active/active replicas take each other's
//! forwarded calls. gRPC calls (`application/grpc*`) go to the agent-facing services, anything
//! else to the resource proxy (Argo CD's Kubernetes API requests, container logs and the web
//! terminal's upgrade), each for the agent named in [`FORWARDED_AGENT`]. TLS is the replica link
//! ([`super::replica_link`]): only another replica gets in.

use std::convert::Infallible;
use std::sync::Arc;

use http::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio_stream::wrappers::ReceiverStream;
use tower::ServiceExt;

use super::Inner;
use super::forward::FORWARDED_AGENT;
use super::server::{Svc, routes};
use argocd_pull_agent_core::tls;

/// Serves `listener` until the returned tasks are aborted; returns the TLS configuration's
/// sender (certificate reloads; `None` behind a mesh, plaintext).
pub(super) async fn serve(
    inner: &Arc<Inner>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<(
    Option<tokio::sync::watch::Sender<Arc<rustls::ServerConfig>>>,
    Vec<tokio::task::JoinHandle<()>>,
)> {
    let svc = Svc {
        inner: inner.clone(),
        forwarded: true,
    };
    let relay =
        argocd_pull_agent_core::proto::redisrelay::redis_relay_server::RedisRelayServer::new(
            super::redis_proxy::relay::RelaySvc(inner.clone()),
        );
    let grpc = routes(&svc, &inner.cfg, &inner.metrics)
        .add_service(argocd_pull_agent_core::grpc_metrics::Metered::new(
            relay,
            &inner.metrics.grpc,
        ))
        .prepare();
    tracing::info!(addr = %listener.local_addr()?, "taking the other replicas' forwarded calls");
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        // one link carries every forwarded stream from one replica to this one: a Subscribe per
        // agent for as long as it is connected (thousands), not hyper's default of 200, past
        // which the other replica's calls would wait for a free stream without an error
        .max_concurrent_streams(None)
        .timer(TokioTimer::new())
        .keep_alive_interval(inner.cfg.heartbeat)
        .keep_alive_timeout(super::connection::keepalive_timeout(inner.cfg.heartbeat));
    builder.http1().timer(TokioTimer::new());
    let conn = move |io: Box<dyn super::replica_link::Io>, inner: Arc<Inner>| {
        let (grpc, builder) = (grpc.clone(), builder.clone());
        async move {
            let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (grpc, inner) = (grpc.clone(), inner.clone());
                async move { Ok::<_, Infallible>(dispatch(&inner, grpc, req).await) }
            });
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(io), svc)
                .await
            {
                tracing::debug!(error = %e, "a replica link ended");
            }
        }
    };
    if inner.cfg.insecure_plaintext {
        let inner = inner.clone();
        let t = tokio::spawn(async move {
            loop {
                let (io, _) = argocd_pull_ops::net::accept(&listener, "the replica port").await;
                tokio::spawn(conn(Box::new(io), inner.clone()));
            }
        });
        return Ok((None, vec![t]));
    }
    let (tx, rx) = tokio::sync::watch::channel(Arc::new(super::replica_link::server_config(
        &inner.cfg.tls,
    )?));
    let (conns, accept) = tls::serve_tls_reloadable(listener, rx, Arc::new(|_| {})).await;
    let inner = inner.clone();
    let t = tokio::spawn(async move {
        let mut conns = ReceiverStream::new(conns);
        while let Some(io) = futures::StreamExt::next(&mut conns).await {
            if let Ok(io) = io {
                tokio::spawn(conn(Box::new(io), inner.clone()));
            }
        }
    });
    Ok((Some(tx), vec![accept, t]))
}

async fn dispatch(
    inner: &Arc<Inner>,
    grpc: tonic::service::Routes,
    req: Request<Incoming>,
) -> http::Response<tonic::body::Body> {
    let is_grpc = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/grpc"));
    if is_grpc {
        return match grpc.oneshot(req.map(tonic::body::Body::new)).await {
            Ok(r) => r,
            Err(e) => match e {},
        };
    }
    let agent = req
        .headers()
        .get(FORWARDED_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| {
            format!("a request on the replica port must name its agent in {FORWARDED_AGENT}")
        });
    super::resource_proxy::handle(inner, agent, true, req)
        .await
        .map(tonic::body::Body::new)
}
