//! This crate's SDK rules against bytes produced by the real cloudevents/sdk-go v2.16.2
//! (crates/agent-core/tests/fixtures/wire, see its README).

use std::path::PathBuf;

use argocd_pull_agent_interop::emitter::{self, Emitter};
use argocd_pull_agent_interop::pb::io::cloudevents::v1::{
    CloudEvent, CloudEventAttributeValue, cloud_event_attribute_value::Attr,
};
use argocd_pull_agent_interop::sdk::{self, Event};
use base64::Engine;
use prost::Message;
use serde_json::Value;

pub struct Fixture {
    pub name: String,
    pub bytes: Vec<u8>,
    pub side: Value,
}

pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../agent-core/tests/fixtures/wire")
}

pub fn fixture(name: &str) -> Fixture {
    let d = dir();
    Fixture {
        name: name.into(),
        bytes: std::fs::read(d.join(format!("{name}.pb"))).expect("fixture .pb"),
        side: serde_json::from_slice(
            &std::fs::read(d.join(format!("{name}.json"))).expect("sidecar"),
        )
        .expect("sidecar JSON"),
    }
}

pub fn all() -> Vec<Fixture> {
    let index: Value =
        serde_json::from_slice(&std::fs::read(dir().join("index.json")).expect("index.json"))
            .expect("index JSON");
    let v: Vec<Fixture> = index
        .as_array()
        .expect("array")
        .iter()
        .map(|f| fixture(f["name"].as_str().expect("name")))
        .collect();
    assert!(
        v.len() >= 30,
        "expected the full fixture set, got {}",
        v.len()
    );
    v
}

fn ext_strings(e: &Event) -> serde_json::Map<String, Value> {
    e.extensions
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Value::String(v.as_str().expect("string ext").into()),
            )
        })
        .collect()
}

#[test]
fn sdk_rules_decode_every_fixture_as_the_go_sdk_does() {
    for f in all() {
        let e = sdk::decode(&f.bytes).unwrap_or_else(|err| panic!("{}: {err:#}", f.name));
        let want = &f.side["sdk_from_proto"];
        let got = serde_json::json!({
            "id": e.id, "source": e.source, "type": e.typ, "datacontenttype": e.datacontenttype,
            "dataschema": e.dataschema, "subject": e.subject, "extensions": ext_strings(&e),
        });
        let mut want = want.clone();
        want.as_object_mut().expect("object").remove("extensions");
        let want_ext = f.side["sdk_from_proto"]["extensions"].clone();
        let mut got_cmp = got.clone();
        got_cmp
            .as_object_mut()
            .expect("object")
            .remove("extensions");
        assert_eq!(got_cmp, want, "{}: SDK view differs", f.name);
        assert_eq!(got["extensions"], want_ext, "{}: extensions differ", f.name);
        let text = f.side["binary_data"].as_str().unwrap_or("");
        assert_eq!(String::from_utf8_lossy(&e.data), text, "{}: data", f.name);
    }
}

#[test]
fn sdk_rules_reencode_every_fixture_byte_for_byte() {
    for f in all() {
        let e = sdk::decode(&f.bytes).expect("decode");
        assert_eq!(
            sdk::encode(&e),
            f.bytes,
            "{}: ToProto + deterministic Marshal differs from the Go SDK's bytes",
            f.name
        );
    }
}

#[test]
fn every_fixture_has_its_dataschema_as_ce_uri_and_extensions_as_ce_string() {
    for f in all() {
        let c = CloudEvent::decode(f.bytes.as_slice()).expect("decode");
        assert!(c.id.is_empty(), "{}: the peer never sets an id", f.name);
        assert_eq!(c.spec_version, "1.0");
        for (k, v) in &c.attributes {
            match (k.as_str(), &v.attr) {
                ("dataschema", Some(Attr::CeUri(_))) => {}
                ("dataschema", other) => panic!("{}: dataschema as {other:?}", f.name),
                (_, Some(Attr::CeString(_))) => {}
                (k, other) => panic!("{}: attribute {k} as {other:?}", f.name),
            }
        }
    }
}

#[test]
fn a_ce_string_dataschema_is_dropped_by_the_sdk_rules() {
    let mut c = CloudEvent::decode(fixture("application-create").bytes.as_slice()).expect("decode");
    c.attributes.insert(
        "dataschema".into(),
        CloudEventAttributeValue {
            attr: Some(Attr::CeString("application".into())),
        },
    );
    let e = sdk::from_proto(&c).expect("decode");
    assert_eq!(e.dataschema, "", "FromProto keeps only a ce_uri dataschema");
    assert_eq!(
        emitter::target(&e),
        None,
        "the peer cannot route this event"
    );
}

