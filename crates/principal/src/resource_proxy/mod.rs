//! The resource proxy (the peer's principal/resource.go + principal/resourceproxy): an HTTPS
//! Kubernetes API front on the principal. The caller's client-certificate CN names the agent;
//! each request becomes a resource-request event on that agent's stream and the HTTP request is
//! woken by the agent's response event.

pub(super) mod config;
pub(super) mod pending;
pub(super) mod reply;

pub use config::{DEFAULT_LISTEN, DEFAULT_MAX_BODY, DEFAULT_TIMEOUT, ResourceProxyConfig};
pub use pending::{Pending, Registration as PendingRegistration, Unmatched};
use reply::{Resp, failure, respond};

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use http::{Method, Request};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

use argocd_pull_agent_core::event::HttpMethod;
use argocd_pull_agent_core::resource::{PathParams, ResourceRequest, ResourceResponse};
use argocd_pull_agent_core::tls;

use super::{Inner, SOURCE};

/// The peer's `ReadHeaderTimeout`.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds and serves; returns the bound address and the accept task.
pub(super) async fn start(
    inner: Arc<Inner>,
    cfg: &ResourceProxyConfig,
) -> anyhow::Result<(SocketAddr, Vec<tokio::task::JoinHandle<()>>)> {
    let mut server_tls =
        tls::server_config_with(&cfg.tls, cfg.allow_tls12, cfg.cipher_suites.as_deref())
            .map_err(|e| anyhow::anyhow!("resource proxy TLS configuration: {e:#}"))?;
    server_tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let listener = argocd_pull_ops::net::listen(cfg.listen)
        .map_err(|e| anyhow::anyhow!("resource proxy cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let m = inner.metrics.clone();
    let (mut incoming, accept_task) = tls::serve_tls(
        listener,
        Arc::new(server_tls),
        Arc::new(move |_| {
            m.tls_handshake_failures.inc();
        }),
    )
    .await;
    let serve = tokio::spawn(async move {
        while let Some(s) = incoming.recv().await {
            let Ok(stream) = s else { continue };
            let caller = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| common_name(c.as_ref()))
                .unwrap_or_else(|| Err("no client certificate".into()));
            let inner = inner.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let inner = inner.clone();
                    let caller = caller.clone();
                    async move { Ok::<_, Infallible>(handle(&inner, caller, false, req).await) }
                });
                let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                // as the peer's ReadHeaderTimeout: a caller that never finishes its headers
                // does not hold a connection
                b.http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_TIMEOUT);
                // upgrades: the web terminal's WebSocket (exec)
                let _ = b
                    .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    tracing::info!(%addr, "resource proxy listening");
    Ok((addr, vec![accept_task, serve]))
}

/// The subject CN of a client certificate (the peer takes `Subject.CommonName` as the agent).
fn common_name(der: &[u8]) -> Result<String, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("unreadable client certificate: {e}"))?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|c| c.as_str().ok())
        .unwrap_or_default()
        .to_string();
    if cn.is_empty() {
        Err("the client certificate has an empty Common Name".into())
    } else {
        Ok(cn)
    }
}

