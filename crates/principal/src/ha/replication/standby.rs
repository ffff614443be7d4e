//! What a principal that is not active serves on its gRPC port: the replication API (it refuses
//! to be a source, naming its state) and the agent API refusing agents with `UNAVAILABLE`, as the
//! peer's `acceptCheck` does (an agent that reaches a replica — DNS not moved yet — backs off and
//! retries).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use argocd_pull_agent_core::proto::authapi::{self, authentication_server::Authentication};
use argocd_pull_agent_core::proto::eventstreamapi::{self, event_stream_server::EventStream};
use argocd_pull_agent_core::proto::replicationapi::replication_server::ReplicationServer;
use argocd_pull_agent_core::proto::versionapi::{self, version_server::Version};

use super::Shared;
use super::server::ReplicationSvc;

#[derive(Clone)]
struct Refuse {
    shared: Arc<Shared>,
    version: String,
}

impl Refuse {
    fn refused(&self) -> Status {
        self.shared.controller.record_rejected_agent();
        let st = self.shared.controller.state();
        Status::unavailable(format!(
            "not accepting connections in state {st}: this principal is a replica; agents are served by the active principal (promote this one with `argocd-pull ctl ha promote`)"
        ))
    }
}

#[tonic::async_trait]
impl Version for Refuse {
    async fn version(
        &self,
        _r: Request<versionapi::VersionRequest>,
    ) -> Result<Response<versionapi::VersionResponse>, Status> {
        Ok(Response::new(versionapi::VersionResponse {
            version: self.version.clone(),
        }))
    }
}

#[tonic::async_trait]
impl Authentication for Refuse {
    async fn authenticate(
        &self,
        _r: Request<authapi::AuthRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        Err(self.refused())
    }
    async fn refresh_token(
        &self,
        _r: Request<authapi::RefreshTokenRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        Err(self.refused())
    }
}

type Out = Pin<Box<dyn Stream<Item = Result<eventstreamapi::Event, Status>> + Send>>;

#[tonic::async_trait]
impl EventStream for Refuse {
    type SubscribeStream = Out;
    async fn subscribe(
        &self,
        _r: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<Out>, Status> {
        Err(self.refused())
    }
    async fn push(
        &self,
        _r: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<eventstreamapi::PushSummary>, Status> {
        Err(self.refused())
    }
    async fn ping(
        &self,
        _r: Request<eventstreamapi::PingRequest>,
    ) -> Result<Response<eventstreamapi::PongReply>, Status> {
        Err(self.refused())
    }
}

/// A running standby server (on loopback; the front splices the public port to it).
pub struct Standby {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Standby {
    pub async fn start(
        shared: Arc<Shared>,
        cfg: &crate::PrincipalConfig,
        listen: SocketAddr,
    ) -> anyhow::Result<Standby> {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let refuse = Refuse {
            shared: shared.clone(),
            version: cfg.version.clone(),
        };
        let routes = tonic::service::Routes::new(
            argocd_pull_agent_core::proto::versionapi::version_server::VersionServer::new(refuse.clone()),
        )
        .add_service(
            argocd_pull_agent_core::proto::authapi::authentication_server::AuthenticationServer::new(refuse.clone()),
        )
        .add_service(
            argocd_pull_agent_core::proto::eventstreamapi::event_stream_server::EventStreamServer::new(refuse),
        )
        .add_service(
            ReplicationServer::new(ReplicationSvc { shared })
                .max_encoding_message_size(usize::MAX)
                .max_decoding_message_size(usize::MAX),
        );
        let router = tonic::transport::Server::builder().add_routes(routes);
        let (stx, srx) = tokio::sync::oneshot::channel::<()>();
        let mut tasks = Vec::new();
        let stop = async {
            let _ = srx.await;
        };
        if cfg.insecure_plaintext {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tasks.push(tokio::spawn(async move {
                let _ = router.serve_with_incoming_shutdown(incoming, stop).await;
            }));
        } else {
            let tls = Arc::new(argocd_pull_agent_core::tls::server_config(
                &cfg.tls,
                cfg.allow_tls12,
            )?);
            let (_tx, rx) = tokio::sync::watch::channel(tls);
            let (incoming, accept) =
                argocd_pull_agent_core::tls::serve_tls_reloadable(listener, rx, Arc::new(|_| {}))
                    .await;
            tasks.push(accept);
            tasks.push(tokio::spawn(async move {
                let _keep = _tx;
                let _ = router
                    .serve_with_incoming_shutdown(ReceiverStream::new(incoming), stop)
                    .await;
            }));
        }
        Ok(Standby {
            addr,
            stop: Some(stx),
            tasks,
        })
    }

    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
