//! The agent's stream to the principal, in words a person can act on, on its ManagedClusterAddOn.
//!
//! OCM's addon manager sets `Available` of every AddOnTemplate addon from the agent Deployment's
//! readiness (its `WorkloadAvailability` prober; the readiness probe is the agent's stream-gated
//! `/healthz`, [`super::template::readiness_probe`]), so `kubectl get managedclusteraddons -A`
//! shows which clusters' agents are down — but in OCM's words ("Probe addon unavailable with err
//! readyReplica is not probed"). This controller adds the condition [`COND_AGENT_CONNECTED`],
//! derived from OCM's `Available` alone: `True` only when OCM's workload probe found the agent
//! ready; `False` naming the cluster, the Deployment, the principal and where to look; `Unknown`
//! with OCM's reason whenever the health cannot be probed — never healthy then.
//!
//! * [`agent_connected`] — pure: the condition for what OCM reports.
//! * [`run`] — a controller over our ManagedClusterAddOns; it writes the condition alone
//!   (server-side apply of that one entry of the status' `conditions` map, so OCM's conditions
//!   stay OCM's) and only when it changed: no write in steady state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use argocd_pull_ops::api_health::{ApiHealth, rewatching};
use argocd_pull_ops::reconcile_metrics::Reason;
use argocd_pull_ops::retry::{Backoff, Retries};
use argocd_pull_ops::watch::WatchEvents;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::apply;
use super::*;
use crate::metrics::Metrics;

/// The condition type on the ManagedClusterAddOn.
pub const COND_AGENT_CONNECTED: &str = "AgentConnected";
pub const REASON_CONNECTED: &str = "Connected";
pub const REASON_NOT_CONNECTED: &str = "NotConnected";
pub const REASON_NOT_DEPLOYED: &str = "NotDeployed";
pub const REASON_HEALTH_UNKNOWN: &str = "HealthUnknown";
/// OCM's reasons of `Available` from its workload probe (addon-framework `agentdeploy`).
const OCM_PROBE_AVAILABLE: &str = "ProbeAvailable";
const OCM_PROBE_UNAVAILABLE: &str = "ProbeUnavailable";
const CONTROLLER: &str = "argocd-agent-addon-health";
const FIELD_MANAGER: &str = "argocd-pull-addon-health";

/// What the condition is derived from.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    pub cluster: String,
    /// The agent's namespace on the managed cluster (the addon's install namespace).
    pub namespace: String,
    /// OCM's `Available`: status, reason, message (`None`: not reported).
    pub available: Option<(String, String, String)>,
    /// `host:port` of the principal the agent is set up to reach, when known.
    pub principal: Option<String>,
}

