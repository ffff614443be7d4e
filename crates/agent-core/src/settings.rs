//! Helpers shared by `principal`, `agent` and the ctl commands: duration and TLS-version parsing,
//! the `--auth` / `--creds` syntax, the Kubernetes client from `--kubeconfig`/`--kubecontext`, and
//! TLS material / JWT keys read from the peer's Secrets.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// The peer's Secret names (peer: internal/config/constants.go).
pub const SECRET_CA: &str = "argocd-agent-ca";
pub const SECRET_PRINCIPAL_TLS: &str = "argocd-agent-principal-tls";
pub const SECRET_RESOURCE_PROXY_TLS: &str = "argocd-agent-resource-proxy-tls";
pub const SECRET_CLIENT_TLS: &str = "argocd-agent-client-tls";
pub const SECRET_JWT: &str = "argocd-agent-jwt";

/// Default gRPC message size limit of the peer (200 MiB, internal/grpcutil).
pub const DEFAULT_GRPC_MAX_MESSAGE_SIZE: usize = 200 * 1024 * 1024;

pub fn read(p: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(p).with_context(|| format!("reading {}", p.display()))
}

/// A Go-style duration: `0`, `500ms`, `30s`, `2m`, `1h`, `1m30s`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let err = || format!("invalid duration {s:?} (e.g. 0, 500ms, 30s, 2m, 1h30m)");
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let mut rest = s;
    let mut total = std::time::Duration::ZERO;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .ok_or_else(|| format!("{} (missing unit)", err()))?;
        let n: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        total += match unit {
            "ms" => std::time::Duration::from_millis(n),
            "s" => std::time::Duration::from_secs(n),
            "m" => std::time::Duration::from_secs(n * 60),
            "h" => std::time::Duration::from_secs(n * 3600),
            _ => {
                return Err(format!(
                    "invalid duration unit {unit:?} in {s:?} (ms, s, m, h)"
                ));
            }
        };
    }
    Ok(total)
}

/// `--tls-min-version` / `--tls-max-version` (`tls1.1`, `tls1.2`, `tls1.3`, or empty) to whether
/// TLS 1.2 is allowed. rustls speaks TLS 1.2 and 1.3 only, so a range that needs anything else, or
/// TLS 1.2 alone, is refused with an explanation.
pub fn allow_tls12(min: &str, max: &str, default_min: &str) -> anyhow::Result<bool> {
    fn v(s: &str, flag: &str) -> anyhow::Result<Option<u8>> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" => Ok(None),
            "tls1.0" | "tls1.1" => bail!(
                "{flag} {s}: TLS versions below 1.2 are not supported (rustls); use tls1.2 or tls1.3"
            ),
            "tls1.2" => Ok(Some(2)),
            "tls1.3" => Ok(Some(3)),
            _ => bail!("{flag} {s:?}: expected one of tls1.1, tls1.2, tls1.3"),
        }
    }
    let min = v(min, "--tls-min-version")?
        .or(v(default_min, "--tls-min-version")?)
        .unwrap_or(2);
    let max = v(max, "--tls-max-version")?.unwrap_or(3);
    if min > max {
        bail!("--tls-min-version is above --tls-max-version");
    }
    if max == 2 {
        bail!(
            "--tls-max-version tls1.2 (TLS 1.2 only) is not supported: TLS 1.3 is always offered; leave --tls-max-version empty"
        );
    }
    Ok(min == 2)
}

/// Where the principal takes the agent identity from (`--auth mtls:subject:<re>|mtls:uri:<re>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentitySource {
    /// The certificate subject in Go's `pkix.Name.String()` form (`CN=agent-1`).
    Subject,
    /// A URI SAN (e.g. SPIFFE `spiffe://domain/ns/x/sa/<agent>`).
    Uri,
    /// A request header set by a service-mesh sidecar that terminated the agent's mTLS
    /// (`--auth header:<name>:<regex>`, with `--insecure-plaintext`).
    Header(String),
}

/// A parsed `--auth` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthMethod {
    pub source: IdentitySource,
    pub regex: String,
}

