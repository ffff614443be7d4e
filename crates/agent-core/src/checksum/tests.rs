//! Golden values printed by the peer's own code paths run under Go 1.26 (`encoding/json`,
//! `crypto/sha256`, the unstructured int64/float64 number rule; internal/resync/resync.go
//! `generateSpecChecksum`, internal/resources/resources.go `Checksum`, and the event payload
//! structs of internal/event). The Go program is not committed; its inputs and outputs are.

use super::*;
use serde_json::json;

fn parse(s: &str) -> Value {
    serde_json::from_str(s).expect("test input is JSON")
}

#[test]
fn application_spec_checksum_is_the_peers() {
    let app = parse(
        r#"{"kind":"Application","spec":{"project":"default","source":{"repoURL":"https://github.com/argoproj/argocd-example-apps","path":"guestbook","targetRevision":"HEAD"},"destination":{"server":"https://kubernetes.default.svc","namespace":"guestbook"}}}"#,
    );
    assert_eq!(
        spec_checksum(&app),
        "/1/ZEjnAj1ztxRLvr+lwJkhR6sAOXbJJYZ9s/WzPHmU="
    );
}

#[test]
fn go_escaping_and_numbers_match_encoding_json() {
    let app = parse(
        r#"{"kind":"Application","spec":{"source":{"helm":{"values":"a: <b> & c\u2028d\u2029"},"path":"é/\"q\"\\"},"project":"p","syncPolicy":{"retry":{"limit":5,"backoff":{"factor":2,"duration":"5s"}}},"info":[{"name":"x","value":"\u0001\t\n"}],"f":[1.5,2.0,1e21,1e-7,0.000001,123456789.125,-0.0,100000000000000000000]}}"#,
    );
    let mut spec = app["spec"].clone();
    spec.as_object_mut().unwrap().remove("destination");
    assert_eq!(
        String::from_utf8(go_json(&spec)).unwrap(),
        r#"{"f":[1.5,2,1e+21,1e-7,0.000001,123456789.125,-0,100000000000000000000],"info":[{"name":"x","value":"\u0001\t\n"}],"project":"p","source":{"helm":{"values":"a: \u003cb\u003e \u0026 c\u2028d\u2029"},"path":"é/\"q\"\\"},"syncPolicy":{"retry":{"backoff":{"duration":"5s","factor":2},"limit":5}}}"#
    );
    assert_eq!(
        spec_checksum(&app),
        "woK1I3CA3zgNqgPzaXY3G6tDMkaQj7zQLyEG78taNtA="
    );
}