/// The condition: `(status, reason, message)`.
pub fn agent_connected(f: &Facts) -> (&'static str, &'static str, String) {
    let c = &f.cluster;
    let deploy = format!("{}/{ADDON_NAME}", f.namespace);
    let principal = f
        .principal
        .as_deref()
        .map(|p| format!(" at {p}"))
        .unwrap_or_default();
    let Some((status, reason, message)) = &f.available else {
        return (
            "Unknown",
            REASON_HEALTH_UNKNOWN,
            format!(
                "OCM's addon manager has not reported the health of the argocd-pull agent on {c} yet (no Available condition): check that the addon manager runs and this addon's ManifestApplied condition"
            ),
        );
    };
    match (status.as_str(), reason.as_str()) {
        ("True", OCM_PROBE_AVAILABLE) => (
            "True",
            REASON_CONNECTED,
            format!(
                "The argocd-pull agent on {c} is connected to its principal{principal}: its Deployment {deploy} is ready, which it is only while its stream to the principal is up"
            ),
        ),
        ("True", _) => (
            "Unknown",
            REASON_HEALTH_UNKNOWN,
            format!(
                "OCM reports Available True ({reason}: {message}), but not from the agent's readiness probe (ProbeAvailable): the addon is not health-checked as argocd-pull's AddOnTemplate sets it up, so whether the agent on {c} is connected cannot be told"
            ),
        ),
        ("False", OCM_PROBE_UNAVAILABLE) => (
            "False",
            REASON_NOT_CONNECTED,
            format!(
                "The argocd-pull agent on {c} has no stream to its principal{principal}: its Deployment {deploy} has no ready replica (OCM: {message}), and the agent is ready only while connected. On {c}, `kubectl -n {} get pods -l app={ADDON_NAME}` tells whether it runs (image, crash, scheduling) and `kubectl -n {} logs deploy/{ADDON_NAME}` why it cannot connect (principal address, TLS, certificate, version); on the hub, the principal's log for agent {c}",
                f.namespace, f.namespace
            ),
        ),
        ("False", _) => (
            "False",
            REASON_NOT_DEPLOYED,
            format!(
                "The argocd-pull agent is not deployed on {c} ({reason}: {message}): see the status of ManifestWork {c}/addon-{ADDON_NAME}-deploy-0 on the hub"
            ),
        ),
        _ => {
            let hint = match reason.as_str() {
                "NoProbeResult" => format!(
                    "the work agent on {c} has not reported the status of Deployment {deploy} yet; if this lasts, check {c}'s klusterlet (work agent)"
                ),
                "WorkNotApplied" | "WorkNotFound" => format!(
                    "the agent's ManifestWork {c}/addon-{ADDON_NAME}-deploy-0 is not applied yet; see its status on the hub"
                ),
                _ => format!(
                    "check ManagedCluster {c}'s conditions and its klusterlet (OCM sets every addon Unknown while the cluster is)"
                ),
            };
            (
                "Unknown",
                REASON_HEALTH_UNKNOWN,
                format!(
                    "Whether the argocd-pull agent on {c} is connected cannot be told: OCM reports Available {status} ({reason}: {message}); {hint}"
                ),
            )
        }
    }
}

/// The facts of one ManagedClusterAddOn (as JSON).
pub fn facts(mca: &Value, principal: Option<String>) -> Facts {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let available = mca["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Available"))
        .map(|c| (s(&c["status"]), s(&c["reason"]), s(&c["message"])));
    let namespace = [
        &mca["status"]["namespace"],
        &mca["spec"]["installNamespace"],
    ]
    .into_iter()
    .find_map(|v| v.as_str().filter(|n| !n.is_empty()))
    .unwrap_or(DEFAULT_INSTALL_NAMESPACE)
    .to_string();
    Facts {
        cluster: s(&mca["metadata"]["namespace"]),
        namespace,
        available,
        principal,
    }
}

/// The status patch (server-side apply) that sets the condition, or `None` when the object
/// already has it (status, reason and message): nothing to write.
pub fn status_patch(mca: &Value, cond: &(&str, &str, String), now: &str) -> Option<Value> {
    let (status, reason, message) = cond;
    let current = mca["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == COND_AGENT_CONNECTED));
    if let Some(c) = current
        && c["status"] == *status
        && c["reason"] == *reason
        && c["message"] == message.as_str()
    {
        return None;
    }
    // the transition time moves only when the status does
    let since = current
        .filter(|c| c["status"] == *status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now);
    Some(json!({
        "apiVersion": ADDON_API, "kind": "ManagedClusterAddOn",
        "metadata": {"name": mca["metadata"]["name"], "namespace": mca["metadata"]["namespace"]},
        "status": {"conditions": [{"type": COND_AGENT_CONNECTED, "status": status,
            "reason": reason, "message": message, "lastTransitionTime": since}]}
    }))
}

struct Ctx {
    client: Client,
    metrics: Metrics,
    /// Failed reconciles per ManagedClusterAddOn (its namespace: the cluster), for the retry
    /// backoff.
    retries: Retries<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The add-on object could not be read as JSON.
    #[error("{0}")]
    Decode(String),
    #[error("writing {COND_AGENT_CONNECTED}: {0}")]
    Write(#[source] kube::Error),
}

/// The `reason` label of `reconcile_errors_total`.
impl Reason for Error {
    const REASONS: &'static [&'static str] = &["conflict", "api", "transport", "decode"];

    fn reason(&self) -> &'static str {
        match self {
            Error::Decode(_) => "decode",
            Error::Write(e) => e.reason(),
        }
    }
}

