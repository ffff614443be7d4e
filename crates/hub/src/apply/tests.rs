use super::fields::{parse_fields, to_fields};
use super::*;

#[test]
fn fields_round_trip() {
    let v = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b"}},"data":{"k":"v"}});
    let l = leaves(&v, None, true, true);
    let set: BTreeSet<Path> = l.keys().cloned().collect();
    let tree = to_fields(&set);
    assert_eq!(
        tree,
        json!({"f:data":{"f:k":{}},"f:metadata":{"f:labels":{"f:a":{}}}})
    );
    let mut back = BTreeSet::new();
    parse_fields(&tree, &mut Vec::new(), &mut back);
    assert_eq!(back, set);
}

#[test]
fn map_list_merge_and_conflict() {
    let schema = json!({"properties":{"spec":{"properties":{"items":{
        "type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
        "items":{"properties":{"name":{"type":"string"},"v":{"type":"string"}}}}}}}});
    let cfg1 = json!({"apiVersion":"x/v1","kind":"K","metadata":{"name":"o"},"spec":{"items":[{"name":"a","v":"1"}]}});
    let o1 = apply(&ApplyInput {
        live: None,
        cfg: &cfg1,
        manager: "m1",
        force: false,
        schema: Some(&schema),
        status_request: false,
        status_sub: false,
        api_version: "x/v1",
    })
    .ok()
    .unwrap();
    let cfg2 = json!({"apiVersion":"x/v1","kind":"K","metadata":{"name":"o"},"spec":{"items":[{"name":"b","v":"2"}]}});
    let o2 = apply(&ApplyInput {
        live: Some(&o1),
        cfg: &cfg2,
        manager: "m2",
        force: false,
        schema: Some(&schema),
        status_request: false,
        status_sub: false,
        api_version: "x/v1",
    })
    .ok()
    .unwrap();
    assert_eq!(o2["spec"]["items"].as_array().unwrap().len(), 2);
    let cfg3 = json!({"apiVersion":"x/v1","kind":"K","metadata":{"name":"o"},"spec":{"items":[{"name":"a","v":"9"}]}});
    let err = apply(&ApplyInput {
        live: Some(&o2),
        cfg: &cfg3,
        manager: "m2",
        force: false,
        schema: Some(&schema),
        status_request: false,
        status_sub: false,
        api_version: "x/v1",
    })
    .err()
    .unwrap();
    assert!(
        err.message().contains("conflict with \"m1\""),
        "{}",
        err.message()
    );
}
