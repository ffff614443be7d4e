//! The CloudEvents protobuf format exactly as the Go SDK the peer uses writes and reads it
//! (cloudevents/sdk-go `binding/format/protobuf/v2` v2.16.x, `ToProto` / `FromProto`), one level
//! below [`super::Event`]:
//!
//! * `datacontenttype` and `subject`: `ce_string`; `dataschema`: `ce_uri` (`ToProto` passes it
//!   through `url.Parse`); `time`: `ce_timestamp`; every extension with the kind its value has
//!   (the peer sets only strings, so `ce_string`).
//! * Data: always the `binary_data` oneof, set even when there is no data (field 6, length 0),
//!   except `datacontenttype: application/protobuf`, which goes as `proto_data`
//!   (`Any{type_url: dataschema}`).
//! * The attribute map is a `BTreeMap` (see `build.rs`): entries sorted by key, the bytes of Go's
//!   deterministic marshal.
//!
//! Decoding follows `FromProto`, with one leniency: the SDK keeps `dataschema` only when it
//! arrives as `ce_uri` (a `ce_string` one decodes to `""`); this side also takes it from
//! `ce_uri_ref` and `ce_string` (what older versions of this project sent).

use std::collections::BTreeMap;

use crate::proto::io::cloudevents::v1::{
    CloudEvent,
    cloud_event::{CloudEventAttributeValue, Data, cloud_event_attribute_value::Attr},
};

/// `datacontenttype` of protobuf data (`ContentTypeProtobuf` in the SDK).
pub const CONTENT_TYPE_PROTOBUF: &str = "application/protobuf";

const DATACONTENTTYPE: &str = "datacontenttype";
const DATASCHEMA: &str = "dataschema";
const SUBJECT: &str = "subject";
const TIME: &str = "time";

/// A CloudEvents attribute value with its protobuf kind.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Boolean(bool),
    Integer(i32),
    String(String),
    Bytes(Vec<u8>),
    Uri(String),
    UriRef(String),
    Timestamp(prost_types::Timestamp),
}

impl AttrValue {
    pub fn to_proto(&self) -> CloudEventAttributeValue {
        self.clone().into_proto()
    }

    pub fn into_proto(self) -> CloudEventAttributeValue {
        let attr = match self {
            Self::Boolean(b) => Attr::CeBoolean(b),
            Self::Integer(i) => Attr::CeInteger(i),
            Self::String(s) => Attr::CeString(s),
            Self::Bytes(b) => Attr::CeBytes(b),
            Self::Uri(s) => Attr::CeUri(s),
            Self::UriRef(s) => Attr::CeUriRef(s),
            Self::Timestamp(t) => Attr::CeTimestamp(t),
        };
        CloudEventAttributeValue { attr: Some(attr) }
    }

    /// `None` for an attribute value with no kind set (the SDK fails on it).
    pub fn from_proto(v: &CloudEventAttributeValue) -> Option<Self> {
        Self::from_proto_owned(v.clone())
    }

    /// As [`Self::from_proto`], consuming the value.
    pub fn from_proto_owned(v: CloudEventAttributeValue) -> Option<Self> {
        Some(match v.attr? {
            Attr::CeBoolean(b) => Self::Boolean(b),
            Attr::CeInteger(i) => Self::Integer(i),
            Attr::CeString(s) => Self::String(s),
            Attr::CeBytes(b) => Self::Bytes(b),
            Attr::CeUri(s) => Self::Uri(s),
            Attr::CeUriRef(s) => Self::UriRef(s),
            Attr::CeTimestamp(t) => Self::Timestamp(t),
        })
    }

    /// The value as text (strings, URIs, and the canonical form of the other kinds; `None` for
    /// bytes).
    pub fn as_text(&self) -> Option<String> {
        match self {
            Self::String(s) | Self::Uri(s) | Self::UriRef(s) => Some(s.clone()),
            Self::Boolean(b) => Some(b.to_string()),
            Self::Integer(i) => Some(i.to_string()),
            Self::Bytes(_) => None,
            Self::Timestamp(t) => jiff::Timestamp::new(t.seconds, t.nanos)
                .ok()
                .map(|t| t.to_string()),
        }
    }
}

/// The SDK's `event.Event` as far as the protobuf format carries it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SdkEvent {
    pub id: String,
    pub source: String,
    pub spec_version: String,
    pub ty: String,
    pub datacontenttype: String,
    pub dataschema: String,
    pub subject: String,
    pub time: Option<prost_types::Timestamp>,
    pub extensions: BTreeMap<String, AttrValue>,
    /// Encoded data (`DataEncoded`); empty when there is none.
    pub data: bytes::Bytes,
}

/// Why a CloudEvent could not be read (the SDK's `FromProto` fails the same way).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WireError {
    #[error("attribute {0:?} has no value kind set")]
    EmptyAttribute(String),
}

impl SdkEvent {
    /// `format.ToProto`.
    pub fn to_proto(&self) -> CloudEvent {
        self.clone().into_proto()
    }

