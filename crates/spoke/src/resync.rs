//! Resync, as the peer's agent does it (agent/connection.go `resyncOnStart`, agent/inbound.go
//! `processIncomingResourceResyncEvent`, internal/resync/resync.go):
//!
//! * repository Secrets take part in the managed resync like AppProjects (kind `Repository`,
//!   checksum of `.data`);
//! * on the first stream of this process only (the peer's `resyncedOnStart`): autonomous →
//!   `request-resource-resync` (the principal, the replica, answers with a `request-update` per
//!   resource); managed → a `request-update` per principal copy with its spec checksum, then
//!   `request-synced-resource-list` with the set checksum;
//! * `response-synced-resource` (managed) → a `request-update` for that resource, with the
//!   checksum of our copy, or none when we lack it (peer: `ProcessIncomingSyncedResource`);
//! * `request-synced-resource-list` (autonomous) → compare the set of our Applications and
//!   AppProjects (`Kind/Name/UID`, our UIDs), on a mismatch one `response-synced-resource` each
//!   (peer: `ProcessSyncedResourceListRequest`);
//! * `request-resource-resync` from the principal (managed) → a `request-update` per copy, then
//!   (our addition) `request-synced-resource-list`: the peer's principal learns of hub
//!   Applications created while it was down from its informer's start-up list, which queues a
//!   `create` for each, i.e. resends every one; ours does not, and finds the missing ones through
//!   the set checksum instead, so a principal restart with nothing changed resends nothing. A peer
//!   principal answers the extra request like the one sent on start (compare, then
//!   `response-synced-resource` per resource on a mismatch).
//!
//! Every resync request received is ACKed by the session (src/session.rs); every one sent is
//! queued and resent until the other side ACKs it, across a cut (`Outbox::send_reliable`), as
//! the peer's event writer resends its events.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::checksum::{
    read_checksum, response_synced, set_checksum, set_item, spec_checksum,
};
use argocd_pull_agent_core::event::Event;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::session::{HandleError, Outbox};
use argocd_pull_agent_core::store::Kind;

use super::{Inner, mapping};

impl Inner {
    /// Called when the stream is up.
    pub(super) async fn resync_on_start(&self, out: &Outbox) {
        if self.resynced_on_start.swap(true, Ordering::SeqCst) {
            return;
        }
        match self.cfg.mode {
            Mode::Autonomous => {
                out.send_reliable(o::request_resource_resync(&self.source()));
            }
            Mode::Managed => self.answer_resource_resync(out).await,
        }
    }

    /// Managed: every copy's `request-update`, then `request-synced-resource-list`.
    pub(super) async fn answer_resource_resync(&self, out: &Outbox) {
        let items = self.send_request_updates(out).await;
        out.send_reliable(o::request_synced_list(&self.source(), &set_checksum(items)));
    }

    /// Managed: `response-synced-resource` → `request-update` for that resource.
    pub(super) async fn answer_synced_resource(&self, ev: &Event, out: &Outbox) {
        let name = ev.data["name"].as_str().unwrap_or_default();
        let pns = ev.data["namespace"].as_str().unwrap_or_default();
        let uid = ev.data["uid"].as_str().unwrap_or_default();
        let project = ev.data["kind"] == "AppProject";
        if let Some(dk) = ev.data["kind"]
            .as_str()
            .and_then(argocd_pull_agent_core::repository::DataKind::from_resync_kind)
        {
            let sum = self
                .data_copies
                .lock()
                .expect("poisoned")
                .get(&o::qkey(dk.target(), name))
                .map(spec_checksum)
                .unwrap_or_default();
            let src = self.source();
            out.send_reliable(argocd_pull_agent_core::checksum::request_update(
                &src,
                dk.resync_kind(),
                name,
                pns,
                uid,
                &sum,
            ));
            return;
        }
        let principal_ns = self.principal_ns();
        let copy = if project {
            self.proj_copies
                .lock()
                .expect("poisoned")
                .get(name)
                .cloned()
        } else {
            // destination-based mapping: the principal's namespace stands for ours
            let ns = mapping::lookup_namespace(pns, &principal_ns, &self.cfg.namespace);
            let key = self.lkey_of(ns, name);
            let copy = self.copies.lock().expect("poisoned").get(&key).cloned();
            copy.map(Arc::unwrap_or_clone)
        };
        let sum = copy.as_ref().map(spec_checksum).unwrap_or_default();
        let src = self.source();
        out.send_reliable(if project {
            o::request_update_project(&src, name, pns, uid, &sum)
        } else {
            let ns = match (&copy, self.cfg.destination_based_mapping) {
                (Some(c), true) => mapping::peer_namespace(c, &principal_ns),
                _ => pns,
            };
            o::request_update(&src, name, ns, uid, &sum)
        });
    }

    /// Managed: a `request-update` per copy the principal gave us (Applications, AppProjects);
    /// returns the `Kind/Name/UID` set items (UID: the principal's, from the source-uid annotation).
    pub(super) async fn send_request_updates(&self, out: &Outbox) -> Vec<String> {
        let copies: Vec<Arc<Value>> = self
            .copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        let src = self.source();
        let principal_ns = self.principal_ns();
        let mut items = Vec::new();
        for c in &copies {
            let suid = o::source_uid(c);
            items.push(set_item("Application", o::name(c), suid));
            let ns = match self.cfg.destination_based_mapping {
                true => mapping::peer_namespace(c, &principal_ns),
                false => &self.cfg.namespace,
            };
            out.send_reliable(o::request_update(
                &src,
                o::name(c),
                ns,
                suid,
                &spec_checksum(c),
            ));
        }
        let projects: Vec<Value> = self
            .proj_copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        for p in &projects {
            items.push(set_item("AppProject", o::name(p), o::source_uid(p)));
            out.send_reliable(o::request_update_project(
                &src,
                o::name(p),
                &self.cfg.namespace,
                o::source_uid(p),
                &spec_checksum(p),
            ));
        }
        for (dk, r) in &self.data_copies_list() {
            items.push(set_item(dk.resync_kind(), o::name(r), o::source_uid(r)));
            out.send_reliable(argocd_pull_agent_core::checksum::request_update(
                &src,
                dk.resync_kind(),
                o::name(r),
                &self.cfg.namespace,
                o::source_uid(r),
                &spec_checksum(r),
            ));
        }
        items
    }

    /// Autonomous: `request-synced-resource-list` from the principal (the replica).
    pub(super) async fn answer_synced_list(
        &self,
        ev: &Event,
        out: &Outbox,
    ) -> Result<(), HandleError> {
        let theirs = read_checksum(&ev.data).map_err(HandleError::Permanent)?;
        let ns = self.cfg.namespace.clone();
        let mut mine = Vec::new();
        for kind in [Kind::Application, Kind::AppProject] {
            let k = if kind == Kind::Application {
                "Application"
            } else {
                "AppProject"
            };
            for x in self.store.list(kind, Some(&ns)).await? {
                if !o::ignored(&x) {
                    mine.push((k, o::name(&x).to_string(), o::uid(&x).to_string()));
                }
            }
        }
        if set_checksum(mine.iter().map(|(k, n, u)| set_item(k, n, u))) == theirs {
            return Ok(());
        }
        tracing::info!("resync: resource sets differ; sending the synced resources");
        let src = self.source();
        for (k, n, u) in &mine {
            out.send_reliable(response_synced(&src, k, n, &ns, u));
        }
        Ok(())
    }
}
