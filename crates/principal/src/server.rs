//! gRPC services (Version, Authentication, EventStream) and the per-stream session handler.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::proto::authapi::{
    self, authentication_client::AuthenticationClient, authentication_server::Authentication,
};
use argocd_pull_agent_core::proto::eventstreamapi::{self, event_stream_server::EventStream};
use argocd_pull_agent_core::proto::versionapi::{self, version_server::Version};
use argocd_pull_agent_core::session::{self, HandleError, Handler, Outbox, SessionCtx};
use argocd_pull_agent_core::tls::{self};

use super::forward::{self, FORWARDED_AGENT, Via};
use super::{AgentState, Inner, SOURCE};
use argocd_pull_agent_core::proto::authapi::authentication_server::AuthenticationServer;
use argocd_pull_agent_core::proto::eventstreamapi::event_stream_server::EventStreamServer;
use argocd_pull_agent_core::proto::versionapi::version_server::VersionServer;

pub(super) struct SessionHandler {
    inner: Arc<Inner>,
    agent: Arc<AgentState>,
    /// the stream generation this handler serves
    generation: u64,
}

#[async_trait]
impl Handler for SessionHandler {
    async fn handle(&self, ev: Event, out: &Outbox) -> Result<(), HandleError> {
        if ev.target == argocd_pull_agent_core::event::Target::Resource {
            return self.inner.resource_response(&self.agent, &ev);
        }
        if ev.target == argocd_pull_agent_core::event::Target::Redis {
            return self.inner.redis_response(&self.agent, ev);
        }
        if ev.target == argocd_pull_agent_core::event::Target::ClusterCacheInfoUpdate {
            return self.inner.cluster_cache_info(&self.agent, &ev);
        }
        match argocd_pull_agent_core::checksum::resync_kind(&ev) {
            argocd_pull_agent_core::checksum::ResyncKind::Handled
                if ev.ty == argocd_pull_agent_core::event::EventType::ResponseSyncedResource
                    && *self.agent.mode.lock().expect("poisoned") == Mode::Autonomous =>
            {
                self.inner
                    .answer_synced_resource(&self.agent, &ev, out)
                    .await
            }
            argocd_pull_agent_core::checksum::ResyncKind::Handled => {
                self.inner.handle_event(&self.agent, ev, out).await
            }
            argocd_pull_agent_core::checksum::ResyncKind::Refused(msg) => {
                Err(HandleError::Permanent(msg))
            }
        }
    }
    async fn on_oversized(&self, event_id: &str, size: usize) {
        // a resource response too large for this principal: its HTTP request fails now (502)
        let msg = format!(
            "the answer of agent {:?} ({size} bytes) exceeds the principal's event size limit of {} bytes (--grpc-max-message-size)",
            self.agent.name, self.inner.cfg.max_event_size
        );
        let resp = argocd_pull_agent_core::resource::ResourceResponse {
            uuid: event_id.to_string(),
            status: 502,
            resource: argocd_pull_agent_core::resource::status_body(502, "InternalError", &msg),
        };
        let _ = self
            .inner
            .relays
            .requests
            .complete(&self.agent.name, event_id, resp);
        self.inner.redis_oversized(&self.agent.name, event_id, size);
    }

    async fn on_connect(&self, out: &Outbox) {
        {
            // a newer stream's sender is never replaced by an older one's
            let mut o = self.agent.outbox.lock().expect("poisoned");
            if o.as_ref().is_none_or(|(g, _)| *g <= self.generation) {
                *o = Some((self.generation, out.clone()));
            }
        }
        let mode = *self.agent.mode.lock().expect("poisoned");
        self.inner
            .resync_on_connect(&self.agent, out)
            .instrument(argocd_pull_agent_core::otel::resync_span(
                &self.agent.name,
                mode,
            ))
            .await
    }
}

#[derive(Clone)]
pub(super) struct Svc {
    pub(super) inner: Arc<Inner>,
    /// The replica port: calls another active/active replica forwarded, for the agent it names
    /// in [`FORWARDED_AGENT`] (see [`super::forward`]).
    pub(super) forwarded: bool,
}

