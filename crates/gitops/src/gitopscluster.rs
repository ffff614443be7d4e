//! The `GitOpsCluster` (`apps.open-cluster-management.io/v1beta1`) controller: Placement →
//! Argo CD cluster Secrets, as ACM's non-agent mode does.
//!
//! Watches GitOpsClusters (the controller's main stream), and through reflector stores the
//! PlacementDecisions, ManagedClusters and Argo CD cluster Secrets. A relevant change of any of
//! those (a decision, a ManagedCluster's labels or client configs, a cluster Secret, a deletion)
//! reconciles the GitOpsClusters at once (they are few; each reconcile works from the caches and
//! writes only what differs), so a label change on a ManagedCluster reaches its Secret within
//! the controller's debounce, not after a poll.

use argocd_pull_ops::api_health::{ApiHealth, ControllerBackoff, rewatching};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::{ManagedCluster, Placement, PlacementDecision};
use base64::Engine;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, Service};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch,
    PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::secrets::{self, ANNOTATION_GITOPSCLUSTER, Credentials};
use crate::status::{self, Check, Outcome};
use crate::{FIELD_MANAGER, GitOpsConfig, StaleSecretPolicy};

const CONTROLLER: &str = "gitopscluster";

/// ConfigMaps used by the ApplicationSet `clusterDecisionResource` generator.
pub const CONFIGMAP_PLACEMENT: &str = "acm-placement";
pub const CONFIGMAP_PLACEMENTRULE: &str = "acm-placementrule";
/// Argo CD server Service labels.
const ARGO_SERVER_SELECTOR: &str =
    "app.kubernetes.io/component=server,app.kubernetes.io/part-of=argocd";
/// ApplicationSet controller service accounts bound to the placement reader Role: the upstream
/// Argo CD name and the OpenShift GitOps one.
pub const APPSET_SERVICE_ACCOUNTS: &[&str] = &[
    "argocd-applicationset-controller",
    "openshift-gitops-applicationset-controller",
];
const REQUEUE_OK: Duration = Duration::from_secs(300);
const REQUEUE_FAILED: Duration = Duration::from_secs(30);
const MSA_PROBE_INTERVAL: Duration = Duration::from_secs(60);
/// Cluster Secrets written (or deleted) at once by one reconcile.
const WRITE_CONCURRENCY: usize = 16;

/// What became of one selected cluster in [`register_clusters`].
enum Registration {
    /// Its Secret is in place.
    Done,
    /// Decided, but no ManagedCluster of that name.
    Missing,
    /// Its name is claimed by a cluster Secret no GitOpsCluster manages.
    Refused,
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}: {1}")]
    Kube(String, #[source] kube::Error),
    #[error("{0}")]
    Incomplete(String),
}

/// The Role (and RoleBinding) letting the ApplicationSet controller read placement decisions.
pub fn placement_role_name(argo_namespace: &str) -> String {
    format!("{argo_namespace}-applicationset-controller-placement")
}

/// The two generator ConfigMaps (`acm-placement`, legacy `acm-placementrule`).
pub fn generator_configmaps(argo_namespace: &str) -> Vec<ConfigMap> {
    [
        (
            CONFIGMAP_PLACEMENT,
            "cluster.open-cluster-management.io/v1beta1",
            "placementdecisions",
        ),
        (
            CONFIGMAP_PLACEMENTRULE,
            "apps.open-cluster-management.io/v1",
            "placementrules",
        ),
    ]
    .into_iter()
    .map(|(name, api_version, kind)| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(argo_namespace.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("apiVersion".to_string(), api_version.to_string()),
            ("kind".to_string(), kind.to_string()),
            ("statusListKey".to_string(), "decisions".to_string()),
            ("matchKey".to_string(), "clusterName".to_string()),
        ])),
        ..Default::default()
    })
    .collect()
}

