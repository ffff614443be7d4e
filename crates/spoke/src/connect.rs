//! Connection loop: version check, authentication/refresh, subscribe, reconnect with backoff.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

use argocd_pull_agent_core::proto::authapi::{self, authentication_client::AuthenticationClient};
use argocd_pull_agent_core::proto::eventstreamapi::event_stream_client::EventStreamClient;
use argocd_pull_agent_core::proto::versionapi::{self, version_client::VersionClient};
use argocd_pull_agent_core::session::{self, SessionCtx};
use argocd_pull_agent_core::tls::{self};

use super::Inner;
use super::handler::SessionHandler;

impl Inner {
    pub(super) async fn connect_loop(
        self: Arc<Self>,
        client_tls: Arc<std::sync::Mutex<Option<Arc<rustls::ClientConfig>>>>,
    ) {
        let mut backoff = Reconnect::new(self.cfg.reconnect_min, self.cfg.reconnect_max);
        let mut refresh: Option<String> = None;
        loop {
            let started = tokio::time::Instant::now();
            // the configuration of this attempt (reloaded certificates apply from here)
            let tls = client_tls.lock().expect("poisoned").clone();
            let mut now = false;
            match self.connect_once(&tls, &mut refresh).await {
                Ok(end) => {
                    // a stopping replica handed this agent to another: back at once
                    now = session::is_reconnect_now(&end);
                    tracing::info!(reason = %end, "stream to principal ended; reconnecting")
                }
                Err(e) => {
                    let e = self.explain_failure(e, &tls).await;
                    tracing::warn!(error = %e, "connection to principal failed");
                    *self.last_error.lock().expect("poisoned") = Some(e);
                }
            }
            self.connected.store(false, Ordering::SeqCst);
            self.metrics.connection_down();
            let wait = match now {
                true => backoff.handed_over(rand::random::<f64>()),
                false => backoff.next(
                    started.elapsed() > Duration::from_secs(10),
                    rand::random::<f64>(),
                ),
            };
            tokio::time::sleep(wait).await;
        }
    }

    pub(super) async fn connect_once(
        self: &Arc<Self>,
        client_tls: &Option<Arc<rustls::ClientConfig>>,
        refresh: &mut Option<String>,
    ) -> anyhow::Result<session::SessionEnd> {
        // every step before the event stream is up answers within `login_timeout`: a principal
        // (or a balancer in front) that accepted the connection and never serves it must not
        // hold the agent in its first attempt forever
        let phase = std::sync::Mutex::new(Phase::Connecting);
        let (inbound, tx) = match tokio::time::timeout(
            self.cfg.login_timeout,
            self.login(client_tls, refresh, &phase),
        )
        .await
        {
            Ok(r) => r?,
            Err(_) => anyhow::bail!(
                "no answer from the principal at {} within {:?} while {} (is the principal overloaded, or a proxy in front holding the connection without forwarding it?)",
                self.cfg.principal,
                self.cfg.login_timeout,
                phase.lock().expect("poisoned").describe()
            ),
        };
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
            recv_queue_size: self.cfg.recv_queue_size,
            recv_workqueue: self.metrics.workqueues.queue(super::RECV_QUEUE),
            peer_label: self.cfg.mode.as_str().to_string(),
            trace: argocd_pull_agent_core::otel::StreamAttrs {
                component: argocd_pull_agent_core::otel::Component::Agent,
                agent: self.cfg.namespace.clone(),
                mode: self.cfg.mode,
            },
            principal_uid: None,
        };
        let handler = Arc::new(SessionHandler {
            inner: self.clone(),
        });
        Ok(session::run(ctx, handler, inbound, tx).await)
    }
}