/// Parses the principal's `--auth` (peer: cmd/argocd-agent/principal.go `parseAuth`,
/// `parseMTLSConfig`): `mtls:subject:<regex>`, `mtls:uri:<regex>`, `mtls:<regex>` (deprecated,
/// subject), `header:<name>:<regex>` (service mesh, with `--insecure-plaintext`). `userpass:` is refused.
pub fn parse_auth(s: &str) -> anyhow::Result<AuthMethod> {
    let (method, config) = s.split_once(':').ok_or_else(|| {
        anyhow!("invalid --auth {s:?}: expected mtls:subject:<regex> or mtls:uri:<regex>")
    })?;
    match method {
        "mtls" => {
            let (source, regex) = if let Some(r) = config.strip_prefix("subject:") {
                (IdentitySource::Subject, r)
            } else if let Some(r) = config.strip_prefix("uri:") {
                (IdentitySource::Uri, r)
            } else {
                tracing::warn!(
                    "DEPRECATED: --auth mtls:<regex> without a source; use mtls:subject:<regex> or mtls:uri:<regex>"
                );
                (IdentitySource::Subject, config)
            };
            let regex = if regex.is_empty() {
                crate::tls::DEFAULT_IDENTITY_REGEX
            } else {
                regex
            };
            let re = regex::Regex::new(regex)
                .with_context(|| format!("--auth: invalid regex {regex:?}"))?;
            if re.captures_len() < 2 {
                bail!("--auth: the regex {regex:?} needs a capture group for the agent name");
            }
            Ok(AuthMethod {
                source,
                regex: regex.to_string(),
            })
        }
        "header" => {
            // peer: parseHeaderAuth
            let (name, regex) = config.split_once(':').ok_or_else(|| {
                anyhow!("--auth: header auth config must be in format <header-name>:<extraction-regex>, got: {config}")
            })?;
            let (name, regex) = (name.trim(), regex.trim());
            if name.is_empty() {
                bail!("--auth: header name cannot be empty");
            }
            if regex.is_empty() {
                bail!("--auth: extraction regex cannot be empty");
            }
            let re = regex::Regex::new(regex)
                .with_context(|| format!("--auth: invalid extraction regex {regex:?}"))?;
            if re.captures_len() < 2 {
                bail!("--auth: the regex {regex:?} needs a capture group for the agent name");
            }
            Ok(AuthMethod {
                source: IdentitySource::Header(name.to_ascii_lowercase()),
                regex: regex.to_string(),
            })
        }
        "userpass" => bail!(
            "--auth userpass:… is deprecated in argocd-agent and not supported by argocd-pull; use mtls:subject:<regex>"
        ),
        other => bail!("--auth: unknown auth method {other:?} (expected mtls)"),
    }
}

/// Checks the agent's `--creds` (peer: `mtls:<anything>`, `userpass:<path>`, `header:`): mTLS (also
/// empty) and `header:` (identity set by a service mesh, with `--insecure-plaintext`).
pub fn check_creds(creds: &str) -> anyhow::Result<()> {
    match creds.split_once(':').map(|x| x.0).unwrap_or(creds) {
        "" | "mtls" | "header" => Ok(()),
        "userpass" => bail!(
            "--creds userpass:… is not supported by argocd-pull: agents authenticate with their client certificate (--creds mtls: or no --creds)"
        ),
        other => bail!("--creds: unknown method {other:?} (expected mtls:)"),
    }
}

/// The namespace when `--namespace` is not given: the pod's own namespace in a cluster, else
/// `argocd`.
pub fn default_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "argocd".into())
}

/// A Kubernetes client from `--kubeconfig` / `--kubecontext`, else `KUBECONFIG` / in-cluster.
pub async fn kube_client(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    Ok(kube_client_and_config(kubeconfig, context).await?.0)
}

/// [`kube_client`] and the configuration it was built from (for a second client on another
/// runtime).
pub async fn kube_client_and_config(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
) -> anyhow::Result<(kube::Client, kube::Config)> {
    // a bad ARGOCD_AGENT_KUBE_QPS / _BURST is reported before the kubeconfig is looked for
    let limits = crate::env_tuning::kube_limits()?;
    let config = kube_config(kubeconfig, context).await?;
    let client = crate::kube_client::with_limits(config.clone(), limits)
        .context("creating the Kubernetes client")?;
    Ok((client, config))
}

/// The configuration [`kube_client`] builds its client from.
pub async fn kube_config(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let opts = kube::config::KubeConfigOptions {
        context: context.map(str::to_string),
        ..Default::default()
    };
    Ok(match kubeconfig {
        Some(p) => {
            let kc = kube::config::Kubeconfig::read_from(p)
                .with_context(|| format!("reading kubeconfig {}", p.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &opts).await?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&opts).await?,
        None => kube::Config::infer().await?,
    })
}

/// Reads Secret `namespace/name`; a clear error when it is missing.
pub async fn get_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Secret> {
    Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading secret {namespace}/{name}"))?
        .ok_or_else(|| anyhow!("secret {namespace}/{name} not found"))
}

fn field<'a>(s: &'a Secret, key: &str) -> Option<&'a [u8]> {
    s.data.as_ref()?.get(key).map(|b| b.0.as_slice())
}

