//! `ctl pki inspect`: the summary of the CA, principal and resource-proxy certificates (the
//! peer's `certificateSummary`), with `--full` the details it leaves out.

use anyhow::Context;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Serialize;

use super::pem::pem_block;
use crate::Clients;
use crate::out::is_status;
use argocd_pull_agent_core::settings::tls_from_secret;

pub(super) const TEXT_LABELS: &[(&str, &str)] = &[
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
pub(super) struct InspectSummary {
    pub(super) ca: CertificateSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) principal: Option<CertificateSummary>,
    #[serde(rename = "resourceProxy", skip_serializing_if = "Option::is_none")]
    pub(super) resource_proxy: Option<CertificateSummary>,
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

pub(super) async fn summarize(
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
    let der = argocd_pull_agent_core::tls::parse_certs(&crt)?;
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
        subject: argocd_pull_agent_core::tls::subject_string(der)?,
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
