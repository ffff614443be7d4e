use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;

fn live(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn c32() -> ShardCount {
    ShardCount::DEFAULT
}

/// Replicas deciding and acting one after another on a shared view (each one's writes seen by
/// the next, as the Leases make them), until a whole round changes nothing. With `same_snapshot`,
/// every replica of a round decides from the view at the round's start and a take only succeeds
/// if the shard is still free when applied (the optimistic-concurrency write losing otherwise).
/// Returns how many takes succeeded.
fn converge(holders: &mut Holders, replicas: &BTreeSet<String>, same_snapshot: bool) -> u32 {
    let mut takes = 0;
    for _round in 0..50 {
        let before = holders.clone();
        for me in replicas {
            let view = if same_snapshot { &before } else { &*holders };
            let d = decide(me, replicas, view);
            for s in d.release {
                assert_eq!(*holders.get(s), Holder::Valid(me.clone()));
                holders.set(s, Holder::Free);
            }
            for s in d.acquire {
                if *holders.get(s) == Holder::Free {
                    holders.set(s, Holder::Valid(me.clone()));
                    takes += 1;
                }
            }
        }
        if *holders == before {
            return takes;
        }
    }
    panic!("no convergence: {holders:?}");
}

/// Shards owned by a replica at the start and by another at the end.
fn moved(from: &Holders, to: &Holders) -> u32 {
    from.iter()
        .filter(|(s, h)| matches!(h, Holder::Valid(_)) && to.get(*s) != *h)
        .count() as u32
}

fn assert_fair(holders: &Holders, replicas: &BTreeSet<String>) {
    let per = holders.per_holder();
    let n = replicas.len() as u32;
    let (lo, hi) = (32 / n, 32_u32.div_ceil(n));
    for r in replicas {
        let got = per.get(r.as_str()).copied().unwrap_or(0);
        assert!(
            (lo..=hi).contains(&got),
            "{r} holds {got}, fair is {lo}..={hi}: {per:?}"
        );
    }
    assert_eq!(
        per.values().sum::<u32>(),
        32,
        "every shard owned: {holders:?}"
    );
    assert!(per.keys().all(|k| replicas.contains(*k)));
}

fn names(n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("replica-{i}")).collect()
}

#[test]
fn fair_shares_of_32_shards_for_1_to_5_replicas() {
    let want: [&[u32]; 5] = [
        &[32],
        &[16, 16],
        &[11, 11, 10],
        &[8, 8, 8, 8],
        &[7, 7, 6, 6, 6],
    ];
    for (n, want) in (1..=5).zip(want) {
        let replicas = names(n);
        let shares = fair_shares(c32(), &replicas, |_| 0);
        let got: Vec<u32> = shares.values().copied().collect();
        assert_eq!(got, want, "{n} replicas");
        assert_eq!(got.iter().sum::<u32>(), 32);
    }
    assert!(fair_shares(c32(), &BTreeSet::new(), |_| 0).is_empty());
}

#[test]
fn the_extra_shards_go_to_the_replicas_holding_most() {
    let replicas = live(&["a", "b", "c"]);
    let shares = fair_shares(c32(), &replicas, |id| if id == "c" { 16 } else { 8 });
    assert_eq!(shares, BTreeMap::from([("a", 11), ("b", 10), ("c", 11)]));
}

#[test]
fn from_nothing_every_shard_is_owned_once_at_a_fair_split() {
    for n in 1..=5 {
        for same_snapshot in [false, true] {
            let replicas = names(n);
            let mut holders = Holders::free(c32());
            assert_eq!(converge(&mut holders, &replicas, same_snapshot), 32);
            assert_fair(&holders, &replicas);
        }
    }
}

