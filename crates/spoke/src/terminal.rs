//! Web-terminal requests from the principal (the peer's agent/terminal.go): the agent opens
//! `TerminalStreamService.StreamTerminal`, sends the handshake frame, execs the command in the
//! pod through its own API server (the Kubernetes exec WebSocket, kube's `AttachedProcess`) with
//! a TTY of 80×24, and bridges: stdin and resizes from the principal, stdout (and stderr) to it,
//! EOF from the principal closes stdin, the principal's stream ending stops the exec, the
//! process's end is sent as `eof` or, when it failed, as `error` (the API server's `Status`
//! JSON, so the exit code survives).
//!
//! Differences from the peer: stderr output is tagged `stderr` (the peer tags everything
//! `stdout`; with a TTY the API server merges them anyway); no SPDY fallback (kube speaks the
//! WebSocket protocol only, which every supported Kubernetes serves).

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, TerminalSize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use argocd_pull_agent_core::container::ContainerTerminalRequest;
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::proto::terminalstreamapi::{
    TerminalStreamData, terminal_stream_service_client::TerminalStreamServiceClient,
};
use argocd_pull_agent_core::session::HandleError;

use super::Inner;
use super::podstream::error_text;

impl Inner {
    /// A `terminal-request`: the session runs in the background; the event is ACKed now.
    pub(super) fn handle_terminal_request(self: &Arc<Self>, ev: &Event) -> Result<(), HandleError> {
        let req = ContainerTerminalRequest::from_json(&ev.data).map_err(HandleError::Permanent)?;
        let me = self.clone();
        let uuid = req.uuid.clone();
        let started = self.pod_streams.spawn(&uuid, async move {
            tracing::info!(session = %req.uuid, namespace = %req.namespace, pod = %req.pod_name, container = %req.container_name, command = ?req.command, "processing terminal request");
            match me.terminal(&req).await {
                Ok(()) => tracing::info!(session = %req.uuid, "terminal completed"),
                Err(e) => {
                    me.metrics.peer.agent_resource_proxy_errors.inc();
                    tracing::info!(session = %req.uuid, error = %e, "terminal failed");
                }
            }
        });
        if !started {
            tracing::warn!(
                session = uuid,
                "duplicate terminal request; already processing"
            );
        }
        Ok(())
    }

