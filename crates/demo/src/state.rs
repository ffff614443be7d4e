//! What the demo follows on the hub (Applications, the GitOpsCluster, the ApplicationSet
//! reports), when that counts as converged, and how it is printed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use argocd_pull_api::argocd::Application;
use argocd_pull_api::gitops::GitOpsCluster;
use argocd_pull_api::names;
use argocd_pull_api::report::{MulticlusterApplicationSetReport, ReportSummary};
use kube::ResourceExt;

/// One hub Application.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AppRow {
    pub namespace: String,
    pub name: String,
    /// The managed cluster it runs on (annotation `ocm-managed-cluster`, else — agent model —
    /// its hub namespace).
    pub cluster: String,
    /// The sample app (its ApplicationSet without `-app`, else its name).
    pub app: String,
    pub sync: String,
    pub health: String,
    /// The synced revision (first 7 characters) or `-`.
    pub revision: String,
}

impl AppRow {
    pub fn from_application(a: &Application) -> AppRow {
        let namespace = a.namespace().unwrap_or_default();
        let cluster = a
            .annotations()
            .get(names::ANNOTATION_OCM_MANAGED_CLUSTER)
            .cloned()
            .unwrap_or_else(|| namespace.clone());
        let app = match a.owning_application_set() {
            Some(set) => set.strip_suffix("-app").unwrap_or(set).to_string(),
            None => a.name_any(),
        };
        AppRow {
            namespace,
            name: a.name_any(),
            cluster,
            app,
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

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    pub fn converged(&self) -> bool {
        self.sync == "Synced" && self.health == "Healthy"
    }

    /// What the demo's deliberately failing app ends as (`--with-failure`).
    pub fn failed_as_asked(&self) -> bool {
        self.health == "Degraded"
    }
}

/// The GitOpsCluster's status and the cluster Secrets it wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GitOpsClusterRow {
    pub namespace: String,
    pub name: String,
    /// `successful`, `failed` or `-` (not reconciled yet).
    pub phase: String,
    pub message: String,
}

impl GitOpsClusterRow {
    pub fn from_object(gc: &GitOpsCluster) -> GitOpsClusterRow {
        let status = gc.status.as_ref();
        GitOpsClusterRow {
            namespace: gc.namespace().unwrap_or_default(),
            name: gc.name_any(),
            phase: status
                .and_then(|s| s.phase.clone())
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "-".into()),
            message: status.and_then(|s| s.message.clone()).unwrap_or_default(),
        }
    }
}

/// An error or warning condition of one cluster in a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportError {
    pub cluster: String,
    pub type_: String,
    pub message: String,
}

/// One MulticlusterApplicationSetReport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportRow {
    pub namespace: String,
    /// The ApplicationSet's name (the report is named after it).
    pub name: String,
    pub summary: ReportSummary,
    pub errors: Vec<ReportError>,
}

impl ReportRow {
    pub fn from_object(r: &MulticlusterApplicationSetReport) -> ReportRow {
        let statuses = r.statuses.clone().unwrap_or_default();
        ReportRow {
            namespace: r.namespace().unwrap_or_default(),
            name: r.name_any(),
            summary: statuses.summary.unwrap_or_default(),
            errors: statuses
                .cluster_conditions
                .iter()
                .flat_map(|c| {
                    c.conditions.iter().map(|k| ReportError {
                        cluster: c.cluster.clone(),
                        type_: k.type_.clone(),
                        message: k.message.clone(),
                    })
                })
                .collect(),
        }
    }

    fn count(v: &str) -> usize {
        v.parse().unwrap_or(0)
    }

    pub fn clusters(&self) -> usize {
        Self::count(&self.summary.clusters)
    }
    pub fn synced(&self) -> usize {
        Self::count(&self.summary.synced)
    }
    pub fn healthy(&self) -> usize {
        Self::count(&self.summary.healthy)
    }
}

/// What a run is expected to reach.
#[derive(Clone, Debug, Default)]
pub struct Expectation {
    /// Hub Applications.
    pub applications: usize,
    /// `namespace/name` of the hub Application made to fail (`--with-failure`).
    pub failing: Option<String>,
    /// The failing Application's cluster and ApplicationSet (basic model).
    pub failing_cluster: Option<String>,
    pub failing_appset: Option<String>,
    /// The GitOpsCluster must reach `successful` (basic model).
    pub gitopscluster: bool,
    /// ApplicationSets whose reports must cover `clusters` clusters.
    pub appsets: Vec<String>,
    pub clusters: usize,
}

