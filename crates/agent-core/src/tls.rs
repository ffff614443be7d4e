//! TLS: rustls (ring provider) configs for mTLS, the agent identity from the client certificate,
//! the server accept loop and the client connector.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use hyper_util::rt::TokioIo;
use regex::Regex;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// Default identity regex: the whole CN of a subject that has only a CN (argocd-agent's default).
pub const DEFAULT_IDENTITY_REGEX: &str = "^CN=([^,]+)$";

/// The ring crypto provider (never aws-lc: see the stack notes).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS protocol versions: TLS 1.3 only by default.
pub fn versions(allow_tls12: bool) -> &'static [&'static rustls::SupportedProtocolVersion] {
    static TLS13_ONLY: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];
    if allow_tls12 {
        rustls::ALL_VERSIONS
    } else {
        TLS13_ONLY
    }
}

/// PEM certificates.
pub fn parse_certs(pem: &[u8]) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs: Vec<_> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<_, _>>()
        .context("reading PEM certificates")?;
    if certs.is_empty() {
        bail!("no certificate found in PEM data");
    }
    Ok(certs)
}

/// A PEM private key.
pub fn parse_key(pem: &[u8]) -> anyhow::Result<PrivateKeyDer<'static>> {
    rustls_pemfile::private_key(&mut &pem[..])
        .context("reading PEM private key")?
        .ok_or_else(|| anyhow!("no private key found in PEM data"))
}

fn roots(ca: &[CertificateDer<'static>]) -> anyhow::Result<RootCertStore> {
    let mut r = RootCertStore::empty();
    for c in ca {
        r.add(c.clone()).context("adding CA certificate")?;
    }
    Ok(r)
}

/// PEM material of one side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsMaterial {
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
    pub ca_pem: Vec<u8>,
}

/// Server config demanding a client certificate signed by `ca`.
pub fn server_config(m: &TlsMaterial, allow_tls12: bool) -> anyhow::Result<ServerConfig> {
    server_config_with(m, allow_tls12, None)
}

/// [`server_config`] offering only `suites` (`--tls-ciphersuites`).
pub fn server_config_with(
    m: &TlsMaterial,
    allow_tls12: bool,
    suites: Option<&[rustls::SupportedCipherSuite]>,
) -> anyhow::Result<ServerConfig> {
    let provider = crate::ciphers::provider(suites);
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots(&parse_certs(&m.ca_pem)?)?),
        provider.clone(),
    )
    .build()
    .context("building client certificate verifier")?;
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions(allow_tls12))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(parse_certs(&m.cert_pem)?, parse_key(&m.key_pem)?)
        .context("server certificate/key")?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(cfg)
}

/// Client config presenting a client certificate and trusting `ca`.
pub fn client_config(m: &TlsMaterial, allow_tls12: bool) -> anyhow::Result<ClientConfig> {
    client_config_with(m, allow_tls12, None)
}

/// [`client_config`] offering only `suites` (`--tls-ciphersuites`).
pub fn client_config_with(
    m: &TlsMaterial,
    allow_tls12: bool,
    suites: Option<&[rustls::SupportedCipherSuite]>,
) -> anyhow::Result<ClientConfig> {
    client_config_opts(m, allow_tls12, suites, false)
}

/// [`client_config_with`]; `insecure` (`--insecure-tls`): any server certificate is accepted
/// and `ca_pem` is not read.
pub fn client_config_opts(
    m: &TlsMaterial,
    allow_tls12: bool,
    suites: Option<&[rustls::SupportedCipherSuite]>,
    insecure: bool,
) -> anyhow::Result<ClientConfig> {
    let provider = crate::ciphers::provider(suites);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions(allow_tls12))?;
    let builder = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(crate::insecure::NoServerVerification(
                provider,
            )))
    } else {
        builder.with_root_certificates(roots(&parse_certs(&m.ca_pem)?)?)
    };
    let mut cfg = builder
        .with_client_auth_cert(parse_certs(&m.cert_pem)?, parse_key(&m.key_pem)?)
        .context("client certificate/key")?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(cfg)
}

