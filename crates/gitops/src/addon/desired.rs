//! What should exist for one GitOpsCluster with `argoCDAgentAddon`, as a pure function of what
//! the reconciler read: the hub secrets (re-using every certificate that is still good), the
//! per-cluster cluster secrets and ManifestWorks, and the OCM addon objects.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use k8s_openapi::api::core::v1::{Node, Secret, Service};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

use super::discovery;
use super::pki::{self, Leaf, Pem, Reissue};
use super::*;

/// What the reconciler read, and the settings.
pub struct Inputs<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub spec: &'a ArgoCDAgentAddonSpec,
    pub placement: &'a str,
    /// Resolved principal address and port (spec, else discovered).
    pub address: &'a str,
    pub port: &'a str,
    pub principal_service: Option<&'a Service>,
    pub nodes: &'a [Node],
    /// Selected clusters, sorted.
    pub clusters: &'a [String],
    /// The Secrets of the GitOpsCluster's namespace this controller owns, by name.
    pub secrets: &'a BTreeMap<String, Secret>,
    /// `ca-bundle.crt` of the existing bundle ConfigMap.
    pub bundle: Option<&'a str>,
    /// The agent image the AddOnTemplate deploys.
    pub agent_image: &'a str,
    pub now: OffsetDateTime,
}

/// Everything that should exist, in apply order, plus what was (re-)issued and why.
#[derive(Debug, Default)]
pub struct Plan {
    pub objects: Vec<Value>,
    pub issued: Vec<(String, Reissue)>,
    /// When a certificate next needs attention (the reconciler requeues for it).
    pub next_check: Option<OffsetDateTime>,
}

/// A bad input: the condition it fails, and the message naming the fix. Nothing is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub condition: &'static str,
    pub reason: &'static str,
    pub message: String,
}

pub fn agent_namespace(spec: &ArgoCDAgentAddonSpec) -> String {
    spec.agent_namespace
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| DEFAULT_AGENT_NAMESPACE.to_string())
}

pub fn mode(spec: &ArgoCDAgentAddonSpec) -> &'static str {
    if spec.mode.as_deref() == Some("autonomous") {
        "autonomous"
    } else {
        "managed"
    }
}

/// `argocd-agent-addon-<gcNs>-<gcName>` (the peer's name).
pub fn template_name(ns: &str, name: &str) -> String {
    format!("{ADDON_NAME}-{ns}-{name}")
}

/// `argocd-agent-cr-<gcNs>-<gcName>`, over 63 chars: first 54 + `-` + 8 hex of its sha256.
pub fn cr_work_name(ns: &str, name: &str) -> String {
    let n = format!("argocd-agent-cr-{ns}-{name}");
    if n.len() <= 63 {
        return n;
    }
    let h = hex::encode(Sha256::digest(n.as_bytes()));
    format!("{}-{}", &n[..54], &h[..8])
}

/// The ArgoCD CRs to deliver: the custom list (validated), else the default CR.
pub fn argocd_crs(spec: &ArgoCDAgentAddonSpec) -> Result<Vec<Value>, Invalid> {
    let ns = agent_namespace(spec);
    let Some(custom) = &spec.argo_cd_cr_manifest_work else {
        return Ok(vec![json!({
            "apiVersion": "argoproj.io/v1beta1", "kind": "ArgoCD",
            "metadata": {"name": "argocd", "namespace": ns},
            "spec": {"server": {"enabled": false}, "sourceNamespaces": ["*"]}
        })]);
    };
    let bad = |m: String| Invalid {
        condition: COND_ARGOCD_CR_DELIVERED,
        reason: REASON_FAILED,
        message: format!(
            "Invalid ArgoCDCRManifestWork: {m}; fix spec.argoCDAgentAddon.argoCDCRManifestWork.manifests"
        ),
    };
    if custom.manifests.is_empty() {
        return Err(bad("manifests is empty".into()));
    }
    let mut out = Vec::new();
    let mut argocd = 0;
    for (i, m) in custom.manifests.iter().enumerate() {
        let (Some(api), Some(kind), Some(_)) = (
            m.get("apiVersion").and_then(Value::as_str),
            m.get("kind").and_then(Value::as_str),
            m.pointer("/metadata/name").and_then(Value::as_str),
        ) else {
            return Err(bad(format!(
                "manifests[{i}] needs apiVersion, kind and metadata.name"
            )));
        };
        let mut m = m.clone();
        if api == "argoproj.io/v1beta1" && kind == "ArgoCD" {
            argocd += 1;
            if m.pointer("/metadata/namespace").is_none() {
                m["metadata"]["namespace"] = json!(ns);
            }
        }
        out.push(m);
    }
    if argocd == 0 {
        return Err(bad("no argoproj.io/v1beta1 ArgoCD in manifests".into()));
    }
    Ok(out)
}

fn labels(component: &str, inp: &Inputs) -> Value {
    json!({
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_COMPONENT: component,
        LABEL_GC_NAME: inp.name,
        LABEL_GC_NAMESPACE: inp.namespace,
    })
}

