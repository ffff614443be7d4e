//! The Argo CD cluster Secret of an agent (`cluster-<agent>` in the principal's namespace): what
//! `argocd-pull ctl agent create` writes and what the principal's self-registration writes
//! (peer: cmd/ctl/agent.go, internal/argocd/cluster/conversion.go).

use std::collections::BTreeMap;

use anyhow::bail;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use serde::Serialize;

/// Label mapping a cluster secret to its agent.
pub const LABEL_AGENT_NAME: &str = "argocd-agent.argoproj-labs.io/agent-name";
/// Argo CD's secret-type label.
pub const LABEL_SECRET_TYPE: &str = "argocd.argoproj.io/secret-type";
/// Argo CD's skip-reconcile annotation (set to `"true"` on agent clusters).
pub const ANNOTATION_SKIP_RECONCILE: &str = "argocd.argoproj.io/skip-reconcile";
/// Argo CD's `managed-by` annotation; the peer writes `argocd-agent`.
pub const ANNOTATION_MANAGED_BY: &str = "managed-by";
/// The peer's default resource-proxy address.
pub const DEFAULT_RESOURCE_PROXY: &str = "argocd-agent-resource-proxy:9090";

/// `cluster-<agent>`.
pub fn cluster_secret_name(agent: &str) -> String {
    format!("cluster-{agent}")
}

/// `https://<address>?agentName=<agent>` after the peer's checks (`serverURL`).
pub fn server_url(address: &str, agent: &str) -> anyhow::Result<String> {
    if address.parse::<std::net::SocketAddr>().is_err() {
        let Some((host, port)) = address.split_once(':') else {
            bail!("invalid address: {address} (expected host:port)");
        };
        let dns_subdomain =
            !host.is_empty() && host.len() <= 253 && host.split('.').all(crate::tls::is_dns_label);
        if !dns_subdomain {
            bail!("invalid address: {address}");
        }
        if port.parse::<u16>().is_err() {
            bail!("invalid port: {port}");
        }
    }
    if !crate::tls::is_dns_label(agent) {
        bail!("invalid agent name {agent:?}: must be a DNS label (lowercase letters, digits, '-')");
    }
    Ok(format!("https://{address}?agentName={agent}"))
}

/// Argo CD's `ClusterConfig` JSON as Go marshals it: `insecure` always present, the PEM data
/// base64 (Go `[]byte`), empty fields omitted.
#[derive(Serialize, serde::Deserialize, Debug, Default)]
pub struct ClusterConfig {
    #[serde(
        rename = "bearerToken",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub bearer_token: String,
    #[serde(rename = "tlsClientConfig", default)]
    pub tls: TlsClientConfig,
}

#[derive(Serialize, serde::Deserialize, Debug, Default)]
pub struct TlsClientConfig {
    #[serde(default)]
    pub insecure: bool,
    #[serde(rename = "certData", default, skip_serializing_if = "String::is_empty")]
    pub cert_data: String,
    #[serde(rename = "keyData", default, skip_serializing_if = "String::is_empty")]
    pub key_data: String,
    #[serde(rename = "caData", default, skip_serializing_if = "String::is_empty")]
    pub ca_data: String,
}

pub fn b64(s: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// The secret `agent create` writes (peer: `ClusterToSecret` of a `v1alpha1.Cluster` with the
/// agent-name label, skip-reconcile annotation and a TLS client config).
pub fn cluster_secret(
    agent: &str,
    namespace: &str,
    server: &str,
    mut labels: BTreeMap<String, String>,
    cert_pem: &[u8],
    key_pem: &[u8],
    ca_pem: &[u8],
) -> anyhow::Result<Secret> {
    labels.insert(LABEL_AGENT_NAME.into(), agent.into());
    labels.insert(LABEL_SECRET_TYPE.into(), "cluster".into());
    let annotations = BTreeMap::from([
        (ANNOTATION_SKIP_RECONCILE.to_string(), "true".to_string()),
        (
            ANNOTATION_MANAGED_BY.to_string(),
            "argocd-agent".to_string(),
        ),
    ]);
    let config = ClusterConfig {
        bearer_token: String::new(),
        tls: TlsClientConfig {
            insecure: false,
            cert_data: b64(cert_pem),
            key_data: b64(key_pem),
            ca_data: b64(ca_pem),
        },
    };
    let data = BTreeMap::from([
        (
            "server".to_string(),
            server.trim_end_matches('/').to_string(),
        ),
        ("name".to_string(), agent.to_string()),
        ("config".to_string(), serde_json::to_string(&config)?),
    ]);
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(cluster_secret_name(agent)),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    })
}
