//! The advanced model's PKI as pure functions: issue the agent CA and its leaves, and decide when
//! an existing certificate must be re-issued (the peer's sdk-go `certrotation` rules, plus the
//! CA-rotation grace this project adds).
//!
//! Keys: the CA is RSA-2048 with a PKCS#1 key (`RSA PRIVATE KEY`, as the peer): OCM's CSR signer
//! (library-go) fails on any other CA key ("failed to parse private key"), found on the real env.
//! Leaves are ECDSA P-256 (PKCS#8; fast, so 1,000 clusters issue in seconds). `jwt.key` is
//! RSA-4096 PKCS#8, which the principal requires.

use std::collections::BTreeSet;
use std::net::IpAddr;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem as XPem;

/// CA lifetime (the peer's 365 days).
pub const CA_LIFETIME: Duration = Duration::days(365);
/// Leaf lifetime (the peer's 30 days), capped at the CA's `notAfter` − 2 s.
pub const LEAF_LIFETIME: Duration = Duration::days(30);
/// After a CA rotation, leaves signed by the previous CA are kept this long so that the bundle
/// (old + new CA) reaches every spoke before any peer presents a certificate of the new CA.
pub const ROTATION_GRACE: Duration = Duration::hours(1);

/// A PEM certificate (chain) and its PEM key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// What this module reads from a certificate.
#[derive(Clone, Debug)]
pub struct CertInfo {
    pub der: Vec<u8>,
    pub not_before: OffsetDateTime,
    pub not_after: OffsetDateTime,
    pub is_ca: bool,
    pub common_name: String,
    pub dns: BTreeSet<String>,
    pub ips: BTreeSet<IpAddr>,
    pub server_auth: bool,
    pub client_auth: bool,
}

impl CertInfo {
    /// The peer's renewal point: 80 % of the validity period.
    pub fn renew_at(&self) -> OffsetDateTime {
        self.not_after - (self.not_after - self.not_before) / 5
    }
}

/// Why a certificate is (re-)issued; `None` from a decision means keep it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reissue {
    Missing,
    Invalid(String),
    Expired,
    PastRenewal,
    SansChanged,
    WrongSubject,
    WrongUsage,
    /// Not signed by any CA in the bundle.
    UntrustedIssuer,
    /// Signed by a previous CA, and the rotation grace is over.
    CaRotated,
}

fn all_der(pem: &str) -> Vec<Vec<u8>> {
    XPem::iter_from_buffer(pem.as_bytes())
        .filter_map(Result::ok)
        .filter(|p| p.label == "CERTIFICATE")
        .map(|p| p.contents)
        .collect()
}

/// Every certificate of a PEM bundle, in order. Unparseable blocks are skipped.
pub fn parse_all(pem: &str) -> Vec<CertInfo> {
    all_der(pem)
        .into_iter()
        .filter_map(|d| info(d).ok())
        .collect()
}

/// The first certificate of a PEM string.
pub fn parse(pem: &str) -> Result<CertInfo, String> {
    let der = all_der(pem)
        .into_iter()
        .next()
        .ok_or("no CERTIFICATE block")?;
    info(der)
}

fn info(der: Vec<u8>) -> Result<CertInfo, String> {
    let (_, c) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let mut dns = BTreeSet::new();
    let mut ips = BTreeSet::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => {
                    dns.insert(d.to_string());
                }
                GeneralName::IPAddress(b) => {
                    if let Ok(a) = <[u8; 4]>::try_from(*b) {
                        ips.insert(IpAddr::from(a));
                    } else if let Ok(a) = <[u8; 16]>::try_from(*b) {
                        ips.insert(IpAddr::from(a));
                    }
                }
                _ => {}
            }
        }
    }
    let (server_auth, client_auth) = match c.extended_key_usage() {
        Ok(Some(e)) => (e.value.server_auth, e.value.client_auth),
        _ => (false, false),
    };
    let common_name = c
        .subject()
        .iter_common_name()
        .next()
        .and_then(|n| n.as_str().ok())
        .unwrap_or_default()
        .to_string();
    Ok(CertInfo {
        not_before: c.validity().not_before.to_datetime(),
        not_after: c.validity().not_after.to_datetime(),
        is_ca: c.is_ca(),
        common_name,
        dns,
        ips,
        server_auth,
        client_auth,
        der: der.clone(),
    })
}

/// Whether `leaf` is signed by `ca`.
pub fn signed_by(leaf: &CertInfo, ca: &CertInfo) -> bool {
    let (Ok((_, l)), Ok((_, c))) = (
        x509_parser::parse_x509_certificate(&leaf.der),
        x509_parser::parse_x509_certificate(&ca.der),
    ) else {
        return false;
    };
    l.verify_signature(Some(c.public_key())).is_ok()
}

