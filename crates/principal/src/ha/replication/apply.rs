//! The replica's writes: a replicated object (from a snapshot or an event, ours or the peer's)
//! into the replica's hub. What to write is computed by pure functions; [`Writer`] talks to the
//! store.
//!
//! * Every object written carries the annotation [`REPLICATED`]: only such objects are ever
//!   deleted because the primary no longer has them (objects made on the replica's hub by hand
//!   are left alone).
//! * Server-side metadata (uid, resourceVersion, managedFields, ownerReferences — another
//!   cluster's UIDs) is dropped; labels, annotations, finalizers, spec, status and operation are
//!   the primary's.
//! * A replicated deletion removes the object's finalizers first: nothing on the replica's hub
//!   would ever complete them. An object the primary is deleting (deletionTimestamp, finalizers
//!   pending) is deleted here too, so it waits with its finalizers as on the primary.
//! * Events from the peer's primary come in its two directions: `outbound` (what it sent to an
//!   agent: the hub object) and `inbound` (what an agent sent: a managed agent's status, an
//!   autonomous agent's own Application or AppProject). Inbound objects are turned into the hub
//!   form the principal keeps (namespace = agent, project prefixed) before they are written.

use std::sync::Arc;

use argocd_pull_ops::conflict::{NamespacedName, read_modify_write};
use serde_json::{Map, Value, json};

use argocd_pull_agent_core::event::EventType;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::store::{Kind, Store, StoreError};

use super::written::Written;

use super::source::RKind;

/// Marks an object written by replication.
pub const REPLICATED: &str = "argocd-pull.open-cluster-management.io/replicated";

/// What one replicated change asks of the replica's hub.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Create or update to this object (replica form), keeping the current `operation` when the
    /// object has none (the peer's spec-update strips it).
    Upsert {
        kind: RKind,
        obj: Value,
        keep_operation: bool,
        /// the primary is deleting it (deletionTimestamp): delete it here too after the write
        deleting: bool,
    },
    /// Set status and operation (and labels/annotations) of `namespace/name`.
    Status {
        namespace: String,
        name: String,
        obj: Value,
    },
    /// Remove finalizers and delete.
    Delete {
        kind: RKind,
        namespace: String,
        name: String,
    },
    /// Nothing to do here (logged at debug).
    Skip(&'static str),
}

/// The replica form of a primary object: portable metadata, the marker, every other top-level
/// field (spec, status, operation, data, type, …).
pub fn replica_form(kind: RKind, obj: &Value) -> Value {
    let m = &obj["metadata"];
    let mut meta = Map::new();
    meta.insert("name".into(), m["name"].clone());
    if !m["namespace"].is_null() {
        meta.insert("namespace".into(), m["namespace"].clone());
    }
    for k in ["labels", "annotations", "finalizers"] {
        if !m[k].is_null() {
            meta.insert(k.into(), m[k].clone());
        }
    }
    let mut out = Map::new();
    let (api, k) = match kind {
        RKind::Repository | RKind::ClusterSecret => ("v1", "Secret"),
        _ => ("argoproj.io/v1alpha1", kind.as_str()),
    };
    out.insert("apiVersion".into(), json!(api));
    out.insert("kind".into(), json!(k));
    out.insert("metadata".into(), Value::Object(meta));
    if let Some(src) = obj.as_object() {
        for (k, v) in src {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") && !v.is_null() {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    let mut v = Value::Object(out);
    o::set_annotation(&mut v, REPLICATED, "true");
    v
}

/// An autonomous agent's own Application as the principal keeps it on the hub (the peer's
/// `processApplicationEvent`): namespace = agent, project prefixed, destination the agent's
/// cluster by name, source-uid = the agent's UID.
fn autonomous_hub_app(agent: &str, obj: &Value) -> Value {
    let mut h = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": o::portable_meta(obj, agent),
        "spec": obj["spec"].clone(),
    });
    if let Some(p) = obj["spec"]["project"].as_str() {
        h["spec"]["project"] = Value::String(format!("{agent}-{p}"));
    }
    if let Some(d) = h["spec"]["destination"].as_object_mut() {
        d.remove("server");
        d.insert("name".into(), Value::String(agent.to_string()));
    }
    for k in ["status", "operation"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            h[k] = v.clone();
        }
    }
    o::set_annotation(&mut h, o::SOURCE_UID, o::uid(obj));
    h
}

/// What a snapshot resource asks for.
pub fn for_resource(kind: RKind, data: &Value) -> Write {
    if o::name(data).is_empty() {
        return Write::Skip("no metadata.name");
    }
    Write::Upsert {
        kind,
        obj: replica_form(kind, data),
        keep_operation: false,
        deleting: o::deleting(data),
    }
}

