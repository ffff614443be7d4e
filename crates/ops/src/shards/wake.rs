//! Lease changes that call for a round of the ownership now rather than at the next poll: a
//! shard released (its holder cleared, as a stopping replica does before it exits) and a replica
//! joining or leaving. Renewals, the bulk of the Lease traffic, wake nobody: polling still does
//! everything, the watch only makes hand-overs as fast as the API server's watch.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher::Event;

use super::lease::{LeaseKind, LeaseView};

/// The replicas' membership Leases seen held, to tell a replica joining from one renewing.
#[derive(Debug, Default)]
pub(super) struct Wake {
    members: BTreeSet<String>,
}

impl Wake {
    /// Whether `ev` (a watch event of the ownership's Leases, `lease_name`'s) calls for a round now.
    pub(super) fn wakes(&mut self, lease_name: &str, ev: &Event<Lease>) -> bool {
        match ev {
            Event::Init => {
                self.members.clear();
                false
            }
            Event::InitApply(l) => {
                let v = LeaseView::new(lease_name, l.clone());
                if v.kind == LeaseKind::Replica && v.holder.is_some() {
                    self.members.insert(v.name);
                }
                false
            }
            // what changed while the watch was down is found by the next poll
            Event::InitDone => false,
            Event::Apply(l) => {
                let v = LeaseView::new(lease_name, l.clone());
                match (v.kind, v.holder.is_some()) {
                    (LeaseKind::Shard(_), held) => !held,
                    (LeaseKind::Replica, true) => self.members.insert(v.name),
                    (LeaseKind::Replica, false) => {
                        self.members.remove(&v.name);
                        true
                    }
                    (LeaseKind::Other, _) => false,
                }
            }
            Event::Delete(l) => {
                let v = LeaseView::new(lease_name, l.clone());
                self.members.remove(&v.name);
                v.kind != LeaseKind::Other
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: Option<&str>) -> Lease {
        Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_release_and_a_replica_joining_or_leaving_wake_the_ownership_and_renewals_do_not() {
        let mut w = Wake::default();
        let p = "argocd-pull-principal";
        let shard = |h| lease(&format!("{p}-shard-3"), h);
        let member = |h| lease(&format!("{p}-replica-b"), h);
        assert!(!w.wakes(p, &Event::Init));
        assert!(!w.wakes(p, &Event::InitApply(member(Some("b@10.0.0.2")))));
        assert!(!w.wakes(p, &Event::InitDone));
        assert!(
            !w.wakes(p, &Event::Apply(shard(Some("a@10.0.0.1")))),
            "a renewal"
        );
        assert!(w.wakes(p, &Event::Apply(shard(None))), "a release");
        assert!(
            w.wakes(p, &Event::Apply(shard(Some("")))),
            "a release, as an empty holder"
        );
        assert!(
            !w.wakes(p, &Event::Apply(member(Some("b@10.0.0.2")))),
            "b renews"
        );
        assert!(w.wakes(p, &Event::Apply(member(None))), "b leaves");
        assert!(
            w.wakes(p, &Event::Apply(member(Some("b@10.0.0.2")))),
            "b joins again"
        );
        assert!(
            w.wakes(
                p,
                &Event::Apply(lease(&format!("{p}-replica-c"), Some("c@10.0.0.3")))
            ),
            "c joins"
        );
        assert!(
            w.wakes(p, &Event::Delete(member(Some("b@10.0.0.2")))),
            "b deleted"
        );
        assert!(!w.wakes(p, &Event::Apply(lease("unrelated", None))));
    }
}
