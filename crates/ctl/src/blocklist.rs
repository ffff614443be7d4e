//! `ctl blocklist tls add|remove|list` (peer: cmd/ctl/blocklist.go): the principal's TLS
//! certificate blocklist, ConfigMap `argocd-agent-tls-blocklist` (one key per SHA-256
//! fingerprint). The principal picks a change up within seconds and drops a blocked agent.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;

use super::Clients;
use argocd_pull_agent_core::blocklist::{CONFIGMAP, is_fingerprint, normalise};

#[derive(clap::Subcommand, Debug, Clone)]
pub enum BlocklistCommand {
    /// Manage the TLS certificate fingerprint blocklist.
    #[command(subcommand)]
    Tls(TlsCommand),
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum TlsCommand {
    /// Add a certificate fingerprint to the blocklist.
    Add { fingerprint: String },
    /// Remove a certificate fingerprint from the blocklist.
    Remove { fingerprint: String },
    /// List all fingerprints in the blocklist.
    List,
}

fn fingerprint_arg(fp: &str) -> anyhow::Result<String> {
    let n = normalise(fp);
    if !is_fingerprint(&n) {
        bail!(
            "{fp:?} is not a SHA-256 certificate fingerprint: want 64 hex digits (colons allowed), as `ctl agent inspect <agent>` or `openssl x509 -noout -fingerprint -sha256` print it"
        );
    }
    Ok(n)
}

pub async fn run(cmd: &BlocklistCommand, c: &Clients) -> anyhow::Result<String> {
    let BlocklistCommand::Tls(cmd) = cmd;
    let api: Api<ConfigMap> = Api::namespaced(c.principal.clone(), &c.principal_namespace);
    let cm = api
        .get_opt(CONFIGMAP)
        .await
        .context("failed to load blocklist")?;
    let mut fps: Vec<String> = cm
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default();
    match cmd {
        TlsCommand::List => {
            if fps.is_empty() {
                return Ok("No entries in the blocklist.\n".into());
            }
            fps.sort();
            Ok(format!("FINGERPRINT\n{}\n", fps.join("\n")))
        }
        TlsCommand::Add { fingerprint } => {
            let fp = fingerprint_arg(fingerprint)?;
            if fps.iter().any(|f| normalise(f) == fp) {
                return Ok("Fingerprint already in blocklist.\n".into());
            }
            fps.push(fp.clone());
            save(&api, cm, fps, &c.principal_namespace).await?;
            Ok(format!("Added to blocklist: {fp}\n"))
        }
        TlsCommand::Remove { fingerprint } => {
            let fp = fingerprint_arg(fingerprint)?;
            let before = fps.len();
            fps.retain(|f| normalise(f) != fp);
            if fps.len() == before {
                return Ok("Fingerprint not found in blocklist.\n".into());
            }
            save(&api, cm, fps, &c.principal_namespace).await?;
            Ok(format!("Removed from blocklist: {fp}\n"))
        }
    }
}

/// Writes the fingerprints (values empty, as the peer's `SaveToConfigMap`), creating the
/// ConfigMap when missing; a concurrent writer makes this fail rather than lose its entry.
async fn save(
    api: &Api<ConfigMap>,
    cur: Option<ConfigMap>,
    fps: Vec<String>,
    ns: &str,
) -> anyhow::Result<()> {
    let data = fps.into_iter().map(|f| (f, String::new())).collect();
    match cur {
        Some(mut cm) => {
            cm.data = Some(data);
            api.replace(CONFIGMAP, &PostParams::default(), &cm)
                .await
                .context("failed to save blocklist")?;
        }
        None => {
            let mut cm = ConfigMap::default();
            cm.metadata.name = Some(CONFIGMAP.into());
            cm.metadata.namespace = Some(ns.into());
            cm.data = Some(data);
            api.create(&PostParams::default(), &cm)
                .await
                .context("failed to save blocklist")?;
        }
    }
    Ok(())
}
