//! Resource requests from the principal (the peer's agent/resource.go): the agent performs them
//! against its own API server with its own credentials and answers with a resource response.
//!
//! Differences from the peer, all additive on the wire: the request goes to the API server as
//! one raw HTTP call (so list selectors, paging, subresources and every error keep the server's
//! own semantics and its `Status` body travels back in `resource`); listing is limited by the
//! agent's RBAC, not by the peer's "managed resources only" rule (see docs/compatibility.md).

use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use serde_json::{Value, json};

use argocd_pull_agent_core::event::{Event, gojson};
use argocd_pull_agent_core::resource::{ResourceRequest, ResourceResponse, reason_of, status_body};
use argocd_pull_agent_core::session::{HandleError, Outbox};

use super::Inner;

/// How long the agent waits for its API server (the principal gives up at 30 s).
pub const API_TIMEOUT: Duration = Duration::from_secs(25);
/// Resource requests performed at once (more wait for a slot).
pub const CONCURRENT_REQUESTS: usize = 32;

/// The Kubernetes client the resource proxy uses (a newtype so the config stays `Debug`).
#[derive(Clone)]
pub struct ResourceProxyClient(pub kube::Client);

impl std::fmt::Debug for ResourceProxyClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResourceProxyClient")
    }
}

impl Inner {
    /// Handles one `resource` request event: always answers (errors as a status), never retried.
    pub(super) async fn handle_resource_request(
        self: &Arc<Self>,
        ev: &Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let m = &self.metrics.peer;
        m.agent_resource_proxy_requests.inc();
        let req = match ResourceRequest::from_json(&ev.data) {
            Ok(r) => r,
            Err(e) => {
                m.agent_resource_proxy_errors.inc();
                // without a parsable request there is no UUID to answer: an error reply
                return Err(HandleError::Permanent(e));
            }
        };
        // the API call runs beside the stream's event handlers: a slow API server never holds
        // up the agent's other events (the request is ACKed now, answered when done)
        let me = self.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let _permit = me.resource_requests.clone().acquire_owned().await;
            let resp = match (&me.cfg.resource_proxy, me.cfg.enable_resource_proxy) {
                (Some(client), true) => {
                    perform(
                        &client.0,
                        &req,
                        me.cfg.max_event_size,
                        me.cfg.resource_proxy_managed_only,
                    )
                    .await
                }
                _ => fail(
                    403,
                    "the resource proxy is disabled on this agent (--enable-resource-proxy=false or no Kubernetes client)",
                ),
            };
            if !(200..300).contains(&resp.0) {
                me.metrics.peer.agent_resource_proxy_errors.inc();
            }
            tracing::debug!(uuid = %req.uuid, method = %req.method, path = %req.api_path(), status = resp.0, "resource request answered");
            let answer = ResourceResponse {
                uuid: req.uuid,
                status: resp.0,
                resource: resp.1,
            };
            out.send(answer.to_event(&me.source())).await;
        });
        Ok(())
    }
}

fn fail(code: u16, message: &str) -> (u16, String) {
    (code, status_body(code, reason_of(code), message))
}

/// Performs the request; returns (status, body). Success is reported as 200 whatever 2xx the
/// server answered (a peer principal only forwards a body with 200).
pub async fn perform(
    client: &kube::Client,
    req: &ResourceRequest,
    limit: usize,
    managed_only: bool,
) -> (u16, String) {
    let method = match req.method.as_str() {
        "GET" => http::Method::GET,
        "POST" => http::Method::POST,
        "PATCH" => http::Method::PATCH,
        "DELETE" => http::Method::DELETE,
        other => {
            return fail(
                405,
                &format!(
                    "invalid HTTP method {other:?} for a resource request (GET, POST, PATCH, DELETE)"
                ),
            );
        }
    };
    let r = tokio::time::timeout(API_TIMEOUT, async {
        if managed_only && let Err((st, body)) = super::resource_scope::check(client, req).await {
            return Ok((st, bytes::Bytes::from(body)));
        }
        if method == http::Method::GET && req.is_root_discovery() {
            discovery(client).await
        } else {
            call(client, method, req).await
        }
    })
    .await;
    let (status, body) = match r {
        Ok(Ok(x)) => x,
        Ok(Err(e)) => {
            return fail(
                502,
                &format!("the agent's API server could not be reached: {e}"),
            );
        }
        Err(_) => {
            return fail(
                504,
                &format!("the agent's API server did not answer within {API_TIMEOUT:?}"),
            );
        }
    };
    if !(200..300).contains(&status) {
        let text = String::from_utf8_lossy(&body).into_owned();
        return (status, text);
    }
    // as the peer (json.Marshal of an Unstructured): keys sorted, Go escaping; list items get
    // their apiVersion/kind as client-go's unstructured list decoding sets them
    let text = match serde_json::from_slice::<Value>(&body) {
        Ok(mut v) => {
            fill_list_item_kinds(&mut v);
            String::from_utf8(gojson::to_vec_sorted(&v)).unwrap_or_default()
        }
        Err(_) => String::from_utf8_lossy(&body).into_owned(),
    };
    // the answer travels as a JSON string inside an event: quotes are escaped on the way
    let estimate = text.len() + text.bytes().filter(|b| *b == b'"').count() + 512;
    if estimate > limit {
        return fail(
            500,
            &format!(
                "the response of about {estimate} bytes exceeds the agent's event size limit of {limit} bytes; \
                 page the list (?limit=N) or raise --grpc-max-message-size on the agent and the principal"
            ),
        );
    }
    (200, text)
}

