//! Target `repository`: hub repository / repo-creds Secrets to managed agents (peer:
//! principal/callbacks.go `newRepositoryCallback`, `syncRepositoryUpdatesToAgents`,
//! principal/server.go `handleResyncOnConnect`, internal/resync/resync.go for kind `Repository`).
//!
//! A Secret goes to an agent when its `data.project` names a hub AppProject that is sent to that
//! agent (neither carrying the skip-sync label); it is deleted there when that stops being true
//! (project changed, deleted, no longer matching, Secret deleted).

use std::sync::Arc;

use serde_json::Value;

use crate::Mode;
use crate::checksum::{read_checksum, spec_checksum};
use crate::event::{Event, EventType, Target};
use crate::objects as o;
use crate::project_match;
use crate::repository as repo;
use crate::session::HandleError;

use super::{AgentState, Inner, SOURCE};

impl Inner {
    /// The wire forms of the repository Secrets a managed agent should have.
    fn repos_for(&self, agent: &str) -> Vec<Value> {
        let projects = self.projects.lock().expect("poisoned");
        self.secrets
            .lock()
            .expect("poisoned")
            .values()
            .filter(|r| repo::is_repo_secret(r) && !o::ignored(r))
            .filter(|r| {
                repo::project_of(r)
                    .and_then(|p| projects.get(&p))
                    .is_some_and(|p| {
                        !o::ignored(p) && project_match::agent_matches(agent, p, false)
                    })
            })
            .map(repo::wire_form)
            .collect()
    }

    /// Managed agents: sends the repositories of their projects and deletes the others.
    pub(super) fn sync_repos(&self, a: &AgentState) {
        if *a.mode.lock().expect("poisoned") != Mode::Managed {
            return;
        }
        let want = self.repos_for(&a.name);
        let ns = self.cfg.namespace.clone();
        self.sync_set(a, Target::Repository, want, &a.repos, repo::hash, |n| {
            repo::stub(n, &ns, "")
        });
    }

    /// The current event for a deferred `repository/<name>` key.
    pub(super) fn regenerate_repo(&self, agent: &str, name: &str) -> Vec<Event> {
        let cur = self
            .repos_for(agent)
            .into_iter()
            .find(|r| o::name(r) == name);
        vec![match cur {
            Some(r) => Event::for_object(SOURCE, EventType::SpecUpdate, Target::Repository, &r),
            None => Event::for_object(
                SOURCE,
                EventType::Delete,
                Target::Repository,
                &repo::stub(name, &self.cfg.namespace, ""),
            ),
        }]
    }

    /// Resync: a managed agent's `request-update` for kind `Repository` (peer: resync.go
    /// `ProcessRequestUpdateEvent` + `isAppProjectRelevant`): `delete` when the agent should not
    /// have it, `spec-update` when its `.data` checksum differs.
    pub(super) async fn handle_repo_request_update(
        &self,
        a: &Arc<AgentState>,
        mode: Mode,
        ev: Event,
    ) -> Result<(), HandleError> {
        if mode != Mode::Managed {
            return Err(HandleError::Permanent(format!(
                "request-update for kind {} is only valid from a managed agent (repositories flow from the principal); nothing was changed",
                repo::KIND
            )));
        }
        let name = ev.data["name"].as_str().unwrap_or_default().to_string();
        let theirs = read_checksum(&ev.data).map_err(HandleError::Permanent)?;
        let cur = self
            .repos_for(&a.name)
            .into_iter()
            .find(|r| o::name(r) == name);
        match cur {
            None => {
                a.repos.lock().expect("poisoned").remove(&name);
                let uid = ev.data["uid"].as_str().unwrap_or_default();
                self.push_target(
                    a,
                    EventType::Delete,
                    Target::Repository,
                    &repo::stub(&name, &self.cfg.namespace, uid),
                );
            }
            Some(r) => {
                if spec_checksum(&r) != theirs {
                    self.push_target(a, EventType::SpecUpdate, Target::Repository, &r);
                }
                a.repos
                    .lock()
                    .expect("poisoned")
                    .insert(name, repo::hash(&r));
            }
        }
        Ok(())
    }
}
