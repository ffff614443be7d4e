//! `argocd-pull demo`: argocd-pull end to end with no cluster at all.
//!
//! Starts a simulated OCM fleet ([`argocd_pull_sim::Fleet`]) whose hub is also served over HTTP
//! (a kubeconfig is written) and runs one delivery model on it:
//!
//! * **basic** (default): the hub controllers (propagation, status, cleanup), the GitOpsCluster
//!   controller and the ApplicationSet report aggregator. The demo applies what a user would — an
//!   Argo CD server Service, a Placement and a `GitOpsCluster` registering its clusters with Argo
//!   CD — and the sample workload the way an ApplicationSet with a `clusterDecisionResource`
//!   generator would (a Placement and an ApplicationSet per app, one generated Application per
//!   selected cluster, owned by its ApplicationSet). Converged: every Application Synced and
//!   Healthy, the GitOpsCluster `successful`, every ApplicationSet's
//!   `MulticlusterApplicationSetReport` showing all its clusters synced and healthy.
//! * **agent**: set up through a `GitOpsCluster` with `spec.argoCDAgentAddon` and a Placement, as
//!   a platform team does: the addon controller writes the PKI and the cluster secrets, the demo
//!   runs the principal with them and one agent per cluster in this process (managed mode; the
//!   simulated fleet runs no pods for the addon's agent Deployment); Applications created in each
//!   agent's namespace on the hub go down to the clusters, status comes back through the agents.
//! * **autonomous**: the same with the agents as the source of truth: Applications created on the
//!   clusters appear on the hub.
//!
//! It prints progress and ends with tables of the hub Applications (and in the basic model the
//! GitOpsCluster and the reports). [`Demo`] is the library form (tests inspect the hub it leaves
//! running); [`run`] is `argocd-pull demo`. See `crates/demo/README.md`.

mod addon;
mod state;
pub mod workload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use argocd_pull_agent::{LocalDeployment, Mode};
use argocd_pull_api::argocd::{Application, ApplicationSet};
use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::PlacementDecision;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use argocd_pull_sim::wait::wait_for_list;
use argocd_pull_sim::{ArgoSimConfig, Fleet, FleetConfig};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::Value;

pub use state::{
    AppRow, Expectation, GitOpsClusterRow, ReportError, ReportRow, State, print_columns,
};
pub use workload::{application_set, generate_application};

/// The delivery model the demo runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum DemoModel {
    /// ManifestWorks wrapping Applications; status through ManifestWork feedback; a
    /// GitOpsCluster and the ApplicationSet reports.
    Basic,
    /// A principal and one agent per cluster over loopback mTLS (managed mode): Applications
    /// created on the hub in each agent's namespace.
    Agent,
    /// The agents are the source of truth: Applications created on the clusters appear on the hub.
    Autonomous,
}

/// `argocd-pull demo` options (each also readable from the environment).
#[derive(Clone, Debug, clap::Args)]
pub struct DemoArgs {
    /// Managed clusters to simulate.
    #[arg(long, env = "ARGOCD_PULL_DEMO_CLUSTERS", default_value_t = 5)]
    pub clusters: usize,
    /// Applications per cluster (one ApplicationSet each).
    #[arg(long, env = "ARGOCD_PULL_DEMO_APPS", default_value_t = 2)]
    pub apps: usize,
    /// Keep the hub up after the run (until Ctrl-C) to explore it with kubectl.
    #[arg(long, env = "ARGOCD_PULL_DEMO_KEEP_RUNNING")]
    pub keep_running: bool,
    /// Where to write the hub's kubeconfig [default: <temp dir>/argocd-pull-demo.kubeconfig].
    #[arg(long, env = "ARGOCD_PULL_DEMO_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// How long to wait for everything to converge (e.g. 90s, 2m, 500ms).
    #[arg(long, env = "ARGOCD_PULL_DEMO_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Delivery model.
    #[arg(long, env = "ARGOCD_PULL_DEMO_MODEL", value_enum, default_value_t = DemoModel::Basic)]
    pub model: DemoModel,
    /// Address the hub's HTTP API listens on (port 0: any free port).
    #[arg(long, env = "ARGOCD_PULL_DEMO_LISTEN", default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Simulated Argo CD time to sync, then again to become healthy.
    #[arg(long, env = "ARGOCD_PULL_DEMO_SYNC_DELAY", default_value = "300ms", value_parser = parse_duration)]
    pub sync_delay: Duration,
    /// Make one Application fail its sync (the simulator's `sim.argocd-pull.io/fail`), to show
    /// how failures surface (Degraded on the hub, an error in the ApplicationSet report). The run
    /// then converges when that app is Degraded and the rest Synced and Healthy.
    #[arg(long, env = "ARGOCD_PULL_DEMO_WITH_FAILURE")]
    pub with_failure: bool,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs {
            clusters: 5,
            apps: 2,
            keep_running: false,
            kubeconfig_out: None,
            timeout: Duration::from_secs(60),
            model: DemoModel::Basic,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            sync_delay: Duration::from_millis(300),
            with_failure: false,
        }
    }
}