/// The agent-facing services on `svc` (every one in a server span per call when OTLP tracing is
/// on, each counted in `grpc_server_*`): native gRPC and `--enable-websocket` serve the same.
pub(super) fn routes(
    svc: &Svc,
    cfg: &super::PrincipalConfig,
    metrics: &argocd_pull_agent_core::metrics::Metrics,
) -> tonic::service::Routes {
    use argocd_pull_agent_core::grpc_metrics::Metered;
    use argocd_pull_agent_core::otel::grpc::add_service as add;
    use argocd_pull_agent_core::proto::logstreamapi::log_stream_service_server::LogStreamServiceServer;
    use argocd_pull_agent_core::proto::terminalstreamapi::terminal_stream_service_server::TerminalStreamServiceServer;
    let size = cfg.max_event_size.saturating_mul(2).max(4096);
    let mut es = EventStreamServer::new(svc.clone())
        .max_decoding_message_size(size)
        .max_encoding_message_size(size)
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
    if cfg.compression {
        es = es.send_compressed(tonic::codec::CompressionEncoding::Gzip);
    }
    let gm = &metrics.grpc;
    let routes = tonic::service::Routes::default();
    let routes = add(routes, Metered::new(VersionServer::new(svc.clone()), gm));
    let routes = add(
        routes,
        Metered::new(AuthenticationServer::new(svc.clone()), gm),
    );
    let routes = add(routes, Metered::new(es, gm));
    let routes = add(
        routes,
        Metered::new(LogStreamServiceServer::new(svc.clone()), gm),
    );
    add(
        routes,
        Metered::new(TerminalStreamServiceServer::new(svc.clone()), gm),
    )
}

