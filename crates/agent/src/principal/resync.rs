//! Resync for autonomous agents (the principal is the replica).

use std::sync::Arc;

use crate::checksum::{set_checksum, set_item, spec_checksum};
use crate::objects as o;
use crate::session::Outbox;
use crate::store::Kind;

use super::{AgentState, Inner, SOURCE};

impl Inner {
    /// Autonomous agents: the principal is the replica; ask the agent for what differs.
    pub(super) async fn replica_resync(&self, a: &Arc<AgentState>, out: &Outbox) {
        let agent = a.name.clone();
        let list = match self.store.list(Kind::Application, Some(&agent)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(agent, error = %e, "resync: listing hub applications failed");
                return;
            }
        };
        let mut items = Vec::new();
        for h in &list {
            let suid = o::source_uid(h).to_string();
            if suid.is_empty() || o::ignored(h) {
                continue;
            }
            let agent_form = self.to_agent_form(&agent, h);
            {
                let mut views = a.views.lock().expect("poisoned");
                let v = views.entry(o::name(h).to_string()).or_default();
                v.spec = spec_checksum(&agent_form);
                v.op = o::op_hash(h);
                v.status = o::status_hash(h);
                v.copy = Some(h.clone());
            }
            items.push(set_item("Application", o::name(h), &suid));
            out.send(o::request_update(
                SOURCE,
                o::name(h),
                &agent,
                &suid,
                &spec_checksum(&agent_form),
            ))
            .await;
        }
        // AppProjects copied from this agent: the agent answers `delete` (gone) or `spec-update`
        // (the hub form is lossy, so no checksum is sent: the agent always re-sends the spec)
        if let Ok(projects) = self
            .store
            .list(Kind::AppProject, Some(&self.cfg.namespace))
            .await
        {
            let prefix = format!("{agent}-");
            for p in projects {
                if p["metadata"]["labels"][o::AGENT_NAME_LABEL].as_str() != Some(agent.as_str()) {
                    continue;
                }
                let Some(orig) = o::name(&p).strip_prefix(&prefix) else {
                    continue;
                };
                out.send(o::request_update_project(
                    SOURCE,
                    orig,
                    &agent,
                    o::source_uid(&p),
                    "",
                ))
                .await;
            }
        }
        out.send(o::request_synced_list(SOURCE, &set_checksum(items)))
            .await;
    }
}
