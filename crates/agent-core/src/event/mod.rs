//! Event construction and parsing: the CloudEvents envelope of argocd-agent (I/O free).

pub mod gojson;
pub mod wire;

use std::collections::BTreeMap;

use serde_json::Value;

use crate::proto::eventstreamapi;
pub use wire::{AttrValue, SdkEvent, WireError};

/// `datacontenttype` of every payload (`cloudevents.ApplicationJSON`).
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// Prefix of every event type.
pub const TYPE_PREFIX: &str = "io.argoproj.argocd-agent.event.";
/// CloudEvents spec version.
pub const SPEC_VERSION: &str = "1.0";

/// HTTP method: the CloudEvent `type` of resource and container-log requests (the peer sets the
/// raw method, e.g. `GET`, as the type: internal/event/event.go `NewResourceRequestEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HttpMethod {
    Get,
    Head,
    Post,
    Put,
    Patch,
    Delete,
    Connect,
    Options,
    Trace,
}

impl HttpMethod {
    pub const ALL: [HttpMethod; 9] = [
        Self::Get,
        Self::Head,
        Self::Post,
        Self::Put,
        Self::Patch,
        Self::Delete,
        Self::Connect,
        Self::Options,
        Self::Trace,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Head => "HEAD",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
            Self::Connect => "CONNECT",
            Self::Options => "OPTIONS",
            Self::Trace => "TRACE",
        }
    }
}

/// Event types of the protocol (`io.argoproj.argocd-agent.event.<x>`, the peer's 20), plus the
/// raw HTTP method of resource and log requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Create,
    Delete,
    SpecUpdate,
    StatusUpdate,
    SetOperation,
    TerminateOperation,
    Processed,
    Ping,
    Pong,
    Get,
    Response,
    RedisRequest,
    RedisResponse,
    RequestUpdate,
    RequestSyncedResourceList,
    ResponseSyncedResource,
    RequestResourceResync,
    ClusterCacheInfoUpdate,
    TerminalRequest,
    Error,
    /// A resource or container-log request: the type is the bare HTTP method.
    Method(HttpMethod),
}

impl EventType {
    /// The peer's 20 prefixed types.
    pub const ALL: [EventType; 20] = [
        Self::Create,
        Self::Delete,
        Self::SpecUpdate,
        Self::StatusUpdate,
        Self::SetOperation,
        Self::TerminateOperation,
        Self::Processed,
        Self::Ping,
        Self::Pong,
        Self::Get,
        Self::Response,
        Self::RedisRequest,
        Self::RedisResponse,
        Self::RequestUpdate,
        Self::RequestSyncedResourceList,
        Self::ResponseSyncedResource,
        Self::RequestResourceResync,
        Self::ClusterCacheInfoUpdate,
        Self::TerminalRequest,
        Self::Error,
    ];

    /// The short name (`spec-update`; the method for [`EventType::Method`]).
    pub fn short(self) -> &'static str {
        match self {
            Self::Create => "create",
            Self::Delete => "delete",
            Self::SpecUpdate => "spec-update",
            Self::StatusUpdate => "status-update",
            Self::SetOperation => "set-operation",
            Self::TerminateOperation => "terminate-operation",
            Self::Processed => "processed",
            Self::Ping => "ping",
            Self::Pong => "pong",
            Self::Get => "get",
            Self::Response => "response",
            Self::RedisRequest => "redis-request",
            Self::RedisResponse => "redis-response",
            Self::RequestUpdate => "request-update",
            Self::RequestSyncedResourceList => "request-synced-resource-list",
            Self::ResponseSyncedResource => "response-synced-resource",
            Self::RequestResourceResync => "request-resource-resync",
            Self::ClusterCacheInfoUpdate => "cluster-cache-info-update",
            Self::TerminalRequest => "terminal-request",
            Self::Error => "error",
            Self::Method(m) => m.as_str(),
        }
    }

    /// The full CloudEvents type.
    pub fn full(self) -> String {
        match self {
            Self::Method(m) => m.as_str().to_string(),
            _ => format!("{TYPE_PREFIX}{}", self.short()),
        }
    }

    /// Parses a full CloudEvents type.
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(short) = s.strip_prefix(TYPE_PREFIX) {
            return Self::ALL.into_iter().find(|t| t.short() == short);
        }
        HttpMethod::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .map(Self::Method)
    }

    /// Whether this event changes a resource and is delivered with ACK/resend.
    pub fn is_resource_change(self) -> bool {
        matches!(
            self,
            Self::Create
                | Self::Delete
                | Self::SpecUpdate
                | Self::StatusUpdate
                | Self::SetOperation
                | Self::TerminateOperation
        )
    }
}

