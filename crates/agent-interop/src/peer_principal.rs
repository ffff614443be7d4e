//! A minimal peer principal: Version, Authentication and EventStream as argocd-agent's
//! principal serves them (principal/apis/auth/auth.go, principal/auth.go,
//! principal/apis/eventstream/eventstream.go, principal/event.go):
//! * `Authenticate`: mode must be managed/autonomous; method `mtls` takes the agent name from the
//!   client certificate's CN; the version must be non-empty (InvalidArgument) and string-equal to
//!   the principal's (FailedPrecondition "version mismatch"); RS512 JWTs, issuer
//!   `argocd-agent-server`, `sub` = `{"clientID","mode"}`.
//! * `Subscribe`: metadata `authorization` must be a valid access token (raw, no `Bearer`).
//! * Every received event is read with `FromProto`; ACKs (target `eventProcessed`) are recorded;
//!   every other event is acknowledged with `processed` copying its extensions (the peer ACKs
//!   after processing, also when processing failed with a non-retryable error).

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

use crate::emitter::{self, Emitter, PRINCIPAL_SOURCE};
use crate::pb::authapi::{
    self,
    authentication_server::{Authentication, AuthenticationServer},
};
use crate::pb::eventstreamapi::{
    self,
    event_stream_server::{EventStream, EventStreamServer},
};
use crate::pb::versionapi::{
    self,
    version_server::{Version, VersionServer},
};
use crate::peer_agent::{T, Tls, summary};
use crate::sdk::{self, Event};

pub const ISSUER: &str = "argocd-agent-server";

#[derive(Clone)]
pub struct PeerPrincipalConfig {
    /// Server certificate and key, and the CA that signs client certificates (PEM).
    pub tls: Tls,
    /// The principal's version string (agents must send exactly this).
    pub version: String,
    pub namespace: String,
    /// RSA PKCS#8 PEM for the JWTs.
    pub jwt_key_pem: String,
}

/// One event received from an agent.
#[derive(Clone, Debug)]
pub struct Inbound {
    pub agent: String,
    pub raw: crate::pb::io::cloudevents::v1::CloudEvent,
    pub event: Event,
}

struct State {
    cfg: PeerPrincipalConfig,
    jwt_pub_pem: String,
    auths: Mutex<Vec<authapi::AuthRequest>>,
    version_calls: Mutex<Vec<Option<String>>>,
    subscribe_auth: Mutex<Vec<Option<String>>>,
    inbox: mpsc::UnboundedSender<Inbound>,
    outbox: Mutex<Option<mpsc::Sender<Result<eventstreamapi::Event, Status>>>>,
    streams: watch::Sender<u64>,
}

/// A running peer principal.
pub struct PeerPrincipal {
    pub addr: SocketAddr,
    state: Arc<State>,
    inbox: tokio::sync::Mutex<mpsc::UnboundedReceiver<Inbound>>,
    /// Everything received so far, in order.
    pub seen: Mutex<Vec<Inbound>>,
    pub emitter: Emitter,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

#[derive(Clone)]
struct Svc(Arc<State>);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

fn cert_cn<T>(req: &Request<T>) -> Result<String, Status> {
    let certs = req
        .peer_certs()
        .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
    let leaf = certs
        .first()
        .ok_or_else(|| Status::unauthenticated("no client certificate"))?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref())
        .map_err(|e| Status::unauthenticated(e.to_string()))?;
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_string)
        .ok_or_else(|| Status::unauthenticated("client certificate has no CN"))
}

impl Svc {
    fn token(&self, client: &str, mode: &str, audience: &str, secs: u64) -> Result<String, Status> {
        let sub = json!({"clientID": client, "mode": mode}).to_string();
        let n = now();
        let claims = json!({"jti": emitter::new_uuid(), "iss": ISSUER, "sub": sub, "aud": [audience],
                            "nbf": n, "iat": n, "exp": n + secs});
        let key = EncodingKey::from_rsa_pem(self.0.cfg.jwt_key_pem.as_bytes())
            .map_err(|e| Status::internal(e.to_string()))?;
        jsonwebtoken::encode(&Header::new(Algorithm::RS512), &claims, &key)
            .map_err(|e| Status::internal(e.to_string()))
    }

