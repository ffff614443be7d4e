//! Target `application`: events from an agent, hub writes, hub/agent forms, finalizers.

use std::sync::Arc;

use argocd_pull_ops::conflict::{NamespacedName, read_modify_write};
use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::spec_checksum;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects::{self as o, SOURCE_UID};
use argocd_pull_agent_core::session::{HandleError, Outbox};
use argocd_pull_agent_core::store::{Kind, StoreError, WRITE_ATTEMPTS};

use super::{AgentState, Inner, View};

impl Inner {
    /// Writes `want` (hub form) over the hub object; retries conflicts a few times.
    pub(super) async fn write_hub(
        &self,
        want: &Value,
        with_status: bool,
    ) -> Result<(), StoreError> {
        self.write_obj(Kind::Application, want, with_status).await
    }

    /// Writes `want` over the hub object of `kind`; retries conflicts a few times.
    pub(super) async fn write_obj(
        &self,
        kind: Kind,
        want: &Value,
        with_status: bool,
    ) -> Result<(), StoreError> {
        let (ns, name) = (o::namespace(want), o::name(want));
        let (store, metrics) = (&self.store, &self.metrics);
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
                    None => store.create(kind, want.clone()).await.map(|_| {
                        metrics.hub_write(kind.as_str(), "created");
                    }),
                    Some(cur) => {
                        let mut n = o::overlay(&cur, want, with_status, with_status);
                        // an autonomous agent's copy is the truth for the refresh trigger too:
                        // once its Argo CD has refreshed (annotation gone there), it goes here
                        if kind == Kind::Application
                            && o::annotation(want, o::REFRESH).is_none()
                            && let Some(a) = n["metadata"]["annotations"].as_object_mut()
                        {
                            a.remove(o::REFRESH);
                        }
                        if n == cur {
                            Ok(())
                        } else {
                            store.replace(kind, n).await.map(|_| {
                                metrics.hub_write(kind.as_str(), "updated");
                            })
                        }
                    }
                }
            },
        )
        .await
        .map_err(StoreError::from)
    }

    /// `--namespace-create-enable`: the hub namespace of an autonomous agent, created (with
    /// `--namespace-create-labels`) when its name matches `--namespace-create-pattern`.
    async fn create_agent_namespace(&self, agent: &str) -> Result<(), StoreError> {
        let Some(nc) = &self.cfg.namespace_create else {
            return Ok(());
        };
        if nc.pattern.as_ref().is_some_and(|p| !p.is_match(agent)) {
            return Ok(());
        }
        self.store
            .ensure_namespace_labelled(agent, &nc.labels)
            .await
    }

    /// Hub form of an autonomous agent's application, as the peer's `processApplicationEvent`:
    /// namespace = agent, project prefixed, destination = the agent's mapped cluster by name
    /// (server dropped), child Applications in `status.resources` in the agent's namespace;
    /// ownerReferences are never copied.
    pub(super) fn to_hub_form(&self, agent: &str, obj: &Value) -> Value {
        let mut h = serde_json::json!({
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
            d.insert("name".into(), Value::String(self.hub.cluster_name(agent)));
        }
        for k in ["status", "operation"] {
            if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
                h[k] = v.clone();
            }
        }
        if let Some(rs) = h["status"]["resources"].as_array_mut() {
            for r in rs {
                if r["group"] == "argoproj.io" && r["kind"] == "Application" {
                    r["namespace"] = Value::String(agent.to_string());
                }
            }
        }
        o::set_annotation(&mut h, SOURCE_UID, o::uid(obj));
        h
    }

    /// The agent's view of a hub object of an autonomous agent (project prefix removed).
    pub(super) fn to_agent_form(&self, agent: &str, h: &Value) -> Value {
        let mut a = h.clone();
        if let Some(p) = h["spec"]["project"].as_str()
            && let Some(orig) = p.strip_prefix(&format!("{agent}-"))
        {
            a["spec"]["project"] = Value::String(orig.to_string());
        }
        a
    }

    pub(super) async fn handle_event(
        self: &Arc<Self>,
        a: &Arc<AgentState>,
        ev: Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let _g = if ev.ty.is_resource_change() {
            Some(a.locks.lock(&o::qkey(ev.target, ev.name())).await)
        } else {
            None
        };
        let mode = *a.mode.lock().expect("poisoned");
        let agent = a.name.as_str();
        argocd_pull_agent_core::validate::supported(&ev).map_err(HandleError::Permanent)?;
        if ev.target == Target::AppProject || ev.data["kind"] == "AppProject" {
            return self.handle_project_event(a, mode, ev).await;
        }
        if ev.ty == EventType::RequestUpdate
            && let Some(dk) = ev.data["kind"]
                .as_str()
                .and_then(argocd_pull_agent_core::repository::DataKind::from_resync_kind)
        {
            return self.handle_data_request_update(a, mode, dk, ev).await;
        }
        if argocd_pull_agent_core::repository::DataKind::from_target(ev.target).is_some() {
            return Err(HandleError::Permanent(format!(
                "event {} for target {:?} is not valid from an agent: it flows from the principal to managed agents only; nothing was done",
                ev.ty.short(),
                ev.target.as_str()
            )));
        }
        if ev.target != Target::Application && ev.ty.is_resource_change() {
            return Err(HandleError::Permanent(format!(
                "unsupported target {:?} for {}",
                ev.target.as_str(),
                ev.ty.short()
            )));
        }
        match (mode, ev.ty) {
            (Mode::Managed, EventType::StatusUpdate) => {
                let name = ev.name().to_string();
                let hub = match self.mapped(a) {
                    true => {
                        let nss = self.reported_namespaces(agent, &ev.data);
                        self.mapped_hub_app(agent, &nss, &name).await?
                    }
                    false => self.store.get(Kind::Application, agent, &name).await?,
                };
                let Some(h) = hub else {
                    return Ok(()); // deleted on the hub meanwhile
                };
                let vkey = self.view_key(a, o::namespace(&h), &name);
                let mut n = h.clone();
                match ev.data.get("status") {
                    Some(s) if !s.is_null() => n["status"] = s.clone(),
                    _ => {
                        n.as_object_mut().map(|m| m.remove("status"));
                    }
                }
                // the refresh trigger follows the agent's copy (peer: `UpdateStatus`): removed on
                // the hub once the managed cluster's Argo CD has refreshed, added when set there
                match (
                    o::refresh(&h).is_empty(),
                    o::annotation(&ev.data, o::REFRESH),
                ) {
                    (false, None) => {
                        if let Some(m) = n["metadata"]["annotations"].as_object_mut() {
                            m.remove(o::REFRESH);
                        }
                    }
                    (true, Some(r)) => o::set_annotation(&mut n, o::REFRESH, r),
                    _ => {}
                }
                // the agent finished the operation the hub asked for: clear it on the hub
                let agent_op = ev.data.get("operation").filter(|v| !v.is_null());
                if agent_op.is_none()
                    && let Some(hop) = h.get("operation").filter(|v| !v.is_null())
                    && argocd_pull_agent_core::checksum::hash_value(hop)
                        == argocd_pull_agent_core::checksum::hash_value(
                            &ev.data["status"]["operationState"]["operation"],
                        )
                {
                    n.as_object_mut().map(|m| m.remove("operation"));
                }
                if n == h {
                    return Ok(());
                }
                if let Some(v) = a.views.lock().expect("poisoned").get_mut(&vkey) {
                    v.status = o::status_hash(&n);
                    v.op = o::op_hash(&n);
                }
                self.store.replace(Kind::Application, n).await?;
                self.metrics.hub_write("Application", "updated");
                Ok(())
            }
            (Mode::Managed, EventType::RequestUpdate) if self.mapped(a) => {
                self.mapped_request_update(a, &ev).await
            }
            (Mode::Managed, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                // an ignore-sync Application is not the agent's: it is answered like a missing one
                let hub = match self.ns_allowed(agent) {
                    true => self.hub_app(agent, &name).await?,
                    false => None,
                };
                match hub.filter(|h| !o::ignored(h)) {
                    None => {
                        a.views.lock().expect("poisoned").remove(&name);
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push(a, EventType::Delete, &o::stub(&name, agent, uid));
                    }
                    Some(h) => self.answer_request_update(a, name, &h, checksum),
                }
                Ok(())
            }
            (Mode::Managed, EventType::RequestSyncedResourceList) => {
                if !self.admit_resync_round(a, ev.ty.short()) {
                    return Ok(());
                }
                self.answer_synced_list(a, &ev, out).await
            }
            (Mode::Managed, EventType::Delete) => {
                // the agent deleted its copy of an Application marked for deletion on the hub:
                // the Argo CD finalizers are satisfied, remove them so the hub deletion completes
                // (the view stays marked `deleting`: the hub's final removal sends one `delete`)
                let ns = match self.mapped(a) {
                    true => {
                        let nss = self.reported_namespaces(agent, &ev.data);
                        match self.mapped_hub_app(agent, &nss, ev.name()).await? {
                            Some(h) => o::namespace(&h).to_string(),
                            None => return Ok(()),
                        }
                    }
                    false => agent.to_string(),
                };
                self.finish_hub_deletion(&ns, ev.name()).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Create | EventType::SpecUpdate) => {
                let want = self.to_hub_form(agent, &ev.data);
                let name = o::name(&want).to_string();
                if name.is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                self.create_agent_namespace(agent).await?;
                {
                    let mut views = a.views.lock().expect("poisoned");
                    let v = views.entry(name).or_default();
                    v.spec = spec_checksum(&ev.data);
                    v.op = o::op_hash(&want);
                    v.status = o::status_hash(&want);
                    v.copy = Some(want.clone());
                }
                self.write_hub(&want, true).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Delete) => {
                let name = ev.name().to_string();
                a.views.lock().expect("poisoned").remove(&name);
                self.store.delete(Kind::Application, agent, &name).await?;
                self.metrics.hub_write("Application", "deleted");
                // hub copies carry no finalizers; one added on the hub must not hold the copy
                self.finish_hub_deletion(agent, &name).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestResourceResync) => {
                if !self.admit_resync_round(a, ev.ty.short()) {
                    return Ok(());
                }
                tracing::debug!(agent, "answering the agent's resync request");
                // a request-update per hub copy (the peer's answer); asked by our agent's periodic
                // round, then the set checksum too: the agent also sends what the hub lacks
                if ev.data[argocd_pull_agent_core::checksum::WITH_SYNCED_LIST] == true {
                    self.replica_resync(a, out).await;
                } else {
                    self.send_request_updates(a, out).await;
                }
                Ok(())
            }
            (Mode::Managed, EventType::RequestResourceResync) => Ok(()),
            (Mode::Managed, EventType::Error) => self.agent_error(a, &ev.data).await,
            (_, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid from a {} agent",
                t.short(),
                mode.as_str()
            ))),
        }
    }

    /// The peer's handling of an agent's `error` event (principal/event.go, `event.Error`): the
    /// hub Application named by `ErrorData` gets Health `Degraded` and one `AgentError`
    /// condition as its whole status, and its pending operation is dropped (`UpdateStatus`).
    async fn agent_error(&self, a: &AgentState, data: &Value) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        let name = match data.get("resourceName") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => {
                return Err(HandleError::Permanent(
                    "error event payload must be ErrorData with a non-empty resourceName".into(),
                ));
            }
        };
        let msg = match data.get("message") {
            None | Some(Value::Null) => "",
            Some(Value::String(m)) => m.as_str(),
            Some(_) => {
                return Err(HandleError::Permanent(
                    "ErrorData.message must be a string".into(),
                ));
            }
        };
        let hub = match self.mapped(a) {
            true => {
                let ns = data["resourceNamespace"].as_str().unwrap_or_default();
                let nss = self.candidates(agent, ns);
                self.mapped_hub_app(agent, &nss, &name).await?
            }
            false => self.store.get(Kind::Application, agent, &name).await?,
        };
        let Some(h) = hub else {
            return Err(HandleError::Permanent(format!(
                "agent {agent} reported an error for Application {name:?}, which does not exist on the hub"
            )));
        };
        let mut n = h.clone();
        n["status"] = serde_json::json!({
            "health": {"status": "Degraded"},
            "conditions": [{
                "type": "AgentError",
                "message": format!("Error occurred on cluster managed by agent {agent}: {msg}"),
            }],
        });
        n.as_object_mut().map(|m| m.remove("operation"));
        if n != h {
            self.store.replace(Kind::Application, n).await?;
            self.metrics.hub_write("Application", "updated");
        }
        tracing::warn!(
            agent,
            application = name,
            message = msg,
            "agent reported an error; hub Application marked Degraded"
        );
        Ok(())
    }

    /// A managed agent's `request-update` for the hub Application `h` (view key `key`): the
    /// spec when the agent's checksum differs, the pending operation, or the deletion.
    pub(super) fn answer_request_update(
        &self,
        a: &AgentState,
        key: String,
        h: &Value,
        checksum: &str,
    ) {
        if o::deleting(h) {
            a.views.lock().expect("poisoned").insert(
                key,
                View {
                    deleting: true,
                    ..Default::default()
                },
            );
            self.push(a, EventType::SpecUpdate, &o::without_operation(h));
            return;
        }
        let spec = spec_checksum(h);
        if spec != checksum {
            self.push(a, EventType::SpecUpdate, &o::without_operation(h));
        }
        if !o::op_hash(h).is_empty() {
            self.push(a, EventType::SetOperation, h);
        }
        a.views.lock().expect("poisoned").insert(
            key,
            View {
                spec,
                op: o::op_hash(h),
                status: o::status_hash(h),
                refresh: o::refresh(h).to_string(),
                ..Default::default()
            },
        );
    }

    /// Removes the Argo CD finalizers of a hub Application that is marked for deletion. Returns
    /// whether the object was marked for deletion (or is gone).
    pub(super) async fn finish_hub_deletion(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<bool, StoreError> {
        let store = &self.store;
        read_modify_write(
            NamespacedName {
                namespace: ns,
                name,
            },
            WRITE_ATTEMPTS,
            StoreError::is_conflict,
            || store.get(Kind::Application, ns, name),
            |h| async move {
                let Some(h) = h else {
                    return Ok(true);
                };
                if !o::deleting(&h) {
                    return Ok(false);
                }
                let fins = o::finalizers(&h);
                let keep: Vec<&String> =
                    fins.iter().filter(|f| !o::is_argocd_finalizer(f)).collect();
                if keep.len() == fins.len() {
                    return Ok(true);
                }
                let mut n = h.clone();
                n["metadata"]["finalizers"] = serde_json::json!(keep);
                match store.replace(Kind::Application, n).await {
                    Ok(_) | Err(StoreError::NotFound) => {
                        tracing::info!(app = %format!("{ns}/{name}"), "agent deleted its copy; Argo CD finalizers removed from the hub application");
                        Ok(true)
                    }
                    Err(e) => Err(e),
                }
            },
        )
        .await
        .map_err(StoreError::from)
    }
}
