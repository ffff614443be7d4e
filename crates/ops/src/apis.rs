//! Required APIs: which CRDs each feature (controller) needs, whether the API server serves them,
//! and running each feature only while it can work.
//!
//! An [`ApiGate`] polls discovery (`/apis/<group>/<version>`, readable by every authenticated
//! identity, so no extra RBAC) — every [`GateOptions::missing_interval`] while something is
//! missing, every [`GateOptions::served_interval`] otherwise. A missing CRD, or one served only at
//! versions argocd-pull cannot read, is reported **once** per appearance: an `ERROR` naming the
//! CRD, the feature that needs it and the fix; a line on `/readyz` (503 until fixed, see
//! [`crate::admin::Readiness::set_problem`]); the gauge
//! `argocd_pull_required_api_missing{feature,crd,version} 1`. [`ApiGate::supervise`] runs a
//! feature only while its APIs are served: it starts when they appear (no restart needed) and is
//! stopped (its token cancelled) when one disappears; other features are not affected.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::admin::Readiness;

/// The fix for a missing CRD that argocd-pull itself ships.
pub const INSTALL_OWN_CRDS: &str = "argocd-pull crds | kubectl apply -f -";

/// One API a feature reads: a resource at a group/version.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequiredApi {
    pub group: &'static str,
    pub version: &'static str,
    /// The resource (plural), e.g. `multiclusterapplicationsetreports`.
    pub plural: &'static str,
    pub kind: &'static str,
    /// How to install it, e.g. [`INSTALL_OWN_CRDS`] or "install Argo CD".
    pub install: &'static str,
}

impl RequiredApi {
    /// The CRD's name, `<plural>.<group>`.
    pub fn crd(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    fn group_version(&self) -> String {
        format!("{}/{}", self.group, self.version)
    }
}

/// A unit that runs only while all of its APIs are served.
#[derive(Clone, Debug)]
pub struct Feature {
    /// Short name (log field, metric label), e.g. `appset-report`.
    pub name: &'static str,
    /// What it does, for messages, e.g. "the ApplicationSet report".
    pub description: &'static str,
    pub apis: Vec<RequiredApi>,
    /// The flag that switches it off, e.g. `--appset-report=false`.
    pub disable: &'static str,
}

/// Why a required API cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The resource is not served at all.
    Missing(RequiredApi),
    /// The resource is served, but only at other versions of its group.
    WrongVersion(RequiredApi, Vec<String>),
}

impl Problem {
    pub fn api(&self) -> &RequiredApi {
        match self {
            Problem::Missing(a) | Problem::WrongVersion(a, _) => a,
        }
    }

    /// The message for `feature`: what is wrong, what needs it, how to fix it.
    pub fn message(&self, feature: &Feature) -> String {
        let api = self.api();
        let what = match self {
            Problem::Missing(_) => format!(
                "CRD {} ({}/{} {}) is not installed",
                api.crd(),
                api.group,
                api.version,
                api.kind
            ),
            Problem::WrongVersion(_, served) => format!(
                "CRD {} is served at {} but argocd-pull reads {}/{} {}",
                api.crd(),
                served.join(", "),
                api.group,
                api.version,
                api.kind
            ),
        };
        format!(
            "{what}; {} ({}) waits for it: {}, or turn it off with {}",
            feature.name, feature.description, api.install, feature.disable
        )
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MissingLabels {
    feature: String,
    crd: String,
    version: String,
}

/// How often discovery is polled.
#[derive(Clone, Copy, Debug)]
pub struct GateOptions {
    /// While some required API is missing (how soon a newly installed CRD is picked up).
    pub missing_interval: Duration,
    /// While everything is served (how soon a removed CRD stops its feature).
    pub served_interval: Duration,
    /// How long after finding a served API gone discovery looks again before the feature is
    /// stopped.
    pub confirm_interval: Duration,
}

impl Default for GateOptions {
    fn default() -> Self {
        GateOptions {
            missing_interval: Duration::from_secs(10),
            served_interval: Duration::from_secs(60),
            confirm_interval: Duration::from_secs(5),
        }
    }
}

/// What the last discovery pass found: `None` before the first pass completed.
type State = Option<BTreeMap<&'static str, Vec<Problem>>>;

/// Checks the features' APIs and runs each feature while they are served (see the module docs).
/// Cheap to clone.
#[derive(Clone)]
pub struct ApiGate {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    features: Vec<Feature>,
    readiness: Readiness,
    missing: Family<MissingLabels, Gauge>,
    options: GateOptions,
    state: watch::Sender<State>,
}

impl std::fmt::Debug for ApiGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiGate")
            .field("features", &self.inner.features)
            .finish_non_exhaustive()
    }
}