    /// principal/auth.go `authenticate`: the raw token from `authorization`.
    fn verify<T>(&self, req: &Request<T>) -> Result<Value, Status> {
        let tok = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| Status::unauthenticated("invalid authentication data"))?;
        let key = DecodingKey::from_rsa_pem(self.0.jwt_pub_pem.as_bytes())
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut v = Validation::new(Algorithm::RS512);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[format!("{ISSUER}-access")]);
        let data = jsonwebtoken::decode::<Value>(tok, &key, &v)
            .map_err(|_| Status::unauthenticated("invalid authentication data"))?;
        let sub = data.claims["sub"].as_str().unwrap_or_default();
        serde_json::from_str(sub)
            .map_err(|_| Status::unauthenticated("invalid authentication data"))
    }
}

#[tonic::async_trait]
impl Version for Svc {
    async fn version(
        &self,
        r: Request<versionapi::VersionRequest>,
    ) -> Result<Response<versionapi::VersionResponse>, Status> {
        let auth = r
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.0.version_calls.lock().expect("lock").push(auth);
        Ok(Response::new(versionapi::VersionResponse {
            version: self.0.cfg.version.clone(),
        }))
    }
}

#[tonic::async_trait]
impl Authentication for Svc {
    async fn authenticate(
        &self,
        req: Request<authapi::AuthRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        let cn = cert_cn(&req);
        let ar = req.into_inner();
        self.0.auths.lock().expect("lock").push(ar.clone());
        if ar.mode != "managed" && ar.mode != "autonomous" {
            return Err(Status::unknown(format!(
                "unknown or missing operation mode: '{}'",
                ar.mode
            )));
        }
        if ar.method != "mtls" {
            return Err(Status::unauthenticated("authentication failed"));
        }
        let client = cn.map_err(|_| Status::unauthenticated("authentication failed"))?;
        if ar.version.is_empty() {
            return Err(Status::invalid_argument("agent version is required"));
        }
        if ar.version != self.0.cfg.version {
            return Err(Status::failed_precondition("version mismatch"));
        }
        Ok(Response::new(authapi::AuthResponse {
            access_token: self.token(&client, &ar.mode, &format!("{ISSUER}-access"), 300)?,
            refresh_token: self.token(&client, &ar.mode, &format!("{ISSUER}-refresh"), 86400)?,
            version: self.0.cfg.version.clone(),
            principal_namespace: self.0.cfg.namespace.clone(),
        }))
    }

    async fn refresh_token(
        &self,
        _req: Request<authapi::RefreshTokenRequest>,
    ) -> Result<Response<authapi::AuthResponse>, Status> {
        Err(Status::unimplemented("not used by these tests"))
    }
}

type Out = Pin<Box<dyn Stream<Item = Result<eventstreamapi::Event, Status>> + Send>>;

#[tonic::async_trait]
impl EventStream for Svc {
    type SubscribeStream = Out;

