//! Active/active (`--ha-mode active-active`): the hub cache holds the Applications of the agents
//! of the shards this replica holds, so its memory follows its share of the fleet. A shard given
//! up leaves the cache at once. A shard taken is filled by one streamed list of the hub's
//! Applications run beside the watch (the watch is not restarted and nothing cached is handled
//! again) and served once it is in ([`super::owners::Owners::set_loaded`]): until then calls for
//! its agents wait, since a resync from a partial cache would tell an agent to delete what the
//! hub has. Shards taken while a fill runs are filled by the next one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use argocd_pull_ops::shards::{ShardCount, ShardId, shard_of};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::Value;

use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::store::{Kind, StoreResult, WatchEvent};

use super::Inner;
use super::state::HubCache;

type Key = (String, String);

/// The shards the hub cache covers and the fill of the ones just taken.
pub(super) struct Shards {
    count: ShardCount,
    /// held: loaded, or being filled (the watch keeps their Applications from the moment they
    /// were taken)
    covering: BTreeSet<ShardId>,
    /// taken while a fill runs: the next fill's
    waiting: BTreeSet<ShardId>,
    fill: Option<Fill>,
}

/// One streamed list of the hub's Applications, keeping those of `shards`.
struct Fill {
    shards: BTreeSet<ShardId>,
    list: BoxStream<'static, StoreResult<WatchEvent>>,
    found: HashMap<Key, Arc<[u8]>>,
    /// deleted according to the watch since the fill started: not added from the list
    deleted: HashSet<Key>,
}

impl Shards {
    /// Covering `held` (the cache as first listed holds theirs).
    pub(super) fn new(count: ShardCount, held: BTreeSet<ShardId>) -> Shards {
        Shards {
            count,
            covering: held,
            waiting: BTreeSet::new(),
            fill: None,
        }
    }

    /// Whether the cache keeps the Applications of namespace (agent) `ns`.
    pub(super) fn covers(&self, ns: &str) -> bool {
        self.covering.contains(&shard_of(ns, self.count))
    }

    /// The shards fully in the cache.
    fn loaded(&self) -> BTreeSet<ShardId> {
        let filling = self.fill.iter().flat_map(|f| f.shards.iter());
        let busy: BTreeSet<&ShardId> = filling.chain(self.waiting.iter()).collect();
        self.covering
            .iter()
            .filter(|k| !busy.contains(k))
            .copied()
            .collect()
    }

    /// A deletion the watch saw (a fill running must not add the object back).
    pub(super) fn deleted(&mut self, ns: &str, name: &str) {
        if let Some(f) = &mut self.fill
            && f.shards.contains(&shard_of(ns, self.count))
        {
            f.deleted.insert((ns.to_string(), name.to_string()));
        }
    }

    pub(super) fn is_filling(&self) -> bool {
        self.fill.is_some()
    }

    /// A complete list of the hub (the watch's own) holds every covered shard: no fill needed.
    pub(super) fn listed(&mut self) {
        self.fill = None;
        self.waiting.clear();
    }
}

impl Inner {
    /// The shards held are `now`: those given up leave the cache; those taken are covered by the
    /// watch from now on and filled. Publishes what is loaded.
    pub(super) fn shards_now(&self, sh: &mut Shards, now: &BTreeSet<ShardId>) {
        let lost: BTreeSet<ShardId> = sh.covering.difference(now).copied().collect();
        if !lost.is_empty() {
            sh.covering.retain(|k| now.contains(k));
            sh.waiting.retain(|k| now.contains(k));
            if let Some(f) = &mut sh.fill {
                f.shards.retain(|k| now.contains(k));
            }
            let mut cache = self.hub.apps.lock().expect("poisoned");
            cache.retain(|ns, _| !lost.contains(&shard_of(ns, sh.count)));
            self.metrics
                .ha
                .shards
                .cached(cache.values().map(HashMap::len).sum());
        }
        let taken: BTreeSet<ShardId> = now.difference(&sh.covering).copied().collect();
        if !taken.is_empty() {
            sh.covering.extend(taken.iter().copied());
            sh.waiting.extend(taken);
            self.start_fill(sh);
        }
        self.publish_loaded(sh);
    }

    /// Starts a fill of the waiting shards when none runs.
    fn start_fill(&self, sh: &mut Shards) {
        if sh.fill.is_some() || sh.waiting.is_empty() {
            return;
        }
        tracing::info!(shards = ?sh.waiting, "reading the hub Applications of the shards taken");
        sh.fill = Some(Fill {
            shards: std::mem::take(&mut sh.waiting),
            list: self.store.watch_streaming(Kind::Application, None),
            found: HashMap::new(),
            deleted: HashSet::new(),
        });
    }