/// What a replicated event asks for. `principal_ns`: the replica's principal namespace (where
/// AppProjects of autonomous agents live).
pub fn for_event(
    kind: RKind,
    ty: EventType,
    inbound: bool,
    agent: &str,
    data: &Value,
    principal_ns: &str,
) -> Write {
    let name = o::name(data).to_string();
    if name.is_empty() {
        return Write::Skip("no metadata.name");
    }
    if inbound && !agent.is_empty() {
        // what an agent sent the primary
        return match (kind, ty) {
            (RKind::Application, EventType::StatusUpdate) => Write::Status {
                namespace: agent.to_string(),
                name,
                obj: data.clone(),
            },
            (RKind::Application, EventType::Create | EventType::SpecUpdate) => Write::Upsert {
                kind,
                obj: replica_form(kind, &autonomous_hub_app(agent, data)),
                keep_operation: false,
                deleting: o::deleting(data),
            },
            (RKind::Application, EventType::Delete) => Write::Delete {
                kind,
                namespace: agent.to_string(),
                name,
            },
            (RKind::AppProject, EventType::Create | EventType::SpecUpdate) => Write::Upsert {
                kind,
                obj: replica_form(kind, &o::project_from_agent(data, agent, principal_ns)),
                keep_operation: false,
                deleting: false,
            },
            (RKind::AppProject, EventType::Delete) => Write::Delete {
                kind,
                namespace: principal_ns.to_string(),
                name: format!("{agent}-{name}"),
            },
            _ => Write::Skip("inbound event without a hub change"),
        };
    }
    let namespace = o::namespace(data).to_string();
    match ty {
        EventType::Create | EventType::SpecUpdate | EventType::TerminateOperation => {
            Write::Upsert {
                kind,
                obj: replica_form(kind, data),
                keep_operation: kind == RKind::Application && data.get("operation").is_none(),
                deleting: o::deleting(data),
            }
        }
        EventType::SetOperation | EventType::StatusUpdate if kind == RKind::Application => {
            Write::Status {
                namespace,
                name,
                obj: data.clone(),
            }
        }
        EventType::Delete => Write::Delete {
            kind,
            namespace,
            name,
        },
        _ => Write::Skip("event type without a hub change"),
    }
}

/// `cur` updated to `want` (replica form): metadata labels/annotations/finalizers and every
/// other field replaced; the current operation kept when asked and `want` has none.
pub fn merged(cur: &Value, want: &Value, keep_operation: bool) -> Value {
    let mut n = cur.clone();
    let Some(nm) = n.as_object_mut() else {
        return want.clone();
    };
    let keep_op = keep_operation
        .then(|| cur.get("operation").cloned())
        .flatten();
    nm.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata"));
    for (k, v) in want.as_object().into_iter().flatten() {
        if k != "metadata" {
            nm.insert(k.clone(), v.clone());
        }
    }
    if let Some(op) = keep_op.filter(|_| want.get("operation").is_none()) {
        nm.insert("operation".into(), op);
    }
    let meta = nm
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .expect("metadata is an object");
    for k in ["labels", "annotations", "finalizers"] {
        match want["metadata"].get(k) {
            Some(v) => {
                meta.insert(k.into(), v.clone());
            }
            None => {
                meta.remove(k);
            }
        }
    }
    meta.remove("ownerReferences");
    n
}

/// `cur` with status and operation from `obj` (a replicated status-update), labels and
/// annotations too (the peer's `UpdateStatus`), the marker kept.
pub fn with_status(cur: &Value, obj: &Value) -> Value {
    let mut n = cur.clone();
    for k in ["status", "operation"] {
        match obj.get(k).filter(|v| !v.is_null()) {
            Some(v) => n[k] = v.clone(),
            None => {
                n.as_object_mut().map(|m| m.remove(k));
            }
        }
    }
    for k in ["labels", "annotations"] {
        if let Some(v) = obj["metadata"].get(k).filter(|v| v.is_object()) {
            n["metadata"][k] = v.clone();
        }
    }
    o::set_annotation(&mut n, REPLICATED, "true");
    n
}

/// Writes replicated changes into the replica's hub.
#[derive(Clone)]
pub struct Writer {
    pub store: Arc<dyn Store>,
    pub metrics: Arc<Metrics>,
    written: Arc<Written>,
}

/// How many times a write is tried before a change that keeps conflicting counts as failed.
const WRITE_ATTEMPTS: u32 = 8;

impl Writer {
    pub fn new(store: Arc<dyn Store>, metrics: Arc<Metrics>) -> Self {
        Writer {
            store,
            metrics,
            written: Arc::default(),
        }
    }

    async fn ensure_namespace(&self, ns: &str) -> Result<(), StoreError> {
        if ns.is_empty() || self.written.namespace_known(ns) {
            return Ok(());
        }
        self.store.ensure_namespace(ns).await?;
        self.written.namespace_exists(ns);
        Ok(())
    }