impl Svc {
    /// The agent a request comes from: the mesh-set header with `--auth header:`, else the client
    /// certificate.
    /// The agent (and its mode) a stream belongs to: the client certificate (or the mesh header)
    /// and the access token must name the same agent.
    pub(super) fn verified_agent<T>(
        &self,
        req: &Request<T>,
    ) -> Result<(String, argocd_pull_agent_core::Mode), Status> {
        let cert_agent = self.cert_identity(req)?;
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| {
                self.inner.metrics.auth_failure("no-token");
                Status::unauthenticated("missing authorization metadata")
            })?;
        let token = token.strip_prefix("Bearer ").unwrap_or(token);
        let (agent, mode) = self.inner.tokens.verify_access(token).map_err(|e| {
            self.inner.metrics.auth_failure("token");
            Status::unauthenticated(e.to_string())
        })?;
        if agent != cert_agent {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "token belongs to agent {agent:?} but the client certificate identifies {cert_agent:?}"
            )));
        }
        // (a forwarded call was matched by the replica the agent reached)
        if self.inner.cfg.client_cert_subject_match && !self.forwarded {
            self.subject_matches(req, &agent)?;
        }
        Ok((agent, mode))
    }

    /// `--client-cert-subject-match` (peer: `clientCertificateMatches`): the client
    /// certificate's common name is the agent name.
    fn subject_matches<T>(&self, req: &Request<T>, agent: &str) -> Result<(), Status> {
        let cn = req
            .peer_certs()
            .and_then(|c| c.first().map(|l| tls::common_name(l.as_ref())))
            .unwrap_or_default();
        if cn != agent {
            self.inner.metrics.auth_failure("subject-mismatch");
            tracing::error!(
                agent,
                common_name = cn,
                "could not match TLS certificate: the TLS subject '{cn}' does not match agent name '{agent}' (--client-cert-subject-match)"
            );
            return Err(Status::unauthenticated("invalid authentication data"));
        }
        Ok(())
    }

    pub(super) fn cert_identity<T>(&self, req: &Request<T>) -> Result<String, Status> {
        if self.forwarded {
            // the forwarding replica authenticated the agent (certificate, blocklist, header)
            return req
                .metadata()
                .get(FORWARDED_AGENT)
                .and_then(|v| v.to_str().ok())
                .filter(|a| tls::is_dns_label(a))
                .map(str::to_string)
                .ok_or_else(|| {
                    Status::unauthenticated(format!(
                        "a call on the replica port must name its agent in {FORWARDED_AGENT}"
                    ))
                });
        }
        if let Some(h) = &self.inner.cfg.identity_header {
            return self.header_identity(req, h);
        }
        self.client_cert_identity(req)
    }

    /// `--auth header:<name>:<regex>` (peer: internal/auth/header): the first capture group of
    /// the regex on the header's first value, a DNS label. The value is never logged.
    fn header_identity<T>(&self, req: &Request<T>, name: &str) -> Result<String, Status> {
        let refuse = |reason: &str, msg: String| {
            self.inner.metrics.auth_failure(reason);
            Status::unauthenticated(msg)
        };
        let v = req
            .metadata()
            .get(name)
            .ok_or_else(|| {
                refuse(
                    "no-identity-header",
                    format!("header '{name}' not found in request"),
                )
            })?
            .to_str()
            .map_err(|_| refuse("identity", format!("header '{name}' is not text")))?;
        let id = self
            .inner
            .identity
            .captures(v)
            .and_then(|c| c.get(1))
            .map(|m| m.as_str().to_string())
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                refuse(
                    "identity",
                    "header value does not match the extraction regex pattern".into(),
                )
            })?;
        if !tls::is_dns_label(&id) {
            return Err(refuse(
                "identity",
                format!("invalid agent ID {id:?} extracted from header: not a DNS label"),
            ));
        }
        Ok(id)
    }

    fn client_cert_identity<T>(&self, req: &Request<T>) -> Result<String, Status> {
        let certs = req.peer_certs().ok_or_else(|| {
            self.inner.metrics.auth_failure("no-client-cert");
            Status::unauthenticated("a client certificate is required")
        })?;
        let leaf = certs
            .first()
            .ok_or_else(|| Status::unauthenticated("a client certificate is required"))?;
        let fp = argocd_pull_agent_core::blocklist::fingerprint(leaf.as_ref());
        if self.inner.hub.blocklist.contains(&fp) {
            self.inner.metrics.auth_failure("blocklisted");
            tracing::warn!(fingerprint = %fp, "rejected blocklisted certificate");
            return Err(Status::unauthenticated("certificate is blocklisted"));
        }
        let identity = match self.inner.cfg.identity_from_uri {
            true => tls::identity_from_uri(leaf.as_ref(), &self.inner.identity),
            false => tls::identity_from_cert(leaf.as_ref(), &self.inner.identity),
        };
        let agent = identity.map_err(|e| {
            self.inner.metrics.auth_failure("identity");
            Status::unauthenticated(e.to_string())
        })?;
        self.inner.hub.blocklist.track(&fp, &agent);
        Ok(agent)
    }
}

#[tonic::async_trait]
impl Version for Svc {
    async fn version(
        &self,
        _r: Request<versionapi::VersionRequest>,
    ) -> Result<Response<versionapi::VersionResponse>, Status> {
        Ok(Response::new(versionapi::VersionResponse {
            version: self.inner.cfg.version.clone(),
        }))
    }
}

