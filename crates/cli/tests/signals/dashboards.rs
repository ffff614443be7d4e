//! The charts' Grafana dashboards and PrometheusRules query only what the binaries expose: the
//! three charts are rendered by Helm's engine (`helm-template`, with `grafanaDashboard.enabled`
//! and `prometheusRule.enabled`), every PromQL expression of every dashboard panel, dashboard
//! variable and alert is parsed (promql-parser), and each metric it selects must be on the real
//! `/metrics` of the binary it is about — `argocd-pull controller`, `argocd-pull principal
//! --leader-elect`, `argocd-pull agent`, running against an embedded hub with an agent connected
//! and a resource-proxy request served — with every label it matches on or groups by. The peer's
//! own dashboards (argocd-agent's examples/o11y, tests/fixtures/peer-dashboards) still find
//! their metrics too, except the families argocd-pull does not have (`NOT_EXPOSED`) and those
//! that appear with their first event (`FIRST_USE`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use promql_parser::parser::{Expr, LabelModifier};
use serde_json::Value;

use crate::health::get;
use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// Labels Prometheus gives every sample when it scrapes a ServiceMonitor's target: a query may
/// match on or group by them although no binary writes them.
const TARGET_LABELS: &[&str] = &[
    "namespace",
    "job",
    "pod",
    "instance",
    "service",
    "endpoint",
    "container",
];

/// What the peer's dashboards query and argocd-pull does not expose (docs/compatibility.md §6:
/// Go's runtime): that panel stays empty.
const NOT_EXPOSED: &[&str] = &["go_goroutines"];

/// Labelled families whose series appear with the first event they count (an error, a discarded
/// event, a Redis-proxy request) — as in the peer, whose client_golang vectors do the same — so
/// a fresh process has none of them. Their names and labels are checked where the events are
/// made: `argocd_pull_agent_core::metrics::tests::*_exports_every_metric_of_the_peers_dashboard_*`.
const FIRST_USE: &[&str] = &[
    "principal_errors",
    "principal_event_writer_send_errors_total",
    "argocd_principal_event_writer_events_discarded_total",
    "argocd_principal_redis_proxy_requests_total",
    "argocd_principal_redis_proxy_errors_total",
    "agent_errors",
    "argocd_agent_event_writer_events_discarded_total",
    "argocd_agent_redis_proxy_requests_total",
    "argocd_agent_redis_proxy_errors_total",
];

/// Metric name → the label names its samples carry.
type Exposed = BTreeMap<String, BTreeSet<String>>;

fn exposed(body: &str) -> Exposed {
    let mut out = Exposed::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = out.entry(line[..end].to_string()).or_default();
        if let Some(rest) = line[end..].strip_prefix('{') {
            // `name="value",...}`: label names are what precedes each `="`
            for part in rest.split("\",") {
                if let Some((k, _)) = part.split_once("=\"") {
                    labels.insert(k.trim_start_matches(',').to_string());
                }
            }
        }
    }
    out
}

/// One PromQL expression and where it comes from.
struct Query {
    source: String,
    expr: String,
}

/// Grafana's interval variables as a duration PromQL accepts (other variables sit inside label
/// matcher strings, which PromQL takes as they are).
fn promql(grafana: &str) -> String {
    let mut s = grafana.to_string();
    for v in ["__rate_interval", "__interval", "__range"] {
        s = s
            .replace(&format!("${{{v}}}"), "5m")
            .replace(&format!("${v}"), "5m");
    }
    s
}

/// Every expression of a Grafana dashboard: panel targets (rows' nested panels too) and query
/// variables (`label_values(<selector>, <label>)`, `query_result(<expr>)`).
fn dashboard_queries(d: &Value, source: &str) -> Vec<Query> {
    fn panels(ps: &Value, source: &str, out: &mut Vec<Query>) {
        for p in ps.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str().filter(|e| !e.is_empty()) {
                    out.push(Query {
                        source: format!("{source}: panel {:?}", p["title"]),
                        expr: promql(e),
                    });
                }
            }
            panels(&p["panels"], source, out);
        }
    }
    let mut out = Vec::new();
    panels(&d["panels"], source, &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        let q = v["query"]
            .as_str()
            .or_else(|| v["query"]["query"].as_str())
            .unwrap_or_default();
        let inner = if let Some(args) = q
            .strip_prefix("label_values(")
            .and_then(|r| r.strip_suffix(')'))
        {
            // label_values(<label>) has no selector
            args.rsplit_once(',').map(|(sel, _)| sel.trim())
        } else {
            q.strip_prefix("query_result(")
                .and_then(|r| r.strip_suffix(')'))
        };
        if let Some(e) = inner {
            out.push(Query {
                source: format!("{source}: variable {:?}", v["name"]),
                expr: promql(e),
            });
        }
    }
    out
}