    /// The object as the hub holds it: what the last write returned, else read.
    async fn current(&self, sk: Kind, ns: &str, name: &str) -> Result<Option<Value>, StoreError> {
        match self.written.object(sk, ns, name) {
            Some(v) => Ok(Some(v)),
            None => self.store.get(sk, ns, name).await,
        }
    }

    /// Applies one write; `Err` only for what retrying later may fix.
    pub async fn apply(&self, w: &Write) -> Result<(), StoreError> {
        let r = match w {
            Write::Skip(why) => {
                tracing::debug!(why, "replicated event skipped");
                Ok(())
            }
            Write::Upsert {
                kind,
                obj,
                keep_operation,
                deleting,
            } => self.upsert(*kind, obj, *keep_operation, *deleting).await,
            Write::Status {
                namespace,
                name,
                obj,
            } => self.status(namespace, name, obj).await,
            Write::Delete {
                kind,
                namespace,
                name,
            } => self.delete(*kind, namespace, name).await,
        };
        if let Err(e) = &r {
            let (kind, op) = match w {
                Write::Upsert { kind, .. } => (kind.as_str(), "upsert"),
                Write::Status { .. } => ("Application", "status_update"),
                Write::Delete { kind, .. } => (kind.as_str(), "delete"),
                Write::Skip(_) => ("", ""),
            };
            self.metrics.ha.record_resource_error(kind, op);
            tracing::warn!(kind, operation = op, error = %e, "HA: failed to write a replicated resource");
        }
        r
    }

    async fn upsert(
        &self,
        kind: RKind,
        want: &Value,
        keep_op: bool,
        deleting: bool,
    ) -> Result<(), StoreError> {
        let sk = kind.store_kind();
        let (ns, name) = (o::namespace(want), o::name(want));
        let v = read_modify_write(
            NamespacedName {
                namespace: ns,
                name,
            },
            WRITE_ATTEMPTS,
            StoreError::is_write_race,
            || async move {
                // what was taken from memory rather than read (a NotFound then retries once, read)
                let remembered =
                    self.written.namespace_known(ns) || self.written.object(sk, ns, name).is_some();
                self.ensure_namespace(ns).await?;
                Ok((remembered, self.current(sk, ns, name).await?))
            },
            |(remembered, cur)| async move {
                let r = match cur {
                    None => self.store.create(sk, want.clone()).await,
                    Some(cur) => {
                        let n = merged(&cur, want, keep_op);
                        if n == cur {
                            Ok(cur)
                        } else {
                            self.store.replace(sk, n).await
                        }
                    }
                };
                match r {
                    Err(e) if e.is_write_race() => {
                        self.written.forget(sk, ns, name);
                        Err(e)
                    }
                    // the namespace was deleted since it was seen, or a remembered object was:
                    // what was remembered is stale, retried as a conflict
                    Err(StoreError::NotFound) if remembered => {
                        self.written.namespace_gone(ns);
                        self.written.forget(sk, ns, name);
                        Err(StoreError::Conflict(format!(
                            "{ns}/{name}: remembered but gone"
                        )))
                    }
                    r => r,
                }
            },
        )
        .await?;
        if deleting {
            self.written.forget(sk, ns, name);
            self.store.delete(sk, ns, name).await?;
        } else {
            self.written.wrote(sk, v);
        }
        Ok(())
    }

    async fn status(&self, ns: &str, name: &str, obj: &Value) -> Result<(), StoreError> {
        let sk = RKind::Application.store_kind();
        read_modify_write(
            NamespacedName {
                namespace: ns,
                name,
            },
            WRITE_ATTEMPTS,
            StoreError::is_conflict,
            || self.current(sk, ns, name),
            |cur| async move {
                let Some(cur) = cur else {
                    // not here (yet): the object's own event or the next snapshot brings it
                    return Ok(());
                };
                let n = with_status(&cur, obj);
                if n == cur {
                    return Ok(());
                }
                match self.store.replace(sk, n).await {
                    Err(e) if e.is_conflict() => {
                        self.written.forget(sk, ns, name);
                        Err(e)
                    }
                    // deleted since it was last written: nothing to set a status on
                    Err(StoreError::NotFound) => {
                        self.written.forget(sk, ns, name);
                        Ok(())
                    }
                    Ok(v) => {
                        self.written.wrote(sk, v);
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            },
        )
        .await
        .map_err(StoreError::from)
    }

    async fn delete(&self, kind: RKind, ns: &str, name: &str) -> Result<(), StoreError> {
        let sk = kind.store_kind();
        self.written.forget(sk, ns, name);
        if let Some(cur) = self.store.get(sk, ns, name).await?
            && !o::finalizers(&cur).is_empty()
        {
            match self
                .store
                .merge_patch(sk, ns, name, json!({"metadata": {"finalizers": null}}))
                .await
            {
                Ok(_) | Err(StoreError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        self.store.delete(sk, ns, name).await
    }
}

#[cfg(test)]
mod tests;