/// Parses `90`, `90s`, `500ms`, `2m` or `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 90s, 500ms, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s, m or h")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// How long to wait for a Placement's decisions and for the agents to connect.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// What the demo runs besides the fleet.
enum Parts {
    Basic {
        controllers: argocd_pull_controller::RunningControllers,
        gitops: argocd_pull_gitops::Running,
    },
    Agents {
        local: LocalDeployment,
        /// kubeconfig of the first agent's cluster through the principal's resource proxy
        proxy_kubeconfig: Option<PathBuf>,
    },
    /// The managed model, set up through a GitOpsCluster.
    Addon {
        fleet: Box<addon::AddonFleet>,
        proxy_kubeconfig: Option<PathBuf>,
    },
}

/// The result of [`Demo::drive`].
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Everything expected was reached before the timeout.
    pub converged: bool,
    pub state: State,
    pub expectation: Expectation,
    /// Since [`Demo::start`].
    pub elapsed: Duration,
}

/// A started demo: the fleet, its hub served over HTTP, and the model's components.
pub struct Demo {
    args: DemoArgs,
    fleet: Fleet,
    server: argocd_pull_hub::HubServer,
    kubeconfig: PathBuf,
    parts: Parts,
    t0: Instant,
}

impl Demo {
    /// Starts the fleet, serves its hub, writes the kubeconfig and starts the model's components.
    pub async fn start(args: DemoArgs) -> anyhow::Result<Demo> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        if args.clusters == 0 || args.apps == 0 {
            anyhow::bail!("--clusters and --apps must be at least 1");
        }
        let t0 = Instant::now();
        let mut cfg = FleetConfig::with_clusters(args.clusters);
        cfg.argo = ArgoSimConfig {
            sync_delay: args.sync_delay,
            health_delay: args.sync_delay,
            ..Default::default()
        };
        if args.model != DemoModel::Basic {
            // Agents carry the Applications: no ManifestWorks; Placements only for the agent
            // model's GitOpsCluster.
            cfg.work_agent = false;
            cfg.placement = args.model == DemoModel::Agent;
        }
        let fleet = Fleet::start(cfg)
            .await
            .context("starting the simulated fleet")?;
        for yaml in argocd_pull_api::crds::OWN {
            fleet
                .hub()
                .install_crds_yaml(yaml)
                .context("installing the GitOpsCluster and report CRDs on the hub")?;
        }
        let server = fleet
            .serve(args.listen)
            .await
            .with_context(|| format!("serving the hub on {}", args.listen))?;
        let kubeconfig = args
            .kubeconfig_out
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("argocd-pull-demo.kubeconfig"));
        server
            .write_kubeconfig(&kubeconfig)
            .with_context(|| format!("writing the kubeconfig to {}", kubeconfig.display()))?;
        println!(
            "hub: {} ({} managed cluster{}, kubeconfig {})",
            server.url(),
            args.clusters,
            if args.clusters == 1 { "" } else { "s" },
            kubeconfig.display()
        );

        let hub = fleet.hub_client();
        let parts = match args.model {
            DemoModel::Basic => {
                let mut config = argocd_pull_controller::ControllerConfig::default();
                config.work.appset_feedback = argocd_pull_gitops::report::extra_feedback_rules();
                let controllers = argocd_pull_controller::start(hub.clone(), config)
                    .await
                    .context("starting the hub controllers")?;
                controllers.wait_ready().await;
                let gitops = argocd_pull_gitops::start(hub, Default::default())
                    .await
                    .context("starting the GitOpsCluster and report controllers")?;
                println!(
                    "controllers: propagation, status, cleanup, gitopscluster, applicationset report running"
                );
                Parts::Basic {
                    controllers,
                    gitops,
                }
            }
            DemoModel::Agent => {
                let clusters: Vec<(String, Client)> = fleet
                    .cluster_names()
                    .into_iter()
                    .filter_map(|n| fleet.cluster(&n).map(|c| (n, c.client())))
                    .collect();
                let af = addon::start(hub, &clusters).await?;
                println!(
                    "principal: {} (gRPC over mTLS, certificates from the GitOpsCluster), {} agents connected in managed mode",
                    af.principal.local_addr(),
                    af.agents.len()
                );
                let proxy_kubeconfig = match &af.proxy_kubeconfig {
                    Some(yaml) => {
                        let agent = &af.agents[0].0;
                        let path = kubeconfig.with_file_name(format!(
                            "argocd-pull-demo-{agent}-resource-proxy.kubeconfig"
                        ));
                        std::fs::write(&path, yaml).with_context(|| {
                            format!(
                                "writing the resource-proxy kubeconfig to {}",
                                path.display()
                            )
                        })?;
                        println!(
                            "resource proxy: kubectl --kubeconfig {} get applications -n argocd  ({agent}'s cluster, through the principal and the agent)",
                            path.display()
                        );
                        Some(path)
                    }
                    None => None,
                };
                Parts::Addon {
                    fleet: Box::new(af),
                    proxy_kubeconfig,
                }
            }
            DemoModel::Autonomous => {
                let mode = Mode::Autonomous;
                let agents = fleet
                    .cluster_names()
                    .into_iter()
                    .filter_map(|n| fleet.cluster(&n).map(|c| (n, c.client())))
                    .collect();
                println!("principal and agents: generating a throwaway PKI and JWT key…");
                let local = argocd_pull_agent::start_local(hub, agents, mode)
                    .await
                    .context("starting the principal and the agents")?;
                local.wait_connected(SETUP_TIMEOUT).await?;
                println!(
                    "principal: {} (gRPC over mTLS), {} agents connected in {} mode",
                    local.principal.local_addr(),
                    local.agents.len(),
                    mode.as_str()
                );
                let proxy_kubeconfig = match local.agents.first() {
                    Some((agent, _)) => match local.resource_proxy_kubeconfig(agent)? {
                        Some(yaml) => {
                            let path = kubeconfig.with_file_name(format!(
                                "argocd-pull-demo-{agent}-resource-proxy.kubeconfig"
                            ));
                            std::fs::write(&path, yaml).with_context(|| {
                                format!(
                                    "writing the resource-proxy kubeconfig to {}",
                                    path.display()
                                )
                            })?;
                            println!(
                                "resource proxy: kubectl --kubeconfig {} get applications -n argocd  ({agent}'s cluster, through the principal and the agent)",
                                path.display()
                            );
                            Some(path)
                        }
                        None => None,
                    },
                    None => None,
                };
                Parts::Agents {
                    local,
                    proxy_kubeconfig,
                }
            }
        };
        Ok(Demo {
            args,
            fleet,
            server,
            kubeconfig,
            parts,
            t0,
        })
    }

    /// A client of the hub.
    pub fn hub_client(&self) -> Client {
        self.fleet.hub_client()
    }

    /// The fleet (clusters, their clients).
    pub fn fleet(&self) -> &Fleet {
        &self.fleet
    }

    /// Agent models: the kubeconfig that reaches the first agent's cluster through the
    /// principal's resource proxy (what Argo CD on the hub uses).
    pub fn resource_proxy_kubeconfig(&self) -> Option<&Path> {
        match &self.parts {
            Parts::Agents {
                proxy_kubeconfig, ..
            }
            | Parts::Addon {
                proxy_kubeconfig, ..
            } => proxy_kubeconfig.as_deref(),
            Parts::Basic { .. } => None,
        }
    }

    /// Where the hub's kubeconfig was written.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The hub's HTTP address.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Applies the workload, follows it until it converged or `--timeout` passed, prints the
    /// final tables.
    pub async fn drive(&self) -> anyhow::Result<Outcome> {
        let expectation = match self.args.model {
            DemoModel::Basic => self.apply_basic().await?,
            DemoModel::Agent => self.apply_agent().await?,
            DemoModel::Autonomous => self.apply_autonomous().await?,
        };
        let (converged, state) = self.follow(&expectation).await;
        let elapsed = self.t0.elapsed();
        println!();
        state::print_tables(&state);
        println!();
        println!("{}", state.summary(&expectation, elapsed));
        if converged {
            println!("{}", done_message(&expectation, &state, elapsed));
        } else {
            eprintln!(
                "timed out after {:?}: {}",
                self.args.timeout,
                state.missing(&expectation)
            );
        }
        Ok(Outcome {
            converged,
            state,
            expectation,
            elapsed,
        })
    }

    /// Basic model: Argo CD server Service, GitOpsCluster and its Placement, then per app a
    /// Placement, an ApplicationSet and its generated Applications.
    async fn apply_basic(&self) -> anyhow::Result<Expectation> {
        let hub = self.hub_client();
        let ns = workload::ARGO_NAMESPACE;
        let pp = PatchParams::apply("argocd-pull-demo").force();
        let apply = |api: Api<kube::api::DynamicObject>, obj: Value| {
            let pp = pp.clone();
            async move {
                let name = obj["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                api.patch(&name, &pp, &Patch::Apply(&obj))
                    .await
                    .with_context(|| format!("applying {} {name}", obj["kind"]))
            }
        };
        let dynamic = |obj: &Value| -> anyhow::Result<Api<kube::api::DynamicObject>> {
            let tm: kube::core::TypeMeta = serde_json::from_value(obj.clone())?;
            let gvk = kube::api::GroupVersionKind::try_from(&tm)?;
            let plural = match gvk.kind.as_str() {
                "Service" => "services".to_string(),
                k => format!("{}s", k.to_lowercase()),
            };
            let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, &plural);
            Ok(Api::namespaced_with(hub.clone(), ns, &ar))
        };
        for obj in [
            workload::argocd_server_service(),
            workload::placement(workload::GITOPS_PLACEMENT),
            workload::gitopscluster(workload::GITOPS_PLACEMENT),
        ] {
            apply(dynamic(&obj)?, obj).await?;
        }
        println!(
            "gitopscluster {ns}/{}: clusters of placement {} → Argo CD cluster secrets in {ns}",
            workload::GITOPSCLUSTER,
            workload::GITOPS_PLACEMENT
        );

        let appsets: Api<ApplicationSet> = Api::namespaced(hub.clone(), ns);
        let apps: Api<Application> = Api::namespaced(hub.clone(), ns);
        let decisions: Api<PlacementDecision> = Api::namespaced(hub.clone(), ns);
        let mut exp = Expectation {
            gitopscluster: true,
            clusters: self.args.clusters,
            ..Default::default()
        };
        for i in 0..self.args.apps {
            let app = workload::app_name(i);
            let pname = workload::placement_name(&app);
            let placement = workload::placement(&pname);
            apply(dynamic(&placement)?, placement).await?;
            let appset = appsets
                .patch(
                    &workload::appset_name(&app),
                    &pp,
                    &Patch::Apply(application_set(&app)),
                )
                .await?;
            // The clusterDecisionResource generator: the PlacementDecisions' cluster names.
            let of_placement =
                |d: &PlacementDecision| d.labels().get(names::LABEL_PLACEMENT) == Some(&pname);
            let want = self.args.clusters;
            let ds = wait_for_list(&decisions, SETUP_TIMEOUT, |ds: &[PlacementDecision]| {
                ds.iter()
                    .filter(|d| of_placement(d))
                    .map(|d| d.cluster_names().count())
                    .sum::<usize>()
                    == want
            })
            .await
            .with_context(|| format!("waiting for the PlacementDecisions of {pname}"))?;
            let mut clusters: Vec<String> = ds
                .iter()
                .filter(|d| of_placement(d))
                .flat_map(|d| d.cluster_names().map(str::to_string).collect::<Vec<_>>())
                .collect();
            clusters.sort();
            println!(
                "applicationset {}: placement {pname} selected {} clusters",
                appset.name_any(),
                clusters.len()
            );
            let fail_on = (self.args.with_failure && i == 0)
                .then(|| clusters.last().cloned())
                .flatten();
            for c in &clusters {
                let mut a = generate_application(&appset, c)?;
                let name = a["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if fail_on.as_ref() == Some(c) {
                    workload::make_failing(&mut a);
                    println!("  {name} on {c} is made to fail its sync (--with-failure)");
                    exp.failing = Some(format!("{ns}/{name}"));
                    exp.failing_cluster = Some(c.clone());
                    exp.failing_appset = Some(appset.name_any());
                }
                apps.patch(&name, &pp, &Patch::Apply(a)).await?;
                exp.applications += 1;
            }
            exp.appsets.push(appset.name_any());
        }
        Ok(exp)
    }

    /// Agent model (managed): Applications in each agent's namespace on the hub.
    async fn apply_agent(&self) -> anyhow::Result<Expectation> {
        let hub = self.hub_client();
        let pp = PatchParams::apply("argocd-pull-demo").force();
        let mut exp = Expectation {
            clusters: self.args.clusters,
            ..Default::default()
        };
        let clusters = self.fleet.cluster_names();
        for (ci, c) in clusters.iter().enumerate() {
            let apps: Api<Application> = Api::namespaced(hub.clone(), c);
            for i in 0..self.args.apps {
                let name = workload::app_name(i);
                let mut a = workload::application(c, &name);
                if self.args.with_failure && i == 0 && ci + 1 == clusters.len() {
                    workload::make_failing(&mut a);
                    println!("  {c}/{name} is made to fail its sync (--with-failure)");
                    exp.failing = Some(format!("{c}/{name}"));
                }
                apps.patch(&name, &pp, &Patch::Apply(a))
                    .await
                    .with_context(|| format!("creating Application {c}/{name} on the hub"))?;
                exp.applications += 1;
            }
        }
        println!(
            "applications: {} created on the hub in the agents' namespaces ({} per cluster)",
            exp.applications, self.args.apps
        );
        Ok(exp)
    }

    /// Autonomous model: Applications created on the clusters, appearing on the hub in each
    /// agent's namespace.
    async fn apply_autonomous(&self) -> anyhow::Result<Expectation> {
        let ns = workload::ARGO_NAMESPACE;
        let pp = PatchParams::apply("argocd-pull-demo").force();
        let mut exp = Expectation {
            clusters: self.args.clusters,
            ..Default::default()
        };
        let clusters = self.fleet.cluster_names();
        for (ci, c) in clusters.iter().enumerate() {
            let cluster = self
                .fleet
                .cluster(c)
                .with_context(|| format!("cluster {c} vanished"))?;
            let apps: Api<Application> = Api::namespaced(cluster.client(), ns);
            for i in 0..self.args.apps {
                let name = workload::app_name(i);
                let mut a = workload::application(ns, &name);
                if self.args.with_failure && i == 0 && ci + 1 == clusters.len() {
                    workload::make_failing(&mut a);
                    println!("  {name} on {c} is made to fail its sync (--with-failure)");
                    exp.failing = Some(format!("{c}/{name}"));
                }
                apps.patch(&name, &pp, &Patch::Apply(a))
                    .await
                    .with_context(|| format!("creating Application {ns}/{name} on {c}"))?;
                exp.applications += 1;
            }
        }
        println!(
            "applications: {} created on the clusters ({} per cluster), the agents report them to the hub",
            exp.applications, self.args.apps
        );
        Ok(exp)
    }

    /// Follows the hub until `exp` is reached (true) or the timeout (false).
    async fn follow(&self, exp: &Expectation) -> (bool, State) {
        let hub = self.hub_client();
        let updates = updates(hub, exp.gitopscluster);
        futures::pin_mut!(updates);
        let t0 = self.t0;
        let verbose = exp.applications <= 50;
        let mut st = State::default();
        let deadline = tokio::time::Instant::now() + self.args.timeout;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let done = loop {
            if st.converged(exp) {
                break true;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break false,
                _ = tick.tick(), if !verbose => println!("{}", st.summary(exp, t0.elapsed())),
                u = updates.next() => {
                    let Some(u) = u else { break false };
                    let at = format!("[{:>5.1}s]", t0.elapsed().as_secs_f64());
                    match u {
                        Update::App(key, Some(r)) => {
                            let changed = st.apps.get(&key).is_none_or(|o| o.sync != r.sync || o.health != r.health);
                            if changed && verbose {
                                println!("{at} {:<10} {:<20} sync={:<10} health={}", r.cluster, r.app, r.sync, r.health);
                            }
                            st.apps.insert(key, r);
                        }
                        Update::App(key, None) => { st.apps.remove(&key); }
                        Update::GitOps(g) => {
                            let changed = st.gitopscluster.as_ref().map(|o| &o.phase) != g.as_ref().map(|n| &n.phase);
                            if changed && verbose && let Some(g) = g.as_ref().filter(|g| g.phase != "-") {
                                println!("{at} gitopscluster {} phase={}: {}", g.name, g.phase, g.message);
                            }
                            st.gitopscluster = g;
                        }
                        Update::ClusterSecret(name, present) => {
                            if present {
                                st.cluster_secrets.insert(name);
                            } else {
                                st.cluster_secrets.remove(&name);
                            }
                        }
                        Update::Report(name, Some(r)) => {
                            let changed = st.reports.get(&name).is_none_or(|o| o.summary != r.summary);
                            if changed && verbose {
                                let s = &r.summary;
                                println!("{at} report {:<24} clusters={} synced={} healthy={} progressing={}", r.name, s.clusters, s.synced, s.healthy, s.in_progress);
                            }
                            st.reports.insert(name, r);
                        }
                        Update::Report(name, None) => { st.reports.remove(&name); }
                    }
                }
            }
        };
        (done, st)
    }

    /// Stops everything this demo started.
    pub async fn shutdown(self) {
        match self.parts {
            Parts::Basic {
                controllers,
                gitops,
            } => {
                gitops.shutdown().await;
                controllers.shutdown().await;
            }
            Parts::Agents { local, .. } => local.shutdown().await,
            Parts::Addon { fleet, .. } => fleet.shutdown().await,
        }
        self.server.shutdown().await;
        self.fleet.shutdown().await;
    }

    fn print_explore_hints(&self) {
        let kc = self.kubeconfig.display();
        println!();
        println!("The hub keeps running. Explore it with:");
        println!("  kubectl --kubeconfig {kc} get applications -A");
        match self.args.model {
            DemoModel::Basic => {
                println!("  kubectl --kubeconfig {kc} get manifestworks -A");
                println!("  kubectl --kubeconfig {kc} get gitopsclusters -A");
                println!(
                    "  kubectl --kubeconfig {kc} get multiclusterapplicationsetreports -A -o yaml"
                );
                println!(
                    "  kubectl --kubeconfig {kc} get secrets -n argocd -l {}=cluster",
                    names::LABEL_ARGOCD_SECRET_TYPE
                );
            }
            DemoModel::Agent => {
                println!(
                    "  kubectl --kubeconfig {kc} get gitopscluster {} -n argocd -o yaml   # the agents' set-up",
                    addon::GITOPSCLUSTER
                );
                println!(
                    "  kubectl --kubeconfig {kc} get secrets -n argocd   # its PKI and cluster secrets"
                );
                println!(
                    "  kubectl --kubeconfig {kc} patch application -n {} {} --type merge -p '{{\"spec\":{{\"source\":{{\"targetRevision\":\"v2\"}}}}}}'",
                    self.fleet
                        .cluster_names()
                        .first()
                        .cloned()
                        .unwrap_or_default(),
                    workload::app_name(0)
                );
            }
            DemoModel::Autonomous => {}
        }
        if let Some(p) = self.resource_proxy_kubeconfig() {
            println!(
                "  kubectl --kubeconfig {} get applications -n argocd   # a managed cluster, through the resource proxy",
                p.display()
            );
        }
        println!("Press Ctrl-C to stop.");
    }
}

