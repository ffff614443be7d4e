//! Target `repository`: repository / repo-creds Secrets from the principal (managed agents only;
//! peer: agent/inbound.go `processIncomingRepository`, `createRepository`, `updateRepository`,
//! `deleteRepository`, agent/outbound.go `handleRepository*`). The Secret lives in the agent's
//! namespace with the hub UID as source-uid; local edits and deletions are reverted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::Mode;
use crate::event::{Event, EventType, Target};
use crate::objects::{self as o};
use crate::repository as repo;
use crate::session::HandleError;
use crate::store::{Kind, StoreError, StoreEvent};

use super::Inner;

impl Inner {
    pub(super) async fn handle_repo_event(self: &Arc<Self>, ev: Event) -> Result<(), HandleError> {
        if self.cfg.mode != Mode::Managed {
            // the peer discards these ("agent is not in managed mode")
            return Err(HandleError::Permanent(format!(
                "cannot {} repository: agent is not in managed mode; nothing was done",
                ev.ty.short()
            )));
        }
        let ns = self.cfg.namespace.clone();
        match ev.ty {
            EventType::Create | EventType::SpecUpdate => {
                let want = repo::local_form(&ev.data, &ns);
                let name = o::name(&want).to_string();
                self.repo_copies
                    .lock()
                    .expect("poisoned")
                    .insert(name, want.clone());
                self.upsert_repo(&want).await?;
                Ok(())
            }
            EventType::Delete => {
                let name = ev.name().to_string();
                self.repo_copies.lock().expect("poisoned").remove(&name);
                match self.store.get(Kind::Secret, &ns, &name).await? {
                    None => Ok(()),
                    Some(cur) if o::source_uid(&cur).is_empty() => {
                        Err(HandleError::Permanent(format!(
                            "repository {ns}/{name} is not managed by the principal (no source-uid annotation); it was left alone"
                        )))
                    }
                    Some(_) => {
                        self.store.delete(Kind::Secret, &ns, &name).await?;
                        Ok(())
                    }
                }
            }
            t => Err(HandleError::Permanent(format!(
                "event type {} is not valid for a repository on a managed agent",
                t.short()
            ))),
        }
    }

    /// Creates the Secret, or brings data, labels and annotations of the existing one to `want`.
    pub(super) async fn upsert_repo(&self, want: &Value) -> Result<(), StoreError> {
        let (ns, name) = (self.cfg.namespace.as_str(), o::name(want));
        for _ in 0..5 {
            let r = match self.store.get(Kind::Secret, ns, name).await? {
                None => self
                    .store
                    .create(Kind::Secret, want.clone())
                    .await
                    .map(|_| ()),
                Some(cur) => {
                    let n = repo::overlay(&cur, want);
                    if n == cur {
                        Ok(())
                    } else {
                        self.store.replace(Kind::Secret, n).await.map(|_| ())
                    }
                }
            };
            match r {
                Err(StoreError::Conflict(_)) | Err(StoreError::AlreadyExists) => continue,
                r => return r,
            }
        }
        Err(StoreError::Conflict(format!(
            "{ns}/{name}: too many conflicts"
        )))
    }

    /// Local Secrets of the agent's namespace: a managed repository edited or deleted locally is
    /// put back as the principal gave it.
    pub(super) async fn watch_local_repos(
        self: Arc<Self>,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        loop {
            let mut s = self.store.watch(Kind::Secret, Some(&self.cfg.namespace));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let names: HashSet<&str> = list.iter().map(o::name).collect();
                        for r in &list {
                            self.on_local_repo(r, false);
                        }
                        let missing: Vec<Value> = self
                            .repo_copies
                            .lock()
                            .expect("poisoned")
                            .iter()
                            .filter(|(n, _)| !names.contains(n.as_str()))
                            .map(|(_, v)| v.clone())
                            .collect();
                        for c in missing {
                            self.revert_repo(c);
                        }
                    }
                    Ok(StoreEvent::Applied(r)) => self.on_local_repo(&r, false),
                    Ok(StoreEvent::Deleted(r)) => self.on_local_repo(&r, true),
                    Err(e) => tracing::warn!(error = %e, "local Secret watch error"),
                }
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn on_local_repo(self: &Arc<Self>, r: &Value, deleted: bool) {
        let name = o::name(r);
        let copy = self
            .repo_copies
            .lock()
            .expect("poisoned")
            .get(name)
            .cloned();
        if let Some(copy) = copy
            && (deleted || repo::hash(r) != repo::hash(&copy))
        {
            tracing::info!(repository = %name, "local change of a managed repository; reverting");
            self.revert_repo(copy);
        }
    }

    fn revert_repo(self: &Arc<Self>, copy: Value) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        tokio::spawn(async move {
            let name = o::name(&copy).to_string();
            let _g = me.locks.lock(&o::qkey(Target::Repository, &name)).await;
            // the principal may have deleted it meanwhile: then the deletion wins
            let current = me.repo_copies.lock().expect("poisoned").get(&name).cloned();
            let Some(copy) = current else { return };
            if let Err(e) = me.upsert_repo(&copy).await {
                tracing::warn!(repository = %name, error = %e, "reverting a local repository edit failed");
            }
        });
    }

    /// Resync (managed): the repositories the principal gave us, for `request-update`s and the
    /// set checksum (`Repository/<name>/<hub uid>`).
    pub(super) fn repo_copies_list(&self) -> Vec<Value> {
        self.repo_copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect()
    }
}