#[test]
fn appproject_secret_and_configmap_checksums_are_the_peers() {
    let proj = parse(
        r#"{"kind":"AppProject","spec":{"sourceRepos":["*"],"destinations":[{"server":"*","namespace":"*"}],"clusterResourceWhitelist":[{"group":"*","kind":"*"}]}}"#,
    );
    assert_eq!(
        spec_checksum(&proj),
        "wFFxqLq0L/Rq0358tBPpUsTLYe2RTDqMkM3NCHJY5r0="
    );
    let secret = parse(
        r#"{"kind":"Secret","data":{"url":"aHR0cHM6Ly9leGFtcGxlLmNvbS9yZXBv","type":"Z2l0","project":"ZGVmYXVsdA=="}}"#,
    );
    assert_eq!(
        spec_checksum(&secret),
        "RUUc5vhkJ+muNZJf3elQbUOFbIgN9XKOSr9QFpHelyo="
    );
    let cm = parse(r#"{"kind":"ConfigMap","metadata":{"name":"argocd-gpg-keys-cm"}}"#);
    assert_eq!(
        spec_checksum(&cm),
        "RBNvo1WzZ4oRRq0W9+hknpT7T8If536DEMBg9hyq/4o="
    );
}

#[test]
fn set_checksum_is_the_peers_and_empty_is_null() {
    let items = [
        "Application/guestbook/7c1a7e0b-8d2f-4c3e-9a61-0f2b3c4d5e6f",
        "AppProject/default/0f0e0d0c-1111-4222-8333-444455556666",
        "Application/podinfo/1a2b",
    ];
    assert_eq!(
        set_checksum(items),
        "ngeoJRfnMxPXLQT7vKgetGzeNafwi1E1wpxbU/wRX10="
    );
    assert_eq!(set_checksum(Vec::<String>::new()), "");
    assert_eq!(checksum_value(""), Value::Null);
}

#[test]
fn resync_payloads_have_the_peers_fields() {
    let e = request_update("a", "Application", "guestbook", "argocd", "u-1", "/1/Z");
    assert_eq!(
        e.data,
        json!({"name":"guestbook","namespace":"argocd","uid":"u-1","kind":"Application","checksum":"/1/Z"})
    );
    let e = request_update("a", "Application", "n", "", "u", "");
    assert_eq!(
        e.data,
        json!({"name":"n","uid":"u","kind":"Application","checksum":null})
    );
    let e = response_synced("a", "AppProject", "n", "", "u");
    assert_eq!(e.data, json!({"name":"n","uid":"u","kind":"AppProject"}));
}

#[test]
fn received_checksums_are_read_as_go_bytes() {
    assert_eq!(read_checksum(&json!({})).unwrap(), "");
    assert_eq!(read_checksum(&json!({"checksum": null})).unwrap(), "");
    assert_eq!(
        read_checksum(&json!({"checksum": "ngeoJRfnMxPXLQT7vKgetGzeNafwi1E1wpxbU/wRX10="}))
            .unwrap(),
        "ngeoJRfnMxPXLQT7vKgetGzeNafwi1E1wpxbU/wRX10="
    );
    let err = read_checksum(&json!({"checksum": "ff5fd912!"})).unwrap_err();
    assert!(err.contains("not standard base64"), "{err}");
    let err = read_checksum(&json!({"checksum": 5})).unwrap_err();
    assert!(err.contains("base64 string or null"), "{err}");
}

#[test]
fn resync_events_are_sorted_by_the_kind_they_name() {
    let ru = |kind: &str| request_update("agent", kind, "guestbook", "argocd", "u", "");
    assert_eq!(resync_kind(&ru("Application")), ResyncKind::Handled);
    assert_eq!(resync_kind(&ru("AppProject")), ResyncKind::Handled);
    assert_eq!(resync_kind(&ru("Repository")), ResyncKind::Handled);
    assert_eq!(
        resync_kind(&response_synced(
            "p",
            "GPGKey",
            "argocd-gpg-keys-cm",
            "argocd",
            "u",
        )),
        ResyncKind::Handled
    );
    match resync_kind(&ru("Deployment")) {
        ResyncKind::Refused(m) => {
            assert!(m.contains("\"Deployment\"") && m.contains("GPGKey"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // requests without a kind are not sorted
    assert_eq!(
        resync_kind(&request_synced_list("a", "")),
        ResyncKind::Handled
    );
    assert_eq!(
        resync_kind(&request_resource_resync("a")),
        ResyncKind::Handled
    );
}

/// The hash of several parts streamed into the hasher is the hash of their JSON array (what the
/// change detection compared before it stopped building the array), escaping and order included.
#[test]
fn hash_parts_is_the_hash_of_the_array_of_the_parts() {
    let a = parse(r#"{"z":1,"a":{"y":"<b> & \u2028","b":[2.5,null,true]}}"#);
    let b = Value::Null;
    let c = Value::String("refresh é".into());
    assert_eq!(
        hash_parts(&[&a, &b, &c]),
        hash_value(&json!([a.clone(), b.clone(), c.clone()]))
    );
    assert_eq!(hash_parts(&[&a]), hex::encode(Sha256::digest(go_json(&a))));
    assert_ne!(hash_parts(&[&a, &b]), hash_parts(&[&b, &a]));
}