/// The last line of a converged run.
fn done_message(exp: &Expectation, state: &State, elapsed: Duration) -> String {
    let plural = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let mut out = match &exp.failing {
        None => format!(
            "all {} Synced and Healthy on {}",
            plural(exp.applications, "application"),
            plural(exp.clusters, "cluster")
        ),
        Some(f) => format!(
            "{} Synced and Healthy on {}, {f} Degraded as asked (--with-failure)",
            plural(exp.applications - 1, "application"),
            plural(exp.clusters, "cluster")
        ),
    };
    if exp.gitopscluster {
        out.push_str(&format!(
            "; GitOpsCluster successful with {}; {} complete",
            plural(state.cluster_secrets.len(), "cluster secret"),
            plural(exp.appsets.len(), "ApplicationSet report")
        ));
    }
    out.push_str(&format!(" ({:.1}s)", elapsed.as_secs_f64()));
    out
}

/// A change seen on the hub.
enum Update {
    App(String, Option<AppRow>),
    GitOps(Option<GitOpsClusterRow>),
    /// An Argo CD cluster Secret in the Argo CD namespace appeared (true) or went.
    ClusterSecret(String, bool),
    Report(String, Option<ReportRow>),
}

/// The hub's Applications (all namespaces) and, when `gitops`, the demo's GitOpsCluster and the
/// ApplicationSet reports, as one stream of updates.
fn updates(hub: Client, gitops: bool) -> impl Stream<Item = Update> + Send {
    fn events<K, T>(
        api: Api<K>,
        cfg: watcher::Config,
        f: impl Fn(K, bool) -> T + Send + 'static,
    ) -> futures::stream::BoxStream<'static, T>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
        T: Send + 'static,
    {
        watcher::watcher(api, cfg)
            .filter_map(move |ev| {
                let out = match ev {
                    Ok(Event::Apply(o)) | Ok(Event::InitApply(o)) => Some(f(o, true)),
                    Ok(Event::Delete(o)) => Some(f(o, false)),
                    _ => None,
                };
                futures::future::ready(out)
            })
            .boxed()
    }
    let mut streams = vec![events(
        Api::<Application>::all(hub.clone()),
        watcher::Config::default(),
        |a, present| {
            let r = AppRow::from_application(&a);
            Update::App(r.key(), present.then_some(r))
        },
    )];
    if gitops {
        streams.push(events(
            Api::<GitOpsCluster>::namespaced(hub.clone(), workload::ARGO_NAMESPACE),
            watcher::Config::default()
                .fields(&format!("metadata.name={}", workload::GITOPSCLUSTER)),
            |g, present| Update::GitOps(present.then(|| GitOpsClusterRow::from_object(&g))),
        ));
        streams.push(events(
            Api::<kube::core::PartialObjectMeta<Secret>>::namespaced(
                hub.clone(),
                workload::ARGO_NAMESPACE,
            ),
            watcher::Config::default()
                .labels(&format!("{}=cluster", names::LABEL_ARGOCD_SECRET_TYPE)),
            |s, present| Update::ClusterSecret(s.name_any(), present),
        ));
        streams.push(events(
            Api::<MulticlusterApplicationSetReport>::namespaced(hub, workload::ARGO_NAMESPACE),
            watcher::Config::default(),
            |r, present| Update::Report(r.name_any(), present.then(|| ReportRow::from_object(&r))),
        ));
    }
    futures::stream::select_all(streams)
}

/// Runs the demo: exit code 0 when everything converged, 1 on timeout, 2 when the run failed
/// after the start.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    // SIGTERM as well as Ctrl-C, from the start: a process manager stops the demo gracefully
    // whether it is still converging or keeping the hub up
    let stop = argocd_pull_ops::shutdown::on_signal();
    let keep_running = args.keep_running;
    let demo = Demo::start(args).await?;
    let driven = tokio::select! {
        r = demo.drive() => Some(r),
        _ = stop.cancelled() => None,
    };
    let stopped_early = driven.is_none();
    let code = match driven {
        Some(Ok(o)) if o.converged => ExitCode::SUCCESS,
        Some(Ok(_)) => ExitCode::from(1),
        Some(Err(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        // stopped before it converged: not a failure of the product
        None => ExitCode::SUCCESS,
    };
    if keep_running && !stopped_early {
        demo.print_explore_hints();
        stop.cancelled().await;
    }
    const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(8);
    if tokio::time::timeout(STOP_WITHIN, demo.shutdown())
        .await
        .is_err()
    {
        eprintln!("warning: the demo did not stop within {STOP_WITHIN:?}; exiting anyway");
    }
    Ok(code)
}