fn placement_role(argo_namespace: &str) -> (Role, RoleBinding) {
    let name = placement_role_name(argo_namespace);
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(argo_namespace.into()),
        ..Default::default()
    };
    let verbs = vec!["get".to_string(), "list".to_string(), "watch".to_string()];
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["cluster.open-cluster-management.io".into()]),
                resources: Some(vec!["placementdecisions".into()]),
                verbs: verbs.clone(),
                ..Default::default()
            },
            PolicyRule {
                api_groups: Some(vec!["apps.open-cluster-management.io".into()]),
                resources: Some(vec!["placementrules".into()]),
                verbs,
                ..Default::default()
            },
        ]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name,
        },
        subjects: Some(
            APPSET_SERVICE_ACCOUNTS
                .iter()
                .map(|sa| Subject {
                    kind: "ServiceAccount".into(),
                    name: (*sa).into(),
                    namespace: Some(argo_namespace.into()),
                    ..Default::default()
                })
                .collect(),
        ),
    };
    (role, binding)
}

/// The ManagedServiceAccount API (`authentication.open-cluster-management.io`), probed lazily.
struct MsaApi {
    checked: Option<Instant>,
    resource: Option<ApiResource>,
}

pub(crate) struct Ctx {
    client: Client,
    config: GitOpsConfig,
    metrics: Metrics,
    decisions: Store<PlacementDecision>,
    clusters: Store<ManagedCluster>,
    secrets: Store<Secret>,
    msa: tokio::sync::Mutex<MsaApi>,
}

fn kerr(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |e| Error::Kube(what, e)
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// A stream of `()` for every relevant change of a reflected resource: deletions, and applies
/// whose fingerprint changed; one `()` when the initial list is complete.
pub(crate) fn relevant_changes<K, S>(
    events: S,
    fingerprint: fn(&K) -> u64,
    resource: &'static str,
) -> impl Stream<Item = ()> + Send + 'static
where
    K: Resource + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    type Seen = HashMap<(Option<String>, String), u64>;
    let seen: Arc<Mutex<Seen>> = Default::default();
    events.filter_map(move |ev| {
        let seen = seen.clone();
        async move {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(controller = CONTROLLER, resource, error = %e, "watch error; retrying");
                    return None;
                }
            };
            let key = |o: &K| {
                (
                    o.meta().namespace.clone(),
                    o.meta().name.clone().unwrap_or_default(),
                )
            };
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            match ev {
                watcher::Event::Init => None,
                watcher::Event::InitApply(o) => {
                    seen.insert(key(&o), fingerprint(&o));
                    None
                }
                watcher::Event::InitDone => Some(()),
                watcher::Event::Apply(o) => {
                    let fp = fingerprint(&o);
                    (seen.insert(key(&o), fp) != Some(fp)).then_some(())
                }
                watcher::Event::Delete(o) => {
                    seen.remove(&key(&o));
                    Some(())
                }
            }
        }
    })
}

