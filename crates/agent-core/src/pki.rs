//! A local PKI (rcgen): a CA, the principal's server certificate and agent client certificates
//! (CN = agent name), plus the principal's JWT signing key.

use std::path::Path;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::tls::TlsMaterial;

/// A certificate authority held in memory.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
    pub key_pem: String,
}

/// A PEM certificate and key.
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Ca {
    /// A new self-signed CA.
    pub fn new(common_name: &str) -> anyhow::Result<Ca> {
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, common_name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = p.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(p, key),
            key_pem,
        })
    }

    fn issue(&self, mut p: CertificateParams) -> anyhow::Result<Issued> {
        let key = KeyPair::generate()?;
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = p.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Server certificate for the principal: SANs localhost, 127.0.0.1, ::1 and `extra` names.
    pub fn issue_server(&self, extra: &[String]) -> anyhow::Result<Issued> {
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        names.extend(extra.iter().cloned());
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        for n in names {
            p.subject_alt_names
                .push(match n.parse::<std::net::IpAddr>() {
                    Ok(ip) => SanType::IpAddress(ip),
                    Err(_) => SanType::DnsName(n.clone().try_into()?),
                });
        }
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name
            .push(DnType::CommonName, "argocd-agent-principal");
        // client authentication too: a replica presents its principal certificate to the primary
        // (cross-cluster HA, as the peer's replication client)
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        self.issue(p)
    }

    /// Client certificate for an agent (CN = agent name). `validity`: (not_before, not_after).
    pub fn issue_agent(&self, agent: &str) -> anyhow::Result<Issued> {
        self.issue_agent_with(agent, None)
    }

    /// Like [`Ca::issue_agent`] with an explicit validity window (tests: expired certificates).
    pub fn issue_agent_with(
        &self,
        agent: &str,
        validity: Option<(time_like::Ts, time_like::Ts)>,
    ) -> anyhow::Result<Issued> {
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, agent);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        if let Some((a, b)) = validity {
            p.not_before = rcgen::date_time_ymd(a.0, a.1, a.2);
            p.not_after = rcgen::date_time_ymd(b.0, b.1, b.2);
        }
        self.issue(p)
    }

    /// A client certificate whose identity is a URI SAN (a service-mesh / SPIFFE workload
    /// certificate: `--auth mtls:uri:<regex>`), with subject CN `common_name`.
    pub fn issue_client_with_uri(&self, common_name: &str, uri: &str) -> anyhow::Result<Issued> {
        let mut p = CertificateParams::default();
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, common_name);
        p.subject_alt_names = vec![SanType::URI(uri.try_into()?)];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(p)
    }

    /// TLS material for the principal.
    pub fn principal_material(&self, server: &Issued) -> TlsMaterial {
        TlsMaterial {
            cert_pem: server.cert_pem.clone().into(),
            key_pem: server.key_pem.clone().into(),
            ca_pem: self.cert_pem.clone().into(),
        }
    }
}

/// Dates as (year, month, day).
pub mod time_like {
    pub type Ts = (i32, u8, u8);
}

