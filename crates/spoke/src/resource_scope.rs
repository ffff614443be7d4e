//! The peer's "managed resources only" rule for resource requests (agent/resource.go
//! `getManagedResource`, `isResourceManaged`, `getAvailableResources`), on when the agent runs with
//! `--resource-proxy-managed-only`: a named resource is served, patched or deleted only when it
//! carries Argo CD's tracking label or annotation, or one of its owners (up to 5 levels) does;
//! lists are limited to `events`. Off by default: the agent's RBAC is then the only limit.

use serde_json::Value;

use argocd_pull_agent_core::resource::{ResourceRequest, status_body};

/// Argo CD's default tracking label (`application.instanceLabelKey`).
pub const TRACKING_LABEL: &str = "app.kubernetes.io/instance";
/// Argo CD's tracking annotation (annotation-based tracking).
pub const TRACKING_ANNOTATION: &str = "argocd.argoproj.io/tracking-id";
/// The peer's `ownerLookupRecursionLimit`.
const OWNER_DEPTH: usize = 5;

type Refusal = (u16, String);

fn forbidden(req: &ResourceRequest, why: &str) -> Refusal {
    let gr = if req.group.is_empty() {
        req.resource.clone()
    } else {
        format!("{}.{}", req.resource, req.group)
    };
    let msg = format!("{gr} {:?} is forbidden: {why}", req.name);
    (403, status_body(403, "Forbidden", &msg))
}

async fn get_json(client: &kube::Client, uri: &str) -> Result<(u16, Value), String> {
    let req = http::Request::builder()
        .uri(uri)
        .header(http::header::ACCEPT, "application/json")
        .body(kube::client::Body::from(Vec::new()))
        .map_err(|e| e.to_string())?;
    let resp = client.send(req).await.map_err(|e| e.to_string())?;
    let st = resp.status().as_u16();
    use http_body_util::BodyExt;
    let b = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok((st, serde_json::from_slice(&b).unwrap_or(Value::Null)))
}

/// Whether the object carries Argo CD's tracking label or annotation (any value, as the peer).
pub fn tracked(obj: &Value) -> bool {
    let m = &obj["metadata"];
    m["labels"].get(TRACKING_LABEL).is_some() || m["annotations"].get(TRACKING_ANNOTATION).is_some()
}

/// The API path of an owner reference's object, found through discovery of its group version.
async fn owner_path(client: &kube::Client, owner: &Value, namespace: &str) -> Option<String> {
    let api_version = owner["apiVersion"].as_str()?;
    let kind = owner["kind"].as_str()?;
    let name = owner["name"].as_str()?;
    let base = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    let (st, list) = get_json(client, &base).await.ok()?;
    if st != 200 {
        return None;
    }
    let r = list["resources"]
        .as_array()?
        .iter()
        .find(|r| r["kind"] == kind && !r["name"].as_str().unwrap_or("/").contains('/'))?;
    let plural = r["name"].as_str()?;
    if r["namespaced"] == true && !namespace.is_empty() {
        Some(format!("{base}/namespaces/{namespace}/{plural}/{name}"))
    } else {
        Some(format!("{base}/{plural}/{name}"))
    }
}

/// Whether `obj` or one of its owners is tracked by Argo CD.
async fn managed(client: &kube::Client, obj: Value) -> bool {
    let mut level = vec![obj];
    for _ in 0..OWNER_DEPTH {
        let mut next = Vec::new();
        for o in &level {
            if tracked(o) {
                return true;
            }
            let ns = o["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            for r in o["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(p) = owner_path(client, r, &ns).await
                    && let Ok((200, owner)) = get_json(client, &p).await
                {
                    next.push(owner);
                }
            }
        }
        if next.is_empty() {
            return false;
        }
        level = next;
    }
    false
}

/// `Ok` when the request may go to the API server under the rule; else the answer to send.
pub async fn check(client: &kube::Client, req: &ResourceRequest) -> Result<(), Refusal> {
    if req.resource.is_empty() {
        return Ok(()); // discovery
    }
    if req.name.is_empty() {
        // lists (GET) are limited as the peer's getAvailableResources; creating (POST) is not
        return match (req.method.as_str(), req.resource.as_str()) {
            ("GET", "events" | "apiresources" | "apigroups") | ("POST", _) => Ok(()),
            _ => Err((
                403,
                status_body(
                    403,
                    "Forbidden",
                    &format!(
                        "not authorized to list resources: {} (this agent serves only resources managed by Argo CD: --resource-proxy-managed-only)",
                        req.resource
                    ),
                ),
            )),
        };
    }
    let mut object = req.clone();
    object.subresource.clear();
    let (st, obj) = get_json(client, &object.api_path())
        .await
        .map_err(|e| (502, status_body(502, "InternalError", &e)))?;
    if st != 200 {
        return Err((st, obj.to_string()));
    }
    if managed(client, obj).await {
        Ok(())
    } else {
        Err(forbidden(req, "resource not managed by app"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tracking_label_or_annotation_of_any_value() {
        assert!(tracked(
            &json!({"metadata": {"labels": {"app.kubernetes.io/instance": ""}}})
        ));
        assert!(tracked(
            &json!({"metadata": {"annotations": {"argocd.argoproj.io/tracking-id": "a:apps/Deployment:ns/web"}}})
        ));
        assert!(!tracked(&json!({"metadata": {"labels": {"app": "web"}}})));
    }
}
