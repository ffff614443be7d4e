//! Applying each model's workload the way a user (or the ApplicationSet controller) would, and
//! what the run is then expected to reach.

use anyhow::Context as _;
use argocd_pull_api::argocd::{Application, ApplicationSet};
use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::PlacementDecision;
use argocd_pull_sim::Fleet;
use argocd_pull_sim::wait::wait_for_list;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::args::{DemoArgs, SETUP_TIMEOUT};
use crate::state::Expectation;
use crate::workload::{self, application_set, generate_application};

/// Basic model: Argo CD server Service, GitOpsCluster and its Placement, then per app a
/// Placement, an ApplicationSet and its generated Applications.
pub(crate) async fn apply_basic(fleet: &Fleet, args: &DemoArgs) -> anyhow::Result<Expectation> {
    let hub = fleet.hub_client();
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
        clusters: args.clusters,
        ..Default::default()
    };
    for i in 0..args.apps {
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
        let want = args.clusters;
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
        let fail_on = (args.with_failure && i == 0)
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
pub(crate) async fn apply_agent(fleet: &Fleet, args: &DemoArgs) -> anyhow::Result<Expectation> {
    let hub = fleet.hub_client();
    let pp = PatchParams::apply("argocd-pull-demo").force();
    let mut exp = Expectation {
        clusters: args.clusters,
        ..Default::default()
    };
    let clusters = fleet.cluster_names();
    for (ci, c) in clusters.iter().enumerate() {
        let apps: Api<Application> = Api::namespaced(hub.clone(), c);
        for i in 0..args.apps {
            let name = workload::app_name(i);
            let mut a = workload::application(c, &name);
            if args.with_failure && i == 0 && ci + 1 == clusters.len() {
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
        exp.applications, args.apps
    );
    Ok(exp)
}

/// Autonomous model: Applications created on the clusters, appearing on the hub in each
/// agent's namespace.
pub(crate) async fn apply_autonomous(
    fleet: &Fleet,
    args: &DemoArgs,
) -> anyhow::Result<Expectation> {
    let ns = workload::ARGO_NAMESPACE;
    let pp = PatchParams::apply("argocd-pull-demo").force();
    let mut exp = Expectation {
        clusters: args.clusters,
        ..Default::default()
    };
    let clusters = fleet.cluster_names();
    for (ci, c) in clusters.iter().enumerate() {
        let cluster = fleet
            .cluster(c)
            .with_context(|| format!("cluster {c} vanished"))?;
        let apps: Api<Application> = Api::namespaced(cluster.client(), ns);
        for i in 0..args.apps {
            let name = workload::app_name(i);
            let mut a = workload::application(ns, &name);
            if args.with_failure && i == 0 && ci + 1 == clusters.len() {
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
        exp.applications, args.apps
    );
    Ok(exp)
}