/// The peer's fake `/version` answer.
fn version() -> Resp {
    let v = json!({
        "Major": "1", "Minor": "28", "GitVersion": "1.28.5+argocd-agent",
        "GitCommit": "841856557ef0f6a399096c42635d114d6f2cf7f4", "GitTreeState": "clean",
        "BuildDate": "n/a", "GoVersion": "n/a", "Compiler": "rustc",
        "Platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    });
    respond(200, serde_json::to_vec_pretty(&v).unwrap_or_default())
}

/// Serves one request of `caller` (the client certificate's CN); `forwarded`: another
/// active/active replica passed it on (`caller` is the agent it authenticated).
pub(super) async fn handle(
    inner: &Arc<Inner>,
    caller: Result<String, String>,
    forwarded: bool,
    req: Request<Incoming>,
) -> Resp {
    // as the peer's extractAgentFromAuth: a resource-proxy JWT bearer (self-registered cluster
    // secrets share one client certificate) names the agent first, else the certificate's CN
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let caller = match bearer {
        Some(token) => inner
            .tokens
            .verify_resource_proxy(token.trim())
            .map_err(|e| format!("invalid bearer token: {e}")),
        None => caller,
    };
    let agent = match caller {
        Ok(a) => a,
        Err(e) => {
            tracing::warn!(error = %e, "resource proxy: authentication failed");
            return failure(401, &format!("authentication failed: {e}"));
        }
    };
    if !tls::is_dns_label(&agent) {
        return failure(
            400,
            &format!("invalid agent name {agent:?} in the client certificate: not a DNS label"),
        );
    }
    let path = req.uri().path().to_string();
    if path != "/version" {
        match inner.route_request(&agent, forwarded).await {
            Ok(None) => {}
            Ok(Some(owner)) => {
                return super::forward_http::resource(inner, owner, &agent, req).await;
            }
            Err(answer) => return answer,
        }
    }
    if path == "/version" {
        return if req.method() == Method::GET {
            version()
        } else {
            failure(403, "method not allowed for /version")
        };
    }
    let Some(params) = PathParams::parse(&path) else {
        return failure(
            400,
            &format!("the resource proxy does not serve {path:?} (Kubernetes API paths only)"),
        );
    };
    let method = match *req.method() {
        Method::GET => HttpMethod::Get,
        Method::POST => HttpMethod::Post,
        Method::PATCH => HttpMethod::Patch,
        Method::DELETE => HttpMethod::Delete,
        ref m => {
            return failure(
                403,
                &format!(
                    "method {m} is not allowed through the resource proxy (GET, POST, PATCH, DELETE only)"
                ),
            );
        }
    };
    inner.metrics.resource_proxy_request(&agent);
    if params.subresource == "exec" {
        // as the peer: the web terminal has its own path (WebSocket upgrade)
        return super::terminal::serve(inner, &agent, &params, req).await;
    }
    let mut query = std::collections::BTreeMap::new();
    for (k, v) in form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes()) {
        query
            .entry(k.into_owned())
            .or_insert_with(|| v.into_owned());
    }
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        inner.metrics.resource_proxy_error(&agent, "watch");
        return failure(
            405,
            "watch is not supported through the resource proxy; list without watch=true",
        );
    }
    if method == HttpMethod::Patch
        && let Some(ct) = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
    {
        // the peer's agent reads the patch type from this parameter
        let ct = ct.split(';').next().unwrap_or(ct).trim().to_string();
        query.insert("content-type".into(), ct);
    }
    let Some(a) = inner.agent(&agent) else {
        inner
            .metrics
            .resource_proxy_error(&agent, "agent_disconnected");
        return failure(
            502,
            &format!("agent {agent:?} is not connected to the principal"),
        );
    };
    let outbox = a
        .outbox
        .lock()
        .expect("poisoned")
        .as_ref()
        .map(|(_, o)| o.clone());
    let (Some(outbox), true) = (outbox, a.connected.load(Ordering::SeqCst)) else {
        inner
            .metrics
            .resource_proxy_error(&agent, "agent_disconnected");
        return failure(
            502,
            &format!("agent {agent:?} is not connected to the principal"),
        );
    };
    let Some(rp) = inner.cfg.resource_proxy.as_ref() else {
        return failure(500, "resource proxy not configured");
    };
    if params.subresource == "log" {
        return super::logs::serve(inner, &agent, &params, &query, method, outbox, rp.timeout)
            .await;
    }
    let body = match Limited::new(req.into_body(), rp.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            inner
                .metrics
                .resource_proxy_error(&agent, "request_too_large");
            let msg = if e.is::<http_body_util::LengthLimitError>() {
                format!(
                    "request body exceeds the resource proxy limit of {} bytes",
                    rp.max_body
                )
            } else {
                format!("could not read the request body: {e}")
            };
            return failure(413, &msg);
        }
    };
    let rreq = ResourceRequest {
        uuid: uuid::Uuid::new_v4().to_string(),
        namespace: params.namespace,
        name: params.name,
        subresource: params.subresource,
        method: method.as_str().to_string(),
        body: body.to_vec(),
        params: query,
        group: params.group,
        version: params.version,
        resource: params.resource,
    };
    let ev = rreq.to_event(SOURCE, method);
    if body.len() > inner.cfg.max_event_size / 2 {
        use prost::Message;
        let n = ev.to_wire().encoded_len();
        if n > inner.cfg.max_event_size {
            inner
                .metrics
                .resource_proxy_error(&agent, "request_too_large");
            return failure(
                413,
                &format!(
                    "the request becomes an event of {n} bytes, over the principal's limit of {} bytes",
                    inner.cfg.max_event_size
                ),
            );
        }
    }
    let (rx, _registration) = inner.relays.requests.register(&rreq.uuid, &agent);
    tracing::debug!(agent, uuid = %rreq.uuid, method = method.as_str(), path, "proxying resource request");
    outbox.send(ev).await;
    let resp = match tokio::time::timeout(rp.timeout, rx).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => {
            inner
                .metrics
                .resource_proxy_error(&agent, "agent_disconnected");
            return failure(
                502,
                &format!("agent {agent:?} disconnected before answering"),
            );
        }
        Err(_) => {
            inner.metrics.resource_proxy_error(&agent, "timeout");
            return failure(
                504,
                &format!("agent {agent:?} did not answer within {:?}", rp.timeout),
            );
        }
    };
    answer(inner, &agent, &path, resp)
}

