//! Active/active replicas: the calls of an agent this replica does not serve go to the replica
//! that does ([`super::owners`]), over the replica link ([`super::replica_link`]). The agent's
//! wire is unchanged: it authenticated here (its certificate, or the mesh's header), and its
//! token and messages go through as they are; the owner learns who it is from
//! [`FORWARDED_AGENT`], which it takes only on the replica port. A forwarded call is never
//! forwarded again: an owner that no longer owns the agent refuses it and the agent retries.
//!
//! When this replica's shards change, the agents of the shards it gave up are dropped here (they
//! reconnect, through any replica, to the new owner) and forgotten: per-agent state lives only on
//! the owner. The agents of a shard taken over that have not connected within two heartbeats
//! are shown disconnected, as after a start.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;

use argocd_pull_ops::shards::ShardId;
use futures::{Stream, StreamExt};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

use super::Inner;
use super::router::Remote;
use argocd_pull_agent_core::proto::authapi;
use argocd_pull_agent_core::proto::eventstreamapi::{self, event_stream_client::EventStreamClient};
use argocd_pull_agent_core::proto::logstreamapi::{
    LogStreamData, LogStreamResponse, log_stream_service_client::LogStreamServiceClient,
};
use argocd_pull_agent_core::proto::terminalstreamapi::{
    TerminalStreamData, terminal_stream_service_client::TerminalStreamServiceClient,
};

/// The agent a forwarded call belongs to, as the forwarding replica authenticated it.
pub const FORWARDED_AGENT: &str = "x-argocd-pull-forwarded-agent";

/// The agent's metadata that travels with a forwarded call (its token and trace context).
const CARRIED: [&str; 3] = ["authorization", "traceparent", "tracestate"];

/// Where a call of an agent goes.
pub(super) enum Via {
    /// Served here.
    Here,
    /// Forwarded on this channel.
    Owner(tonic::transport::Channel),
}

type Out<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl Inner {
    /// The one routing rule of every forwarded path (gRPC calls, resource-proxy requests, Redis
    /// commands, logs, the terminal): `None` when this replica serves `agent` (always without
    /// active/active), else its owner; `Err` says why nobody can take it now. `forwarded`: it
    /// came over the replica link, and a forwarded call is never forwarded again.
    pub(super) async fn owner(
        &self,
        agent: &str,
        forwarded: bool,
    ) -> Result<Option<Remote<'_>>, String> {
        match &self.router {
            Some(r) => r.owner(agent, forwarded).await,
            None => Ok(None),
        }
    }

    /// Where `agent`'s gRPC call goes; `forwarded`: the call came over the replica link.
    pub(super) async fn route_call(&self, agent: &str, forwarded: bool) -> Result<Via, Status> {
        Ok(match self.owner(agent, forwarded).await {
            Ok(None) => Via::Here,
            Ok(Some(owner)) => Via::Owner(owner.channel()),
            Err(why) => return Err(Status::unavailable(why)),
        })
    }

    /// An event stream to an agent (served here or forwarded) that, when this principal stops,
    /// ends with [`argocd_pull_agent_core::session::stopping_status`]: our agent reconnects at once.
    pub(super) fn ends_with_stopping_status<T: Send + 'static>(
        &self,
        s: impl Stream<Item = Result<T, Status>> + Send + 'static,
    ) -> impl Stream<Item = Result<T, Status>> + Send + 'static {
        let stopping = self.stopping.clone();
        let last = stopping.clone();
        s.take_until(stopping.cancelled_owned()).chain(
            futures::stream::once(async move { last.is_cancelled() }).filter_map(
                |stopped| async move {
                    stopped
                        .then(argocd_pull_agent_core::session::stopping_status)
                        .map(Err)
                },
            ),
        )
    }

    /// Counts a forwarded call.
    fn forwarded(&self, call: &'static str) {
        self.metrics.ha.shards.forwarded(call);
    }

    /// The shards held changed from `before` to `now`: the agents of shards given up are dropped
    /// and forgotten, those of shards taken are swept after two heartbeats.
    pub(super) fn shards_changed(
        self: &Arc<Self>,
        before: &BTreeSet<ShardId>,
        now: &BTreeSet<ShardId>,
    ) {
        let Some(router) = &self.router else { return };
        self.metrics.ha.shards.held(now.len());
        if before.is_empty() && now.is_empty() {
            return;
        }
        self.metrics.ha.shards.rebalanced();
        let gone: Vec<String> = self
            .sessions
            .all()
            .into_iter()
            .map(|a| a.name.clone())
            .filter(|a| !now.contains(&router.owners.shard(a)))
            .collect();
        for agent in &gone {
            self.forget(agent);
        }
        if !gone.is_empty() {
            tracing::info!(
                agents = gone.len(),
                "dropped the agents of shards handed to other replicas: they reconnect to their new owner"
            );
        }
        let taken: BTreeSet<ShardId> = now.difference(before).copied().collect();
        if !taken.is_empty() {
            let me = self.clone();
            let since = jiff::Timestamp::now();
            tokio::spawn(async move {
                tokio::time::sleep(me.cfg.heartbeat * 2).await;
                me.sweep_unconnected(since, |a| {
                    me.router
                        .as_ref()
                        .is_some_and(|r| taken.contains(&r.owners.shard(a)) && r.owns(a))
                });
            });
        }
    }

    /// Drops `agent`'s stream and everything this replica kept of it, without showing it
    /// disconnected: its new owner shows its state.
    fn forget(&self, agent: &str) {
        self.disconnect(agent);
        self.sessions.remove(agent);
        self.clusters.remove(agent);
    }

    /// Whether this replica writes for `agent` (its cluster info and state): always, unless
    /// another replica serves it.
    pub(super) fn writes_for(&self, agent: &str) -> bool {
        self.router.as_ref().is_none_or(|r| r.owns(agent))
    }
}

