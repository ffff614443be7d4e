//! Resync, as the peer's principal does it (principal/server.go `handleResyncOnConnect`,
//! internal/resync/resync.go):
//!
//! * on the first stream of an agent in this principal process (the peer's `resyncStatus`):
//!   managed → the current AppProjects and their repository Secrets, then `request-resource-resync` (the agent answers with a
//!   `request-update` per resource); autonomous → a `request-update` per hub copy (the principal is
//!   the replica), then `request-synced-resource-list` with the set checksum;
//! * on a later stream: managed → the current AppProjects only; autonomous → nothing;
//! * `request-resource-resync` from an autonomous agent → a `request-update` per hub copy; when it
//!   asks (`includeSyncedResourceList`, our agent's periodic rounds) then
//!   `request-synced-resource-list` too, so the agent also sends what the hub lacks; subject to
//!   `--resync-min-interval`;
//! * `response-synced-resource` from an autonomous agent → `request-update` for that resource
//!   (peer: `ProcessIncomingSyncedResource`): an Application with the checksum of our copy, none
//!   when we lack it; an AppProject only when the hub lacks `<agent>-<name>` (the hub form is
//!   lossy, a checksum could never match).
//!
//! Every resync request received is ACKed by the session (src/session.rs); every one sent is
//! queued and resent until the other side ACKs it, across a cut (`Outbox::send_reliable`), as
//! the peer's event writer resends its events.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::{
    read_checksum, response_synced, set_checksum, set_item, spec_checksum,
};
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::repository::DataKind;
use argocd_pull_agent_core::session::{HandleError, Outbox};
use argocd_pull_agent_core::store::Kind;

use super::{AgentState, Inner, SOURCE};

impl Inner {
    /// Called when an agent's stream is up.
    pub(super) async fn resync_on_connect(&self, a: &Arc<AgentState>, out: &Outbox) {
        let mode = *a.mode.lock().expect("poisoned");
        let first = !a.resynced.swap(true, Ordering::SeqCst);
        match mode {
            Mode::Managed => {
                // the agent may have missed AppProject changes while it was away
                self.sync_projects(a);
                if first {
                    // its answer is a round this principal asked for: never refused
                    a.resync_solicited.store(true, Ordering::SeqCst);
                    out.send_reliable(o::request_resource_resync(SOURCE));
                }
            }
            Mode::Autonomous if first => self.replica_resync(a, out).await,
            Mode::Autonomous => {}
        }
    }

    /// Autonomous agents: the principal is the replica; ask the agent for what differs.
    pub(super) async fn replica_resync(&self, a: &Arc<AgentState>, out: &Outbox) {
        let items = self.send_request_updates(a, out).await;
        out.send_reliable(o::request_synced_list(SOURCE, &set_checksum(items)));
    }

