//! `ctl agent …` (peer: cmd/ctl/agent.go): agents as Argo CD cluster secrets `cluster-<agent>`
//! in the principal's namespace, shaped like the peer's `cluster.ClusterToSecret`.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use super::out::{kube_msg, put_secret, render};
use super::pki::{KeyFlags, load_ca};
use super::{Clients, Exit};
use argocd_pull_agent_core::cluster_secret::{
    ClusterConfig, DEFAULT_RESOURCE_PROXY, LABEL_AGENT_NAME, b64, cluster_secret,
    cluster_secret_name, server_url,
};
use argocd_pull_agent_core::pki::DEFAULT_LEAF_DAYS;
use argocd_pull_agent_core::settings::get_secret;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AgentCommand {
    /// Create a new agent configuration (cluster secret cluster-<agent> with a client certificate).
    Create {
        /// The agent's name.
        name: String,
        /// Address of the principal's resource proxy (host:port).
        #[arg(long = "resource-proxy-server", default_value = DEFAULT_RESOURCE_PROXY)]
        resource_proxy_server: String,
        /// Additional labels for the agent (key=value).
        #[arg(short = 'l', long = "label", value_delimiter = ',')]
        labels: Vec<String>,
        /// Existing secret with tls.crt and tls.key to use instead of issuing ([namespace/]name).
        #[arg(long = "tls-from-secret")]
        tls_from_secret: Option<String>,
        /// Existing secret with ca.crt ([namespace/]name), with --tls-from-secret.
        #[arg(long = "ca-from-secret")]
        ca_from_secret: Option<String>,
        /// Number of days the client certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// List configured agents (with -o wide|json|yaml: their state as the hub shows it).
    List {
        /// Only list agents matching a label selector.
        #[arg(short = 'l', long = "label")]
        labels: Vec<String>,
        /// Output format: name (the default: one agent name a line), wide (a table), json or
        /// yaml: connected or not and since when, mode, agent and Kubernetes versions, events
        /// queued, Applications by sync and health status.
        #[arg(short, long, default_value = "")]
        output: String,
    },
    /// Inspect an agent's configuration.
    #[command(visible_alias = "show")]
    Inspect {
        name: String,
        /// Output format (json, yaml or text).
        #[arg(short, long, default_value = "json")]
        output: String,
    },
    /// Print a TLS asset of an agent to stdout.
    #[command(visible_alias = "dump-tls")]
    PrintTls {
        name: String,
        /// Type of asset to print (cert, key, or ca).
        #[arg(short = 't', long = "type", default_value = "cert")]
        what: String,
    },
    /// Reconfigures an agent's properties.
    Reconfigure {
        /// The agent's name.
        name: String,
        /// Address of principal's resource-proxy (host:port, or a full https:// server URL).
        #[arg(long = "resource-proxy-server", default_value = "")]
        resource_proxy_server: String,
        /// The username for the resource-proxy.
        #[arg(long = "resource-proxy-username", default_value = "")]
        resource_proxy_username: String,
        /// The password for the resource-proxy.
        #[arg(long = "resource-proxy-password", default_value = "")]
        resource_proxy_password: String,
        /// Reissue the agent's client cert.
        #[arg(long = "reissue-client-cert")]
        reissue_client_cert: bool,
        /// Number of days the client certificate is valid for (only used with --reissue-client-cert).
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
}

fn parse_labels(labels: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for l in labels {
        let Some((k, v)) = l.split_once('=') else {
            bail!("couldn't parse label definition '{l}' (expected key=value)");
        };
        if let Some(old) = m.insert(k.to_string(), v.to_string()) {
            bail!("label '{k}' already set with value '{old}'");
        }
    }
    Ok(m)
}

fn split_ref<'a>(r: &'a str, default_ns: &'a str) -> (&'a str, &'a str) {
    match r.split_once('/') {
        Some(("", n)) => (default_ns, n),
        Some((ns, n)) => (ns, n),
        None => (default_ns, r),
    }
}

struct Cluster {
    server: String,
    name: String,
    /// `data.config` as read (unknown fields kept when it is written back).
    raw_config: serde_json::Value,
    config: ClusterConfig,
    secret: Secret,
}

async fn load_cluster(c: &Clients, agent: &str) -> anyhow::Result<Option<Cluster>> {
    let ns = &c.principal_namespace;
    let Some(s) = Api::<Secret>::namespaced(c.principal.clone(), ns)
        .get_opt(&cluster_secret_name(agent))
        .await
        .with_context(|| format!("reading secret {ns}/{}", cluster_secret_name(agent)))?
    else {
        return Ok(None);
    };
    let field = |k: &str| -> String {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let raw_config: serde_json::Value = serde_json::from_str(&field("config"))
        .context("invalid cluster secret: data.config is not a cluster config")?;
    let config: ClusterConfig = serde_json::from_value(raw_config.clone())
        .context("invalid cluster secret: data.config is not a cluster config")?;
    Ok(Some(Cluster {
        server: field("server"),
        name: field("name"),
        raw_config,
        config,
        secret: s,
    }))
}

fn unb64(s: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .with_context(|| format!("invalid cluster secret: {what} is not base64"))
}

#[derive(Serialize)]
struct ClusterOut {
    server: String,
    name: String,
    #[serde(rename = "notValidBefore")]
    not_valid_before: String,
    #[serde(rename = "notValidAfter")]
    not_valid_after: String,
    fingerprint: String,
}

pub async fn run(cmd: &AgentCommand, c: &Clients) -> anyhow::Result<String> {
    let ns = &c.principal_namespace;
    match cmd {
        AgentCommand::Create {
            name,
            resource_proxy_server,
            labels,
            tls_from_secret,
            ca_from_secret,
            days,
            key,
        } => {
            if tls_from_secret.is_some() != ca_from_secret.is_some() {
                bail!("Both --tls-from-secret and --ca-from-secret must be provided together");
            }
            if tls_from_secret.is_some() {
                key.reject_unused("are only used when generating certificates from the PKI")?;
            }
            let labels = parse_labels(labels)?;
            let server = server_url(resource_proxy_server, name)?;
            let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
            match api.get_opt(&cluster_secret_name(name)).await {
                Err(e) => bail!("Reading cluster secret: {}", kube_msg(&e)),
                Ok(Some(_)) => bail!("Agent {name} exists."),
                Ok(None) => {}
            }
            let (cert, key_pem, ca) = match (tls_from_secret, ca_from_secret) {
                (Some(t), Some(a)) => {
                    let (tns, tname) = split_ref(t, ns);
                    let (ans, aname) = split_ref(a, ns);
                    let ts = get_secret(&c.principal, tns, tname)
                        .await
                        .with_context(|| format!("could not read TLS secret {tns}/{tname}"))?;
                    let get = |s: &Secret, k: &str, what: &str| -> anyhow::Result<Vec<u8>> {
                        s.data
                            .as_ref()
                            .and_then(|d| d.get(k))
                            .map(|b| b.0.clone())
                            .with_context(|| format!("{what} does not contain key '{k}'"))
                    };
                    let cert = get(&ts, "tls.crt", &format!("TLS secret {tns}/{tname}"))?;
                    let key = get(&ts, "tls.key", &format!("TLS secret {tns}/{tname}"))?;
                    argocd_pull_agent_core::tls::parse_certs(&cert)
                        .and_then(|_| argocd_pull_agent_core::tls::parse_key(&key))
                        .with_context(|| {
                            format!("invalid TLS certificate/key pair in secret {tns}/{tname}")
                        })?;
                    let cs = get_secret(&c.principal, ans, aname)
                        .await
                        .with_context(|| format!("could not read CA secret {ans}/{aname}"))?;
                    let ca = get(&cs, "ca.crt", &format!("CA secret {ans}/{aname}"))?;
                    (cert, key, ca)
                }
                (None, None) => {
                    let alg = key.parse()?;

                    let ca = load_ca(c).await?;
                    let issued = ca.issue_client_peer(name, *days, alg)?;
                    (
                        issued.cert_pem.into_bytes(),
                        issued.key_pem.into_bytes(),
                        ca.cert_pem.into_bytes(),
                    )
                }
                _ => bail!("Both --tls-from-secret and --ca-from-secret must be provided together"),
            };
            let s = cluster_secret(name, ns, &server, labels, &cert, &key_pem, &ca)?;
            put_secret(&c.principal, ns, s, false, &format!("Agent {name} exists.")).await?;
            Ok(format!("Agent {name} created\n"))
        }
        AgentCommand::List { labels, output } => {
            let format = super::agent_list::Format::parse(output)?;
            let mut sel = vec![LABEL_AGENT_NAME.to_string()];
            sel.extend(labels.iter().cloned());
            let list = Api::<Secret>::namespaced(c.principal.clone(), ns)
                .list(&ListParams::default().labels(&sel.join(",")))
                .await
                .context("Could not list secrets")?;
            if format != super::agent_list::Format::Name {
                let rows = super::agent_list::rows(&c.principal, ns, &list.items).await?;
                return super::agent_list::render(&rows, format);
            }
            if list.items.is_empty() {
                return Err(Exit::stdout("No agents found.\n", 1).into());
            }
            let mut names: Vec<String> = list
                .items
                .iter()
                .filter_map(|s| s.metadata.name.as_deref())
                .map(|n| n.strip_prefix("cluster-").unwrap_or(n).to_string())
                .collect();
            names.sort();
            Ok(names.into_iter().map(|n| n + "\n").collect())
        }
        AgentCommand::Inspect { name, output } => {
            let cl = load_cluster(c, name)
                .await
                .context("Unable to load agent configuration")?
                .ok_or_else(|| Exit::stderr(format!("No such agent configured: {name}\n"), 1))?;
            let pem = unb64(&cl.config.tls.cert_data, "certData")?;
            let certs = argocd_pull_agent_core::tls::parse_certs(&pem)
                .context("Not a valid certificate")?;
            if certs.len() > 1 {
                bail!(
                    "Certificate chain contains {} entries, but only 1 is expected. Please ensure the secret contains a single certificate.",
                    certs.len()
                );
            }
            let (_, x) = x509_parser::parse_x509_certificate(&certs[0])
                .map_err(|e| anyhow::anyhow!("Could not parse certificate: {e}"))?;
            let rfc3339 = |t: x509_parser::time::ASN1Time| {
                t.to_datetime()
                    .format(&time::format_description::well_known::Rfc3339)
                    .unwrap_or_default()
            };
            use sha2::Digest;
            let out = ClusterOut {
                server: cl.server,
                name: cl.name,
                not_valid_before: rfc3339(x.validity().not_before),
                not_valid_after: rfc3339(x.validity().not_after),
                fingerprint: hex::encode_upper(sha2::Sha256::digest(&certs[0])),
            };
            render(
                &out,
                output,
                &[
                    ("server", "Server address"),
                    ("name", "Server name"),
                    ("notValidBefore", "Not valid before"),
                    ("notValidAfter", "Not valid after"),
                    ("fingerprint", "Fingerprint (SHA-256)"),
                ],
            )
        }
        AgentCommand::PrintTls { name, what } => {
            let cl = load_cluster(c, name)
                .await
                .context("Error loading cluster")?
                .ok_or_else(|| Exit::stderr(format!("Agent '{name}' is not configured.\n"), 1))?;
            let t = &cl.config.tls;
            let data = match what.to_ascii_lowercase().as_str() {
                "cert" => unb64(&t.cert_data, "certData")?,
                "key" => unb64(&t.key_data, "keyData")?,
                "ca" => unb64(&t.ca_data, "caData")?,
                other => {
                    bail!("unknown TLS asset type {other:?}; expected one of cert, key, or ca")
                }
            };
            Ok(String::from_utf8(data).context("TLS asset is not PEM text")?)
        }
        AgentCommand::Reconfigure {
            name,
            resource_proxy_server,
            resource_proxy_username,
            resource_proxy_password,
            reissue_client_cert,
            days,
            key,
        } => {
            let cl = load_cluster(c, name)
                .await
                .context("Unable to load agent configuration")?
                .ok_or_else(|| {
                    Exit::stderr(format!("No configuration found for agent {name}\n"), 1)
                })?;
            if !reissue_client_cert {
                key.reject_unused("are only used with --reissue-client-cert")?;
            }
            reconfigure(
                c,
                name,
                cl,
                Reconfigure {
                    server: resource_proxy_server,
                    username: resource_proxy_username,
                    password: resource_proxy_password,
                    reissue: reissue_client_cert.then_some((*days, key)),
                },
            )
            .await
        }
    }
}

struct Reconfigure<'a> {
    server: &'a str,
    username: &'a str,
    password: &'a str,
    reissue: Option<(u32, &'a KeyFlags)>,
}

/// `agent reconfigure` (peer: `NewAgentReconfigureCommand`): each changed property is announced
/// on stderr (the peer's `cmd.Println`), then the secret is saved once. A `host:port` server is
/// written in the form `agent create` writes (`https://host:port?agentName=<agent>`); the peer
/// stores the value verbatim, which leaves a server URL Argo CD and `validate principal` reject.
async fn reconfigure(
    c: &Clients,
    name: &str,
    mut cl: Cluster,
    r: Reconfigure<'_>,
) -> anyhow::Result<String> {
    let mut said = String::new();
    let mut changed = false;
    if !r.server.is_empty() {
        let server = if r.server.starts_with("https://") || r.server.starts_with("http://") {
            r.server.to_string()
        } else {
            server_url(r.server, name)?
        };
        if server != cl.server {
            said.push_str("Setting new server address\n");
            cl.server = server;
            changed = true;
        }
    }
    let cfg = cl
        .raw_config
        .as_object_mut()
        .context("invalid cluster secret: data.config is not a JSON object")?;
    for (flag_value, key, msg) in [
        (r.username, "username", "Setting new username\n"),
        (r.password, "password", "Setting new password\n"),
    ] {
        if !flag_value.is_empty() && cfg.get(key).and_then(|v| v.as_str()) != Some(flag_value) {
            said.push_str(msg);
            cfg.insert(key.into(), flag_value.into());
            changed = true;
        }
    }
    if let Some((days, key)) = r.reissue {
        let alg = key.parse()?;
        let ca = load_ca(c).await?;
        let issued = ca.issue_client_peer(name, days, alg)?;
        let tls = cfg
            .entry("tlsClientConfig")
            .or_insert_with(|| serde_json::json!({"insecure": false}));
        let tls = tls
            .as_object_mut()
            .context("invalid cluster secret: tlsClientConfig is not a JSON object")?;
        tls.insert("caData".into(), b64(ca.cert_pem.as_bytes()).into());
        tls.insert("certData".into(), b64(issued.cert_pem.as_bytes()).into());
        tls.insert("keyData".into(), b64(issued.key_pem.as_bytes()).into());
        changed = true;
    }
    if !changed {
        return Ok(String::new());
    }
    let ns = &c.principal_namespace;
    let mut secret = cl.secret;
    let data = secret.data.get_or_insert_with(Default::default);
    data.insert(
        "server".into(),
        k8s_openapi::ByteString(cl.server.trim_end_matches('/').as_bytes().to_vec()),
    );
    data.insert(
        "config".into(),
        k8s_openapi::ByteString(serde_json::to_vec(&cl.raw_config)?),
    );
    Api::<Secret>::namespaced(c.principal.clone(), ns)
        .replace(
            &cluster_secret_name(name),
            &kube::api::PostParams::default(),
            &secret,
        )
        .await
        .map_err(|e| anyhow::anyhow!("Unable to save cluster secret: {}", kube_msg(&e)))?;
    said.push_str("Cluster configuration saved\n");
    Err(Exit::stderr(said, 0).into())
}
