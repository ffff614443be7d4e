//! Redis requests from the principal (the peer's agent/inbound_redis.go): GET and SUBSCRIBE of
//! the live-state keys of this agent's Applications are answered from the local Argo CD's Redis
//! (`--redis-addr`), with the `<agent>_` namespace part of the key removed; subscription
//! notifications are pushed to the principal (`pushFromSubscribe`) for as long as the principal
//! pings the Argo CD connection they belong to (the peer drops them 10 minutes after the last
//! ping). Only `app|resources-tree|…`, `app|managed-resources|…` and git cache keys are served:
//! the principal cannot read anything else of the local Redis.
//!
//! Differences from the peer, additive: a request that cannot be served (a bad key, an
//! unreachable Redis, a value too large for `--grpc-max-message-size`) is answered with the
//! error in the response (the peer sends nothing and lets the principal wait its 60 s), and a
//! subscription whose Redis connection drops subscribes again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;

use argocd_pull_agent_core::event::{Event, EventType};
use argocd_pull_agent_core::redis_wire::{
    CONNECTION_IDLE_TIMEOUT, RedisRequest, RedisResponse, RedisResponseBody, RedisResponseBodyGet,
    RedisResponseBodyPushFromSubscribe, RedisResponseBodySubscribeResponse, encoded_get_size,
    strip_namespace,
};
use argocd_pull_agent_core::session::{HandleError, Outbox};

use super::Inner;

/// How long one local GET may take (a 25 MB value included).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a subscription checks its connection's last ping (the peer's ticker).
const IDLE_CHECK: Duration = Duration::from_secs(60);

impl Inner {
    fn idle_timeout(&self) -> Duration {
        self.cfg
            .redis_proxy
            .as_ref()
            .map_or(CONNECTION_IDLE_TIMEOUT, |c| c.idle_timeout)
    }
}

/// The local Argo CD Redis the agent answers from (the peer's `--redis-addr`,
/// `--redis-username`, `--redis-password`).
#[derive(Clone, Debug)]
pub struct LocalRedisProxy {
    /// `host:port`.
    pub address: String,
    pub username: Option<String>,
    pub password: Option<String>,
    /// TLS to the local Redis (the peer's `--redis-tls-enabled`); `None`: plain TCP.
    pub tls: Option<LocalRedisTls>,
    /// A subscription ends this long after the last ping of its principal connection (the
    /// peer's 10 minutes).
    pub idle_timeout: Duration,
}

impl LocalRedisProxy {
    /// Plain TCP to `address`, no credentials, the peer's idle timeout.
    pub fn new(address: &str) -> Self {
        Self {
            address: address.to_string(),
            username: None,
            password: None,
            tls: None,
            idle_timeout: CONNECTION_IDLE_TIMEOUT,
        }
    }
}

/// How the agent verifies its local Redis' TLS certificate.
#[derive(Clone, Debug)]
pub enum LocalRedisTls {
    /// `--redis-tls-insecure`: not verified.
    Insecure,
    /// PEM CA certificates (`--redis-tls-ca-path` or `--redis-tls-ca-secret-name`).
    Ca(Vec<u8>),
}

impl LocalRedisProxy {
    fn client(&self) -> Result<redis::Client, String> {
        let (host, port) = self
            .address
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.trim_matches(['[', ']']), p.parse::<u16>().ok()?)))
            .ok_or_else(|| {
                format!(
                    "invalid --redis-addr {:?}: expected host:port (e.g. argocd-redis:6379)",
                    self.address
                )
            })?;
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(u) = self.username.as_deref().filter(|u| !u.is_empty()) {
            settings = settings.set_username(u);
        }
        if let Some(p) = self.password.as_deref().filter(|p| !p.is_empty()) {
            settings = settings.set_password(p);
        }
        let addr = match &self.tls {
            None => redis::ConnectionAddr::Tcp(host.to_string(), port),
            Some(t) => redis::ConnectionAddr::TcpTls {
                host: host.to_string(),
                port,
                insecure: matches!(t, LocalRedisTls::Insecure),
                tls_params: None,
            },
        };
        let info = redis::IntoConnectionInfo::into_connection_info(addr)
            .map_err(|e| e.to_string())?
            .set_redis_settings(settings);
        let c = match &self.tls {
            Some(LocalRedisTls::Ca(pem)) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            _ => redis::Client::open(info),
        };
        c.map_err(|e| format!("local Redis {}: {e}", self.address))
    }
}

/// Connections to the local Redis and the live subscriptions.
#[derive(Default)]
pub struct RedisState {
    client: Mutex<Option<redis::Client>>,
    conn: tokio::sync::Mutex<Option<redis::aio::MultiplexedConnection>>,
    /// principal connection UUID → last ping (or subscribe)
    pings: Mutex<HashMap<String, Instant>>,
    /// (connection UUID, channel) → the task forwarding its notifications
    subs: Mutex<HashMap<(String, String), tokio::task::AbortHandle>>,
}

