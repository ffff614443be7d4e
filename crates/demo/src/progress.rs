//! Following the hub while the run converges: one stream of changes to the Applications, the
//! GitOpsCluster, its cluster secrets and the ApplicationSet reports, the progress lines printed
//! as they come, and the last line of a converged run.

use std::time::{Duration, Instant};

use argocd_pull_api::argocd::Application;
use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};

use crate::state::{AppRow, Expectation, GitOpsClusterRow, ReportRow, State};
use crate::workload;

/// Follows the hub until `exp` is reached (true) or the timeout (false).
pub(crate) async fn follow(
    hub: Client,
    exp: &Expectation,
    t0: Instant,
    timeout: Duration,
) -> (bool, State) {
    let updates = updates(hub, exp.gitopscluster);
    futures::pin_mut!(updates);
    let verbose = exp.applications <= 50;
    let mut st = State::default();
    let deadline = tokio::time::Instant::now() + timeout;
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

/// The last line of a converged run.
pub(crate) fn done_message(exp: &Expectation, state: &State, elapsed: Duration) -> String {
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
