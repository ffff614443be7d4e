//! `--resync-min-interval` (the peer's proposal, argocd-agent PR #1037, `--resync-min-interval` /
//! `ARGOCD_PRINCIPAL_RESYNC_MIN_INTERVAL`): a resync round an agent asks for — a managed agent's
//! `request-synced-resource-list`, an autonomous agent's `request-resource-resync` — sooner than
//! this after the last one served is refused with a warning and dropped (the session still ACKs
//! it), counted in `argocd_principal_resync_requests_total{result="refused"}`. The first round of
//! an agent, and a managed agent's answer to the principal's own `request-resource-resync`, are
//! always served. Zero (the default): no limit.

use std::sync::atomic::Ordering;

use super::{AgentState, Inner};

impl Inner {
    /// Whether the resync round `a` asks for now (`what`: the request's type) is served.
    pub(super) fn admit_resync_round(&self, a: &AgentState, what: &str) -> bool {
        let min = self.cfg.resync_min_interval;
        let now = tokio::time::Instant::now();
        let mut last = a.resync_round.lock().expect("poisoned");
        let since = last.map(|t| now.duration_since(t));
        // the principal's own request is answered once: that answer passes whatever the time
        let ok = min.is_zero()
            || since.is_none_or(|d| d >= min)
            || a.resync_solicited.swap(false, Ordering::SeqCst);
        if ok {
            *last = Some(now);
            self.metrics.resync_request("accepted");
        } else {
            self.metrics.resync_request("refused");
            tracing::warn!(
                agent = %a.name,
                request = what,
                since_last = ?since.unwrap_or_default(),
                min_interval = ?min,
                "resync round refused: it comes sooner after the last one than this principal's --resync-min-interval; set the agent's --resync-interval (ARGOCD_AGENT_RESYNC_INTERVAL) to at least that"
            );
        }
        ok
    }
}
