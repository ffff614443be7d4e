//! Target `appproject`: AppProject events from an agent.

use std::sync::Arc;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::spec_checksum;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::project_match::project_for_agent;
use argocd_pull_agent_core::session::HandleError;
use argocd_pull_agent_core::store::Kind;

use super::{AgentState, Inner};

impl Inner {
    pub(super) async fn handle_project_event(
        &self,
        a: &Arc<AgentState>,
        mode: Mode,
        ev: Event,
    ) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        match (mode, ev.ty) {
            (Mode::Managed, EventType::RequestUpdate) => {
                let name = ev.data["name"].as_str().unwrap_or_default().to_string();
                let checksum = ev.data["checksum"].as_str().unwrap_or_default();
                let cur = self
                    .hub
                    .projects
                    .lock()
                    .expect("poisoned")
                    .get(&name)
                    .filter(|p| !o::ignored(p))
                    .and_then(|p| project_for_agent(p, agent, self.cfg.destination_based_mapping));
                match cur {
                    None => {
                        a.projects.lock().expect("poisoned").remove(&name);
                        let uid = ev.data["uid"].as_str().unwrap_or_default();
                        self.push_target(
                            a,
                            EventType::Delete,
                            Target::AppProject,
                            &o::project_stub(&name, &self.cfg.namespace, uid),
                        );
                    }
                    Some(f) => {
                        if spec_checksum(&f) != checksum {
                            self.push_target(a, EventType::SpecUpdate, Target::AppProject, &f);
                        }
                        a.projects
                            .lock()
                            .expect("poisoned")
                            .insert(name, o::project_hash(&f));
                    }
                }
                Ok(())
            }
            (Mode::Managed, EventType::Delete) => Ok(()), // the agent confirms a deletion
            (Mode::Autonomous, EventType::Create | EventType::SpecUpdate) => {
                if o::name(&ev.data).is_empty() {
                    return Err(HandleError::Permanent(
                        "payload has no metadata.name".into(),
                    ));
                }
                let want = o::project_from_agent(&ev.data, agent, &self.cfg.namespace);
                self.write_obj(Kind::AppProject, &want, false).await?;
                Ok(())
            }
            (Mode::Autonomous, EventType::Delete) => {
                let name = format!("{agent}-{}", ev.name());
                self.store
                    .delete(Kind::AppProject, &self.cfg.namespace, &name)
                    .await?;
                self.metrics.hub_write("AppProject", "deleted");
                Ok(())
            }
            (_, t) => Err(HandleError::Permanent(format!(
                "event type {} is not valid for an AppProject from a {} agent",
                t.short(),
                mode.as_str()
            ))),
        }
    }
}
