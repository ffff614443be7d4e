//! The Redis proxy (the peer's principal/redisproxy): Argo CD's server and repo-server use the
//! principal as their Redis (`redis.server`). Each Argo CD connection gets its own connection to
//! the real hub Redis; every command goes there byte for byte, except GET and SUBSCRIBE of
//! `app|managed-resources|<agent>_<app>|…` and `app|resources-tree|<agent>_<app>|…` — the live
//! state of an agent's Applications, which only the agent's Argo CD has. Those become
//! `redis-request` events to that agent; its `redis-response` (and, for SUBSCRIBE, later
//! `pushFromSubscribe` notifications) is written back as Redis would.
//!
//! Differences from the peer (all invisible to Argo CD or fixes of what it would see):
//! * the waiting request is woken by the response event (the peer's tracker channel too, no
//!   polling), and an agent's disconnect fails its waiting requests at once and closes the Argo CD
//!   connections that used it (the peer notices at its next 1-minute ping);
//! * a cache miss is answered with Redis' null (`_` / `$-1`), which go-redis reads as
//!   `redis.Nil` (the peer writes `-\r\n`, an empty error reply);
//! * a failure is answered with `-ERR <reason>` before the connection is closed (the peer closes
//!   it without a reply);
//! * commands are matched case-insensitively (the peer only matches go-redis' lowercase `get` /
//!   `subscribe`), and pub/sub frames follow the protocol the client chose with `HELLO`
//!   (RESP3 `>` pushes as the peer, RESP2 arrays for RESP2 clients);
//! * UNSUBSCRIBE also stops the pushes of the named agent channels (still forwarded to the hub,
//!   whose confirmation the client reads).

pub(super) mod relay;
mod resp;
mod track;

pub use track::{Answer, ConnShared, Tracker, Unmatched};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use argocd_pull_agent_core::redis_wire::{
    PING_INTERVAL, REQUEST_TIMEOUT, RedisCommandBody, RedisCommandBodyGet,
    RedisCommandBodySubscribe, RedisRequest, RedisResponse, RedisResponseBody,
};

use super::{Inner, SOURCE};

/// The peer's listener address (principal/server.go `defaultRedisProxyListenerAddr`).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:6379";
/// The peer's dial timeout to the hub Redis.
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes read at once from either side.
const READ_CHUNK: usize = 64 * 1024;

/// TLS towards the hub Redis (`--redis-tls-enabled` with `--redis-ca-path` or
/// `--redis-tls-insecure`).
#[derive(Clone, Debug)]
pub struct UpstreamTls {
    pub config: Arc<rustls::ClientConfig>,
    /// SNI / verified name: the host of the hub Redis address.
    pub server_name: String,
}

/// Redis-proxy settings.
#[derive(Clone, Debug)]
pub struct RedisProxyConfig {
    pub listen: SocketAddr,
    /// `host:port` of the hub Redis (`--redis-server-address`).
    pub upstream: String,
    /// How long a GET / SUBSCRIBE waits for its agent (the peer's 60 s).
    pub timeout: Duration,
    /// How often each agent a connection uses is pinged (the peer's 1 minute).
    pub ping_interval: Duration,
    /// TLS for Argo CD's connections (`--redis-tls-enabled` with the proxy's certificate).
    pub server_tls: Option<Arc<rustls::ServerConfig>>,
    pub upstream_tls: Option<UpstreamTls>,
}

