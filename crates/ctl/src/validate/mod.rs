//! `ctl validate principal|agent` (peer: cmd/ctl/validate.go): checks of an installation, printed
//! one per line (`* <check>: ✅` or `* <check>: ❌` and `ERROR: <why>`); any failed check ends
//! with `[FATAL]: one or more checks failed` and exit code 1.

mod argocd_cr;
mod certs;
mod cluster;

use anyhow::bail;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

use super::Clients;
use super::out::{is_status, kube_msg};
use argocd_cr::{agent_secret_names, principal_secret_names};
use argocd_pull_agent_core::settings::{
    SECRET_CA, SECRET_CLIENT_TLS, SECRET_JWT, SECRET_PRINCIPAL_TLS, SECRET_RESOURCE_PROXY_TLS,
};
use certs::{
    agent_ca_valid, cert_secret_valid, client_cert_not_expired, jwt_key_valid,
    namespace_matches_subject, route_host_matches, signed_by_principal_ca, tls_cert_from_secret,
};
use cluster::{
    cluster_scoped, cluster_secret_annotations, cluster_secret_servers, deployed_components,
    no_applications, redis_network_policy, routes,
};

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
