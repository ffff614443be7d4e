//! Validation of received object payloads before anything is written.
//!
//! The peer decodes every `application`/`appproject` payload into its Go type
//! (`ev.DataAs(&v1alpha1.Application{})`), so a payload whose fields have the wrong JSON types
//! never reaches its backend. We keep payloads as JSON, so the same gate is explicit here: the
//! fields both sides read must have the types of the Argo CD CRDs, the object must be named with
//! a valid Kubernetes name, and that name must be the one the event is about (its `subject`);
//! otherwise the event is refused with an `error` reply and nothing is written.

use serde_json::Value;

use crate::event::{Event, Target};

/// Whether `ev` carries an object that must be validated (object events of targets
/// `application` and `appproject`).
pub fn applies(ev: &Event) -> bool {
    matches!(
        ev.target,
        Target::Application | Target::AppProject | Target::Repository | Target::GpgKey
    ) && ev.ty.is_resource_change()
}

/// Checks the payload of an object event; `Err` names the field, what is wrong and the fix.
pub fn check(ev: &Event) -> Result<(), String> {
    let kind = match ev.target {
        Target::AppProject => "AppProject",
        Target::Repository => "Secret",
        Target::GpgKey => "ConfigMap",
        _ => "Application",
    };
    let obj = ev.data.as_object().ok_or_else(|| {
        format!(
            "payload of a {kind} event must be a JSON object, got {}",
            ty(&ev.data)
        )
    })?;
    if let Some(k) = obj.get("kind").and_then(Value::as_str)
        && k != kind
    {
        return Err(format!(
            "payload kind {k:?} does not match the event target {:?} (want kind {kind:?})",
            ev.target.as_str()
        ));
    }
    let meta = field(&ev.data, "metadata", Want::Object)?.ok_or_else(|| {
        format!("{kind} payload has no metadata; send the object with metadata.name")
    })?;
    let name = field(meta, "name", Want::String)?
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(format!("{kind} payload has no metadata.name"));
    }
    if let Err(e) = dns1123_subdomain(name) {
        return Err(format!(
            "metadata.name {name:?} is not a valid Kubernetes name: {e}"
        ));
    }
    field(meta, "namespace", Want::String)?;
    for m in ["labels", "annotations"] {
        if let Some(map) = field(meta, m, Want::Object)? {
            for (k, v) in map.as_object().into_iter().flatten() {
                if !v.is_string() {
                    return Err(format!("metadata.{m}.{k} must be a string, got {}", ty(v)));
                }
            }
        }
    }
    let subject_name = ev.name();
    if !subject_name.is_empty() && subject_name != name {
        return Err(format!(
            "metadata.name {name:?} differs from the event subject {:?}; an event may only carry the object it is about",
            ev.subject
        ));
    }
    if ev.target == Target::GpgKey {
        // ConfigMap data: plain strings
        if let Some(data) = field(&ev.data, "data", Want::Object)? {
            for (k, v) in data.as_object().into_iter().flatten() {
                if !v.is_string() {
                    return Err(format!("data.{k} must be a string, got {}", ty(v)));
                }
            }
        }
        return Ok(());
    }
    if ev.target == Target::Repository {
        field(&ev.data, "type", Want::String)?;
        if let Some(data) = field(&ev.data, "data", Want::Object)? {
            for (k, v) in data.as_object().into_iter().flatten() {
                match v.as_str() {
                    Some(s) if is_base64(s) => {}
                    // the value is never quoted: it is a credential
                    Some(_) => {
                        return Err(format!(
                            "data.{k} is not standard base64 (a Go []byte); send the bytes base64-encoded"
                        ));
                    }
                    None => {
                        return Err(format!(
                            "data.{k} must be a base64 string (a Go []byte), got {}",
                            ty(v)
                        ));
                    }
                }
            }
        }
        return Ok(());
    }
    let spec = field(&ev.data, "spec", Want::Object)?;
    field(&ev.data, "status", Want::Object)?;
    field(&ev.data, "operation", Want::Object)?;
    if let Some(spec) = spec {
        let fields: &[(&str, Want)] = match ev.target {
            Target::AppProject => &[
                ("sourceRepos", Want::Strings),
                ("destinations", Want::Objects),
                ("sourceNamespaces", Want::Strings),
                ("roles", Want::Objects),
                ("description", Want::String),
            ],
            _ => &[
                ("project", Want::String),
                ("source", Want::Object),
                ("sources", Want::Objects),
                ("destination", Want::Object),
                ("syncPolicy", Want::Object),
            ],
        };
        for (f, want) in fields {
            field(spec, f, *want).map_err(|e| format!("spec.{e}"))?;
        }
    }
    Ok(())
}

