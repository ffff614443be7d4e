//! The API server client of `argocd-pull controller` (`--api-connections`).
//!
//! `0`: kube's own client — HTTP/1.1, one TCP + TLS connection per concurrent request or watch.
//! `n ≥ 1`: `n` HTTP/2 connections (`argocd_pull_ops::client`, each its own connection pool),
//! requests and watches handed to them in turn, so a burst of writes is multiplexed over a few
//! connections instead of queueing on one or paying a handshake per request. A kubeconfig that
//! `argocd_pull_ops::client` cannot serve over HTTP/2 (proxy, exec plugin, tls-server-name) gets
//! kube's client.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use kube::client::Body;

/// The client for `config` over `connections` connections (see the module docs).
pub fn client(config: kube::Config, connections: u16) -> kube::Result<kube::Client> {
    if connections == 0 || !argocd_pull_ops::client::speaks_h2(&config) {
        return kube::Client::try_from(config);
    }
    let namespace = config.default_namespace.clone();
    let clients = (0..connections)
        .map(|_| argocd_pull_ops::client::from_config(config.clone()))
        .collect::<kube::Result<Vec<_>>>()?;
    if clients.len() == 1 {
        return Ok(clients.into_iter().next().expect("one client"));
    }
    Ok(kube::Client::new(
        RoundRobin {
            clients: clients.into(),
            next: Arc::new(AtomicUsize::new(0)),
        },
        namespace,
    ))
}

/// Hands each request to the next client. A kube client is always ready (it buffers), so
/// readiness is not tracked per client.
#[derive(Clone)]
struct RoundRobin {
    clients: Arc<[kube::Client]>,
    next: Arc<AtomicUsize>,
}

type Answer = Pin<Box<dyn Future<Output = kube::Result<http::Response<Body>>> + Send>>;

impl tower::Service<http::Request<Body>> for RoundRobin {
    type Response = http::Response<Body>;
    type Error = kube::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        let client = self.clients[i].clone();
        Box::pin(async move { client.send(req).await })
    }
}