fn hash_of(v: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

fn cluster_fingerprint(mc: &ManagedCluster) -> u64 {
    let configs: Vec<(String, Option<String>)> = mc
        .spec
        .managed_cluster_client_configs
        .iter()
        .flatten()
        .map(|c| (c.url.clone(), c.ca_bundle.clone()))
        .collect();
    hash_of((&mc.metadata.labels, configs))
}

fn decision_fingerprint(d: &PlacementDecision) -> u64 {
    let names: Vec<&str> = d.cluster_names().collect();
    hash_of((&d.metadata.labels, names))
}

fn meta_fingerprint<K: Resource>(o: &K) -> u64 {
    hash_of(&o.meta().labels)
}

fn secret_fingerprint(s: &Secret) -> u64 {
    let data: Vec<(&String, &Vec<u8>)> = s.data.iter().flatten().map(|(k, v)| (k, &v.0)).collect();
    hash_of((&s.metadata.labels, &s.metadata.annotations, data, &s.type_))
}

/// Runs the controller until `shutdown`.
pub(crate) async fn run(
    client: Client,
    config: GitOpsConfig,
    metrics: Metrics,
    health: ApiHealth,
    shutdown: CancellationToken,
) {
    let (decisions, dw) = reflector::store::<PlacementDecision>();
    let (clusters, cw) = reflector::store::<ManagedCluster>();
    let (secret_store, sw) = reflector::store::<Secret>();
    let decision_events = reflector::reflector(
        dw,
        rewatching(
            Api::<PlacementDecision>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
    );
    let cluster_events = reflector::reflector(
        cw,
        rewatching(
            Api::<ManagedCluster>::all(client.clone()),
            watcher::Config::default(),
            health.clone(),
        ),
    );
    let secret_events = reflector::reflector(
        sw,
        rewatching(
            Api::<Secret>::all(client.clone()),
            watcher::Config::default()
                .labels(&format!("{}=cluster", names::LABEL_ARGOCD_SECRET_TYPE)),
            health.clone(),
        ),
    );
    // Namespaces gaining or losing the authorisation label, Argo CD servers appearing.
    let namespace_events = rewatching(
        Api::<kube::core::PartialObjectMeta<Namespace>>::all(client.clone()),
        watcher::Config::default().labels(names::LABEL_GITOPS_ARGO_NAMESPACE),
        health.clone(),
    );
    let server_events = rewatching(
        Api::<kube::core::PartialObjectMeta<Service>>::all(client.clone()),
        watcher::Config::default().labels(ARGO_SERVER_SELECTOR),
        health.clone(),
    );
    let triggers = futures::stream::select_all([
        relevant_changes(decision_events, decision_fingerprint, "placementdecisions").boxed(),
        relevant_changes(cluster_events, cluster_fingerprint, "managedclusters").boxed(),
        relevant_changes(secret_events, secret_fingerprint, "secrets").boxed(),
        relevant_changes(namespace_events, meta_fingerprint, "namespaces").boxed(),
        relevant_changes(server_events, meta_fingerprint, "services").boxed(),
        // the end of an API-server outage: everything at once, not at the next 5 s retry
        health.recovered().boxed(),
    ]);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        metrics,
        decisions: decisions.clone(),
        clusters: clusters.clone(),
        secrets: secret_store.clone(),
        msa: tokio::sync::Mutex::new(MsaApi {
            checked: None,
            resource: None,
        }),
    });
    let ready = Arc::new(AtomicBool::new(false));
    {
        let (d, c, s) = (decisions.clone(), clusters.clone(), secret_store.clone());
        let ready = ready.clone();
        tokio::spawn(async move {
            let _ = tokio::join!(
                d.wait_until_ready(),
                c.wait_until_ready(),
                s.wait_until_ready()
            );
            ready.store(true, Ordering::SeqCst);
        });
    }
    let token = shutdown.clone();
    let controller = Controller::new(
        Api::<GitOpsCluster>::all(client),
        watcher::Config::default(),
    );
    let store = controller.store();
    let run = controller
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(50)))
        .trigger_backoff(ControllerBackoff::new(health))
        .reconcile_all_on(triggers)
        .graceful_shutdown_on(async move { token.cancelled().await })
        .run(
            move |gc, ctx: Arc<Ctx>| {
                let ready = ready.load(Ordering::SeqCst);
                async move {
                    if !ready {
                        // The caches are not complete yet: a reconcile now could take a
                        // missing cluster for a deleted one. `reconcile_all_on` fires once they are.
                        return Ok(Action::requeue(Duration::from_millis(200)));
                    }
                    let started = Instant::now();
                    let r = reconcile(gc, ctx.clone()).await;
                    ctx.metrics
                        .reconciled(CONTROLLER, started.elapsed().as_secs_f64(), r.is_ok());
                    r
                }
            },
            |_gc, err: &Error, _ctx| {
                tracing::warn!(error = %err, "GitOpsCluster reconcile failed");
                Action::requeue(Duration::from_secs(5))
            },
            ctx,
        )
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %e, "GitOpsCluster controller event");
            }
        });
    crate::until_shutdown(run, store, shutdown, CONTROLLER).await;
}