impl Inner {
    /// Connect, authenticate (or refresh), check the version and open the event stream.
    async fn login(
        self: &Arc<Self>,
        client_tls: &Option<Arc<rustls::ClientConfig>>,
        refresh: &mut Option<String>,
        phase: &std::sync::Mutex<Phase>,
    ) -> anyhow::Result<(
        tonic::Streaming<argocd_pull_agent_core::proto::eventstreamapi::Event>,
        mpsc::Sender<Box<argocd_pull_agent_core::proto::eventstreamapi::Event>>,
    )> {
        let at = |p: Phase| *phase.lock().expect("poisoned") = p;
        let endpoint = Endpoint::from_shared(format!("http://{}", self.cfg.principal))?
            .http2_keep_alive_interval(self.cfg.keepalive_interval)
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .connect_timeout(Duration::from_secs(10))
            .tcp_nodelay(true);
        let channel: Channel = if self.cfg.enable_websocket {
            // --enable-websocket: every call over its own WebSocket (HTTP/1.1 proxies between)
            argocd_pull_agent_core::ws::client::channel(
                endpoint,
                argocd_pull_agent_core::ws::client::Target {
                    addr: self.cfg.principal,
                    host: self.cfg.server_name.clone(),
                    tls: client_tls.clone(),
                    keepalive: self.cfg.keepalive_interval,
                    keepalive_timeout: Duration::from_secs(20),
                },
            )
            .await
        } else {
            match client_tls {
                Some(client_tls) => {
                    endpoint
                        .connect_with_connector(tls::connector(
                            client_tls.clone(),
                            self.cfg.principal,
                            self.cfg.server_name.clone(),
                        ))
                        .await
                }
                // --insecure-plaintext: h2c; the service mesh encrypts and authenticates
                None => endpoint.connect().await,
            }
        }
        .map_err(|e| anyhow::anyhow!("connecting to {}: {e:?}", self.cfg.principal))?;
        // every call in a client span (OTLP tracing; passes through with tracing off) and
        // counted in grpc_client_*
        let traced = |c: &Channel| {
            argocd_pull_agent_core::grpc_metrics::MeteredClient::new(
                argocd_pull_agent_core::otel::grpc::Client::new(
                    c.clone(),
                    &self.cfg.server_name,
                    self.cfg.principal.port(),
                ),
                &self.metrics.grpc,
            )
        };
        at(Phase::Authenticating);
        let mut auth = AuthenticationClient::new(traced(&channel));
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
            Some(r) => r,
            None => auth
                .authenticate(authapi::AuthRequest {
                    method: self.cfg.auth_method.clone(),
                    credentials: Default::default(),
                    mode: self.cfg.mode.as_str().into(),
                    version: self.cfg.version.clone(),
                    agent_namespace: self.cfg.namespace.clone(),
                })
                .await
                .map_err(|s| {
                    // the peer's `SetOnAuthFailure`: argocd_agent_auth_failures_total
                    self.metrics.auth_failure(
                        argocd_pull_agent_core::metrics::AGENT_AUTH_FAILURE_REASONS
                            [usize::from(s.code() == tonic::Code::FailedPrecondition)],
                    );
                    if s.code() == tonic::Code::FailedPrecondition {
                        anyhow::anyhow!(
                            "version mismatch with principal: {} (this agent reports {:?}; set --report-version / ARGOCD_AGENT_REPORT_VERSION to the principal's version string)",
                            s.message(),
                            self.cfg.version
                        )
                    } else {
                        anyhow::anyhow!("authentication rejected: {} ({:?})", s.message(), s.code())
                    }
                })?,
        };
        // the extensions our principal understands (none: a peer principal)
        *self.principal_features.lock().expect("poisoned") =
            super::agent_info::Features::of(resp.metadata());
        let resp = resp.into_inner();
        // a refresh answers without a refresh token while ours has long to live (the peer's
        // `RefreshToken`): we keep ours
        if !resp.refresh_token.is_empty() {
            *refresh = Some(resp.refresh_token.clone());
        }
        // destination-based mapping remaps the principal's namespace (peer: `SetOnAuthenticated`)
        if !resp.principal_namespace.is_empty() {
            *self.principal_ns.lock().expect("poisoned") = resp.principal_namespace.clone();
        } else if self.cfg.destination_based_mapping {
            tracing::error!("principal namespace from auth response is empty");
        }
        // as the peer agent (pkg/client/remote.go): the principal judges the version at login
        // (string equality, FailedPrecondition "version mismatch"); Version is only logged
        at(Phase::Version);
        let v = VersionClient::new(traced(&channel))
            .version(versionapi::VersionRequest {})
            .await?
            .into_inner();
        tracing::info!(principal_version = v.version, "connected to principal");
        let stream_channel = channel.clone();
        let mut es = EventStreamClient::new(traced(&channel))
            .max_decoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .max_encoding_message_size(self.cfg.max_event_size.saturating_mul(2).max(4096))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        if self.cfg.compression {
            es = es.send_compressed(tonic::codec::CompressionEncoding::Gzip);
        }
        let (tx, rx) = mpsc::channel::<Box<argocd_pull_agent_core::proto::eventstreamapi::Event>>(
            session::WIRE_BUFFER,
        );
        let mut req = tonic::Request::new(ReceiverStream::new(rx).map(|e| *e));
        req.metadata_mut()
            .insert("authorization", resp.access_token.parse()?);
        at(Phase::Subscribing);
        let inbound = es.subscribe(req).await?.into_inner();
        // container logs and web terminals open their own streams on this connection
        self.pod_streams.connected(
            argocd_pull_agent_core::grpc_metrics::MeteredClient::new(
                stream_channel,
                &self.metrics.grpc,
            ),
            resp.access_token.clone(),
            refresh.clone().unwrap_or_default(),
        );
        Ok((inbound, tx))
    }
}

/// Where a login attempt is (named in the error when it times out).
#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    Connecting,
    Authenticating,
    Version,
    Subscribing,
}

