//! Watchers of the principal's own namespace: AppProjects, repository Secrets, the GPG keys
//! ConfigMap and the TLS blocklist, kept by name; each change brings every managed agent's
//! AppProjects and repositories up to date.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::event::{EventType, Target};
use argocd_pull_agent_core::objects as o;
use argocd_pull_agent_core::store::{Kind, StoreEvent};

use super::{AgentState, Inner};
use argocd_pull_agent_core::otel;
use argocd_pull_agent_core::project_match::project_for_agent;

/// The watch span of a hub AppProject, repository Secret or GPG key ConfigMap (the peer's kinds
/// `AppProject`, `Repository`, `GPGKey`).
fn watch_span(kind: Kind, op: &'static str, obj: &Value) -> tracing::Span {
    if !otel::enabled() {
        return tracing::Span::none();
    }
    let k = match kind {
        Kind::Secret => "Repository",
        Kind::ConfigMap => "GPGKey",
        k => k.as_str(),
    };
    otel::watch_span(
        otel::Component::Principal,
        op,
        k,
        obj,
        o::namespace(obj),
        Mode::Managed,
    )
}

impl Inner {
    pub(super) async fn watch_projects(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        self.watch_by_name(Kind::AppProject, |_| true, |i| &i.hub.projects, ready)
            .await
    }

    /// Hub repository / repo-creds Secrets and agent cluster secrets of the principal's namespace.
    pub(super) async fn watch_secrets(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        self.watch_by_name(
            Kind::Secret,
            argocd_pull_agent_core::repository::is_watched,
            |i| &i.hub.secrets,
            ready,
        )
        .await
    }