/// `tls.crt` and `tls.key` of a `kubernetes.io/tls` Secret (peer: tlsutil.TLSCertFromSecret).
pub async fn tls_from_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
    let s = get_secret(client, namespace, name).await?;
    if s.type_.as_deref() != Some("kubernetes.io/tls") {
        bail!("{namespace}/{name}: not a TLS secret (type kubernetes.io/tls expected)");
    }
    let crt = field(&s, "tls.crt");
    let key = field(&s, "tls.key");
    match (crt, key) {
        (Some(c), Some(k)) => Ok((c.to_vec(), k.to_vec())),
        _ => bail!("{namespace}/{name}: either tls.crt or tls.key is missing"),
    }
}

/// CA certificates from the given fields of a Secret, concatenated (peer:
/// tlsutil.X509CertPoolFromSecret; the principal reads `tls.crt` and `ca.crt`, the agent every
/// field).
pub async fn ca_from_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    fields: &[&str],
) -> anyhow::Result<Vec<u8>> {
    let s = get_secret(client, namespace, name).await?;
    let mut out = Vec::new();
    let mut keys: Vec<_> = s.data.iter().flatten().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    for (k, v) in keys {
        if !fields.is_empty() && !fields.contains(&k.as_str()) {
            continue;
        }
        crate::tls::parse_certs(&v.0).with_context(|| {
            format!("{namespace}/{name}: field {k} does not hold a certificate")
        })?;
        out.extend_from_slice(&v.0);
        out.push(b'\n');
    }
    if out.is_empty() {
        bail!("{namespace}/{name}: none of the fields {fields:?} found");
    }
    Ok(out)
}

/// The JWT signing key (`jwt.key`, PKCS#8 PEM) of a Secret (peer: tlsutil.JWTSigningKeyFromSecret).
pub async fn jwt_key_from_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<String> {
    let s = get_secret(client, namespace, name).await?;
    let key = field(&s, "jwt.key").ok_or_else(|| {
        anyhow!("JWT signing key (jwt.key) is missing in secret {namespace}/{name}")
    })?;
    String::from_utf8(key.to_vec())
        .map_err(|_| anyhow!("JWT signing key in secret {namespace}/{name} is not PEM"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("0").unwrap().as_secs(), 0);
        assert_eq!(parse_duration("30s").unwrap().as_secs(), 30);
        assert_eq!(parse_duration("1m30s").unwrap().as_secs(), 90);
        assert_eq!(parse_duration("2h").unwrap().as_secs(), 7200);
        assert_eq!(parse_duration("250ms").unwrap().as_millis(), 250);
        assert!(parse_duration("30").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn tls_versions() {
        assert!(!allow_tls12("", "", "tls1.3").unwrap(), "principal default");
        assert!(
            allow_tls12("", "", "").unwrap(),
            "agent default: Go's TLS 1.2 minimum"
        );
        assert!(allow_tls12("tls1.2", "", "tls1.3").unwrap());
        assert!(!allow_tls12("tls1.3", "tls1.3", "").unwrap());
        let e = allow_tls12("tls1.1", "", "").unwrap_err().to_string();
        assert!(e.contains("below 1.2"), "{e}");
        assert!(allow_tls12("tls1.2", "tls1.2", "").is_err());
        assert!(allow_tls12("ssl3", "", "").is_err());
    }

    #[test]
    fn auth_forms() {
        let a = parse_auth("mtls:subject:^CN=(.+)$").unwrap();
        assert_eq!(a.source, IdentitySource::Subject);
        assert_eq!(a.regex, "^CN=(.+)$");
        let a = parse_auth("mtls:uri:spiffe://x/ns/a/sa/(.+)").unwrap();
        assert_eq!(a.source, IdentitySource::Uri);
        let a = parse_auth("mtls:CN=([^,]+)").unwrap();
        assert_eq!(a.source, IdentitySource::Subject);
        assert_eq!(a.regex, "CN=([^,]+)");
        assert!(
            parse_auth("mtls:subject:CN=.+").is_err(),
            "no capture group"
        );
        let a =
            parse_auth("header:X-Forwarded-Client-Cert:^.*URI=spiffe://[^/]+/ns/[^/]+/sa/([^,;]+)")
                .unwrap();
        assert_eq!(
            a.source,
            IdentitySource::Header("x-forwarded-client-cert".into())
        );
        assert!(parse_auth("header:l5d-client-id").is_err(), "no regex");
        assert!(parse_auth("header::(.+)").is_err(), "no name");
        assert!(check_creds("header:").is_ok());
        assert!(parse_auth("mtls").is_err());
        assert!(check_creds("mtls:any").is_ok());
        assert!(check_creds("").is_ok());
        assert!(check_creds("userpass:/app/creds").is_err());
    }
}
