//! Replicas of the peer's event constructors (argocd-agent `acb60cd` internal/event/event.go)
//! and of what its event writer adds on the wire (`sentat`, `principaluid`).

use base64::Engine;
use serde_json::{Value, json};

use crate::sdk::{self, APPLICATION_JSON, Event};

pub const PREFIX: &str = "io.argoproj.argocd-agent.event";
/// The peer agent's event source (agent/agent.go, hard-coded).
pub const AGENT_SOURCE: &str = "agent://agent-managed";
/// The peer principal's event source (`serverName`, never set: empty).
pub const PRINCIPAL_SOURCE: &str = "";

/// `io.argoproj.argocd-agent.event.<x>`
pub fn ty(x: &str) -> String {
    format!("{PREFIX}.{x}")
}

/// The targets (`dataschema`) the peer knows (`event.Target`); anything else is "unknown".
pub const TARGETS: [&str; 13] = [
    "application",
    "appproject",
    "repository",
    "gpgkey",
    "resource",
    "eventProcessed",
    "resourceResync",
    "redis",
    "clusterCacheInfoUpdate",
    "containerlog",
    "heartbeat",
    "terminal",
    "applicationset",
];

/// `event.Target(raw)`: the target the peer reads, `None` where it logs "unknown event target".
pub fn target(e: &Event) -> Option<&str> {
    TARGETS.iter().find(|t| **t == e.dataschema).copied()
}

