//! Container-log requests from the principal (the peer's agent/log.go): the agent reads the pod's
//! log from its own API server and streams the bytes over `LogStreamService.StreamLogs` as the
//! peer does: an empty first frame, chunks of at most 64 KiB as they are read, then `eof`, or
//! `error` (the API server's `Status` JSON when it refused). When the principal ends the stream
//! (its HTTP client went away) the read stops and the API-server request is dropped.
//!
//! Differences from the peer: the API server is asked for timestamps only when the caller asked
//! for them (the peer always asks, for its resume); a follow stream that breaks is not resumed
//! (the caller sees its response end and asks again); the event is acknowledged at once for
//! static logs too (the peer acknowledges those after the last byte).

use std::sync::Arc;
use std::time::Duration;

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use argocd_pull_agent_core::container::ContainerLogRequest;
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::proto::logstreamapi::{
    LogStreamData, log_stream_service_client::LogStreamServiceClient,
};
use argocd_pull_agent_core::session::HandleError;

use super::Inner;
use super::podstream::error_text;

/// The peer's `chunkMax`.
pub const CHUNK: usize = 64 * 1024;
/// How long the agent waits for the principal's answer after its last frame.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

impl Inner {
    /// A `containerlog` request: streamed in the background; the event is ACKed now.
    pub(super) fn handle_container_log(self: &Arc<Self>, ev: &Event) -> Result<(), HandleError> {
        let req = ContainerLogRequest::from_json(&ev.data).map_err(HandleError::Permanent)?;
        let me = self.clone();
        let uuid = req.uuid.clone();
        let started = self.pod_streams.spawn(&uuid, async move {
            tracing::info!(uuid = %req.uuid, namespace = %req.namespace, pod = %req.pod_name, container = %req.container, follow = req.follow, "processing log request");
            if let Err(e) = me.stream_log(&req).await {
                me.metrics.peer.agent_resource_proxy_errors.inc();
                tracing::warn!(uuid = %req.uuid, error = %e, "log stream failed");
            }
        });
        if !started {
            tracing::warn!(uuid, "duplicate log request; already streaming");
        }
        Ok(())
    }

    async fn stream_log(&self, req: &ContainerLogRequest) -> Result<(), String> {
        self.metrics.peer.agent_resource_proxy_requests.inc();
        let (tx, rx) = mpsc::channel::<LogStreamData>(4);
        let (channel, grpc_req) = self.pod_streams.request(ReceiverStream::new(rx)).await?;
        let mut call = tokio::spawn(async move {
            LogStreamServiceClient::new(channel)
                .stream_logs(grpc_req)
                .await
                .map(|r| r.into_inner())
        });
        let frame = |data: Vec<u8>, eof: bool, error: String| LogStreamData {
            request_uuid: req.uuid.clone(),
            data,
            eof,
            error,
        };
        let client = match (&self.cfg.resource_proxy, self.cfg.enable_resource_proxy) {
            (Some(c), true) => c.0.clone(),
            _ => {
                let msg = argocd_pull_agent_core::container::failure_status(
                    403,
                    "Forbidden",
                    "the resource proxy is disabled on this agent (--enable-resource-proxy=false or no Kubernetes client)",
                );
                let _ = tx.send(frame(Vec::new(), true, msg.to_string())).await;
                drop(tx);
                let _ = tokio::time::timeout(CLOSE_WAIT, call).await;
                return Err("the resource proxy is disabled".into());
            }
        };
        let lp = LogParams {
            container: (!req.container.is_empty()).then(|| req.container.clone()),
            follow: req.follow,
            limit_bytes: req.limit_bytes,
            pretty: false,
            previous: req.previous,
            since_seconds: req.since_seconds,
            since_time: match req.since_seconds {
                Some(_) => None,
                None => req.since_time.parse::<jiff::Timestamp>().ok(),
            },
            tail_lines: req.tail_lines,
            timestamps: req.timestamps,
        };
        let api = Api::<Pod>::namespaced(client, &req.namespace);
        // bounded as resource requests (the principal gives up at its own timeout)
        let open = tokio::time::timeout(
            super::resource::API_TIMEOUT,
            api.log_stream(&req.pod_name, &lp),
        );
        let opened = tokio::select! {
            o = open => o,
            _ = &mut call => return Err("the principal ended the log stream before it started".into()),
        };
        let opened = opened.unwrap_or_else(|_| {
            Err(kube::Error::Api(Box::new(
                kube::core::Status::failure(
                    &format!(
                        "the API server did not answer the log request within {:?}",
                        super::resource::API_TIMEOUT
                    ),
                    "Timeout",
                )
                .with_code(504),
            )))
        });
        let mut reader = match opened {
            Ok(r) => Box::pin(r),
            Err(e) => {
                let _ = tx.send(frame(Vec::new(), true, error_text(&e))).await;
                drop(tx);
                let _ = tokio::time::timeout(CLOSE_WAIT, call).await;
                return Err(format!(
                    "reading the log of {}/{}: {e}",
                    req.namespace, req.pod_name
                ));
            }
        };
        // the peer's probe: the stream is open
        if tx
            .send(frame(Vec::new(), false, String::new()))
            .await
            .is_err()
        {
            return Err("the principal closed the log stream".into());
        }
        let mut buf = vec![0u8; CHUNK];
        let mut sent = 0usize;
        let outcome = loop {
            tokio::select! {
                n = reader.read(&mut buf) => match n {
                    Ok(0) => {
                        let _ = tx.send(frame(Vec::new(), true, String::new())).await;
                        break Ok(());
                    }
                    Ok(n) => {
                        sent += n;
                        if tx.send(frame(buf[..n].to_vec(), false, String::new())).await.is_err() {
                            break Ok(());
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(frame(Vec::new(), false, e.to_string())).await;
                        break Err(format!("reading the log: {e}"));
                    }
                },
                r = &mut call => {
                    // the principal ended the stream first: its client went away (Canceled)
                    match r {
                        Ok(Err(s)) if s.code() == tonic::Code::Cancelled || s.code() == tonic::Code::NotFound => {
                            tracing::info!(uuid = %req.uuid, sent, "log stream ended by the principal");
                            return Ok(());
                        }
                        Ok(Err(s)) => return Err(format!("log stream: {} ({:?})", s.message(), s.code())),
                        _ => return Ok(()),
                    }
                }
            }
        };
        drop(reader);
        drop(tx);
        let _ = tokio::time::timeout(CLOSE_WAIT, call).await;
        tracing::info!(uuid = %req.uuid, sent, "log stream done");
        outcome
    }
}
