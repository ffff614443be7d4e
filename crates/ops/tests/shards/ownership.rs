//! Ownership as replicas come and go.

use std::collections::BTreeSet;
use std::time::Duration;

use argocd_pull_hub::Hub;

use crate::harness::{Replica, config, shard_holders, wait_fair, wait_for};

#[tokio::test]
async fn three_replicas_split_the_shards_fairly_each_owned_once() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    let b = Replica::start(&hub, config("b"));
    let c = Replica::start(&hub, config("c"));
    let sets = wait_fair(&hub, &[&a, &b, &c]).await;
    let mut sizes: Vec<usize> = sets.iter().map(BTreeSet::len).collect();
    sizes.sort();
    assert_eq!(sizes, [10, 11, 11]);
    // each replica learns where every shard it does not own is served (the agent router)
    for r in [&a, &b, &c] {
        let mut others = r.others.clone();
        let owners = tokio::time::timeout(
            crate::harness::GUARD,
            others.wait_for(|o| o.len() + r.owned.borrow().len() == 32),
        )
        .await
        .expect("the others' shards are seen")
        .expect("the owner runs")
        .clone();
        for (shard, holder) in &owners {
            assert_ne!(holder, &r.name, "only others' shards");
            let theirs = [&a, &b, &c]
                .into_iter()
                .find(|x| &x.name == holder)
                .unwrap();
            assert!(
                theirs.owned.borrow().contains(shard),
                "{holder} owns {shard}"
            );
        }
    }
    for r in [a, b, c] {
        r.stop().await;
    }
    assert!(
        shard_holders(&hub).await.is_empty(),
        "every Lease released on shutdown"
    );
}

#[tokio::test]
async fn a_stopped_replica_hands_its_shards_over_without_waiting_for_expiry() {
    let hub = Hub::new();
    // Leases far longer than the guard of the waits: only a release can move the shards in time
    let long = |name| {
        let mut c = config(name);
        c.lease_duration = Duration::from_secs(120);
        c
    };
    let a = Replica::start(&hub, long("a"));
    let b = Replica::start(&hub, long("b"));
    let c = Replica::start(&hub, long("c"));
    let before = wait_fair(&hub, &[&a, &b, &c]).await;
    c.stop().await;
    let after = wait_fair(&hub, &[&a, &b]).await;
    // a and b kept theirs and took c's
    assert!(before[0].is_subset(&after[0]) && before[1].is_subset(&after[1]));
    for s in &before[2] {
        assert!(after[0].contains(s) || after[1].contains(s));
    }
}

#[tokio::test]
async fn a_killed_replica_s_shards_are_taken_once_its_leases_expire() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    let b = Replica::start(&hub, config("b"));
    let c = Replica::start(&hub, config("c"));
    let before = wait_fair(&hub, &[&a, &b, &c]).await;
    // SIGKILL: no release
    c.task.abort();
    let _ = c.task.await;
    let holders = shard_holders(&hub).await;
    for s in &before[2] {
        assert_eq!(
            holders[&s.get()],
            "c",
            "a killed replica leaves its Leases held"
        );
    }
    let after = wait_fair(&hub, &[&a, &b]).await;
    assert!(before[0].is_subset(&after[0]) && before[1].is_subset(&after[1]));
}

#[tokio::test]
async fn a_fourth_replica_takes_its_share_and_nothing_else_moves() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    let b = Replica::start(&hub, config("b"));
    let c = Replica::start(&hub, config("c"));
    let before = wait_fair(&hub, &[&a, &b, &c]).await;
    let d = Replica::start(&hub, config("d"));
    let after = wait_fair(&hub, &[&a, &b, &c, &d]).await;
    assert_eq!(after.iter().map(BTreeSet::len).collect::<Vec<_>>(), [8; 4]);
    let moved = before
        .iter()
        .zip(&after)
        .map(|(old, new)| {
            assert!(new.is_subset(old), "the others only give shards up");
            old.len() - new.len()
        })
        .sum::<usize>();
    assert_eq!(moved, 8, "only the newcomer's share moves");
}

#[tokio::test]
async fn a_restarted_replica_with_the_same_name_gets_back_to_work() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    wait_fair(&hub, &[&a]).await;
    a.task.abort();
    let _ = a.task.await;
    // the same pod name, a new process, while the old one's Leases are still held
    let again = Replica::start(&hub, config("a"));
    wait_fair(&hub, &[&again]).await;
    again.stop().await;
}

#[tokio::test]
async fn the_owned_set_is_published_only_with_the_leases_behind_it() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    let b = Replica::start(&hub, config("b"));
    // at every change a replica publishes, the Leases name it for every shard it claims
    let mut owned = a.owned.clone();
    for _ in 0..3 {
        tokio::time::timeout(crate::harness::GUARD, owned.changed())
            .await
            .expect("a publishes")
            .expect("a runs");
        let set = owned.borrow_and_update().clone();
        let holders = shard_holders(&hub).await;
        for s in &set {
            assert_eq!(holders.get(&s.get()).map(String::as_str), Some("a"));
        }
        if set.len() == 16 {
            break;
        }
    }
    wait_for(&[&a, &b], "16 each", |s| s.iter().all(|s| s.len() == 16)).await;
}

#[tokio::test]
async fn a_replica_cut_off_from_the_api_server_stops_counting_its_shards_then_takes_them_back() {
    let hub = Hub::new();
    let a = Replica::start(&hub, config("a"));
    wait_fair(&hub, &[&a]).await;
    // every read fails: no renewal gets through
    hub.inject_fault(argocd_pull_hub::Fault::new(
        &[argocd_pull_hub::Verb::List],
        "leases",
        500,
        u32::MAX,
    ));
    wait_for(
        &[&a],
        "nothing owned once the Leases may have expired",
        |s| s[0].is_empty(),
    )
    .await;
    assert!(!a.task.is_finished(), "an outage is not fatal");
    hub.clear_faults();
    wait_fair(&hub, &[&a]).await;
    a.stop().await;
}
