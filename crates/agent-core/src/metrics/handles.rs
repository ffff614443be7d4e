//! Cached handles of the families every event touches: a per-event path neither builds a label
//! set nor hashes it.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

use super::peer::{Labels, l};

/// Handles of a one-label family by a static label value (event types, targets): a per-event path
/// neither builds the label set nor hashes it. A handle shares its value with the family's entry.
pub(super) struct ByStatic<M>(std::sync::RwLock<Vec<(&'static str, M)>>);

impl<M> Default for ByStatic<M> {
    fn default() -> Self {
        Self(Default::default())
    }
}

impl<M: Clone> ByStatic<M> {
    pub(super) fn get<C: prometheus_client::metrics::family::MetricConstructor<M>>(
        &self,
        family: &Family<Labels, M, C>,
        label: &str,
        value: &'static str,
    ) -> M {
        let found = self
            .0
            .read()
            .expect("poisoned")
            .iter()
            .find(|(v, _)| *v == value)
            .map(|(_, m)| m.clone());
        found.unwrap_or_else(|| {
            let m = family.get_or_create(&l(label, value)).clone();
            self.0.write().expect("poisoned").push((value, m.clone()));
            m
        })
    }
}

/// The `event_processing_time` handles of one peer (a session's agent name, or the agent's mode)
/// by (status, resource type): a session's events neither build the three-label set nor hash it.
pub struct PeerProcessing {
    pub(super) peer: String,
    pub(super) handles: std::sync::RwLock<Vec<((&'static str, &'static str), Histogram)>>,
}

impl PeerProcessing {
    pub fn new(peer: &str) -> Self {
        Self {
            peer: peer.to_string(),
            handles: Default::default(),
        }
    }
}

/// The [`ByStatic`] handles of the families every event touches.
#[derive(Default)]
pub(super) struct PerEvent {
    pub(super) queued: ByStatic<Counter>,
    pub(super) sent: ByStatic<Counter>,
    pub(super) received: ByStatic<Counter>,
    pub(super) propagation: ByStatic<Histogram>,
}