    async fn terminal(&self, req: &ContainerTerminalRequest) -> Result<(), String> {
        self.metrics.peer.agent_resource_proxy_requests.inc();
        let (tx, rx) = mpsc::channel::<TerminalStreamData>(100);
        let (channel, grpc_req) = self.pod_streams.request(ReceiverStream::new(rx)).await?;
        let uuid = req.uuid.clone();
        let frame = move |data: Vec<u8>, stream_type: &str| TerminalStreamData {
            request_uuid: uuid.clone(),
            data,
            stream_type: stream_type.to_string(),
            ..Default::default()
        };
        // the handshake: lets the principal attach this stream to its session
        tx.send(frame(Vec::new(), ""))
            .await
            .map_err(|_| "terminal stream closed")?;
        let mut inbound = TerminalStreamServiceClient::new(channel)
            .stream_terminal(grpc_req)
            .await
            .map_err(|s| {
                format!(
                    "opening the terminal stream: {} ({:?})",
                    s.message(),
                    s.code()
                )
            })?
            .into_inner();
        let fail = |e: String| {
            let mut f = frame(Vec::new(), "");
            f.error = e;
            f
        };
        let client = match (&self.cfg.resource_proxy, self.cfg.enable_resource_proxy) {
            (Some(c), true) => c.0.clone(),
            _ => {
                let msg = argocd_pull_agent_core::container::failure_status(
                    403,
                    "Forbidden",
                    "the resource proxy is disabled on this agent (--enable-resource-proxy=false or no Kubernetes client)",
                );
                finish(tx, inbound, fail(msg.to_string())).await;
                return Err("the resource proxy is disabled".into());
            }
        };
        let ap = AttachParams {
            container: (!req.container_name.is_empty()).then(|| req.container_name.clone()),
            stdin: req.stdin,
            stdout: req.stdout,
            // with a TTY the API server merges stderr into stdout (kube refuses both)
            stderr: req.stderr && !req.tty,
            tty: req.tty,
            max_stdin_buf_size: Some(64 * 1024),
            max_stdout_buf_size: Some(64 * 1024),
            max_stderr_buf_size: Some(64 * 1024),
        };
        let api = Api::<Pod>::namespaced(client, &req.namespace);
        let exec = tokio::time::timeout(
            super::resource::API_TIMEOUT,
            api.exec(&req.pod_name, req.command.clone(), &ap),
        );
        let opened = exec.await.unwrap_or_else(|_| {
            Err(kube::Error::Api(Box::new(
                kube::core::Status::failure(
                    &format!(
                        "the API server did not answer the exec request within {:?}",
                        super::resource::API_TIMEOUT
                    ),
                    "Timeout",
                )
                .with_code(504),
            )))
        });
        let mut proc = match opened {
            Ok(p) => p,
            Err(e) => {
                finish(tx, inbound, fail(error_text(&e))).await;
                return Err(format!("exec in {}/{}: {e}", req.namespace, req.pod_name));
            }
        };
        let mut stdin = proc.stdin();
        let mut sizes = proc.terminal_size();
        if let Some(s) = sizes.as_mut() {
            let _ = s
                .send(TerminalSize {
                    width: 80,
                    height: 24,
                })
                .await;
        }
        let status = proc.take_status();
        // output pumps: each ends at EOF of its stream
        let mut pumps = Vec::new();
        for (reader, kind) in [(proc.stdout(), "stdout"), (proc.stderr(), "stderr")] {
            if let Some(r) = reader {
                let tx = tx.clone();
                let f = frame.clone();
                pumps.push(tokio::spawn(pump(r, kind, tx, f)));
            }
        }
        let outputs = futures::future::join_all(pumps);
        tokio::pin!(outputs);
        loop {
            tokio::select! {
                _ = &mut outputs => break,
                m = inbound.next() => match m {
                    Some(Ok(m)) => {
                        if !m.error.is_empty() {
                            tracing::info!(session = %req.uuid, error = %m.error, "principal reported an error; stopping the terminal");
                            proc.abort();
                            return Ok(());
                        }
                        if m.eof {
                            // end of stdin (a dropped writer does not end kube's stdin)
                            if let Some(mut w) = stdin.take() {
                                let _ = w.shutdown().await;
                            }
                            continue;
                        }
                        if m.resize {
                            if let Some(s) = sizes.as_mut() {
                                let _ = s
                                    .send(TerminalSize { width: m.cols as u16, height: m.rows as u16 })
                                    .await;
                            }
                            continue;
                        }
                        if !m.data.is_empty()
                            && m.stream_type == "stdin"
                            && let Some(w) = stdin.as_mut()
                            && w.write_all(&m.data).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    Some(Err(_)) | None => {
                        // the principal ended the session (the user closed the terminal)
                        tracing::info!(session = %req.uuid, "principal closed the terminal stream; stopping the exec");
                        proc.abort();
                        return Ok(());
                    }
                },
            }
        }
        drop(stdin);
        let end = match status {
            Some(s) => s.await,
            None => None,
        };
        let _ = proc.join().await;
        let last = match end {
            Some(s) if s.status.as_deref() == Some("Failure") => {
                // the API server's Status (reason NonZeroExitCode carries the exit code)
                let mut v = serde_json::to_value(&s).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("kind".into(), "Status".into());
                    o.insert("apiVersion".into(), "v1".into());
                }
                fail(v.to_string())
            }
            _ => {
                let mut f = frame(Vec::new(), "");
                f.eof = true;
                f
            }
        };
        finish(tx, inbound, last).await;
        Ok(())
    }
}

/// Sends the last frame and waits (bounded) for the principal to end the stream: dropping the
/// response stream at once would reset the call before the frame is on the wire.
async fn finish(
    tx: mpsc::Sender<TerminalStreamData>,
    mut inbound: tonic::Streaming<TerminalStreamData>,
    last: TerminalStreamData,
) {
    let _ = tx.send(last).await;
    drop(tx);
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(Ok(_)) = inbound.next().await {}
    })
    .await;
}

async fn pump(
    mut r: impl AsyncRead + Unpin,
    kind: &'static str,
    tx: mpsc::Sender<TerminalStreamData>,
    frame: impl Fn(Vec<u8>, &str) -> TerminalStreamData,
) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(frame(buf[..n].to_vec(), kind)).await.is_err() {
                    return;
                }
            }
        }
    }
}