fn b64(b: Option<&[u8]>) -> Value {
    match b {
        Some(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        None => Value::Null,
    }
}

/// `EventSource`.
#[derive(Clone, Debug)]
pub struct Emitter {
    pub source: String,
}

impl Emitter {
    pub fn new(source: &str) -> Emitter {
        Emitter {
            source: source.into(),
        }
    }

    fn base(&self, typ: &str) -> Event {
        Event {
            source: self.source.clone(),
            spec_version: "1.0".into(),
            typ: typ.into(),
            ..Default::default()
        }
    }

    fn with_json(mut e: Event, data: &Value) -> Event {
        e.datacontenttype = APPLICATION_JSON.into();
        e.data = sdk::go_json(data);
        e
    }

    /// `ApplicationEvent` / `AppProjectEvent` / `ApplicationSetEvent` / `RepositoryEvent` /
    /// `GPGKeyEvent`: ids from the object's metadata, subject `ns/name`, the object as JSON.
    pub fn object_event(&self, typ: &str, target: &str, obj: &Value) -> Event {
        self.object_event_bytes(typ, target, obj, sdk::go_json(obj))
    }

    /// Like [`Emitter::object_event`] with the payload bytes given (e.g. malformed JSON).
    pub fn object_event_bytes(&self, typ: &str, target: &str, obj: &Value, data: Vec<u8>) -> Event {
        let m = &obj["metadata"];
        let s = |k: &str| m[k].as_str().unwrap_or("").to_string();
        let mut e = self.base(typ);
        e.set_ext(
            "eventid",
            format!("{}_{}_{}", s("name"), s("uid"), s("resourceVersion")),
        );
        e.set_ext("resourceid", format!("{}_{}", s("name"), s("uid")));
        e.dataschema = target.into();
        e.subject = format!("{}/{}", s("namespace"), s("name"));
        e.datacontenttype = APPLICATION_JSON.into();
        e.data = data;
        e
    }

    /// `ProcessedEvent`: copies every extension of the acknowledged event.
    pub fn processed(&self, acked: &Event) -> Event {
        let mut e = self.base(&ty("processed"));
        e.extensions = acked.extensions.clone();
        e.dataschema = "eventProcessed".into();
        e
    }

    /// `HeartbeatEvent(event.Ping | event.Pong)`.
    pub fn heartbeat(&self, kind: &str, uuid: &str) -> Event {
        let mut e = self.base(&ty(kind));
        e.set_ext("eventid", uuid);
        e.set_ext("resourceid", uuid);
        e.dataschema = "heartbeat".into();
        e
    }

    fn resync(&self, kind: &str, uuid: &str, data: &Value) -> Event {
        let mut e = self.base(&ty(kind));
        e.dataschema = "resourceResync".into();
        e.set_ext("resourceid", uuid);
        e.set_ext("eventid", uuid);
        Self::with_json(e, data)
    }

    /// `RequestUpdateEvent(NewRequestUpdate(name, namespace, kind, uid, checksum))`.
    pub fn request_update(
        &self,
        uuid: &str,
        name: &str,
        namespace: &str,
        uid: &str,
        kind: &str,
        checksum: Option<&[u8]>,
    ) -> Event {
        let mut d = serde_json::Map::new();
        d.insert("name".into(), json!(name));
        if !namespace.is_empty() {
            d.insert("namespace".into(), json!(namespace));
        }
        d.insert("uid".into(), json!(uid));
        d.insert("kind".into(), json!(kind));
        d.insert("checksum".into(), b64(checksum));
        self.resync("request-update", uuid, &Value::Object(d))
    }

    /// `RequestSyncedResourceListEvent(checksum)`.
    pub fn request_synced_resource_list(&self, uuid: &str, checksum: Option<&[u8]>) -> Event {
        self.resync(
            "request-synced-resource-list",
            uuid,
            &json!({"checksum": b64(checksum)}),
        )
    }

    /// `SyncedResourceEvent(key)`.
    pub fn synced_resource(
        &self,
        uuid: &str,
        name: &str,
        namespace: &str,
        uid: &str,
        kind: &str,
    ) -> Event {
        let mut d = serde_json::Map::new();
        d.insert("name".into(), json!(name));
        if !namespace.is_empty() {
            d.insert("namespace".into(), json!(namespace));
        }
        d.insert("uid".into(), json!(uid));
        d.insert("kind".into(), json!(kind));
        self.resync("response-synced-resource", uuid, &Value::Object(d))
    }

    /// `RequestResourceResyncEvent()`.
    pub fn request_resource_resync(&self, uuid: &str) -> Event {
        self.resync("request-resource-resync", uuid, &json!({}))
    }

    /// `ErrorEvent(target, &ErrorData{...})`.
    pub fn error(&self, uuid: &str, target: &str, name: &str, namespace: &str, msg: &str) -> Event {
        let mut e = self.base(&ty("error"));
        e.set_ext("eventid", uuid);
        e.set_ext("resourceid", uuid);
        e.dataschema = target.into();
        Self::with_json(
            e,
            &json!({"resourceName": name, "resourceNamespace": namespace, "message": msg}),
        )
    }

    /// `NewResourceRequestEvent(gvr, namespace, name, subresource, method, body, params)`: type =
    /// the raw HTTP method, dataschema `resource`, `resourceid` = `eventid` = the request UUID;
    /// the payload is `ResourceRequest` (struct field order, `omitempty`, `body` base64, params a
    /// sorted map, the embedded `GroupVersionResource` last).
    #[allow(clippy::too_many_arguments)]
    pub fn resource_request(
        &self,
        uuid: &str,
        gvr: (&str, &str, &str),
        namespace: &str,
        name: &str,
        subresource: &str,
        method: &str,
        body: &[u8],
        params: &[(&str, &str)],
    ) -> Event {
        let mut e = self.base(method);
        e.set_ext("resourceid", uuid);
        e.set_ext("eventid", uuid);
        e.dataschema = "resource".into();
        let mut m = serde_json::Map::new();
        m.insert("uuid".into(), json!(uuid));
        if !namespace.is_empty() {
            m.insert("namespace".into(), json!(namespace));
        }
        m.insert("name".into(), json!(name));
        if !subresource.is_empty() {
            m.insert("subresource".into(), json!(subresource));
        }
        if !method.is_empty() {
            m.insert("method".into(), json!(method));
        }
        if !body.is_empty() {
            m.insert("body".into(), b64(Some(body)));
        }
        if !params.is_empty() {
            let mut p: Vec<_> = params.to_vec();
            p.sort();
            let p: serde_json::Map<String, Value> = p
                .into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            m.insert("params".into(), Value::Object(p));
        }
        m.insert("group".into(), json!(gvr.0));
        m.insert("version".into(), json!(gvr.1));
        m.insert("resource".into(), json!(gvr.2));
        Self::with_json(e, &Value::Object(m))
    }

    /// `NewResourceResponseEvent(reqUUID, status, data)`: type `response`, dataschema `resource`,
    /// a fresh `resourceid`, `eventid` = the request UUID.
    pub fn resource_response(&self, req_uuid: &str, status: u16, data: &str) -> Event {
        let mut e = self.base(&ty("response"));
        e.set_ext("resourceid", new_uuid());
        e.set_ext("eventid", req_uuid);
        e.dataschema = "resource".into();
        let mut m = serde_json::Map::new();
        m.insert("uuid".into(), json!(req_uuid));
        m.insert("status".into(), json!(status));
        if !data.is_empty() {
            m.insert("resource".into(), json!(data));
        }
        Self::with_json(e, &Value::Object(m))
    }

    /// `NewRedisRequestEvent(connectionUUID, body)`: type `redis-request`, dataschema `redis`,
    /// `resourceid` = `eventid` = the request UUID; payload `RedisRequest{uuid, connectionUuid,
    /// body}` with `body` one of `{"get":{"key"}}`, `{"subscribe":{"channel"}}`, `{"ping":{}}`.
    pub fn redis_request(&self, uuid: &str, connection_uuid: &str, body: Value) -> Event {
        let mut e = self.base(&ty("redis-request"));
        e.set_ext("resourceid", uuid);
        e.set_ext("eventid", uuid);
        e.dataschema = "redis".into();
        let d = json!({"uuid": uuid, "connectionUuid": connection_uuid, "body": body});
        Self::with_json(e, &d)
    }

    /// `NewRedisResponseEvent(reqUUID, connectionUUID, body)`: type `redis-response`, dataschema
    /// `redis`, a fresh `resourceid`, `eventid` = the request UUID.
    pub fn redis_response(&self, req_uuid: &str, connection_uuid: &str, body: Value) -> Event {
        let mut e = self.base(&ty("redis-response"));
        e.set_ext("resourceid", new_uuid());
        e.set_ext("eventid", req_uuid);
        e.dataschema = "redis".into();
        let d = json!({"uuid": req_uuid, "connectionUuid": connection_uuid, "body": body});
        Self::with_json(e, &d)
    }

    /// `RedisResponseBody{Get: &RedisResponseBodyGet{Bytes, CacheHit, Error}}` (`bytes` base64,
    /// `null` when nil).
    pub fn redis_get_body(bytes: Option<&[u8]>, cache_hit: bool, error: &str) -> Value {
        json!({"get": {"bytes": b64(bytes), "cacheHit": cache_hit, "error": error}})
    }

    /// `ClusterCacheInfoUpdateEvent`.
    pub fn cluster_cache_info_update(&self, uuid: &str, apps: i64, apis: i64, res: i64) -> Event {
        let mut e = self.base(&ty("cluster-cache-info-update"));
        e.set_ext("eventid", uuid);
        e.set_ext("resourceid", uuid);
        e.dataschema = "clusterCacheInfoUpdate".into();
        Self::with_json(
            e,
            &json!({"applicationsCount": apps, "apisCount": apis, "resourcesCount": res}),
        )
    }
}

/// The event writer's `SetSentAt` (every event that is not an ACK or a heartbeat).
pub fn sent(mut e: Event, at: &str) -> Event {
    e.set_ext("sentat", at);
    e
}

/// The principal's `stampEvent` (`SetPrincipalUID`).
pub fn stamped(mut e: Event, principal_uid: &str) -> Event {
    e.set_ext("principaluid", principal_uid);
    e
}

/// `resources.Checksum()`: SHA-256 over the sorted `Kind/Name/UID` strings joined with nothing;
/// `None` (JSON null) for an empty set.
pub fn set_checksum(items: &[(&str, &str, &str)]) -> Option<Vec<u8>> {
    use sha2::Digest;
    if items.is_empty() {
        return None;
    }
    let mut v: Vec<String> = items
        .iter()
        .map(|(k, n, u)| format!("{k}/{n}/{u}"))
        .collect();
    v.sort();
    Some(sha2::Sha256::digest(v.join("").as_bytes()).to_vec())
}

/// `resync.generateSpecChecksum`: SHA-256 of `json.Marshal(spec without destination)` (Go map:
/// sorted keys, HTML escaping); `.data` for Secrets and ConfigMaps.
pub fn spec_checksum(obj: &Value) -> Vec<u8> {
    use sha2::Digest;
    let kind = obj["kind"].as_str().unwrap_or("");
    let mut spec = if kind == "Secret" || kind == "ConfigMap" {
        obj.get("data").cloned().unwrap_or_else(|| json!({}))
    } else {
        obj["spec"].clone()
    };
    if let Some(m) = spec.as_object_mut() {
        m.remove("destination");
    }
    sha2::Sha256::digest(sdk::go_json_sorted(&spec)).to_vec()
}

/// A fresh UUID as `uuid.NewString()` makes it.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}
