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
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
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