fn secret_pem(s: Option<&Secret>, cert_key: &str, key_key: &str) -> Option<Pem> {
    let d = s?.data.as_ref()?;
    let get = |k: &str| d.get(k).and_then(|b| String::from_utf8(b.0.clone()).ok());
    Some(Pem {
        cert: get(cert_key)?,
        key: get(key_key)?,
    })
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn tls_secret(name: &str, ns: &str, labels: Value, pem: &Pem, extra: &[(&str, &str)]) -> Value {
    let mut data = json!({"tls.crt": b64(&pem.cert), "tls.key": b64(&pem.key)});
    for (k, v) in extra {
        data[*k] = json!(b64(v));
    }
    json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "type": "kubernetes.io/tls", "data": data})
}

/// Keeps `existing` unless `decision` says otherwise; records why a certificate was issued.
fn keep_or_issue(
    plan: &mut Plan,
    what: &str,
    existing: Option<Pem>,
    decision: Option<Reissue>,
    issue: impl FnOnce() -> Result<Pem, String>,
) -> Result<Pem, String> {
    match (existing, decision) {
        (Some(p), None) => Ok(p),
        (_, d) => {
            plan.issued
                .push((what.to_string(), d.unwrap_or(Reissue::Missing)));
            issue().map_err(|e| format!("{what}: {e}"))
        }
    }
}