/// The subject common name of a DER certificate (empty when it has none or cannot be parsed).
pub fn common_name(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der)
        .ok()
        .and_then(|(_, c)| {
            c.subject()
                .iter_common_name()
                .next()
                .and_then(|a| a.as_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// The certificate subject in Go's `pkix.Name.String()` form (RDNs reversed, `,`-joined), which
/// is what argocd-agent's identity regex is written against (`CN=agent-1`).
pub fn subject_string(der: &[u8]) -> anyhow::Result<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| anyhow!("parsing client certificate: {e}"))?;
    let reg = x509_parser::objects::oid_registry();
    let mut parts = Vec::new();
    for rdn in cert.subject().iter_rdn() {
        let mut attrs = Vec::new();
        for a in rdn.iter() {
            let name = match x509_parser::objects::oid2abbrev(a.attr_type(), reg) {
                Ok("serialNumber") => "SERIALNUMBER".to_string(),
                Ok(n) => n.to_string(),
                Err(_) => a.attr_type().to_id_string(),
            };
            let v = a.as_str().unwrap_or("");
            attrs.push(format!("{name}={}", v.replace(',', "\\,")));
        }
        parts.push(attrs.join("+"));
    }
    parts.reverse();
    Ok(parts.join(","))
}

/// Agent identity: first capture group of `re` over the subject; must be a DNS label.
pub fn identity_from_cert(der: &[u8], re: &Regex) -> anyhow::Result<String> {
    let subject = subject_string(der)?;
    let caps = re.captures(&subject).ok_or_else(|| {
        anyhow!("client certificate subject {subject:?} does not match the identity regex {re}")
    })?;
    let id = caps
        .get(1)
        .ok_or_else(|| anyhow!("identity regex {re} has no capture group"))?
        .as_str()
        .to_string();
    if !is_dns_label(&id) {
        bail!("agent name {id:?} from the client certificate is not a DNS label");
    }
    Ok(id)
}

/// The URI SANs of a certificate (e.g. SPIFFE IDs).
pub fn uri_sans(der: &[u8]) -> anyhow::Result<Vec<String>> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| anyhow!("parsing client certificate: {e}"))?;
    Ok(cert
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::URI(u) => Some(u.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default())
}

/// `--auth mtls:uri:<regex>` (peer: internal/auth/mtls `IdentitySourceURI`): the first capture
/// group of the first URI SAN the regex matches, a DNS label.
pub fn identity_from_uri(der: &[u8], re: &Regex) -> anyhow::Result<String> {
    let uris = uri_sans(der)?;
    if uris.is_empty() {
        bail!("no URI SANs found in client certificate");
    }
    let id = uris
        .iter()
        .find_map(|u| re.captures(u).and_then(|c| c.get(1)).map(|m| m.as_str()))
        .filter(|id| !id.is_empty())
        .ok_or_else(|| anyhow!("no URI SAN matched the agent ID regex pattern {re}"))?
        .to_string();
    if !is_dns_label(&id) {
        bail!("agent name {id:?} from the client certificate's URI SAN is not a DNS label");
    }
    Ok(id)
}

pub use argocd_pull_ops::dns::is_dns_label;

/// Accepts TCP connections and completes TLS handshakes concurrently; yields the TLS streams.
/// Handshake failures (wrong CA, expired certificate, TLS 1.2 when 1.3 is demanded) are logged and
/// counted through `on_fail`, never stop the loop.
pub async fn serve_tls(
    listener: TcpListener,
    cfg: Arc<ServerConfig>,
    on_fail: Arc<dyn Fn(&str) + Send + Sync>,
) -> (
    tokio::sync::mpsc::Receiver<Result<tokio_rustls::server::TlsStream<TcpStream>, std::io::Error>>,
    tokio::task::JoinHandle<()>,
) {
    let (cfg_tx, cfg_rx) = tokio::sync::watch::channel(cfg);
    let (rx, h) = serve_tls_reloadable(listener, cfg_rx, on_fail).await;
    // the sender lives with the accept task: the configuration never changes
    let h = tokio::spawn(async move {
        let _keep = cfg_tx;
        let _ = h.await;
    });
    (rx, h)
}

/// Like [`serve_tls`], each handshake with the configuration `cfg` holds at that moment: a new
/// certificate, key or client-CA bundle applies to the next connection, and connections already
/// established are not touched (certificate rotation without dropping agents).
pub async fn serve_tls_reloadable(
    listener: TcpListener,
    cfg: tokio::sync::watch::Receiver<Arc<ServerConfig>>,
    on_fail: Arc<dyn Fn(&str) + Send + Sync>,
) -> (
    tokio::sync::mpsc::Receiver<Result<tokio_rustls::server::TlsStream<TcpStream>, std::io::Error>>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(128);
    let h = tokio::spawn(async move {
        loop {
            let (tcp, peer) = argocd_pull_ops::net::accept(&listener, "TLS").await;
            if tx.is_closed() {
                break;
            }
            let acceptor = TlsAcceptor::from(cfg.borrow().clone());
            let tx = tx.clone();
            let on_fail = on_fail.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                    Ok(Ok(s)) => {
                        let _ = tx.send(Ok(s)).await;
                    }
                    Ok(Err(e)) => {
                        tracing::warn!(%peer, error = %e, "TLS handshake rejected");
                        on_fail(&e.to_string());
                    }
                    Err(_) => {
                        tracing::warn!(%peer, "TLS handshake timed out");
                        on_fail("timeout");
                    }
                }
            });
        }
    });
    (rx, h)
}

/// A tower connector for tonic's `Endpoint::connect_with_connector`: TCP + our rustls config.
pub fn connector(
    cfg: Arc<ClientConfig>,
    addr: SocketAddr,
    server_name: String,
) -> impl tower::Service<
    http::Uri,
    Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>,
    Error = std::io::Error,
    Future = impl Send,
> + Clone {
    let connector = TlsConnector::from(cfg);
    tower::service_fn(move |_uri: http::Uri| {
        let connector = connector.clone();
        let name = server_name.clone();
        async move {
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let sn = ServerName::try_from(name)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let tls = connector.connect(sn, tcp).await?;
            Ok(TokioIo::new(tls))
        }
    })
}
