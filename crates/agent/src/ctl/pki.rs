//! `ctl pki …` (peer: cmd/ctl/ca.go): a test PKI in the peer's Secrets.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Serialize;

use super::out::{is_status, kube_msg, put_secret, read_answer, render, secret};
use super::{Clients, Exit};
use crate::cli::common::{
    SECRET_CA, SECRET_CLIENT_TLS, SECRET_PRINCIPAL_TLS, SECRET_RESOURCE_PROXY_TLS, tls_from_secret,
};
use crate::pki::{Ca, DEFAULT_CA_DAYS, DEFAULT_LEAF_DAYS, KeyAlgorithm};

/// Key generation flags (peer: cmd/ctl/pki_flags.go `addKeyGenFlags`; defaults rsa, 4096).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KeyFlags {
    /// Private key algorithm (rsa, ecdsa-p256, ecdsa-p384, ed25519) [default: rsa].
    #[arg(long = "key-algorithm")]
    pub algorithm: Option<String>,
    /// RSA key size in bits (2048, 3072, or 4096; ignored for non-RSA algorithms) [default: 4096].
    #[arg(long = "key-size")]
    pub size: Option<usize>,
}

impl KeyFlags {
    pub fn parse(&self) -> anyhow::Result<KeyAlgorithm> {
        KeyAlgorithm::parse(
            self.algorithm.as_deref().unwrap_or(DEFAULT_KEY_ALGORITHM),
            self.size.unwrap_or(DEFAULT_RSA_BITS),
        )
    }

    /// Fails when a key flag was given to a command that will not generate a key (peer:
    /// `rejectUnusedKeyGenFlags`).
    pub fn reject_unused(&self, context: &str) -> anyhow::Result<()> {
        if self.algorithm.is_some() || self.size.is_some() {
            bail!("--key-algorithm and --key-size {context}");
        }
        Ok(())
    }
}

