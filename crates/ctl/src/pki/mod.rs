//! `ctl pki …` (peer: cmd/ctl/ca.go): a test PKI in the peer's Secrets.

mod args;
mod inspect;
mod pem;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::out::{kube_msg, put_secret, read_answer, render, secret};
use super::{Clients, Exit};
use argocd_pull_agent_core::pki::Ca;
use argocd_pull_agent_core::settings::{
    SECRET_CA, SECRET_CLIENT_TLS, SECRET_PRINCIPAL_TLS, SECRET_RESOURCE_PROXY_TLS, tls_from_secret,
};
pub use args::{IssueCommand, KeyFlags, PkiCommand};
use inspect::{InspectSummary, TEXT_LABELS, summarize};
use pem::{pem_block, pkcs8_pem};

/// The principal's CA from Secret `argocd-agent-ca`.
pub async fn load_ca(c: &Clients) -> anyhow::Result<Ca> {
    let (crt, key) = match tls_from_secret(&c.principal, &c.principal_namespace, SECRET_CA).await {
        Ok(x) => x,
        Err(e) if format!("{e:#}").contains("not found") => bail!(
            "CA is not initialized: no secret {}/{SECRET_CA} (run `argocd-pull ctl pki init`)",
            c.principal_namespace
        ),
        Err(e) => return Err(e.context("Error getting CA certificate")),
    };
    Ca::from_pem(
        std::str::from_utf8(&crt).context("CA certificate is not PEM")?,
        std::str::from_utf8(&key).context("CA key is not PEM")?,
    )
}

pub async fn run(cmd: &PkiCommand, c: &Clients) -> anyhow::Result<String> {
    let ns = &c.principal_namespace;
    match cmd {
        PkiCommand::Init { force, days, key } => {
            let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
            match api.get_opt(SECRET_CA).await {
                Err(e) => bail!("Error getting secret: {}", kube_msg(&e)),
                Ok(Some(_)) if !force => {
                    bail!("CA secret already exist. Please delete it before generating.")
                }
                _ => {}
            }
            let alg = key.parse()?;
            let ca =
                Ca::new_peer(SECRET_CA, *days, alg).context("Could not generate certificate")?;
            let s = secret(
                SECRET_CA,
                ns,
                "kubernetes.io/tls",
                &[
                    ("tls.crt", ca.cert_pem.as_bytes()),
                    ("tls.key", ca.key_pem.as_bytes()),
                ],
            );
            put_secret(&c.principal, ns, s, true, "")
                .await
                .context("Could not write to secret")?;
            Ok(format!(
                "Generating CA and storing it in secret\nSuccess. CA data stored in secret {ns}/{SECRET_CA}\n"
            ))
        }
        PkiCommand::Issue(i) => issue(i, c).await,
        PkiCommand::Inspect { output, full } => {
            let ca = summarize(c, SECRET_CA, true, *full)
                .await
                .context("CA is not initialized")?
                .with_context(|| {
                    format!("CA is not initialized: secret {ns}/{SECRET_CA} not found (run `argocd-pull ctl pki init`)")
                })?;
            let sum = InspectSummary {
                ca,
                principal: summarize(c, SECRET_PRINCIPAL_TLS, false, *full)
                    .await
                    .context("Error reading principal certificate")?,
                resource_proxy: summarize(c, SECRET_RESOURCE_PROXY_TLS, false, *full)
                    .await
                    .context("Error reading resource proxy certificate")?,
            };
            render(&sum, output, TEXT_LABELS).context("Could not marshal summary")
        }
        PkiCommand::Delete { yes } => {
            let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
            match api.get_opt(SECRET_CA).await {
                Err(e) => bail!("{}", kube_msg(&e)),
                Ok(None) => bail!("CA not configured."),
                Ok(Some(_)) => {}
            }
            if !yes {
                let answer = read_answer("Really delete CA (use uppercase YES to delete)?: ")?
                    .context("no answer on standard input (pass --yes to delete without asking)")?;
                if answer != "YES" {
                    return Err(Exit::stdout(format!("{answer}\nAborted.\n"), 1).into());
                }
            }
            api.delete(SECRET_CA, &Default::default())
                .await
                .map_err(|e| {
                    anyhow::anyhow!("Could not delete secret {SECRET_CA}: {}", kube_msg(&e))
                })?;
            Ok("CA successfully deleted.\n".into())
        }
        PkiCommand::Dump { all, key, cert } => {
            let (print_cert, print_key) = (*cert || *all, *key || *all);
            if !print_cert && !print_key {
                bail!("One of --all, --key or --cert must be specified.");
            }
            let (crt, key_pem) = read_ca_secret(c).await?;
            let der =
                argocd_pull_agent_core::tls::parse_certs(&crt).context("Could not encode cert")?;
            let mut out = String::new();
            if print_cert {
                out.push_str(&pem_block("CERTIFICATE", &der[0]));
            }
            if print_key {
                out.push_str(&pkcs8_pem(&key_pem).context("Could not encode key")?);
            }
            Ok(out)
        }
        PkiCommand::Propagate { force } => propagate(c, *force).await,
    }
}

/// `tls.crt` and `tls.key` of the CA secret; "CA not configured." when it is missing.
async fn read_ca_secret(c: &Clients) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let ns = &c.principal_namespace;
    if Api::<Secret>::namespaced(c.principal.clone(), ns)
        .get_opt(SECRET_CA)
        .await
        .map_err(|e| anyhow::anyhow!("{}", kube_msg(&e)))?
        .is_none()
    {
        bail!("CA not configured.");
    }
    tls_from_secret(&c.principal, ns, SECRET_CA).await
}