async fn reconcile(gc: Arc<GitOpsCluster>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if gc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    if gc.spec.argo_server.argo_namespace.is_empty() {
        // Written as v1alpha1 (`spec.argoCDAgentAddon`, no `argoServer`): the addon
        // controller's object (crate::addon), not this one's.
        return Ok(Action::await_change());
    }
    let ns = gc.namespace().unwrap_or_default();
    let name = gc.name_any();
    let owner = format!("{ns}/{name}");
    let argo_ns = gc.spec.argo_server.argo_namespace.clone();
    let mut outcome = Outcome {
        argo_namespace: argo_ns.clone(),
        unsupported: status::unsupported_fields(&gc),
        ..Default::default()
    };
    let mut errors: Vec<String> = Vec::new();

    outcome.argo_server = Some(check_argo_server(&ctx.client, &ns, &argo_ns).await?);
    if outcome.argo_server.as_ref().is_some_and(|c| c.ok) {
        outcome.appset_resources = Some(ensure_appset_resources(&ctx, &argo_ns).await);
        let placement = resolve_placement(&ctx, &gc, &ns).await?;
        match placement {
            Err(check) => outcome.placement = Some(check),
            Ok(selected) => {
                outcome.placement = Some(Check::ok(
                    "Success",
                    format!(
                        "{} cluster(s) selected by placement {}",
                        selected.len(),
                        gc.spec.placement_ref.name.as_deref().unwrap_or_default()
                    ),
                ));
                let (clusters_check, registered) =
                    register_clusters(&ctx, &gc, &owner, &argo_ns, &selected, &mut errors).await;
                outcome.clusters = Some(clusters_check);
                outcome.registered = registered;
            }
        }
    }

    let previous = gc.status.as_ref();
    let new = status::compute(
        &outcome,
        previous,
        gc.metadata.generation,
        jiff::Timestamp::now(),
    );
    if status::changed(previous, &new) {
        let api: Api<GitOpsCluster> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &name,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"status": new})),
        )
        .await
        .map_err(kerr(format!("writing status of GitOpsCluster {owner}")))?;
        ctx.metrics
            .write(CONTROLLER, "GitOpsCluster", "patch-status");
        tracing::info!(gitopscluster = %owner, phase = ?new.phase, "status updated");
    }
    if !errors.is_empty() {
        return Err(Error::Incomplete(errors.join("; ")));
    }
    let ready = outcome.clusters.as_ref().is_some_and(|c| c.ok);
    Ok(Action::requeue(if ready {
        REQUEUE_OK
    } else {
        REQUEUE_FAILED
    }))
}

async fn check_argo_server(client: &Client, gc_ns: &str, argo_ns: &str) -> Result<Check, Error> {
    if argo_ns.is_empty() {
        return Ok(Check::failed(
            "InvalidSpec",
            "spec.argoServer.argoNamespace is empty",
        ));
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let Some(namespace) = namespaces
        .get_opt(argo_ns)
        .await
        .map_err(kerr(format!("reading namespace {argo_ns}")))?
    else {
        return Ok(Check::failed(
            "ArgoNamespaceNotFound",
            format!("namespace {argo_ns} does not exist"),
        ));
    };
    if argo_ns != gc_ns {
        let authorised = namespace
            .labels()
            .get(names::LABEL_GITOPS_ARGO_NAMESPACE)
            .is_some_and(|v| v == "true");
        if !authorised {
            return Ok(Check::failed(
                "NamespaceNotAuthorized",
                format!(
                    "namespace {argo_ns} is not labelled {}=true, so GitOpsClusters of namespace {gc_ns} may not write cluster secrets into it",
                    names::LABEL_GITOPS_ARGO_NAMESPACE
                ),
            ));
        }
    }
    let services: Api<Service> = Api::namespaced(client.clone(), argo_ns);
    let found = services
        .list_metadata(&ListParams::default().labels(ARGO_SERVER_SELECTOR).limit(1))
        .await
        .map_err(kerr(format!(
            "listing Argo CD server services in {argo_ns}"
        )))?;
    if found.items.is_empty() {
        return Ok(Check::failed(
            "ArgoServerNotFound",
            format!("no Argo CD server Service ({ARGO_SERVER_SELECTOR}) in namespace {argo_ns}"),
        ));
    }
    Ok(Check::ok(
        "Success",
        format!("Argo CD server found in namespace {argo_ns}"),
    ))
}

/// Creates (never updates) the generator ConfigMaps and the placement reader Role/RoleBinding.
async fn ensure_appset_resources(ctx: &Ctx, argo_ns: &str) -> Check {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut failures = Vec::new();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), argo_ns);
    for cm in generator_configmaps(argo_ns) {
        let name = cm.name_any();
        if let Err(e) = create_if_missing(&cms, &name, &cm, &pp).await {
            failures.push(format!("ConfigMap {name}: {e}"));
        } else {
            ctx.metrics.write(CONTROLLER, "ConfigMap", "ensure");
        }
    }
    let (role, binding) = placement_role(argo_ns);
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), argo_ns);
    if let Err(e) = create_if_missing(&roles, &role.name_any(), &role, &pp).await {
        failures.push(format!("Role {}: {e}", role.name_any()));
    }
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), argo_ns);
    if let Err(e) = create_if_missing(&bindings, &binding.name_any(), &binding, &pp).await {
        failures.push(format!("RoleBinding {}: {e}", binding.name_any()));
    }
    if failures.is_empty() {
        Check::ok(
            "Success",
            format!(
                "ConfigMaps {CONFIGMAP_PLACEMENT}, {CONFIGMAP_PLACEMENTRULE} and the placement reader Role are present"
            ),
        )
    } else {
        Check::failed("ResourceCreationFailed", failures.join("; "))
    }
}