fn random_serial() -> SerialNumber {
    let mut b: [u8; 16] = rand::random();
    b[0] &= 0x7f;
    SerialNumber::from_slice(&b)
}

/// A new self-signed CA: CN `argocd-agent-ca@<unix seconds>`, 365 days, notBefore now − 1 s.
pub fn new_ca(now: OffsetDateTime) -> Result<Pem, String> {
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(
        DnType::CommonName,
        format!("argocd-agent-ca@{}", now.unix_timestamp()),
    );
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::KeyCertSign,
    ];
    p.not_before = now - Duration::seconds(1);
    p.not_after = now + CA_LIFETIME;
    p.serial_number = Some(random_serial());
    let (key, pkcs1) = rsa_key(2048)?;
    let cert = p.self_signed(&key).map_err(|e| e.to_string())?;
    Ok(Pem {
        cert: cert.pem(),
        key: pkcs1,
    })
}

/// A new RSA key: the rcgen key pair and its PKCS#1 PEM.
fn rsa_key(bits: usize) -> Result<(KeyPair, String), String> {
    use rsa::pkcs1::{EncodeRsaPrivateKey, LineEnding};
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), bits).map_err(|e| e.to_string())?;
    let pem = key
        .to_pkcs1_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?
        .to_string();
    Ok((ca_keypair(&pem)?, pem))
}

/// The CA's key pair from PEM: PKCS#8 (any type) or PKCS#1 RSA.
pub fn ca_keypair(pem: &str) -> Result<KeyPair, String> {
    if let Ok(k) = KeyPair::from_pem(pem) {
        return Ok(k);
    }
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::EncodePrivateKey;
    let key = rsa::RsaPrivateKey::from_pkcs1_pem(pem).map_err(|e| format!("CA key: {e}"))?;
    let der = key.to_pkcs8_der().map_err(|e| e.to_string())?;
    KeyPair::from_pkcs8_der_and_sign_algo(
        &rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes()),
        &rcgen::PKCS_RSA_SHA256,
    )
    .map_err(|e| format!("CA key: {e}"))
}

/// The kind of leaf to issue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leaf {
    /// ServerAuth, with these SANs (IPs go in IP SANs); `tls.crt` = leaf + CA.
    Server(Vec<String>),
    /// ClientAuth, CN = the name; `tls.crt` = leaf only.
    Client(String),
}

