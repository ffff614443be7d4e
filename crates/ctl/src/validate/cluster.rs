//! The checks of what is installed in a namespace: Argo CD in cluster-scoped mode, OpenShift
//! Routes, no Applications in the principal's namespace, the agents' cluster secrets, the Redis
//! network policy and the deployed Argo CD components.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use super::argocd_cr::{app_ar, ar, argocd_ar, nested_str};
use crate::out::{is_status, kube_msg};

/// Argo CD watches Applications in every namespace (not `applicationNamespaces` / the
/// `application.namespaces` key), and Applications can be listed cluster-wide.
pub(super) async fn cluster_scoped(client: &kube::Client, ns: &str) -> Result<(), String> {
    let mut namespaced = false;
    let mut cr_not_found = false;
    match Api::<DynamicObject>::namespaced_with(client.clone(), ns, &argocd_ar())
        .list(&ListParams::default())
        .await
    {
        Err(e) if is_status(&e, 404) => cr_not_found = true,
        Err(e) => return Err(format!("failed to list ArgoCD CRs: {}", kube_msg(&e))),
        Ok(l) => {
            namespaced = l.items.iter().any(|cr| {
                cr.data
                    .pointer("/spec/applicationNamespaces")
                    .and_then(|v| v.as_array())
                    .is_some_and(|a| !a.is_empty())
            })
        }
    }
    if !namespaced {
        match Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get("argocd-cm")
            .await
        {
            Err(e) if is_status(&e, 404) && cr_not_found => {
                return Err(format!(
                    "neither ArgoCD CR nor argocd-cm ConfigMap found in namespace {ns}"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "failed to get argocd-cm ConfigMap: {}",
                    kube_msg(&e)
                ));
            }
            Ok(cm) => {
                namespaced = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("application.namespaces"))
                    .is_some_and(|v| !v.trim().is_empty());
            }
        }
    }
    if namespaced {
        return Err("argo CD configured for namespaced mode (applicationNamespaces is set), must be configured for cluster-scoped mode".into());
    }
    Api::<DynamicObject>::all_with(client.clone(), &app_ar())
        .list(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|e| {
            format!(
                "failed to list Applications cluster-wide (required for cluster-scoped mode): {}",
                kube_msg(&e)
            )
        })
}

pub(super) async fn routes(client: &kube::Client, ns: &str) -> Result<Vec<String>, String> {
    let r = ar("route.openshift.io", "v1", "Route", "routes");
    let l = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &r)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("failed to list OpenShift Routes: {}", kube_msg(&e)))?;
    Ok(l.items
        .iter()
        .map(|o| nested_str(o, &["spec", "host"]).unwrap_or_default())
        .collect())
}

pub(super) async fn no_applications(client: &kube::Client, ns: &str) -> Result<(), String> {
    let l = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &app_ar())
        .list(&ListParams::default())
        .await
        .map_err(|e| {
            format!(
                "failed to list applications in namespace {ns}: {}",
                kube_msg(&e)
            )
        })?;
    if !l.items.is_empty() {
        return Err(format!("applications exist in principal namespace {ns}"));
    }
    Ok(())
}

/// Argo CD cluster secrets written for agents (annotation `managed-by: argocd-agent`).
fn managed_cluster_secrets(secrets: &[Secret]) -> impl Iterator<Item = &Secret> {
    secrets.iter().filter(|s| {
        let ann = s.metadata.annotations.as_ref();
        let lab = s.metadata.labels.as_ref();
        ann.and_then(|a| a.get(argocd_pull_agent_core::cluster_secret::ANNOTATION_MANAGED_BY))
            .is_some_and(|v| v == "argocd-agent")
            && lab
                .and_then(|l| l.get(argocd_pull_agent_core::cluster_secret::LABEL_SECRET_TYPE))
                .is_some_and(|v| v == "cluster")
    })
}