/// The full plan. `Err` only for bad input (nothing is written then); certificate issuance
/// errors are reported as `Invalid` on the certificate's condition as well.
pub fn plan(inp: &Inputs) -> Result<Plan, Invalid> {
    let crs = argocd_crs(inp.spec)?;
    let ns = inp.namespace;
    let now = inp.now;
    let mut plan = Plan::default();
    let fail = |condition: &'static str, what: &str, e: String| Invalid {
        condition,
        reason: REASON_FAILED,
        message: format!("Failed to create {what}: {e}"),
    };

    // JWT signing key: created once, never rotated (as the peer), re-created if unusable.
    let jwt = inp
        .secrets
        .get(SECRET_JWT)
        .and_then(|s| s.data.as_ref()?.get("jwt.key"))
        .and_then(|b| String::from_utf8(b.0.clone()).ok())
        .filter(|k| pki::jwt_key_valid(k));
    let jwt = match jwt {
        Some(k) => k,
        None => {
            plan.issued.push((SECRET_JWT.into(), Reissue::Missing));
            pki::jwt_key().map_err(|e| fail(COND_JWT_SECRET_READY, "JWT secret", e))?
        }
    };
    plan.objects
        .push(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET_JWT, "namespace": ns, "labels": labels("jwt", inp)},
        "type": "Opaque", "data": {"jwt.key": b64(&jwt)}}));

    // CA, and the bundle (current first, older unexpired CAs after it).
    let ca_secret = inp.secrets.get(SECRET_CA);
    let old_ca = secret_pem(ca_secret, "tls.crt", "tls.key");
    let ca_d = pki::ca_decision(old_ca.as_ref(), now);
    let ca = keep_or_issue(&mut plan, SECRET_CA, old_ca.clone(), ca_d, || {
        pki::new_ca(now)
    })
    .map_err(|e| fail(COND_CA_CERTIFICATE_READY, "CA certificate", e))?;
    let mut previous = inp.bundle.unwrap_or_default().to_string();
    if let Some(o) = &old_ca {
        previous.push_str(&o.cert);
    }
    let bundle = pki::ca_bundle(&ca.cert, &previous, now);
    let bundle_infos = pki::parse_all(&bundle);
    plan.objects.push(tls_secret(
        SECRET_CA,
        ns,
        labels("ca", inp),
        &ca,
        &[("ca.crt", &bundle)],
    ));
    plan.objects
        .push(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": CONFIGMAP_CA_BUNDLE, "namespace": ns, "labels": labels("ca", inp)},
        "data": {"ca-bundle.crt": bundle}}));
    let mut infos = bundle_infos.iter().take(1).cloned().collect::<Vec<_>>();

    // Principal and resource-proxy server certificates.
    for (sname, want, cond, what) in [
        (
            SECRET_PRINCIPAL_TLS,
            Leaf::Server(discovery::principal_sans(
                inp.principal_service,
                inp.nodes,
                ns,
                inp.address,
            )),
            COND_PRINCIPAL_CERTIFICATE_READY,
            "principal certificate",
        ),
        (
            SECRET_RESOURCE_PROXY_TLS,
            Leaf::Server(discovery::resource_proxy_sans(ns)),
            COND_RESOURCE_PROXY_CERTIFICATE_READY,
            "resource proxy certificate",
        ),
    ] {
        let old = secret_pem(inp.secrets.get(sname), "tls.crt", "tls.key");
        let d = pki::leaf_decision(old.as_ref(), &want, &bundle_infos, now);
        let leaf = keep_or_issue(&mut plan, sname, old, d, || pki::issue(&ca, &want, now))
            .map_err(|e| fail(cond, what, e))?;
        infos.extend(pki::parse(&leaf.cert).ok());
        plan.objects.push(tls_secret(
            sname,
            ns,
            labels("certificate", inp),
            &leaf,
            &[],
        ));
    }

    // The addon: ClusterManagementAddOn (shared), AddOnTemplate (this GitOpsCluster's).
    let tmpl = template_name(ns, inp.name);
    plan.objects.push(json!({"apiVersion": ADDON_API, "kind": "ClusterManagementAddOn",
        "metadata": {"name": ADDON_NAME, "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_COMPONENT: "addon"}},
        "spec": {"addOnMeta": {"displayName": "Argo CD agent (argocd-pull)"},
            "supportedConfigs": [
                {"group": ADDON_GROUP, "resource": "addondeploymentconfigs"},
                {"group": ADDON_GROUP, "resource": "addontemplates"}]}}));
    plan.objects.push(super::template::addon_template(
        &tmpl,
        inp,
        labels("addon-template", inp),
    ));

    // Per cluster.
    for c in inp.clusters {
        let agent_ns = agent_namespace(inp.spec);
        let client_name = format!("cluster-{c}");
        let old = inp
            .secrets
            .get(&client_name)
            .and_then(super::cluster_secret_client_pem);
        let want = Leaf::Client(c.clone());
        let d = pki::leaf_decision(old.as_ref(), &want, &bundle_infos, now);
        let client = keep_or_issue(&mut plan, &client_name, old, d, || {
            pki::issue(&ca, &want, now)
        })
        .map_err(|e| fail(COND_CLUSTERS_IMPORTED, "cluster client certificate", e))?;
        infos.extend(pki::parse(&client.cert).ok());
        let config = json!({"username": c, "password": c, "tlsClientConfig": {
            "insecure": false, "certData": b64(&client.cert), "keyData": b64(&client.key),
            "caData": b64(&bundle)}});
        let mut l = labels("cluster-secret", inp);
        l[argocd_pull_api::names::LABEL_ARGOCD_SECRET_TYPE] = json!("cluster");
        l[LABEL_CLUSTER_NAME] = json!(c);
        l[LABEL_AGENT_NAME] = json!(c);
        l[LABEL_PLACEMENT_NAME] = json!(inp.placement);
        plan.objects
            .push(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": client_name, "namespace": ns, "labels": l},
            "type": "Opaque",
            "data": {"name": b64(c),
                "server": b64(&format!("https://{}:{}?agentName={c}",
                    discovery::RESOURCE_PROXY_SERVICE, discovery::RESOURCE_PROXY_PORT)),
                "config": b64(&config.to_string())}}));
        if c != LOCAL_CLUSTER {
            let mut wl = labels("ca", inp);
            wl[LABEL_GITOPSCLUSTER] = json!("true");
            plan.objects
                .push(json!({"apiVersion": WORK_API, "kind": "ManifestWork",
                "metadata": {"name": CA_WORK, "namespace": c, "labels": wl,
                    "annotations": {ANNOTATION_PROPAGATE_CA: "true"}},
                "spec": {"workload": {"manifests": [{"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": SECRET_CA, "namespace": agent_ns},
                    "type": "Opaque", "data": {"ca.crt": b64(&bundle)}}]}}}));
            let mut cl = labels("argocd-cr", inp);
            cl[LABEL_GITOPSCLUSTER] = json!("true");
            plan.objects
                .push(json!({"apiVersion": WORK_API, "kind": "ManifestWork",
                "metadata": {"name": cr_work_name(ns, inp.name), "namespace": c, "labels": cl},
                "spec": {"workload": {"manifests": crs}}}));
        }
        let mut vars = vec![json!({"name": "ARGOCD_NAMESPACE", "value": agent_ns})];
        if let Some(o) = inp
            .spec
            .operator_namespace
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            vars.push(json!({"name": "ARGOCD_OPERATOR_NAMESPACE", "value": o}));
        }
        plan.objects.push(json!({"apiVersion": ADDON_API, "kind": "AddOnDeploymentConfig",
            "metadata": {"name": ADDON_CONFIG, "namespace": c, "labels": labels("addon-config", inp)},
            "spec": {"agentInstallNamespace": agent_ns, "customizedVariables": vars}}));
        plan.objects.push(
            json!({"apiVersion": ADDON_API, "kind": "ManagedClusterAddOn",
            "metadata": {"name": ADDON_NAME, "namespace": c, "labels": labels("addon", inp)},
            "spec": {"installNamespace": agent_ns, "configs": [
                {"group": ADDON_GROUP, "resource": "addontemplates", "name": tmpl},
                {"group": ADDON_GROUP, "resource": "addondeploymentconfigs",
                 "name": ADDON_CONFIG, "namespace": c}]}}),
        );
    }
    plan.next_check = pki::next_check(&infos);
    // The CA's renewal point, and the end of a rotation grace, also need a pass.
    if let Some(current) = bundle_infos.first() {
        let grace_end = current.not_before + pki::ROTATION_GRACE;
        let candidates = [
            Some(current.renew_at()),
            (grace_end > now).then_some(grace_end),
        ];
        for t in candidates.into_iter().flatten() {
            plan.next_check = Some(plan.next_check.map_or(t, |n| n.min(t)));
        }
    }
    Ok(plan)
}
