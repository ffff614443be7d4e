//! JSON helpers over Argo CD objects (I/O free).

use serde_json::{Map, Value, json};

use crate::checksum::hash_value;
use crate::event::{Event, EventType, Target};

/// Annotation holding the source-of-truth object's UID on the replica.
pub const SOURCE_UID: &str = "argocd.argoproj.io/source-uid";
/// Resources with this label set to `true` are not synchronised.
pub const IGNORE_LABEL: &str = "argocd-agent.argoproj-labs.io/ignore-sync";

pub fn name(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}
pub fn namespace(v: &Value) -> &str {
    v["metadata"]["namespace"].as_str().unwrap_or_default()
}
pub fn uid(v: &Value) -> &str {
    v["metadata"]["uid"].as_str().unwrap_or_default()
}
pub fn annotation<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v["metadata"]["annotations"][k].as_str()
}
pub fn ignored(v: &Value) -> bool {
    v["metadata"]["labels"][IGNORE_LABEL].as_str() == Some("true")
}
pub fn source_uid(v: &Value) -> &str {
    annotation(v, SOURCE_UID).unwrap_or_default()
}

/// Hash of `.operation` ("" when absent).
pub fn op_hash(v: &Value) -> String {
    match v.get("operation") {
        None | Some(Value::Null) => String::new(),
        Some(op) => hash_value(op),
    }
}

/// Hash of `.status` ("" when absent).
pub fn status_hash(v: &Value) -> String {
    match v.get("status") {
        None | Some(Value::Null) => String::new(),
        Some(s) => hash_value(s),
    }
}

/// Hash of `.spec` (including destination).
pub fn full_spec_hash(v: &Value) -> String {
    hash_value(v.get("spec").unwrap_or(&Value::Null))
}

/// Whether the operation state says a termination was requested.
pub fn terminating(v: &Value) -> bool {
    v["status"]["operationState"]["phase"].as_str() == Some("Terminating")
}

/// Metadata copied between sides: name, namespace, labels, annotations.
pub fn portable_meta(v: &Value, ns: &str) -> Value {
    let m = &v["metadata"];
    let mut out = Map::new();
    out.insert("name".into(), m["name"].clone());
    out.insert("namespace".into(), json!(ns));
    for k in ["labels", "annotations"] {
        if m[k].is_object() {
            out.insert(k.into(), m[k].clone());
        }
    }
    Value::Object(out)
}

/// A copy of `v` without `.operation`.
pub fn without_operation(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("operation");
    }
    c
}

/// A minimal object naming a resource (for `delete`).
pub fn stub(name: &str, ns: &str, uid: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": {"name": name, "namespace": ns, "uid": uid}})
}

/// Sets an annotation.
pub fn set_annotation(v: &mut Value, k: &str, val: &str) {
    if !v["metadata"]["annotations"].is_object() {
        v["metadata"]["annotations"] = json!({});
    }
    v["metadata"]["annotations"][k] = json!(val);
}

/// Replaces the fields the synchroniser owns (`spec`, labels, annotations; optionally `status`
/// and `operation`) on top of the current object `cur`, keeping every other field.
pub fn overlay(cur: &Value, want: &Value, with_status: bool, with_operation: bool) -> Value {
    let mut n = cur.clone();
    n["spec"] = want["spec"].clone();
    for k in ["labels", "annotations"] {
        if want["metadata"][k].is_object() {
            if !n["metadata"][k].is_object() {
                n["metadata"][k] = json!({});
            }
            for (a, b) in want["metadata"][k].as_object().expect("object") {
                n["metadata"][k][a] = b.clone();
            }
        }
    }
    let obj = n.as_object_mut().expect("object");
    if with_status {
        match want.get("status") {
            Some(s) if !s.is_null() => {
                obj.insert("status".into(), s.clone());
            }
            _ => {
                obj.remove("status");
            }
        }
    }
    if with_operation {
        match want.get("operation") {
            Some(s) if !s.is_null() => {
                obj.insert("operation".into(), s.clone());
            }
            _ => {
                obj.remove("operation");
            }
        }
    }
    n
}

/// Resync payloads.
pub fn request_update(source: &str, name: &str, ns: &str, uid: &str, checksum: &str) -> Event {
    let mut e = Event::request(
        source,
        EventType::RequestUpdate,
        Target::Application,
        json!({"name": name, "namespace": ns, "uid": uid, "kind": "Application", "checksum": checksum}),
    );
    e.subject = format!("{ns}/{name}");
    e
}

pub fn request_synced_list(source: &str, checksum: &str) -> Event {
    Event::request(
        source,
        EventType::RequestSyncedResourceList,
        Target::ResourceResync,
        json!({"checksum": checksum}),
    )
}

pub fn response_synced(source: &str, name: &str, ns: &str, uid: &str) -> Event {
    Event::request(
        source,
        EventType::ResponseSyncedResource,
        Target::ResourceResync,
        json!({"name": name, "namespace": ns, "uid": uid, "kind": "Application"}),
    )
}

pub fn request_resource_resync(source: &str) -> Event {
    Event::request(
        source,
        EventType::RequestResourceResync,
        Target::ResourceResync,
        json!({}),
    )
}

/// Per-resource async locks: a revert and a received event of one resource never interleave.
#[derive(Default)]
pub struct KeyedLocks {
    locks:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    pub async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let m = {
            let mut g = self.locks.lock().expect("poisoned");
            g.entry(key.to_string()).or_default().clone()
        };
        let guard = m.clone().lock_owned().await;
        KeyGuard {
            owner: self,
            key: key.to_string(),
            guard: Some(guard),
        }
    }
}

pub struct KeyGuard<'a> {
    owner: &'a KeyedLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut g = self.owner.locks.lock().expect("poisoned");
        if g.get(&self.key)
            .is_some_and(|m| std::sync::Arc::strong_count(m) == 1)
        {
            g.remove(&self.key);
        }
    }
}
