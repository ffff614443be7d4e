//! Requests waiting for their agent's answer: one oneshot per request UUID, woken by the
//! response event (no polling — the peer polls its channel every 100 ms).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use argocd_pull_agent_core::resource::ResourceResponse;

type Waiters = HashMap<String, (String, oneshot::Sender<ResourceResponse>)>;

/// The table of waiting requests.
#[derive(Default, Clone)]
pub struct Pending {
    map: Arc<Mutex<Waiters>>,
}

/// Removes its entry when the waiting request ends (answered, timed out or cancelled).
pub struct Registration {
    map: Arc<Mutex<Waiters>>,
    uuid: String,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.uuid);
    }
}

/// Why a response could not be delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum Unmatched {
    /// No request waits for it (answered late, after the timeout, or never asked).
    NotTracked,
    /// Another agent's request: a response is accepted only from the agent that was asked.
    WrongAgent(String),
}

impl Pending {
    /// Tracks `uuid` for `agent`; the receiver gets the response.
    pub fn register(
        &self,
        uuid: &str,
        agent: &str,
    ) -> (oneshot::Receiver<ResourceResponse>, Registration) {
        let (tx, rx) = oneshot::channel();
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uuid.to_string(), (agent.to_string(), tx));
        (
            rx,
            Registration {
                map: self.map.clone(),
                uuid: uuid.to_string(),
            },
        )
    }

    /// Delivers a response received from `agent`.
    pub fn complete(
        &self,
        agent: &str,
        uuid: &str,
        resp: ResourceResponse,
    ) -> Result<(), Unmatched> {
        let mut g = self.map.lock().unwrap_or_else(|e| e.into_inner());
        match g.get(uuid) {
            None => return Err(Unmatched::NotTracked),
            Some((a, _)) if a != agent => return Err(Unmatched::WrongAgent(a.clone())),
            Some(_) => {}
        }
        let (_, tx) = g.remove(uuid).expect("checked above");
        drop(g);
        tx.send(resp).map_err(|_| Unmatched::NotTracked)
    }

    /// Fails every request waiting on `agent` (its stream ended): their receivers see the
    /// sender dropped at once instead of waiting for the timeout.
    pub fn fail_agent(&self, agent: &str) {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, (a, _)| a != agent);
    }

    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(uuid: &str) -> ResourceResponse {
        ResourceResponse {
            uuid: uuid.into(),
            status: 200,
            resource: "{}".into(),
        }
    }

    #[tokio::test]
    async fn a_response_wakes_only_its_request_and_only_from_its_agent() {
        let p = Pending::default();
        let (rx, _g) = p.register("u1", "a");
        let (_rx2, _g2) = p.register("u2", "b");
        assert_eq!(
            p.complete("b", "u1", resp("u1")),
            Err(Unmatched::WrongAgent("a".into()))
        );
        p.complete("a", "u1", resp("u1")).unwrap();
        assert_eq!(rx.await.unwrap().uuid, "u1");
        assert_eq!(
            p.complete("a", "u1", resp("u1")),
            Err(Unmatched::NotTracked)
        );
        assert_eq!(p.len(), 1);
    }

    #[tokio::test]
    async fn dropping_the_registration_untracks_and_disconnect_fails_waiters() {
        let p = Pending::default();
        {
            let (_rx, _g) = p.register("u1", "a");
        }
        assert!(p.is_empty());
        let (rx, _g) = p.register("u2", "a");
        let (_rx3, _g3) = p.register("u3", "b");
        p.fail_agent("a");
        assert!(rx.await.is_err());
        assert_eq!(p.len(), 1);
    }
}