async fn create_if_missing<K>(
    api: &Api<K>,
    name: &str,
    obj: &K,
    pp: &PostParams,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    if api.get_metadata_opt(name).await?.is_some() {
        return Ok(());
    }
    match api.create(pp, obj).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The cluster names selected by the GitOpsCluster's Placement (sorted, unique), or the failed
/// `PlacementResolved` check.
async fn resolve_placement(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    ns: &str,
) -> Result<Result<Vec<String>, Check>, Error> {
    let pref = &gc.spec.placement_ref;
    let kind = pref.kind.as_deref().unwrap_or("Placement");
    if kind != "Placement" {
        return Ok(Err(Check::failed(
            "UnsupportedPlacementKind",
            format!("spec.placementRef.kind {kind:?} is not supported; use kind Placement"),
        )));
    }
    let Some(pname) = pref.name.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(Err(Check::failed(
            "InvalidSpec",
            "spec.placementRef.name is empty",
        )));
    };
    let placements: Api<Placement> = Api::namespaced(ctx.client.clone(), ns);
    if placements
        .get_metadata_opt(pname)
        .await
        .map_err(kerr(format!("reading Placement {ns}/{pname}")))?
        .is_none()
    {
        return Ok(Err(Check::failed(
            "PlacementNotFound",
            format!("Placement {ns}/{pname} does not exist"),
        )));
    }
    let selected: BTreeSet<String> = ctx
        .decisions
        .state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns))
        .filter(|d| {
            d.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(names::LABEL_PLACEMENT))
                .is_some_and(|p| p == pname)
        })
        .flat_map(|d| d.cluster_names().map(str::to_string).collect::<Vec<_>>())
        .collect();
    Ok(Ok(selected.into_iter().collect()))
}

