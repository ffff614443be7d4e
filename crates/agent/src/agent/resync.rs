//! Resync for managed agents (the agent is the replica).

use serde_json::Value;

use crate::checksum::{set_checksum, set_item, spec_checksum};
use crate::objects as o;
use crate::session::Outbox;

use super::Inner;

impl Inner {
    /// Managed: the agent is the replica; tell the principal what we have.
    pub(super) async fn replica_resync(&self, out: &Outbox) {
        let copies: Vec<Value> = self
            .copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        let src = self.source();
        let mut items = Vec::new();
        for c in &copies {
            let suid = o::source_uid(c);
            items.push(set_item("Application", o::name(c), suid));
            out.send(o::request_update(
                &src,
                o::name(c),
                &self.cfg.namespace,
                suid,
                &spec_checksum(c),
            ))
            .await;
        }
        let projects: Vec<Value> = self
            .proj_copies
            .lock()
            .expect("poisoned")
            .values()
            .cloned()
            .collect();
        for p in &projects {
            out.send(o::request_update_project(
                &src,
                o::name(p),
                &self.cfg.namespace,
                o::source_uid(p),
                &spec_checksum(p),
            ))
            .await;
        }
        out.send(o::request_synced_list(&src, &set_checksum(items)))
            .await;
    }
}
