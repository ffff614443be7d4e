//! Plain-HTTP listener for `kubectl` and out-of-process clients.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use crate::Inner;
use crate::handler::serve_request;

/// A running HTTP listener of a [`crate::Hub`]. Dropping it without [`HubServer::shutdown`]
/// keeps serving until the runtime stops.
pub struct HubServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for HubServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl HubServer {
    /// `http://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig (context `hub`, namespace `default`, no credentials) for kubectl and
    /// `kube::Config`.
    pub fn kubeconfig_yaml(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {}\ncontexts:\n- name: hub\n  context:\n    cluster: hub\n    user: hub\n    namespace: default\ncurrent-context: hub\nusers:\n- name: hub\n  user: {{}}\npreferences: {{}}\n",
            self.url()
        )
    }

    pub fn write_kubeconfig(&self, path: &std::path::Path) -> anyhow::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
            .map_err(|e| anyhow::anyhow!("writing kubeconfig {}: {e}", path.display()))
    }

    /// Stops accepting connections and closes the open ones (watches end).
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

pub(crate) async fn serve(inner: Arc<Inner>, addr: SocketAddr) -> anyhow::Result<HubServer> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("binding {addr}: {e}"))?;
    let local = listener.local_addr()?;
    let (tx, mut rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut rx => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                acc = listener.accept() => {
                    let (stream, peer) = match acc {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::warn!(error = %e, "hub: accept failed");
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let inner = inner.clone();
                    conns.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let inner = inner.clone();
                            async move { Ok::<_, Infallible>(serve_request(inner, req).await) }
                        });
                        if let Err(e) = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await
                        {
                            tracing::debug!(%peer, error = %e, "hub: connection ended with an error");
                        }
                    });
                }
            }
        }
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    });
    tracing::info!(url = %format!("http://{local}"), "hub: serving HTTP");
    Ok(HubServer {
        addr: local,
        stop: Some(tx),
        task: Some(task),
    })
}
