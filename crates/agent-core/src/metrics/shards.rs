//! Active/active principal replicas (`--ha-mode active-active`, ours: the peer has no such
//! mode): the shards a replica holds, the calls it forwards to the others, its rebalances.
//! Each replica exports its own; `argocd_principal_connected_agents` counts the agents it serves.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// The calls a replica forwards (`call` label): the agents' gRPC calls, the resource proxy's
/// requests (`resource`, container logs included) and web-terminal upgrades (`exec`), and the
/// Redis proxy's commands for agents (`redis`).
pub const FORWARDED_CALLS: [&str; 8] = [
    "authenticate",
    "refresh_token",
    "subscribe",
    "stream_logs",
    "stream_terminal",
    "resource",
    "exec",
    "redis",
];

#[derive(Debug, Default)]
pub struct ShardMetrics {
    held: Gauge,
    count: Gauge,
    forwarded: Family<Labels, Counter>,
    open: Gauge,
    rebalances: Counter,
    cached: Gauge,
}

impl ShardMetrics {
    /// Registers every family; each forwarded call's series starts at zero (also outside
    /// active/active, so that dashboards and alerts find them on every principal).
    pub fn register(&self, reg: &mut Registry) {
        for c in FORWARDED_CALLS {
            let _ = self
                .forwarded
                .get_or_create(&vec![("call".into(), c.into())]);
        }
        reg.register(
            "argocd_principal_ha_shards_held",
            "Shards this active/active replica holds (it serves their agents)",
            self.held.clone(),
        );
        reg.register(
            "argocd_principal_ha_shard_count",
            "The agents' shard count (--ha-shards) of this active/active replica",
            self.count.clone(),
        );
        reg.register(
            "argocd_principal_ha_streams_forwarded",
            "Calls of agents this replica does not serve, forwarded to the replica that does, by call",
            self.forwarded.clone(),
        );
        reg.register(
            "argocd_principal_ha_forwarded_streams",
            "Forwarded streams open now",
            self.open.clone(),
        );
        reg.register(
            "argocd_principal_ha_shard_rebalances",
            "Changes of the shards this replica holds",
            self.rebalances.clone(),
        );
        reg.register(
            "argocd_principal_hub_applications_cached",
            "Hub Applications in this principal's cache (an active/active replica keeps those of the agents it serves)",
            self.cached.clone(),
        );
    }

    /// The hub Applications in the cache now.
    pub fn cached(&self, n: usize) {
        self.cached.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// `n` more (or fewer, negative) hub Applications in the cache.
    pub fn cached_add(&self, n: i64) {
        self.cached.inc_by(n);
    }

    /// Active/active with `count` shards: every forwarded call's series starts at zero.
    pub fn sharded(&self, count: u32) {
        self.count.set(i64::from(count));
        for c in FORWARDED_CALLS {
            let _ = self
                .forwarded
                .get_or_create(&vec![("call".into(), c.into())]);
        }
    }

    pub fn held(&self, n: usize) {
        self.held.set(n as i64);
    }

    pub fn rebalanced(&self) {
        self.rebalances.inc();
    }

    pub fn forwarded(&self, call: &str) {
        self.forwarded
            .get_or_create(&vec![("call".into(), call.into())])
            .inc();
    }

    pub fn stream_opened(&self) {
        self.open.inc();
    }

    pub fn stream_closed(&self) {
        self.open.dec();
    }
}
