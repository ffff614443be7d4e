//! `ctl validate principal|agent` (peer: cmd/ctl/validate.go): checks of an installation, printed
//! one per line (`* <check>: ✅` or `* <check>: ❌` and `ERROR: <why>`); any failed check ends
//! with `[FATAL]: one or more checks failed` and exit code 1.

use std::collections::BTreeMap;

use anyhow::bail;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, ListParams};

use super::Clients;
use super::out::{is_status, kube_msg};
use crate::cli::common::{SECRET_CA, SECRET_CLIENT_TLS, SECRET_JWT, SECRET_PRINCIPAL_TLS};
use crate::cli::common::{SECRET_RESOURCE_PROXY_TLS, jwt_key_from_secret};

#[derive(clap::Subcommand, Debug, Clone)]
pub enum ValidateCommand {
    /// Validate principal installation.
    Principal,
    /// Validate agent installation (and principal cross-checks).
    Agent,
}

/// One check and its outcome.
pub struct CheckResult {
    pub name: String,
    pub err: Option<String>,
}

impl CheckResult {
    fn new(name: impl Into<String>, r: Result<(), String>) -> Self {
        CheckResult {
            name: name.into(),
            err: r.err(),
        }
    }
}

impl std::fmt::Display for CheckResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.err {
            None => write!(f, "* {}: ✅", self.name),
            Some(e) => write!(f, "* {}: ❌\nERROR: {e}", self.name),
        }
    }
}

pub async fn run(cmd: &ValidateCommand, c: &Clients) -> anyhow::Result<String> {
    let results = match cmd {
        ValidateCommand::Principal => {
            if c.principal_namespace.trim().is_empty() {
                bail!("--principal-namespace is required");
            }
            principal_checks(&c.principal, &c.principal_namespace).await
        }
        ValidateCommand::Agent => {
            if c.principal_context.is_none()
                || c.principal_namespace.is_empty()
                || c.agent_context.is_none()
                || c.agent_namespace.is_empty()
            {
                bail!(
                    "An agent and principal must be provided for this command, use -h flag to see ways to provide them (--principal-context and --agent-context, or --principal and --agent from the config file)"
                );
            }
            let mut r = principal_checks(&c.principal, &c.principal_namespace).await;
            r.extend(agent_checks(c).await);
            r
        }
    };
    let mut out = String::from("Configuration validation results:\n");
    for r in &results {
        out.push_str(&format!("{r}\n"));
    }
    if results.iter().any(|r| r.err.is_some()) {
        return Err(super::Exit {
            stdout: out,
            stderr: "[FATAL]: one or more checks failed\n".into(),
            code: 1,
        }
        .into());
    }
    Ok(out)
}