#[test]
fn a_joining_replica_takes_only_its_share_from_the_others() {
    for n in 1..=4 {
        for same_snapshot in [false, true] {
            let mut replicas = names(n);
            let mut holders = Holders::free(c32());
            converge(&mut holders, &replicas, false);
            let before = holders.clone();
            replicas.insert("newcomer".into());
            let takes = converge(&mut holders, &replicas, same_snapshot);
            assert_fair(&holders, &replicas);
            let moves = moved(&before, &holders);
            assert_eq!(takes, moves, "no shard moves twice");
            let newcomer = holders.held_by("newcomer").len() as u32;
            // only what the newcomer takes moves, and it takes the smaller fair share
            assert_eq!(moves, newcomer, "{n} → {} replicas", n + 1);
            assert_eq!(newcomer, 32 / (n as u32 + 1), "{n} → {} replicas", n + 1);
        }
    }
}

#[test]
fn a_leaving_replica_s_shards_alone_move_to_the_others() {
    for n in 2..=5 {
        let mut replicas = names(n);
        let mut holders = Holders::free(c32());
        converge(&mut holders, &replicas, false);
        let gone = "replica-0".to_string();
        let orphans = holders.held_by(&gone);
        replicas.remove(&gone);
        // its Leases expire
        for &s in &orphans {
            holders.set(s, Holder::Free);
        }
        let before = holders.clone();
        let takes = converge(&mut holders, &replicas, true);
        assert_eq!(takes as usize, orphans.len());
        assert_fair(&holders, &replicas);
        assert_eq!(moved(&before, &holders), 0, "nobody else's shard moves");
        let mut taken: BTreeSet<ShardId> = BTreeSet::new();
        for r in &replicas {
            taken.extend(holders.held_by(r).difference(&before.held_by(r)));
        }
        assert_eq!(taken, orphans);
    }
}

#[test]
fn a_replica_not_yet_in_the_live_set_still_counts_itself() {
    let holders = Holders::free(c32());
    let d = decide("me", &live(&["other"]), &holders);
    assert_eq!(d.share, 16);
    assert_eq!(d.acquire.len(), 16);
}

#[test]
fn the_holder_of_a_lease_is_free_when_missing_empty_or_expired() {
    assert_eq!(Holder::from_lease(None, false), Holder::Free);
    assert_eq!(Holder::from_lease(Some(""), false), Holder::Free);
    assert_eq!(Holder::from_lease(Some("a"), true), Holder::Free);
    assert_eq!(
        Holder::from_lease(Some("a"), false),
        Holder::Valid("a".into())
    );
}

/// Any view: each shard free or held by one of 6 identities (5 possibly live, 1 never live).
fn any_view() -> impl Strategy<Value = (Holders, BTreeSet<String>, usize)> {
    (
        proptest::collection::vec(0..7usize, 32),
        proptest::collection::btree_set(0..5usize, 0..=5),
        0..5usize,
    )
        .prop_map(|(h, live, me)| {
            let id = |i: usize| format!("r{i}");
            let holders = Holders::from_fn(c32(), |s| match h[s.get() as usize] {
                0 => Holder::Free,
                i => Holder::Valid(id(i - 1)),
            });
            (holders, live.into_iter().map(id).collect(), me)
        })
}

proptest! {
    #[test]
    fn a_decision_never_takes_a_validly_held_shard((holders, live, me) in any_view()) {
        let me = format!("r{me}");
        let d = decide(&me, &live, &holders);
        let mine = holders.held_by(&me);
        for s in &d.acquire {
            prop_assert_eq!(holders.get(*s), &Holder::Free);
        }
        prop_assert!(d.release.is_subset(&mine));
        prop_assert_eq!(d.keep.union(&d.release).copied().collect::<BTreeSet<_>>(), mine);
        prop_assert!(d.release.is_empty() || d.acquire.is_empty());
        prop_assert!(d.keep.len() + d.acquire.len() <= d.share as usize);
        let n = live.len() as u32 + u32::from(!live.contains(&me));
        prop_assert!(d.share == 32 / n || d.share == 32_u32.div_ceil(n));
    }
}