impl Drop for RedisState {
    fn drop(&mut self) {
        if let Ok(g) = self.subs.lock() {
            for h in g.values() {
                h.abort();
            }
        }
    }
}

impl RedisState {
    /// Subscriptions currently forwarded.
    pub fn subscriptions(&self) -> usize {
        self.subs.lock().expect("poisoned").len()
    }

    fn touch(&self, conn: &str, idle: Duration) {
        let now = Instant::now();
        let mut g = self.pings.lock().expect("poisoned");
        g.retain(|_, t| now.duration_since(*t) < idle);
        g.insert(conn.to_string(), now);
    }

    fn idle(&self, conn: &str, idle: Duration) -> bool {
        self.pings
            .lock()
            .expect("poisoned")
            .get(conn)
            .is_none_or(|t| t.elapsed() >= idle)
    }
}

fn io_trouble(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_unrecoverable_error()
}

impl Inner {
    fn redis_client(&self) -> Result<redis::Client, String> {
        let Some(cfg) = &self.cfg.redis_proxy else {
            return Err(
                "this agent has no local Redis configured (--redis-addr); Redis proxy requests are not served"
                    .into(),
            );
        };
        let mut g = self.redis.client.lock().expect("poisoned");
        if let Some(c) = g.as_ref() {
            return Ok(c.clone());
        }
        let c = cfg.client()?;
        *g = Some(c.clone());
        Ok(c)
    }

