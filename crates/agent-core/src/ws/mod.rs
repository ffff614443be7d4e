//! gRPC over WebSocket (`--enable-websocket` on agent and principal): the event stream and every
//! other call through proxies and load balancers that speak only HTTP/1.1. Wire-compatible with
//! golang.stackrox.io/grpc-http1, which the peer (argocd-agent) uses for the same flag: our agent
//! talks to its principal and its agent to ours. See [`frame`] for the protocol.

pub mod client;
pub mod frame;
mod probe;
pub mod server;

pub use probe::{http1_only, maybe_not_http2, not_http2_message};

/// The largest WebSocket message either side reads (the peer's `SetReadLimit(64 * size.MB)`).
pub const MAX_MESSAGE: usize = 64 << 20;

fn ws_config() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE))
}

/// A principal with `--enable-websocket` offers HTTP/1.1 beside h2 in TLS ALPN (rustls refuses a
/// client whose ALPN offer it does not share).
pub fn offer_http1(cfg: &mut rustls::ServerConfig) {
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
}
