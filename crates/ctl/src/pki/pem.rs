//! PEM text of what `ctl pki` prints: a DER block, and a private key as PKCS#8.

use anyhow::{Context, bail};

pub(super) fn pem_block(tag: &str, der: &[u8]) -> String {
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
pub(super) fn pkcs8_pem(key_pem: &[u8]) -> anyhow::Result<String> {
    use rustls::pki_types::PrivateKeyDer;
    match argocd_pull_agent_core::tls::parse_key(key_pem)? {
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
