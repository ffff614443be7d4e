//! The Leases of the shard ownership: their names, labels and annotations, and how a replica
//! claims and releases one (the objects written; the writes are in `owner`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::ObjectMeta;

use super::id::{ShardCount, ShardId, fnv1a64};

/// Label on every Lease of the ownership: the `lease_name` they belong to (what a replica lists).
pub const LEASE_LABEL: &str = "argocd-pull.open-cluster-management.io/ha-lease";
/// Annotation on every Lease of the ownership: the shard count of the replica that wrote it.
pub const SHARDS_ANNOTATION: &str = "argocd-pull.open-cluster-management.io/ha-shards";
/// Annotation on every held Lease: which process (one start of a replica) holds it, so that two
/// processes with the same identity are told apart.
pub const INCARNATION_ANNOTATION: &str = "argocd-pull.open-cluster-management.io/ha-incarnation";

/// The Lease of shard `k`: `<lease_name>-shard-<k>`.
pub fn shard_lease_name(lease_name: &str, shard: ShardId) -> String {
    format!("{lease_name}-shard-{shard}")
}

/// The membership Lease of a replica: `<lease_name>-replica-<identity>`, the identity lowercased
/// with anything but `a-z 0-9 - .` turned into `-`; when that changed it (an identity such as
/// `pod-0@10.0.0.1:8443`) or it is longer than 40 characters, cut to 40 and followed by `-` and 8
/// hex digits of the identity's FNV-1a hash, so that distinct identities get distinct Leases.
pub fn replica_lease_name(lease_name: &str, identity: &str) -> String {
    let clean: String = identity
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = clean.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed == identity && !identity.is_empty() && identity.len() <= 40 {
        return format!("{lease_name}-replica-{identity}");
    }
    let cut: String = trimmed.chars().take(40).collect();
    let cut = cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = fnv1a64(identity.as_bytes()) as u32;
    if cut.is_empty() {
        format!("{lease_name}-replica-{hash:08x}")
    } else {
        format!("{lease_name}-replica-{cut}-{hash:08x}")
    }
}

/// Which Lease of the ownership a name is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// `<lease_name>-shard-<k>`, `k` as written (it may be beyond this replica's count).
    Shard(u32),
    /// `<lease_name>-replica-…`.
    Replica,
    /// Labelled as ours but named otherwise: ignored.
    Other,
}

/// What a listed Lease of the ownership says.
#[derive(Clone, Debug)]
pub struct LeaseView {
    pub name: String,
    pub kind: LeaseKind,
    pub resource_version: String,
    /// `spec.holderIdentity`, `None` when absent or empty.
    pub holder: Option<String>,
    pub incarnation: Option<String>,
    /// The [`SHARDS_ANNOTATION`], `None` when absent or not a number.
    pub shards: Option<u32>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Option<Duration>,
    pub lease: Lease,
}

impl LeaseView {
    pub fn new(lease_name: &str, lease: Lease) -> LeaseView {
        let name = lease.metadata.name.clone().unwrap_or_default();
        let kind = match name.strip_prefix(lease_name) {
            Some(rest) => match (rest.strip_prefix("-shard-"), rest.strip_prefix("-replica-")) {
                (Some(k), _) => k.parse().map_or(LeaseKind::Other, LeaseKind::Shard),
                (_, Some(_)) => LeaseKind::Replica,
                _ => LeaseKind::Other,
            },
            None => LeaseKind::Other,
        };
        let annotation = |key: &str| {
            lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
        };
        let spec = lease.spec.as_ref();
        LeaseView {
            name,
            kind,
            resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            incarnation: annotation(INCARNATION_ANNOTATION),
            shards: annotation(SHARDS_ANNOTATION).and_then(|s| s.parse().ok()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|&s| s > 0)
                .map(Duration::from_secs),
            lease,
        }
    }
}

/// Who writes a claim.
#[derive(Clone, Debug)]
pub struct Claimant<'a> {
    pub lease_name: &'a str,
    pub identity: &'a str,
    pub incarnation: &'a str,
    pub shards: ShardCount,
    pub duration: Duration,
}

