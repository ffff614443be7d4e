//! The rules of cloudevents/sdk-go v2.16.2 `binding/format/protobuf/v2` (`ToProto`, `FromProto`)
//! and of `v2/event` as far as the peer uses them, re-implemented from the SDK's source. The
//! golden fixtures (crates/agent-core/tests/fixtures/wire, made by the real SDK) check this code.

use std::collections::BTreeMap;

use prost::Message;

use crate::pb::io::cloudevents::v1::{
    CloudEvent, CloudEventAttributeValue, cloud_event::Data, cloud_event_attribute_value::Attr,
};

/// `format.ContentTypeProtobuf`.
pub const CONTENT_TYPE_PROTOBUF: &str = "application/protobuf";
/// `cloudevents.ApplicationJSON`.
pub const APPLICATION_JSON: &str = "application/json";

/// A CloudEvents attribute value after `types.Validate`.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Bool(bool),
    Int(i32),
    Str(String),
    Bytes(Vec<u8>),
    /// `types.URI` (absolute or not: `url.Parse` accepts both)
    Uri(String),
    UriRef(String),
    Time(prost_types::Timestamp),
}

impl Value {
    /// `types.ToString` for the string-like kinds.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Uri(s) | Value::UriRef(s) => Some(s),
            _ => None,
        }
    }
}

/// The SDK's `event.Event`, reduced to the fields the protobuf format touches.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Event {
    pub id: String,
    pub source: String,
    pub spec_version: String,
    pub typ: String,
    pub datacontenttype: String,
    pub dataschema: String,
    pub subject: String,
    pub time: Option<prost_types::Timestamp>,
    pub extensions: BTreeMap<String, Value>,
    /// `DataEncoded`
    pub data: Vec<u8>,
}

impl Event {
    /// A string extension (`ev.Extensions()[name].(string)`), as the peer reads `resourceid` etc.
    pub fn ext(&self, name: &str) -> Option<&str> {
        match self.extensions.get(name) {
            Some(Value::Str(s)) => Some(s),
            _ => None,
        }
    }
    /// `SetExtension(name, string)`.
    pub fn set_ext(&mut self, name: &str, v: impl Into<String>) {
        self.extensions
            .insert(name.to_ascii_lowercase(), Value::Str(v.into()));
    }
    /// The payload as JSON (`DataAs`), if any.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(&self.data)?)
    }
}

/// `format.ToProto`.
pub fn to_proto(e: &Event) -> CloudEvent {
    let mut attributes = BTreeMap::new();
    let s = |v: &str| CloudEventAttributeValue {
        attr: Some(Attr::CeString(v.to_string())),
    };
    if !e.datacontenttype.is_empty() {
        attributes.insert("datacontenttype".to_string(), s(&e.datacontenttype));
    }
    if !e.dataschema.is_empty() {
        // url.Parse(...) then attributeFor(*url.URL) -> types.URI -> ce_uri
        attributes.insert(
            "dataschema".to_string(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeUri(e.dataschema.clone())),
            },
        );
    }
    if !e.subject.is_empty() {
        attributes.insert("subject".to_string(), s(&e.subject));
    }
    if let Some(t) = &e.time {
        attributes.insert(
            "time".to_string(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeTimestamp(*t)),
            },
        );
    }
    for (k, v) in &e.extensions {
        let attr = match v {
            Value::Bool(b) => Attr::CeBoolean(*b),
            Value::Int(i) => Attr::CeInteger(*i),
            Value::Str(s) => Attr::CeString(s.clone()),
            Value::Bytes(b) => Attr::CeBytes(b.clone()),
            Value::Uri(s) => Attr::CeUri(s.clone()),
            Value::UriRef(s) => Attr::CeUriRef(s.clone()),
            Value::Time(t) => Attr::CeTimestamp(*t),
        };
        attributes.insert(k.clone(), CloudEventAttributeValue { attr: Some(attr) });
    }
    // binary_data is always set, even for an event without data
    let data = if e.datacontenttype == CONTENT_TYPE_PROTOBUF {
        Data::ProtoData(prost_types::Any {
            type_url: e.dataschema.clone(),
            value: e.data.clone(),
        })
    } else {
        Data::BinaryData(e.data.clone())
    };
    CloudEvent {
        id: e.id.clone(),
        source: e.source.clone(),
        spec_version: e.spec_version.clone(),
        r#type: e.typ.clone(),
        attributes,
        data: Some(data),
    }
}