fn ar(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn argocd_ar() -> ApiResource {
    ar("argoproj.io", "v1beta1", "ArgoCD", "argocds")
}

fn app_ar() -> ApiResource {
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

fn nested_str(o: &DynamicObject, path: &[&str]) -> Option<String> {
    let mut v = &o.data;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// Secret names of the principal: the ArgoCD CR's `spec.argoCDAgent.principal.*` if there is one,
/// else the defaults (ca, tls, resource proxy tls, jwt).
async fn principal_secret_names(client: &kube::Client, ns: &str) -> Result<[String; 4], String> {
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

async fn agent_secret_names(client: &kube::Client, ns: &str) -> Result<[String; 2], String> {
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

/// The principal's checks, in the peer's order.
pub async fn principal_checks(client: &kube::Client, ns: &str) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let [ca, tls, proxy, jwt] = match principal_secret_names(client, ns).await {
        Ok(n) => n,
        Err(e) => {
            out.push(CheckResult::new(
                "Reading principal secret names from ArgoCD CR",
                Err(e),
            ));
            [
                SECRET_CA,
                SECRET_PRINCIPAL_TLS,
                SECRET_RESOURCE_PROXY_TLS,
                SECRET_JWT,
            ]
            .map(str::to_string)
        }
    };
    out.push(CheckResult::new(
        "Verifying Argo CD is running in cluster-scoped mode",
        cluster_scoped(client, ns).await,
    ));
    out.push(CheckResult::new(
        format!("Verifying principal public CA certificate exists and is valid ({ns}/{ca})"),
        tls_cert_from_secret(client, ns, &ca).await.map(|_| ()),
    ));
    out.push(CheckResult::new(
        format!("Verifying principal gRPC TLS certificate exists and is valid ({ns}/{tls})"),
        cert_secret_valid(client, ns, &tls).await,
    ));
    out.push(CheckResult::new(
        format!("Verifying resource proxy TLS certificate exists and is valid ({ns}/{proxy})"),
        cert_secret_valid(client, ns, &proxy).await,
    ));
    out.push(CheckResult::new(
        format!("Verifying JWT signing key exists and is parseable ({ns}/{jwt})"),
        jwt_key_valid(client, ns, &jwt).await,
    ));
    match client
        .list_api_group_resources("route.openshift.io/v1")
        .await
    {
        Ok(_) => match routes(client, ns).await {
            Err(e) => out.push(CheckResult::new(
                "Checking for OpenShift Routes in namespace",
                Err(format!(
                    "failed to check for OpenShift Routes in namespace {ns}: {e}"
                )),
            )),
            Ok(hosts) if !hosts.is_empty() => out.push(CheckResult::new(
                "Verifying principal TLS secret ips/dns match Route host (OpenShift)",
                route_host_matches(client, ns, &tls, &hosts).await,
            )),
            Ok(_) => {}
        },
        Err(e) if is_status(&e, 404) => {}
        Err(e) => out.push(CheckResult::new(
            "Checking for OpenShift Route API availability",
            Err(format!(
                "failed to query OpenShift Route API: {}",
                kube_msg(&e)
            )),
        )),
    }
    out.push(CheckResult::new(
        format!(
            "Verifying no Application CRs defined within the principal's Argo CD namespace: {ns}"
        ),
        no_applications(client, ns).await,
    ));
    let secrets = Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map_err(|e| kube_msg(&e));
    out.push(CheckResult::new(
        "Verifying agent cluster secrets contain correct query parameter on server url",
        secrets
            .as_ref()
            .map_err(|e| format!("failed list secrets in namespace {ns}: {e}"))
            .and_then(|l| cluster_secret_servers(&l.items, ns)),
    ));
    out.push(CheckResult::new(
        "Verifying agent cluster secrets contain the skip-reconcile annotation and that it's set to true",
        secrets
            .as_ref()
            .map_err(|e| format!("failed to list secrets in namespace {ns}: {e}"))
            .and_then(|l| cluster_secret_annotations(&l.items, ns)),
    ));
    out.push(CheckResult::new(
        "Verifying Argo CD network policy allows for ingress from principal",
        redis_network_policy(client, ns, "principal").await,
    ));
    out.push(CheckResult::new(
        "Verifying deployed Argo CD components on principal",
        deployed_components(
            client,
            ns,
            &["repo-server", "redis", "dex-server", "server"],
            &["application-controller", "applicationset-controller"],
        )
        .await
        .map_err(|e| e.replace("{in}", &format!("namespace {ns}"))),
    ));
    out
}

/// The agent's checks (after the principal's, as the peer).
async fn agent_checks(c: &Clients) -> Vec<CheckResult> {
    let mut out = Vec::new();
    let (ans, pns) = (&c.agent_namespace, &c.principal_namespace);
    let [agent_ca, client_cert] = match agent_secret_names(&c.agent, ans).await {
        Ok(n) => n,
        Err(e) => {
            out.push(CheckResult::new(
                "Reading agent secret names from ArgoCD CR",
                Err(e),
            ));
            [SECRET_CA, SECRET_CLIENT_TLS].map(str::to_string)
        }
    };
    let principal_ca = match principal_secret_names(&c.principal, pns).await {
        Ok(n) => n[0].clone(),
        Err(e) => {
            out.push(CheckResult::new(
                "Reading principal secret names from ArgoCD CR",
                Err(e),
            ));
            SECRET_CA.to_string()
        }
    };
    out.push(CheckResult::new(
        format!("Verifying agent CA secret exists and contains CA cert ({ans}/{agent_ca})"),
        agent_ca_valid(&c.agent, ans, &agent_ca).await,
    ));
    out.push(CheckResult::new(
        format!("Verifying agent mTLS certificate exists and is not expired ({ans}/{client_cert})"),
        client_cert_not_expired(&c.agent, ans, &client_cert).await,
    ));
    out.push(CheckResult::new(
        "Verifying namespace on principal matches agent certificate subject",
        namespace_matches_subject(c, &client_cert).await,
    ));
    out.push(CheckResult::new(
        "Verifying agent mTLS certificate is signed by principal CA certificate",
        signed_by_principal_ca(c, &client_cert, &principal_ca).await,
    ));
    out.push(CheckResult::new(
        "Verifying Argo CD network policy allows for ingress from agent",
        redis_network_policy(&c.agent, ans, "agent").await,
    ));
    out.push(CheckResult::new(
        "Verifying deployed Argo CD components on agent",
        deployed_components(
            &c.agent,
            ans,
            &["repo-server", "application-controller", "redis"],
            &["server", "dex-server"],
        )
        .await
        .map_err(|e| e.replace("{in}", ans)),
    ));
    out
}

/// The peer's `tlsutil.TLSCertFromSecret`: a `kubernetes.io/tls` secret whose `tls.crt` and
/// `tls.key` form a pair; returns the DER certificates.
async fn tls_cert_from_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Vec<Vec<u8>>, String> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| format!("could not read TLS secret {ns}/{name}: {}", kube_msg(&e)))?;
    if s.type_.as_deref() != Some("kubernetes.io/tls") {
        return Err(format!("{ns}/{name}: not a TLS secret"));
    }
    let data = s.data.unwrap_or_default();
    if data.is_empty() {
        return Err(format!("{ns}/{name}: empty secret"));
    }
    let (Some(crt), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
        return Err("either cert or key is missing in the secret".into());
    };
    let certs = crate::tls::parse_certs(&crt.0)
        .and_then(|c| crate::tls::parse_key(&key.0).map(|_| c))
        .map_err(|e| format!("invalid cert or key data: {e:#}"))?;
    Ok(certs.into_iter().map(|c| c.to_vec()).collect())
}

/// The leaf certificate of a TLS secret.
async fn leaf_from_tls_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Vec<u8>, String> {
    tls_cert_from_secret(client, ns, name)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{ns}/{name}: secret does not contain certificate data"))
}

fn parse<'a>(
    der: &'a [u8],
    ns: &str,
    name: &str,
) -> Result<x509_parser::certificate::X509Certificate<'a>, String> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| format!("could not parse certificate in secret {ns}/{name}: {e}"))
}

