//! JSON helpers over Argo CD objects (I/O free).

use serde_json::{Map, Value, json};

use crate::checksum::hash_value;
use crate::event::{Event, Target};

/// Annotation holding the source-of-truth object's UID on the replica.
pub const SOURCE_UID: &str = "argocd.argoproj.io/source-uid";
/// Argo CD's refresh trigger (`normal` / `hard`), set by the UI's Refresh button and removed by
/// the application controller once refreshed.
pub const REFRESH: &str = "argocd.argoproj.io/refresh";
/// Resources with this label set to `true` are not synchronised.
pub const IGNORE_LABEL: &str = "argocd-agent.argoproj-labs.io/ignore-sync";
/// The peer's `NamespaceRemappedAnnotation` (internal/manager/manager.go): a boolean marker the
/// agent stamps on an Application it moved from the principal's namespace into its own.
pub const NAMESPACE_REMAPPED: &str = "argocd.argoproj.io/namespace-remapped";

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
/// The refresh annotation's value, `""` when absent.
pub fn refresh(v: &Value) -> &str {
    annotation(v, REFRESH).unwrap_or_default()
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
    // room for what a store adds when the object is written (uid, creationTimestamp,
    // resourceVersion, finalizers): the map is not grown and copied on the way
    let mut out = Map::with_capacity(8);
    out.insert("name".into(), m["name"].clone());
    out.insert("namespace".into(), json!(ns));
    for k in ["labels", "annotations"] {
        if m[k].is_object() {
            out.insert(k.into(), m[k].clone());
        }
    }
    Value::Object(out)
}

/// `a == b`, faster when one value was copied from the other: maps whose keys come in the same
/// order are compared entry by entry instead of looking every key up in the other map (a hashed
/// lookup per key with `preserve_order`); maps in different orders fall back to `==`.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            if x.len() != y.len() {
                return false;
            }
            for ((ka, va), (kb, vb)) in x.iter().zip(y) {
                if ka != kb {
                    return x == y;
                }
                if !json_eq(va, vb) {
                    return false;
                }
            }
            true
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        _ => a == b,
    }
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

/// Resync payloads: dataschema `resourceResync`, checksums as the peer's Go `[]byte` (base64,
/// `null` when empty); see `crate::checksum`.
pub fn request_update(source: &str, name: &str, ns: &str, uid: &str, checksum: &str) -> Event {
    crate::checksum::request_update(source, "Application", name, ns, uid, checksum)
}

pub fn request_synced_list(source: &str, checksum: &str) -> Event {
    crate::checksum::request_synced_list(source, checksum)
}

pub fn response_synced(source: &str, name: &str, ns: &str, uid: &str) -> Event {
    crate::checksum::response_synced(source, "Application", name, ns, uid)
}