    pub(super) fn publish_loaded(&self, sh: &Shards) {
        if let Some(r) = &self.router {
            r.owners.set_loaded(sh.loaded());
        }
    }

    /// The next event of the running fill (pending while none runs).
    pub(super) async fn next_fill_event(
        sh: Option<&mut Shards>,
    ) -> Option<StoreResult<WatchEvent>> {
        match sh.and_then(|sh| sh.fill.as_mut()) {
            Some(f) => f.list.next().await,
            None => std::future::pending().await,
        }
    }

    /// Handles the fill's event `ev` (`None`: its stream ended).
    pub(super) fn on_fill_event(&self, sh: &mut Shards, ev: Option<StoreResult<WatchEvent>>) {
        let count = sh.count;
        let Some(f) = &mut sh.fill else { return };
        match ev {
            Some(Ok(WatchEvent::InitApply(h))) => {
                let ns = o::namespace(&h);
                if f.shards.contains(&shard_of(ns, count)) && self.ns_allowed(ns) {
                    f.found.insert(
                        (ns.to_string(), o::name(&h).to_string()),
                        super::state::compact(&h),
                    );
                }
            }
            Some(Ok(WatchEvent::InitDone)) => {
                let f = sh.fill.take().expect("running");
                self.fill_done(f);
                self.start_fill(sh);
                self.publish_loaded(sh);
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                tracing::warn!(error = %e, "reading the hub Applications of the shards taken failed; reading again")
            }
            None => {
                // the list ended before it was complete: read again
                let f = sh.fill.take().expect("running");
                sh.waiting.extend(f.shards);
                self.start_fill(sh);
            }
        }
    }

    /// A complete fill: what the list found goes into the cache (see [`merge`]).
    fn fill_done(&self, f: Fill) {
        let added = merge(
            &mut self.hub.apps.lock().expect("poisoned"),
            f.found,
            &f.deleted,
        );
        self.metrics.ha.shards.cached_add(added);
        tracing::info!(shards = ?f.shards, applications = added, "the shards taken are loaded: serving their agents");
    }
}

/// Adds what a fill's list `found` to `cache`, except what the watch deleted since the fill
/// started (`deleted`) or has already put there (a newer version than the list's); returns how
/// many were added.
fn merge(cache: &mut HubCache, found: HashMap<Key, Arc<[u8]>>, deleted: &HashSet<Key>) -> i64 {
    let mut added = 0;
    for ((ns, name), enc) in found {
        if deleted.contains(&(ns.clone(), name.clone())) {
            continue;
        }
        if let std::collections::hash_map::Entry::Vacant(e) =
            cache.entry(ns).or_default().entry(name)
        {
            e.insert(enc);
            added += 1;
        }
    }
    added
}

/// Whether `h` is an Application this principal keeps, given `shards` (none: every one).
pub(super) fn kept(inner: &Inner, shards: Option<&Shards>, h: &Value) -> bool {
    let ns = o::namespace(h);
    inner.ns_allowed(ns)
        && match shards {
            Some(sh) if !inner.cfg.destination_based_mapping => sh.covers(ns),
            _ => true,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_adds_what_the_watch_has_not_deleted_or_replaced_since() {
        let bytes = |s: &str| -> Arc<[u8]> { s.as_bytes().into() };
        let key = |ns: &str, n: &str| (ns.to_string(), n.to_string());
        let mut cache = HubCache::new();
        // the watch already has a newer `a1/new` than the list saw
        cache
            .entry("a1".into())
            .or_default()
            .insert("new".into(), bytes("watch"));
        let found: HashMap<Key, Arc<[u8]>> = [
            (key("a1", "new"), bytes("list")),
            (key("a1", "gone"), bytes("list")),
            (key("a1", "kept"), bytes("list")),
            (key("a2", "kept"), bytes("list")),
        ]
        .into();
        let deleted: HashSet<Key> = [key("a1", "gone")].into();
        assert_eq!(merge(&mut cache, found, &deleted), 2);
        assert_eq!(&*cache["a1"]["new"], b"watch", "the watch's version wins");
        assert!(
            !cache["a1"].contains_key("gone"),
            "a deletion is not undone"
        );
        assert_eq!(&*cache["a1"]["kept"], b"list");
        assert_eq!(&*cache["a2"]["kept"], b"list");
    }
}