impl RedisProxyConfig {
    pub fn new(listen: SocketAddr, upstream: &str) -> Self {
        Self {
            listen,
            upstream: upstream.to_string(),
            timeout: REQUEST_TIMEOUT,
            ping_interval: PING_INTERVAL,
            server_tls: None,
            upstream_tls: None,
        }
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type BoxIo = Box<dyn Io>;

/// Binds and serves; returns the bound address and the accept task.
pub(super) async fn start(
    inner: Arc<Inner>,
    cfg: &RedisProxyConfig,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = argocd_pull_ops::net::listen(cfg.listen).map_err(|e| {
        anyhow::anyhow!(
            "Redis proxy cannot listen on {}: {e} (use --disable-redis-proxy or free the port)",
            cfg.listen
        )
    })?;
    let addr = listener.local_addr()?;
    let acceptor = cfg.server_tls.clone().map(tokio_rustls::TlsAcceptor::from);
    tracing::info!(%addr, tls = cfg.server_tls.is_some(), upstream = %cfg.upstream, "Redis proxy listening");
    let cfg = Arc::new(cfg.clone());
    let task = tokio::spawn(async move {
        loop {
            let (tcp, peer) = argocd_pull_ops::net::accept(&listener, "the Redis proxy").await;
            let inner = inner.clone();
            let cfg = cfg.clone();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let io: BoxIo = match acceptor {
                    None => Box::new(tcp),
                    Some(a) => {
                        match tokio::time::timeout(Duration::from_secs(10), a.accept(tcp)).await {
                            Ok(Ok(s)) => Box::new(s),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "Redis proxy: TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        }
                    }
                };
                serve(inner, cfg, io).await;
            });
        }
    });
    Ok((addr, task))
}

async fn connect_upstream(cfg: &RedisProxyConfig) -> Result<BoxIo, String> {
    let tcp = tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect(&cfg.upstream),
    )
    .await
    .map_err(|_| format!("connecting to redis '{}' timed out", cfg.upstream))?
    .map_err(|e| format!("unable to connect to redis '{}': {e}", cfg.upstream))?;
    let _ = tcp.set_nodelay(true);
    let Some(t) = &cfg.upstream_tls else {
        return Ok(Box::new(tcp));
    };
    let name = rustls::pki_types::ServerName::try_from(t.server_name.clone())
        .map_err(|e| format!("invalid Redis server name {:?}: {e}", t.server_name))?;
    let s = tokio::time::timeout(
        UPSTREAM_CONNECT_TIMEOUT,
        tokio_rustls::TlsConnector::from(t.config.clone()).connect(name, tcp),
    )
    .await
    .map_err(|_| format!("TLS handshake with redis '{}' timed out", cfg.upstream))?
    .map_err(|e| format!("TLS handshake with redis '{}' failed: {e}", cfg.upstream))?;
    Ok(Box::new(s))
}

/// Why a connection ends.
enum End {
    Closed,
    Failed(String),
}

