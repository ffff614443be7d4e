//! Why an agent without `--enable-websocket` cannot reach its principal through an HTTP/1.1-only
//! proxy: after a failed attempt the agent asks the server which protocol it speaks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// The HTTP/2 connection preface and an empty SETTINGS frame.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// How the server at `addr` showed that it speaks HTTP/1.1 and not HTTP/2 (`None`: it speaks
/// HTTP/2, or it could not be asked).
pub async fn http1_only(
    addr: SocketAddr,
    server_name: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Option<&'static str> {
    tokio::time::timeout(Duration::from_secs(3), ask(addr, server_name, tls))
        .await
        .ok()
        .flatten()
}

async fn ask(
    addr: SocketAddr,
    server_name: &str,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> Option<&'static str> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    match tls {
        None => preface_answer(tcp).await,
        Some(cfg) => {
            let mut cfg = (**cfg).clone();
            cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
            let name = rustls::pki_types::ServerName::try_from(server_name.to_string()).ok()?;
            let s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
                .connect(name, tcp)
                .await
                .ok()?;
            match s.get_ref().1.alpn_protocol() {
                Some(b"http/1.1") => {
                    Some("in the TLS handshake it chose HTTP/1.1 (ALPN http/1.1) over h2")
                }
                Some(_) => None,
                None => preface_answer(s).await,
            }
        }
    }
}

async fn preface_answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> Option<&'static str> {
    s.write_all(PREFACE).await.ok()?;
    let mut buf = [0u8; 8];
    s.read_exact(&mut buf).await.ok()?;
    buf.starts_with(b"HTTP/1.")
        .then_some("it answered the HTTP/2 connection preface with an HTTP/1.x response")
}

/// Whether a failed attempt's error may come from a server that does not speak HTTP/2 (then the
/// agent asks it; a refused login, a refused certificate or an unreachable address are not).
pub fn maybe_not_http2(error: &str) -> bool {
    let e = error.to_ascii_lowercase();
    [
        "frame with invalid size",
        "noapplicationprotocol",
        "no application protocol",
        "http2 error",
        "h2 protocol error",
        "protocol_error",
        "connection closed",
        "connection reset",
        "broken pipe",
        "unexpected eof",
        "unexpected end of file",
    ]
    .iter()
    .any(|m| e.contains(m))
}

/// The error an agent reports when the server it dials speaks only HTTP/1.1.
pub fn not_http2_message(addr: SocketAddr, evidence: &str, error: &str) -> String {
    format!(
        "the server at {addr} answered HTTP/1.1, it does not speak HTTP/2 (gRPC): {evidence}; if a proxy in between only speaks HTTP/1.1 set --enable-websocket on agent and principal (error: {error})"
    )
}