/// A request to the owner with the agent's metadata and identity.
fn onward<T>(meta: &MetadataMap, agent: &str, msg: T) -> Result<Request<T>, Status> {
    let mut r = Request::new(msg);
    for k in CARRIED {
        if let Some(v) = meta.get(k) {
            r.metadata_mut().insert(k, v.clone());
        }
    }
    let id = agent
        .parse()
        .map_err(|_| Status::invalid_argument("agent name is not a header value"))?;
    r.metadata_mut().insert(FORWARDED_AGENT, id);
    Ok(r)
}

/// The owner's answer as this replica's (its metadata included: our login features).
fn back<T>(r: Response<T>) -> Response<T> {
    let (meta, msg, _) = r.into_parts();
    Response::from_parts(meta, msg, Default::default())
}

/// The agent's messages until its stream ends or fails.
fn messages<T: Send + 'static>(s: tonic::Streaming<T>) -> impl Stream<Item = T> + Send + 'static {
    tokio_stream::StreamExt::map_while(s, Result::ok)
}

/// Keeps `argocd_principal_ha_forwarded_streams` while a forwarded stream is open.
struct Open(Arc<Inner>);

impl Open {
    fn new(inner: &Arc<Inner>) -> Open {
        inner.metrics.ha.shards.stream_opened();
        Open(inner.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.metrics.ha.shards.stream_closed();
    }
}

fn counted<T: Send + 'static>(inner: &Arc<Inner>, s: tonic::Streaming<T>) -> Out<T> {
    let open = Open::new(inner);
    Box::pin(s.map(move |m| {
        let _ = &open;
        m
    }))
}

/// A login of `agent` to the replica that serves it; `None`: this one does. A login sent to an
/// owner that cannot be reached (a replica killed: its Leases still held, its port refusing
/// connections) goes again, once, to the replica that takes its shards, waiting for it: the agent
/// logs in as soon as its new owner serves instead of backing off for a replica's death.
/// `call_name` counts it (`argocd_principal_ha_streams_forwarded_total{call}`).
pub(super) async fn login<T, F, Fut>(
    inner: &Arc<Inner>,
    agent: &str,
    forwarded: bool,
    req: &Request<T>,
    call_name: &'static str,
    call: F,
) -> Option<Result<Response<authapi::AuthResponse>, Status>>
where
    T: Clone,
    F: Fn(tonic::transport::Channel, Request<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Response<authapi::AuthResponse>, Status>>,
{
    let mut again = true;
    loop {
        let owner = match inner.owner(agent, forwarded).await {
            Ok(None) => return None,
            Ok(Some(owner)) => owner,
            Err(why) => return Some(Err(Status::unavailable(why))),
        };
        inner.forwarded(call_name);
        let r = match onward(req.metadata(), agent, req.get_ref().clone()) {
            Ok(r) => call(owner.channel(), r).await.map(back),
            Err(e) => Err(e),
        };
        if r.is_err() && again && owner.is_down() {
            again = false;
            tracing::debug!(agent, owner = %owner.addr, "the replica serving the agent cannot be reached: its login waits for the replica that takes its shards");
            continue;
        }
        return Some(r);
    }
}

pub(super) async fn subscribe(
    inner: &Arc<Inner>,
    ch: tonic::transport::Channel,
    agent: &str,
    req: Request<tonic::Streaming<eventstreamapi::Event>>,
) -> Result<Response<Out<eventstreamapi::Event>>, Status> {
    inner.forwarded("subscribe");
    let size = inner.cfg.max_event_size.saturating_mul(2).max(4096);
    let meta = req.metadata().clone();
    let r = onward(&meta, agent, messages(req.into_inner()))?;
    let up = EventStreamClient::new(ch)
        .max_decoding_message_size(size)
        .max_encoding_message_size(size)
        .subscribe(r)
        .await?;
    let (meta, s, _) = up.into_parts();
    Ok(Response::from_parts(
        meta,
        Box::pin(inner.ends_with_stopping_status(counted(inner, s))),
        Default::default(),
    ))
}

pub(super) async fn stream_logs(
    inner: &Arc<Inner>,
    ch: tonic::transport::Channel,
    agent: &str,
    req: Request<tonic::Streaming<LogStreamData>>,
) -> Result<Response<LogStreamResponse>, Status> {
    inner.forwarded("stream_logs");
    let meta = req.metadata().clone();
    let r = onward(&meta, agent, messages(req.into_inner()))?;
    let _open = Open::new(inner);
    LogStreamServiceClient::new(ch)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
        .stream_logs(r)
        .await
        .map(back)
}

pub(super) async fn stream_terminal(
    inner: &Arc<Inner>,
    ch: tonic::transport::Channel,
    agent: &str,
    req: Request<tonic::Streaming<TerminalStreamData>>,
) -> Result<Response<Out<TerminalStreamData>>, Status> {
    inner.forwarded("stream_terminal");
    let meta = req.metadata().clone();
    let r = onward(&meta, agent, messages(req.into_inner()))?;
    let up = TerminalStreamServiceClient::new(ch)
        .max_decoding_message_size(usize::MAX)
        .max_encoding_message_size(usize::MAX)
        .stream_terminal(r)
        .await?;
    let (meta, s, _) = up.into_parts();
    Ok(Response::from_parts(
        meta,
        counted(inner, s),
        Default::default(),
    ))
}