/// Everything followed so far.
#[derive(Clone, Debug, Default)]
pub struct State {
    pub apps: BTreeMap<String, AppRow>,
    pub gitopscluster: Option<GitOpsClusterRow>,
    /// Names of the Argo CD cluster Secrets in the Argo CD namespace (basic model).
    pub cluster_secrets: BTreeSet<String>,
    pub reports: BTreeMap<String, ReportRow>,
}

impl State {
    fn app_ok(&self, exp: &Expectation, r: &AppRow) -> bool {
        if exp.failing.as_deref() == Some(r.key().as_str()) {
            r.failed_as_asked()
        } else {
            r.converged()
        }
    }

    /// Applications converged (the failing one failed), ignoring the GitOpsCluster and reports.
    pub fn apps_done(&self, exp: &Expectation) -> bool {
        self.apps.len() == exp.applications && self.apps.values().all(|r| self.app_ok(exp, r))
    }

    /// The GitOpsCluster is `successful` and every cluster has its Secret.
    pub fn gitopscluster_done(&self, exp: &Expectation) -> bool {
        !exp.gitopscluster
            || (self
                .gitopscluster
                .as_ref()
                .is_some_and(|g| g.phase == "successful")
                && self.cluster_secrets.len() == exp.clusters)
    }

    fn report_done(&self, exp: &Expectation, appset: &str) -> bool {
        let Some(r) = self.reports.get(appset) else {
            return false;
        };
        let n = exp.clusters;
        if exp.failing_appset.as_deref() == Some(appset) {
            let cluster = exp.failing_cluster.as_deref().unwrap_or_default();
            r.clusters() == n
                && r.synced() + 1 == n
                && r.healthy() + 1 == n
                && r.errors.iter().any(|e| e.cluster == cluster)
        } else {
            r.clusters() == n && r.synced() == n && r.healthy() == n
        }
    }

    pub fn reports_done(&self, exp: &Expectation) -> bool {
        exp.appsets.iter().all(|a| self.report_done(exp, a))
    }

    pub fn converged(&self, exp: &Expectation) -> bool {
        self.apps_done(exp) && self.gitopscluster_done(exp) && self.reports_done(exp)
    }

    /// One progress line.
    pub fn summary(&self, exp: &Expectation, elapsed: Duration) -> String {
        let count = |f: fn(&AppRow) -> bool| self.apps.values().filter(|r| f(r)).count();
        let mut line = format!(
            "[{:>5.1}s] {}/{} applications, {} synced, {} healthy, {} progressing, {} degraded",
            elapsed.as_secs_f64(),
            self.apps.len(),
            exp.applications,
            count(|r| r.sync == "Synced"),
            count(|r| r.health == "Healthy"),
            count(|r| r.health == "Progressing"),
            count(|r| r.health == "Degraded"),
        );
        if exp.gitopscluster {
            let phase = self
                .gitopscluster
                .as_ref()
                .map(|g| g.phase.as_str())
                .unwrap_or("-");
            line.push_str(&format!(
                "; gitopscluster {phase}, {} cluster secrets",
                self.cluster_secrets.len()
            ));
        }
        if !exp.appsets.is_empty() {
            let done = exp
                .appsets
                .iter()
                .filter(|a| self.report_done(exp, a))
                .count();
            line.push_str(&format!("; {done}/{} reports complete", exp.appsets.len()));
        }
        line
    }

    /// What is still missing (for the timeout message).
    pub fn missing(&self, exp: &Expectation) -> String {
        let mut parts = Vec::new();
        let stuck: Vec<String> = self
            .apps
            .values()
            .filter(|r| !self.app_ok(exp, r))
            .map(AppRow::key)
            .take(10)
            .collect();
        if !stuck.is_empty() {
            parts.push(format!("applications not converged: {stuck:?}"));
        }
        if self.apps.len() < exp.applications {
            parts.push(format!(
                "{} applications not seen yet",
                exp.applications - self.apps.len()
            ));
        }
        if !self.gitopscluster_done(exp) {
            let g = self.gitopscluster.clone().unwrap_or_default();
            parts.push(format!("gitopscluster phase {:?} ({})", g.phase, g.message));
        }
        let reports: Vec<&String> = exp
            .appsets
            .iter()
            .filter(|a| !self.report_done(exp, a))
            .collect();
        if !reports.is_empty() {
            parts.push(format!("reports not complete: {reports:?}"));
        }
        parts.join("; ")
    }
}