    /// A `request-update` per hub copy of an autonomous agent's resources (Applications in the
    /// agent's namespace, AppProjects `<agent>-<name>`); returns the `Kind/Name/UID` set items.
    pub(super) async fn send_request_updates(
        &self,
        a: &Arc<AgentState>,
        out: &Outbox,
    ) -> Vec<String> {
        let agent = a.name.clone();
        let list = match self.store.list(Kind::Application, Some(&agent)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(agent, error = %e, "resync: listing hub applications failed");
                return Vec::new();
            }
        };
        let mut items = Vec::new();
        for h in &list {
            let suid = o::source_uid(h).to_string();
            if suid.is_empty() || o::ignored(h) {
                continue;
            }
            let agent_form = self.to_agent_form(&agent, h);
            let sum = spec_checksum(&agent_form);
            {
                let mut views = a.views.lock().expect("poisoned");
                let v = views.entry(o::name(h).to_string()).or_default();
                v.spec = sum.clone();
                v.op = o::op_hash(h);
                v.status = o::status_hash(h);
                v.copy = Some(h.clone());
            }
            items.push(set_item("Application", o::name(h), &suid));
            out.send_reliable(o::request_update(SOURCE, o::name(h), &agent, &suid, &sum));
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
                // the agent's own name and UID, so the set equals the agent's (the peer's
                // principal keys it by the hub name, which never matches its agent's set)
                items.push(set_item("AppProject", orig, o::source_uid(&p)));
                out.send_reliable(o::request_update_project(
                    SOURCE,
                    orig,
                    &agent,
                    o::source_uid(&p),
                    "",
                ));
            }
        }
        items
    }

    /// Managed: `request-synced-resource-list` (peer: `ProcessSyncedResourceListRequest`). The set
    /// is what this principal gives the agent, every kind: its Applications and the AppProjects
    /// sent to it (`Kind/Name/UID`, the hub UIDs the agent holds as source-uid). On a mismatch,
    /// one `response-synced-resource` per resource; the agent asks for the ones it lacks.
    pub(super) async fn answer_synced_list(
        &self,
        a: &Arc<AgentState>,
        ev: &Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        let theirs = read_checksum(&ev.data).map_err(HandleError::Permanent)?;
        // outside --allowed-namespaces the agent has no hub Applications; with destination-based
        // mapping it has the ones routed to it, in their namespaces. From the hub watch's cache:
        // a reconnecting fleet costs no LIST per agent (the peer lists from the API server).
        let apps = self.app_refs(a);
        let projects: Vec<(String, String)> = {
            let given: Vec<String> = a
                .projects
                .lock()
                .expect("poisoned")
                .keys()
                .cloned()
                .collect();
            let hub = self.hub.projects.lock().expect("poisoned");
            given
                .into_iter()
                .filter_map(|n| hub.get(&n).map(|p| (n, o::uid(p).to_string())))
                .collect()
        };
        // the repository Secrets and GPG keys ConfigMap given to the agent (kind, name, hub UID)
        let data: Vec<(&str, String, String)> = DataKind::ALL
            .into_iter()
            .flat_map(|dk| {
                let given: Vec<String> = match dk {
                    DataKind::Repository => &a.repos,
                    DataKind::GpgKey => &a.gpg,
                }
                .lock()
                .expect("poisoned")
                .keys()
                .cloned()
                .collect();
                let hub = match dk {
                    DataKind::Repository => &self.hub.secrets,
                    DataKind::GpgKey => &self.hub.gpg,
                }
                .lock()
                .expect("poisoned");
                given
                    .into_iter()
                    .filter_map(|n| {
                        hub.get(&n)
                            .map(|r| (dk.resync_kind(), n, o::uid(r).to_string()))
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let items = apps
            .iter()
            .map(|(_, n, u)| set_item("Application", n, u))
            .chain(projects.iter().map(|(n, u)| set_item("AppProject", n, u)))
            .chain(data.iter().map(|(k, n, u)| set_item(k, n, u)));
        if set_checksum(items) == theirs {
            tracing::info!(agent, "resync: resource sets agree; nothing to send");
            return Ok(());
        }
        tracing::info!(
            agent,
            "resync: resource sets differ; sending the synced resources"
        );
        for (ns, name, uid) in &apps {
            out.send_reliable(response_synced(SOURCE, "Application", name, ns, uid));
        }
        for (n, u) in &projects {
            out.send_reliable(response_synced(
                SOURCE,
                "AppProject",
                n,
                &self.cfg.namespace,
                u,
            ));
        }
        for (k, n, u) in &data {
            out.send_reliable(response_synced(SOURCE, k, n, &self.cfg.namespace, u));
        }
        Ok(())
    }

    /// Autonomous: `response-synced-resource` → `request-update` for that resource.
    pub(super) async fn answer_synced_resource(
        &self,
        a: &Arc<AgentState>,
        ev: &Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        let name = ev.data["name"].as_str().unwrap_or_default();
        let ns = ev.data["namespace"].as_str().unwrap_or_default();
        let uid = ev.data["uid"].as_str().unwrap_or_default();
        if let Some(k) = ev.data["kind"]
            .as_str()
            .filter(|k| DataKind::from_resync_kind(k).is_some())
        {
            return Err(HandleError::Permanent(format!(
                "response-synced-resource for kind {k} is not valid from an autonomous agent: it flows from the principal to managed agents only; nothing was changed"
            )));
        }
        if ev.data["kind"] == "AppProject" {
            let hub_name = format!("{agent}-{name}");
            let hub = self
                .store
                .get(Kind::AppProject, &self.cfg.namespace, &hub_name)
                .await?;
            if hub.is_none() {
                out.send_reliable(o::request_update_project(SOURCE, name, ns, uid, ""));
            }
            return Ok(());
        }
        let sum = match self.hub_app(agent, name).await? {
            Some(h) => spec_checksum(&self.to_agent_form(agent, &h)),
            None => String::new(),
        };
        out.send_reliable(o::request_update(SOURCE, name, ns, uid, &sum));
        Ok(())
    }
}
