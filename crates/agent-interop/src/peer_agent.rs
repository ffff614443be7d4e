//! A minimal peer agent: logs in and talks on the event stream as argocd-agent's agent does
//! (pkg/client/remote.go, agent/connection.go): `Authenticate{method: "mtls", mode, version}`,
//! then `Version` (with the token), then `Subscribe` with metadata `authorization: <raw JWT>`.
//! Every received event is read with the SDK's `FromProto` and the peer's `event.Target`: events
//! whose target the peer cannot read are dropped without an ACK (as the peer does); every other
//! non-ACK event is acknowledged with `processed` copying its extensions.

use std::net::SocketAddr;
use std::time::Duration;

use base64::Engine;
use prost::Message;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::emitter::{self, Emitter};
use crate::pb::authapi::{self, authentication_client::AuthenticationClient};
use crate::pb::eventstreamapi::{self, event_stream_client::EventStreamClient};
use crate::pb::io::cloudevents::v1::CloudEvent;
use crate::pb::versionapi::{self, version_client::VersionClient};
use crate::sdk::{self, Event};

/// The version string of an argocd-agent build from source (internal/version).
pub const PEER_VERSION: &str = "99.9.9-unreleased";
/// How long any single expectation may take.
pub const T: Duration = Duration::from_secs(20);

/// PEM material for mTLS.
#[derive(Clone)]
pub struct Tls {
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

#[derive(Clone)]
pub struct PeerAgentConfig {
    pub principal: SocketAddr,
    pub tls: Tls,
    /// "managed" or "autonomous"
    pub mode: String,
    pub version: String,
    pub namespace: String,
}

/// A successful login.
pub struct Login {
    pub channel: Channel,
    pub auth: authapi::AuthResponse,
    /// What `Version` returned.
    pub principal_version: String,
    /// The access token's `sub` claim parsed as the peer does (`auth.AuthSubject`).
    pub subject: Value,
}

pub async fn channel(cfg: &PeerAgentConfig) -> anyhow::Result<Channel> {
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&cfg.tls.ca_pem))
        .identity(Identity::from_pem(&cfg.tls.cert_pem, &cfg.tls.key_pem))
        .domain_name("localhost");
    Ok(Endpoint::from_shared(format!("https://{}", cfg.principal))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(10))
        .connect()
        .await?)
}

/// The JWT's `sub` claim, decoded without verification (the peer agent's `NewToken` +
/// `Claims.GetSubject()`), parsed as JSON.
pub fn token_subject(jwt: &str) -> anyhow::Result<Value> {
    let payload = jwt
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("not a JWT: {jwt:?}"))?;
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('='))?,
    )?;
    let sub = claims["sub"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("token has no string sub claim: {claims}"))?;
    Ok(serde_json::from_str(sub)?)
}

/// `Authenticate`, then `Version` with the token, in the peer's order.
pub async fn login(cfg: &PeerAgentConfig) -> Result<Login, tonic::Status> {
    let ch = channel(cfg)
        .await
        .map_err(|e| tonic::Status::unavailable(format!("{e:#}")))?;
    let auth = AuthenticationClient::new(ch.clone())
        .authenticate(authapi::AuthRequest {
            method: "mtls".into(),
            credentials: Default::default(),
            mode: cfg.mode.clone(),
            version: cfg.version.clone(),
            agent_namespace: cfg.namespace.clone(),
        })
        .await?
        .into_inner();
    let subject = token_subject(&auth.access_token).map_err(|e| {
        tonic::Status::internal(format!("peer agent cannot parse the token: {e:#}"))
    })?;
    let mut req = tonic::Request::new(versionapi::VersionRequest {});
    req.metadata_mut().insert(
        "authorization",
        auth.access_token
            .parse()
            .map_err(|_| tonic::Status::internal("token is not ASCII"))?,
    );
    let v = VersionClient::new(ch.clone())
        .version(req)
        .await?
        .into_inner();
    Ok(Login {
        channel: ch,
        auth,
        principal_version: v.version,
        subject,
    })
}

