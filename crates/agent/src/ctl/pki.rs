//! `ctl pki …` (peer: cmd/ctl/ca.go): a test PKI in the peer's Secrets.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Serialize;

use super::Clients;
use super::out::{is_status, put_secret, render, secret};
use crate::cli::common::{
    SECRET_CA, SECRET_CLIENT_TLS, SECRET_PRINCIPAL_TLS, SECRET_RESOURCE_PROXY_TLS, tls_from_secret,
};
use crate::pki::{Ca, DEFAULT_CA_DAYS, DEFAULT_LEAF_DAYS, KeyAlgorithm};

/// Key generation flags (peer: cmd/ctl/pki_flags.go).
#[derive(clap::Args, Debug, Clone)]
pub struct KeyFlags {
    /// Key algorithm: ecdsa-p256, ecdsa-p384, ed25519 or rsa.
    #[arg(long = "key-algorithm", default_value = "ecdsa-p256")]
    pub algorithm: String,
    /// RSA key size in bits (2048, 3072, 4096), with --key-algorithm rsa.
    #[arg(long = "key-size", default_value_t = 4096)]
    pub size: usize,
}

impl KeyFlags {
    pub fn parse(&self) -> anyhow::Result<KeyAlgorithm> {
        KeyAlgorithm::parse(&self.algorithm, self.size)
    }
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum PkiCommand {
    /// Initialize the PKI: a CA in Secret argocd-agent-ca.
    Init {
        /// Force regeneration of the PKI if it exists.
        #[arg(short, long)]
        force: bool,
        /// Number of days the certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_CA_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue a certificate signed by the PKI's CA.
    #[command(subcommand)]
    Issue(IssueCommand),
    /// Inspect the configured PKI.
    Inspect {
        /// Output format (json, yaml or text).
        #[arg(short, long, default_value = "json")]
        output: String,
    },
    /// Delete the configured PKI (the CA secret).
    Delete {
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum IssueCommand {
    /// Issue the principal's gRPC server certificate (Secret argocd-agent-principal-tls).
    Principal {
        /// The IP addresses this certificate is valid for.
        #[arg(long = "ip", value_delimiter = ',', default_value = "127.0.0.1")]
        ips: Vec<String>,
        /// The DNS names this certificate is valid for.
        #[arg(long = "dns", value_delimiter = ',', default_value = "localhost")]
        dns: Vec<String>,
        /// Update an existing certificate.
        #[arg(short, long)]
        upsert: bool,
        /// Number of days the certificate is valid for.
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue the resource proxy's certificate (Secret argocd-agent-resource-proxy-tls).
    ResourceProxy {
        #[arg(long = "ip", value_delimiter = ',')]
        ips: Vec<String>,
        #[arg(long = "dns", value_delimiter = ',')]
        dns: Vec<String>,
        #[arg(short, long)]
        upsert: bool,
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        #[command(flatten)]
        key: KeyFlags,
    },
    /// Issue an agent's client certificate into the agent's cluster (Secret
    /// argocd-agent-client-tls) with the CA certificate (Secret argocd-agent-ca, field ca.crt).
    Agent {
        /// The agent's name (the certificate's CN).
        name: String,
        #[arg(short, long)]
        upsert: bool,
        #[arg(long, default_value_t = DEFAULT_LEAF_DAYS)]
        days: u32,
        /// Allow the PKI and the agent in the same kube context.
        #[arg(long = "same-context")]
        same_context: bool,
        #[command(flatten)]
        key: KeyFlags,
    },
}

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
            let alg = key.parse()?;
            let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
            if api.get_opt(SECRET_CA).await?.is_some() && !force {
                bail!("CA secret already exist. Please delete it before generating.");
            }
            let ca = Ca::new_peer(SECRET_CA, *days, alg)?;
            let s = secret(
                SECRET_CA,
                ns,
                "kubernetes.io/tls",
                &[
                    ("tls.crt", ca.cert_pem.as_bytes()),
                    ("tls.key", ca.key_pem.as_bytes()),
                ],
            );
            put_secret(&c.principal, ns, s, true, "").await?;
            Ok(format!(
                "Generating CA and storing it in secret\nSuccess. CA data stored in secret {ns}/{SECRET_CA}\n"
            ))
        }
        PkiCommand::Issue(i) => issue(i, c).await,
        PkiCommand::Inspect { output } => {
            let ca = summarize(c, SECRET_CA, true).await?.with_context(|| {
                format!("CA is not initialized: secret {ns}/{SECRET_CA} not found")
            })?;
            let sum = InspectSummary {
                ca,
                principal: summarize(c, SECRET_PRINCIPAL_TLS, false).await?,
                resource_proxy: summarize(c, SECRET_RESOURCE_PROXY_TLS, false).await?,
            };
            render(&sum, output, TEXT_LABELS)
        }
        PkiCommand::Delete { yes } => {
            let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
            if api.get_opt(SECRET_CA).await?.is_none() {
                bail!("CA not configured.");
            }
            if !yes {
                eprint!("Really delete CA (use uppercase YES to delete)? ");
                let mut answer = String::new();
                std::io::stdin().read_line(&mut answer)?;
                if answer.trim() != "YES" {
                    bail!("Aborted.");
                }
            }
            api.delete(SECRET_CA, &Default::default())
                .await
                .with_context(|| format!("Could not delete secret {SECRET_CA}"))?;
            Ok("CA successfully deleted.\n".into())
        }
    }
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
        } => {
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
            if c.same_context && !same_context {
                bail!(
                    "PKI and agent usually do not reside within the same context. Use --same-context if you really mean it (or set --agent-context)."
                );
            }
            anyhow::ensure!(
                crate::tls::is_dns_label(name),
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

const TEXT_LABELS: &[(&str, &str)] = &[
    ("ca", "CA"),
    ("principal", "Principal"),
    ("resourceProxy", "Resource Proxy"),
    ("subject", "Subject"),
    ("keyType", "Key type"),
    ("keyLength", "Key length"),
    ("notBefore", "Not valid before"),
    ("notAfter", "Not valid after"),
    ("sha256", "Checksum"),
    ("ips", "IPs"),
    ("dns", "DNS"),
    ("warnings", "Warnings"),
];

#[derive(Serialize)]
struct InspectSummary {
    ca: CertificateSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    principal: Option<CertificateSummary>,
    #[serde(rename = "resourceProxy", skip_serializing_if = "Option::is_none")]
    resource_proxy: Option<CertificateSummary>,
}

/// The peer's `certificateSummary`.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct CertificateSummary {
    pub subject: String,
    #[serde(rename = "keyType")]
    pub key_type: String,
    #[serde(rename = "keyLength")]
    pub key_length: u32,
    #[serde(rename = "notBefore")]
    pub not_before: String,
    #[serde(rename = "notAfter")]
    pub not_after: String,
    pub sha256: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dns: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

async fn summarize(
    c: &Clients,
    name: &str,
    is_ca: bool,
) -> anyhow::Result<Option<CertificateSummary>> {
    let ns = &c.principal_namespace;
    match Api::<Secret>::namespaced(c.principal.clone(), ns)
        .get(name)
        .await
    {
        Err(e) if is_status(&e, 404) => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading secret {ns}/{name}")),
        Ok(_) => {}
    }
    let (crt, _) = tls_from_secret(&c.principal, ns, name).await?;
    let der = crate::tls::parse_certs(&crt)?;
    summary(&der[0], is_ca).map(Some)
}

/// RFC 1123 with numeric zone (Go's `time.RFC1123Z`).
fn rfc1123z(t: time::OffsetDateTime) -> String {
    let f = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] +0000"
    );
    t.to_offset(time::UtcOffset::UTC)
        .format(&f)
        .unwrap_or_default()
}

/// Summary of a DER certificate (peer: `readAndSummarizeCertificate`).
pub fn summary(der: &[u8], is_ca: bool) -> anyhow::Result<CertificateSummary> {
    use sha2::Digest;
    use x509_parser::extensions::GeneralName;
    use x509_parser::public_key::PublicKey;
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| anyhow::anyhow!("could not parse certificate: {e}"))?;
    let mut warnings = Vec::new();
    let bc = cert.basic_constraints().ok().flatten();
    if is_ca && !bc.as_ref().is_some_and(|b| b.value.ca) {
        warnings.push("This is not a CA certificate".to_string());
    }
    if bc.is_none() {
        warnings.push("Basic constraints are invalid".to_string());
    }
    let (key_type, key_length) = match cert.public_key().parsed() {
        Ok(PublicKey::RSA(r)) => ("RSA", r.key_size() as u32),
        Ok(PublicKey::EC(p)) => ("ECDSA", p.key_size() as u32),
        _ if cert.public_key().algorithm.algorithm.to_id_string() == "1.3.101.112" => {
            ("Ed25519", 256)
        }
        _ => ("unknown", 0),
    };
    let (mut ips, mut dns) = (Vec::new(), Vec::new());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => dns.push(d.to_string()),
                GeneralName::IPAddress(b) => match b.len() {
                    4 => ips.push(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()),
                    16 => {
                        let a: [u8; 16] = (*b).try_into().unwrap_or([0; 16]);
                        ips.push(std::net::Ipv6Addr::from(a).to_string())
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Ok(CertificateSummary {
        subject: crate::tls::subject_string(der)?,
        key_type: key_type.into(),
        key_length,
        not_before: rfc1123z(cert.validity().not_before.to_datetime()),
        not_after: rfc1123z(cert.validity().not_after.to_datetime()),
        sha256: hex::encode(sha2::Sha256::digest(der)),
        ips,
        dns,
        warnings,
    })
}