impl Phase {
    fn describe(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting (TCP, TLS and HTTP/2)",
            Phase::Authenticating => "authenticating",
            Phase::Version => "asking for its version",
            Phase::Subscribing => "opening the event stream",
        }
    }
}

impl Inner {
    /// A failed attempt's error; without `--enable-websocket`, when the server speaks only
    /// HTTP/1.1 (a proxy in between), the error says so and names the fix.
    async fn explain_failure(
        &self,
        e: anyhow::Error,
        tls: &Option<Arc<rustls::ClientConfig>>,
    ) -> String {
        let msg = format!("{e:#}");
        if self.cfg.enable_websocket || !argocd_pull_agent_core::ws::maybe_not_http2(&msg) {
            return msg;
        }
        match argocd_pull_agent_core::ws::http1_only(
            self.cfg.principal,
            &self.cfg.server_name,
            tls.as_ref(),
        )
        .await
        {
            Some(evidence) => {
                argocd_pull_agent_core::ws::not_http2_message(self.cfg.principal, evidence, &msg)
            }
            None => msg,
        }
    }
}

/// The window over which a fleet that lost its streams together reconnects: 1,000 agents come
/// back at ~330 per second, and every one within 3 s — the default Lease duration of principal
/// HA, so after a crash of the active replica the fleet is back about when a standby takes over
/// (a survivor holds early connections until then).
pub(crate) const RECONNECT_SPREAD: Duration = Duration::from_secs(3);

/// Reconnect delays. After a stream that lived (the principal restarted, a load balancer cut every
/// connection at once) the first attempt waits a uniformly random time in
/// `[min, min(max, RECONNECT_SPREAD)]`, so a fleet that lost its streams together comes back
/// spread over that window instead of stampeding the principal; after that the delay doubles up
/// to `max`, each wait drawn in `[delay/2, delay]` ("equal jitter").
#[derive(Debug)]
pub(crate) struct Reconnect {
    min: Duration,
    max: Duration,
    spread: Duration,
    delay: Duration,
}

impl Reconnect {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        Self {
            min,
            max,
            spread: max.min(RECONNECT_SPREAD).max(min),
            delay: min,
        }
    }

    /// The wait before the next attempt; `lived`: the last stream was up long enough to count
    /// as a working connection; `r`: uniform in `[0, 1)`.
    /// The wait after a stopping principal handed the agent over ([`session::is_reconnect_now`]):
    /// uniform in `[min, min + HANDOVER_SPREAD]`, capped at `max`.
    pub(crate) fn handed_over(&mut self, r: f64) -> Duration {
        self.delay = self.min;
        (self.min + session::HANDOVER_SPREAD.mul_f64(r)).min(self.max)
    }

    pub(crate) fn next(&mut self, lived: bool, r: f64) -> Duration {
        if lived {
            self.delay = self.min;
            return self.min + (self.spread - self.min).mul_f64(r);
        }
        let d = self.delay;
        self.delay = (self.delay * 2).min(self.max);
        d / 2 + (d / 2).mul_f64(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_fleet_that_lost_its_streams_together_spreads_over_the_whole_window() {
        // 1,000 agents whose streams ended together: their first waits cover [min, 3 s] evenly
        let waits: Vec<Duration> = (0..1000)
            .map(|i| Reconnect::new(MS(100), MS(30_000)).next(true, i as f64 / 1000.0))
            .collect();
        let per_second = |s: u64| waits.iter().filter(|w| w.as_secs() == s).count();
        assert!((0..3).all(|s| per_second(s) <= 350), "~345 per second");
        assert!(
            (0..3).all(|s| per_second(s) >= 300),
            "the whole window is used"
        );
        assert_eq!(*waits.iter().min().unwrap(), MS(100));
        assert!(
            *waits.iter().max().unwrap() < RECONNECT_SPREAD,
            "all back within 3 s"
        );
        // a short max bounds the window
        assert!(Reconnect::new(MS(100), MS(500)).next(true, 0.999) <= MS(500));
    }

    #[test]
    fn failed_attempts_back_off_exponentially_with_jitter_up_to_max() {
        let mut b = Reconnect::new(MS(100), MS(1_000));
        let lows: Vec<Duration> = (0..6).map(|_| b.next(false, 0.0)).collect();
        assert_eq!(lows, [MS(50), MS(100), MS(200), MS(400), MS(500), MS(500)]);
        let mut b = Reconnect::new(MS(100), MS(1_000));
        let highs: Vec<Duration> = (0..6).map(|_| b.next(false, 0.999_999)).collect();
        assert!(
            highs
                .iter()
                .zip([100, 200, 400, 800, 1000, 1000])
                .all(|(h, top)| *h <= MS(top))
        );
        // a stream that lived resets the backoff
        assert_eq!(b.next(true, 0.0), MS(100));
        assert_eq!(b.next(false, 0.0), MS(50));
    }
}