/// Rebuilds an event from its sidecar with the replicas of the peer's constructors.
fn rebuild(f: &Fixture, by_name: &dyn Fn(&str) -> Fixture) -> Option<Event> {
    let s = &f.side;
    let em = Emitter::new(s["source"].as_str().expect("source"));
    let typ = s["type"].as_str().expect("type");
    let target = s["attributes"]["dataschema"]["ce_uri"]
        .as_str()
        .unwrap_or("");
    let attr = |k: &str| s["attributes"][k]["ce_string"].as_str().map(str::to_string);
    let data: Value =
        serde_json::from_str(s["binary_data"].as_str().unwrap_or("")).unwrap_or(Value::Null);
    let uuid = attr("eventid").unwrap_or_default();
    let b64 = |v: &Value| {
        v.as_str().map(|x| {
            base64::engine::general_purpose::STANDARD
                .decode(x)
                .expect("base64")
        })
    };
    let short = typ
        .strip_prefix(emitter::PREFIX)
        .map(|t| &t[1..])
        .unwrap_or(typ);
    let mut e = match (short, target) {
        (_, "application" | "appproject" | "applicationset" | "repository" | "gpgkey")
            if short != "error" =>
        {
            em.object_event(typ, target, &data)
        }
        ("processed", _) => {
            let acked = match f.name.as_str() {
                "processed-by-agent" => by_name("application-create"),
                _ => by_name("application-status-update"),
            };
            let acked = rebuild(&acked, by_name).expect("acked event");
            return Some(em.processed(&acked));
        }
        ("ping" | "pong", _) => return Some(em.heartbeat(short, &uuid)),
        ("request-update", _) => em.request_update(
            &uuid,
            data["name"].as_str().expect("name"),
            data["namespace"].as_str().unwrap_or(""),
            data["uid"].as_str().expect("uid"),
            data["kind"].as_str().expect("kind"),
            b64(&data["checksum"]).as_deref(),
        ),
        ("request-synced-resource-list", _) => {
            em.request_synced_resource_list(&uuid, b64(&data["checksum"]).as_deref())
        }
        ("response-synced-resource", _) => em.synced_resource(
            &uuid,
            data["name"].as_str().expect("name"),
            data["namespace"].as_str().unwrap_or(""),
            data["uid"].as_str().expect("uid"),
            data["kind"].as_str().expect("kind"),
        ),
        ("request-resource-resync", _) => em.request_resource_resync(&uuid),
        ("error", t) => em.error(
            &uuid,
            t,
            data["resourceName"].as_str().expect("name"),
            data["resourceNamespace"].as_str().expect("ns"),
            data["message"].as_str().expect("message"),
        ),
        ("cluster-cache-info-update", _) => em.cluster_cache_info_update(
            &uuid,
            data["applicationsCount"].as_i64().expect("n"),
            data["apisCount"].as_i64().expect("n"),
            data["resourcesCount"].as_i64().expect("n"),
        ),
        _ => return None,
    };
    if let Some(at) = attr("sentat") {
        e = emitter::sent(e, &at);
    }
    if let Some(uid) = attr("principaluid") {
        e = emitter::stamped(e, &uid);
    }
    if let Some(tp) = attr("traceparent") {
        e.set_ext("traceparent", tp);
    }
    Some(e)
}

#[test]
fn the_peer_constructor_replicas_reproduce_the_go_bytes() {
    let mut rebuilt = 0;
    for f in all() {
        let Some(e) = rebuild(&f, &fixture) else {
            continue;
        };
        assert_eq!(
            sdk::encode(&e),
            f.bytes,
            "{}: replica of `{}` differs from the Go bytes\n ours: {:?}",
            f.name,
            f.side["peer_constructor"],
            e
        );
        rebuilt += 1;
    }
    assert!(rebuilt >= 25, "only {rebuilt} fixtures rebuilt");
}

#[test]
fn go_json_escaping_matches_encoding_json() {
    let f = fixture("application-create-autonomous");
    let text = f.side["binary_data"].as_str().expect("data");
    assert!(text.contains(r"a\u003cb \u0026\u0026 c\u003ed"), "{text}");
    let v: Value = serde_json::from_str(text).expect("json");
    assert_eq!(sdk::go_json(&v), text.as_bytes());
}