/// Prints rows as left-aligned columns (the last one unpadded).
pub fn print_columns(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(c);
            } else {
                out.push_str(&format!("{c:w$}  "));
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// `s` cut to `max` characters (an ellipsis marks the cut).
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The final tables.
pub fn print_tables(state: &State) {
    let mut apps: Vec<&AppRow> = state.apps.values().collect();
    apps.sort_by(|a, b| (&a.cluster, &a.app).cmp(&(&b.cluster, &b.app)));
    let rows: Vec<Vec<String>> = apps
        .iter()
        .map(|r| {
            vec![
                r.cluster.clone(),
                r.app.clone(),
                r.sync.clone(),
                r.health.clone(),
                r.revision.clone(),
            ]
        })
        .collect();
    print_columns(&["CLUSTER", "APP", "SYNC", "HEALTH", "REVISION"], &rows);

    if let Some(g) = &state.gitopscluster {
        println!();
        print_columns(
            &["GITOPSCLUSTER", "PHASE", "CLUSTER SECRETS", "MESSAGE"],
            &[vec![
                format!("{}/{}", g.namespace, g.name),
                g.phase.clone(),
                state.cluster_secrets.len().to_string(),
                shorten(&g.message, 100),
            ]],
        );
    }
    if !state.reports.is_empty() {
        println!();
        let rows: Vec<Vec<String>> = state
            .reports
            .values()
            .map(|r| {
                let s = &r.summary;
                vec![
                    format!("{}/{}", r.namespace, r.name),
                    s.clusters.clone(),
                    s.synced.clone(),
                    s.healthy.clone(),
                    s.not_synced.clone(),
                    s.not_healthy.clone(),
                    s.in_progress.clone(),
                ]
            })
            .collect();
        print_columns(
            &[
                "APPLICATIONSET REPORT",
                "CLUSTERS",
                "SYNCED",
                "HEALTHY",
                "NOT SYNCED",
                "NOT HEALTHY",
                "IN PROGRESS",
            ],
            &rows,
        );
        for r in state.reports.values() {
            for e in &r.errors {
                println!("  {} on {}: {}: {}", r.name, e.cluster, e.type_, e.message);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorten_cuts_on_characters() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcdé", 4), "abc…");
        assert_eq!(shorten("ééééé", 3).chars().count(), 3);
    }

    fn report(clusters: u32, synced: u32, healthy: u32, errors: &[&str]) -> ReportRow {
        ReportRow {
            namespace: "argocd".into(),
            name: "guestbook-app".into(),
            summary: ReportSummary {
                clusters: clusters.to_string(),
                synced: synced.to_string(),
                healthy: healthy.to_string(),
                ..Default::default()
            },
            errors: errors
                .iter()
                .map(|c| ReportError {
                    cluster: (*c).into(),
                    type_: "SyncError".into(),
                    message: "boom".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_report_is_complete_when_it_covers_every_cluster_synced_and_healthy() {
        let exp = Expectation {
            appsets: vec!["guestbook-app".into()],
            clusters: 2,
            ..Default::default()
        };
        let mut st = State::default();
        assert!(!st.reports_done(&exp));
        for (r, done) in [
            (report(1, 1, 1, &[]), false),
            (report(2, 2, 1, &[]), false),
            (report(2, 2, 2, &[]), true),
        ] {
            st.reports.insert("guestbook-app".into(), r);
            assert_eq!(st.reports_done(&exp), done);
        }
    }

    #[test]
    fn with_a_failure_the_report_must_show_it() {
        let exp = Expectation {
            appsets: vec!["guestbook-app".into()],
            clusters: 2,
            failing_cluster: Some("cluster2".into()),
            failing_appset: Some("guestbook-app".into()),
            ..Default::default()
        };
        let mut st = State::default();
        for (r, done) in [
            (report(2, 2, 2, &[]), false),
            (report(2, 1, 1, &[]), false),
            (report(2, 1, 1, &["cluster1"]), false),
            (report(2, 1, 1, &["cluster2"]), true),
        ] {
            st.reports.insert("guestbook-app".into(), r);
            assert_eq!(st.reports_done(&exp), done);
        }
    }

    #[test]
    fn the_gitopscluster_needs_success_and_every_secret() {
        let exp = Expectation {
            gitopscluster: true,
            clusters: 2,
            ..Default::default()
        };
        let mut st = State {
            gitopscluster: Some(GitOpsClusterRow {
                phase: "successful".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        st.cluster_secrets.insert("cluster1-secret".into());
        assert!(!st.gitopscluster_done(&exp));
        st.cluster_secrets.insert("cluster2-secret".into());
        assert!(st.gitopscluster_done(&exp));
        st.gitopscluster.as_mut().unwrap().phase = "failed".into();
        assert!(!st.gitopscluster_done(&exp));
    }
}