/// One Argo CD connection, for its lifetime.
async fn serve(inner: Arc<Inner>, cfg: Arc<RedisProxyConfig>, client: BoxIo) {
    let (mut cr, mut cw) = tokio::io::split(client);
    let upstream = match connect_upstream(&cfg).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %e, "Redis proxy: the hub Redis is unreachable; closing Argo CD's connection");
            let _ = cw.write_all(&resp::error(&e)).await;
            let _ = cw.shutdown().await;
            return;
        }
    };
    let (mut ur, mut uw) = tokio::io::split(upstream);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let conn = Arc::new(ConnShared::new(
        uuid::Uuid::new_v4().to_string(),
        tx.clone(),
    ));
    let proxy = &inner.relays.redis;
    proxy.add_conn(conn.clone());
    // every write to Argo CD goes through this task: forwarded hub replies, the proxy's own
    // replies and subscription pushes never interleave inside a frame
    let writer = tokio::spawn(async move {
        while let Some(b) = rx.recv().await {
            if cw.write_all(&b).await.is_err() || cw.flush().await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    });
    // hub → Argo CD, unchanged
    let c2 = conn.clone();
    let forward = tokio::spawn(async move {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match ur.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
        c2.shut();
    });
    let mut pinger: Option<tokio::task::JoinHandle<()>> = None;
    let end = command_loop(&inner, &cfg, &conn, &mut cr, &mut uw, &mut pinger).await;
    if let End::Failed(e) = &end {
        tracing::warn!(conn = %conn.id, error = %e, "Redis proxy: closing Argo CD's connection");
        let _ = conn.tx.send(resp::error(e)).await;
    }
    proxy.remove_conn(&conn.id);
    conn.end_relays();
    if let Some(p) = pinger {
        p.abort();
    }
    forward.abort();
    drop(conn);
    // the writer ends once every sender is gone (after the error reply went out)
    let _ = tokio::time::timeout(Duration::from_secs(5), writer).await;
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

async fn command_loop(
    inner: &Arc<Inner>,
    cfg: &Arc<RedisProxyConfig>,
    conn: &Arc<ConnShared>,
    cr: &mut (impl AsyncRead + Unpin),
    uw: &mut (impl AsyncWrite + Unpin),
    pinger: &mut Option<tokio::task::JoinHandle<()>>,
) -> End {
    let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK);
    loop {
        // commands already in the buffer: hub-bound ones are written together
        let mut start = 0;
        let mut fwd_from = 0;
        loop {
            let cmd = match resp::next_command(&buf[start..]) {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => return End::Failed(e),
            };
            let raw = &buf[start..start + cmd.len];
            let arg = |i: usize| cmd.args.get(i).map(|(s, e)| &raw[*s..*e]);
            let name = arg(0).unwrap_or_default();
            let routed = if cmd.args.len() == 2 && (eq(name, "get") || eq(name, "subscribe")) {
                let key = String::from_utf8_lossy(arg(1).unwrap_or_default()).into_owned();
                match inner.redis_agent_of_key(&key) {
                    Ok(Some(agent)) => Some((eq(name, "get"), key.clone(), agent)),
                    Ok(None) => None,
                    Err(e) => return End::Failed(e),
                }
            } else {
                if eq(name, "hello") {
                    // the protocol the hub will answer in (HELLO 3 from go-redis)
                    if let Some(v) = arg(1) {
                        conn.resp3.store(v == b"3", Ordering::SeqCst);
                    }
                } else if eq(name, "unsubscribe") {
                    let named: Vec<String> = cmd.args[1..]
                        .iter()
                        .map(|(s, e)| String::from_utf8_lossy(&raw[*s..*e]).into_owned())
                        .collect();
                    conn.subs
                        .lock()
                        .expect("poisoned")
                        .retain(|(_, ch)| !named.is_empty() && !named.contains(ch));
                }
                None
            };
            let len = cmd.len;
            if let Some((is_get, key, agent)) = routed {
                if fwd_from < start {
                    if let Err(e) = uw.write_all(&buf[fwd_from..start]).await {
                        return End::Failed(format!("writing to the hub Redis: {e}"));
                    }
                    let _ = uw.flush().await;
                }
                fwd_from = start + len;
                if pinger.is_none() {
                    *pinger = Some(spawn_pinger(inner.clone(), cfg.clone(), conn.clone()));
                }
                let work = async {
                    if is_get {
                        agent_get(inner, cfg, conn, &agent, &key).await
                    } else {
                        agent_subscribe(inner, cfg, conn, &agent, &key).await
                    }
                };
                let r = tokio::select! {
                    r = work => r,
                    _ = conn.close.notified() => return End::Closed,
                };
                if let Err(e) = r {
                    return End::Failed(e);
                }
            }
            start += len;
        }
        if fwd_from < start {
            if let Err(e) = uw.write_all(&buf[fwd_from..start]).await {
                return End::Failed(format!("writing to the hub Redis: {e}"));
            }
            let _ = uw.flush().await;
        }
        buf.drain(..start);
        if conn.closed.load(Ordering::SeqCst) {
            return End::Closed;
        }
        buf.reserve(READ_CHUNK);
        let n = tokio::select! {
            r = cr.read_buf(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => return End::Closed,
            },
            _ = conn.close.notified() => return End::Closed,
        };
        if n == 0 {
            return End::Closed;
        }
    }
}

/// Sends `body` to `agent` for connection `conn` and waits for its answer: here, or on the
/// active/active replica serving the agent ([`relay`]).
async fn ask(
    inner: &Arc<Inner>,
    cfg: &RedisProxyConfig,
    conn: &Arc<ConnShared>,
    agent: &str,
    body: RedisCommandBody,
) -> Result<RedisResponseBody, String> {
    match inner.owner(agent, false).await? {
        Some(owner) => relay::ask_there(inner, &owner, conn, agent, body).await,
        None => ask_here(inner, cfg, &conn.id, agent, body).await,
    }
}