impl Inner {
    /// A `resource` event from `a`: the response to one of our requests wakes its HTTP request.
    pub(super) fn resource_response(
        &self,
        a: &super::AgentState,
        ev: &argocd_pull_agent_core::event::Event,
    ) -> Result<(), argocd_pull_agent_core::session::HandleError> {
        use argocd_pull_agent_core::session::HandleError;
        if ev.ty != argocd_pull_agent_core::event::EventType::Response {
            return Err(HandleError::Permanent(format!(
                "resource requests to a principal are not supported ({} from agent {:?}); a principal only sends them",
                ev.ty.short(),
                a.name
            )));
        }
        let resp = ResourceResponse::from_json(&ev.data).map_err(HandleError::Permanent)?;
        // as the peer: the request UUID is the response's `eventid`
        match self.relays.requests.complete(&a.name, &ev.event_id, resp) {
            Ok(()) => Ok(()),
            Err(Unmatched::NotTracked) => {
                tracing::debug!(agent = %a.name, uuid = %ev.event_id, "resource response for no waiting request (late or unknown); dropped");
                Ok(())
            }
            Err(Unmatched::WrongAgent(owner)) => {
                tracing::warn!(agent = %a.name, owner, uuid = %ev.event_id, "resource response from the wrong agent; dropped");
                Err(HandleError::Permanent(format!(
                    "resource response {} does not answer a request to agent {:?}",
                    ev.event_id, a.name
                )))
            }
        }
    }
}

fn answer(inner: &Inner, agent: &str, path: &str, resp: ResourceResponse) -> Resp {
    if resp.status != 200 {
        inner.metrics.resource_proxy_error(agent, "agent_error");
        if resp.resource.is_empty() {
            // a peer agent sends the status only
            return failure(
                resp.status,
                &format!("the agent answered HTTP {} without details", resp.status),
            );
        }
        return respond(resp.status, resp.resource);
    }
    match path {
        "/api" | "/apis" => match serde_json::from_str::<Value>(&resp.resource) {
            Ok(v) => respond(200, reshape_discovery(path, v).to_string()),
            Err(_) => respond(200, resp.resource),
        },
        _ => respond(200, resp.resource),
    }
}

/// The agent answers `/api` and `/apis` alike with client-go's `ServerGroups()` (core group
/// first): `/api` gets the core `APIVersions`, `/apis` the named groups only.
fn reshape_discovery(path: &str, v: Value) -> Value {
    let groups = v["groups"].as_array().cloned().unwrap_or_default();
    if path == "/api" {
        let versions: Vec<Value> = groups
            .iter()
            .filter(|g| g["name"] == "")
            .flat_map(|g| g["versions"].as_array().cloned().unwrap_or_default())
            .filter_map(|v| v["version"].as_str().map(|s| json!(s)))
            .collect();
        json!({"kind": "APIVersions", "versions": versions,
               "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
    } else {
        let named: Vec<Value> = groups.into_iter().filter(|g| g["name"] != "").collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": named})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_is_split_into_api_and_apis() {
        let v = json!({"kind": "APIGroupList", "groups": [
            {"name": "", "versions": [{"groupVersion": "v1", "version": "v1"}]},
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}]}]});
        let api = reshape_discovery("/api", v.clone());
        assert_eq!(api["versions"], json!(["v1"]));
        assert_eq!(api["kind"], "APIVersions");
        let apis = reshape_discovery("/apis", v);
        assert_eq!(apis["groups"].as_array().unwrap().len(), 1);
        assert_eq!(apis["groups"][0]["name"], "apps");
    }
}