/// Go's `time.Time.String()` in UTC.
fn go_time(t: x509_parser::time::ASN1Time) -> String {
    let f = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second] +0000 UTC"
    );
    t.to_datetime().format(&f).unwrap_or_default()
}

async fn cert_secret_valid(client: &kube::Client, ns: &str, name: &str) -> Result<(), String> {
    let der = leaf_from_tls_secret(client, ns, name).await?;
    let c = parse(&der, ns, name)?;
    let now = x509_parser::time::ASN1Time::now();
    if now < c.validity().not_before {
        return Err(format!(
            "certificate in secret {ns}/{name} is not yet valid (valid from {})",
            go_time(c.validity().not_before)
        ));
    }
    if now > c.validity().not_after {
        return Err(format!("certificate in secret {ns}/{name} is expired"));
    }
    Ok(())
}

async fn jwt_key_valid(client: &kube::Client, ns: &str, name: &str) -> Result<(), String> {
    use rsa::pkcs8::DecodePrivateKey;
    let pem = jwt_key_from_secret(client, ns, name)
        .await
        .map_err(|e| format!("{e:#}"))?;
    rsa::RsaPrivateKey::from_pkcs8_pem(&pem)
        .map(|_| ())
        .map_err(|_| "JWT signing key is not an RSA private key".to_string())
}