async fn credentials(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    cluster: &ManagedCluster,
    msa_name: &str,
) -> Result<Credentials, Error> {
    if gc.spec.create_blank_cluster_secrets == Some(true) {
        return Ok(Credentials::Blank);
    }
    let resource = {
        let mut msa = ctx.msa.lock().await;
        let stale = msa.checked.is_none_or(|t| t.elapsed() > MSA_PROBE_INTERVAL);
        if msa.resource.is_none() && stale {
            msa.checked = Some(Instant::now());
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(
                    "authentication.open-cluster-management.io",
                    "v1beta1",
                    "ManagedServiceAccount",
                ),
                "managedserviceaccounts",
            );
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &ar);
            match api.list_metadata(&ListParams::default().limit(1)).await {
                Ok(_) => msa.resource = Some(ar),
                Err(e) if is_status(&e, 404) => {}
                Err(e) => tracing::debug!(error = %e, "ManagedServiceAccount API probe failed"),
            }
        }
        msa.resource.clone()
    };
    let Some(ar) = resource else {
        return Ok(Credentials::Blank);
    };
    let cname = cluster.name_any();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &cname, &ar);
    let Some(msa) = api.get_opt(msa_name).await.map_err(kerr(format!(
        "reading ManagedServiceAccount {cname}/{msa_name}"
    )))?
    else {
        return Ok(Credentials::Blank);
    };
    let token_secret = msa
        .data
        .pointer("/status/tokenSecretRef/name")
        .and_then(|v| v.as_str())
        .unwrap_or(msa_name)
        .to_string();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &cname);
    let Some(secret) = secrets
        .get_opt(&token_secret)
        .await
        .map_err(kerr(format!("reading token Secret {cname}/{token_secret}")))?
    else {
        return Ok(Credentials::Blank);
    };
    let Some(token) = secrets::secret_value(&secret, "token").filter(|t| !t.is_empty()) else {
        return Ok(Credentials::Blank);
    };
    let ca = secret
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .map(|b| base64::engine::general_purpose::STANDARD.encode(&b.0));
    Ok(secrets::token_credentials(cluster, &token, ca.as_deref()).unwrap_or(Credentials::Blank))
}

