//! The certificate and key checks: TLS secrets of the principal and the agent (present, a pair,
//! valid now), the JWT signing key, a Route host among the principal certificate's names, and the
//! agent certificate's subject and signer against the principal.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;

use crate::Clients;
use crate::out::{is_status, kube_msg};
use argocd_pull_agent_core::settings::jwt_key_from_secret;

/// The peer's `tlsutil.TLSCertFromSecret`: a `kubernetes.io/tls` secret whose `tls.crt` and
/// `tls.key` form a pair; returns the DER certificates.
pub(super) async fn tls_cert_from_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Vec<Vec<u8>>, String> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| format!("could not read TLS secret {ns}/{name}: {}", kube_msg(&e)))?;
    if s.type_.as_deref() != Some("kubernetes.io/tls") {
        return Err(format!("{ns}/{name}: not a TLS secret"));
    }
    let data = s.data.unwrap_or_default();
    if data.is_empty() {
        return Err(format!("{ns}/{name}: empty secret"));
    }
    let (Some(crt), Some(key)) = (data.get("tls.crt"), data.get("tls.key")) else {
        return Err("either cert or key is missing in the secret".into());
    };
    let certs = argocd_pull_agent_core::tls::parse_certs(&crt.0)
        .and_then(|c| argocd_pull_agent_core::tls::parse_key(&key.0).map(|_| c))
        .map_err(|e| format!("invalid cert or key data: {e:#}"))?;
    Ok(certs.into_iter().map(|c| c.to_vec()).collect())
}

/// The leaf certificate of a TLS secret.
async fn leaf_from_tls_secret(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<Vec<u8>, String> {
    tls_cert_from_secret(client, ns, name)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| format!("{ns}/{name}: secret does not contain certificate data"))
}

fn parse<'a>(
    der: &'a [u8],
    ns: &str,
    name: &str,
) -> Result<x509_parser::certificate::X509Certificate<'a>, String> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| format!("could not parse certificate in secret {ns}/{name}: {e}"))
}

/// Go's `time.Time.String()` in UTC.
fn go_time(t: x509_parser::time::ASN1Time) -> String {
    let f = time::macros::format_description!(
        "[year]-[month]-[day] [hour]:[minute]:[second] +0000 UTC"
    );
    t.to_datetime().format(&f).unwrap_or_default()
}

pub(super) async fn cert_secret_valid(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let der = leaf_from_tls_secret(client, ns, name).await?;
    let c = parse(&der, ns, name)?;
    let now = x509_parser::time::ASN1Time::now();
    if now < c.validity().not_before {
        return Err(format!(
            "certificate in secret {ns}/{name} is not yet valid (valid from {})",
            go_time(c.validity().not_before)
        ));
    }
    if now > c.validity().not_after {
        return Err(format!("certificate in secret {ns}/{name} is expired"));
    }
    Ok(())
}

pub(super) async fn jwt_key_valid(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    use rsa::pkcs8::DecodePrivateKey;
    let pem = jwt_key_from_secret(client, ns, name)
        .await
        .map_err(|e| format!("{e:#}"))?;
    rsa::RsaPrivateKey::from_pkcs8_pem(&pem)
        .map(|_| ())
        .map_err(|_| "JWT signing key is not an RSA private key".to_string())
}

/// Some Route host is a name (or IP) of the principal's certificate (Go's `VerifyHostname`:
/// DNS SANs with a leading `*.` wildcard for one label, IP SANs for an IP host).
pub(super) async fn route_host_matches(
    client: &kube::Client,
    ns: &str,
    secret: &str,
    hosts: &[String],
) -> Result<(), String> {
    use x509_parser::extensions::GeneralName;
    let der = leaf_from_tls_secret(client, ns, secret).await?;
    let cert = parse(&der, ns, secret)?;
    let mut names = Vec::new();
    let mut ips = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push(d.to_ascii_lowercase()),
                GeneralName::IPAddress(b) => ips.push(b.to_vec()),
                _ => {}
            }
        }
    }
    let matches = |host: &str| -> bool {
        if let Ok(ip) = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            let b = match ip {
                std::net::IpAddr::V4(v) => v.octets().to_vec(),
                std::net::IpAddr::V6(v) => v.octets().to_vec(),
            };
            return ips.contains(&b);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        names.iter().any(|n| match n.strip_prefix("*.") {
            Some(suffix) => host
                .split_once('.')
                .is_some_and(|(first, rest)| !first.is_empty() && rest == suffix),
            None => *n == host,
        })
    };
    if hosts.iter().any(|h| !h.is_empty() && matches(h)) {
        return Ok(());
    }
    Err("no OpenShift Route host in namespace matches TLS IPS/DNS".into())
}

pub(super) async fn agent_ca_valid(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .map_err(|e| kube_msg(&e))?;
    let data = s.data.unwrap_or_default();
    if data.is_empty() {
        return Err(format!("{ns}/{name}: empty secret"));
    }
    let Some(ca) = data.get("ca.crt") else {
        return Err(format!("{ns}/{name}: missing ca.crt field"));
    };
    argocd_pull_agent_core::tls::parse_certs(&ca.0)
        .map(|_| ())
        .map_err(|e| format!("{ns}/{name}: ca.crt holds no certificate: {e:#}"))
}

pub(super) async fn client_cert_not_expired(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Result<(), String> {
    let der = leaf_from_tls_secret(client, ns, name).await?;
    let c = parse(&der, ns, name)?;
    let now = x509_parser::time::ASN1Time::now();
    if now < c.validity().not_before {
        return Err(format!(
            "agent certificate not yet valid (valid from {})",
            go_time(c.validity().not_before)
        ));
    }
    if now > c.validity().not_after {
        return Err(format!(
            "agent certificate expired at {}",
            go_time(c.validity().not_after)
        ));
    }
    Ok(())
}

pub(super) async fn namespace_matches_subject(c: &Clients, secret: &str) -> Result<(), String> {
    let ns = &c.agent_namespace;
    let der = leaf_from_tls_secret(&c.agent, ns, secret).await?;
    let cert = parse(&der, ns, secret)?;
    let cn = cert
        .subject()
        .iter_common_name()
        .next()
        .and_then(|a| a.as_str().ok())
        .unwrap_or_default()
        .trim()
        .to_string();
    if cn.is_empty() {
        return Err("agent certificate subject (CN) is empty".into());
    }
    match Api::<Namespace>::all(c.principal.clone()).get(&cn).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => {
            Err(format!("namespace '{cn}' not found on principal cluster"))
        }
        Err(e) => Err(kube_msg(&e)),
    }
}

pub(super) async fn signed_by_principal_ca(
    c: &Clients,
    client_secret: &str,
    ca_secret: &str,
) -> Result<(), String> {
    let leaf = leaf_from_tls_secret(&c.agent, &c.agent_namespace, client_secret).await?;
    let ca = leaf_from_tls_secret(&c.principal, &c.principal_namespace, ca_secret).await?;
    let leaf_c = parse(&leaf, &c.agent_namespace, client_secret)?;
    let ca_c = parse(&ca, &c.principal_namespace, ca_secret)?;
    leaf_c
        .verify_signature(Some(ca_c.public_key()))
        .map_err(|e| format!("agent certificate not signed by principal CA: {e}"))
}