/// The Lease `name` held by `who` and renewed now: `existing` (keeping its resourceVersion, so
/// that the replace fails if anyone wrote it since it was read) or a new one. `acquireTime` and
/// `leaseTransitions` change only when the holder does.
pub fn claim(existing: Option<&Lease>, name: &str, namespace: &str, who: &Claimant) -> Lease {
    let mut lease = existing.cloned().unwrap_or_else(|| Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        spec: None,
    });
    let labels = lease.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(LEASE_LABEL.into(), who.lease_name.into());
    let annotations = lease.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(SHARDS_ANNOTATION.into(), who.shards.to_string());
    annotations.insert(INCARNATION_ANNOTATION.into(), who.incarnation.into());
    let now = MicroTime(Timestamp::now());
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let same_holder = spec.holder_identity.as_deref() == Some(who.identity);
    if !same_holder {
        if spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty())
        {
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(who.identity.into());
        spec.acquire_time = Some(now.clone());
    }
    let secs = who.duration.as_secs() + u64::from(who.duration.subsec_nanos() > 0);
    spec.lease_duration_seconds = Some(i32::try_from(secs).unwrap_or(i32::MAX));
    spec.renew_time = Some(now);
    lease
}

/// `lease` given up: no holder (and no incarnation), so that anyone takes it at once.
pub fn release(lease: &Lease) -> Lease {
    let mut lease = lease.clone();
    if let Some(a) = lease.metadata.annotations.as_mut() {
        a.remove(INCARNATION_ANNOTATION);
    }
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
        spec.acquire_time = None;
    }
    lease
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names() {
        let c = ShardCount::DEFAULT;
        assert_eq!(
            shard_lease_name("principal", c.shard(7).unwrap()),
            "principal-shard-7"
        );
        assert_eq!(
            replica_lease_name("principal", "argocd-pull-principal-0"),
            "principal-replica-argocd-pull-principal-0"
        );
        let odd = replica_lease_name("principal", "Pod-0@10.0.0.1:8443");
        assert!(
            odd.starts_with("principal-replica-pod-0-10.0.0.1-8443-"),
            "{odd}"
        );
        assert_ne!(odd, replica_lease_name("principal", "pod-0@10.0.0.2:8443"));
        let long = replica_lease_name("p", &"x".repeat(100));
        assert_eq!(long.len(), "p-replica-".len() + 40 + 9);
        assert!(replica_lease_name("p", "@@").starts_with("p-replica-"));
        assert!(
            replica_lease_name("p", "@@")
                .trim_start_matches("p-replica-")
                .chars()
                .all(|c| c.is_ascii_hexdigit())
        );
    }

    #[test]
    fn names_are_read_back_as_their_kind() {
        let lease = |name: &str| Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        let kind = |name| LeaseView::new("p", lease(name)).kind;
        assert_eq!(kind("p-shard-3"), LeaseKind::Shard(3));
        assert_eq!(kind("p-shard-x"), LeaseKind::Other);
        assert_eq!(kind("p-replica-a"), LeaseKind::Replica);
        assert_eq!(kind("q-shard-3"), LeaseKind::Other);
    }

    #[test]
    fn a_claim_records_holder_count_and_incarnation_and_a_release_clears_them() {
        let who = Claimant {
            lease_name: "p",
            identity: "a",
            incarnation: "i1",
            shards: ShardCount::DEFAULT,
            duration: Duration::from_millis(1500),
        };
        let lease = claim(None, "p-shard-0", "ns", &who);
        let view = LeaseView::new("p", lease.clone());
        assert_eq!(view.holder.as_deref(), Some("a"));
        assert_eq!(view.incarnation.as_deref(), Some("i1"));
        assert_eq!(view.shards, Some(32));
        assert_eq!(view.duration, Some(Duration::from_secs(2)));
        assert_eq!(lease.metadata.labels.as_ref().unwrap()[LEASE_LABEL], "p");
        let spec = lease.spec.as_ref().unwrap();
        assert_eq!(spec.lease_transitions, None);
        let renewed = claim(Some(&lease), "p-shard-0", "ns", &who);
        assert_eq!(
            renewed.spec.as_ref().unwrap().acquire_time,
            spec.acquire_time
        );
        let taken = claim(
            Some(&renewed),
            "p-shard-0",
            "ns",
            &Claimant {
                identity: "b",
                ..who.clone()
            },
        );
        assert_eq!(taken.spec.as_ref().unwrap().lease_transitions, Some(1));
        let released = LeaseView::new("p", release(&taken));
        assert_eq!(released.holder, None);
        assert_eq!(released.incarnation, None);
        assert_eq!(released.shards, Some(32));
    }
}
