//! Target `application`: events from the principal, local writes and the local/principal forms.

use std::sync::Arc;

use argocd_pull_ops::conflict::{NamespacedName, read_modify_write};
use serde_json::{Value, json};

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::spec_checksum;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects::{self as o, SOURCE_UID};
use argocd_pull_agent_core::session::{HandleError, Outbox};
use argocd_pull_agent_core::store::{Kind, StoreError, WRITE_ATTEMPTS};

use super::Inner;

/// Local form of a principal object: our namespace, destination in-cluster, source UID annotated,
/// no server-side metadata, no status. The spec and the operation are moved out of
/// `principal_obj` (its metadata stays: the identity check reads it after).
pub(super) fn to_local(principal_obj: &mut Value, ns: &str) -> Value {
    let mut l = application(
        o::portable_meta(principal_obj, ns),
        principal_obj["spec"].take(),
    );
    if l["spec"]["destination"].is_object() {
        let dns = l["spec"]["destination"]["namespace"].take();
        l["spec"]["destination"] = json!({"name": "in-cluster"});
        if !dns.is_null() {
            l["spec"]["destination"]["namespace"] = dns;
        }
    }
    if let Some(op) = principal_obj.get_mut("operation").filter(|v| !v.is_null()) {
        l["operation"] = op.take();
    }
    // finalizers (e.g. resources-finalizer.argocd.argoproj.io) are copied on creation, so that the
    // managed cluster's Argo CD cascades the deletion of the workload; later updates keep the
    // local finalizers (they belong to the local controllers)
    if let Some(f) = principal_obj["metadata"]["finalizers"]
        .as_array()
        .filter(|f| !f.is_empty())
    {
        l["metadata"]["finalizers"] = Value::Array(f.clone());
    }
    o::set_annotation(&mut l, SOURCE_UID, o::uid(principal_obj));
    l
}

/// A local object reduced to what the principal gave us.
pub(super) fn strip_local(obj: &Value) -> Value {
    application(
        o::portable_meta(obj, o::namespace(obj)),
        obj["spec"].clone(),
    )
}

/// An Application of `metadata` and `spec` (moved in: `json!` would copy them once more).
fn application(metadata: Value, spec: Value) -> Value {
    // room for the operation `to_local` may add
    let mut m = serde_json::Map::with_capacity(5);
    m.insert("apiVersion".into(), "argoproj.io/v1alpha1".into());
    m.insert("kind".into(), "Application".into());
    m.insert("metadata".into(), metadata);
    m.insert("spec".into(), spec);
    Value::Object(m)
}

/// Hash of what an autonomous agent reports: spec, status, operation, labels, annotations.
pub(super) fn report_hash(obj: &Value) -> String {
    argocd_pull_agent_core::checksum::hash_parts(&[
        &obj["spec"],
        &obj["status"],
        &obj["operation"],
        &obj["metadata"]["labels"],
        &obj["metadata"]["annotations"],
    ])
}

/// Payload of a managed status update.
pub(super) fn status_payload(obj: &Value) -> Value {
    let mut p = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "Application", "metadata": obj["metadata"].clone()});
    for k in ["status", "operation"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            p[k] = v.clone();
        }
    }
    p
}

/// What a managed agent reports: status, operation, and whether a refresh is pending.
pub(super) fn status_report_hash(obj: &Value) -> String {
    let (status, operation, refresh) = (&obj["status"], &obj["operation"], o::refresh(obj));
    if status.is_null() && operation.is_null() && refresh.is_empty() {
        // every Application the principal just created: hashed once per process
        static NOTHING: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            argocd_pull_agent_core::checksum::hash_parts(&[
                &Value::Null,
                &Value::Null,
                &Value::from(""),
            ])
        });
        return NOTHING.clone();
    }
    argocd_pull_agent_core::checksum::hash_parts(&[status, operation, &Value::from(refresh)])
}

impl Inner {
    /// Creates or updates the local object from `want` (local form). `created`: the principal
    /// created it (its operation is applied too), so it most likely does not exist here yet: it
    /// is created first (one request instead of a read and a create), read and updated only if
    /// it exists already.
    pub(super) async fn upsert_local(&self, want: &Value, created: bool) -> Result<(), StoreError> {
        if created {
            match self
                .store
                .create_only(Kind::Application, want.clone())
                .await
            {
                Err(StoreError::AlreadyExists) => {}
                r => return r,
            }
        }
        self.upsert(Kind::Application, want, created).await
    }