/// The `dataschema` attribute: which kind of object an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Application,
    AppProject,
    ApplicationSet,
    Repository,
    GpgKey,
    Resource,
    ResourceResync,
    ClusterCacheInfoUpdate,
    ContainerLog,
    Terminal,
    Heartbeat,
    EventProcessed,
    Redis,
}

impl Target {
    pub const ALL: [Target; 13] = [
        Self::Application,
        Self::AppProject,
        Self::ApplicationSet,
        Self::Repository,
        Self::GpgKey,
        Self::Resource,
        Self::ResourceResync,
        Self::ClusterCacheInfoUpdate,
        Self::ContainerLog,
        Self::Terminal,
        Self::Heartbeat,
        Self::EventProcessed,
        Self::Redis,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Application => "application",
            Self::AppProject => "appproject",
            Self::ApplicationSet => "applicationset",
            Self::Repository => "repository",
            Self::GpgKey => "gpgkey",
            Self::Resource => "resource",
            Self::ResourceResync => "resourceResync",
            Self::ClusterCacheInfoUpdate => "clusterCacheInfoUpdate",
            Self::ContainerLog => "containerlog",
            Self::Terminal => "terminal",
            Self::Heartbeat => "heartbeat",
            Self::EventProcessed => "eventProcessed",
            Self::Redis => "redis",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Events of this target are fire-and-forget: never ACKed, never resent, no `sentat`
    /// (peer: internal/event/event_writer.go `isFireAndForget`).
    pub fn is_fire_and_forget(self) -> bool {
        matches!(self, Self::EventProcessed | Self::Heartbeat)
    }
}

/// Extension and attribute names.
pub mod attr {
    pub const DATACONTENTTYPE: &str = "datacontenttype";
    pub const DATASCHEMA: &str = "dataschema";
    pub const SUBJECT: &str = "subject";
    pub const RESOURCEID: &str = "resourceid";
    pub const EVENTID: &str = "eventid";
    pub const SENTAT: &str = "sentat";
    pub const PRINCIPALUID: &str = "principaluid";
    pub const TRACEPARENT: &str = "traceparent";
    pub const TRACESTATE: &str = "tracestate";
    /// This project's extension on `error` events: the reason (`malformed`, `oversized`, ...).
    pub const ERRORREASON: &str = "errorreason";
}

/// A decoded event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// CloudEvent `id` (the peer leaves it empty).
    pub id: String,
    pub source: String,
    pub ty: EventType,
    pub target: Target,
    /// `namespace/name` of the object (may be empty for request/response events).
    pub subject: String,
    pub resource_id: String,
    pub event_id: String,
    /// RFC 3339 timestamp with nanoseconds when the event was put on the wire.
    pub sent_at: Option<String>,
    /// Every other extension (`principaluid`, `traceparent`, …) with its protobuf kind.
    pub extra_attrs: BTreeMap<String, AttrValue>,
    /// JSON payload (`Null`: no data, no `datacontenttype`, unless `encoded_data` holds it).
    pub data: Value,
    /// The payload already encoded as the wire carries it, in place of `data` (which is then
    /// `Null`): events held in a send queue keep only these bytes (see [`Event::compact`]).
    pub encoded_data: Option<std::sync::Arc<[u8]>>,
}

/// Why an incoming event could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecodeError {
    #[error("event envelope has no cloud event")]
    Empty,
    #[error("unsupported spec version {0:?} (want \"1.0\")")]
    SpecVersion(String),
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("unknown or missing dataschema {0:?}")]
    UnknownTarget(String),
    #[error("payload is not JSON: {0}")]
    Payload(String),
    #[error("{0}")]
    Wire(#[from] WireError),
}

/// The peer's `ErrorData` (payload of an `error` event), plus this project's `reason`.
pub fn error_data(name: &str, namespace: &str, message: &str, reason: &str) -> Value {
    serde_json::json!({
        "resourceName": name,
        "resourceNamespace": namespace,
        "message": message,
        "reason": reason,
    })
}

