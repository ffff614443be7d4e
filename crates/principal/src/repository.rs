//! Targets `repository` and `gpgkey`: hub repository / repo-creds Secrets and the GPG keys
//! ConfigMap to managed agents (peer: principal/callbacks.go `newRepositoryCallback`,
//! `syncRepositoryUpdatesToAgents`, `syncGPGKeyToManagedAgents`, principal/server.go
//! `handleResyncOnConnect`, internal/resync/resync.go for kinds `Repository` and `GPGKey`).
//!
//! A repository Secret goes to an agent when its `data.project` names a hub AppProject that is
//! sent to that agent (neither carrying the skip-sync label); it is deleted there when that stops
//! being true (project changed, deleted, no longer matching, Secret deleted). The GPG keys
//! ConfigMap goes to every managed agent.

use std::sync::Arc;

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::{read_checksum, spec_checksum};
use argocd_pull_agent_core::event::{Event, EventType};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::project_match;
use argocd_pull_agent_core::repository::{self as repo, DataKind};
use argocd_pull_agent_core::session::HandleError;

use super::{AgentState, Inner, SOURCE};

impl Inner {
    /// The wire forms of the `dk` objects a managed agent should have.
    fn data_for(&self, agent: &str, dk: DataKind) -> Vec<Value> {
        match dk {
            DataKind::Repository => {
                let projects = self.hub.projects.lock().expect("poisoned");
                self.hub
                    .secrets
                    .lock()
                    .expect("poisoned")
                    .values()
                    .filter(|r| repo::is_repo_secret(r) && !o::ignored(r))
                    .filter(|r| {
                        repo::project_of(r)
                            .and_then(|p| projects.get(&p))
                            .is_some_and(|p| {
                                !o::ignored(p)
                                    && project_match::agent_matches(
                                        agent,
                                        p,
                                        self.cfg.destination_based_mapping,
                                    )
                            })
                    })
                    .map(|r| repo::wire_form(r, dk))
                    .collect()
            }
            DataKind::GpgKey => self
                .hub
                .gpg
                .lock()
                .expect("poisoned")
                .values()
                .filter(|c| !o::ignored(c))
                .map(|c| repo::wire_form(c, dk))
                .collect(),
        }
    }

    fn views_of(
        a: &AgentState,
        dk: DataKind,
    ) -> &std::sync::Mutex<std::collections::HashMap<String, String>> {
        match dk {
            DataKind::Repository => &a.repos,
            DataKind::GpgKey => &a.gpg,
        }
    }

    /// Managed agents: sends the repositories of their projects and the GPG keys, and deletes
    /// what they should no longer have.
    pub(super) fn sync_repos(&self, a: &AgentState) {
        if *a.mode.lock().expect("poisoned") != Mode::Managed {
            return;
        }
        let ns = self.cfg.namespace.clone();
        for dk in DataKind::ALL {
            let want = self.data_for(&a.name, dk);
            self.sync_set(
                a,
                dk.target(),
                want,
                Self::views_of(a, dk),
                repo::hash,
                |n| repo::stub(n, &ns, "", dk),
            );
        }
    }

    /// The current event for a deferred `repository/<name>` or `gpgkey/<name>` key.
    pub(super) fn regenerate_data(&self, agent: &str, dk: DataKind, name: &str) -> Vec<Event> {
        let cur = self
            .data_for(agent, dk)
            .into_iter()
            .find(|r| o::name(r) == name);
        vec![match cur {
            Some(r) => Event::for_object(SOURCE, EventType::SpecUpdate, dk.target(), &r),
            None => Event::for_object(
                SOURCE,
                EventType::Delete,
                dk.target(),
                &repo::stub(name, &self.cfg.namespace, "", dk),
            ),
        }]
    }

    /// Resync: a managed agent's `request-update` for kind `Repository` / `GPGKey` (peer:
    /// resync.go `ProcessRequestUpdateEvent` + `isAppProjectRelevant`): `delete` when the agent
    /// should not have it, `spec-update` when its `.data` checksum differs.
    pub(super) async fn handle_data_request_update(
        &self,
        a: &Arc<AgentState>,
        mode: Mode,
        dk: DataKind,
        ev: Event,
    ) -> Result<(), HandleError> {
        if mode != Mode::Managed {
            return Err(HandleError::Permanent(format!(
                "request-update for kind {} is only valid from a managed agent (it flows from the principal); nothing was changed",
                dk.resync_kind()
            )));
        }
        let name = ev.data["name"].as_str().unwrap_or_default().to_string();
        let theirs = read_checksum(&ev.data).map_err(HandleError::Permanent)?;
        let cur = self
            .data_for(&a.name, dk)
            .into_iter()
            .find(|r| o::name(r) == name);
        let views = Self::views_of(a, dk);
        match cur {
            None => {
                views.lock().expect("poisoned").remove(&name);
                let uid = ev.data["uid"].as_str().unwrap_or_default();
                self.push_target(
                    a,
                    EventType::Delete,
                    dk.target(),
                    &repo::stub(&name, &self.cfg.namespace, uid, dk),
                );
            }
            Some(r) => {
                if spec_checksum(&r) != theirs {
                    self.push_target(a, EventType::SpecUpdate, dk.target(), &r);
                }
                views.lock().expect("poisoned").insert(name, repo::hash(&r));
            }
        }
        Ok(())
    }
}