/// Argo CD watches Applications in every namespace (not `applicationNamespaces` / the
/// `application.namespaces` key), and Applications can be listed cluster-wide.
async fn cluster_scoped(client: &kube::Client, ns: &str) -> Result<(), String> {
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

async fn routes(client: &kube::Client, ns: &str) -> Result<Vec<String>, String> {
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

/// Some Route host is a name (or IP) of the principal's certificate (Go's `VerifyHostname`:
/// DNS SANs with a leading `*.` wildcard for one label, IP SANs for an IP host).
async fn route_host_matches(
    client: &kube::Client,
    ns: &str,
    secret: &str,
    hosts: &[String],
) -> Result<(), String> {
    use x509_parser::extensions::GeneralName;
    let der = leaf_from_tls_secret(client, ns, secret).await?;
    let cert = parse(&der, ns, secret)?;
    let mut names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => ips.push(b.to_vec()),
                _ => {}
            }
        }
    }
    let matches = |host: &str| -> bool {
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            let b = match ip {
                std::net::IpAddr::V4(v) => v.octets().to_vec(),
                std::net::IpAddr::V6(v) => v.octets().to_vec(),
            };
            return ips.contains(&b);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        names.iter().any(|n| match n.strip_prefix("*.") {
            Some(suffix) => host
                .split_once('.')
                .is_some_and(|(first, rest)| !first.is_empty() && rest == suffix),
            None => *n == host,
        })
    };
    if hosts.iter().any(|h| !h.is_empty() && matches(h)) {
        return Ok(());
    }
    Err("no OpenShift Route host in namespace matches TLS IPS/DNS".into())
}

async fn no_applications(client: &kube::Client, ns: &str) -> Result<(), String> {
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
        ann.and_then(|a| a.get(super::ANNOTATION_MANAGED_BY))
            .is_some_and(|v| v == "argocd-agent")
            && lab
                .and_then(|l| l.get(super::LABEL_SECRET_TYPE))
                .is_some_and(|v| v == "cluster")
    })
}

fn cluster_secret_servers(secrets: &[Secret], ns: &str) -> Result<(), String> {
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

fn cluster_secret_annotations(secrets: &[Secret], ns: &str) -> Result<(), String> {
    let missing: Vec<String> = managed_cluster_secrets(secrets)
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(super::ANNOTATION_SKIP_RECONCILE))
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
async fn redis_network_policy(
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
async fn deployed_components(
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

async fn agent_ca_valid(client: &kube::Client, ns: &str, name: &str) -> Result<(), String> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| kube_msg(&e))?;
    let data = s.data.unwrap_or_default();
    if data.is_empty() {
        return Err(format!("{ns}/{name}: empty secret"));
    }
    let Some(ca) = data.get("ca.crt") else {
        return Err(format!("{ns}/{name}: missing ca.crt field"));
    };
    crate::tls::parse_certs(&ca.0)
        .map(|_| ())
        .map_err(|e| format!("{ns}/{name}: ca.crt holds no certificate: {e:#}"))
}

async fn client_cert_not_expired(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let der = leaf_from_tls_secret(client, ns, name).await?;
    let c = parse(&der, ns, name)?;
    let now = x509_parser::time::ASN1Time::now();
    if now < c.validity().not_before {
        return Err(format!(
            "agent certificate not yet valid (valid from {})",
            go_time(c.validity().not_before)
        ));
    }
    if now > c.validity().not_after {
        return Err(format!(
            "agent certificate expired at {}",
            go_time(c.validity().not_after)
        ));
    }
    Ok(())
}

async fn namespace_matches_subject(c: &Clients, secret: &str) -> Result<(), String> {
    let ns = &c.agent_namespace;
    let der = leaf_from_tls_secret(&c.agent, ns, secret).await?;
    let cert = parse(&der, ns, secret)?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .trim()
        .to_string();
    if cn.is_empty() {
        return Err("agent certificate subject (CN) is empty".into());
    }
    match Api::<Namespace>::all(c.principal.clone()).get(&cn).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => {
            Err(format!("namespace '{cn}' not found on principal cluster"))
        }
        Err(e) => Err(kube_msg(&e)),
    }
}

async fn signed_by_principal_ca(
    c: &Clients,
    client_secret: &str,
    ca_secret: &str,
) -> Result<(), String> {
    let leaf = leaf_from_tls_secret(&c.agent, &c.agent_namespace, client_secret).await?;
    let ca = leaf_from_tls_secret(&c.principal, &c.principal_namespace, ca_secret).await?;
    let leaf_c = parse(&leaf, &c.agent_namespace, client_secret)?;
    let ca_c = parse(&ca, &c.principal_namespace, ca_secret)?;
    leaf_c
        .verify_signature(Some(ca_c.public_key()))
        .map_err(|e| format!("agent certificate not signed by principal CA: {e}"))
}
