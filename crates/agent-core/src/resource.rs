//! Resource-proxy wire types, shared by the principal (HTTPS front) and the agent (which performs
//! the request against its own API server): the peer's `ResourceRequest` / `ResourceResponse`
//! payloads (internal/event/event.go), the events carrying them and the request-path grammar of
//! principal/resource.go.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use base64::Engine;
use regex::Regex;
use serde_json::{Map, Value, json};

use crate::event::{Event, EventType, HttpMethod, Target};

/// The peer's `resourceRequestRegexp` (principal/resource.go), verbatim: `/api`, `/apis`, group
/// versions, resources (optionally namespaced), named resources and one subresource.
pub const RESOURCE_REQUEST_REGEXP: &str = r"^/(?:api|apis|(?:api|apis/(?P<group>[^\/]+))/(?P<version>v[^\/]+)(?:/(?:namespaces/(?P<namespace>[^\/]+)/)?)?(?:(?P<resource>[^\/]+)(?:/(?P<name>[^\/]+)(?:/(?P<subresource>[^\/]+))?)?)?)$";

fn path_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(RESOURCE_REQUEST_REGEXP).expect("the peer's regexp compiles"))
}

/// What a request path addresses (empty strings where the path has no such part).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathParams {
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub resource: String,
    pub name: String,
    pub subresource: String,
}

impl PathParams {
    /// Parses a URL path with the peer's regexp; `None` when it does not match.
    pub fn parse(path: &str) -> Option<PathParams> {
        let c = path_regex().captures(path)?;
        let g = |n: &str| {
            c.name(n)
                .map(|m| m.as_str().to_string())
                .unwrap_or_default()
        };
        Some(PathParams {
            group: g("group"),
            version: g("version"),
            namespace: g("namespace"),
            resource: g("resource"),
            name: g("name"),
            subresource: g("subresource"),
        })
    }
}

/// The peer's `event.ResourceRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceRequest {
    pub uuid: String,
    pub namespace: String,
    pub name: String,
    pub subresource: String,
    pub method: String,
    pub body: Vec<u8>,
    /// First value of every query parameter (the peer keeps `v[0]`).
    pub params: BTreeMap<String, String>,
    pub group: String,
    pub version: String,
    pub resource: String,
}

