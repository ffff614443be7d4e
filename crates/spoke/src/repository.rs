//! Targets `repository` and `gpgkey`: repository / repo-creds Secrets and the GPG keys ConfigMap
//! from the principal (managed agents only; peer: agent/inbound.go `processIncomingRepository`,
//! `processIncomingGPGKey` and their create/update/delete helpers, agent/outbound.go
//! `handleRepository*`, `handleGPGKey*`). The object lives in the agent's namespace with the hub
//! UID as source-uid; local edits and deletions are reverted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{Event, EventType};
use argocd_pull_agent_core::objects::{self as o};
use argocd_pull_agent_core::repository::{self as repo, DataKind};
use argocd_pull_agent_core::session::HandleError;
use argocd_pull_agent_core::store::{StoreError, StoreEvent};

use super::Inner;

impl Inner {
    pub(super) async fn handle_data_event(
        self: &Arc<Self>,
        dk: DataKind,
        ev: Event,
    ) -> Result<(), HandleError> {
        if self.cfg.mode != Mode::Managed {
            // the peer discards these ("agent is not in managed mode")
            return Err(HandleError::Permanent(format!(
                "cannot {} {}: agent is not in managed mode; nothing was done",
                ev.ty.short(),
                dk.target().as_str()
            )));
        }
        let ns = self.cfg.namespace.clone();
        match ev.ty {
            EventType::Create | EventType::SpecUpdate => {
                let want = repo::local_form(&ev.data, &ns, dk);
                let key = o::qkey(dk.target(), o::name(&want));
                self.data_copies
                    .lock()
                    .expect("poisoned")
                    .insert(key, want.clone());
                self.upsert_data(dk, &want).await?;
                Ok(())
            }
            EventType::Delete => {
                let name = ev.name().to_string();
                self.data_copies
                    .lock()
                    .expect("poisoned")
                    .remove(&o::qkey(dk.target(), &name));
                match self.store.get(dk.kind(), &ns, &name).await? {
                    None => Ok(()),
                    Some(cur) if o::source_uid(&cur).is_empty() => {
                        Err(HandleError::Permanent(format!(
                            "{} {ns}/{name} is not managed by the principal (no source-uid annotation); it was left alone",
                            dk.kind().as_str()
                        )))
                    }
                    Some(_) => {
                        self.store.delete(dk.kind(), &ns, &name).await?;
                        Ok(())
                    }
                }
            }
            t => Err(HandleError::Permanent(format!(
                "event type {} is not valid for target {:?} on a managed agent",
                t.short(),
                dk.target().as_str()
            ))),
        }
    }

    /// Creates the object, or brings data, labels and annotations of the existing one to `want`.
    pub(super) async fn upsert_data(&self, dk: DataKind, want: &Value) -> Result<(), StoreError> {
        self.upsert_with(dk.kind(), want, |cur| repo::overlay(cur, want))
            .await
    }

    /// Local objects of `dk`'s kind in the agent's namespace: a managed one edited or deleted
    /// locally is put back as the principal gave it.
    pub(super) async fn watch_local_data(
        self: Arc<Self>,
        dk: DataKind,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        loop {
            let mut s = self.store.watch(dk.kind(), Some(&self.cfg.namespace));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        let names: HashSet<String> = list
                            .iter()
                            .map(|r| o::qkey(dk.target(), o::name(r)))
                            .collect();
                        for r in &list {
                            self.on_local_data(dk, r, false);
                        }
                        let missing: Vec<Value> = self
                            .data_copies
                            .lock()
                            .expect("poisoned")
                            .iter()
                            .filter(|(k, _)| {
                                o::parse_qkey(k).0 == dk.target() && !names.contains(*k)
                            })
                            .map(|(_, v)| v.clone())
                            .collect();
                        for c in missing {
                            self.revert_data(dk, c);
                        }
                    }
                    Ok(StoreEvent::Applied(r)) => self.on_local_data(dk, &r, false),
                    Ok(StoreEvent::Deleted(r)) => self.on_local_data(dk, &r, true),
                    Err(e) => {
                        tracing::warn!(error = %e, kind = dk.kind().as_str(), "local watch error")
                    }
                }
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn on_local_data(self: &Arc<Self>, dk: DataKind, r: &Value, deleted: bool) {
        let key = o::qkey(dk.target(), o::name(r));
        let copy = self
            .data_copies
            .lock()
            .expect("poisoned")
            .get(&key)
            .cloned();
        if let Some(copy) = copy
            && (deleted || repo::hash(r) != repo::hash(&copy))
        {
            tracing::info!(object = %key, "local change of an object the principal owns; reverting");
            self.revert_data(dk, copy);
        }
    }

    fn revert_data(self: &Arc<Self>, dk: DataKind, copy: Value) {
        self.metrics.local_edits_reverted.inc();
        let me = self.clone();
        tokio::spawn(async move {
            let key = o::qkey(dk.target(), o::name(&copy));
            let _g = me.locks.lock(&key).await;
            // the principal may have deleted it meanwhile: then the deletion wins
            let current = me.data_copies.lock().expect("poisoned").get(&key).cloned();
            let Some(copy) = current else { return };
            if let Err(e) = me.upsert_data(dk, &copy).await {
                tracing::warn!(object = %key, error = %e, "reverting a local edit failed");
            }
        });
    }

    /// Resync (managed): the objects the principal gave us, for `request-update`s and the set
    /// checksum (`<Repository|GPGKey>/<name>/<hub uid>`).
    pub(super) fn data_copies_list(&self) -> Vec<(DataKind, Value)> {
        self.data_copies
            .lock()
            .expect("poisoned")
            .iter()
            .filter_map(|(k, v)| DataKind::from_target(o::parse_qkey(k).0).map(|d| (d, v.clone())))
            .collect()
    }
}