/// [`ask`] of an agent this principal serves.
async fn ask_here(
    inner: &Arc<Inner>,
    cfg: &RedisProxyConfig,
    conn_id: &str,
    agent: &str,
    body: RedisCommandBody,
) -> Result<RedisResponseBody, String> {
    let not_connected = || format!("agent {agent:?} is not connected to the principal");
    let a = inner.agent(agent).ok_or_else(not_connected)?;
    let outbox = a
        .outbox
        .lock()
        .expect("poisoned")
        .as_ref()
        .map(|(_, o)| o.clone());
    let (Some(outbox), true) = (outbox, a.connected.load(Ordering::SeqCst)) else {
        return Err(not_connected());
    };
    let req = RedisRequest::new(conn_id, body);
    let (rx, _registration) = inner.relays.redis.register(&req.uuid, agent);
    tracing::debug!(agent, uuid = %req.uuid, command = req.command(), conn = conn_id, "proxying redis request");
    outbox.send(req.to_event(SOURCE)).await;
    match tokio::time::timeout(cfg.timeout, rx).await {
        Ok(Ok(Ok(b))) => Ok(b),
        Ok(Ok(Err(e))) => Err(e),
        Ok(Err(_)) => Err(format!("agent {agent:?} disconnected before answering")),
        Err(_) => Err(format!(
            "agent {agent:?} did not answer within {:?}",
            cfg.timeout
        )),
    }
}

pub(super) fn used(conn: &ConnShared, agent: &str) {
    conn.agents
        .lock()
        .expect("poisoned")
        .insert(agent.to_string());
}

async fn agent_get(
    inner: &Arc<Inner>,
    cfg: &RedisProxyConfig,
    conn: &Arc<ConnShared>,
    agent: &str,
    key: &str,
) -> Result<(), String> {
    inner.metrics.redis_proxy_request(agent, "get");
    used(conn, agent);
    let body = RedisCommandBody {
        get: Some(RedisCommandBodyGet {
            key: key.to_string(),
        }),
        ..Default::default()
    };
    let r = ask(inner, cfg, conn, agent, body).await.and_then(|b| {
        let g = b
            .get
            .ok_or_else(|| format!("agent {agent:?} answered GET without a get response"))?;
        if !g.error.is_empty() {
            return Err(format!("agent {agent:?}: {}", g.error));
        }
        Ok(match (g.cache_hit, g.bytes) {
            (true, Some(v)) => resp::bulk(&v),
            (true, None) => resp::bulk(b""),
            (false, _) => resp::nil(conn.resp3.load(Ordering::SeqCst)),
        })
    });
    match r {
        Ok(out) => conn
            .tx
            .send(out)
            .await
            .map_err(|_| "connection closed".to_string()),
        Err(e) => {
            inner.metrics.redis_proxy_error(agent, "get");
            Err(format!("GET {key}: {e}"))
        }
    }
}

async fn agent_subscribe(
    inner: &Arc<Inner>,
    cfg: &RedisProxyConfig,
    conn: &Arc<ConnShared>,
    agent: &str,
    channel: &str,
) -> Result<(), String> {
    inner.metrics.redis_proxy_request(agent, "subscribe");
    used(conn, agent);
    let body = RedisCommandBody {
        subscribe: Some(RedisCommandBodySubscribe {
            channel_name: channel.to_string(),
        }),
        ..Default::default()
    };
    // tracked before asking: a push may follow the confirmation at once
    conn.subs
        .lock()
        .expect("poisoned")
        .insert((agent.to_string(), channel.to_string()));
    let r = ask(inner, cfg, conn, agent, body)
        .await
        .and_then(|b| match b.subscribe_response {
            Some(s) if s.error.is_empty() => Ok(()),
            Some(s) => Err(format!("agent {agent:?}: {}", s.error)),
            None => Err(format!(
                "agent {agent:?} answered SUBSCRIBE without a subscribe response"
            )),
        });
    if let Err(e) = r {
        inner.metrics.redis_proxy_error(agent, "subscribe");
        conn.subs
            .lock()
            .expect("poisoned")
            .remove(&(agent.to_string(), channel.to_string()));
        return Err(format!("SUBSCRIBE {channel}: {e}"));
    }
    let count = conn.subs.lock().expect("poisoned").len() as i64;
    conn.tx
        .send(resp::subscribed(
            channel,
            count,
            conn.resp3.load(Ordering::SeqCst),
        ))
        .await
        .map_err(|_| "connection closed".to_string())
}