pub(super) fn cluster_secret_servers(secrets: &[Secret], ns: &str) -> Result<(), String> {
    let (mut no_https, mut no_param) = (Vec::new(), Vec::new());
    for s in managed_cluster_secrets(secrets) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let server = s
            .data
            .as_ref()
            .and_then(|d| d.get("server"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        if !server.starts_with("https://") {
            no_https.push(name.clone());
        }
        let agent = server
            .split_once('?')
            .map(|(_, q)| {
                form_urlencoded::parse(q.split('#').next().unwrap_or_default().as_bytes())
                    .find(|(k, _)| k == "agentName")
                    .map(|(_, v)| v.trim().to_string())
                    .unwrap_or_default()
            })
            .unwrap_or_default();
        if agent.is_empty() {
            no_param.push(name);
        }
    }
    let mut parts = Vec::new();
    if !no_https.is_empty() {
        parts.push(format!(
            "the following agent cluster secrets in {ns} are not https: {}",
            no_https.join(", ")
        ));
    }
    if !no_param.is_empty() {
        parts.push(format!(
            "the following agent cluster secrets in {ns} are missing the agentName param: {}",
            no_param.join(", ")
        ));
    }
    if parts.is_empty() {
        Ok(())
    } else {
        Err(parts.join("\n"))
    }
}

pub(super) fn cluster_secret_annotations(secrets: &[Secret], ns: &str) -> Result<(), String> {
    let missing: Vec<String> = managed_cluster_secrets(secrets)
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| {
                    a.get(argocd_pull_agent_core::cluster_secret::ANNOTATION_SKIP_RECONCILE)
                })
                .map(String::as_str)
                != Some("true")
        })
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "the following agent cluster secrets in {ns} are missing the skip-reconcile annotation or it is not set to true: {}",
        missing.join(", ")
    ))
}

/// A NetworkPolicy selecting `argocd-redis` admits pods `argocd-agent-<component>`.
pub(super) async fn redis_network_policy(
    client: &kube::Client,
    ns: &str,
    component: &str,
) -> Result<(), String> {
    const NAME: &str = "app.kubernetes.io/name";
    let want = format!("argocd-agent-{component}");
    let l = Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| {
            format!(
                "failed to list network policies in namespace {ns}: {}",
                kube_msg(&e)
            )
        })?;
    let mut exists = false;
    let mut allowed = false;
    for p in &l.items {
        let Some(spec) = &p.spec else { continue };
        let selects_redis = spec
            .pod_selector
            .as_ref()
            .and_then(|s| s.match_labels.as_ref())
            .and_then(|m| m.get(NAME))
            .is_some_and(|v| v == "argocd-redis");
        if !selects_redis {
            continue;
        }
        exists = true;
        allowed |= spec.ingress.iter().flatten().any(|i| {
            i.from.iter().flatten().any(|f| {
                f.pod_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.as_ref())
                    .and_then(|m| m.get(NAME))
                    .is_some_and(|v| *v == want)
            })
        });
    }
    if !exists {
        return Err(format!(
            "network policy for argo cd redis does not exist in {ns}"
        ));
    }
    if !allowed {
        return Err(format!(
            "network policy for argo cd redis does not allow traffic from {want}"
        ));
    }
    Ok(())
}

/// Argo CD components (`app.kubernetes.io/part-of: argocd` Deployments and StatefulSets by
/// `app.kubernetes.io/component`): every `valid` one present, no `invalid` one. `{in}` in the
/// error is replaced by the caller (the peer words the two sides differently).
pub(super) async fn deployed_components(
    client: &kube::Client,
    ns: &str,
    valid: &[&str],
    invalid: &[&str],
) -> Result<(), String> {
    let mut components: BTreeMap<String, String> = BTreeMap::new();
    let fail = |e: kube::Error| {
        format!(
            "failed to list Argo CD components in {{in}}: {}",
            kube_msg(&e)
        )
    };
    let deployments = Api::<Deployment>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(fail)?;
    let sets = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(fail)?;
    let metas = deployments
        .items
        .iter()
        .map(|d| &d.metadata)
        .chain(sets.items.iter().map(|s| &s.metadata));
    for m in metas {
        let labels = m.labels.clone().unwrap_or_default();
        if labels.get("app.kubernetes.io/part-of").map(String::as_str) != Some("argocd") {
            continue;
        }
        if let Some(c) = labels.get("app.kubernetes.io/component") {
            components.insert(c.clone(), m.name.clone().unwrap_or_default());
        }
    }
    let missing: Vec<&str> = valid
        .iter()
        .copied()
        .filter(|c| !components.contains_key(*c))
        .collect();
    let found: Vec<String> = invalid
        .iter()
        .filter_map(|c| components.get(*c).map(|n| format!("{c} ({n})")))
        .collect();
    let mut parts = Vec::new();
    if !missing.is_empty() {
        parts.push(format!(
            "the following components were missing: {}",
            missing.join(", ")
        ));
    }
    if !found.is_empty() {
        parts.push(format!(
            "the following invalid components were found: {}",
            found.join(", ")
        ));
    }
    if parts.is_empty() {
        Ok(())
    } else {
        Err(parts.join("\n"))
    }
}