/// `pki propagate` (peer: `NewPKIPropagateCommand`): the CA certificate into the agent's cluster.
async fn propagate(c: &Clients, force: bool) -> anyhow::Result<String> {
    if c.principal_context == c.agent_context {
        bail!("PKI and agent cannot reside within the same context.");
    }
    if c.principal_context.is_none() || c.agent_context.is_none() {
        bail!("Must specify both principal and agent contexts.");
    }
    let pns = &c.principal_namespace;
    let ans = &c.agent_namespace;
    let ca = Api::<Secret>::namespaced(c.principal.clone(), pns)
        .get(SECRET_CA)
        .await
        .map_err(|e| anyhow::anyhow!("Error getting CA secret from principal: {}", kube_msg(&e)))?;
    let crt = ca
        .data
        .as_ref()
        .and_then(|d| d.get("tls.crt"))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let api = Api::<Secret>::namespaced(c.agent.clone(), ans);
    match api.get_opt(SECRET_CA).await {
        Err(e) => bail!("Error getting agent CA secret: {}", kube_msg(&e)),
        Ok(Some(_)) if !force => {
            bail!("Agent CA secret already exists. Please delete it before propagating.")
        }
        _ => {}
    }
    let s = secret(SECRET_CA, ans, "Opaque", &[("ca.crt", &crt)]);
    put_secret(&c.agent, ans, s, true, "")
        .await
        .context("Error updating agent CA secret")?;
    Ok(format!("Agent CA secret {ans}/{SECRET_CA} created\n"))
}

async fn issue(cmd: &IssueCommand, c: &Clients) -> anyhow::Result<String> {
    let pns = &c.principal_namespace;
    match cmd {
        IssueCommand::Principal {
            ips,
            dns,
            upsert,
            days,
            key,
        }
        | IssueCommand::ResourceProxy {
            ips,
            dns,
            upsert,
            days,
            key,
            ..
        } => {
            if let IssueCommand::ResourceProxy { no_san: false, .. } = cmd
                && ips.is_empty()
                && dns.is_empty()
            {
                return Err(Exit::stdout(
                    "Please pass at least one of --ip or --dns options or use --no-san to create certificate without SAN\n",
                    1,
                )
                .into());
            }
            let (cn, name) = if matches!(cmd, IssueCommand::Principal { .. }) {
                ("argocd-agent-principal", SECRET_PRINCIPAL_TLS)
            } else {
                ("argocd-agent-resource-proxy", SECRET_RESOURCE_PROXY_TLS)
            };
            let alg = key.parse()?;
            let ca = load_ca(c).await?;
            let cert = ca.issue_server_peer(cn, ips, dns, *days, alg)?;
            let s = secret(
                name,
                pns,
                "kubernetes.io/tls",
                &[
                    ("tls.crt", cert.cert_pem.as_bytes()),
                    ("tls.key", cert.key_pem.as_bytes()),
                ],
            );
            let created = put_secret(
                &c.principal,
                pns,
                s,
                *upsert,
                "Certificate exists, please use --upsert to reissue.",
            )
            .await?;
            Ok(created_msg(pns, name, created))
        }
        IssueCommand::Agent {
            name,
            upsert,
            days,
            same_context,
            key,
        } => {
            if c.principal_context.is_none() || c.agent_context.is_none() {
                bail!(
                    "Both principal and agent kubecontext must be set. (--principal-context and --agent-context, or --principal and --agent from the config file)"
                );
            }
            if c.same_context && !same_context {
                bail!(
                    "PKI and agent usually do not reside within the same context. Use --same-context if you really mean it."
                );
            }
            anyhow::ensure!(
                argocd_pull_agent_core::tls::is_dns_label(name),
                "invalid agent name {name:?}: must be a DNS label (lowercase letters, digits, '-')"
            );
            let alg = key.parse()?;
            let ca = load_ca(c).await?;
            let cert = ca.issue_client_peer(name, *days, alg)?;
            let ans = &c.agent_namespace;
            let s = secret(
                SECRET_CLIENT_TLS,
                ans,
                "kubernetes.io/tls",
                &[
                    ("tls.crt", cert.cert_pem.as_bytes()),
                    ("tls.key", cert.key_pem.as_bytes()),
                ],
            );
            let created = put_secret(
                &c.agent,
                ans,
                s,
                *upsert,
                "Certificate exists, please use --upsert to reissue.",
            )
            .await?;
            let mut out = created_msg(ans, SECRET_CLIENT_TLS, created);
            let ca_secret = secret(
                SECRET_CA,
                ans,
                "Opaque",
                &[("ca.crt", ca.cert_pem.as_bytes())],
            );
            if c.same_context && ans == pns {
                // the CA secret of the principal already holds tls.crt: never overwrite it
                return Ok(out);
            }
            put_secret(&c.agent, ans, ca_secret, true, "").await?;
            out.push_str(&format!("Agent CA secret {ans}/{SECRET_CA} created\n"));
            Ok(out)
        }
    }
}

fn created_msg(ns: &str, name: &str, created: bool) -> String {
    if created {
        format!("Secret {ns}/{name} created\n")
    } else {
        format!("Secret {ns}/{name} updated.\n")
    }
}
