//! Conflicting settings and refused Leases stop a replica with an error naming the fix.

use argocd_pull_hub::{Fault, Hub, Verb};
use argocd_pull_ops::shards::ShardError;

use crate::harness::{Replica, config, count, shard_holders, wait_fair};

#[tokio::test]
async fn a_replica_with_another_shard_count_stops_and_the_running_one_keeps_serving() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    wait_fair(&hub, &[&a]).await;
    let mut a_owned = a.owned.clone();
    a_owned.mark_unchanged();
    let mut other = config("b");
    other.shards = count(16);
    let b = Replica::start(&hub, other);
    let err = b.failure().await;
    assert!(
        matches!(err, ShardError::ShardCountMismatch { ours: 16, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("with 32 shards while this replica has 16"),
        "{msg}"
    );
    assert!(
        msg.contains("give every replica the same shard count (--ha-shards)"),
        "{msg}"
    );
    // b took nothing: a kept every shard all along and goes on renewing
    assert!(!a_owned.has_changed().unwrap(), "a's shards never changed");
    assert!(shard_holders(&hub).await.values().all(|h| h == "a"));
    assert!(!a.task.is_finished());
    a.stop().await;
}

#[tokio::test]
async fn two_replicas_with_the_same_name_stop_the_newcomer() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    wait_fair(&hub, &[&a]).await;
    let mut a_owned = a.owned.clone();
    a_owned.mark_unchanged();
    let twin = Replica::start(&hub, config("a"));
    let err = twin.failure().await;
    let msg = err.to_string();
    assert!(
        matches!(err, ShardError::DuplicateIdentity { .. }),
        "{err:?}"
    );
    assert!(msg.contains("two replicas with the same name"), "{msg}");
    assert!(msg.contains("give each replica a unique identity"), "{msg}");
    // the twin renewed none of a's Leases: a kept every shard all along
    assert!(!a_owned.has_changed().unwrap(), "a's shards never changed");
    assert!(!a.task.is_finished());
    a.stop().await;
}

#[tokio::test]
async fn leases_the_api_server_refuses_name_the_rbac_to_grant() {
    // (two lists refused: the owner's watch of the Leases lists them too)
    for (verb, times, what) in [
        (Verb::List, 2, "list the Leases of namespace default"),
        (Verb::Create, 1, "create Lease default/principal-replica-a"),
    ] {
        let hub = Hub::new();
        hub.inject_fault(Fault::new(&[verb], "leases", 403, times));
        let a = Replica::start(&hub, config("a"));
        let err = a.failure().await;
        let msg = err.to_string();
        assert!(matches!(err, ShardError::Forbidden { .. }), "{err:?}");
        assert!(msg.contains(&format!("refused to {what}")), "{msg}");
        assert!(
            msg.contains("grant this replica's ServiceAccount get, list, create and update on leases.coordination.k8s.io in namespace default"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn invalid_settings_are_refused_before_anything_runs() {
    let hub = Hub::new();
    let mut c = config("a");
    c.lease_name = "Bad_Name".into();
    let err = argocd_pull_ops::shards::ShardOwner::new(hub.client(), c)
        .err()
        .expect("refused");
    assert!(err.to_string().contains("lease name \"Bad_Name\""), "{err}");
}