impl ApiGate {
    /// A gate for `features`; problems are shown on `readiness`. Start [`ApiGate::run`].
    pub fn new(
        client: kube::Client,
        features: Vec<Feature>,
        readiness: Readiness,
        options: GateOptions,
    ) -> ApiGate {
        let missing = Family::<MissingLabels, Gauge>::default();
        for f in &features {
            for a in &f.apis {
                missing.get_or_create(&labels(f, a)).set(0);
            }
        }
        ApiGate {
            inner: Arc::new(Inner {
                client,
                features,
                readiness,
                missing,
                options,
                state: watch::channel(None).0,
            }),
        }
    }

    /// Registers `required_api_missing` (1 while a feature's CRD is missing or unreadable).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "required_api_missing",
            "1 while a CRD a feature needs is not served at the version argocd-pull reads",
            self.inner.missing.clone(),
        );
    }

    /// The current problems of `feature` (empty when served or not checked yet).
    pub fn problems(&self, feature: &str) -> Vec<Problem> {
        self.inner
            .state
            .borrow()
            .as_ref()
            .and_then(|s| s.get(feature).cloned())
            .unwrap_or_default()
    }

    /// Polls discovery until `shutdown`, reporting changes (see the module docs).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut reported: BTreeMap<(&'static str, RequiredApi), Problem> = BTreeMap::new();
        let mut confirming = false;
        loop {
            let found = tokio::select! {
                _ = shutdown.cancelled() => return,
                f = self.discover() => f,
            };
            let interval = match found {
                // An API that was served and is missing now: looked at again before its feature
                // is stopped. A restarting API server answers discovery before it serves every
                // CRD again; stopping then would restart the feature (a full re-list) a
                // `missing_interval` later.
                Some(state) if !confirming && self.newly_missing(&state) => {
                    confirming = true;
                    tracing::debug!("a required API seems gone; checking again");
                    self.inner.options.confirm_interval
                }
                Some(state) => {
                    confirming = false;
                    self.report(&state, &mut reported);
                    let any_missing = state.values().any(|p| !p.is_empty());
                    self.inner.state.send_replace(Some(state));
                    if any_missing {
                        self.inner.options.missing_interval
                    } else {
                        self.inner.options.served_interval
                    }
                }
                // discovery failed (API server unreachable…): keep what we knew, retry soon
                None => self.inner.options.missing_interval,
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// Whether `state` has a problem for a feature the last applied state had none for.
    fn newly_missing(&self, state: &BTreeMap<&'static str, Vec<Problem>>) -> bool {
        let current = self.inner.state.borrow();
        let Some(current) = current.as_ref() else {
            return false;
        };
        state
            .iter()
            .any(|(f, p)| !p.is_empty() && current.get(f).is_none_or(Vec::is_empty))
    }

    /// Runs `feature` while its APIs are served: `run(token)` is called when they are (again)
    /// served; its token is cancelled when one disappears (then `run` is awaited and the feature
    /// waits for its APIs again) or on `shutdown`. Returns when `shutdown` is cancelled, or when
    /// a run ends by itself.
    pub async fn supervise<F, Fut>(&self, feature: &str, shutdown: CancellationToken, mut run: F)
    where
        F: FnMut(CancellationToken) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut rx = self.inner.state.subscribe();
        let served = |s: &State| {
            s.as_ref()
                .is_some_and(|s| s.get(feature).is_none_or(Vec::is_empty))
        };
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                ok = async { rx.wait_for(served).await.is_ok() } => if !ok { return },
            }
            tracing::info!(feature, "required APIs served; starting");
            let token = shutdown.child_token();
            let fut = run(token.clone());
            let mut fut = std::pin::pin!(fut);
            tokio::select! {
                _ = &mut fut => return,
                ok = async { rx.wait_for(|s| !served(s)).await.is_ok() } => {
                    if !ok { return }
                    tracing::warn!(feature, "a required API is gone; stopping until it is served again");
                    token.cancel();
                    fut.await;
                }
            }
        }
    }

    /// One discovery pass over every feature; `None` when discovery itself failed.
    async fn discover(&self) -> Option<BTreeMap<&'static str, Vec<Problem>>> {
        let client = &self.inner.client;
        // served plurals per group/version (`None`: the group/version is not served)
        let mut served: HashMap<String, Option<BTreeSet<String>>> = HashMap::new();
        let mut groups: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIGroupList> = None;
        let mut out = BTreeMap::new();
        for f in &self.inner.features {
            let mut problems = Vec::new();
            for api in &f.apis {
                let gv = api.group_version();
                if !served.contains_key(&gv) {
                    let plurals = resources(client, &gv).await?;
                    served.insert(gv.clone(), plurals);
                }
                if served[&gv].as_ref().is_some_and(|p| p.contains(api.plural)) {
                    continue;
                }
                // not served at this version: is it served at another one?
                if groups.is_none() {
                    groups = Some(client.list_api_groups().await.ok()?);
                }
                let versions: Vec<String> = groups
                    .iter()
                    .flat_map(|g| &g.groups)
                    .filter(|g| g.name == api.group)
                    .flat_map(|g| g.versions.iter().map(|v| v.version.clone()))
                    .filter(|v| v != api.version)
                    .collect();
                let mut other = Vec::new();
                for v in versions {
                    let gv = format!("{}/{v}", api.group);
                    if !served.contains_key(&gv) {
                        let plurals = resources(client, &gv).await?;
                        served.insert(gv.clone(), plurals);
                    }
                    if served[&gv].as_ref().is_some_and(|p| p.contains(api.plural)) {
                        other.push(gv);
                    }
                }
                problems.push(if other.is_empty() {
                    Problem::Missing(api.clone())
                } else {
                    Problem::WrongVersion(api.clone(), other)
                });
            }
            out.insert(f.name, problems);
        }
        Some(out)
    }

    /// Logs, shows and counts what changed since the last pass.
    fn report(
        &self,
        state: &BTreeMap<&'static str, Vec<Problem>>,
        reported: &mut BTreeMap<(&'static str, RequiredApi), Problem>,
    ) {
        for f in &self.inner.features {
            let problems = state.get(f.name).map(Vec::as_slice).unwrap_or_default();
            for api in &f.apis {
                let key = (f.name, api.clone());
                let readiness_key = format!("api/{}/{}", f.name, api.crd());
                let gauge = self.inner.missing.get_or_create(&labels(f, api));
                match problems.iter().find(|p| p.api() == api) {
                    Some(p) => {
                        if reported.get(&key) != Some(p) {
                            let message = p.message(f);
                            tracing::error!(
                                feature = f.name,
                                crd = %api.crd(),
                                version = api.version,
                                "{message}"
                            );
                            self.inner.readiness.set_problem(readiness_key, message);
                            gauge.set(1);
                            reported.insert(key, p.clone());
                        }
                    }
                    None => {
                        if reported.remove(&key).is_some() {
                            tracing::info!(
                                feature = f.name,
                                crd = %api.crd(),
                                version = api.version,
                                "CRD {} is now served",
                                api.crd()
                            );
                            self.inner.readiness.clear_problem(&readiness_key);
                            gauge.set(0);
                        }
                    }
                }
            }
        }
    }
}

