//! Target `appproject`: AppProject events from the principal and the local project forms.

use std::sync::Arc;

use serde_json::{Value, json};

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::spec_checksum;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects::{self as o, SOURCE_UID};
use argocd_pull_agent_core::session::HandleError;
use argocd_pull_agent_core::store::Kind;

use super::Inner;

/// Local form of a principal AppProject (already agent-specific: destinations in-cluster).
pub(super) fn to_local_project(p: &Value, ns: &str) -> Value {
    let mut l = json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": o::portable_meta(p, ns),
        "spec": p["spec"].clone(),
    });
    o::set_annotation(&mut l, SOURCE_UID, o::uid(p));
    l
}

/// A local AppProject reduced to what the principal gave us.
pub(super) fn strip_project(p: &Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "AppProject",
        "metadata": o::portable_meta(p, o::namespace(p)),
        "spec": p["spec"].clone(),
    })
}

impl Inner {
    pub(super) async fn handle_project_event(
        self: &Arc<Self>,
        ev: Event,
    ) -> Result<(), HandleError> {
        let ns = self.cfg.namespace.clone();
        match (self.cfg.mode, ev.ty) {
            (Mode::Managed, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                let want = to_local_project(&ev.data, &ns);
                self.proj_copies
                    .lock()
                    .expect("poisoned")
                    .insert(o::name(&want).to_string(), want.clone());
                self.upsert(Kind::AppProject, &want, false).await?;
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => {
                let name = ev.name().to_string();
                self.proj_copies.lock().expect("poisoned").remove(&name);
                self.store.delete(Kind::AppProject, &ns, &name).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                match self.store.get(Kind::AppProject, &ns, &name).await? {
                    None => {
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push_target(
                            EventType::Delete,
                            Target::AppProject,
                            &o::project_stub(&name, &ns, uid),
                        );
                    }
                    Some(p) => {
                        if spec_checksum(&p) != checksum {
                            self.proj_sent
                                .lock()
                                .expect("poisoned")
                                .insert(name, o::project_hash(&p));
                            self.push_target(EventType::SpecUpdate, Target::AppProject, &p);
                        }
                    }
                }
                Ok(())
            }
            (m, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for an AppProject on a {} agent",
                t.short(),
                m.as_str()
            ))),
        }
    }
}