/// `host:port` from the GitOpsCluster that owns the addon (its owner labels), when it says.
async fn principal(client: &Client, mca: &DynamicObject) -> Option<String> {
    let labels = mca.labels();
    let (ns, name) = (labels.get(LABEL_GC_NAMESPACE)?, labels.get(LABEL_GC_NAME)?);
    let gc = Api::<GitOpsCluster>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let spec = gc.spec.argo_cd_agent_addon?;
    let addr = spec.principal_server_address.filter(|a| !a.is_empty())?;
    Some(match spec.principal_server_port.filter(|p| !p.is_empty()) {
        Some(p) => format!("{addr}:{p}"),
        None => addr,
    })
}

async fn reconcile(mca: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let obj = serde_json::to_value(mca.as_ref()).map_err(|e| Error::Decode(e.to_string()))?;
    let f = facts(&obj, principal(&ctx.client, &mca).await);
    let cond = agent_connected(&f);
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    let Some(patch) = status_patch(&obj, &cond, &now) else {
        return Ok(Action::await_change());
    };
    let (ar, _) = apply::resource("ManagedClusterAddOn");
    Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &f.cluster, &ar)
        .patch_status(
            &mca.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::Write)?;
    ctx.metrics
        .write(CONTROLLER, "ManagedClusterAddOn", "status");
    tracing::info!(cluster = %f.cluster, status = cond.0, reason = cond.1, "{}", cond.2);
    Ok(Action::await_change())
}