impl ResourceRequest {
    /// The JSON payload as Go's `encoding/json` writes the peer's struct: field order of the
    /// struct, `omitempty` fields left out when empty, `body` base64, the embedded
    /// `GroupVersionResource` fields last.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("uuid".into(), json!(self.uuid));
        if !self.namespace.is_empty() {
            m.insert("namespace".into(), json!(self.namespace));
        }
        m.insert("name".into(), json!(self.name));
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        if !self.method.is_empty() {
            m.insert("method".into(), json!(self.method));
        }
        if !self.body.is_empty() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(&self.body);
            m.insert("body".into(), json!(b64));
        }
        if !self.params.is_empty() {
            // a Go map: keys sorted (BTreeMap order)
            let p: Map<String, Value> = self
                .params
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            m.insert("params".into(), Value::Object(p));
        }
        m.insert("group".into(), json!(self.group));
        m.insert("version".into(), json!(self.version));
        m.insert("resource".into(), json!(self.resource));
        Value::Object(m)
    }

    /// Reads the payload; `Err` names the malformed field.
    pub fn from_json(v: &Value) -> Result<ResourceRequest, String> {
        let obj = v
            .as_object()
            .ok_or("resource request payload is not a JSON object")?;
        let s = |k: &str| -> Result<String, String> {
            match obj.get(k) {
                None | Some(Value::Null) => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("resource request field {k:?} is not a string")),
            }
        };
        let body = match s("body")? {
            b if b.is_empty() => Vec::new(),
            b => base64::engine::general_purpose::STANDARD
                .decode(b.as_bytes())
                .map_err(|e| format!("resource request field \"body\" is not base64: {e}"))?,
        };
        let mut params = BTreeMap::new();
        match obj.get("params") {
            None | Some(Value::Null) => {}
            Some(Value::Object(p)) => {
                for (k, v) in p {
                    let v = v
                        .as_str()
                        .ok_or_else(|| format!("resource request param {k:?} is not a string"))?;
                    params.insert(k.clone(), v.to_string());
                }
            }
            Some(_) => return Err("resource request field \"params\" is not an object".into()),
        }
        let r = ResourceRequest {
            uuid: s("uuid")?,
            namespace: s("namespace")?,
            name: s("name")?,
            subresource: s("subresource")?,
            method: s("method")?,
            body,
            params,
            group: s("group")?,
            version: s("version")?,
            resource: s("resource")?,
        };
        if r.uuid.is_empty() {
            return Err("resource request has no uuid".into());
        }
        for (what, v) in [
            ("namespace", &r.namespace),
            ("name", &r.name),
            ("subresource", &r.subresource),
            ("group", &r.group),
            ("version", &r.version),
            ("resource", &r.resource),
        ] {
            if v.contains('/') || v == ".." || v.contains('?') || v.contains('#') {
                return Err(format!(
                    "resource request {what} {v:?} is not a single path segment"
                ));
            }
        }
        Ok(r)
    }

    /// Whether this is the empty-GVR discovery request (`/api` or `/apis`).
    pub fn is_root_discovery(&self) -> bool {
        self.group.is_empty() && self.version.is_empty() && self.resource.is_empty()
    }

    /// The API server path the request addresses (without query).
    pub fn api_path(&self) -> String {
        let mut p = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if self.resource.is_empty() {
            return p;
        }
        if !self.namespace.is_empty() {
            p.push_str("/namespaces/");
            p.push_str(&self.namespace);
        }
        for part in [&self.resource, &self.name, &self.subresource] {
            if part.is_empty() {
                break;
            }
            p.push('/');
            p.push_str(part);
        }
        p
    }

    /// The event carrying it (the peer's `NewResourceRequestEvent`): type = the raw HTTP method,
    /// dataschema `resource`, `resourceid` = `eventid` = the request UUID.
    pub fn to_event(&self, source: &str, method: HttpMethod) -> Event {
        let mut e = Event::request(
            source,
            EventType::Method(method),
            Target::Resource,
            self.to_json(),
        );
        e.id = String::new();
        e.resource_id = self.uuid.clone();
        e.event_id = self.uuid.clone();
        e
    }
}

/// The peer's `event.ResourceResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceResponse {
    pub uuid: String,
    pub status: u16,
    /// The body (JSON text), empty when none.
    pub resource: String,
}

impl ResourceResponse {
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("uuid".into(), json!(self.uuid));
        m.insert("status".into(), json!(self.status));
        if !self.resource.is_empty() {
            m.insert("resource".into(), json!(self.resource));
        }
        Value::Object(m)
    }

    pub fn from_json(v: &Value) -> Result<ResourceResponse, String> {
        let status = v["status"]
            .as_u64()
            .filter(|s| (100..=599).contains(s))
            .ok_or("resource response has no valid HTTP \"status\"")?;
        Ok(ResourceResponse {
            uuid: v["uuid"].as_str().unwrap_or_default().to_string(),
            status: status as u16,
            resource: v["resource"].as_str().unwrap_or_default().to_string(),
        })
    }

    /// The event carrying it (the peer's `NewResourceResponseEvent`): type `response`, dataschema
    /// `resource`, a fresh `resourceid`, `eventid` = the request UUID.
    pub fn to_event(&self, source: &str) -> Event {
        let mut e = Event::request(
            source,
            EventType::Response,
            Target::Resource,
            self.to_json(),
        );
        e.id = String::new();
        e.event_id = self.uuid.clone();
        e
    }
}

/// A Kubernetes `Status` failure body.
pub fn status_body(code: u16, reason: &str, message: &str) -> String {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
    .to_string()
}

/// The Kubernetes `reason` of an HTTP status code.
pub fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        504 => "Timeout",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

/// A kubeconfig pointing `kubectl` (or any client) at the resource proxy `server`
/// (`https://host:port`) with an agent's client certificate: the proxy maps its CN to the agent.
pub fn kubeconfig_yaml(server: &str, tls: &crate::tls::TlsMaterial, agent: &str) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {agent}\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {agent}\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: {agent}\n  context:\n    cluster: {agent}\n    user: {agent}\n    namespace: default\ncurrent-context: {agent}\n",
        ca = b64(&tls.ca_pem),
        cert = b64(&tls.cert_pem),
        key = b64(&tls.key_pem),
    )
}