/// A selector's metric name and the labels it matches on; an aggregation's grouping labels and
/// the metrics under it.
#[derive(Default)]
struct Uses {
    selectors: Vec<(String, Vec<String>)>,
    groupings: Vec<(Vec<String>, BTreeSet<String>)>,
}

fn walk(e: &Expr, uses: &mut Uses) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut vs = |v: &promql_parser::parser::VectorSelector, names: &mut BTreeSet<String>| {
        let name = v.name.clone().or_else(|| {
            v.matchers
                .matchers
                .iter()
                .find(|m| m.name == "__name__")
                .map(|m| m.value.clone())
        });
        let labels = v
            .matchers
            .matchers
            .iter()
            .chain(v.matchers.or_matchers.iter().flatten())
            .map(|m| m.name.clone())
            .filter(|n| n != "__name__")
            .collect();
        if let Some(n) = name {
            names.insert(n.clone());
            uses.selectors.push((n, labels));
        }
    };
    match e {
        Expr::VectorSelector(v) => vs(v, &mut names),
        Expr::MatrixSelector(m) => vs(&m.vs, &mut names),
        Expr::Aggregate(a) => {
            names.extend(walk(&a.expr, uses));
            if let Some(p) = &a.param {
                names.extend(walk(p, uses));
            }
            if let Some(LabelModifier::Include(l)) = &a.modifier {
                uses.groupings.push((l.labels.clone(), names.clone()));
            }
        }
        Expr::Unary(u) => names.extend(walk(&u.expr, uses)),
        Expr::Binary(b) => {
            names.extend(walk(&b.lhs, uses));
            names.extend(walk(&b.rhs, uses));
        }
        Expr::Paren(p) => names.extend(walk(&p.expr, uses)),
        Expr::Subquery(s) => names.extend(walk(&s.expr, uses)),
        Expr::Call(c) => {
            for a in &c.args.args {
                names.extend(walk(a, uses));
            }
        }
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => {}
    }
    names
}

/// Problems of `queries` against one binary's `/metrics`: unparsable expressions, metrics it
/// does not expose, and (with `labels`) labels its samples lack.
fn problems(queries: &[Query], exposed: &Exposed, labels: bool, allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let known = |l: &str, metric: &str| {
        TARGET_LABELS.contains(&l) || exposed.get(metric).is_some_and(|ls| ls.contains(l))
    };
    for q in queries {
        let e = match promql_parser::parser::parse(&q.expr) {
            Ok(e) => e,
            Err(err) => {
                out.push(format!("{}: invalid PromQL {:?}: {err}", q.source, q.expr));
                continue;
            }
        };
        let mut uses = Uses::default();
        walk(&e, &mut uses);
        for (metric, matched) in &uses.selectors {
            if !exposed.contains_key(metric) {
                if !allowed.contains(&metric.as_str()) {
                    out.push(format!("{}: {metric} is not exposed", q.source));
                }
                continue;
            }
            for l in matched.iter().filter(|l| labels && !known(l, metric)) {
                out.push(format!("{}: {metric} has no label {l}", q.source));
            }
        }
        for (by, metrics) in uses.groupings.iter().filter(|_| labels) {
            for l in by {
                if l != "le" && !metrics.iter().any(|m| known(l, m)) {
                    out.push(format!(
                        "{}: grouping by {l}, which none of {metrics:?} has",
                        q.source
                    ));
                }
            }
        }
    }
    out
}

fn helm_template() -> Option<PathBuf> {
    let path = match std::env::var_os("ARGOCD_PULL_HELM_TEMPLATE") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/bin/helm-template"),
    };
    path.is_file().then_some(path)
}