    /// `format.ToProto`, consuming the event (nothing copied).
    pub fn into_proto(self) -> CloudEvent {
        let mut attributes = BTreeMap::new();
        let data = if self.datacontenttype == CONTENT_TYPE_PROTOBUF {
            Data::ProtoData(prost_types::Any {
                type_url: self.dataschema.clone(),
                value: self.data.to_vec(),
            })
        } else {
            Data::BinaryData(self.data)
        };
        if !self.datacontenttype.is_empty() {
            attributes.insert(
                DATACONTENTTYPE.to_string(),
                AttrValue::String(self.datacontenttype).into_proto(),
            );
        }
        if !self.dataschema.is_empty() {
            attributes.insert(
                DATASCHEMA.to_string(),
                AttrValue::Uri(self.dataschema).into_proto(),
            );
        }
        if !self.subject.is_empty() {
            attributes.insert(
                SUBJECT.to_string(),
                AttrValue::String(self.subject).into_proto(),
            );
        }
        if let Some(t) = self.time {
            attributes.insert(TIME.to_string(), AttrValue::Timestamp(t).into_proto());
        }
        for (k, v) in self.extensions {
            attributes.insert(k, v.into_proto());
        }
        CloudEvent {
            id: self.id,
            source: self.source,
            spec_version: self.spec_version,
            r#type: self.ty,
            attributes,
            data: Some(data),
        }
    }

    /// `format.FromProto` (plus the `dataschema` leniency described in the module docs).
    pub fn from_proto(ce: &CloudEvent) -> Result<Self, WireError> {
        Self::from_proto_owned(ce.clone())
    }

    /// As [`Self::from_proto`], consuming the CloudEvent (nothing copied).
    pub fn from_proto_owned(ce: CloudEvent) -> Result<Self, WireError> {
        let mut e = SdkEvent {
            id: ce.id,
            source: ce.source,
            spec_version: ce.spec_version,
            ty: ce.r#type,
            ..Default::default()
        };
        match ce.data {
            Some(Data::BinaryData(b)) => e.data = b,
            // the SDK runs text through SetData; JSON text is taken as the JSON it holds
            Some(Data::TextData(t)) => e.data = t.into_bytes().into(),
            Some(Data::ProtoData(a)) => {
                e.datacontenttype = CONTENT_TYPE_PROTOBUF.into();
                e.data = a.value.into();
            }
            None => {}
        }
        for (name, v) in ce.attributes {
            let Some(v) = AttrValue::from_proto_owned(v) else {
                return Err(WireError::EmptyAttribute(name));
            };
            match name.as_str() {
                DATACONTENTTYPE => {
                    e.datacontenttype = match v {
                        AttrValue::String(s) => s,
                        _ => String::new(),
                    }
                }
                DATASCHEMA => e.dataschema = v.as_text().unwrap_or_default(),
                SUBJECT => {
                    e.subject = match v {
                        AttrValue::String(s) => s,
                        _ => String::new(),
                    }
                }
                TIME => {
                    e.time = match v {
                        AttrValue::Timestamp(t) => Some(t),
                        _ => None,
                    }
                }
                _ => {
                    e.extensions.insert(name, v);
                }
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ce_with(name: &str, attr: Attr) -> CloudEvent {
        let mut ce = CloudEvent::default();
        ce.attributes
            .insert(name.into(), CloudEventAttributeValue { attr: Some(attr) });
        ce
    }

    #[test]
    fn dataschema_is_written_as_uri_and_read_from_any_string_kind() {
        let e = SdkEvent {
            dataschema: "application".into(),
            ..Default::default()
        };
        let ce = e.to_proto();
        assert_eq!(
            ce.attributes["dataschema"].attr,
            Some(Attr::CeUri("application".into()))
        );
        for a in [
            Attr::CeUri("appproject".into()),
            Attr::CeUriRef("appproject".into()),
            Attr::CeString("appproject".into()),
        ] {
            let back = SdkEvent::from_proto(&ce_with("dataschema", a)).unwrap();
            assert_eq!(back.dataschema, "appproject");
        }
    }

    #[test]
    fn binary_data_is_set_even_without_data_and_protobuf_goes_as_any() {
        let ce = SdkEvent::default().to_proto();
        assert_eq!(ce.data, Some(Data::BinaryData(Default::default())));
        let e = SdkEvent {
            datacontenttype: CONTENT_TYPE_PROTOBUF.into(),
            dataschema: "type.googleapis.com/x".into(),
            data: vec![1, 2].into(),
            ..Default::default()
        };
        let ce = e.to_proto();
        assert!(
            matches!(&ce.data, Some(Data::ProtoData(a)) if a.type_url == "type.googleapis.com/x" && a.value == [1, 2])
        );
        assert_eq!(SdkEvent::from_proto(&ce).unwrap(), e);
    }

    #[test]
    fn extensions_keep_their_kind_and_a_non_string_content_type_is_dropped_like_the_sdk() {
        let mut ce = ce_with("count", Attr::CeInteger(3));
        ce.attributes.insert(
            "datacontenttype".into(),
            CloudEventAttributeValue {
                attr: Some(Attr::CeUri("application/json".into())),
            },
        );
        let e = SdkEvent::from_proto(&ce).unwrap();
        assert_eq!(e.extensions["count"], AttrValue::Integer(3));
        assert_eq!(e.datacontenttype, "");
        let empty = ce_with("x", Attr::CeBoolean(true));
        let mut empty = empty;
        empty
            .attributes
            .insert("bad".into(), CloudEventAttributeValue { attr: None });
        assert_eq!(
            SdkEvent::from_proto(&empty),
            Err(WireError::EmptyAttribute("bad".into()))
        );
    }
}