/// `format.FromProto`: what a Go peer sees. Notably a `dataschema` that does not arrive as
/// `ce_uri` is dropped (`v.(types.URI)` fails), and `datacontenttype` must be `ce_string`.
pub fn from_proto(c: &CloudEvent) -> anyhow::Result<Event> {
    let mut e = Event {
        id: c.id.clone(),
        source: c.source.clone(),
        spec_version: c.spec_version.clone(),
        typ: c.r#type.clone(),
        ..Default::default()
    };
    let content_type = match c
        .attributes
        .get("datacontenttype")
        .and_then(|a| a.attr.as_ref())
    {
        Some(Attr::CeString(s)) => s.clone(),
        _ => String::new(),
    };
    match &c.data {
        Some(Data::BinaryData(b)) => e.data = b.clone(),
        Some(Data::TextData(t)) => {
            // SetData(contentType, string): JSON media types marshal the string
            e.datacontenttype = content_type.clone();
            e.data = if content_type.is_empty() || content_type.contains("json") {
                serde_json::to_vec(t)?
            } else {
                t.clone().into_bytes()
            };
        }
        Some(Data::ProtoData(a)) => {
            e.datacontenttype = CONTENT_TYPE_PROTOBUF.into();
            e.data = a.value.clone();
        }
        None => {}
    }
    for (name, attr) in &c.attributes {
        let v = match &attr.attr {
            Some(Attr::CeBoolean(b)) => Value::Bool(*b),
            Some(Attr::CeInteger(i)) => Value::Int(*i),
            Some(Attr::CeString(s)) => Value::Str(s.clone()),
            Some(Attr::CeBytes(b)) => Value::Bytes(b.clone()),
            Some(Attr::CeUri(s)) => Value::Uri(s.clone()),
            Some(Attr::CeUriRef(s)) => Value::UriRef(s.clone()),
            Some(Attr::CeTimestamp(t)) => Value::Time(*t),
            None => anyhow::bail!("failed to convert attribute {name}: unsupported attribute type"),
        };
        match name.as_str() {
            "datacontenttype" => {
                e.datacontenttype = match v {
                    Value::Str(s) => s,
                    _ => String::new(),
                }
            }
            "dataschema" => {
                e.dataschema = match v {
                    Value::Uri(s) => s,
                    _ => String::new(),
                }
            }
            "subject" => {
                e.subject = match v {
                    Value::Str(s) => s,
                    _ => String::new(),
                }
            }
            "time" => {
                e.time = match v {
                    Value::Time(t) => Some(t),
                    _ => None,
                }
            }
            _ => {
                e.extensions.insert(name.to_ascii_lowercase(), v);
            }
        }
    }
    Ok(e)
}

/// `proto.MarshalOptions{Deterministic: true}.Marshal(ToProto(e))`.
pub fn encode(e: &Event) -> Vec<u8> {
    to_proto(e).encode_to_vec()
}

/// `proto.Unmarshal` + `FromProto`.
pub fn decode(b: &[u8]) -> anyhow::Result<Event> {
    from_proto(&CloudEvent::decode(b)?)
}

/// What a Go peer's `encoding/json.Marshal` writes for a JSON value built in struct field order:
/// compact, with `<`, `>`, `&`, U+2028 and U+2029 escaped. Object keys keep their order (Go
/// structs); use [`go_json_sorted`] for Go maps.
pub fn go_json(v: &serde_json::Value) -> Vec<u8> {
    let mut out = String::new();
    write_go(v, false, &mut out);
    out.into_bytes()
}

/// `encoding/json.Marshal` of a `map[string]any` tree (`unstructured`): keys sorted at every level.
pub fn go_json_sorted(v: &serde_json::Value) -> Vec<u8> {
    let mut out = String::new();
    write_go(v, true, &mut out);
    out.into_bytes()
}

fn write_go(v: &serde_json::Value, sorted: bool, out: &mut String) {
    use serde_json::Value as J;
    match v {
        J::Null | J::Bool(_) | J::Number(_) => out.push_str(&v.to_string()),
        J::String(s) => write_go_str(s, out),
        J::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go(x, sorted, out);
            }
            out.push(']');
        }
        J::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            if sorted {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_str(k, out);
                out.push(':');
                write_go(&m[k], sorted, out);
            }
            out.push('}');
        }
    }
}

fn write_go_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}
