//! `argocd-pull demo`: the pull model end to end with no cluster at all.
//!
//! Starts a simulated OCM fleet ([`argocd_pull_sim::Fleet`]) whose hub is also served over HTTP
//! (a kubeconfig is written), runs the real hub controllers on it, applies a sample workload the
//! way an ApplicationSet with a `clusterDecisionResource` generator would (a Placement, the
//! `acm-placement` ConfigMap, an ApplicationSet per app, and one generated Application per
//! selected cluster per app, owned by its ApplicationSet), prints progress, and ends with a table
//! of the hub Applications' sync and health.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use argocd_pull_api::argocd::{Application, ApplicationSet};
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::{Placement, PlacementDecision};
use argocd_pull_sim::wait::wait_for_list;
use argocd_pull_sim::{ArgoSimConfig, Fleet, FleetConfig};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

/// The delivery model the demo runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum DemoModel {
    /// ManifestWorks wrapping Applications; status through ManifestWork feedback.
    Basic,
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
    /// How long to wait for every Application to be Synced and Healthy (e.g. 90s, 2m, 500ms).
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

const APP_NAMES: &[&str] = &[
    "guestbook",
    "helm-guestbook",
    "kustomize-guestbook",
    "jsonnet-guestbook",
    "sock-shop",
];

fn app_name(i: usize) -> String {
    APP_NAMES
        .get(i)
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("app{}", i + 1))
}

fn placement_name(app: &str) -> String {
    format!("{app}-app-placement")
}

/// The ApplicationSet of `app` (the spec's "ApplicationSet shape").
pub fn application_set(app: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": format!("{app}-app"), "namespace": "argocd"},
        "spec": {
            "generators": [{"clusterDecisionResource": {
                "configMapRef": "acm-placement",
                "labelSelector": {"matchLabels": {names::LABEL_PLACEMENT: placement_name(app)}},
                "requeueAfterSeconds": 180,
            }}],
            "template": {
                "metadata": {
                    "name": format!("{{{{name}}}}-{app}-app"),
                    "labels": {names::LABEL_PULL_TO_OCM: "true"},
                    "annotations": {
                        names::ANNOTATION_SKIP_RECONCILE: "true",
                        names::ANNOTATION_OCM_MANAGED_CLUSTER: "{{name}}",
                        names::ANNOTATION_OCM_MANAGED_CLUSTER_APP_NAMESPACE: "argocd",
                    },
                },
                "spec": {
                    "project": "default",
                    "source": {
                        "repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                        "targetRevision": "HEAD",
                        "path": app,
                    },
                    "destination": {"server": names::IN_CLUSTER_SERVER, "namespace": app},
                    "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]},
                },
            },
        },
    })
}

/// What the ApplicationSet controller would generate for `cluster` (template rendered with
/// `{{name}}` = the cluster, owned by the ApplicationSet).
pub fn generate_application(appset: &ApplicationSet, cluster: &str) -> anyhow::Result<Value> {
    let template = appset
        .spec
        .template
        .as_ref()
        .context("ApplicationSet without a template")?;
    let rendered = template
        .to_string()
        .replace("{{name}}", cluster)
        .replace("{{clusterName}}", cluster);
    let mut app: Value = serde_json::from_str(&rendered)?;
    app["apiVersion"] = json!("argoproj.io/v1alpha1");
    app["kind"] = json!("Application");
    app["metadata"]["namespace"] = json!(appset.namespace().unwrap_or_else(|| "argocd".into()));
    let owner = appset
        .controller_owner_ref(&())
        .context("ApplicationSet without a uid")?;
    app["metadata"]["ownerReferences"] = json!([owner]);
    Ok(app)
}

#[derive(Clone, Debug, Default, PartialEq)]
struct AppRow {
    cluster: String,
    app: String,
    sync: String,
    health: String,
    revision: String,
}

fn row(a: &Application) -> AppRow {
    let cluster = a
        .annotations()
        .get(names::ANNOTATION_OCM_MANAGED_CLUSTER)
        .cloned()
        .unwrap_or_default();
    let owner = a.owning_application_set().unwrap_or("").to_string();
    AppRow {
        cluster,
        app: owner.strip_suffix("-app").unwrap_or(&owner).to_string(),
        sync: a.sync_status().unwrap_or("-").to_string(),
        health: a.health_status().unwrap_or("-").to_string(),
        revision: a
            .status
            .as_ref()
            .and_then(|s| s.sync.as_ref())
            .and_then(|s| s.revision.as_deref())
            .map(|r| r.chars().take(7).collect())
            .unwrap_or_else(|| "-".into()),
    }
}