/// The chart rendered with its dashboard and PrometheusRule (and `values`, `--set` pairs): the
/// dashboard JSON, the alerts' `(name, expr)`.
fn render(helm: &Path, chart: &str, values: &[&str]) -> (Value, Vec<(String, String)>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../charts")
        .join(chart);
    let out = std::process::Command::new(helm)
        .args(["template", "r"])
        .arg(&dir)
        .args(["-n", "monitoring"])
        .args(["--set", "grafanaDashboard.enabled=true"])
        .args(["--set", "prometheusRule.enabled=true"])
        .args(values.iter().flat_map(|v| ["--set", v]))
        .output()
        .expect("run helm-template");
    assert!(
        out.status.success(),
        "{chart}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).unwrap();
    let cm = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["labels"]["grafana_dashboard"] == "1")
        .unwrap_or_else(|| panic!("{chart}: no dashboard ConfigMap"));
    let (_, json) = cm["data"].as_object().unwrap().iter().next().unwrap();
    let dashboard: Value = serde_json::from_str(json.as_str().unwrap()).unwrap();
    let rule = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .unwrap_or_else(|| panic!("{chart}: no PrometheusRule"));
    let alerts = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .map(|r| {
            (
                r["alert"].as_str().unwrap().to_string(),
                r["expr"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (dashboard, alerts)
}

/// Scrapes `port` until `needle` is on `/metrics` (the series a reconcile or a request creates).
fn metrics_with(port: u16, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, body) = get(port, "/metrics");
        if body.contains(needle) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{needle} never appeared on :{port}/metrics:\n{body}"
        );
        // a scrape has no event to await: the series appears when the process gets there
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Two requests of Argo CD's kind through the principal's resource proxy, as agent `edge`:
/// a watch (refused: counted as an error) and a list (served by the agent).
fn resource_proxy_requests(dir: &Path, port: u16, pki: &Path) {
    let kubeconfig = dir.join("resource-proxy.kubeconfig");
    let f = |n: &str| pki.join(n).display().to_string();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: rp\n\
             clusters: [{{name: rp, cluster: {{server: \"https://localhost:{port}\", certificate-authority: \"{}\"}}}}]\n\
             users: [{{name: edge, user: {{client-certificate: \"{}\", client-key: \"{}\"}}}}]\n\
             contexts: [{{name: rp, context: {{cluster: rp, user: edge}}}}]\n",
            f("ca.crt"),
            f("edge.crt"),
            f("edge.key")
        ),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        let client = kube::Client::try_from(config).unwrap();
        let req = |uri: &str| http::Request::get(uri).body(Vec::new()).unwrap();
        let watch = client
            .request_text(req("/api/v1/namespaces?watch=true"))
            .await;
        assert!(watch.is_err(), "a watch is refused: {watch:?}");
        let list = client.request_text(req("/api/v1/namespaces")).await;
        assert!(list.is_ok(), "a list is served by the agent: {list:?}");
    });
}

#[test]
fn dashboards_and_alerts_query_only_what_the_binaries_expose() {
    let Some(helm) = helm_template() else {
        println!(
            "SKIP: dashboards and alerts vs /metrics: no helm-template (set ARGOCD_PULL_HELM_TEMPLATE)"
        );
        return;
    };
    let dir = temp_dir("dashboards");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub = demo_hub(&kubeconfig);
    let f = |n: &str| pki.join(n).display().to_string();

    let controller_admin = free_port();
    let controller = Proc::spawn(
        "controller",
        &[
            "controller".into(),
            format!("--admin-addr=127.0.0.1:{controller_admin}"),
            "--leader-elect=false".into(),
        ],
        Some(&kubeconfig),
    );
    controller.wait_for_line("admin server");
    let grpc = free_port();
    let rp = free_port();
    let principal_admin = free_port();
    let principal = Proc::spawn(
        "principal",
        &[
            "principal".into(),
            "--leader-elect".into(),
            "--ha-replica-name=principal-0".into(),
            "--ha-advertise-address=127.0.0.1".into(),
            "--listen-host=127.0.0.1".into(),
            format!("--listen-port={grpc}"),
            format!("--tls-cert={}", f("principal.crt")),
            format!("--tls-key={}", f("principal.key")),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--jwt-key={}", f("jwt.key")),
            "--namespace=argocd".into(),
            format!("--metrics-port={principal_admin}"),
            "--healthz-port=0".into(),
            "--disable-redis-proxy".into(),
            "--enable-resource-proxy=true".into(),
            format!("--resource-proxy-listen-address=127.0.0.1:{rp}"),
            format!("--resource-proxy-cert-path={}", f("principal.crt")),
            format!("--resource-proxy-key-path={}", f("principal.key")),
            format!("--resource-proxy-ca-path={}", f("ca.crt")),
        ],
        Some(&kubeconfig),
    );
    principal.wait_for_line("this replica holds the Lease");
    let agent_admin = free_port();
    let agent = Proc::spawn(
        "agent",
        &[
            "agent".into(),
            "--server-address=127.0.0.1".into(),
            format!("--server-port={grpc}"),
            "--server-name=localhost".into(),
            "--agent-mode=managed".into(),
            "--namespace=edge-local".into(),
            format!("--root-ca-path={}", f("ca.crt")),
            format!("--tls-client-cert={}", f("edge.crt")),
            format!("--tls-client-key={}", f("edge.key")),
            format!("--metrics-port={agent_admin}"),
            "--healthz-port=0".into(),
        ],
        Some(&kubeconfig),
    );
    agent.wait_for_line("connected to principal principal=");
    resource_proxy_requests(&dir, rp, &pki);

    let bodies = [
        (
            "argocd-pull",
            metrics_with(
                controller_admin,
                "argocd_pull_argocd_pull_gitops_reconcile_failures_total{",
            ),
        ),
        (
            "argocd-pull-principal",
            metrics_with(
                principal_admin,
                "argocd_principal_resource_proxy_errors_total{",
            ),
        ),
        (
            "argocd-pull-agent",
            metrics_with(agent_admin, "argocd_agent_resource_proxy_requests_total 1"),
        ),
    ];
    let mut all = Vec::new();
    let mut by_chart = BTreeMap::new();
    for (chart, body) in &bodies {
        let exposed = exposed(body);
        let (dashboard, alerts) = render(&helm, chart, &[]);
        let mut queries = dashboard_queries(&dashboard, &format!("{chart} dashboard"));
        let panels = queries.len();
        assert!(panels >= 15, "{chart}: {panels} dashboard queries");
        for (name, expr) in &alerts {
            queries.push(Query {
                source: format!("{chart} alert {name}"),
                expr: expr.clone(),
            });
        }
        println!(
            "{chart}: {panels} dashboard queries and {} alerts checked against {} metric names",
            alerts.len(),
            exposed.len()
        );
        all.extend(problems(&queries, &exposed, true, &[]));
        by_chart.insert(
            *chart,
            alerts.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        );
    }
    // active/active replicas (issue 29): their alert reads the shard metrics every principal has
    let (_, aa) = render(
        &helm,
        "argocd-pull-principal",
        &["principal.ha.mode=active-active", "replicaCount=3"],
    );
    let names: Vec<&str> = aa.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "ArgoCDPullAgentDisconnected",
            "ArgoCDPullPrincipalEventsQueueGrowing",
            "ArgoCDPullResourceProxyErrors",
            "ArgoCDPullPrincipalShardsWithoutOwner"
        ]
    );
    let queries: Vec<Query> = aa
        .into_iter()
        .map(|(name, expr)| Query {
            source: format!("argocd-pull-principal (active-active) alert {name}"),
            expr,
        })
        .collect();
    all.extend(problems(&queries, &exposed(&bodies[1].1), true, &[]));
    assert!(all.is_empty(), "{}", all.join("\n"));
    // the alerts issue 30 asks for
    assert_eq!(
        by_chart["argocd-pull"],
        [
            "ArgoCDPullReconcileErrors",
            "ArgoCDPullGitOpsReconcileFailures",
            "ArgoCDPullRequiredAPIMissing"
        ]
    );
    assert_eq!(
        by_chart["argocd-pull-principal"],
        [
            "ArgoCDPullAgentDisconnected",
            "ArgoCDPullPrincipalEventsQueueGrowing",
            "ArgoCDPullResourceProxyErrors",
            "ArgoCDPullPrincipalNoActiveReplica"
        ]
    );
    assert_eq!(
        by_chart["argocd-pull-agent"],
        [
            "ArgoCDPullAgentNotConnected",
            "ArgoCDPullAgentEventsQueueGrowing",
            "ArgoCDPullAgentResourceProxyErrors"
        ]
    );

    // The peer's dashboards: every metric they select, by name (their selectors also use
    // labels of their own scrape configuration, e.g. `agent_name` on the agent's targets). The
    // principal's dashboard also shows the agents' own metrics (scraped from the workload
    // clusters, argocd-agent's examples/o11y/grafana-setup.md).
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/peer-dashboards");
    let principal_and_agents = format!("{}\n{}", bodies[1].1, bodies[2].1);
    let allowed: Vec<&str> = NOT_EXPOSED.iter().chain(FIRST_USE).copied().collect();
    for (file, body) in [
        (
            "argocd-agent-principal-dashboard.json",
            &principal_and_agents,
        ),
        ("argocd-agent-agent-dashboard.json", &bodies[2].1),
    ] {
        let d: Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures.join(file)).unwrap()).unwrap();
        let queries = dashboard_queries(&d, file);
        assert!(queries.len() > 25, "{file}: {} queries", queries.len());
        let p = problems(&queries, &exposed(body), false, &allowed);
        assert!(p.is_empty(), "{}", p.join("\n"));
        println!("{file}: {} queries find their metrics", queries.len());
    }
    drop(agent);
    drop(principal);
    drop(controller);
    let _ = std::fs::remove_dir_all(&dir);
}
