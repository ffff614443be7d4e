//! Which active/active principal replica serves each agent (`--ha-mode active-active`), read
//! from the shard Leases of the principal's namespace ([`argocd_pull_ops::shards`]): the
//! `REPLICA` column of `ctl agent list -o wide` and `replica` of `-o json|yaml`. Kubernetes only,
//! like the replicas themselves: the holder of the agent's shard Lease, while it is valid.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context;
use argocd_pull_ops::shards::{LEASE_LABEL, SHARDS_ANNOTATION, ShardCount, shard_of};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;

/// What the row of an agent whose shard nobody holds validly says.
pub const NOBODY: &str = "none";

/// The shard Leases of one set of replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    count: ShardCount,
    /// shard → holder identity (`<name>@<address>`), valid Leases only
    holders: HashMap<u32, String>,
}

impl Serving {
    /// The replicas' shard Leases among `leases` as of `now`; `None` when there are none (the
    /// principal does not run active/active). With several sets (several `--ha-lease-name`s in
    /// one namespace), the one with the most shard Leases.
    pub fn from_leases(leases: &[Lease], now: jiff::Timestamp) -> Option<Serving> {
        let mut sets: BTreeMap<&str, Vec<&Lease>> = BTreeMap::new();
        for l in leases {
            if let Some(set) = l.metadata.labels.as_ref().and_then(|m| m.get(LEASE_LABEL)) {
                sets.entry(set.as_str()).or_default().push(l);
            }
        }
        let (set, leases) = sets.into_iter().max_by_key(|(_, v)| v.len())?;
        let prefix = format!("{set}-shard-");
        let mut holders = HashMap::new();
        let mut count = None;
        for l in leases {
            let Some(k) = l
                .metadata
                .name
                .as_deref()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|k| k.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(n) = l
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SHARDS_ANNOTATION))
                .and_then(|n| n.parse::<u32>().ok())
            {
                count = Some(count.map_or(n, |c: u32| c.max(n)));
            }
            if let Some(holder) = valid_holder(l, now) {
                holders.insert(k, holder);
            }
        }
        Some(Serving {
            count: ShardCount::new(count?)?,
            holders,
        })
    }

    /// The replica serving `agent` now, or [`NOBODY`].
    pub fn replica(&self, agent: &str) -> String {
        self.holders
            .get(&shard_of(agent, self.count).get())
            .cloned()
            .unwrap_or_else(|| NOBODY.into())
    }
}

/// The holder of `l` while its renewal plus its duration is not past `now`.
fn valid_holder(l: &Lease, now: jiff::Timestamp) -> Option<String> {
    let spec = l.spec.as_ref()?;
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec.renew_time.as_ref()?.0;
    let duration = spec.lease_duration_seconds?;
    (renewed.as_second() + i64::from(duration) > now.as_second()).then_some(holder)
}

/// The shard Leases of namespace `ns`; `None` when the principal does not run active/active.
pub async fn read(client: &kube::Client, ns: &str) -> anyhow::Result<Option<Serving>> {
    let leases = Api::<Lease>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(LEASE_LABEL))
        .await
        .with_context(|| {
            format!("Could not list the principal replicas' shard Leases in namespace {ns} (the REPLICA column needs `list` on leases.coordination.k8s.io)")
        })?;
    Ok(Serving::from_leases(&leases.items, jiff::Timestamp::now()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: &str, renewed: &str) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "argocd",
                "labels": {LEASE_LABEL: "argocd-agent-principal"},
                "annotations": {SHARDS_ANNOTATION: "4"}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed},
        }))
        .unwrap()
    }

    #[test]
    fn each_agent_is_shown_with_the_valid_holder_of_its_shard() {
        let now: jiff::Timestamp = "2026-11-28T10:00:10Z".parse().unwrap();
        let count = ShardCount::new(4).unwrap();
        let agent_in = |k: u32| {
            (0..)
                .map(|i| format!("agent-{i}"))
                .find(|a| shard_of(a, count).get() == k)
                .unwrap()
        };
        let fresh = "2026-11-28T10:00:05.000000Z";
        let stale = "2026-11-28T09:59:50.000000Z";
        let leases = [
            lease(
                "argocd-agent-principal-shard-0",
                "principal-0@10.0.0.5",
                fresh,
            ),
            lease(
                "argocd-agent-principal-shard-1",
                "principal-1@10.0.0.6",
                fresh,
            ),
            lease(
                "argocd-agent-principal-shard-2",
                "principal-1@10.0.0.6",
                stale,
            ),
            lease("argocd-agent-principal-shard-3", "", fresh),
            lease(
                "argocd-agent-principal-replica-principal-0",
                "principal-0@10.0.0.5",
                fresh,
            ),
        ];
        let s = Serving::from_leases(&leases, now).unwrap();
        assert_eq!(s.replica(&agent_in(0)), "principal-0@10.0.0.5");
        assert_eq!(s.replica(&agent_in(1)), "principal-1@10.0.0.6");
        assert_eq!(s.replica(&agent_in(2)), NOBODY, "expired");
        assert_eq!(s.replica(&agent_in(3)), NOBODY, "released");
        assert_eq!(Serving::from_leases(&[], now), None, "not active/active");
    }
}