fn converged(r: &AppRow) -> bool {
    r.sync == "Synced" && r.health == "Healthy"
}

fn print_table(rows: &BTreeMap<String, AppRow>) {
    let w = |f: fn(&AppRow) -> &str, title: &str| {
        rows.values()
            .map(|r| f(r).len())
            .chain([title.len()])
            .max()
            .unwrap_or(0)
    };
    let (wc, wa, ws, wh) = (
        w(|r| &r.cluster, "CLUSTER"),
        w(|r| &r.app, "APP"),
        w(|r| &r.sync, "SYNC"),
        w(|r| &r.health, "HEALTH"),
    );
    println!(
        "{:wc$}  {:wa$}  {:ws$}  {:wh$}  REVISION",
        "CLUSTER", "APP", "SYNC", "HEALTH"
    );
    let mut sorted: Vec<&AppRow> = rows.values().collect();
    sorted.sort_by(|a, b| (&a.cluster, &a.app).cmp(&(&b.cluster, &b.app)));
    for r in sorted {
        println!(
            "{:wc$}  {:wa$}  {:ws$}  {:wh$}  {}",
            r.cluster, r.app, r.sync, r.health, r.revision
        );
    }
}

fn summary(rows: &BTreeMap<String, AppRow>, expected: usize, elapsed: Duration) -> String {
    let synced = rows.values().filter(|r| r.sync == "Synced").count();
    let healthy = rows.values().filter(|r| r.health == "Healthy").count();
    let progressing = rows.values().filter(|r| r.health == "Progressing").count();
    let degraded = rows.values().filter(|r| r.health == "Degraded").count();
    format!(
        "[{:>5.1}s] {}/{expected} applications, {synced} synced, {healthy} healthy, {progressing} progressing, {degraded} degraded",
        elapsed.as_secs_f64(),
        rows.len()
    )
}

/// Runs the demo; exit code 0 when every Application converged, 1 on timeout.
pub async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    match args.model {
        DemoModel::Basic => {}
    }
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
    let fleet = Fleet::start(cfg)
        .await
        .context("starting the simulated fleet")?;
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
        "hub: {} ({} managed clusters, kubeconfig {})",
        server.url(),
        args.clusters,
        kubeconfig.display()
    );

    let hub = fleet.hub_client();
    let controllers = argocd_pull_controller::start(hub.clone(), Default::default())
        .await
        .context("starting the hub controllers")?;
    controllers.wait_ready().await;
    println!("controllers: propagation, status, cleanup running");

    let result = drive(&fleet, &args, t0).await;
    let code = match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    };

    if args.keep_running {
        println!();
        println!("The hub keeps running. Explore it with:");
        println!(
            "  kubectl --kubeconfig {} get applications -A",
            kubeconfig.display()
        );
        println!(
            "  kubectl --kubeconfig {} get manifestworks -A",
            kubeconfig.display()
        );
        println!("Press Ctrl-C to stop.");
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
    }
    controllers.shutdown().await;
    server.shutdown().await;
    fleet.shutdown().await;
    Ok(code)
}

