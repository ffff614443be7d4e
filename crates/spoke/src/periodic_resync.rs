//! `--resync-interval` (`ARGOCD_AGENT_RESYNC_INTERVAL`; the peer's proposal, argocd-agent PR
//! #1037): while the stream is up, the resync of the agent's start runs again every interval, so a
//! lost event is recovered without a reconnect. Managed: a `request-update` per copy with its spec
//! checksum, then `request-synced-resource-list` with the set checksum; autonomous:
//! `request-resource-resync` asking for the set checksum too (our principal answers with a
//! `request-update` per hub copy, then `request-synced-resource-list`; a peer principal sends the
//! `request-update`s only). Both sides compare checksums: when nothing differs nothing is resent. Zero (the
//! default): off. The principal may refuse rounds that come sooner than its
//! `--resync-min-interval`.

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::session::Outbox;

use super::Inner;

impl Inner {
    /// Every `--resync-interval` while the stream is up (from one interval after it came up).
    pub(super) async fn periodic_resync(&self, out: &Outbox) {
        let every = self.cfg.resync_interval;
        if every.is_zero() {
            return;
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            tracing::debug!(mode = self.cfg.mode.as_str(), "periodic resync");
            match self.cfg.mode {
                Mode::Managed => self.answer_resource_resync(out).await,
                // with our principal's set checksum too: what the hub lacks is found as well
                Mode::Autonomous
                    if self
                        .principal_features
                        .lock()
                        .expect("poisoned")
                        .resync_synced_list =>
                {
                    out.send_reliable(
                        argocd_pull_agent_core::checksum::request_resource_resync_with_list(
                            &self.source(),
                        ),
                    );
                }
                Mode::Autonomous => {
                    out.send_reliable(argocd_pull_agent_core::objects::request_resource_resync(
                        &self.source(),
                    ));
                }
            }
            self.metrics.resync_request("sent");
        }
    }
}
