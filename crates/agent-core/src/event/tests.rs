use super::*;
use crate::proto::io::cloudevents::v1::cloud_event::Data;
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
    let mut e = e;
    e.sent_at = Some(now_rfc3339());
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
    assert_eq!(EventType::ALL.len(), 20);
    assert_eq!(
        EventType::parse("PATCH"),
        Some(EventType::Method(HttpMethod::Patch))
    );
    assert_eq!(EventType::Method(HttpMethod::Get).full(), "GET");
    assert_eq!(EventType::parse("get"), None);
    assert_eq!(Target::parse("redis"), Some(Target::Redis));
}

#[test]
fn ack_copies_every_extension_and_carries_no_data_or_subject() {
    let mut e = Event::for_object(
        "p",
        EventType::Create,
        Target::Application,
        &json!({"metadata": {"name": "a", "namespace": "n", "uid": "u", "resourceVersion": "1"}}),
    );
    e.sent_at = Some("2026-08-21T10:15:30.123456789Z".into());
    e.extra_attrs
        .insert("principaluid".into(), AttrValue::String("pu".into()));
    e.extra_attrs
        .insert("traceparent".into(), AttrValue::String("00-x".into()));
    let ce = e.ack("agent").to_wire().event.unwrap();
    let keys: Vec<&str> = ce.attributes.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "dataschema",
            "eventid",
            "principaluid",
            "resourceid",
            "sentat",
            "traceparent"
        ]
    );
    assert_eq!(ce.data, Some(Data::BinaryData(Default::default())));
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
    w.event.as_mut().unwrap().data = Some(Data::BinaryData(b"{not json".to_vec().into()));
    assert!(matches!(Event::from_wire(&w), Err(DecodeError::Payload(_))));
    assert_eq!(
        Event::from_wire(&eventstreamapi::Event { event: None }),
        Err(DecodeError::Empty)
    );
}
