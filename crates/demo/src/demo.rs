//! A started demo: the fleet, its hub served over HTTP, the model's components (controllers, or
//! the principal and its agents), and driving a run on it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use argocd_pull_agent::LocalDeployment;
use argocd_pull_agent_core::Mode;
use argocd_pull_api::names;
use argocd_pull_sim::{ArgoSimConfig, Fleet, FleetConfig};
use kube::Client;

use crate::addon;
use crate::apply::{apply_agent, apply_autonomous, apply_basic};
use crate::args::{DemoArgs, DemoModel, SETUP_TIMEOUT};
use crate::progress::{done_message, follow};
use crate::state::{self, Expectation, State};
use crate::workload;

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
            DemoModel::Basic => apply_basic(&self.fleet, &self.args).await?,
            DemoModel::Agent => apply_agent(&self.fleet, &self.args).await?,
            DemoModel::Autonomous => apply_autonomous(&self.fleet, &self.args).await?,
        };
        let (converged, state) =
            follow(self.hub_client(), &expectation, self.t0, self.args.timeout).await;
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

    pub(crate) fn print_explore_hints(&self) {
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
