//! The charts' Grafana dashboards (ConfigMaps for kube-prometheus-stack's Grafana sidecar) and
//! PrometheusRules: off by default, and with their values on, what the sidecar and the
//! prometheus-operator read. (That every query finds its metric on the binaries' real `/metrics`
//! is `crates/cli/tests/signals/dashboards.rs`.)

use serde_json::Value;

use crate::helm::{self, Objects, root};

/// chart → (dashboard file, alerts).
const CHARTS: &[(&str, &str, &[&str])] = &[
    (
        "argocd-pull",
        "argocd-pull-controller.json",
        &[
            "ArgoCDPullReconcileErrors",
            "ArgoCDPullGitOpsReconcileFailures",
            "ArgoCDPullRequiredAPIMissing",
        ],
    ),
    (
        "argocd-pull-principal",
        "argocd-pull-principal.json",
        &[
            "ArgoCDPullAgentDisconnected",
            "ArgoCDPullPrincipalEventsQueueGrowing",
            "ArgoCDPullResourceProxyErrors",
            "ArgoCDPullPrincipalNoActiveReplica",
        ],
    ),
    (
        "argocd-pull-agent",
        "argocd-pull-agent.json",
        &[
            "ArgoCDPullAgentNotConnected",
            "ArgoCDPullAgentEventsQueueGrowing",
            "ArgoCDPullAgentResourceProxyErrors",
        ],
    ),
];

fn dashboards(objs: &Objects) -> Vec<&Value> {
    objs.of_kind("ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"].is_string())
        .collect()
}

#[test]
fn dashboards_and_alerts_are_off_by_default() {
    let Some(h) = helm::helm("dashboards off by default") else {
        return;
    };
    for (chart, _, _) in CHARTS {
        let objs = h.template(chart, "r", "argocd", &[]);
        assert!(dashboards(&objs).is_empty(), "{chart}");
        assert!(objs.of_kind("PrometheusRule").is_empty(), "{chart}");
    }
}

#[test]
fn the_dashboard_configmap_is_what_the_grafana_sidecar_loads() {
    let Some(h) = helm::helm("dashboard ConfigMaps") else {
        return;
    };
    for (chart, file, _) in CHARTS {
        let objs = h.template(
            chart,
            "r",
            "argocd",
            &[
                "--set",
                "grafanaDashboard.enabled=true",
                "--set",
                "grafanaDashboard.namespace=monitoring",
                "--set",
                "grafanaDashboard.annotations.grafana_folder=argocd-pull",
            ],
        );
        let cms = dashboards(&objs);
        assert_eq!(cms.len(), 1, "{chart}");
        let cm = cms[0];
        let m = &cm["metadata"];
        assert_eq!(m["namespace"], "monitoring", "{chart}");
        // kube-prometheus-stack's default sidecar selector: grafana_dashboard: "1"
        assert_eq!(m["labels"]["grafana_dashboard"], "1", "{chart}");
        assert_eq!(m["labels"]["app.kubernetes.io/instance"], "r", "{chart}");
        assert_eq!(m["annotations"]["grafana_folder"], "argocd-pull", "{chart}");
        let data = cm["data"].as_object().unwrap();
        assert_eq!(data.len(), 1, "{chart}: one dashboard");
        let json = data[*file].as_str().unwrap();
        let shipped = std::fs::read_to_string(
            root()
                .join("charts")
                .join(chart)
                .join("dashboards")
                .join(file),
        )
        .unwrap();
        assert_eq!(
            json.trim_end(),
            shipped.trim_end(),
            "{chart}: the file as it is"
        );
        let d: Value = serde_json::from_str(json).unwrap();
        assert!(
            d["uid"].as_str().unwrap().starts_with("argocd-pull-"),
            "{chart}"
        );
        // the data source is a variable, so the dashboard works with any Prometheus
        let vars = d["templating"]["list"].as_array().unwrap();
        assert!(vars.iter().any(|v| v["type"] == "datasource"), "{chart}");
        let mut targets = 0;
        for p in d["panels"].as_array().unwrap() {
            if p["type"] == "row" {
                continue;
            }
            assert_eq!(
                p["datasource"]["uid"], "${datasource}",
                "{chart}: {}",
                p["title"]
            );
            let ts = p["targets"].as_array().unwrap();
            assert!(!ts.is_empty(), "{chart}: {}", p["title"]);
            targets += ts.len();
        }
        assert!(targets >= 15, "{chart}: {targets} queries");
        // the default label, and a label of the user's choice instead
        let objs = h.template(
            chart,
            "r",
            "argocd",
            &[
                "--set",
                "grafanaDashboard.enabled=true",
                "--set",
                "grafanaDashboard.labels.grafana_dashboard=null",
                "--set",
                "grafanaDashboard.labels.team-dashboards=yes",
            ],
        );
        let cm = objs
            .of_kind("ConfigMap")
            .into_iter()
            .find(|c| c["metadata"]["labels"]["team-dashboards"] == "yes")
            .unwrap_or_else(|| panic!("{chart}: no ConfigMap with the chosen label"));
        assert_eq!(cm["metadata"]["namespace"], "argocd", "{chart}");
        assert!(cm["metadata"]["labels"]["grafana_dashboard"].is_null());
    }
}

