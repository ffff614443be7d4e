//! What the principal keeps in memory besides its settings: each agent's state (its mode, send
//! queue, session and what it was sent of each Application) and the cache form of hub
//! Applications.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::queue::SendQueue;

/// Hub Applications by namespace, then name, each as its JSON bytes.
pub(super) type HubCache = HashMap<String, HashMap<String, Arc<[u8]>>>;

/// The cache form of a hub object: its JSON as the wire carries it (Go's encoding), so that a
/// `create` for an agent shares these bytes instead of copying and encoding the object again.
pub(super) fn compact(h: &Value) -> Arc<[u8]> {
    argocd_pull_agent_core::event::gojson::to_vec(h).into()
}

#[derive(Default, Clone)]
pub(super) struct View {
    /// spec checksum the agent has (managed) / the agent's (autonomous)
    pub(super) spec: String,
    pub(super) op: String,
    pub(super) status: String,
    /// autonomous: the hub form of the agent's object (what hub edits are reverted to)
    pub(super) copy: Option<Value>,
    /// managed: the hub object's deletionTimestamp was sent to the agent
    pub(super) deleting: bool,
    /// the refresh annotation (`argocd.argoproj.io/refresh`) last forwarded to the agent
    pub(super) refresh: String,
}

pub(super) struct AgentState {
    pub(super) name: String,
    pub(super) mode: Mutex<Mode>,
    pub(super) queue: Arc<SendQueue>,
    pub(super) views: Mutex<HashMap<String, View>>,
    pub(super) generation: AtomicU64,
    pub(super) session: Mutex<Option<(u64, tokio::task::AbortHandle)>>,
    pub(super) connected: AtomicBool,
    pub(super) locks: o::KeyedLocks,
    /// managed: AppProjects the agent has, by name -> hash of the agent form sent
    pub(super) projects: Mutex<HashMap<String, String>>,
    /// managed: repository Secrets the agent has, by name -> hash of the form sent
    pub(super) repos: Mutex<HashMap<String, String>>,
    /// managed: the GPG keys ConfigMap the agent has, by name -> hash of the form sent
    pub(super) gpg: Mutex<HashMap<String, String>>,
    /// this principal process has resynced with the agent (the peer's `resyncStatus`): the resync
    /// requests go out on the first stream only
    pub(super) resynced: AtomicBool,
    /// the live stream's direct sender (with its generation): resource requests go here
    pub(super) outbox: Mutex<Option<(u64, argocd_pull_agent_core::session::Outbox)>>,
    /// when the last resync round this agent asked for was served (`--resync-min-interval`)
    pub(super) resync_round: Mutex<Option<tokio::time::Instant>>,
    /// the principal asked this managed agent for a resync round: its answer is always served
    pub(super) resync_solicited: AtomicBool,
    /// destination-based mapping routes this agent's Applications (mapping on, managed); read
    /// without the mode lock (the send path runs under the views lock)
    pub(super) mapped: AtomicBool,
}