/// Watches the ManagedClusterAddOns this controller's GitOpsClusters made and keeps their
/// [`COND_AGENT_CONNECTED`] condition.
pub async fn run(client: Client, metrics: Metrics, health: ApiHealth, shutdown: CancellationToken) {
    let (ar, _) = apply::resource("ManagedClusterAddOn");
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    metrics.controller::<Error>(CONTROLLER);
    let ctx = Arc::new(Ctx {
        client,
        metrics,
        retries: Retries::new(Backoff::GITOPS),
    });
    // its watch retries as every controller's (`rewatching`: re-listed from etcd as soon as the
    // API server answers again), and every add-on is reconciled then (kube's default backoff
    // had it wait 14 s after a 10 s outage on the real env)
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let store = writer.as_reader();
    let addons = rewatching(
        api,
        watcher::Config::default()
            .labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"))
            .fields(&format!("metadata.name={ADDON_NAME}")),
        health.clone(),
    )
    .reflect(writer)
    .relists_whole("managedclusteraddons")
    .controller(CONTROLLER)
    .applied_objects()
    .map(Ok);
    let token = shutdown.clone();
    let run = Controller::for_stream_with(addons, store.clone(), ar)
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .reconcile_all_on(health.recovered())
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            |mca, ctx: Arc<Ctx>| async move {
                let started = Instant::now();
                let cluster = mca.namespace().unwrap_or_default();
                let r = reconcile(mca, ctx.clone()).await;
                if r.is_ok() {
                    ctx.retries.succeeded(&cluster);
                }
                ctx.metrics
                    .reconciled(CONTROLLER, started.elapsed(), r.as_ref().err());
                r
            },
            |mca, err: &Error, ctx| {
                let delay = ctx.retries.failed(mca.namespace().unwrap_or_default());
                tracing::warn!(cluster = ?mca.namespace(), error = %err, retry_in = ?delay, "argocd-agent-addon health");
                Action::requeue(delay)
            },
            ctx,
        )
        .for_each(|_| async {});
    crate::until_shutdown(run, store, shutdown, CONTROLLER).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_listed_and_messages_are_unchanged() {
        let api = |code| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        argocd_pull_ops::reconcile_metrics::check_reasons([
            Error::Write(api(409)),
            Error::Write(api(500)),
            Error::Write(kube::Error::LinesCodecMaxLineLengthExceeded),
            Error::Decode("x".into()),
        ])
        .unwrap();
        assert_eq!(
            Error::Write(api(500)).to_string(),
            format!("writing AgentConnected: {}", api(500))
        );
    }

    fn f(available: Option<(&str, &str, &str)>) -> Facts {
        Facts {
            cluster: "cluster1".into(),
            namespace: "argocd".into(),
            available: available.map(|(s, r, m)| (s.into(), r.into(), m.into())),
            principal: Some("principal.example.com:443".into()),
        }
    }

    #[test]
    fn connected_only_when_ocms_workload_probe_says_ready() {
        let (s, r, m) = agent_connected(&f(Some((
            "True",
            "ProbeAvailable",
            "argocd-agent-addon add-on is available.",
        ))));
        assert_eq!((s, r), ("True", REASON_CONNECTED));
        assert!(m.contains("principal.example.com:443"), "{m}");
        // True from anything but the workload probe (e.g. a Lease) is not trusted
        let (s, r, m) = agent_connected(&f(Some(("True", "ManagedClusterAddOnLeaseUpdated", "x"))));
        assert_eq!((s, r), ("Unknown", REASON_HEALTH_UNKNOWN), "{m}");
    }

    #[test]
    fn not_connected_names_the_cluster_the_deployment_and_where_to_look() {
        let (s, r, m) = agent_connected(&f(Some((
            "False",
            "ProbeUnavailable",
            "Probe addon unavailable with err readyReplica is not probed",
        ))));
        assert_eq!((s, r), ("False", REASON_NOT_CONNECTED));
        for want in [
            "cluster1",
            "argocd/argocd-agent-addon",
            "principal.example.com:443",
            "kubectl -n argocd logs deploy/argocd-agent-addon",
            "readyReplica is not probed",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        let (s, r, m) = agent_connected(&f(Some(("False", "WorkNotApplied", "quota"))));
        assert_eq!((s, r), ("False", REASON_NOT_DEPLOYED));
        assert!(m.contains("addon-argocd-agent-addon-deploy-0") && m.contains("quota"));
    }

    #[test]
    fn health_that_cannot_be_probed_is_unknown_with_ocms_reason() {
        for (reason, hint) in [
            ("NoProbeResult", "klusterlet (work agent)"),
            ("WorkNotApplied", "not applied yet"),
            ("WorkNotFound", "not applied yet"),
            ("", "ManagedCluster cluster1"),
        ] {
            let (s, r, m) = agent_connected(&f(Some(("Unknown", reason, "ocm says"))));
            assert_eq!((s, r), ("Unknown", REASON_HEALTH_UNKNOWN));
            assert!(m.contains(hint) && m.contains("ocm says"), "{reason}: {m}");
        }
        let (s, _, m) = agent_connected(&f(None));
        assert_eq!(s, "Unknown");
        assert!(m.contains("no Available condition"), "{m}");
    }

    #[test]
    fn written_only_when_it_changes_keeping_the_transition_time() {
        let cond = ("False", REASON_NOT_CONNECTED, "m".to_string());
        let mca = |conds: Value| {
            json!({"metadata": {"name": ADDON_NAME, "namespace": "c1"},
                "spec": {"installNamespace": "argocd"}, "status": {"conditions": conds}})
        };
        let p = status_patch(&mca(json!([])), &cond, "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(p["status"]["conditions"].as_array().unwrap().len(), 1);
        let same = mca(json!([{"type": COND_AGENT_CONNECTED, "status": "False",
            "reason": REASON_NOT_CONNECTED, "message": "m", "lastTransitionTime": "T0"}]));
        assert!(status_patch(&same, &cond, "T1").is_none(), "no churn");
        let other_msg = ("False", REASON_NOT_CONNECTED, "m2".to_string());
        let p = status_patch(&same, &other_msg, "T1").unwrap();
        assert_eq!(p["status"]["conditions"][0]["lastTransitionTime"], "T0");
        let up = ("True", REASON_CONNECTED, "m".to_string());
        let p = status_patch(&same, &up, "T1").unwrap();
        assert_eq!(p["status"]["conditions"][0]["lastTransitionTime"], "T1");
    }

    #[test]
    fn facts_read_the_install_namespace_and_ocms_available() {
        let mca = json!({"metadata": {"name": ADDON_NAME, "namespace": "c1"},
            "spec": {"installNamespace": "agents"},
            "status": {"conditions": [{"type": "Available", "status": "False",
                "reason": "ProbeUnavailable", "message": "x"}]}});
        let f = facts(&mca, None);
        assert_eq!((f.cluster.as_str(), f.namespace.as_str()), ("c1", "agents"));
        assert_eq!(
            f.available,
            Some(("False".into(), "ProbeUnavailable".into(), "x".into()))
        );
    }
}