/// Writes a complete PKI for a local setup into `dir`: `ca.crt`, `ca.key`, `principal.crt`,
/// `principal.key`, `jwt.key` and `<agent>.crt`/`<agent>.key` per agent. Refuses to overwrite.
pub fn write_local_pki(
    dir: &Path,
    agents: &[String],
    extra_names: &[String],
    overwrite: bool,
) -> anyhow::Result<Vec<std::path::PathBuf>> {
    for a in agents {
        anyhow::ensure!(
            crate::tls::is_dns_label(a),
            "agent name {a:?} is not a DNS label"
        );
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let ca = Ca::new("argocd-pull agent CA")?;
    let server = ca.issue_server(extra_names)?;
    let mut files: Vec<(String, String)> = vec![
        ("ca.crt".into(), ca.cert_pem.clone()),
        ("ca.key".into(), ca.key_pem.clone()),
        ("principal.crt".into(), server.cert_pem),
        ("principal.key".into(), server.key_pem),
        ("jwt.key".into(), crate::auth::generate_rsa_pem(2048)?),
    ];
    for a in agents {
        let c = ca.issue_agent(a)?;
        files.push((format!("{a}.crt"), c.cert_pem));
        files.push((format!("{a}.key"), c.key_pem));
    }
    if !overwrite {
        for (n, _) in &files {
            let p = dir.join(n);
            anyhow::ensure!(
                !p.exists(),
                "{} exists; pass --force to overwrite",
                p.display()
            );
        }
    }
    let mut out = Vec::new();
    for (n, content) in files {
        let p = dir.join(&n);
        // write to a temporary file and rename: nothing half-written
        let tmp = dir.join(format!(".{n}.tmp"));
        std::fs::write(&tmp, content).with_context(|| format!("writing {}", tmp.display()))?;
        #[cfg(unix)]
        if n.ends_with(".key") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&tmp, &p)?;
        out.push(p);
    }
    Ok(out)
}

/// Key algorithms of `--key-algorithm` (peer: internal/tlsutil/keygen.go; default RSA 4096, as the
/// peer). RSA keys come from the `rsa` crate (ring signs with them but cannot generate them);
/// `ecdsa-p521` is refused (ring has no P-521 signing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Rsa(usize),
    EcdsaP256,
    EcdsaP384,
    Ed25519,
}

impl KeyAlgorithm {
    /// `rsa` (with `bits` 2048/3072/4096), `ecdsa-p256`, `ecdsa-p384`, `ed25519`.
    pub fn parse(name: &str, rsa_bits: usize) -> anyhow::Result<Self> {
        Ok(match name {
            "rsa" => {
                anyhow::ensure!(
                    [2048, 3072, 4096].contains(&rsa_bits),
                    "unsupported RSA key size {rsa_bits}; supported sizes are 2048, 3072, 4096"
                );
                KeyAlgorithm::Rsa(rsa_bits)
            }
            "ecdsa-p256" => KeyAlgorithm::EcdsaP256,
            "ecdsa-p384" => KeyAlgorithm::EcdsaP384,
            "ed25519" => KeyAlgorithm::Ed25519,
            "ecdsa-p521" => anyhow::bail!(
                "ecdsa-p521 is not supported (ring); use ecdsa-p256, ecdsa-p384, ed25519 or rsa"
            ),
            other => anyhow::bail!(
                "unsupported key algorithm {other:?}; supported values are rsa, ecdsa-p256, ecdsa-p384, ed25519"
            ),
        })
    }

    /// A new private key.
    pub fn generate(self) -> anyhow::Result<KeyPair> {
        Ok(match self {
            KeyAlgorithm::Rsa(bits) => {
                use rsa::pkcs8::EncodePrivateKey;
                let key = rsa::RsaPrivateKey::new(&mut rand::thread_rng(), bits)
                    .context("generating RSA key")?;
                let der = key.to_pkcs8_der().context("encoding RSA key")?;
                KeyPair::from_pkcs8_der_and_sign_algo(
                    &rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes()),
                    &rcgen::PKCS_RSA_SHA256,
                )?
            }
            KeyAlgorithm::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?,
            KeyAlgorithm::EcdsaP384 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384)?,
            KeyAlgorithm::Ed25519 => KeyPair::generate_for(&rcgen::PKCS_ED25519)?,
        })
    }
}

/// Organization the peer puts into every certificate of its test PKI.
pub const PEER_ORGANIZATION: &str = "DO NOT USE IN PRODUCTION";
/// The peer's default validity of a CA (days).
pub const DEFAULT_CA_DAYS: u32 = 3650;
/// The peer's default validity of a leaf certificate (days).
pub const DEFAULT_LEAF_DAYS: u32 = 180;

