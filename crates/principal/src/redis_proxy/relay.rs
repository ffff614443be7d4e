//! Active/active replicas: Argo CD's Redis connection reaches one replica, and one connection
//! carries the keys of many agents, so the Redis proxy routes per command. A GET, SUBSCRIBE or
//! PING for an agent another replica serves is asked of that replica (`RedisRelay.Ask` on its
//! replica port); the subscription pushes of that agent come back on one `RedisRelay.Pushes`
//! stream per connection and replica, opened on first use. On the serving replica the other
//! replica's connection is a stand-in [`ConnShared`] registered under the same id, so that the
//! agent's answers, its pushes and its disconnect (which ends the stream, and the caller then
//! closes Argo CD's connection, as for a local agent) take the paths a local connection takes.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};

use super::track::ConnShared;
use super::{ask_here, resp, used};
use crate::Inner;
use crate::router::Remote;
use argocd_pull_agent_core::proto::redisrelay::redis_relay_client::RedisRelayClient;
use argocd_pull_agent_core::proto::redisrelay::redis_relay_server::RedisRelay;
use argocd_pull_agent_core::proto::redisrelay::{AskRequest, AskResponse, Push, PushesRequest};
use argocd_pull_agent_core::redis_wire::{RedisCommandBody, RedisResponseBody};

/// The relay service of the replica port.
pub(crate) struct RelaySvc(pub(crate) Arc<Inner>);

type Pushes = Pin<Box<dyn Stream<Item = Result<Push, Status>> + Send>>;

/// Removes the stand-in connection when its stream ends.
struct StandIn(Arc<Inner>, Arc<ConnShared>);

impl Drop for StandIn {
    fn drop(&mut self) {
        self.0.relays.redis.remove_conn(&self.1.id);
    }
}

#[tonic::async_trait]
impl RedisRelay for RelaySvc {
    type PushesStream = Pushes;

    async fn pushes(&self, req: Request<PushesRequest>) -> Result<Response<Pushes>, Status> {
        let id = req.into_inner().connection;
        if id.is_empty() {
            return Err(Status::invalid_argument("no connection id"));
        }
        let (tx, rx) = mpsc::channel::<(String, String)>(64);
        let conn = Arc::new(ConnShared::relayed(id, tx));
        self.0.relays.redis.add_conn(conn.clone());
        let guard = StandIn(self.0.clone(), conn);
        let s = futures::stream::unfold(Some((guard, rx)), |state| async move {
            let (guard, mut rx) = state?;
            tokio::select! {
                p = rx.recv() => p.map(|(agent, channel)| (Ok(Push { agent, channel }), Some((guard, rx)))),
                _ = guard.1.close.notified() => Some((
                    Err(Status::unavailable("an agent this connection uses went away")),
                    None,
                )),
            }
        });
        Ok(Response::new(Box::pin(s)))
    }

    async fn ask(&self, req: Request<AskRequest>) -> Result<Response<AskResponse>, Status> {
        let r = req.into_inner();
        let inner = &self.0;
        if !inner.writes_for(&r.agent) {
            return Err(Status::unavailable(format!(
                "this principal replica does not serve agent {:?}",
                r.agent
            )));
        }
        let Some(cfg) = inner.cfg.redis_proxy.clone() else {
            return Err(Status::failed_precondition(
                "the Redis proxy is off on this principal replica: give every replica the same Redis proxy settings",
            ));
        };
        let Some(conn) = inner.relays.redis.conn(&r.connection) else {
            return Err(Status::failed_precondition(
                "no Pushes stream for this connection: open it first",
            ));
        };
        let body: RedisCommandBody = serde_json::from_slice(&r.body)
            .map_err(|e| Status::invalid_argument(format!("command body: {e}")))?;
        used(&conn, &r.agent);
        let sub = body
            .subscribe
            .as_ref()
            .map(|s| (r.agent.clone(), s.channel_name.clone()));
        if let Some(s) = &sub {
            conn.subs.lock().expect("poisoned").insert(s.clone());
        }
        let answer = ask_here(inner, &cfg, &conn.id, &r.agent, body).await;
        if let (Err(_), Some(s)) = (&answer, &sub) {
            conn.subs.lock().expect("poisoned").remove(s);
        }
        Ok(Response::new(match answer {
            Ok(b) => AskResponse {
                body: serde_json::to_vec(&b).unwrap_or_default(),
                error: String::new(),
            },
            Err(e) => AskResponse {
                body: Vec::new(),
                error: e,
            },
        }))
    }
}

/// Asks `owner` to put `body` to `agent` for `conn` (opening the connection's push stream from
/// that replica first).
pub(super) async fn ask_there(
    inner: &Arc<Inner>,
    owner: &Remote<'_>,
    conn: &Arc<ConnShared>,
    agent: &str,
    body: RedisCommandBody,
) -> Result<RedisResponseBody, String> {
    let failed = |e: Status| {
        format!(
            "the principal replica serving agent {agent:?}: {}",
            e.message()
        )
    };
    let addr = owner.addr;
    let mut client = RedisRelayClient::new(owner.channel());
    let opened = conn.relays.lock().expect("poisoned").contains_key(&addr);
    if !opened {
        let mut s = client
            .pushes(PushesRequest {
                connection: conn.id.clone(),
            })
            .await
            .map_err(failed)?
            .into_inner();
        let c = conn.clone();
        let task = tokio::spawn(async move {
            loop {
                match s.message().await {
                    Ok(Some(p)) => {
                        let subscribed = c
                            .subs
                            .lock()
                            .expect("poisoned")
                            .contains(&(p.agent, p.channel.clone()));
                        let resp3 = c.resp3.load(std::sync::atomic::Ordering::SeqCst);
                        if subscribed && c.tx.send(resp::message(&p.channel, resp3)).await.is_err()
                        {
                            return;
                        }
                    }
                    // an agent gone or the replica lost: as for a local agent, the connection ends
                    Ok(None) | Err(_) => {
                        c.shut();
                        return;
                    }
                }
            }
        });
        conn.relays
            .lock()
            .expect("poisoned")
            .insert(addr, task.abort_handle());
    }
    inner.metrics.ha.shards.forwarded("redis");
    let r = client
        .ask(AskRequest {
            agent: agent.to_string(),
            connection: conn.id.clone(),
            body: serde_json::to_vec(&body).map_err(|e| e.to_string())?,
        })
        .await
        .map_err(failed)?
        .into_inner();
    if !r.error.is_empty() {
        return Err(r.error);
    }
    serde_json::from_slice(&r.body).map_err(|e| format!("the answer of agent {agent:?}: {e}"))
}