#[test]
fn the_prometheus_rule_carries_every_alert_with_values_applied() {
    let Some(h) = helm::helm("PrometheusRules") else {
        return;
    };
    for (chart, _, alerts) in CHARTS {
        let mut args = vec![
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "prometheusRule.additionalLabels.release=kube-prometheus-stack",
            "--set",
            "prometheusRule.severity=critical",
            "--set",
            "prometheusRule.additionalRuleLabels.team=platform",
        ];
        if *chart != "argocd-pull" {
            args.extend(["--set", "prometheusRule.agentDisconnectedFor=10m"]);
        }
        let objs = h.template(chart, "r", "argocd", &args);
        let rules = objs.of_kind("PrometheusRule");
        assert_eq!(rules.len(), 1, "{chart}");
        let r = rules[0];
        assert_eq!(r["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(
            r["metadata"]["labels"]["release"], "kube-prometheus-stack",
            "{chart}: a Prometheus' ruleSelector finds it"
        );
        let all: Vec<&Value> = r["spec"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .collect();
        let names: Vec<&str> = all.iter().map(|a| a["alert"].as_str().unwrap()).collect();
        assert_eq!(names, *alerts, "{chart}");
        for a in &all {
            let name = &a["alert"];
            assert_eq!(a["labels"]["severity"], "critical", "{name}");
            assert_eq!(a["labels"]["team"], "platform", "{name}");
            assert!(a["for"].as_str().is_some_and(|f| !f.is_empty()), "{name}");
            for k in ["summary", "description"] {
                let t = a["annotations"][k].as_str().unwrap();
                // Prometheus' own templating survives Helm's; Helm's is rendered
                assert!(!t.contains(".Values"), "{name} {k}: {t}");
                assert!(!t.contains("{{`"), "{name} {k}: {t}");
            }
            assert!(
                a["annotations"]["description"]
                    .as_str()
                    .unwrap()
                    .contains("{{ $labels."),
                "{name}: says which object"
            );
        }
        if *chart != "argocd-pull" {
            let d = all
                .iter()
                .find(|a| a["alert"].as_str().unwrap().ends_with("onnected"))
                .unwrap();
            assert_eq!(d["for"], "10m", "{chart}: agentDisconnectedFor");
        }
    }
}

#[test]
fn the_principal_alerts_read_the_lease_and_the_agents_streams() {
    let Some(h) = helm::helm("principal alerts") else {
        return;
    };
    let objs = h.template(
        "argocd-pull-principal",
        "r",
        "argocd",
        &["--set", "prometheusRule.enabled=true"],
    );
    let rule = objs.of_kind("PrometheusRule")[0];
    let expr = |alert: &str| {
        rule["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"] == alert)
            .unwrap_or_else(|| panic!("{alert}"))
            .clone()
    };
    let d = expr("ArgoCDPullAgentDisconnected");
    assert_eq!(
        d["for"], "5m",
        "issue 30: disconnected for more than 5 minutes"
    );
    let e = d["expr"].as_str().unwrap();
    assert!(
        e.contains("max_over_time(argocd_principal_agent_connected[24h])"),
        "{e}"
    );
    let n = expr("ArgoCDPullPrincipalNoActiveReplica");
    assert!(
        n["expr"]
            .as_str()
            .unwrap()
            .contains("argocd_agent_ha_state{state=\"active\"}")
    );
    // issue 29: active-active exists; this alert is about active-passive's one Lease
    let text = n["annotations"]["description"].as_str().unwrap();
    assert!(
        text.contains("principal.ha.mode active-passive") && !text.contains("do not exist"),
        "{text}"
    );
    let r = expr("ArgoCDPullResourceProxyErrors");
    assert!(r["expr"].as_str().unwrap().ends_with("> 0.05"), "{r}");
    assert!(
        r["annotations"]["description"]
            .as_str()
            .unwrap()
            .starts_with("More than 5% ")
    );
}

#[test]
fn bad_observability_values_are_rejected_naming_the_value() {
    let Some(h) = helm::helm("bad observability values") else {
        return;
    };
    let e = h.template_err(
        "argocd-pull-principal",
        &["--set", "prometheusRule.resourceProxyErrorRatio=5"],
    );
    assert!(e.contains("resourceProxyErrorRatio"), "{e}");
    let e = h.template_err("argocd-pull-agent", &["--set", "prometheusRule.severity="]);
    assert!(e.contains("severity"), "{e}");
    let e = h.template_err("argocd-pull", &["--set", "grafanaDashboard.enable=true"]);
    assert!(e.contains("enable"), "a misspelt key: {e}");
}

#[test]
fn active_active_principals_alert_on_shards_without_an_owner() {
    let Some(h) = helm::helm("principal shard alert") else {
        return;
    };
    let alerts = |mode: &str| {
        let objs = h.template(
            "argocd-pull-principal",
            "r",
            "argocd",
            &[
                "--set",
                "prometheusRule.enabled=true",
                "--set",
                "prometheusRule.severity=critical",
                "--set",
                &format!("principal.ha.mode={mode}"),
                "--set",
                "replicaCount=2",
            ],
        );
        objs.of_kind("PrometheusRule")[0]["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let names = |rules: &[Value]| -> Vec<String> {
        rules
            .iter()
            .map(|r| r["alert"].as_str().unwrap().to_string())
            .collect()
    };
    // active-passive: the Lease alert, no shard alert
    assert_eq!(
        names(&alerts("active-passive")),
        [
            "ArgoCDPullAgentDisconnected",
            "ArgoCDPullPrincipalEventsQueueGrowing",
            "ArgoCDPullResourceProxyErrors",
            "ArgoCDPullPrincipalNoActiveReplica",
        ]
    );
    // active-active: every replica serves, so no replica "holds the Lease"; the shards must
    // all have an owner
    let rules = alerts("active-active");
    assert_eq!(
        names(&rules),
        [
            "ArgoCDPullAgentDisconnected",
            "ArgoCDPullPrincipalEventsQueueGrowing",
            "ArgoCDPullResourceProxyErrors",
            "ArgoCDPullPrincipalShardsWithoutOwner",
        ]
    );
    let a = &rules[3];
    assert_eq!(
        a["expr"],
        "sum(argocd_principal_ha_shards_held) by (namespace) < max(argocd_principal_ha_shard_count) by (namespace)"
    );
    assert_eq!(a["for"], "1m");
    assert_eq!(a["labels"]["severity"], "critical");
    let d = a["annotations"]["description"].as_str().unwrap();
    for says in [
        "{{ $labels.namespace }}",
        "{{ $value }}",
        "no owning replica",
        "logs for a shard error",
        "RBAC on Leases",
        "--ha-shards",
        "same name",
    ] {
        assert!(d.contains(says), "{says}: {d}");
    }
}