    /// Creates or updates the local object of `kind` from `want` (local form).
    pub(super) async fn upsert(
        &self,
        kind: Kind,
        want: &Value,
        with_op: bool,
    ) -> Result<(), StoreError> {
        self.upsert_with(kind, want, |cur| {
            let mut n = o::overlay(cur, want, false, false);
            if with_op && let Some(op) = want.get("operation").filter(|v| !v.is_null()) {
                n["operation"] = op.clone();
            }
            n
        })
        .await
    }

    /// Creates `want` in the agent's namespace, or replaces the current object with
    /// `overlay(current)` when that differs; retries conflicts a few times.
    pub(super) async fn upsert_with(
        &self,
        kind: Kind,
        want: &Value,
        overlay: impl Fn(&Value) -> Value,
    ) -> Result<(), StoreError> {
        // an Application's namespace is its own with destination-based mapping
        let ns = match kind == Kind::Application && self.cfg.destination_based_mapping {
            true => o::namespace(want),
            false => self.cfg.namespace.as_str(),
        };
        let name = o::name(want);
        let (store, overlay) = (&self.store, &overlay);
        read_modify_write(
            NamespacedName {
                namespace: ns,
                name,
            },
            WRITE_ATTEMPTS,
            StoreError::is_write_race,
            || store.get(kind, ns, name),
            |cur| async move {
                match cur {
                    None => store.create_only(kind, want.clone()).await,
                    Some(cur) => {
                        let n = overlay(&cur);
                        if o::json_eq(&n, &cur) {
                            Ok(())
                        } else {
                            store.replace_only(kind, n).await
                        }
                    }
                }
            },
        )
        .await
        .map_err(StoreError::from)
    }

