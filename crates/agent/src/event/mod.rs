//! Event construction and parsing: the CloudEvents envelope of argocd-agent (I/O free).

use std::collections::HashMap;

use serde_json::Value;

use crate::proto::eventstreamapi;
use crate::proto::io::cloudevents::v1::{
    CloudEvent,
    cloud_event::{CloudEventAttributeValue, Data, cloud_event_attribute_value::Attr},
};

/// Prefix of every event type.
pub const TYPE_PREFIX: &str = "io.argoproj.argocd-agent.event.";
/// CloudEvents spec version.
pub const SPEC_VERSION: &str = "1.0";

/// Event types of the protocol (`io.argoproj.argocd-agent.event.<x>`).
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
    RequestUpdate,
    RequestSyncedResourceList,
    ResponseSyncedResource,
    RequestResourceResync,
    ClusterCacheInfoUpdate,
    Error,
}

impl EventType {
    pub const ALL: [EventType; 17] = [
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
        Self::RequestUpdate,
        Self::RequestSyncedResourceList,
        Self::ResponseSyncedResource,
        Self::RequestResourceResync,
        Self::ClusterCacheInfoUpdate,
        Self::Error,
    ];

    /// The short name (`spec-update`).
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
            Self::RequestUpdate => "request-update",
            Self::RequestSyncedResourceList => "request-synced-resource-list",
            Self::ResponseSyncedResource => "response-synced-resource",
            Self::RequestResourceResync => "request-resource-resync",
            Self::ClusterCacheInfoUpdate => "cluster-cache-info-update",
            Self::Error => "error",
        }
    }

    /// The full CloudEvents type.
    pub fn full(self) -> String {
        format!("{TYPE_PREFIX}{}", self.short())
    }

    /// Parses a full CloudEvents type.
    pub fn parse(s: &str) -> Option<Self> {
        let short = s.strip_prefix(TYPE_PREFIX)?;
        Self::ALL.into_iter().find(|t| t.short() == short)
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
}

impl Target {
    pub const ALL: [Target; 12] = [
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
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
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
    pub extra_attrs: HashMap<String, String>,
    /// JSON payload.
    pub data: Value,
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
}

impl Event {
    /// A new event about an object. `resource_id`/`event_id` derive from the object's metadata.
    pub fn for_object(source: &str, ty: EventType, target: Target, obj: &Value) -> Self {
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
            extra_attrs: HashMap::new(),
            data: obj.clone(),
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
            extra_attrs: HashMap::new(),
            data,
        }
    }

    /// The ACK (`processed`) for this event.
    pub fn ack(&self, source: &str) -> Self {
        let mut e = Self::request(
            source,
            EventType::Processed,
            Target::EventProcessed,
            Value::Null,
        );
        e.subject = self.subject.clone();
        e.resource_id = self.resource_id.clone();
        e.event_id = self.event_id.clone();
        e
    }

    /// An `error` event answering `self` (same resourceid/eventid so the sender can stop resending).
    pub fn error_reply(
        source: &str,
        resource_id: &str,
        event_id: &str,
        reason: &str,
        message: &str,
    ) -> Self {
        let mut e = Self::request(
            source,
            EventType::Error,
            Target::EventProcessed,
            serde_json::json!({ "reason": reason, "message": message }),
        );
        e.resource_id = resource_id.to_string();
        e.event_id = event_id.to_string();
        e.extra_attrs
            .insert(attr::ERRORREASON.into(), reason.into());
        e
    }

    /// Name part of the subject.
    pub fn name(&self) -> &str {
        self.subject.rsplit('/').next().unwrap_or("")
    }

    /// Encodes to the wire envelope.
    pub fn to_wire(&self) -> eventstreamapi::Event {
        let mut attributes = HashMap::new();
        let s = |v: &str| CloudEventAttributeValue {
            attr: Some(Attr::CeString(v.to_string())),
        };
        attributes.insert(attr::DATACONTENTTYPE.to_string(), s("application/json"));
        attributes.insert(attr::DATASCHEMA.to_string(), s(self.target.as_str()));
        if !self.subject.is_empty() {
            attributes.insert(attr::SUBJECT.to_string(), s(&self.subject));
        }
        attributes.insert(attr::RESOURCEID.to_string(), s(&self.resource_id));
        attributes.insert(attr::EVENTID.to_string(), s(&self.event_id));
        let sent = self.sent_at.clone().unwrap_or_else(now_rfc3339);
        attributes.insert(attr::SENTAT.to_string(), s(&sent));
        for (k, v) in &self.extra_attrs {
            attributes.insert(k.clone(), s(v));
        }
        let data = if self.data.is_null() {
            None
        } else {
            Some(Data::BinaryData(
                serde_json::to_vec(&self.data).expect("JSON values serialise"),
            ))
        };
        eventstreamapi::Event {
            event: Some(CloudEvent {
                id: self.id.clone(),
                source: self.source.clone(),
                spec_version: SPEC_VERSION.into(),
                r#type: self.ty.full(),
                attributes,
                data,
            }),
        }
    }