#[tonic::async_trait]
impl Authentication for Svc {
    async fn authenticate(
        &self,
        req: Request<authapi::AuthRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        let agent = self.cert_identity(&req)?;
        let login = |ch, r| async move { AuthenticationClient::new(ch).authenticate(r).await };
        let forwarded = forward::login(
            &self.inner,
            &agent,
            self.forwarded,
            &req,
            "authenticate",
            login,
        );
        if let Some(r) = forwarded.await {
            return r;
        }
        let r = req.into_inner();
        let method = match self.inner.cfg.identity_header {
            Some(_) => "header",
            None => "mtls",
        };
        if r.method != method {
            self.inner.metrics.auth_failure("method");
            return Err(Status::unauthenticated(format!(
                "unsupported authentication method {:?}; this principal supports {method:?}",
                r.method
            )));
        }
        let Some(mode) = Mode::parse(&r.mode) else {
            self.inner.metrics.auth_failure("mode");
            return Err(Status::invalid_argument(format!(
                "unknown agent mode {:?}; want \"managed\" or \"autonomous\"",
                r.mode
            )));
        };
        if let Some(claimed) = r.credentials.get("clientID").filter(|c| !c.is_empty())
            && *claimed != agent
        {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "client ID {claimed:?} does not match the certificate identity {agent:?}"
            )));
        }
        // the peer's rule (principal/apis/auth/auth.go): a version is required and must equal ours
        if r.version.is_empty() {
            self.inner.metrics.auth_failure("version");
            tracing::warn!(agent, "agent did not provide version information");
            return Err(Status::invalid_argument("agent version is required"));
        }
        if r.version != self.inner.cfg.version {
            self.inner.metrics.auth_failure("version");
            tracing::warn!(
                agent,
                agent_version = r.version,
                principal_version = self.inner.cfg.version,
                "version mismatch: rejecting connection (set --report-version / ARGOCD_PRINCIPAL_REPORT_VERSION on the principal or ARGOCD_AGENT_REPORT_VERSION on the agent so they are equal)"
            );
            return Err(Status::failed_precondition("version mismatch"));
        }
        // --enable-self-cluster-registration: the agent's cluster secret exists before it gets
        // its tokens (peer: auth.go RegisterAgent)
        if let Err(e) = self.inner.register_cluster(&agent).await {
            tracing::error!(agent, error = %format!("{e:#}"), "failed to register agent");
            self.inner.metrics.auth_failure("registration");
            return Err(Status::unauthenticated("authentication failed"));
        }
        let (access, refresh) = self
            .inner
            .tokens
            .issue_pair(&agent, mode)
            .map_err(|e| Status::internal(e.to_string()))?;
        self.inner.register(&agent, mode);
        self.inner.agent_logged_in(&agent, mode, Some(&r.version));
        // the agent's own namespace (peer: `setAgentNamespace`): resync and remapped Applications
        self.inner
            .sessions
            .set_namespace(&agent, &r.agent_namespace);
        if !self.inner.cfg.destination_based_mapping && !self.inner.ns_allowed(&agent) {
            tracing::warn!(
                agent,
                "the agent's hub namespace is not in --allowed-namespaces: its hub Applications are ignored; add it (or a pattern matching it) to --allowed-namespaces"
            );
        }
        tracing::info!(agent, mode = mode.as_str(), "agent authenticated");
        Ok(with_features(Response::new(authapi::AuthResponse {
            access_token: access,
            refresh_token: refresh,
            version: self.inner.cfg.version.clone(),
            principal_namespace: self.inner.cfg.namespace.clone(),
        })))
    }

    async fn refresh_token(
        &self,
        req: Request<authapi::RefreshTokenRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        let agent = self.cert_identity(&req)?;
        let login = |ch, r| async move { AuthenticationClient::new(ch).refresh_token(r).await };
        let forwarded = forward::login(
            &self.inner,
            &agent,
            self.forwarded,
            &req,
            "refresh_token",
            login,
        );
        if let Some(r) = forwarded.await {
            return r;
        }
        let claims = self
            .inner
            .tokens
            .verify_refresh(&req.get_ref().refresh_token)
            .map_err(|e| {
                self.inner.metrics.auth_failure("token");
                Status::unauthenticated(e.to_string())
            })?;
        if claims.agent != agent {
            self.inner.metrics.auth_failure("identity-mismatch");
            return Err(Status::permission_denied(format!(
                "token of {:?} presented by {agent:?}",
                claims.agent
            )));
        }
        let mode = claims.mode;
        let (access, refresh) = self
            .inner
            .tokens
            .issue_on_refresh(&claims)
            .map_err(|e| Status::internal(e.to_string()))?;
        let refresh = refresh.unwrap_or_default();
        self.inner.register(&agent, mode);
        self.inner.agent_logged_in(&agent, mode, None);
        Ok(with_features(Response::new(authapi::AuthResponse {
            access_token: access,
            refresh_token: refresh,
            version: self.inner.cfg.version.clone(),
            principal_namespace: self.inner.cfg.namespace.clone(),
        })))
    }
}

