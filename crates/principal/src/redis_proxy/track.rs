//! What the Redis proxy keeps between Argo CD's connections and the agents' streams: requests
//! waiting for an agent's `redis-response` (one oneshot per request UUID, woken by the response
//! event — the peer's `EventIDTracker`), and the open Argo CD connections that subscription
//! pushes go to (the peer's `ConnectionIDTracker`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, mpsc, oneshot};

use argocd_pull_agent_core::redis_wire::RedisResponseBody;

/// An agent's answer, or why there is none.
pub type Answer = Result<RedisResponseBody, String>;

type Waiters = HashMap<String, (String, oneshot::Sender<Answer>)>;

/// One Argo CD connection to the proxy, as seen from the event handlers.
pub struct ConnShared {
    pub id: String,
    /// Bytes for Argo CD (the connection's writer task): replies, forwarded hub traffic, pushes.
    pub tx: mpsc::Sender<Vec<u8>>,
    /// The client switched to RESP3 (`HELLO 3`): pub/sub messages go as `>` pushes.
    pub resp3: AtomicBool,
    /// Agents this connection asked (pinged while it is open; it closes when they disconnect).
    pub agents: Mutex<HashSet<String>>,
    /// `(agent, channel)` subscriptions answered by agents.
    pub subs: Mutex<HashSet<(String, String)>>,
    /// Ends the connection (agent gone, failed ping).
    pub close: Notify,
    pub closed: AtomicBool,
    /// Active/active, on the replica serving the agents: this is another replica's connection,
    /// whose subscription pushes go there as `(agent, channel)`.
    pub relay: Option<mpsc::Sender<(String, String)>>,
    /// ... and on the replica holding Argo CD's connection: the push streams from the replicas
    /// serving the agents it uses, by replica.
    pub relays: Mutex<HashMap<std::net::SocketAddr, tokio::task::AbortHandle>>,
}

impl ConnShared {
    pub fn new(id: String, tx: mpsc::Sender<Vec<u8>>) -> Self {
        Self {
            id,
            tx,
            resp3: AtomicBool::new(false),
            agents: Mutex::new(HashSet::new()),
            subs: Mutex::new(HashSet::new()),
            close: Notify::new(),
            closed: AtomicBool::new(false),
            relay: None,
            relays: Mutex::new(HashMap::new()),
        }
    }

    /// Another replica's connection `id`, whose pushes go to `relay`.
    pub fn relayed(id: String, relay: mpsc::Sender<(String, String)>) -> Self {
        let (tx, _) = mpsc::channel(1);
        Self {
            relay: Some(relay),
            ..Self::new(id, tx)
        }
    }

    /// Stops the push streams from other replicas (the connection ended).
    pub fn end_relays(&self) {
        for (_, h) in lock(&self.relays).drain() {
            h.abort();
        }
    }

    pub fn shut(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.close.notify_one();
    }

    pub fn uses(&self, agent: &str) -> bool {
        lock(&self.agents).contains(agent)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a response could not be delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum Unmatched {
    /// No request waits for it (late, duplicate or never asked).
    NotTracked,
    /// Another agent's request: only the agent asked may answer.
    WrongAgent(String),
}

#[derive(Default)]
pub struct Tracker {
    waiters: Arc<Mutex<Waiters>>,
    conns: Mutex<HashMap<String, Arc<ConnShared>>>,
}

/// Untracks its request when the wait ends (answered, timed out, connection gone).
pub struct Registration {
    waiters: Arc<Mutex<Waiters>>,
    uuid: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&self.waiters).remove(&self.uuid);
    }
}

impl Tracker {
    pub fn register(&self, uuid: &str, agent: &str) -> (oneshot::Receiver<Answer>, Registration) {
        let (tx, rx) = oneshot::channel();
        lock(&self.waiters).insert(uuid.to_string(), (agent.to_string(), tx));
        (
            rx,
            Registration {
                waiters: self.waiters.clone(),
                uuid: uuid.to_string(),
            },
        )
    }

    /// Delivers `answer` from `agent` to the request `uuid`.
    pub fn complete(&self, agent: &str, uuid: &str, answer: Answer) -> Result<(), Unmatched> {
        let mut g = lock(&self.waiters);
        match g.get(uuid) {
            None => return Err(Unmatched::NotTracked),
            Some((a, _)) if a != agent => return Err(Unmatched::WrongAgent(a.clone())),
            Some(_) => {}
        }
        let (_, tx) = g.remove(uuid).expect("checked above");
        drop(g);
        tx.send(answer).map_err(|_| Unmatched::NotTracked)
    }

    pub fn pending(&self) -> usize {
        lock(&self.waiters).len()
    }

    pub fn add_conn(&self, c: Arc<ConnShared>) {
        lock(&self.conns).insert(c.id.clone(), c);
    }

    pub fn remove_conn(&self, id: &str) {
        lock(&self.conns).remove(id);
    }

    pub fn conn(&self, id: &str) -> Option<Arc<ConnShared>> {
        lock(&self.conns).get(id).cloned()
    }

    pub fn connections(&self) -> usize {
        lock(&self.conns).len()
    }

    /// `agent`'s stream ended: its waiting requests fail now (not at the timeout) and the Argo CD
    /// connections that use it are closed (the peer closes them at its next failed ping), so
    /// Argo CD reconnects and subscribes again once the agent is back.
    pub fn agent_gone(&self, agent: &str) {
        lock(&self.waiters).retain(|_, (a, _)| a != agent);
        let conns: Vec<Arc<ConnShared>> = lock(&self.conns).values().cloned().collect();
        for c in conns {
            if c.uses(agent) {
                c.shut();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_reach_only_their_request_from_their_agent() {
        let t = Tracker::default();
        let (rx, _g) = t.register("u1", "a");
        let (rx2, _g2) = t.register("u2", "b");
        assert_eq!(
            t.complete("b", "u1", Ok(Default::default())),
            Err(Unmatched::WrongAgent("a".into()))
        );
        t.complete("a", "u1", Err("x".into())).unwrap();
        assert_eq!(rx.await.unwrap(), Err("x".to_string()));
        assert_eq!(
            t.complete("a", "u1", Ok(Default::default())),
            Err(Unmatched::NotTracked)
        );
        t.agent_gone("b");
        assert!(rx2.await.is_err(), "a gone agent's waiters fail at once");
        assert_eq!(t.pending(), 0);
    }

    #[tokio::test]
    async fn a_gone_agent_closes_the_connections_that_use_it() {
        let t = Tracker::default();
        let (tx, _rx) = mpsc::channel(1);
        let c = Arc::new(ConnShared::new("c1".into(), tx.clone()));
        let other = Arc::new(ConnShared::new("c2".into(), tx));
        c.agents.lock().unwrap().insert("a".into());
        t.add_conn(c.clone());
        t.add_conn(other.clone());
        t.agent_gone("a");
        tokio::time::timeout(std::time::Duration::from_secs(5), c.close.notified())
            .await
            .unwrap();
        assert!(c.closed.load(Ordering::SeqCst));
        assert!(!other.closed.load(Ordering::SeqCst));
        t.remove_conn("c1");
        assert_eq!(t.connections(), 1);
    }
}
