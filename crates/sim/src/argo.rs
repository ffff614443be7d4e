//! The Argo CD simulator of one managed cluster: drives the cluster's Applications through a
//! sync and a health check, with configurable delays and failures on request.
//!
//! Per Application (all namespaces):
//! * the compared target is `spec.source`/`spec.sources` + `spec.destination`; when it differs
//!   from `status.sync.comparedTo` (or a top-level `operation` is present) a sync starts:
//!   `sync.status: OutOfSync`, `health.status: Progressing`, `operationState.phase: Running`
//!   with a `startedAt` that stays stable for that operation; `operation` is cleared;
//! * after `sync_delay`: `Synced`, `sync.revision`, `operationState.phase: Succeeded`, the
//!   deployed resources (a ConfigMap named after the app in the destination namespace, created
//!   with its namespace, listed in `status.resources`) — unless the annotation
//!   [`FAIL_ANNOTATION`] is `sync` (phase `Failed`) or `error` (phase `Error`): then
//!   `OutOfSync`, health `Degraded`, condition `SyncError`;
//! * after `health_delay`: health `Healthy`, or `Degraded` when the annotation is `health`;
//! * the `argocd.argoproj.io/refresh` annotation is removed (a refresh re-compares, nothing more);
//! * when an Application carrying `resources-finalizer.argocd.argoproj.io` is deleted, the
//!   resources it deployed are deleted and the finalizer removed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::names::{ANNOTATION_REFRESH, FINALIZER_ARGOCD_RESOURCES};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::time::DelayQueue;
use tracing::debug;

use crate::util::{now_rfc3339, sha1_hex};

/// Annotation asking the simulator to fail: `sync` (operation phase `Failed`), `error` (phase
/// `Error`) or `health` (sync succeeds, health `Degraded`).
pub const FAIL_ANNOTATION: &str = "sim.argocd-pull.io/fail";
/// Annotation overriding the revision the simulator reports (default: a SHA-1 of the source).
pub const REVISION_ANNOTATION: &str = "sim.argocd-pull.io/revision";
/// Label the simulator puts on what it deploys (Argo CD's tracking label).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// Argo CD simulator tunables.
#[derive(Clone, Debug)]
pub struct ArgoSimConfig {
    /// From the start of a sync to its result.
    pub sync_delay: Duration,
    /// From a successful sync to the health verdict.
    pub health_delay: Duration,
    /// Create a ConfigMap per synced Application (in its destination namespace).
    pub deploy_resources: bool,
    /// Sync only Applications with `spec.syncPolicy.automated` (others wait for an `operation`);
    /// default false: every Application is synced.
    pub respect_sync_policy: bool,
}