/// One `Subscribe` stream of the peer agent.
pub struct PeerStream {
    tx: mpsc::Sender<eventstreamapi::Event>,
    inbound: tonic::Streaming<eventstreamapi::Event>,
    pub emitter: Emitter,
    /// ACK every readable non-ACK event (the peer's receiver does).
    pub auto_ack: bool,
    /// Everything read so far (ACKs included), in order.
    pub seen: Vec<Event>,
    /// Events the peer could not read (unknown target after FromProto; dropped without ACK).
    pub unreadable: Vec<CloudEvent>,
}

impl PeerStream {
    pub async fn subscribe(login: &Login, emitter: Emitter) -> anyhow::Result<PeerStream> {
        let (tx, rx) = mpsc::channel(256);
        let mut req = tonic::Request::new(ReceiverStream::new(rx));
        req.metadata_mut()
            .insert("authorization", login.auth.access_token.parse()?);
        let inbound = EventStreamClient::new(login.channel.clone())
            .subscribe(req)
            .await?
            .into_inner();
        Ok(PeerStream {
            tx,
            inbound,
            emitter,
            auto_ack: true,
            seen: Vec::new(),
            unreadable: Vec::new(),
        })
    }

    pub async fn send(&self, e: &Event) {
        self.send_raw(sdk::to_proto(e)).await
    }

    pub async fn send_raw(&self, c: CloudEvent) {
        self.tx
            .send(eventstreamapi::Event { event: Some(c) })
            .await
            .expect("stream open");
    }

    /// The next event the peer can read (ACKing it when `auto_ack`).
    pub async fn next(&mut self) -> anyhow::Result<Event> {
        loop {
            let m = self
                .inbound
                .message()
                .await?
                .ok_or_else(|| anyhow::anyhow!("stream closed by the principal"))?;
            let Some(raw) = m.event else {
                anyhow::bail!("invalid wire transmission (Event without event)");
            };
            let e = sdk::from_proto(&raw)?;
            match emitter::target(&e) {
                None => {
                    self.unreadable.push(raw);
                    continue;
                }
                Some("eventProcessed") => {}
                Some(_) => {
                    if self.auto_ack {
                        let ack = self.emitter.processed(&e);
                        self.send(&ack).await;
                    }
                }
            }
            self.seen.push(e.clone());
            return Ok(e);
        }
    }

    /// Waits (under [`T`]) for an event matching `pred`; panics with what was seen otherwise.
    pub async fn expect(&mut self, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
        let r = tokio::time::timeout(T, async {
            loop {
                let e = self.next().await?;
                if pred(&e) {
                    return anyhow::Ok(e);
                }
            }
        })
        .await;
        match r {
            Ok(Ok(e)) => e,
            Ok(Err(err)) => panic!("{what}: {err:#}\n{}", self.describe()),
            Err(_) => panic!("timed out waiting for {what}\n{}", self.describe()),
        }
    }

    /// A readable summary of the stream so far (for failure messages).
    pub fn describe(&self) -> String {
        let mut s = String::from("seen (SDK view):\n");
        for e in &self.seen {
            s.push_str(&format!("  {}\n", summary(e)));
        }
        for r in &self.unreadable {
            s.push_str(&format!(
                "  UNREADABLE by the peer (unknown target): type={} attributes={:?}\n",
                r.r#type, r.attributes
            ));
        }
        s
    }
}

/// One line per event.
pub fn summary(e: &Event) -> String {
    format!(
        "type={} dataschema={:?} subject={:?} resourceid={:?} eventid={:?} data={}",
        e.typ,
        e.dataschema,
        e.subject,
        e.ext("resourceid"),
        e.ext("eventid"),
        String::from_utf8_lossy(&e.data)
    )
}

/// The encoded size of an event as the peer would send it (for diagnostics).
pub fn encoded_len(e: &Event) -> usize {
    sdk::to_proto(e).encoded_len()
}