/// Pings every agent the connection uses, as the peer: an agent's subscriptions live while
/// pings arrive (it drops them after 10 minutes without), and a ping without answer closes the
/// connection.
fn spawn_pinger(
    inner: Arc<Inner>,
    cfg: Arc<RedisProxyConfig>,
    conn: Arc<ConnShared>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = cfg.ping_interval;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tick.tick().await;
            let agents: Vec<String> = conn
                .agents
                .lock()
                .expect("poisoned")
                .iter()
                .cloned()
                .collect();
            let pings = agents.iter().map(|a| {
                let body = RedisCommandBody {
                    ping: Some(Default::default()),
                    ..Default::default()
                };
                ask(&inner, &cfg, &conn, a, body)
            });
            for (a, r) in agents.iter().zip(futures::future::join_all(pings).await) {
                if let Err(e) = r {
                    tracing::info!(agent = %a, conn = %conn.id, error = %e, "Redis proxy: ping failed; closing Argo CD's connection");
                    conn.shut();
                    return;
                }
            }
        }
    })
}

impl Inner {
    /// A `redis` event from agent `a`: a response wakes its request, a subscription push goes
    /// to its Argo CD connection.
    pub(super) fn redis_response(
        &self,
        a: &super::AgentState,
        ev: argocd_pull_agent_core::event::Event,
    ) -> Result<(), argocd_pull_agent_core::session::HandleError> {
        use argocd_pull_agent_core::session::HandleError;
        if ev.ty != argocd_pull_agent_core::event::EventType::RedisResponse {
            return Err(HandleError::Permanent(format!(
                "{} events are not served by a principal (from agent {:?}); a principal only sends redis requests",
                ev.ty.short(),
                a.name
            )));
        }
        let resp = RedisResponse::from_data(ev.data).map_err(HandleError::Permanent)?;
        if resp.connection_uuid.is_empty() {
            return Err(HandleError::Permanent(
                "invalid connectionID seen in redis message".into(),
            ));
        }
        if let Some(p) = &resp.body.push_from_subscribe {
            let Some(conn) = self.relays.redis.conn(&resp.connection_uuid) else {
                tracing::debug!(agent = %a.name, conn = %resp.connection_uuid, "redis push for a closed connection; dropped");
                return Ok(());
            };
            if !conn.uses(&a.name) {
                return Err(HandleError::Permanent(format!(
                    "agent mismap for PushFromSubscribe: connection {} does not use agent {:?}",
                    resp.connection_uuid, a.name
                )));
            }
            let subscribed = conn
                .subs
                .lock()
                .expect("poisoned")
                .contains(&(a.name.clone(), p.channel_name.clone()));
            if !subscribed {
                tracing::debug!(agent = %a.name, channel = %p.channel_name, "redis push for a channel the connection does not subscribe; dropped");
                return Ok(());
            }
            if let Some(relay) = &conn.relay {
                // another replica's connection: the push goes there
                let push = (a.name.clone(), p.channel_name.clone());
                if let Err(tokio::sync::mpsc::error::TrySendError::Full(push)) =
                    relay.try_send(push)
                {
                    let relay = relay.clone();
                    tokio::spawn(async move {
                        let _ = relay.send(push).await;
                    });
                }
                return Ok(());
            }
            let msg = resp::message(&p.channel_name, conn.resp3.load(Ordering::SeqCst));
            if let Err(tokio::sync::mpsc::error::TrySendError::Full(m)) = conn.tx.try_send(msg) {
                // a slow reader: delivered in the background, never holding up the stream
                let tx = conn.tx.clone();
                tokio::spawn(async move {
                    let _ = tx.send(m).await;
                });
            }
            return Ok(());
        }
        match self
            .relays
            .redis
            .complete(&a.name, &resp.uuid, Ok(resp.body))
        {
            Ok(()) => Ok(()),
            Err(Unmatched::NotTracked) => {
                tracing::debug!(agent = %a.name, uuid = %resp.uuid, "redis response for no waiting request (late or duplicate); dropped");
                Ok(())
            }
            Err(Unmatched::WrongAgent(owner)) => Err(HandleError::Permanent(format!(
                "redis response {} from agent {:?} answers a request to agent {owner:?}",
                resp.uuid, a.name
            ))),
        }
    }

    /// A `redis-response` over the message size limit was refused: its request fails now.
    pub(super) fn redis_oversized(&self, agent: &str, event_id: &str, size: usize) {
        let msg = format!(
            "the answer of agent {agent:?} ({size} bytes) exceeds the principal's event size limit of {} bytes (--grpc-max-message-size)",
            self.cfg.max_event_size
        );
        let _ = self.relays.redis.complete(agent, event_id, Err(msg));
    }
}