/// The peer's `tlsutil.DefaultKeyAlgorithm` / `DefaultRSABits`.
pub const DEFAULT_KEY_ALGORITHM: &str = "rsa";
pub const DEFAULT_RSA_BITS: usize = 4096;

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
    /// Issue TLS certificates signed by the PKI's CA.
    #[command(subcommand, visible_alias = "new-cert")]
    Issue(IssueCommand),
    /// Inspect the configured PKI.
    Inspect {
        /// Output format (json, yaml or text).
        #[arg(short, long, default_value = "json")]
        output: String,
        /// Display the full certificates (issuer, serial, usages, PEM), not only the summary.
        #[arg(short, long)]
        full: bool,
    },
    /// Delete the configured PKI (the CA secret).
    Delete {
        /// Do not ask for confirmation (ours; the peer always asks).
        #[arg(long)]
        yes: bool,
    },
    /// Print PKI's CA data in PEM format to stdout.
    Dump {
        /// Print both, key and cert.
        #[arg(long)]
        all: bool,
        /// Print the private key.
        #[arg(long)]
        key: bool,
        /// Print the public certificate.
        #[arg(long)]
        cert: bool,
    },
    /// Propagate the PKI's CA certificate to the agent (Secret argocd-agent-ca, field ca.crt).
    Propagate {
        /// Replace the agent's CA secret if it exists.
        #[arg(short, long)]
        force: bool,
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
        /// The IP addresses this certificate is valid for.
        #[arg(long = "ip", value_delimiter = ',')]
        ips: Vec<String>,
        /// The DNS names this certificate is valid for.
        #[arg(long = "dns", value_delimiter = ',')]
        dns: Vec<String>,
        /// Whether to update an existing certificate if it exists.
        #[arg(short, long)]
        upsert: bool,
        /// Do not add SAN information to the certificate.
        #[arg(long = "no-san")]
        no_san: bool,
        /// Number of days the certificate is valid for.
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
            let der = crate::tls::parse_certs(&crt).context("Could not encode cert")?;
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

fn pem_block(tag: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {tag}-----\n");
    for chunk in b.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {tag}-----\n"));
    out
}

/// A private key PEM as PKCS#8 (`PRIVATE KEY`, the peer's `KeyDataToPEM`); an RSA PKCS#1 key is
/// converted, a PKCS#8 key printed as it is.
fn pkcs8_pem(key_pem: &[u8]) -> anyhow::Result<String> {
    use rustls::pki_types::PrivateKeyDer;
    match crate::tls::parse_key(key_pem)? {
        PrivateKeyDer::Pkcs8(k) => Ok(pem_block("PRIVATE KEY", k.secret_pkcs8_der())),
        PrivateKeyDer::Pkcs1(k) => {
            use rsa::pkcs1::DecodeRsaPrivateKey;
            use rsa::pkcs8::EncodePrivateKey;
            let key = rsa::RsaPrivateKey::from_pkcs1_der(k.secret_pkcs1_der())
                .context("reading the RSA key")?;
            Ok(pem_block(
                "PRIVATE KEY",
                key.to_pkcs8_der().context("encoding the key")?.as_bytes(),
            ))
        }
        _ => bail!("the CA key is neither PKCS#8 nor an RSA PKCS#1 key; convert it to PKCS#8"),
    }
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
    ("issuer", "Issuer"),
    ("serialNumber", "Serial number"),
    ("isCA", "Is CA"),
    ("signatureAlgorithm", "Signature algorithm"),
    ("keyUsage", "Key usage"),
    ("extKeyUsage", "Extended key usage"),
    ("pem", "PEM"),
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
    /// `--full` only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub full: Option<FullDetails>,
}

async fn summarize(
    c: &Clients,
    name: &str,
    is_ca: bool,
    full: bool,
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
    let mut sum = summary(&der[0], is_ca)?;
    if full {
        sum.full = Some(full_details(&der[0])?);
    }
    Ok(Some(sum))
}

/// `pki inspect --full`: what the summary leaves out (the peer accepts `--full` and ignores it).
fn full_details(der: &[u8]) -> anyhow::Result<FullDetails> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| anyhow::anyhow!("could not parse certificate: {e}"))?;
    let mut key_usage = Vec::new();
    if let Ok(Some(ku)) = cert.key_usage() {
        for (on, n) in [
            (ku.value.digital_signature(), "DigitalSignature"),
            (ku.value.non_repudiation(), "ContentCommitment"),
            (ku.value.key_encipherment(), "KeyEncipherment"),
            (ku.value.data_encipherment(), "DataEncipherment"),
            (ku.value.key_agreement(), "KeyAgreement"),
            (ku.value.key_cert_sign(), "CertSign"),
            (ku.value.crl_sign(), "CRLSign"),
        ] {
            if on {
                key_usage.push(n.to_string());
            }
        }
    }
    let mut ext_key_usage = Vec::new();
    if let Ok(Some(eku)) = cert.extended_key_usage() {
        if eku.value.server_auth {
            ext_key_usage.push("ServerAuth".to_string());
        }
        if eku.value.client_auth {
            ext_key_usage.push("ClientAuth".to_string());
        }
    }
    Ok(FullDetails {
        issuer: cert.issuer().to_string(),
        serial_number: cert.raw_serial_as_string(),
        is_ca: cert.is_ca(),
        signature_algorithm: cert.signature_algorithm.algorithm.to_id_string(),
        key_usage,
        ext_key_usage,
        pem: pem_block("CERTIFICATE", der),
    })
}

/// The fields `pki inspect --full` adds.
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct FullDetails {
    pub issuer: String,
    #[serde(rename = "serialNumber")]
    pub serial_number: String,
    #[serde(rename = "isCA")]
    pub is_ca: bool,
    #[serde(rename = "signatureAlgorithm")]
    pub signature_algorithm: String,
    #[serde(rename = "keyUsage", skip_serializing_if = "Vec::is_empty")]
    pub key_usage: Vec<String>,
    #[serde(rename = "extKeyUsage", skip_serializing_if = "Vec::is_empty")]
    pub ext_key_usage: Vec<String>,
    pub pem: String,
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
        full: None,
    })
}
