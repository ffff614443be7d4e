//! Connection loop: version check, authentication/refresh, subscribe, reconnect with backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use crate::proto::authapi::{self, authentication_client::AuthenticationClient};
use crate::proto::eventstreamapi::event_stream_client::EventStreamClient;
use crate::proto::versionapi::{self, version_client::VersionClient};
use crate::session::{self, SessionCtx};
use crate::tls::{self};

use super::Inner;
use super::SessionHandler;

impl Inner {
    pub(super) async fn connect_loop(self: Arc<Self>, client_tls: Arc<rustls::ClientConfig>) {
        let mut delay = self.cfg.reconnect_min;
        let mut refresh: Option<String> = None;
        loop {
            let started = tokio::time::Instant::now();
            match self.connect_once(&client_tls, &mut refresh).await {
                Ok(end) => tracing::info!(reason = %end, "stream to principal ended; reconnecting"),
                Err(e) => {
                    tracing::warn!(error = %e, "connection to principal failed");
                    *self.last_error.lock().expect("poisoned") = Some(e.to_string());
                }
            }
            self.connected.store(false, Ordering::SeqCst);
            self.metrics.connection_down();
            if started.elapsed() > Duration::from_secs(10) {
                delay = self.cfg.reconnect_min;
            }
            // jitter: up to +50 %
            let jitter = delay.mul_f64(rand::random::<f64>() * 0.5);
            tokio::time::sleep(delay + jitter).await;
            delay = (delay * 2).min(self.cfg.reconnect_max);
        }
    }

    pub(super) async fn connect_once(
        self: &Arc<Self>,
        client_tls: &Arc<rustls::ClientConfig>,
        refresh: &mut Option<String>,
    ) -> anyhow::Result<session::SessionEnd> {
        let endpoint = Endpoint::from_shared(format!("http://{}", self.cfg.principal))?
            .http2_keep_alive_interval(self.cfg.keepalive_interval)
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        let channel: Channel = endpoint
            .connect_with_connector(tls::connector(
                client_tls.clone(),
                self.cfg.principal,
                self.cfg.server_name.clone(),
            ))
            .await
            .map_err(|e| anyhow::anyhow!("connecting to {}: {e:?}", self.cfg.principal))?;
        let mut auth = AuthenticationClient::new(channel.clone());
        let mut resp = None;
        if let Some(r) = refresh.as_ref() {
            resp = auth
                .refresh_token(authapi::RefreshTokenRequest {
                    refresh_token: r.clone(),
                })
                .await
                .ok();
        }
        let resp = match resp {
            Some(r) => r.into_inner(),
            None => auth
                .authenticate(authapi::AuthRequest {
                    method: "mtls".into(),
                    credentials: Default::default(),
                    mode: self.cfg.mode.as_str().into(),
                    version: self.cfg.version.clone(),
                    agent_namespace: self.cfg.namespace.clone(),
                })
                .await
                .map_err(|s| {
                    if s.code() == tonic::Code::FailedPrecondition {
                        anyhow::anyhow!(
                            "version mismatch with principal: {} (this agent reports {:?}; set --report-version / ARGOCD_AGENT_REPORT_VERSION to the principal's version string)",
                            s.message(),
                            self.cfg.version
                        )
                    } else {
                        anyhow::anyhow!("authentication rejected: {} ({:?})", s.message(), s.code())
                    }
                })?
                .into_inner(),
        };
        *refresh = Some(resp.refresh_token.clone());
        // as the peer agent (pkg/client/remote.go): the principal judges the version at login
        // (string equality, FailedPrecondition "version mismatch"); Version is only logged
        let v = VersionClient::new(channel.clone())
            .version(versionapi::VersionRequest {})
            .await?
            .into_inner();
        tracing::info!(principal_version = v.version, "connected to principal");
        let mut es = EventStreamClient::new(channel)
            .max_decoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .max_encoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        if self.cfg.compression {
            es = es.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let (tx, rx) = mpsc::channel::<Box<crate::proto::eventstreamapi::Event>>(256);
        let mut req = tonic::Request::new(ReceiverStream::new(rx).map(|e| *e));
        req.metadata_mut()
            .insert("authorization", resp.access_token.parse()?);
        let inbound = es.subscribe(req).await?.into_inner();
        self.connected.store(true, Ordering::SeqCst);
        // ready = connected and authenticated
        self.metrics.connection_up();
        *self.last_error.lock().expect("poisoned") = None;
        self.connected_tx.send_modify(|n| *n += 1);
        tracing::info!(principal = %self.cfg.principal, mode = self.cfg.mode.as_str(), "connected to principal");
        let ctx = SessionCtx {
            source: self.source(),
            queue: self.queue.clone(),
            metrics: self.metrics.clone(),
            max_event_size: self.cfg.max_event_size,
            concurrency: self.cfg.concurrency,
            peer_label: self.cfg.mode.as_str().to_string(),
        };
        let handler = Arc::new(SessionHandler {
            inner: self.clone(),
        });
        Ok(session::run(ctx, handler, inbound, tx).await)
    }
}