/// Issues `leaf` signed by `ca`: 30 days capped at the CA's notAfter − 2 s.
pub fn issue(ca: &Pem, leaf: &Leaf, now: OffsetDateTime) -> Result<Pem, String> {
    let ca_info = parse(&ca.cert)?;
    let ca_key = ca_keypair(&ca.key)?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert, ca_key).map_err(|e| format!("CA: {e}"))?;
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.not_before = now - Duration::seconds(1);
    p.not_after = (now + LEAF_LIFETIME).min(ca_info.not_after - Duration::seconds(2));
    p.serial_number = Some(random_serial());
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    match leaf {
        Leaf::Server(sans) => {
            // As the peer (library-go): CN = the lexicographically smallest name.
            let cn = sans.iter().min().cloned().unwrap_or_default();
            p.distinguished_name.push(DnType::CommonName, cn);
            for n in sans {
                p.subject_alt_names.push(match n.parse::<IpAddr>() {
                    Ok(ip) => SanType::IpAddress(ip),
                    Err(_) => SanType::DnsName(
                        n.clone()
                            .try_into()
                            .map_err(|e| format!("SAN {n:?}: {e}"))?,
                    ),
                });
            }
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        Leaf::Client(cn) => {
            p.distinguished_name.push(DnType::CommonName, cn.as_str());
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
    }
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = p.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
    let mut chain = cert.pem();
    if matches!(leaf, Leaf::Server(_)) {
        chain.push_str(ca.cert.trim_end());
        chain.push('\n');
    }
    Ok(Pem {
        cert: chain,
        key: key.serialize_pem(),
    })
}

/// Whether the CA must be (re-)issued.
pub fn ca_decision(existing: Option<&Pem>, now: OffsetDateTime) -> Option<Reissue> {
    let Some(ca) = existing else {
        return Some(Reissue::Missing);
    };
    let info = match parse(&ca.cert) {
        Ok(i) => i,
        Err(e) => return Some(Reissue::Invalid(e)),
    };
    match ca_keypair(&ca.key) {
        Err(_) => return Some(Reissue::Invalid("unreadable key".into())),
        Ok(k) if k.algorithm() != &rcgen::PKCS_RSA_SHA256 => {
            return Some(Reissue::Invalid(
                "the CA key must be RSA (OCM's CSR signer reads no other)".into(),
            ));
        }
        Ok(_) => {}
    }
    if !info.is_ca {
        return Some(Reissue::WrongUsage);
    }
    if now >= info.not_after {
        return Some(Reissue::Expired);
    }
    (now >= info.renew_at()).then_some(Reissue::PastRenewal)
}

/// Whether a leaf must be (re-)issued. `bundle[0]` is the current CA, the rest older CAs still
/// trusted; `ca_since` is when the current CA was issued (its notBefore).
pub fn leaf_decision(
    existing: Option<&Pem>,
    want: &Leaf,
    bundle: &[CertInfo],
    now: OffsetDateTime,
) -> Option<Reissue> {
    let Some(leaf) = existing else {
        return Some(Reissue::Missing);
    };
    let info = match parse(&leaf.cert) {
        Ok(i) => i,
        Err(e) => return Some(Reissue::Invalid(e)),
    };
    if KeyPair::from_pem(&leaf.key).is_err() {
        return Some(Reissue::Invalid("unreadable key".into()));
    }
    if now >= info.not_after {
        return Some(Reissue::Expired);
    }
    if now >= info.renew_at() {
        return Some(Reissue::PastRenewal);
    }
    match want {
        Leaf::Server(sans) => {
            if !info.server_auth {
                return Some(Reissue::WrongUsage);
            }
            let (ips, dns) = split_sans(sans);
            if ips != info.ips || dns != info.dns {
                return Some(Reissue::SansChanged);
            }
        }
        Leaf::Client(cn) => {
            if !info.client_auth {
                return Some(Reissue::WrongUsage);
            }
            if &info.common_name != cn {
                return Some(Reissue::WrongSubject);
            }
        }
    }
    let Some(current) = bundle.first() else {
        return Some(Reissue::UntrustedIssuer);
    };
    if signed_by(&info, current) {
        return None;
    }
    if !bundle[1..].iter().any(|ca| signed_by(&info, ca)) {
        return Some(Reissue::UntrustedIssuer);
    }
    (now >= current.not_before + ROTATION_GRACE).then_some(Reissue::CaRotated)
}

fn split_sans(sans: &[String]) -> (BTreeSet<IpAddr>, BTreeSet<String>) {
    let mut ips = BTreeSet::new();
    let mut dns = BTreeSet::new();
    for s in sans {
        match s.parse::<IpAddr>() {
            Ok(ip) => {
                ips.insert(ip);
            }
            Err(_) => {
                dns.insert(s.clone());
            }
        }
    }
    (ips, dns)
}

/// The CA bundle: the current CA first, then the older CAs of `previous` that have not
/// expired, deduplicated (the peer's `ca-bundle.crt`; also shipped to spokes, so that a CA
/// rotation trusts old and new together until every leaf is re-issued).
pub fn ca_bundle(current_ca_pem: &str, previous: &str, now: OffsetDateTime) -> String {
    let current = all_der(current_ca_pem);
    let mut seen: Vec<Vec<u8>> = Vec::new();
    let mut out = String::new();
    for der in current.into_iter().take(1).chain(all_der(previous)) {
        if seen.contains(&der) {
            continue;
        }
        let Ok(i) = info(der.clone()) else { continue };
        if now >= i.not_after {
            continue;
        }
        out.push_str(&pem_encode(&der));
        seen.push(der);
    }
    out
}

fn pem_encode(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str("-----END CERTIFICATE-----\n");
    s
}

/// The principal's JWT signing key: RSA-4096, PKCS#8 PEM (`PRIVATE KEY`).
pub fn jwt_key() -> Result<String, String> {
    use rsa::pkcs8::{EncodePrivateKey, LineEnding};
    let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), 4096).map_err(|e| e.to_string())?;
    key.to_pkcs8_pem(LineEnding::LF)
        .map(|k| k.to_string())
        .map_err(|e| e.to_string())
}

/// Whether an existing `jwt.key` is a usable PKCS#8 RSA key.
pub fn jwt_key_valid(pem: &str) -> bool {
    use rsa::pkcs8::DecodePrivateKey;
    rsa::RsaPrivateKey::from_pkcs8_pem(pem).is_ok()
}

/// The earliest instant at which any of these certificates needs attention (renewal point or
/// the end of a rotation grace): the reconciler requeues for it.
pub fn next_check(certs: &[CertInfo]) -> Option<OffsetDateTime> {
    certs.iter().map(CertInfo::renew_at).min()
}

#[cfg(test)]
#[path = "pki_tests.rs"]
mod tests;
