//! The Argo CD installation's own description of itself: the argocd-operator's ArgoCD CR (the
//! secret names it sets for the principal and the agent) and the API resources the checks list.

use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};

use crate::out::{is_status, kube_msg};
use argocd_pull_agent_core::settings::{
    SECRET_CA, SECRET_CLIENT_TLS, SECRET_JWT, SECRET_PRINCIPAL_TLS, SECRET_RESOURCE_PROXY_TLS,
};

pub(super) fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub(super) fn argocd_ar() -> ApiResource {
    ar("argoproj.io", "v1beta1", "ArgoCD", "argocds")
}

pub(super) fn app_ar() -> ApiResource {
    ar("argoproj.io", "v1alpha1", "Application", "applications")
}

/// The first ArgoCD CR (argocd-operator) of `ns`, `None` when there is none or no such CRD.
async fn argocd_cr(client: &kube::Client, ns: &str) -> Result<Option<DynamicObject>, String> {
    match Api::<DynamicObject>::namespaced_with(client.clone(), ns, &argocd_ar())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => Ok(l.items.into_iter().next()),
        Err(e) if is_status(&e, 404) => Ok(None),
        Err(e) => Err(format!("failed to list ArgoCD CRs: {}", kube_msg(&e))),
    }
}

pub(super) fn nested_str(o: &DynamicObject, path: &[&str]) -> Option<String> {
    let mut v = &o.data;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// Secret names of the principal: the ArgoCD CR's `spec.argoCDAgent.principal.*` if there is one,
/// else the defaults (ca, tls, resource proxy tls, jwt).
pub(super) async fn principal_secret_names(
    client: &kube::Client,
    ns: &str,
) -> Result<[String; 4], String> {
    let mut names = [
        SECRET_CA.to_string(),
        SECRET_PRINCIPAL_TLS.to_string(),
        SECRET_RESOURCE_PROXY_TLS.to_string(),
        SECRET_JWT.to_string(),
    ];
    let cr = argocd_cr(client, ns)
        .await
        .map_err(|e| format!("failed to access ArgoCD CR in namespace {ns}: {e}"))?;
    if let Some(cr) = cr {
        let p = ["spec", "argoCDAgent", "principal"];
        let paths: [&[&str]; 4] = [
            &["tls", "rootCASecretName"],
            &["tls", "secretName"],
            &["resourceProxy", "tls", "secretName"],
            &["jwt", "secretName"],
        ];
        for (i, rest) in paths.iter().enumerate() {
            let full: Vec<&str> = p.iter().chain(rest.iter()).copied().collect();
            if let Some(v) = nested_str(&cr, &full) {
                names[i] = v;
            }
        }
    }
    Ok(names)
}

pub(super) async fn agent_secret_names(
    client: &kube::Client,
    ns: &str,
) -> Result<[String; 2], String> {
    let mut names = [SECRET_CA.to_string(), SECRET_CLIENT_TLS.to_string()];
    let cr = argocd_cr(client, ns)
        .await
        .map_err(|e| format!("failed to access ArgoCD CR in namespace {ns}: {e}"))?;
    if let Some(cr) = cr {
        if let Some(v) = nested_str(
            &cr,
            &["spec", "argoCDAgent", "agent", "tls", "rootCASecretName"],
        ) {
            names[0] = v;
        }
        if let Some(v) = nested_str(&cr, &["spec", "argoCDAgent", "agent", "tls", "secretName"]) {
            names[1] = v;
        }
    }
    Ok(names)
}