    pub(super) async fn handle_event(
        self: &Arc<Self>,
        mut ev: Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        // destination-based mapping: an Application keeps the principal's namespace here
        let mapped = (self.cfg.destination_based_mapping
            && ev.target == Target::Application
            && ev.ty.is_resource_change())
        .then(|| {
            super::mapping::target_namespace(
                o::namespace(&ev.data),
                &self.principal_ns(),
                &self.cfg.namespace,
            )
        });
        let _g = if ev.ty.is_resource_change() {
            let key = match &mapped {
                Some((ns, _)) => o::app_qkey(ns, ev.name()),
                None => o::qkey(ev.target, ev.name()),
            };
            Some(self.locks.lock(&key).await)
        } else {
            None
        };
        let (ns, remapped) = mapped
            .clone()
            .unwrap_or_else(|| (self.cfg.namespace.clone(), false));
        argocd_pull_agent_core::validate::supported(&ev).map_err(HandleError::Permanent)?;
        if ev.target == Target::AppProject || ev.data["kind"] == "AppProject" {
            return self.handle_project_event(ev).await;
        }
        if let Some(dk) = argocd_pull_agent_core::repository::DataKind::from_target(ev.target) {
            return self.handle_data_event(dk, ev).await;
        }
        if let Some(k) = ev.data["kind"]
            .as_str()
            .filter(|k| argocd_pull_agent_core::repository::DataKind::from_resync_kind(k).is_some())
        {
            return Err(HandleError::Permanent(format!(
                "{} for kind {k} is not valid for an agent: it flows from the principal; nothing was changed",
                ev.ty.short()
            )));
        }
        if ev.ty.is_resource_change() && ev.target != Target::Application {
            return Err(HandleError::Permanent(format!(
                "unsupported target {:?}",
                ev.target.as_str()
            )));
        }
        match (self.cfg.mode, ev.ty) {
            (Mode::Managed, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                if o::deleting(&ev.data) {
                    return self.delete_for_principal(&ev.data, &ns).await;
                }
                if mapped.is_some() {
                    self.admit_namespace(&ns).await?;
                }
                let mut want = to_local(&mut ev.data, &ns);
                let principal_uid = ev
                    .extra_attrs
                    .get(argocd_pull_agent_core::event::attr::PRINCIPALUID)
                    .and_then(|v| v.as_text())
                    .unwrap_or_default();
                if !principal_uid.is_empty() {
                    o::set_annotation(
                        &mut want,
                        argocd_pull_agent_core::policy::PRINCIPAL_UID_ANNOTATION,
                        &principal_uid,
                    );
                }
                if remapped {
                    o::set_annotation(&mut want, super::mapping::NAMESPACE_REMAPPED, "true");
                }
                let name = self.lkey(&want);
                if !self
                    .settle_identity(&ev.data, &principal_uid, &ns, &name)
                    .await?
                {
                    return Ok(());
                }
                // the copy we keep has no operation; without one it is the object written here
                let want = Arc::new(want);
                let copy = match want.get("operation") {
                    Some(_) => {
                        let mut c = (*want).clone();
                        c.as_object_mut().map(|m| m.remove("operation"));
                        Arc::new(c)
                    }
                    None => want.clone(),
                };
                let old = self
                    .copies
                    .lock()
                    .expect("poisoned")
                    .insert(name.clone(), copy);
                if let Err(e) = self.upsert_local(&want, ev.ty == EventType::Create).await {
                    // what we hold is still the old copy: a resync asks for this one again
                    let mut g = self.copies.lock().expect("poisoned");
                    match old {
                        Some(o) => g.insert(name, o),
                        None => g.remove(&name),
                    };
                    return Err(e.into());
                }
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => {
                let name = ev.name().to_string();
                self.copies
                    .lock()
                    .expect("poisoned")
                    .remove(&self.lkey_of(&ns, &name));
                self.store.delete(Kind::Application, &ns, &name).await?;
                Ok(())
            }
            (_, EventType::SetOperation) => {
                let op = ev.data.get("operation").cloned().unwrap_or(Value::Null);
                if op.is_null() {
                    return Err(HandleError::Permanent(
                        "set-operation without .operation".into(),
                    ));
                }
                match self
                    .store
                    .merge_patch(Kind::Application, &ns, ev.name(), json!({"operation": op}))
                    .await
                {
                    Err(StoreError::NotFound) => Err(HandleError::Permanent(format!(
                        "application {} not found",
                        ev.name()
                    ))),
                    r => r.map(|_| ()).map_err(Into::into),
                }
            }
            (_, EventType::TerminateOperation) => {
                match self
                    .store
                    .merge_patch(
                        Kind::Application,
                        &ns,
                        ev.name(),
                        json!({"status": {"operationState": {"phase": "Terminating"}}}),
                    )
                    .await
                {
                    Err(StoreError::NotFound) => Err(HandleError::Permanent(format!(
                        "application {} not found",
                        ev.name()
                    ))),
                    r => r.map(|_| ()).map_err(Into::into),
                }
            }
            (Mode::Autonomous, EventType::SpecUpdate) => {
                // the principal forwards what the hub may trigger on an autonomous agent's
                // application: the refresh annotation (the spec stays the agent's)
                let r = o::refresh(&ev.data);
                if r.is_empty() {
                    return Ok(());
                }
                match self
                    .store
                    .merge_patch(
                        Kind::Application,
                        &ns,
                        ev.name(),
                        json!({"metadata": {"annotations": {o::REFRESH: r}}}),
                    )
                    .await
                {
                    Err(StoreError::NotFound) => Err(HandleError::Permanent(format!(
                        "application {} not found",
                        ev.name()
                    ))),
                    r => r.map(|_| ()).map_err(Into::into),
                }
            }
            (Mode::Managed, EventType::RequestResourceResync) => {
                self.answer_resource_resync(out).await;
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                match self.store.get(Kind::Application, &ns, &name).await? {
                    None => {
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push(EventType::Delete, &o::stub(&name, &ns, uid));
                    }
                    Some(obj) => {
                        if spec_checksum(&obj) != checksum {
                            self.sent
                                .lock()
                                .expect("poisoned")
                                .insert(name, report_hash(&obj));
                            self.push(EventType::SpecUpdate, &obj);
                        }
                    }
                }
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestSyncedResourceList) => {
                self.answer_synced_list(&ev, out).await
            }
            (Mode::Autonomous, EventType::RequestResourceResync) => Ok(()),
            (m, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for a {} agent",
                t.short(),
                m.as_str()
            ))),
        }
    }

    /// Managed: applies the source-UID mismatch and adoption policies to the Application the
    /// agent has under `name` before the principal's is written. `false`: leave it alone (adoption
    /// refused, reported to the principal as an `error`).
    async fn settle_identity(
        &self,
        incoming: &Value,
        principal_uid: &str,
        ns: &str,
        key: &str,
    ) -> Result<bool, HandleError> {
        use argocd_pull_agent_core::policy::{self, AdoptionPolicy, Identity, MismatchPolicy};
        let name = o::name(incoming);
        let existing = self.store.get(Kind::Application, ns, name).await?;
        match policy::identity_from(
            incoming,
            existing.as_ref(),
            principal_uid,
            self.cfg.mismatch_policy,
            self.cfg.adoption_policy,
        ) {
            Identity::Adopt(AdoptionPolicy::Never) => {
                tracing::info!(app = %name, "existing application is not adopted (adoption policy never)");
                self.copies.lock().expect("poisoned").remove(key);
                self.push_error(Target::Application, name, ns, policy::ADOPTION_REFUSED);
                Ok(false)
            }
            Identity::Mismatch(MismatchPolicy::Recreate) => {
                tracing::info!(app = %name, "source UID mismatch: recreating the application");
                self.copies.lock().expect("poisoned").remove(key);
                self.store.delete(Kind::Application, ns, name).await?;
                if self.store.get(Kind::Application, ns, name).await?.is_some() {
                    return Err(HandleError::Retryable(format!(
                        "{ns}/{name} is being deleted (finalizers) before it is recreated"
                    )));
                }
                Ok(true)
            }
            Identity::Transition => {
                tracing::info!(app = %name, principal = principal_uid, "the Application comes from another principal (HA failover): adopting its identity in place");
                Ok(true)
            }
            Identity::Apply | Identity::Adopt(_) | Identity::Mismatch(_) => Ok(true),
        }
    }

    /// Destination-based mapping: Applications may only be written in the agent's namespace
    /// and `--allowed-namespaces`; `--create-namespace` creates a missing one (peer:
    /// `createApplication`/`updateApplication`).
    async fn admit_namespace(&self, ns: &str) -> Result<(), HandleError> {
        if !super::mapping::namespace_allowed(ns, &self.cfg.namespace, &self.cfg.allowed_namespaces)
        {
            return Err(HandleError::Permanent(format!(
                "namespace {ns} is not permitted: not in allowed namespaces list (add it to --allowed-namespaces / ARGOCD_AGENT_ALLOWED_NAMESPACES); the Application was not written"
            )));
        }
        if self.cfg.create_namespace {
            self.store.ensure_namespace(ns).await?;
        }
        Ok(())
    }

    /// Managed: the principal's Application carries a deletionTimestamp. Deletes the local copy in
    /// the foreground (its finalizers let the local Argo CD remove the workload first) and reports
    /// `delete` once it is gone.
    pub(super) async fn delete_for_principal(
        self: &Arc<Self>,
        hub: &Value,
        ns: &str,
    ) -> Result<(), HandleError> {
        let name = o::name(hub).to_string();
        let key = self.lkey_of(ns, &name);
        self.copies.lock().expect("poisoned").remove(&key);
        self.deleting.lock().expect("poisoned").insert(key.clone());
        match self.store.get(Kind::Application, ns, &name).await? {
            None => {
                // already gone (e.g. deleted while we were disconnected): report at once
                self.deleting.lock().expect("poisoned").remove(&key);
                let mut stub = o::stub(&name, ns, "");
                if self.cfg.destination_based_mapping && ns != o::namespace(hub) {
                    // remapped (destination-based mapping): the principal maps it back
                    o::set_annotation(&mut stub, super::mapping::NAMESPACE_REMAPPED, "true");
                }
                self.push(EventType::Delete, &stub);
            }
            Some(_) => {
                tracing::info!(app = %name, "principal deletes the application; deleting in the foreground");
                self.store.delete(Kind::Application, ns, &name).await?;
            }
        }
        Ok(())
    }
}