    /// The TLS blocklist ConfigMap: replaces the blocked fingerprints on every change and drops
    /// the streams of connected agents whose certificate is now blocked.
    pub(super) async fn watch_blocklist(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        use argocd_pull_agent_core::blocklist::{self, CONFIGMAP};
        let mut ready = Some(ready);
        let ns = self.cfg.namespace.clone();
        loop {
            let mut s = self.store.watch(Kind::ConfigMap, Some(&ns));
            while let Some(ev) = s.next().await {
                let fps = match ev {
                    Ok(StoreEvent::Restarted(list)) => list
                        .iter()
                        .find(|c| o::name(c) == CONFIGMAP)
                        .map(|c| blocklist::from_configmap(c))
                        .unwrap_or_default(),
                    Ok(StoreEvent::Applied(c)) if o::name(&c) == CONFIGMAP => {
                        blocklist::from_configmap(&c)
                    }
                    Ok(StoreEvent::Deleted(c)) if o::name(&c) == CONFIGMAP => Default::default(),
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS blocklist watch error");
                        if let Some(r) = ready.take() {
                            let _ = r.send(());
                        }
                        continue;
                    }
                };
                let n = fps.len();
                for agent in self.hub.blocklist.replace(fps) {
                    if self.disconnect(&agent) {
                        tracing::info!(
                            agent,
                            "disconnected an agent whose certificate is blocklisted"
                        );
                    }
                }
                tracing::info!(entries = n, "loaded the TLS blocklist");
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The GPG keys ConfigMap of the principal's namespace.
    pub(super) async fn watch_gpg(self: Arc<Self>, ready: tokio::sync::oneshot::Sender<()>) {
        self.watch_by_name(
            Kind::ConfigMap,
            |c| argocd_pull_agent_core::repository::DataKind::GpgKey.selects(c),
            |i| &i.hub.gpg,
            ready,
        )
        .await
    }

    /// Keeps `map(self)` (name -> object) equal to the `kind` objects of the principal's namespace
    /// that `select` accepts, and re-syncs every managed agent's AppProjects and repositories on
    /// each change.
    async fn watch_by_name(
        self: Arc<Self>,
        kind: Kind,
        select: fn(&Value) -> bool,
        map: fn(&Inner) -> &std::sync::Mutex<HashMap<String, Value>>,
        ready: tokio::sync::oneshot::Sender<()>,
    ) {
        let mut ready = Some(ready);
        let ns = self.cfg.namespace.clone();
        loop {
            let mut s = self.store.watch(kind, Some(&ns));
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(StoreEvent::Restarted(list)) => {
                        *map(&self).lock().expect("poisoned") = list
                            .into_iter()
                            .map(Arc::unwrap_or_clone)
                            .filter(select)
                            .map(|p| (o::name(&p).to_string(), p))
                            .collect();
                        self.sync_projects_all();
                    }
                    Ok(StoreEvent::Applied(p)) => {
                        let p = Arc::unwrap_or_clone(p);
                        let name = o::name(&p).to_string();
                        let selected = select(&p);
                        let old = {
                            let mut m = map(&self).lock().expect("poisoned");
                            if selected {
                                m.insert(name, p.clone())
                            } else {
                                m.remove(&name)
                            }
                        };
                        let _s = match (selected, &old) {
                            (true, known) => watch_span(kind, otel::op_of(known.is_some()), &p),
                            (false, Some(old)) => watch_span(kind, "delete", old),
                            (false, None) => tracing::Span::none(),
                        }
                        .entered();
                        match (selected, old) {
                            (true, None) => self.count_hub_change(kind, &p, "created"),
                            (true, Some(_)) => self.count_hub_change(kind, &p, "updated"),
                            (false, Some(old)) => self.count_hub_change(kind, &old, "deleted"),
                            (false, None) => continue,
                        }
                        self.sync_projects_all();
                    }
                    Ok(StoreEvent::Deleted(p)) => {
                        let old = map(&self).lock().expect("poisoned").remove(o::name(&p));
                        if let Some(old) = old {
                            let _s = watch_span(kind, "delete", &old).entered();
                            self.count_hub_change(kind, &old, "deleted");
                            self.sync_projects_all();
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, kind = kind.as_str(), "hub watch error");
                    }
                }
                // ready after the first list, or the first error (no CRD on the hub)
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// `principal_repositories_{created,updated,deleted}` count hub repository Secret changes and
    /// `argocd_principal_gpg_keys_count` follows the GPG keys ConfigMap, as the peer's informer
    /// callbacks do.
    fn count_hub_change(&self, kind: Kind, obj: &Value, op: &str) {
        if kind == Kind::ConfigMap {
            let n = match op {
                "deleted" => 0,
                _ => obj["data"].as_object().map_or(0, |d| d.len()),
            };
            self.metrics.peer.gpg_keys_count.set(n as i64);
        }
        if argocd_pull_agent_core::repository::is_repo_secret(obj) {
            self.metrics
                .hub_write(argocd_pull_agent_core::repository::KIND, op);
        }
    }

    pub(super) fn sync_projects_all(&self) {
        for a in self.sessions.all() {
            self.sync_projects(&a);
        }
    }

    /// Managed agents: sends the AppProjects that select the agent (create / update) and deletes
    /// the ones no longer matched or gone; then the repositories of those projects.
    pub(super) fn sync_projects(&self, a: &AgentState) {
        if *a.mode.lock().expect("poisoned") != Mode::Managed {
            return;
        }
        let want: Vec<Value> = self
            .hub
            .projects
            .lock()
            .expect("poisoned")
            .values()
            .filter(|p| !o::ignored(p))
            .filter_map(|p| project_for_agent(p, &a.name, self.cfg.destination_based_mapping))
            .collect();
        let ns = self.cfg.namespace.clone();
        self.sync_set(
            a,
            Target::AppProject,
            want,
            &a.projects,
            o::project_hash,
            |n| o::project_stub(n, &ns, ""),
        );
        self.sync_repos(a);
    }

    /// Brings what a managed agent has of one target (`views`: name -> hash of the form sent) to
    /// `want` (the agent forms): `create` for new names, `spec-update` for changed ones, `delete`
    /// for names no longer wanted.
    pub(super) fn sync_set(
        &self,
        a: &AgentState,
        target: Target,
        want: Vec<Value>,
        views: &std::sync::Mutex<HashMap<String, String>>,
        hash: fn(&Value) -> String,
        stub: impl Fn(&str) -> Value,
    ) {
        let mut views = views.lock().expect("poisoned");
        let mut keep = std::collections::HashSet::new();
        for f in &want {
            let name = o::name(f).to_string();
            let h = hash(f);
            keep.insert(name.clone());
            match views.get(&name) {
                None => self.push_target(a, EventType::Create, target, f),
                Some(old) if *old != h => self.push_target(a, EventType::SpecUpdate, target, f),
                _ => continue,
            }
            views.insert(name, h);
        }
        let gone: Vec<String> = views
            .keys()
            .filter(|n| !keep.contains(*n))
            .cloned()
            .collect();
        for n in gone {
            views.remove(&n);
            self.push_target(a, EventType::Delete, target, &stub(&n));
        }
    }
}