pub fn request_resource_resync(source: &str) -> Event {
    crate::checksum::request_resource_resync(source)
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

/// Label naming the agent an autonomous agent's AppProject came from (on the principal).
pub const AGENT_NAME_LABEL: &str = "argocd-agent.argoproj-labs.io/agent-name";
/// The in-cluster server URL.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";

/// Send-queue / lock key of a resource: Applications by name, AppProjects as `appproject/<name>`
/// (a name never contains `/`, so the two never collide). With destination-based mapping an
/// Application is keyed by namespace too: [`app_qkey`].
pub fn qkey(target: Target, name: &str) -> String {
    match target {
        Target::AppProject => format!("appproject/{name}"),
        Target::Repository => format!("repository/{name}"),
        Target::GpgKey => format!("gpgkey/{name}"),
        _ => name.to_string(),
    }
}

/// Destination-based mapping: the send-queue / lock key of an Application in namespace `ns`,
/// `application/<ns>/<name>` ([`parse_qkey`] gives `(Application, "<ns>/<name>")`).
pub fn app_qkey(ns: &str, name: &str) -> String {
    format!("application/{ns}/{name}")
}

/// `<ns>/<name>` → `(ns, name)`; a plain name → `None`.
pub fn split_ns_name(key: &str) -> Option<(&str, &str)> {
    key.split_once('/')
}

/// Reverse of [`qkey`] and [`app_qkey`].
pub fn parse_qkey(key: &str) -> (Target, &str) {
    if let Some(n) = key.strip_prefix("application/") {
        (Target::Application, n)
    } else if let Some(n) = key.strip_prefix("appproject/") {
        (Target::AppProject, n)
    } else if let Some(n) = key.strip_prefix("repository/") {
        (Target::Repository, n)
    } else if let Some(n) = key.strip_prefix("gpgkey/") {
        (Target::GpgKey, n)
    } else {
        (Target::Application, key)
    }
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn deleting(v: &Value) -> bool {
    v["metadata"]["deletionTimestamp"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
}

/// `metadata.finalizers`.
pub fn finalizers(v: &Value) -> Vec<String> {
    v["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Finalizers this project treats as Argo CD's own (`*argocd.argoproj.io*`): on the hub they are
/// satisfied once the agent reports the managed cluster's copy deleted.
pub fn is_argocd_finalizer(f: &str) -> bool {
    f.contains("argocd.argoproj.io")
}

/// A minimal AppProject naming a resource (for `delete`).
pub fn project_stub(name: &str, ns: &str, uid: &str) -> Value {
    json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject", "metadata": {"name": name, "namespace": ns, "uid": uid}})
}

/// Autonomous mode: the principal's form of an agent's AppProject: named `<agent>-<name>` in the
/// principal's namespace, destinations pointing at the agent (`name: <agent>`, server dropped),
/// `sourceNamespaces: [<agent>]` (the agent's Applications live in namespace `<agent>` on the
/// hub), labelled with the agent name, annotated with the source UID.
pub fn project_from_agent(p: &Value, agent: &str, principal_ns: &str) -> Value {
    let mut meta = portable_meta(p, principal_ns);
    meta["name"] = json!(format!("{agent}-{}", name(p)));
    let mut out = json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
        "metadata": meta, "spec": p["spec"].clone(),
    });
    if let Some(d) = out["spec"]["destinations"].as_array_mut() {
        for x in d.iter_mut() {
            if let Some(m) = x.as_object_mut() {
                m.remove("server");
                m.insert("name".into(), json!(agent));
            }
        }
    }
    out["spec"]["sourceNamespaces"] = json!([agent]);
    if !out["metadata"]["labels"].is_object() {
        out["metadata"]["labels"] = json!({});
    }
    out["metadata"]["labels"][AGENT_NAME_LABEL] = json!(agent);
    set_annotation(&mut out, SOURCE_UID, uid(p));
    out
}

/// Hash of what is synchronised of an AppProject: spec, labels, annotations.
pub fn project_hash(v: &Value) -> String {
    crate::checksum::hash_parts(&[
        &v["spec"],
        &v["metadata"]["labels"],
        &v["metadata"]["annotations"],
    ])
}

/// `request-update` for an AppProject.
pub fn request_update_project(
    source: &str,
    name: &str,
    ns: &str,
    uid: &str,
    checksum: &str,
) -> Event {
    crate::checksum::request_update(source, "AppProject", name, ns, uid, checksum)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `json_eq` answers what `==` answers, whether the maps share their key order or not.
    #[test]
    fn json_eq_agrees_with_eq_in_any_key_order() {
        let a = json!({"a": 1, "b": {"x": [1, {"y": "z"}], "w": null}, "c": "s"});
        let same = json!({"a": 1, "b": {"x": [1, {"y": "z"}], "w": null}, "c": "s"});
        let reordered = json!({"c": "s", "b": {"w": null, "x": [1, {"y": "z"}]}, "a": 1});
        let inner_diff = json!({"a": 1, "b": {"x": [1, {"y": "Z"}], "w": null}, "c": "s"});
        let reordered_diff = json!({"c": "s", "b": {"w": null, "x": [2, {"y": "z"}]}, "a": 1});
        let fewer = json!({"a": 1, "c": "s"});
        let float = json!({"a": 1.0, "b": {"x": [1, {"y": "z"}], "w": null}, "c": "s"});
        for (x, y) in [
            (&a, &same),
            (&a, &reordered),
            (&a, &inner_diff),
            (&a, &reordered_diff),
            (&a, &fewer),
            (&a, &float),
            (&json!([1, 2]), &json!([2, 1])),
            (&json!("s"), &json!("s")),
        ] {
            assert_eq!(json_eq(x, y), x == y, "{x} vs {y}");
            assert_eq!(json_eq(y, x), x == y, "{y} vs {x}");
        }
        assert!(json_eq(&a, &reordered));
        assert!(!json_eq(&a, &reordered_diff));
    }

    #[test]
    fn namespaced_application_keys_never_collide_with_other_targets() {
        // a namespace named like a target prefix stays an Application
        let k = app_qkey("appproject", "x");
        assert_eq!(parse_qkey(&k), (Target::Application, "appproject/x"));
        assert_eq!(split_ns_name("appproject/x"), Some(("appproject", "x")));
        assert_eq!(
            parse_qkey(&qkey(Target::AppProject, "x")),
            (Target::AppProject, "x")
        );
        assert_eq!(parse_qkey("gb"), (Target::Application, "gb"));
        assert_eq!(split_ns_name("gb"), None);
    }

    #[test]
    fn project_from_agent_is_prefixed_and_points_at_the_agent() {
        let p = json!({"metadata": {"name": "team", "namespace": "argocd", "uid": "u1"},
            "spec": {"destinations": [{"server": IN_CLUSTER_SERVER, "namespace": "*"}]}});
        let h = project_from_agent(&p, "edge-1", "argocd");
        assert_eq!(h["metadata"]["name"], "edge-1-team");
        assert_eq!(h["metadata"]["namespace"], "argocd");
        assert_eq!(
            h["spec"]["destinations"],
            json!([{"name": "edge-1", "namespace": "*"}])
        );
        assert_eq!(h["spec"]["sourceNamespaces"], json!(["edge-1"]));
        assert_eq!(h["metadata"]["labels"][AGENT_NAME_LABEL], "edge-1");
        assert_eq!(h["metadata"]["annotations"][SOURCE_UID], "u1");
    }
}
