//! `--tls-ciphersuites` (peer: internal/tlsutil `ParseCipherSuites`, `ValidateTLSConfig`,
//! cmd/cmdutil `PrintAvailableCipherSuites`): cipher suites named as Go's `crypto/tls` names
//! them, mapped to the rustls (ring) suites.
//!
//! Go cannot restrict TLS 1.3 suites (`tls.Config.CipherSuites` applies to TLS 1.2 only); rustls
//! can. So: a list naming TLS 1.3 suites restricts TLS 1.3 to them (ours), a list naming only
//! TLS 1.2 suites restricts TLS 1.2 and keeps every TLS 1.3 suite (Go's behaviour). As the peer's
//! `ValidateTLSConfig`, a suite must support the minimum TLS version when one is set.

use anyhow::bail;
use rustls::SupportedCipherSuite;
use rustls::crypto::ring::cipher_suite as cs;

/// Go's name, the rustls suite, whether it is a TLS 1.3 suite.
fn table() -> [(&'static str, SupportedCipherSuite, bool); 9] {
    [
        ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256, true),
        ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384, true),
        (
            "TLS_CHACHA20_POLY1305_SHA256",
            cs::TLS13_CHACHA20_POLY1305_SHA256,
            true,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            false,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            false,
        ),
        (
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            false,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            false,
        ),
        (
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            false,
        ),
        (
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            false,
        ),
    ]
}

/// Go names of suites Go knows that rustls does not implement (CBC, RSA key exchange, 3DES, RC4).
const GO_ONLY: &[&str] = &[
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
];

fn valid_names() -> String {
    table().iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
}

/// The flag's values (`[]`, `[""]` and empty entries mean "no restriction") to the suites to
/// offer, `None` when unrestricted. `min_tls13`: the minimum version is TLS 1.3 (`Some(true)`),
/// TLS 1.2 (`Some(false)`), or not set (`None`, no version check, as the peer's agent default).
pub fn parse(
    names: &[String],
    min_tls13: Option<bool>,
) -> anyhow::Result<Option<Vec<SupportedCipherSuite>>> {
    let names: Vec<&str> = names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Ok(None);
    }
    let t = table();
    let mut chosen = Vec::new();
    for n in &names {
        let Some((name, suite, is13)) = t.iter().find(|x| x.0 == *n) else {
            if GO_ONLY.contains(n) {
                bail!(
                    "cipher suite {n} is not supported by argocd-pull (rustls implements only AEAD suites with forward secrecy); valid names: {}",
                    valid_names()
                );
            }
            bail!(
                "no such cipher suite: {n}; valid names: {} (`--tls-ciphersuites list` prints them)",
                valid_names()
            );
        };
        if let Some(min13) = min_tls13
            && min13 != *is13
        {
            bail!(
                "cipher suite {name} is not supported by minimum TLS version {}: set --tls-min-version {} or name {} suites",
                if min13 { "TLS 1.3" } else { "TLS 1.2" },
                if *is13 { "tls1.3" } else { "tls1.2" },
                if min13 { "TLS 1.3" } else { "TLS 1.2" },
            );
        }
        if !chosen.contains(suite) {
            chosen.push(*suite);
        }
    }
    if !chosen.iter().any(|s| t.iter().any(|x| x.1 == *s && x.2)) {
        // Go restricts TLS 1.2 only: every TLS 1.3 suite stays
        chosen.extend(t.iter().filter(|x| x.2).map(|x| x.1));
    }
    Ok(Some(chosen))
}

/// `--tls-ciphersuites list` (peer: `PrintAvailableCipherSuites`).
pub fn list_text() -> String {
    let mut out = String::from("Available TLS cipher suites:\n\n");
    for (name, _, is13) in table() {
        out.push_str(&format!(
            "  {name}\n    Supported versions: {}\n",
            if is13 { "TLS 1.3" } else { "TLS 1.2" }
        ));
    }
    out
}

/// Whether the flag asks for the list.
pub fn is_list(names: &[String]) -> bool {
    names.len() == 1 && names[0].trim() == "list"
}

/// The ring provider restricted to `suites` (all of ring's when `None`).
pub fn provider(
    suites: Option<&[SupportedCipherSuite]>,
) -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    let mut p = rustls::crypto::ring::default_provider();
    if let Some(s) = suites {
        p.cipher_suites = s.to_vec();
    }
    std::sync::Arc::new(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn go_names_map_to_rustls_suites_with_the_peers_checks() {
        assert!(parse(&v(&[]), Some(true)).unwrap().is_none());
        assert!(
            parse(&v(&[""]), Some(true)).unwrap().is_none(),
            "an empty env value"
        );
        let s = parse(&v(&["TLS_AES_256_GCM_SHA384"]), Some(true))
            .unwrap()
            .unwrap();
        assert_eq!(s, vec![cs::TLS13_AES_256_GCM_SHA384]);
        // TLS 1.2 names only: TLS 1.3 stays whole (Go cannot restrict it)
        let s = parse(
            &v(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]),
            Some(false),
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.len(), 4);
        let e = parse(&v(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]), Some(true))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("not supported by minimum TLS version TLS 1.3"),
            "{e}"
        );
        let e = parse(&v(&["TLS_AES_128_GCM_SHA256"]), Some(false))
            .unwrap_err()
            .to_string();
        assert!(e.contains("minimum TLS version TLS 1.2"), "{e}");
        assert!(parse(&v(&["TLS_AES_128_GCM_SHA256"]), None).is_ok());
        let e = parse(&v(&["TLS_FOO"]), None).unwrap_err().to_string();
        assert!(
            e.contains("no such cipher suite: TLS_FOO; valid names: TLS_AES_128_GCM_SHA256"),
            "{e}"
        );
        let e = parse(&v(&["TLS_RSA_WITH_AES_128_CBC_SHA"]), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not supported by argocd-pull"), "{e}");
        assert!(
            list_text()
                .contains("  TLS_CHACHA20_POLY1305_SHA256\n    Supported versions: TLS 1.3\n")
        );
        assert!(is_list(&v(&["list"])));
    }
}