/// Applies the workload and follows it; Ok(true) when converged.
async fn drive(fleet: &Fleet, args: &DemoArgs, t0: Instant) -> anyhow::Result<bool> {
    let hub = fleet.hub_client();
    let pp = PatchParams::apply("argocd-pull-demo").force();
    let cms: Api<ConfigMap> = Api::namespaced(hub.clone(), "argocd");
    cms.patch(
        "acm-placement",
        &pp,
        &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "acm-placement", "namespace": "argocd"},
            "data": {"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "placementdecisions",
                     "statusListKey": "decisions", "matchKey": "clusterName"},
        })),
    )
    .await?;
    let placements: Api<Placement> = Api::namespaced(hub.clone(), "argocd");
    let appsets: Api<ApplicationSet> = Api::namespaced(hub.clone(), "argocd");
    let apps: Api<Application> = Api::namespaced(hub.clone(), "argocd");
    let decisions: Api<PlacementDecision> = Api::namespaced(hub.clone(), "argocd");

    // Follow the hub Applications from the start.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, Option<AppRow>)>();
    let follow = tokio::spawn({
        let apps = apps.clone();
        async move {
            let stream = watcher::watcher(apps, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(Event::Apply(a)) | Ok(Event::InitApply(a)) => {
                        let _ = tx.send((a.name_any(), Some(row(&a))));
                    }
                    Ok(Event::Delete(a)) => {
                        let _ = tx.send((a.name_any(), None));
                    }
                    _ => {}
                }
            }
        }
    });

    let mut expected = 0;
    for i in 0..args.apps {
        let app = app_name(i);
        let placement = json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": placement_name(&app), "namespace": "argocd"},
            "spec": {"predicates": [{"requiredClusterSelector": {"labelSelector": {
                "matchExpressions": [{"key": "vendor", "operator": "In", "values": ["Kubernetes"]}]}}}]},
        });
        placements
            .patch(&placement_name(&app), &pp, &Patch::Apply(placement))
            .await?;
        let appset = appsets
            .patch(
                &format!("{app}-app"),
                &pp,
                &Patch::Apply(application_set(&app)),
            )
            .await?;
        // The clusterDecisionResource generator: the PlacementDecisions' cluster names.
        let selector = format!("{}={}", names::LABEL_PLACEMENT, placement_name(&app));
        let want = fleet.cluster_names().len();
        let ds = wait_for_list(
            &decisions,
            Duration::from_secs(30),
            |ds: &[PlacementDecision]| {
                ds.iter()
                    .filter(|d| {
                        d.labels().get(names::LABEL_PLACEMENT) == Some(&placement_name(&app))
                    })
                    .map(|d| d.cluster_names().count())
                    .sum::<usize>()
                    == want
            },
        )
        .await
        .with_context(|| format!("waiting for the PlacementDecisions of {selector}"))?;
        let mut clusters: Vec<String> = ds
            .iter()
            .filter(|d| d.labels().get(names::LABEL_PLACEMENT) == Some(&placement_name(&app)))
            .flat_map(|d| d.cluster_names().map(str::to_string).collect::<Vec<_>>())
            .collect();
        clusters.sort();
        println!(
            "applicationset {app}-app: placement {} selected {} clusters",
            placement_name(&app),
            clusters.len()
        );
        for c in &clusters {
            let a = generate_application(&appset, c)?;
            let name = a["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            apps.patch(&name, &pp, &Patch::Apply(a)).await?;
            expected += 1;
        }
    }
    let _ = apps.list(&ListParams::default().limit(1)).await?;

    let verbose = expected <= 50;
    let mut rows: BTreeMap<String, AppRow> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + args.timeout;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let done = loop {
        if rows.len() == expected && rows.values().all(converged) {
            break true;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => break false,
            _ = tick.tick(), if !verbose => println!("{}", summary(&rows, expected, t0.elapsed())),
            ev = rx.recv() => {
                let Some((name, r)) = ev else { break false };
                match r {
                    Some(r) => {
                        let changed = rows.get(&name).is_none_or(|old| old.sync != r.sync || old.health != r.health);
                        if changed && verbose {
                            println!("[{:>5.1}s] {:<28} {:<10} sync={:<10} health={}", t0.elapsed().as_secs_f64(), name, r.cluster, r.sync, r.health);
                        }
                        rows.insert(name, r);
                    }
                    None => { rows.remove(&name); }
                }
            }
        }
    };
    follow.abort();
    println!();
    print_table(&rows);
    println!();
    println!("{}", summary(&rows, expected, t0.elapsed()));
    if done {
        println!(
            "all {expected} applications Synced and Healthy on {} clusters in {:.1}s",
            args.clusters,
            t0.elapsed().as_secs_f64()
        );
    } else {
        let stuck: Vec<&String> = rows
            .iter()
            .filter(|(_, r)| !converged(r))
            .map(|(n, _)| n)
            .take(10)
            .collect();
        eprintln!(
            "timed out after {:?}: {} of {expected} applications converged; not converged: {:?}{}",
            args.timeout,
            rows.values().filter(|r| converged(r)).count(),
            stuck,
            if rows.len() < expected {
                format!(" ({} not created yet)", expected - rows.len())
            } else {
                String::new()
            }
        );
    }
    Ok(done)
}