    async fn redis_get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let client = self.redis_client()?;
        let mut g = self.redis.conn.lock().await;
        let mut c = match g.as_ref() {
            Some(c) => c.clone(),
            None => {
                let cfg = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT));
                let c = client
                    .get_multiplexed_async_connection_with_config(&cfg)
                    .await
                    .map_err(|e| format!("connecting to the local Redis: {e}"))?;
                *g = Some(c.clone());
                c
            }
        };
        drop(g);
        let r: redis::RedisResult<Option<Vec<u8>>> =
            redis::cmd("GET").arg(key).query_async(&mut c).await;
        match r {
            Ok(v) => Ok(v),
            Err(e) => {
                if io_trouble(&e) {
                    *self.redis.conn.lock().await = None;
                }
                Err(format!("local Redis GET: {e}"))
            }
        }
    }

    /// Handles one `redis` event from the principal: answered beside the stream's other events
    /// (a slow Redis never holds the stream up).
    pub(super) async fn handle_redis_request(
        self: &Arc<Self>,
        ev: Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        if ev.ty != EventType::RedisRequest {
            return Err(HandleError::Permanent(format!(
                "{} events are not served by an agent; an agent answers redis-request only",
                ev.ty.short()
            )));
        }
        let req = RedisRequest::from_json(&ev.data).map_err(HandleError::Permanent)?;
        if req.command() == "unknown" {
            return Err(HandleError::Permanent(
                "unrecognized redis request body (want get, subscribe or ping)".into(),
            ));
        }
        let me = self.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let body = me.answer_redis(&req).await;
            let resp = RedisResponse {
                uuid: req.uuid.clone(),
                connection_uuid: req.connection_uuid.clone(),
                body,
            };
            out.send(resp.to_event(&me.source())).await;
        });
        Ok(())
    }

    /// The key in the local Argo CD's Redis: `<namespace>_` removed (peer:
    /// `stripNamespaceFromRedisKey`), except with destination-based mapping, where the
    /// principal's key is already the local one (peer: inbound_redis.go); the same keys are
    /// refused either way.
    fn local_redis_key(&self, key: &str) -> Result<String, String> {
        if !self.cfg.destination_based_mapping {
            return strip_namespace(key);
        }
        // an Application of the agent's own namespace has no `<ns>_`: any app key is local
        let app_key = (key.starts_with("app|resources-tree|")
            || key.starts_with("app|managed-resources|"))
            && key.split('|').count() == 4;
        match app_key || strip_namespace(key).is_ok() {
            true => Ok(key.to_string()),
            false => Err(format!("unexpected redis key request: '{key}'")),
        }
    }

    async fn answer_redis(self: &Arc<Self>, req: &RedisRequest) -> RedisResponseBody {
        let m = &self.metrics;
        if let Some(g) = &req.body.get {
            m.agent_redis_proxy_request("get");
            let r = match self.local_redis_key(&g.key) {
                Ok(key) => self.redis_get(&key).await.and_then(|v| match v {
                    Some(b)
                        if encoded_get_size(b.len(), g.key.len()) > self.cfg.max_event_size =>
                    {
                        Err(format!(
                            "the value of {key:?} is {} bytes: its redis-response would exceed this agent's --grpc-max-message-size of {} bytes (raise it on the agent and the principal)",
                            b.len(),
                            self.cfg.max_event_size
                        ))
                    }
                    v => Ok(v),
                }),
                Err(e) => Err(e),
            };
            let get = match r {
                Ok(Some(b)) => RedisResponseBodyGet {
                    bytes: Some(b),
                    cache_hit: true,
                    error: String::new(),
                },
                Ok(None) => RedisResponseBodyGet::default(),
                Err(e) => {
                    m.agent_redis_proxy_error("get");
                    tracing::warn!(key = %g.key, error = %e, "Redis proxy GET failed");
                    RedisResponseBodyGet {
                        error: e,
                        ..Default::default()
                    }
                }
            };
            return RedisResponseBody {
                get: Some(get),
                ..Default::default()
            };
        }
        if let Some(s) = &req.body.subscribe {
            m.agent_redis_proxy_request("subscribe");
            let error = match self.subscribe(req, &s.channel_name).await {
                Ok(()) => String::new(),
                Err(e) => {
                    m.agent_redis_proxy_error("subscribe");
                    tracing::warn!(channel = %s.channel_name, error = %e, "Redis proxy SUBSCRIBE failed");
                    e
                }
            };
            return RedisResponseBody {
                subscribe_response: Some(RedisResponseBodySubscribeResponse { error }),
                ..Default::default()
            };
        }
        // ping: the connection is alive
        self.redis.touch(&req.connection_uuid, self.idle_timeout());
        RedisResponseBody {
            pong: Some(Default::default()),
            ..Default::default()
        }
    }

    async fn open_subscription(
        &self,
        key: &str,
    ) -> Result<impl futures::Stream<Item = redis::Msg> + use<>, String> {
        let client = self.redis_client()?;
        let mut ps = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
            .await
            .map_err(|_| "connecting to the local Redis timed out".to_string())?
            .map_err(|e| format!("connecting to the local Redis: {e}"))?;
        ps.subscribe(key)
            .await
            .map_err(|e| format!("local Redis SUBSCRIBE: {e}"))?;
        Ok(ps.into_on_message())
    }

    async fn subscribe(self: &Arc<Self>, req: &RedisRequest, channel: &str) -> Result<(), String> {
        let key = self.local_redis_key(channel)?;
        let stream = self.open_subscription(&key).await?;
        self.redis.touch(&req.connection_uuid, self.idle_timeout());
        let me = Arc::downgrade(self);
        let (req_uuid, conn) = (req.uuid.clone(), req.connection_uuid.clone());
        let channel = channel.to_string();
        let id = (conn.clone(), channel.clone());
        let idle = self.idle_timeout();
        let check = IDLE_CHECK.min(idle / 2).max(Duration::from_millis(10));
        let task = tokio::spawn(async move {
            let mut stream = Box::pin(stream);
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + check, check);
            loop {
                let Some(me) = me.upgrade() else { return };
                let next = tokio::select! {
                    m = stream.next() => Some(m),
                    _ = tick.tick() => None,
                };
                match next {
                    None => {
                        if me.redis.idle(&conn, idle) {
                            tracing::debug!(%channel, %conn, "no ping from the principal for this connection; subscription closed");
                            break;
                        }
                    }
                    Some(Some(msg)) => {
                        // as the peer: Argo CD's notifications have no payload; others are
                        // not forwarded
                        if !msg.get_payload_bytes().is_empty() {
                            continue;
                        }
                        let push = RedisResponse {
                            uuid: req_uuid.clone(),
                            connection_uuid: conn.clone(),
                            body: RedisResponseBody {
                                push_from_subscribe: Some(RedisResponseBodyPushFromSubscribe {
                                    channel_name: channel.clone(),
                                }),
                                ..Default::default()
                            },
                        };
                        let out = me.outbox.lock().expect("poisoned").clone();
                        if let Some(out) = out {
                            out.send(push.to_event(&me.source())).await;
                        }
                    }
                    Some(None) => {
                        // the local Redis connection dropped: subscribe again while wanted
                        if me.redis.idle(&conn, idle) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let key = me.local_redis_key(&channel).unwrap_or_default();
                        match me.open_subscription(&key).await {
                            Ok(s) => stream = Box::pin(s),
                            Err(e) => {
                                tracing::warn!(%channel, error = %e, "Redis proxy: re-subscribing failed; retrying");
                            }
                        }
                    }
                }
            }
            if let Some(me) = me.upgrade() {
                me.redis
                    .subs
                    .lock()
                    .expect("poisoned")
                    .remove(&(conn, channel));
            }
        });
        if let Some(old) = self
            .redis
            .subs
            .lock()
            .expect("poisoned")
            .insert(id, task.abort_handle())
        {
            old.abort();
        }
        Ok(())
    }
}