    /// Decodes a wire envelope.
    pub fn from_wire(ev: &eventstreamapi::Event) -> Result<Self, DecodeError> {
        let ce = ev.event.as_ref().ok_or(DecodeError::Empty)?;
        if ce.spec_version != SPEC_VERSION {
            return Err(DecodeError::SpecVersion(ce.spec_version.clone()));
        }
        let ty = EventType::parse(&ce.r#type)
            .ok_or_else(|| DecodeError::UnknownType(ce.r#type.clone()))?;
        let mut attrs: HashMap<String, String> = ce
            .attributes
            .iter()
            .filter_map(|(k, v)| attr_string(v).map(|s| (k.clone(), s)))
            .collect();
        let schema = attrs.remove(attr::DATASCHEMA).unwrap_or_default();
        let target = Target::parse(&schema).ok_or(DecodeError::UnknownTarget(schema))?;
        let data = match &ce.data {
            None => Value::Null,
            Some(Data::BinaryData(b)) if b.is_empty() => Value::Null,
            Some(Data::BinaryData(b)) => {
                serde_json::from_slice(b).map_err(|e| DecodeError::Payload(e.to_string()))?
            }
            Some(Data::TextData(t)) => {
                serde_json::from_str(t).map_err(|e| DecodeError::Payload(e.to_string()))?
            }
            Some(Data::ProtoData(_)) => {
                return Err(DecodeError::Payload(
                    "proto_data is not supported, want JSON".into(),
                ));
            }
        };
        attrs.remove(attr::DATACONTENTTYPE);
        Ok(Self {
            id: ce.id.clone(),
            source: ce.source.clone(),
            ty,
            target,
            subject: attrs.remove(attr::SUBJECT).unwrap_or_default(),
            resource_id: attrs.remove(attr::RESOURCEID).unwrap_or_default(),
            event_id: attrs.remove(attr::EVENTID).unwrap_or_default(),
            sent_at: attrs.remove(attr::SENTAT),
            extra_attrs: attrs,
            data,
        })
    }
}

/// Best-effort ids of a raw event that failed to decode (to address an `error` reply).
pub fn raw_ids(ev: &eventstreamapi::Event) -> (String, String) {
    let get = |k: &str| {
        ev.event
            .as_ref()
            .and_then(|c| c.attributes.get(k))
            .and_then(attr_string)
            .unwrap_or_default()
    };
    (get(attr::RESOURCEID), get(attr::EVENTID))
}

fn attr_string(v: &CloudEventAttributeValue) -> Option<String> {
    match v.attr.as_ref()? {
        Attr::CeString(s) | Attr::CeUri(s) | Attr::CeUriRef(s) => Some(s.clone()),
        Attr::CeBoolean(b) => Some(b.to_string()),
        Attr::CeInteger(i) => Some(i.to_string()),
        Attr::CeBytes(_) => None,
        Attr::CeTimestamp(t) => jiff::Timestamp::new(t.seconds, t.nanos)
            .ok()
            .map(|t| t.to_string()),
    }
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
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_keeps_ids_and_payload() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7"}, "spec": {"x": 1}});
        let e = Event::for_object(
            "principal",
            EventType::SpecUpdate,
            Target::Application,
            &obj,
        );
        assert_eq!(e.resource_id, "a_u1");
        assert_eq!(e.event_id, "a_u1_7");
        assert_eq!(e.subject, "ns/a");
        let wire = e.to_wire();
        let ce = wire.event.as_ref().unwrap();
        assert_eq!(ce.r#type, "io.argoproj.argocd-agent.event.spec-update");
        assert_eq!(ce.spec_version, "1.0");
        let back = Event::from_wire(&wire).unwrap();
        assert_eq!(back.data, obj);
        assert_eq!(back.event_id, e.event_id);
        assert_eq!(back.target, Target::Application);
        assert!(back.sent_at.is_some());
    }

    #[test]
    fn every_type_and_target_parses_back() {
        for t in EventType::ALL {
            assert_eq!(EventType::parse(&t.full()), Some(t));
        }
        for t in Target::ALL {
            assert_eq!(Target::parse(t.as_str()), Some(t));
        }
    }

    #[test]
    fn malformed_envelopes_name_the_problem() {
        let mut w = Event::request("x", EventType::Ping, Target::Heartbeat, Value::Null).to_wire();
        w.event.as_mut().unwrap().r#type = "bogus".into();
        assert_eq!(
            Event::from_wire(&w),
            Err(DecodeError::UnknownType("bogus".into()))
        );
        let mut w = Event::request("x", EventType::Ping, Target::Heartbeat, Value::Null).to_wire();
        w.event.as_mut().unwrap().data = Some(Data::BinaryData(b"{not json".to_vec()));
        assert!(matches!(Event::from_wire(&w), Err(DecodeError::Payload(_))));
        assert_eq!(
            Event::from_wire(&eventstreamapi::Event { event: None }),
            Err(DecodeError::Empty)
        );
    }
}