/// Events of the peer's protocol that this project decodes but does not act on (resource and
/// Redis proxies, container logs, terminals, cluster cache info, ApplicationSets): `Err` is the message of the `error` reply. The peer ACKs an event once processed;
/// we cannot process these, so they are refused by name — never dropped, never ACKed as done.
pub fn supported(ev: &Event) -> Result<(), String> {
    let what = match ev.target {
        Target::Resource => "the resource proxy",
        Target::Redis => "the Redis proxy",
        Target::ContainerLog => "container logs",
        Target::Terminal => "web terminals",
        Target::ClusterCacheInfoUpdate => "cluster cache info",
        Target::ApplicationSet => "ApplicationSets",
        _ => return Ok(()),
    };
    Err(format!(
        "event {} for target {:?} is not supported: argocd-pull does not implement {what}; nothing was done",
        ev.ty.short(),
        ev.target.as_str()
    ))
}

fn is_base64(s: &str) -> bool {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).is_ok()
}

#[derive(Clone, Copy)]
enum Want {
    Object,
    String,
    Strings,
    Objects,
}

/// `obj[name]` if present and not null; `Err` when it has the wrong JSON type.
fn field<'a>(obj: &'a Value, name: &str, want: Want) -> Result<Option<&'a Value>, String> {
    let Some(v) = obj.get(name).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let ok = match want {
        Want::Object => v.is_object(),
        Want::String => v.is_string(),
        Want::Strings => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        Want::Objects => v.as_array().is_some_and(|a| a.iter().all(Value::is_object)),
    };
    if ok {
        Ok(Some(v))
    } else {
        let w = match want {
            Want::Object => "an object",
            Want::String => "a string",
            Want::Strings => "an array of strings",
            Want::Objects => "an array of objects",
        };
        Err(format!("{name} must be {w}, got {}", ty(v)))
    }
}

fn ty(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Kubernetes' `IsDNS1123Subdomain` (object names of Applications and AppProjects).
fn dns1123_subdomain(n: &str) -> Result<(), &'static str> {
    if n.len() > 253 {
        return Err("longer than 253 characters");
    }
    for label in n.split('.') {
        let b = label.as_bytes();
        let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        if b.is_empty()
            || !alnum(&b[0])
            || !alnum(&b[b.len() - 1])
            || !b.iter().all(|c| alnum(c) || *c == b'-')
        {
            return Err(
                "use lower-case letters, digits, '-' and '.', starting and ending with a letter or digit",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use serde_json::json;

    fn ev(target: Target, data: Value) -> Event {
        Event::for_object("t", EventType::Create, target, &data)
    }

    #[test]
    fn valid_objects_pass_and_wrong_types_are_named() {
        let app = json!({"metadata": {"name": "guestbook", "namespace": "argocd", "labels": {"a": "b"}},
                         "spec": {"project": "default", "source": {"repoURL": "x"}, "destination": {"name": "in-cluster"}}});
        assert_eq!(check(&ev(Target::Application, app.clone())), Ok(()));
        let mut bad = app.clone();
        bad["spec"] = json!("not an object");
        assert_eq!(
            check(&ev(Target::Application, bad)).unwrap_err(),
            "spec must be an object, got a string"
        );
        let mut bad = app.clone();
        bad["spec"]["destination"] = json!(["x"]);
        assert_eq!(
            check(&ev(Target::Application, bad)).unwrap_err(),
            "spec.destination must be an object, got an array"
        );
        let mut bad = app.clone();
        bad["metadata"]["labels"]["a"] = json!(1);
        assert!(
            check(&ev(Target::Application, bad))
                .unwrap_err()
                .contains("metadata.labels.a")
        );
        let proj = json!({"metadata": {"name": "p"}, "spec": {"sourceRepos": ["*"], "destinations": [{"server": "*"}]}});
        assert_eq!(check(&ev(Target::AppProject, proj.clone())), Ok(()));
        let mut bad = proj;
        bad["spec"]["sourceRepos"] = json!("*");
        assert!(
            check(&ev(Target::AppProject, bad))
                .unwrap_err()
                .contains("spec.sourceRepos")
        );
    }

    #[test]
    fn names_must_be_kubernetes_names_and_match_the_subject() {
        let e = ev(
            Target::Application,
            json!({"metadata": {"namespace": "argocd"}}),
        );
        assert!(check(&e).unwrap_err().contains("no metadata.name"));
        let e = ev(
            Target::Application,
            json!({"metadata": {"name": "Bad_Name"}}),
        );
        assert!(
            check(&e)
                .unwrap_err()
                .contains("not a valid Kubernetes name")
        );
        let e = ev(
            Target::Application,
            json!({"metadata": {"name": "x".repeat(254)}}),
        );
        assert!(check(&e).unwrap_err().contains("253"));
        let mut e = ev(Target::Application, json!({"metadata": {"name": "a"}}));
        e.subject = "argocd/b".into();
        assert!(
            check(&e)
                .unwrap_err()
                .contains("differs from the event subject")
        );
        let e = ev(
            Target::Application,
            json!({"kind": "AppProject", "metadata": {"name": "a"}}),
        );
        assert!(
            check(&e)
                .unwrap_err()
                .contains("does not match the event target")
        );
        let e = ev(Target::Application, json!([1]));
        assert!(check(&e).unwrap_err().contains("must be a JSON object"));
    }
}