impl Event {
    /// A new event about an object. `resource_id`/`event_id` derive from the object's metadata.
    pub fn for_object(source: &str, ty: EventType, target: Target, obj: &Value) -> Self {
        Self {
            data: obj.clone(),
            ..Self::for_object_meta(source, ty, target, obj)
        }
    }

    /// As [`Self::for_object`], with the payload given as its wire bytes (`gojson::to_vec` of
    /// `obj`): what a send queue would turn it into, without a copy of the object.
    pub fn for_object_wire(
        source: &str,
        ty: EventType,
        target: Target,
        obj: &Value,
        wire: std::sync::Arc<[u8]>,
    ) -> Self {
        let mut ev = Self::for_object_meta(source, ty, target, obj);
        ev.encoded_data = Some(wire);
        ev
    }

    /// The event of `obj` without its payload.
    fn for_object_meta(source: &str, ty: EventType, target: Target, obj: &Value) -> Self {
        let (ns, name, uid, rv) = meta_of(obj);
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            source: source.to_string(),
            ty,
            target,
            subject: format!("{ns}/{name}"),
            resource_id: resource_id(&name, &uid),
            event_id: format!("{}_{}_{}", name, uid, rv),
            sent_at: None,
            extra_attrs: BTreeMap::new(),
            data: Value::Null,
            encoded_data: None,
        }
    }

    /// A request/response event (no object): resource and event id are a UUID.
    pub fn request(source: &str, ty: EventType, target: Target, data: Value) -> Self {
        let id = uuid::Uuid::new_v4().to_string();
        Self {
            id: id.clone(),
            source: source.to_string(),
            ty,
            target,
            subject: String::new(),
            resource_id: id.clone(),
            event_id: id,
            sent_at: None,
            extra_attrs: BTreeMap::new(),
            data,
            encoded_data: None,
        }
    }

    /// The ACK (`processed`, dataschema `eventProcessed`) for this event: as the peer's
    /// `ProcessedEvent`, it copies every extension of the acknowledged event (ids, `sentat`,
    /// `principaluid`, trace context, …) and carries no subject and no data.
    pub fn ack(&self, source: &str) -> Self {
        Self {
            id: uuid::Uuid::new_v4().to_string(),
            source: source.to_string(),
            ty: EventType::Processed,
            target: Target::EventProcessed,
            subject: String::new(),
            resource_id: self.resource_id.clone(),
            event_id: self.event_id.clone(),
            sent_at: self.sent_at.clone(),
            extra_attrs: self.extra_attrs.clone(),
            data: Value::Null,
            encoded_data: None,
        }
    }

    /// An `error` event answering an event we reject: dataschema `eventProcessed` and the same
    /// `resourceid`/`eventid`, so a peer takes it as the ACK it would send itself after a
    /// non-retryable failure (it stops resending), while this project's sender sees the error.
    /// Payload: the peer's `ErrorData{resourceName, resourceNamespace, message}` plus `reason`.
    pub fn error_reply(
        source: &str,
        resource_id: &str,
        event_id: &str,
        reason: &str,
        message: &str,
    ) -> Self {
        Self::error_reply_for(source, resource_id, event_id, "", reason, message)
    }

    /// [`Event::error_reply`] naming the object (`subject` = `namespace/name`) in the payload.
    pub fn error_reply_for(
        source: &str,
        resource_id: &str,
        event_id: &str,
        subject: &str,
        reason: &str,
        message: &str,
    ) -> Self {
        let (ns, name) = subject.rsplit_once('/').unwrap_or(("", subject));
        let mut e = Self::request(
            source,
            EventType::Error,
            Target::EventProcessed,
            error_data(name, ns, message, reason),
        );
        e.resource_id = resource_id.to_string();
        e.event_id = event_id.to_string();
        e.extra_attrs.insert(
            attr::ERRORREASON.into(),
            AttrValue::String(reason.to_string()),
        );
        e
    }

    /// Name part of the subject.
    pub fn name(&self) -> &str {
        self.subject.rsplit('/').next().unwrap_or("")
    }

    /// Replaces the payload by its wire bytes (a parsed object takes several times the memory of
    /// its JSON): what a send queue holds until the event is ACKed. `data` reads `Null` after.
    pub fn compact(&mut self) {
        if !self.data.is_null() {
            self.encoded_data = Some(gojson::to_vec(&self.data).into());
            self.data = Value::Null;
        }
    }

    /// The SDK-level event (what `format.ToProto` is given).
    pub fn to_sdk(&self) -> SdkEvent {
        self.clone().into_sdk()
    }

    /// The SDK-level event, consuming this one: the strings move, a compact payload's bytes are
    /// shared.
    pub fn into_sdk(self) -> SdkEvent {
        let mut extensions = self.extra_attrs;
        extensions.insert(attr::RESOURCEID.into(), AttrValue::String(self.resource_id));
        extensions.insert(attr::EVENTID.into(), AttrValue::String(self.event_id));
        if let Some(sent) = self.sent_at {
            extensions.insert(attr::SENTAT.into(), AttrValue::String(sent));
        }
        let (datacontenttype, data) = if let Some(b) = self.encoded_data {
            (CONTENT_TYPE_JSON.to_string(), bytes::Bytes::from_owner(b))
        } else if self.data.is_null() {
            (String::new(), bytes::Bytes::new())
        } else {
            (
                CONTENT_TYPE_JSON.to_string(),
                gojson::to_vec(&self.data).into(),
            )
        };
        SdkEvent {
            id: self.id,
            source: self.source,
            spec_version: SPEC_VERSION.into(),
            ty: self.ty.full(),
            datacontenttype,
            dataschema: self.target.as_str().into(),
            subject: self.subject,
            time: None,
            extensions,
            data,
        }
    }

    /// Encodes to the wire envelope, byte for byte as the peer's SDK does.
    pub fn to_wire(&self) -> eventstreamapi::Event {
        self.clone().into_wire()
    }

    /// As [`Self::to_wire`], consuming the event (nothing copied).
    pub fn into_wire(self) -> eventstreamapi::Event {
        eventstreamapi::Event {
            event: Some(self.into_sdk().into_proto()),
        }
    }

    /// Decodes a wire envelope.
    pub fn from_wire(ev: &eventstreamapi::Event) -> Result<Self, DecodeError> {
        Self::from_wire_owned(ev.clone())
    }

    /// As [`Self::from_wire`], consuming the envelope (nothing copied).
    pub fn from_wire_owned(ev: eventstreamapi::Event) -> Result<Self, DecodeError> {
        let ce = ev.event.ok_or(DecodeError::Empty)?;
        Self::from_sdk(SdkEvent::from_proto_owned(ce)?)
    }

    /// From the SDK-level event.
    pub fn from_sdk(mut e: SdkEvent) -> Result<Self, DecodeError> {
        if e.spec_version != SPEC_VERSION {
            return Err(DecodeError::SpecVersion(e.spec_version));
        }
        let ty = EventType::parse(&e.ty).ok_or(DecodeError::UnknownType(e.ty))?;
        let target =
            Target::parse(&e.dataschema).ok_or(DecodeError::UnknownTarget(e.dataschema))?;
        let data = if e.data.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&e.data).map_err(|x| DecodeError::Payload(x.to_string()))?
        };
        let mut text = |k: &str| e.extensions.remove(k).and_then(|v| v.as_text());
        let resource_id = text(attr::RESOURCEID).unwrap_or_default();
        let event_id = text(attr::EVENTID).unwrap_or_default();
        let sent_at = text(attr::SENTAT);
        Ok(Self {
            id: e.id,
            source: e.source,
            ty,
            target,
            subject: e.subject,
            resource_id,
            event_id,
            sent_at,
            extra_attrs: e.extensions,
            data,
            encoded_data: None,
        })
    }
}

/// Best-effort ids of a raw event that failed to decode (to address an `error` reply).
pub fn raw_ids(ev: &eventstreamapi::Event) -> (String, String) {
    let get = |k: &str| {
        ev.event
            .as_ref()
            .and_then(|c| c.attributes.get(k))
            .and_then(AttrValue::from_proto)
            .and_then(|v| v.as_text())
            .unwrap_or_default()
    };
    (get(attr::RESOURCEID), get(attr::EVENTID))
}

/// `<name>_<uid>`.
pub fn resource_id(name: &str, uid: &str) -> String {
    format!("{name}_{uid}")
}

/// RFC 3339 with nanoseconds, UTC.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

/// (namespace, name, uid, resourceVersion) of a JSON object.
pub fn meta_of(obj: &Value) -> (String, String, String, String) {
    let m = &obj["metadata"];
    let s = |k: &str| m[k].as_str().unwrap_or_default().to_string();
    (s("namespace"), s("name"), s("uid"), s("resourceVersion"))
}

#[cfg(test)]
mod tests;