async fn send(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> Result<(u16, bytes::Bytes), String> {
    let mut b = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::ACCEPT, "application/json");
    if let Some(ct) = content_type {
        b = b.header(http::header::CONTENT_TYPE, ct);
    }
    let request = b
        .body(kube::client::Body::from(body))
        .map_err(|e| e.to_string())?;
    let resp = client.send(request).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((status, body))
}

/// Query parameters passed to the API server (list, get, write and delete options).
const QUERY_OPTIONS: [&str; 19] = [
    "labelSelector",
    "fieldSelector",
    "resourceVersion",
    "resourceVersionMatch",
    "limit",
    "continue",
    "timeout",
    "timeoutSeconds",
    "pretty",
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "force",
    "gracePeriodSeconds",
    "propagationPolicy",
    "orphanDependents",
    "allowWatchBookmarks",
    "sendInitialEvents",
    "export",
];

/// Patch content types passed through from the caller's `Content-Type`.
const PATCH_TYPES: [&str; 4] = [
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

async fn call(
    client: &kube::Client,
    method: http::Method,
    req: &ResourceRequest,
) -> Result<(u16, bytes::Bytes), String> {
    let query = {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &req.params {
            // only the API server's own request options go through (a watch would never end
            // inside one response; `content-type` is the patch type; `agentName` and the like
            // belong to the principal's URL, not to this API server)
            if QUERY_OPTIONS.contains(&k.as_str()) {
                q.append_pair(k, v);
            } else {
                tracing::debug!(param = %k, "query parameter not passed to the API server");
            }
        }
        q.finish()
    };
    let mut uri = req.api_path();
    if !query.is_empty() {
        uri.push('?');
        uri.push_str(&query);
    }
    let content_type = match method {
        http::Method::PATCH => Some(
            req.params
                .get("content-type")
                .map(String::as_str)
                .filter(|ct| PATCH_TYPES.contains(ct))
                // the peer's default
                .unwrap_or("application/merge-patch+json"),
        ),
        http::Method::POST => Some("application/json"),
        http::Method::DELETE if !req.body.is_empty() => Some("application/json"),
        _ => None,
    };
    send(client, method, &uri, content_type, req.body.clone()).await
}

/// The empty-GVR request (`/api` and `/apis` alike): as client-go's `ServerGroups()`, an
/// `APIGroupList` whose first group is the legacy core group.
async fn discovery(client: &kube::Client) -> Result<(u16, bytes::Bytes), String> {
    let (st, core) = send(client, http::Method::GET, "/api", None, vec![]).await?;
    if !(200..300).contains(&st) {
        return Ok((st, core));
    }
    let core: Value = serde_json::from_slice(&core).map_err(|e| format!("/api: {e}"))?;
    let versions: Vec<Value> = core["versions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|v| v.as_str().map(|v| json!({"groupVersion": v, "version": v})))
        .collect();
    let mut groups = Vec::new();
    if let Some(first) = versions.first() {
        groups.push(json!({"name": "", "versions": versions.clone(), "preferredVersion": first}));
    }
    let (st, apis) = send(client, http::Method::GET, "/apis", None, vec![]).await?;
    if (200..300).contains(&st) {
        let apis: Value = serde_json::from_slice(&apis).map_err(|e| format!("/apis: {e}"))?;
        groups.extend(apis["groups"].as_array().cloned().unwrap_or_default());
    }
    let list = json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups});
    Ok((200, serde_json::to_vec(&list).unwrap_or_default().into()))
}

/// `FooList` items without `apiVersion`/`kind` get the list's (`Foo`), as client-go does.
fn fill_list_item_kinds(v: &mut Value) {
    let Some(kind) = v["kind"].as_str().and_then(|k| k.strip_suffix("List")) else {
        return;
    };
    let kind = kind.to_string();
    let api_version = v["apiVersion"].clone();
    if let Some(items) = v.get_mut("items").and_then(Value::as_array_mut) {
        for it in items.iter_mut().filter_map(Value::as_object_mut) {
            if !it.contains_key("kind") {
                it.insert("kind".into(), json!(kind));
            }
            if !it.contains_key("apiVersion") {
                it.insert("apiVersion".into(), api_version.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_items_get_the_list_kind() {
        let mut v = json!({"kind": "ConfigMapList", "apiVersion": "v1", "items": [{"metadata": {"name": "a"}}, {"kind": "X", "metadata": {}}]});
        fill_list_item_kinds(&mut v);
        assert_eq!(v["items"][0]["kind"], "ConfigMap");
        assert_eq!(v["items"][0]["apiVersion"], "v1");
        assert_eq!(v["items"][1]["kind"], "X");
    }
}
