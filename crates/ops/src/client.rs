//! kube's client, speaking HTTP/2 to the API server (opt-in: not what `argocd-pull controller`
//! uses, see below).
//!
//! kube 5 builds its client with an HTTP/1.1-only connector: every concurrent request (and every
//! open watch) holds a TCP + TLS connection of its own, and a burst of N concurrent writes waits
//! for N handshakes first. client-go — what the Go peers and the API server's other clients use —
//! offers `h2` by ALPN and multiplexes everything over one connection. [`infer`] /
//! [`from_config`] build the same tower stack as kube (base URI, kube's retry of 429/503/504,
//! authentication, extra headers; not its debug span per request) over a connector offering `h2` and
//! `http/1.1`: the API server picks HTTP/2, a plain-`http` or HTTP/1.1-only server keeps working
//! as before. The HTTP/2 connection is checked like client-go does (a PING after 30 s without a
//! frame, dropped when unanswered for 15 s), so a silently dead API server is noticed by watches.
//!
//! Measured on a real kube-apiserver 1.24 (issue 15): one multiplexed connection for everything,
//! watches included, cost the hub controller less CPU per Application but took longer until all
//! works existed than kube's one connection per concurrent request; the hub controller sends its
//! reconciles' requests over it and keeps its watches on kube's client
//! (crates/cli/src/controller.rs).
//!
//! A kubeconfig with a proxy, an exec credential plugin or a `tls-server-name` gets kube's own
//! client unchanged (the proxy connectors, the expiry of exec-issued certificates and the fixed
//! server name are kube-internal).

use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt};
use kube::{Client, Config};
use tower::{BoxError, ServiceBuilder};

/// A PING on the HTTP/2 connection after this long without a frame (client-go's `ReadIdleTimeout`).
pub const H2_PING_AFTER: Duration = Duration::from_secs(30);
/// An unanswered PING closes the connection after this long (client-go's `PingTimeout`).
pub const H2_PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The client for the cluster found the usual way (`KUBECONFIG` / `~/.kube/config`, then the
/// in-cluster service account), as [`from_config`] builds it.
pub async fn infer() -> anyhow::Result<Client> {
    let config = Config::infer().await?;
    Ok(from_config(config)?)
}

/// Whether [`from_config`] builds its own HTTP/2-capable client for `config` (`false`: kube's).
pub fn speaks_h2(config: &Config) -> bool {
    config.proxy_url.is_none()
        && config.auth_info.exec.is_none()
        && config.tls_server_name.is_none()
}

/// kube's client for `config`, over a connector that offers HTTP/2 (see the module docs).
pub fn from_config(config: Config) -> kube::Result<Client> {
    if !speaks_h2(&config) {
        return Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut tls = config.rustls_client_config()?;
    // offered in this order: the server picks h2 when it speaks it (the connection then reports
    // itself negotiated as HTTP/2 and the pool shares it), else HTTP/1.1
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let https = hyper_rustls::HttpsConnector::from((http, tls));
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let hyper: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(H2_PING_AFTER)
            .http2_keep_alive_timeout(H2_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);

    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(hyper);
    Ok(ClientBuilder::new(service, config.default_namespace).build())
}