/// Names our extensions in the login's response metadata (a peer agent ignores it).
fn with_features<T>(mut r: Response<T>) -> Response<T> {
    use argocd_pull_agent_core::agent_status::{
        FEATURE_AGENT_INFO, FEATURE_RESYNC_SYNCED_LIST, FEATURES_HEADER,
    };
    if let Ok(v) = format!("{FEATURE_AGENT_INFO},{FEATURE_RESYNC_SYNCED_LIST}").parse() {
        r.metadata_mut().insert(FEATURES_HEADER, v);
    }
    r
}

type EventStreamOut = Pin<Box<dyn Stream<Item = Result<eventstreamapi::Event, Status>> + Send>>;

#[tonic::async_trait]
impl EventStream for Svc {
    type SubscribeStream = EventStreamOut;

    async fn subscribe(
        &self,
        req: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<Self::SubscribeStream>, Status> {
        let (agent, mode) = self.verified_agent(&req)?;
        if let Via::Owner(ch) = self.inner.route_call(&agent, self.forwarded).await? {
            return forward::subscribe(&self.inner, ch, &agent, req).await;
        }
        let a = self.inner.register(&agent, mode);
        let inbound = req.into_inner();
        let (tx, rx) = mpsc::channel::<Box<eventstreamapi::Event>>(session::WIRE_BUFFER);
        let ctx = SessionCtx {
            source: SOURCE.into(),
            queue: a.queue.clone(),
            metrics: self.inner.metrics.clone(),
            max_event_size: self.inner.cfg.max_event_size,
            concurrency: self.inner.cfg.concurrency,
            recv_queue_size: self.inner.cfg.recv_queue_size,
            recv_workqueue: self
                .inner
                .metrics
                .workqueues
                .queue(&format!("{agent}-recv")),
            peer_label: agent.clone(),
            trace: argocd_pull_agent_core::otel::StreamAttrs {
                component: argocd_pull_agent_core::otel::Component::Principal,
                agent: agent.clone(),
                mode,
            },
            principal_uid: self.inner.cfg.principal_uid.as_deref().map(Into::into),
        };
        let gen_ = a.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let handler = Arc::new(SessionHandler {
            inner: self.inner.clone(),
            agent: a.clone(),
            generation: gen_,
        });
        let metrics = self.inner.metrics.clone();
        let a2 = a.clone();
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let end = session::run(ctx, handler, inbound, tx).await;
            tracing::info!(agent = %a2.name, reason = %end, "agent stream ended");
            {
                let mut o = a2.outbox.lock().expect("poisoned");
                if o.as_ref().is_some_and(|(g, _)| *g == gen_) {
                    *o = None;
                }
            }
            let mut s = a2.session.lock().expect("poisoned");
            if s.as_ref().is_some_and(|(g, _)| *g == gen_) {
                *s = None;
                a2.connected.store(false, Ordering::SeqCst);
                // shown `Failed` unless it is back within the grace period
                inner.stream_down(&a2.name, super::connection::drop_reason(&end));
                // requests in flight to this agent fail now (502), not at their timeout
                inner.relays.agent_gone(&a2.name);
                metrics.agent_disconnected(&a2.name);
            }
        });
        {
            let mut s = a.session.lock().expect("poisoned");
            if let Some((_, old)) = s.replace((gen_, task.abort_handle())) {
                // a newer stream of the same agent replaces the old one
                old.abort();
            } else {
                self.inner.metrics.agent_connected(&agent);
            }
            a.connected.store(true, Ordering::SeqCst);
        }
        self.inner.stream_up(&agent);
        tracing::info!(agent, mode = mode.as_str(), "agent subscribed");
        let out = ReceiverStream::new(rx).map(|e| Ok(*e));
        Ok(Response::new(Box::pin(
            self.inner.ends_with_stopping_status(out),
        )))
    }

    async fn push(
        &self,
        _r: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<eventstreamapi::PushSummary>, Status> {
        Err(Status::unimplemented(
            "Push is not implemented; use Subscribe",
        ))
    }

    async fn ping(
        &self,
        _r: Request<eventstreamapi::PingRequest>,
    ) -> Result<Response<eventstreamapi::PongReply>, Status> {
        Ok(Response::new(eventstreamapi::PongReply {}))
    }
}