/// A kube client talking to the resource proxy as `agent` (see [`kubeconfig_yaml`]). It does
/// not retry 503/504 (kube's default), so a caller sees the proxy's answer as it is.
pub async fn proxy_client(
    server: &str,
    tls: &crate::tls::TlsMaterial,
    agent: &str,
) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig_yaml(server, tls, agent))?;
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    cfg.default_retry = false;
    Ok(kube::Client::try_from(cfg)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_as_the_peer_regexp() {
        let p = |s: &str| PathParams::parse(s).unwrap();
        assert_eq!(p("/api"), PathParams::default());
        assert_eq!(p("/apis"), PathParams::default());
        assert_eq!(p("/api/v1").version, "v1");
        let g = p("/apis/apps/v1/namespaces/ns/deployments/web/scale");
        assert_eq!(
            (
                g.group.as_str(),
                g.version.as_str(),
                g.namespace.as_str(),
                g.resource.as_str(),
                g.name.as_str(),
                g.subresource.as_str()
            ),
            ("apps", "v1", "ns", "deployments", "web", "scale")
        );
        let n = p("/api/v1/namespaces/foo");
        assert_eq!(
            (n.resource.as_str(), n.name.as_str()),
            ("namespaces", "foo")
        );
        assert_eq!(p("/api/v1/namespaces/foo/pods").namespace, "foo");
        assert!(PathParams::parse("/apis/apps").is_none());
        assert!(PathParams::parse("/healthz").is_none());
        assert!(PathParams::parse("/api/v1/a/b/c/d").is_none());
    }

    #[test]
    fn request_json_is_the_peers_field_order_and_round_trips() {
        let mut r = ResourceRequest {
            uuid: "u".into(),
            name: "web".into(),
            method: "PATCH".into(),
            body: b"{\"a\":1}".to_vec(),
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            namespace: "ns".into(),
            ..Default::default()
        };
        r.params.insert("fieldManager".into(), "x".into());
        r.params.insert("dryRun".into(), "All".into());
        let bytes = crate::event::gojson::to_vec(&r.to_json());
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            r#"{"uuid":"u","namespace":"ns","name":"web","method":"PATCH","body":"eyJhIjoxfQ==","params":{"dryRun":"All","fieldManager":"x"},"group":"apps","version":"v1","resource":"deployments"}"#
        );
        assert_eq!(ResourceRequest::from_json(&r.to_json()).unwrap(), r);
        assert_eq!(r.api_path(), "/apis/apps/v1/namespaces/ns/deployments/web");
        let bad = json!({"uuid": "u", "name": "../x", "version": "v1"});
        assert!(ResourceRequest::from_json(&bad).is_err());
    }

    #[test]
    fn api_paths_of_core_and_cluster_scoped_requests() {
        let r = ResourceRequest {
            version: "v1".into(),
            resource: "namespaces".into(),
            name: "kube-system".into(),
            ..Default::default()
        };
        assert_eq!(r.api_path(), "/api/v1/namespaces/kube-system");
        let r = ResourceRequest {
            version: "v1".into(),
            ..Default::default()
        };
        assert_eq!(r.api_path(), "/api/v1");
    }

    #[test]
    fn events_carry_the_uuid_as_event_id() {
        let r = ResourceRequest {
            uuid: "abc".into(),
            version: "v1".into(),
            ..Default::default()
        };
        let e = r.to_event("p", HttpMethod::Get);
        assert_eq!(e.ty.full(), "GET");
        assert_eq!(
            (e.resource_id.as_str(), e.event_id.as_str()),
            ("abc", "abc")
        );
        assert_eq!(e.target, Target::Resource);
        let resp = ResourceResponse {
            uuid: "abc".into(),
            status: 404,
            resource: String::new(),
        };
        let e = resp.to_event("a");
        assert_eq!(e.ty.full(), "io.argoproj.argocd-agent.event.response");
        assert_eq!(e.event_id, "abc");
        assert_ne!(e.resource_id, "abc");
        assert_eq!(
            String::from_utf8(crate::event::gojson::to_vec(&e.data)).unwrap(),
            r#"{"uuid":"abc","status":404}"#
        );
    }
}