impl Default for ArgoSimConfig {
    fn default() -> Self {
        ArgoSimConfig {
            sync_delay: Duration::from_millis(100),
            health_delay: Duration::from_millis(100),
            deploy_resources: true,
            respect_sync_policy: false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    SyncDone,
    HealthDone,
}

struct AppState {
    target: String,
    epoch: u64,
    started_at: String,
    operation: Value,
    revision: String,
    key: Option<tokio_util::time::delay_queue::Key>,
}

/// A running simulator (aborted on drop).
pub(crate) struct ArgoSim {
    task: JoinHandle<()>,
}

impl Drop for ArgoSim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn start(client: Client, config: ArgoSimConfig, cluster: String) -> ArgoSim {
    let task = tokio::spawn(run(client, Arc::new(config), cluster));
    ArgoSim { task }
}

type AppKey = (String, String);

fn target_of(app: &Application) -> Value {
    let spec = &app.spec.extra;
    json!({
        "source": spec.get("source"),
        "sources": spec.get("sources"),
        "destination": app.spec.destination,
    })
}

fn compared_to(target: &Value) -> Value {
    let mut c = serde_json::Map::new();
    for k in ["source", "sources", "destination"] {
        if let Some(v) = target.get(k).filter(|v| !v.is_null()) {
            c.insert(k.to_string(), v.clone());
        }
    }
    Value::Object(c)
}

fn revision_of(app: &Application, target: &Value) -> String {
    app.annotations()
        .get(REVISION_ANNOTATION)
        .cloned()
        .unwrap_or_else(|| sha1_hex(&target.to_string()))
}

fn auto_sync(app: &Application, cfg: &ArgoSimConfig) -> bool {
    !cfg.respect_sync_policy
        || app
            .spec
            .extra
            .get("syncPolicy")
            .and_then(|p| p.get("automated"))
            .is_some_and(|a| !a.is_null())
}

fn dest_namespace(app: &Application) -> String {
    app.spec
        .destination
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| app.namespace())
        .unwrap_or_else(|| "default".into())
}

async fn run(client: Client, cfg: Arc<ArgoSimConfig>, cluster: String) {
    let apps: Api<Application> = Api::all(client.clone());
    let stream = watcher::watcher(apps, watcher::Config::default()).default_backoff();
    futures::pin_mut!(stream);
    let mut states: HashMap<AppKey, AppState> = HashMap::new();
    let mut queue: DelayQueue<(AppKey, u64, Step)> = DelayQueue::new();
    let mut latest: HashMap<AppKey, Application> = HashMap::new();
    let mut epoch = 0u64;
    loop {
        tokio::select! {
            ev = stream.next() => {
                let Some(ev) = ev else { return };
                match ev {
                    Ok(Event::Apply(app)) | Ok(Event::InitApply(app)) => {
                        let key = (app.namespace().unwrap_or_default(), app.name_any());
                        latest.insert(key.clone(), app.clone());
                        epoch += 1;
                        if let Err(e) = on_app(&client, &cfg, &app, &key, &mut states, &mut queue, epoch).await {
                            debug!(cluster = %cluster, app = %key.1, error = %e, "argo sim");
                        }
                    }
                    Ok(Event::Delete(app)) => {
                        let key = (app.namespace().unwrap_or_default(), app.name_any());
                        latest.remove(&key);
                        if let Some(st) = states.remove(&key)
                            && let Some(k) = st.key {
                                queue.try_remove(&k);
                            }
                    }
                    Ok(_) => {}
                    Err(e) => debug!(cluster = %cluster, error = %e, "argo sim watch"),
                }
            }
            Some(expired) = queue.next(), if !queue.is_empty() => {
                let (key, ep, step) = expired.into_inner();
                let Some(st) = states.get_mut(&key) else { continue };
                if st.epoch != ep { continue }
                st.key = None;
                let Some(app) = latest.get(&key).cloned() else { continue };
                match on_timer(&client, &cfg, &app, st, step).await {
                    Ok(Some(next)) => {
                        st.key = Some(queue.insert((key.clone(), ep, next), cfg.health_delay));
                    }
                    Ok(None) => {}
                    Err(e) => {
                        debug!(cluster = %cluster, app = %key.1, error = %e, "argo sim step; retrying");
                        st.key = Some(queue.insert((key.clone(), ep, step), Duration::from_millis(200)));
                    }
                }
            }
        }
    }
}

async fn patch_app(client: &Client, app: &Application, patch: &Value) -> Result<(), kube::Error> {
    let api: Api<Application> =
        Api::namespaced(client.clone(), &app.namespace().unwrap_or_default());
    match api
        .patch(
            &app.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

async fn on_app(
    client: &Client,
    cfg: &ArgoSimConfig,
    app: &Application,
    key: &AppKey,
    states: &mut HashMap<AppKey, AppState>,
    queue: &mut DelayQueue<(AppKey, u64, Step)>,
    epoch: u64,
) -> Result<(), kube::Error> {
    if app.metadata.deletion_timestamp.is_some() {
        if app
            .finalizers()
            .iter()
            .any(|f| f == FINALIZER_ARGOCD_RESOURCES)
        {
            delete_deployed(client, app).await?;
            let rest: Vec<&String> = app
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER_ARGOCD_RESOURCES)
                .collect();
            patch_app(
                client,
                app,
                &json!({"metadata": {"finalizers": rest, "resourceVersion": app.resource_version()}}),
            )
            .await?;
        }
        if let Some(st) = states.remove(key)
            && let Some(k) = st.key
        {
            queue.try_remove(&k);
        }
        return Ok(());
    }
    let mut patch = json!({});
    if app.annotations().contains_key(ANNOTATION_REFRESH) {
        patch["metadata"]["annotations"][ANNOTATION_REFRESH] = Value::Null;
    }
    let target = target_of(app);
    let target_hash = crate::util::hash_json(&target);
    let status = app.status.clone().unwrap_or_default();
    let compared = status
        .sync
        .as_ref()
        .and_then(|s| s.extra.get("comparedTo"))
        .cloned();
    let in_flight = states.get(key).is_some_and(|s| s.target == target_hash);
    let settled = compared.as_ref() == Some(&compared_to(&target))
        && status
            .operation_state
            .as_ref()
            .and_then(|o| o.phase.as_deref())
            .is_some_and(|p| p != "Running");
    let requested = app.operation.clone();
    let start = requested.is_some() || (!in_flight && !settled && auto_sync(app, cfg));
    if requested.is_some() {
        patch["operation"] = Value::Null;
    }
    if start {
        let revision = revision_of(app, &target);
        let operation = requested.unwrap_or_else(
            || json!({"sync": {"revision": revision}, "initiatedBy": {"automated": true}}),
        );
        let started_at = now_rfc3339();
        if let Some(old) = states.remove(key)
            && let Some(k) = old.key
        {
            queue.try_remove(&k);
        }
        patch["status"] = json!({
            "sync": {"status": "OutOfSync", "comparedTo": compared_to(&target)},
            "health": {"status": "Progressing"},
            "operationState": {
                "phase": "Running",
                "startedAt": started_at,
                "operation": operation,
                "message": "syncing",
                "finishedAt": null,
            },
        });
        let qk = queue.insert((key.clone(), epoch, Step::SyncDone), cfg.sync_delay);
        states.insert(
            key.clone(),
            AppState {
                target: target_hash,
                epoch,
                started_at,
                operation,
                revision,
                key: Some(qk),
            },
        );
    } else if !in_flight && !settled && status.sync.is_none() {
        // Not auto-synced and never compared: report it as out of sync.
        patch["status"] = json!({
            "sync": {"status": "OutOfSync", "comparedTo": compared_to(&target)},
            "health": {"status": "Missing"},
        });
    }
    if patch != json!({}) {
        patch_app(client, app, &patch).await?;
    }
    Ok(())
}

async fn on_timer(
    client: &Client,
    cfg: &ArgoSimConfig,
    app: &Application,
    st: &AppState,
    step: Step,
) -> Result<Option<Step>, kube::Error> {
    let fail = app
        .annotations()
        .get(FAIL_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let target = target_of(app);
    match step {
        Step::SyncDone => {
            if fail == "sync" || fail == "error" {
                let phase = if fail == "sync" { "Failed" } else { "Error" };
                let message = format!("simulated sync failure ({FAIL_ANNOTATION}: {fail})");
                patch_app(
                    client,
                    app,
                    &json!({"status": {
                        "sync": {"status": "OutOfSync", "comparedTo": compared_to(&target)},
                        "health": {"status": "Degraded", "message": message},
                        "operationState": {
                            "phase": phase,
                            "startedAt": st.started_at,
                            "finishedAt": now_rfc3339(),
                            "operation": st.operation,
                            "message": message,
                        },
                        "conditions": [{"type": "SyncError", "message": message, "lastTransitionTime": now_rfc3339()}],
                    }}),
                )
                .await?;
                return Ok(None);
            }
            let resources = if cfg.deploy_resources {
                deploy(client, app, &st.revision).await?
            } else {
                Vec::new()
            };
            patch_app(
                client,
                app,
                &json!({"status": {
                    "sync": {"status": "Synced", "revision": st.revision, "comparedTo": compared_to(&target)},
                    "health": {"status": "Progressing"},
                    "operationState": {
                        "phase": "Succeeded",
                        "startedAt": st.started_at,
                        "finishedAt": now_rfc3339(),
                        "operation": st.operation,
                        "message": "successfully synced (all tasks run)",
                        "syncResult": {"revision": st.revision},
                    },
                    "resources": resources,
                    "conditions": null,
                }}),
            )
            .await?;
            Ok(Some(Step::HealthDone))
        }
        Step::HealthDone => {
            let health = if fail == "health" {
                json!({"status": "Degraded", "message": format!("simulated health failure ({FAIL_ANNOTATION}: health)")})
            } else {
                json!({"status": "Healthy", "message": null})
            };
            patch_app(client, app, &json!({"status": {"health": health}})).await?;
            Ok(None)
        }
    }
}

/// Creates the app's ConfigMap (and its namespace); returns `status.resources`.
async fn deploy(
    client: &Client,
    app: &Application,
    revision: &str,
) -> Result<Vec<Value>, kube::Error> {
    let ns = dest_namespace(app);
    let name = app.name_any();
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns_obj: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))
        .map_err(kube::Error::SerdeError)?;
    match nss.create(&PostParams::default(), &ns_obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e),
    }
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {INSTANCE_LABEL: name}},
        "data": {"revision": revision},
    });
    cms.patch(
        &name,
        &PatchParams::apply("argocd-controller").force(),
        &Patch::Apply(&cm),
    )
    .await?;
    Ok(vec![json!({
        "version": "v1", "kind": "ConfigMap", "namespace": ns, "name": name,
        "status": "Synced", "health": {"status": "Healthy"},
    })])
}

async fn delete_deployed(client: &Client, app: &Application) -> Result<(), kube::Error> {
    let resources = app
        .status
        .as_ref()
        .and_then(|s| s.resources.clone())
        .unwrap_or_default();
    for r in resources {
        if r.kind.as_deref() != Some("ConfigMap")
            || r.group.as_deref().is_some_and(|g| !g.is_empty())
        {
            continue;
        }
        let (Some(ns), Some(name)) = (r.namespace, r.name) else {
            continue;
        };
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        match cms.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