fn peer_dn(common_name: &str) -> DistinguishedName {
    // Go's pkix.Name encodes O before CN; its String() reverses: "CN=<name>,O=DO NOT USE IN PRODUCTION"
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, PEER_ORGANIZATION);
    dn.push(DnType::CommonName, common_name);
    dn
}

fn validity(p: &mut CertificateParams, days: u32) -> anyhow::Result<()> {
    anyhow::ensure!(days > 0, "validity days must be greater than 0, got {days}");
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now;
    p.not_after = now + time::Duration::days(days.into());
    Ok(())
}

impl Ca {
    /// A CA shaped like the peer's `pki init` (CN `argocd-agent-ca` by default, O "DO NOT USE IN
    /// PRODUCTION", key usages digitalSignature + keyCertSign, extended usages client + server).
    pub fn new_peer(common_name: &str, days: u32, alg: KeyAlgorithm) -> anyhow::Result<Ca> {
        let mut p = CertificateParams::default();
        p.distinguished_name = peer_dn(common_name);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
        ];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        validity(&mut p, days)?;
        let key = alg.generate()?;
        let cert = p.self_signed(&key)?;
        let key_pem = key.serialize_pem();
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(p, key),
            key_pem,
        })
    }

    /// A CA from its PEM certificate and PKCS#8 PEM key (e.g. Secret `argocd-agent-ca`).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> anyhow::Result<Ca> {
        let key = KeyPair::from_pem(key_pem).context("reading the CA key (PKCS#8 PEM)")?;
        let issuer =
            Issuer::from_ca_cert_pem(cert_pem, key).context("reading the CA certificate")?;
        Ok(Ca {
            cert_pem: cert_pem.to_string(),
            issuer,
            key_pem: key_pem.to_string(),
        })
    }

    /// The CA certificate's `notAfter`.
    pub fn not_after(&self) -> anyhow::Result<time::OffsetDateTime> {
        let der = crate::tls::parse_certs(self.cert_pem.as_bytes())?;
        let (_, c) = x509_parser::parse_x509_certificate(&der[0])
            .map_err(|e| anyhow::anyhow!("parsing the CA certificate: {e}"))?;
        Ok(c.validity().not_after.to_datetime())
    }

    fn issue_peer(
        &self,
        mut p: CertificateParams,
        days: u32,
        alg: KeyAlgorithm,
    ) -> anyhow::Result<Issued> {
        validity(&mut p, days)?;
        let ca_end = self.not_after()?;
        anyhow::ensure!(
            p.not_after <= ca_end,
            "requested validity of {days} days exceeds CA expiry ({ca_end}); maximum is approximately {} days",
            (ca_end - time::OffsetDateTime::now_utc()).whole_days()
        );
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
        ];
        let key = alg.generate()?;
        let cert = p.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// A server certificate like the peer's `pki issue principal|resource-proxy`.
    pub fn issue_server_peer(
        &self,
        common_name: &str,
        ips: &[String],
        dns: &[String],
        days: u32,
        alg: KeyAlgorithm,
    ) -> anyhow::Result<Issued> {
        let mut p = CertificateParams::default();
        p.distinguished_name = peer_dn(common_name);
        for ip in ips {
            let ip: std::net::IpAddr = ip
                .trim()
                .parse()
                .with_context(|| format!("invalid IP address: {ip}"))?;
            p.subject_alt_names.push(SanType::IpAddress(ip));
        }
        for d in dns {
            p.subject_alt_names.push(SanType::DnsName(
                d.clone()
                    .try_into()
                    .with_context(|| format!("invalid DNS name: {d}"))?,
            ));
        }
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue_peer(p, days, alg)
    }

    /// A client certificate like the peer's `agent create` / `pki issue agent` (CN = agent).
    pub fn issue_client_peer(
        &self,
        agent: &str,
        days: u32,
        alg: KeyAlgorithm,
    ) -> anyhow::Result<Issued> {
        let mut p = CertificateParams::default();
        p.distinguished_name = peer_dn(agent);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue_peer(p, days, alg)
    }
}
