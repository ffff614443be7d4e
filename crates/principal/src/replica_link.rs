//! The link between active/active replicas: mutual TLS in which each side presents the
//! principal's own certificate and accepts only a peer presenting the very same certificate (the
//! replicas share one TLS Secret). Possession of the principal's key is what makes a replica: an
//! agent's certificate, signed by the same CA, is refused. Behind a service mesh
//! (`--insecure-plaintext`) the link is plaintext like the agents' port; the mesh secures it.
//!
//! During a certificate rotation two replicas may briefly serve different certificates; their
//! forwarded calls fail (the agents retry) until both have reloaded the new one.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tonic::transport::{Channel, Endpoint};

use argocd_pull_agent_core::tls::{self, TlsMaterial};

/// Accepts exactly one certificate: this replica's own leaf.
#[derive(Debug)]
struct SameCertificate {
    leaf: CertificateDer<'static>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl SameCertificate {
    fn new(m: &TlsMaterial) -> anyhow::Result<Arc<SameCertificate>> {
        let leaf = tls::parse_certs(&m.cert_pem)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                anyhow::anyhow!("the principal's certificate PEM holds no certificate")
            })?;
        Ok(Arc::new(SameCertificate {
            leaf,
            provider: tls::provider(),
        }))
    }

    fn check(&self, presented: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        if presented.as_ref() == self.leaf.as_ref() {
            return Ok(());
        }
        tracing::warn!(
            "refused a replica link: the other side does not present this principal's certificate (another certificate during a rotation, or not a principal replica)"
        );
        Err(rustls::Error::InvalidCertificate(
            rustls::CertificateError::ApplicationVerificationFailure,
        ))
    }

    fn tls12(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl ServerCertVerifier for SameCertificate {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

impl ClientCertVerifier for SameCertificate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls12(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.schemes()
    }
}

/// The replica port's TLS: TLS 1.3 only, HTTP/2, the principal's certificate on both sides.
pub(crate) fn server_config(m: &TlsMaterial) -> anyhow::Result<rustls::ServerConfig> {
    let mut cfg = rustls::ServerConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::versions(false))?
        .with_client_cert_verifier(SameCertificate::new(m)?)
        .with_single_cert(tls::parse_certs(&m.cert_pem)?, tls::parse_key(&m.key_pem)?)
        .map_err(|e| anyhow::anyhow!("the principal's certificate/key: {e}"))?;
    // HTTP/1.1 for upgrades only (the web terminal's WebSocket)
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The forwarding side's TLS, the mirror of [`server_config`].
pub(crate) fn client_config(m: &TlsMaterial) -> anyhow::Result<rustls::ClientConfig> {
    let mut cfg = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(tls::versions(false))?
        .dangerous()
        .with_custom_certificate_verifier(SameCertificate::new(m)?)
        .with_client_auth_cert(tls::parse_certs(&m.cert_pem)?, tls::parse_key(&m.key_pem)?)
        .map_err(|e| anyhow::anyhow!("the principal's certificate/key: {e}"))?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(cfg)
}

/// A connection of the replica link.
pub(crate) trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// One HTTP/2 connection per other replica, shared by every call forwarded to it.
pub(crate) struct Links {
    /// `None`: plaintext (`--insecure-plaintext`).
    tls: Mutex<Option<Arc<rustls::ClientConfig>>>,
    channels: Mutex<HashMap<SocketAddr, Channel>>,
    /// HTTP/2 pings on every link: a replica that vanished without closing its connections
    /// (its node lost) ends the streams forwarded to it, and their agents reconnect
    heartbeat: std::time::Duration,
    /// replicas whose last connection attempt failed, and when
    down: Arc<Mutex<HashMap<SocketAddr, Instant>>>,
}

/// How long a replica that refused a connection counts as unreachable (the calls for its agents
/// wait for its shards to be taken meanwhile), before the next call tries it again.
const DOWN_FOR: Duration = Duration::from_secs(1);

/// How long connecting to another replica may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl Links {
    pub(crate) fn new(tls: Option<&TlsMaterial>, heartbeat: Duration) -> anyhow::Result<Links> {
        Ok(Links {
            heartbeat,
            tls: Mutex::new(match tls {
                Some(m) => Some(Arc::new(client_config(m)?)),
                None => None,
            }),
            channels: Mutex::default(),
            down: Arc::default(),
        })
    }

    /// New TLS material: the next calls connect with it.
    pub(crate) fn reload(&self, m: &TlsMaterial) -> anyhow::Result<()> {
        let cfg = Arc::new(client_config(m)?);
        *self.tls.lock().expect("poisoned") = Some(cfg);
        self.channels.lock().expect("poisoned").clear();
        Ok(())
    }

    /// Whether the replica at `addr` refused its last connection within [`DOWN_FOR`].
    pub(crate) fn is_down(&self, addr: SocketAddr) -> bool {
        self.down
            .lock()
            .expect("poisoned")
            .get(&addr)
            .is_some_and(|at| at.elapsed() < DOWN_FOR)
    }

    /// A new HTTP/1.1 connection to the replica at `addr` (for an upgrade: the web terminal).
    pub(crate) async fn connect_http1(&self, addr: SocketAddr) -> anyhow::Result<Box<dyn Io>> {
        let tls = self.tls.lock().expect("poisoned").clone();
        Ok(dial(&self.down, addr, tls, b"http/1.1").await?)
    }

    /// The channel to the replica at `addr` (connected on first use, re-connected by tonic).
    pub(crate) fn channel(&self, addr: SocketAddr) -> Channel {
        if let Some(c) = self.channels.lock().expect("poisoned").get(&addr) {
            return c.clone();
        }
        let tls = self.tls.lock().expect("poisoned").clone();
        let down = self.down.clone();
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .expect("a socket address is a URI authority")
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(self.heartbeat)
            .keep_alive_timeout(super::connection::keepalive_timeout(self.heartbeat))
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        let channel =
            endpoint.connect_with_connector_lazy(tower::service_fn(move |_: http::Uri| {
                let (down, tls) = (down.clone(), tls.clone());
                async move {
                    dial(&down, addr, tls, b"h2")
                        .await
                        .map(hyper_util::rt::TokioIo::new)
                }
            }));
        self.channels
            .lock()
            .expect("poisoned")
            .entry(addr)
            .or_insert(channel)
            .clone()
    }
}

/// A connection to the replica at `addr` (TLS with `tls`, offering `alpn`; plaintext without),
/// noted in `down` when it fails and cleared when it works.
async fn dial(
    down: &Mutex<HashMap<SocketAddr, Instant>>,
    addr: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    alpn: &[u8],
) -> std::io::Result<Box<dyn Io>> {
    let r = async {
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("connecting to replica {addr} timed out"),
                )
            })??;
        tcp.set_nodelay(true)?;
        let Some(cfg) = tls else {
            return Ok(Box::new(tcp) as Box<dyn Io>);
        };
        // the client configuration offers h2; an upgrade needs HTTP/1.1
        let cfg = match cfg.alpn_protocols.iter().any(|p| p == alpn) {
            true => cfg,
            false => {
                let mut c = (*cfg).clone();
                c.alpn_protocols = vec![alpn.to_vec()];
                Arc::new(c)
            }
        };
        let name = ServerName::try_from("replica").expect("a DNS name");
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await?;
        Ok(Box::new(tls) as Box<dyn Io>)
    }
    .await;
    let mut d = down.lock().expect("poisoned");
    match &r {
        Ok(_) => d.remove(&addr),
        Err(_) => d.insert(addr, Instant::now()),
    };
    r
}