    async fn subscribe(
        &self,
        req: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<Out>, Status> {
        let auth = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.0.subscribe_auth.lock().expect("lock").push(auth);
        let subject = self.verify(&req)?;
        let agent = subject["clientID"].as_str().unwrap_or_default().to_string();
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(256);
        *self.0.outbox.lock().expect("lock") = Some(tx.clone());
        self.0.streams.send_modify(|n| *n += 1);
        let st = self.0.clone();
        let acker = Emitter::new(PRINCIPAL_SOURCE);
        tokio::spawn(async move {
            while let Some(Ok(m)) = inbound.next().await {
                let Some(raw) = m.event else { break };
                let Ok(e) = sdk::from_proto(&raw) else { break };
                if e.dataschema != "eventProcessed" {
                    let ack = sdk::to_proto(&acker.processed(&e));
                    let _ = tx
                        .send(Ok(eventstreamapi::Event { event: Some(ack) }))
                        .await;
                }
                let _ = st.inbox.send(Inbound {
                    agent: agent.clone(),
                    raw,
                    event: e,
                });
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn push(
        &self,
        _r: Request<tonic::Streaming<eventstreamapi::Event>>,
    ) -> Result<Response<eventstreamapi::PushSummary>, Status> {
        Err(Status::unimplemented("not used"))
    }

    async fn ping(
        &self,
        _r: Request<eventstreamapi::PingRequest>,
    ) -> Result<Response<eventstreamapi::PongReply>, Status> {
        Ok(Response::new(eventstreamapi::PongReply {}))
    }
}

impl PeerPrincipal {
    /// Listens on 127.0.0.1 (random port) with mTLS (client certificates from `cfg.tls.ca_pem`).
    pub async fn start(cfg: PeerPrincipalConfig) -> anyhow::Result<PeerPrincipal> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (itx, irx) = mpsc::unbounded_channel();
        let jwt_pub_pem = {
            use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey};
            rsa::RsaPrivateKey::from_pkcs8_pem(&cfg.jwt_key_pem)?
                .to_public_key()
                .to_public_key_pem(rsa::pkcs8::LineEnding::LF)?
        };
        let state = Arc::new(State {
            cfg: cfg.clone(),
            jwt_pub_pem,
            auths: Mutex::default(),
            version_calls: Mutex::default(),
            subscribe_auth: Mutex::default(),
            inbox: itx,
            outbox: Mutex::default(),
            streams: watch::channel(0).0,
        });
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(&cfg.tls.cert_pem, &cfg.tls.key_pem))
            .client_ca_root(Certificate::from_pem(&cfg.tls.ca_pem));
        let svc = Svc(state.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = Server::builder()
            .tls_config(tls)?
            .add_service(VersionServer::new(svc.clone()))
            .add_service(AuthenticationServer::new(svc.clone()))
            .add_service(EventStreamServer::new(svc));
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(PeerPrincipal {
            addr,
            state,
            inbox: tokio::sync::Mutex::new(irx),
            seen: Mutex::default(),
            emitter: Emitter::new(PRINCIPAL_SOURCE),
            stop: Some(stop),
        })
    }

    /// `Authenticate` requests received so far.
    pub fn auth_requests(&self) -> Vec<authapi::AuthRequest> {
        self.state.auths.lock().expect("lock").clone()
    }
    /// The `authorization` metadata of every `Version` call.
    pub fn version_calls(&self) -> Vec<Option<String>> {
        self.state.version_calls.lock().expect("lock").clone()
    }
    /// The `authorization` metadata of every `Subscribe` call.
    pub fn subscribe_calls(&self) -> Vec<Option<String>> {
        self.state.subscribe_auth.lock().expect("lock").clone()
    }

    /// Waits until `n` streams have been opened in total.
    pub async fn wait_streams(&self, n: u64) {
        let mut rx = self.state.streams.subscribe();
        tokio::time::timeout(T, rx.wait_for(|v| *v >= n))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no stream #{n} within {T:?}; auth requests: {:?}",
                    self.auth_requests()
                )
            })
            .expect("watch");
    }

    /// Sends an event on the current stream.
    pub async fn send(&self, e: &Event) {
        self.send_raw(sdk::to_proto(e)).await
    }

    pub async fn send_raw(&self, c: crate::pb::io::cloudevents::v1::CloudEvent) {
        let tx = self
            .state
            .outbox
            .lock()
            .expect("lock")
            .clone()
            .expect("an agent is subscribed");
        tx.send(Ok(eventstreamapi::Event { event: Some(c) }))
            .await
            .expect("stream open");
    }

    /// Waits (under [`T`]) for a received event matching `pred`.
    pub async fn expect(&self, what: &str, pred: impl Fn(&Inbound) -> bool) -> Inbound {
        let mut rx = self.inbox.lock().await;
        let r = tokio::time::timeout(T, async {
            loop {
                let i = rx.recv().await?;
                self.seen.lock().expect("lock").push(i.clone());
                if pred(&i) {
                    return Some(i);
                }
            }
        })
        .await;
        match r {
            Ok(Some(i)) => i,
            _ => panic!("timed out waiting for {what}\n{}", self.describe()),
        }
    }

    pub fn describe(&self) -> String {
        let mut s = String::from("received (SDK view):\n");
        for i in self.seen.lock().expect("lock").iter() {
            s.push_str(&format!("  [{}] {}\n", i.agent, summary(&i.event)));
        }
        s
    }

    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}