fn labels(f: &Feature, a: &RequiredApi) -> MissingLabels {
    MissingLabels {
        feature: f.name.into(),
        crd: a.crd(),
        version: a.version.into(),
    }
}

/// The resources served at `gv`: `Some(None)` when the group/version is not served (404), `None`
/// when discovery failed otherwise.
async fn resources(client: &kube::Client, gv: &str) -> Option<Option<BTreeSet<String>>> {
    match client.list_api_group_resources(gv).await {
        Ok(list) => Some(Some(
            list.resources
                .into_iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| r.name)
                .collect(),
        )),
        Err(kube::Error::Api(s)) if s.code == 404 => Some(None),
        Err(e) => {
            tracing::debug!(group_version = gv, error = %e, "discovery failed; retrying");
            None
        }
    }
}

/// The APIs argocd-pull's controllers read, with their fixes.
pub mod known {
    use super::{INSTALL_OWN_CRDS, RequiredApi};

    const ARGOCD: &str = "install Argo CD on the hub (its CRDs: https://github.com/argoproj/argo-cd/tree/master/manifests/crds)";
    const OCM: &str = "install the Open Cluster Management hub (`clusteradm init`), or `argocd-pull crds --all | kubectl apply -f -` on a test cluster";

    pub const APPLICATIONS: RequiredApi = RequiredApi {
        group: "argoproj.io",
        version: "v1alpha1",
        plural: "applications",
        kind: "Application",
        install: ARGOCD,
    };
    pub const APPLICATION_SETS: RequiredApi = RequiredApi {
        group: "argoproj.io",
        version: "v1alpha1",
        plural: "applicationsets",
        kind: "ApplicationSet",
        install: ARGOCD,
    };
    pub const MANIFEST_WORKS: RequiredApi = RequiredApi {
        group: "work.open-cluster-management.io",
        version: "v1",
        plural: "manifestworks",
        kind: "ManifestWork",
        install: OCM,
    };
    pub const MANAGED_CLUSTERS: RequiredApi = RequiredApi {
        group: "cluster.open-cluster-management.io",
        version: "v1",
        plural: "managedclusters",
        kind: "ManagedCluster",
        install: OCM,
    };
    pub const PLACEMENT_DECISIONS: RequiredApi = RequiredApi {
        group: "cluster.open-cluster-management.io",
        version: "v1beta1",
        plural: "placementdecisions",
        kind: "PlacementDecision",
        install: OCM,
    };
    pub const GITOPS_CLUSTERS: RequiredApi = RequiredApi {
        group: "apps.open-cluster-management.io",
        version: "v1beta1",
        plural: "gitopsclusters",
        kind: "GitOpsCluster",
        install: INSTALL_OWN_CRDS,
    };
    pub const APPSET_REPORTS: RequiredApi = RequiredApi {
        group: "apps.open-cluster-management.io",
        version: "v1alpha1",
        plural: "multiclusterapplicationsetreports",
        kind: "MulticlusterApplicationSetReport",
        install: INSTALL_OWN_CRDS,
    };
}