/// Writes the Secret of every selected cluster, refuses clusters claimed by a foreign Secret,
/// removes stale Secrets. Returns the `ClustersRegistered` check and the registered names.
async fn register_clusters(
    ctx: &Ctx,
    gc: &GitOpsCluster,
    owner: &str,
    argo_ns: &str,
    selected: &[String],
    errors: &mut Vec<String>,
) -> (Check, Vec<String>) {
    let msa_name = gc
        .spec
        .managed_service_account_ref
        .as_deref()
        .filter(|m| !m.is_empty())
        .unwrap_or(secrets::DEFAULT_MANAGED_SERVICE_ACCOUNT);
    let all_secrets = ctx.secrets.state();
    let owned_by = |s: &Secret| {
        s.annotations()
            .get(ANNOTATION_GITOPSCLUSTER)
            .is_some_and(|o| o == owner)
    };
    // Cluster names claimed by foreign (non-ACM) cluster Secrets in the Argo namespace.
    let foreign: BTreeSet<String> = all_secrets
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some(argo_ns))
        .filter(|s| {
            s.labels()
                .get(names::LABEL_ACM_CLUSTER)
                .is_none_or(|v| v != "true")
        })
        .filter_map(|s| secrets::secret_value(s, "name"))
        .collect();
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), argo_ns);
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    // One cluster: its Secret's name (when it has a desired one) and what became of it.
    let register = |cname: String| {
        let (api, pp, foreign) = (&api, &pp, &foreign);
        async move {
            let Some(cluster) = ctx.clusters.get(&reflector::ObjectRef::new(&cname)) else {
                return (None, Registration::Missing);
            };
            if foreign.contains(&cname) {
                return (None, Registration::Refused);
            }
            let creds = match credentials(ctx, gc, &cluster, msa_name).await {
                Ok(c) => c,
                Err(e) => return (None, Registration::Failed(e.to_string())),
            };
            let desired = secrets::cluster_secret(&cluster, argo_ns, msa_name, &creds, owner);
            let sname = desired.name_any();
            let existing = ctx
                .secrets
                .get(&reflector::ObjectRef::new(&sname).within(argo_ns));
            let result = match existing {
                Some(cur)
                    if secrets::secret_up_to_date(&cur, &desired)
                        && secrets::stale_labels(&cur, &desired).is_empty() =>
                {
                    Ok(())
                }
                Some(cur)
                    if !owned_by(&cur) && cur.labels().get(names::LABEL_ACM_CLUSTER).is_none() =>
                {
                    return (Some(sname), Registration::Refused);
                }
                Some(cur) => {
                    let mut replacement = desired.clone();
                    replacement.metadata.resource_version = cur.resource_version();
                    api.replace(&sname, pp, &replacement).await.map(|_| {
                        ctx.metrics.write(CONTROLLER, "Secret", "update");
                        tracing::info!(gitopscluster = owner, secret = %sname, "cluster secret updated");
                    })
                }
                None => api.create(pp, &desired).await.map(|_| {
                    ctx.metrics.write(CONTROLLER, "Secret", "create");
                    tracing::info!(gitopscluster = owner, secret = %sname, "cluster secret created");
                }),
            };
            let r = match result {
                Ok(()) => Registration::Done,
                Err(e) => Registration::Failed(format!("writing Secret {argo_ns}/{sname}: {e}")),
            };
            (Some(sname), r)
        }
    };
    // Concurrently: one write after the other took 11 s for 25 new clusters on a restarted
    // API server (docs/reliability.md); in order, so that the status lists them sorted.
    let registrations: Vec<_> = selected.iter().cloned().map(register).collect();
    let outcomes: Vec<(Option<String>, Registration)> = futures::stream::iter(registrations)
        .buffered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut registered = Vec::new();
    let mut refused = Vec::new();
    let mut missing = Vec::new();
    let mut desired_names = BTreeSet::new();
    for (cname, (sname, r)) in selected.iter().zip(outcomes) {
        desired_names.extend(sname);
        match r {
            Registration::Done => registered.push(cname.clone()),
            Registration::Missing => missing.push(cname.clone()),
            Registration::Refused => refused.push(cname.clone()),
            Registration::Failed(e) => errors.push(e),
        }
    }

    // Stale Secrets of this GitOpsCluster.
    let selected_set: BTreeSet<&String> = selected.iter().collect();
    let mut stale = Vec::new();
    for s in all_secrets.iter().filter(|s| owned_by(s)) {
        let sns = s.namespace().unwrap_or_default();
        let sname = s.name_any();
        if sns == argo_ns && desired_names.contains(&sname) {
            continue;
        }
        let cname = s
            .labels()
            .get(names::LABEL_CLUSTER_NAME)
            .cloned()
            .unwrap_or_default();
        let cluster_gone = ctx
            .clusters
            .get(&reflector::ObjectRef::new(&cname))
            .is_none();
        let superseded = sns != argo_ns
            || (selected_set.contains(&cname)
                && sname != secrets::cluster_secret_name(&cname, msa_name));
        let left = !selected_set.contains(&cname);
        let delete = cluster_gone
            || superseded
            || (left && ctx.config.stale_secret_policy == StaleSecretPolicy::LeftPlacement);
        if delete {
            stale.push((sns, sname, cname, cluster_gone));
        }
    }
    let deletes: Vec<_> = stale
        .into_iter()
        .map(|(sns, sname, cname, cluster_gone)| async move {
            let sapi: Api<Secret> = Api::namespaced(ctx.client.clone(), &sns);
            match sapi.delete(&sname, &DeleteParams::default()).await {
                Ok(_) => {
                    ctx.metrics.write(CONTROLLER, "Secret", "delete");
                    tracing::info!(gitopscluster = owner, secret = %sname, cluster = %cname, cluster_gone, "stale cluster secret deleted");
                    None
                }
                Err(e) if is_status(&e, 404) => None,
                Err(e) => Some(format!("deleting Secret {sns}/{sname}: {e}")),
            }
        })
        .collect();
    let deleted: Vec<Option<String>> = futures::stream::iter(deletes)
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    errors.extend(deleted.into_iter().flatten());

    let check = if !refused.is_empty() {
        Check::failed(
            "ForeignClusterSecret",
            format!(
                "not registered: clusters [{}] are already named by cluster secrets in namespace {argo_ns} that no GitOpsCluster manages",
                refused.join(" ")
            ),
        )
    } else if !errors.is_empty() {
        Check::failed("SecretWriteFailed", errors.join("; "))
    } else {
        let mut msg = format!(
            "{} cluster secret(s) in namespace {argo_ns}",
            registered.len()
        );
        if !missing.is_empty() {
            msg.push_str(&format!(
                "; decided clusters without a ManagedCluster skipped: [{}]",
                missing.join(" ")
            ));
        }
        Check::ok("Success", msg)
    };
    (check, registered)
}
