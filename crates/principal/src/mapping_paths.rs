//! Destination-based mapping on the principal: the paths of [`super::mapping`] through the hub
//! watcher, the agents' events and the resync. Without `--destination-based-mapping` none of
//! this runs.

use std::sync::Arc;

use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{Event, EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::session::HandleError;
use argocd_pull_agent_core::store::{Kind, StoreError};

use super::mapping::{self, NAMESPACE_REMAPPED};
use super::{AgentState, Inner, SOURCE};

impl Inner {
    /// Whether `a`'s Applications are routed by destination (mapping on, managed agent).
    pub(super) fn mapped(&self, a: &AgentState) -> bool {
        a.mapped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The per-agent view key of a hub Application: `<ns>/<name>` when mapped, else its name.
    pub(super) fn view_key(&self, a: &AgentState, ns: &str, name: &str) -> String {
        match self.mapped(a) {
            true => mapping::key(ns, name),
            false => name.to_string(),
        }
    }

    /// Hub watcher, mapping on: routes `h` by destination. `false`: not for mapping (an
    /// autonomous agent's namespace), the caller goes on as without mapping.
    pub(super) fn on_hub_apply_mapped(
        self: &Arc<Self>,
        ns: &str,
        h: &Value,
        enc: Option<&Arc<[u8]>>,
    ) -> bool {
        let key = mapping::key(ns, o::name(h));
        if self.autonomous_namespace(ns) {
            // an autonomous agent's copy belongs to the agent its namespace names (peer:
            // `getAgentNameForApp`, `trackAppToAgent`: the Redis proxy finds it there)
            self.hub
                .routes
                .lock()
                .expect("poisoned")
                .set(&key, Some(ns));
            return false;
        }
        let target = match o::ignored(h) {
            true => None,
            false => mapping::target_agent(h),
        };
        let left = self.hub.routes.lock().expect("poisoned").set(&key, target);
        if let Some(old) = left.and_then(|n| self.agent(&n))
            && self.mapped(&old)
        {
            // the destination changed: the app leaves the agent it was on
            tracing::info!(app = %key, from = %old.name, to = ?target, "application destination changed; removing it from the agent it left");
            self.delete_managed(&old, &key, h);
        }
        if let Some(a) = target.and_then(|t| self.agent(t))
            && self.mapped(&a)
        {
            self.apply_managed(&a, key, h, enc);
        }
        true
    }

    /// Hub watcher, mapping on: a hub Application is gone. `false` as [`Self::on_hub_apply_mapped`].
    pub(super) fn on_hub_delete_mapped(self: &Arc<Self>, ns: &str, h: &Value) -> bool {
        let key = mapping::key(ns, o::name(h));
        let was = self.hub.routes.lock().expect("poisoned").set(&key, None);
        if self.autonomous_namespace(ns) {
            return false;
        }
        if let Some(a) = was.and_then(|n| self.agent(&n))
            && self.mapped(&a)
        {
            self.delete_managed(&a, &key, h);
        }
        true
    }

    /// Whether `ns` is the hub namespace of an autonomous agent (its copies are not mapped).
    fn autonomous_namespace(&self, ns: &str) -> bool {
        self.agent(ns)
            .is_some_and(|a| *a.mode.lock().expect("poisoned") == Mode::Autonomous)
    }

    /// A deferred `application/<ns>/<name>` key of a mapped agent: the current events.
    pub(super) fn regenerate_mapped(&self, agent: &str, ns: &str, name: &str) -> Vec<Event> {
        let key = mapping::key(ns, name);
        let routed = self.hub.routes.lock().expect("poisoned").get(&key) == Some(agent);
        match self.cached(ns, name).filter(|_| routed) {
            Some(h) => super::agents::managed_events(&h),
            None => vec![Event::for_object(
                SOURCE,
                EventType::Delete,
                Target::Application,
                &o::stub(name, ns, ""),
            )],
        }
    }

    /// The hub namespaces an agent's Application reported in `ns` may live in (the principal's
    /// for the agent's own namespace, see [`mapping::hub_namespace_candidates`]).
    pub(super) fn candidates(&self, agent: &str, ns: &str) -> Vec<String> {
        let agent_ns = self.sessions.namespace(agent);
        mapping::hub_namespace_candidates(ns, agent_ns.as_deref(), &self.cfg.namespace)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The hub namespaces of an Application an agent reports (its payload): the principal's for
    /// a remapped one, else as [`Self::candidates`].
    pub(super) fn reported_namespaces(&self, agent: &str, reported: &Value) -> Vec<String> {
        let agent_ns = self.sessions.namespace(agent);
        let ns = mapping::hub_namespace(reported, agent_ns.as_deref(), &self.cfg.namespace);
        match o::annotation(reported, NAMESPACE_REMAPPED) {
            Some(_) => vec![ns.to_string()],
            None => self.candidates(agent, ns),
        }
    }

    /// The hub Application `name` of a mapped agent in one of `namespaces`: the first that
    /// exists, if it is admitted, not ignore-sync and routed to `agent` (an agent never touches
    /// another agent's Applications).
    pub(super) async fn mapped_hub_app(
        &self,
        agent: &str,
        namespaces: &[String],
        name: &str,
    ) -> Result<Option<Value>, StoreError> {
        for ns in namespaces {
            if let Some(h) = self.store.get(Kind::Application, ns, name).await? {
                let ours = self.ns_allowed(ns)
                    && !o::ignored(&h)
                    && mapping::target_agent(&h) == Some(agent);
                return Ok(ours.then_some(h));
            }
        }
        Ok(None)
    }

    /// A mapped agent's `request-update` (peer: `ProcessRequestUpdateEvent` looks the
    /// Application up in the namespace the request names): the spec when it differs, or
    /// `delete` when the hub has no such Application for this agent (gone, ignore-sync, or
    /// routed elsewhere: **Decision**, the peer would resend another agent's Application).
    pub(super) async fn mapped_request_update(
        &self,
        a: &AgentState,
        ev: &Event,
    ) -> Result<(), HandleError> {
        let agent = a.name.as_str();
        let name = ev.data["name"].as_str().unwrap_or_default();
        let ns = ev.data["namespace"].as_str().unwrap_or_default();
        let checksum = ev.data["checksum"].as_str().unwrap_or_default();
        let nss = self.candidates(agent, ns);
        match self.mapped_hub_app(agent, &nss, name).await? {
            None => {
                {
                    let mut views = a.views.lock().expect("poisoned");
                    for n in &nss {
                        views.remove(&mapping::key(n, name));
                    }
                }
                let uid = ev.data["uid"].as_str().unwrap_or_default();
                self.push(a, EventType::Delete, &o::stub(name, ns, uid));
            }
            Some(h) => {
                let key = mapping::key(o::namespace(&h), name);
                self.answer_request_update(a, key, &h, checksum);
            }
        }
        Ok(())
    }

    /// The agent a Redis key of Argo CD's belongs to (`None`: the hub Redis answers). Without
    /// mapping the key's namespace names the agent; with it (peer: redisproxy.go
    /// `extractAgentNameFromRedisCommandKey` + `GetAgentForApp`), the Application the key
    /// names (no `<ns>_`: in the principal's namespace) is looked up in the routes.
    pub(super) fn redis_agent_of_key(&self, key: &str) -> Result<Option<String>, String> {
        if !self.cfg.destination_based_mapping {
            return argocd_pull_agent_core::redis_wire::agent_of_key(key)
                .map(|a| a.map(str::to_string));
        }
        let Some((ns, app)) = mapping::redis_app_of_key(key, &self.cfg.namespace)? else {
            return Ok(None);
        };
        let routes = self.hub.routes.lock().expect("poisoned");
        Ok(routes.get(&mapping::key(ns, app)).map(str::to_string))
    }

    /// `(namespace, name, uid)` of the hub Applications an agent holds (its resync set), from the
    /// hub watch's cache, parsed one at a time: routed to it with destination-based mapping, else
    /// the ones in its namespace. Applications labelled
    /// `argocd-agent.argoproj-labs.io/ignore-sync` are not its.
    pub(super) fn app_refs(&self, a: &AgentState) -> Vec<(String, String, String)> {
        let names: Vec<(String, String)> = match (self.mapped(a), self.ns_allowed(&a.name)) {
            (true, _) => self.hub.routes.lock().expect("poisoned").of_agent(&a.name),
            (false, true) => self
                .hub
                .apps
                .lock()
                .expect("poisoned")
                .get(&a.name)
                .map(|m| m.keys().map(|n| (a.name.clone(), n.clone())).collect())
                .unwrap_or_default(),
            (false, false) => Vec::new(),
        };
        names
            .into_iter()
            .filter_map(|(ns, name)| self.cached(&ns, &name))
            .filter(|h| !o::ignored(h))
            .map(|h| {
                let r = |s: &str| s.to_string();
                (r(o::namespace(&h)), r(o::name(&h)), r(o::uid(&h)))
            })
            .collect()
    }
}
