//! Argo CD cluster Secrets: pure construction of what the GitOpsCluster controller and the
//! basic-mode controller write (no I/O here).

use std::collections::BTreeMap;

use argocd_pull_api::names;
use argocd_pull_api::ocm::cluster::ManagedCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use serde_json::json;

/// The default `spec.managedServiceAccountRef`.
pub const DEFAULT_MANAGED_SERVICE_ACCOUNT: &str = "application-manager";

/// Annotation on the cluster Secrets a GitOpsCluster wrote: `<namespace>/<name>` of that
/// GitOpsCluster (how the controller recognises its own Secrets and maps Secret events back).
pub const ANNOTATION_GITOPSCLUSTER: &str = "apps.open-cluster-management.io/gitopscluster";

/// Label on the Secrets of the basic mode (`<cluster>-secret`), so that the controller finds
/// exactly its own Secrets.
pub const LABEL_BASIC_MODE: &str = "apps.open-cluster-management.io/pull-basic-cluster-secret";

/// Where the `server` and `config` of a cluster Secret come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// `server: https://<cluster>-control-plane`, no `config`: the pull model never has the hub
    /// talk to the cluster, Argo CD only needs the Secret for generators and destinations.
    Blank,
    /// A ManagedServiceAccount token with the cluster's first client config.
    Token {
        server: String,
        bearer_token: String,
        /// Base64 of the PEM CA bundle (as in `managedClusterClientConfigs[].caBundle`).
        ca_data: Option<String>,
    },
}

/// `<cluster>-<msa>-cluster-secret`.
pub fn cluster_secret_name(cluster: &str, managed_service_account: &str) -> String {
    format!("{cluster}-{managed_service_account}-cluster-secret")
}

/// `<cluster>-secret` (the basic mode of the upstream controller).
pub fn basic_secret_name(cluster: &str) -> String {
    format!("{cluster}-secret")
}

/// The ManagedCluster's own labels overlaid with the system labels (system labels win).
fn merged_labels(cluster: &ManagedCluster, system: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut labels = cluster.metadata.labels.clone().unwrap_or_default();
    for (k, v) in system {
        labels.insert((*k).to_string(), (*v).to_string());
    }
    labels
}

fn cluster_name(cluster: &ManagedCluster) -> &str {
    cluster.metadata.name.as_deref().unwrap_or_default()
}

/// The Argo CD `config` JSON for a bearer-token source.
pub fn token_config(bearer_token: &str, ca_data: Option<&str>) -> String {
    let mut tls = serde_json::Map::new();
    tls.insert("insecure".into(), json!(false));
    if let Some(ca) = ca_data {
        tls.insert("caData".into(), json!(ca));
    }
    json!({"bearerToken": bearer_token, "tlsClientConfig": tls}).to_string()
}

/// The credential source from a ManagedServiceAccount token and the ManagedCluster's first
/// client config. `None` when the cluster advertises no API URL (then the blank source is used).
pub fn token_credentials(
    cluster: &ManagedCluster,
    bearer_token: &str,
    token_secret_ca: Option<&str>,
) -> Option<Credentials> {
    let cfg = cluster
        .spec
        .managed_cluster_client_configs
        .as_ref()?
        .first()?;
    if cfg.url.is_empty() {
        return None;
    }
    Some(Credentials::Token {
        server: cfg.url.clone(),
        bearer_token: bearer_token.to_string(),
        ca_data: cfg
            .ca_bundle
            .clone()
            .filter(|c| !c.is_empty())
            .or_else(|| token_secret_ca.map(str::to_string)),
    })
}

/// The Secret a GitOpsCluster (`owner` = `<ns>/<name>`) writes for one cluster.
pub fn cluster_secret(
    cluster: &ManagedCluster,
    argo_namespace: &str,
    managed_service_account: &str,
    credentials: &Credentials,
    owner: &str,
) -> Secret {
    let name = cluster_name(cluster);
    let labels = merged_labels(
        cluster,
        &[
            (names::LABEL_ARGOCD_SECRET_TYPE, "cluster"),
            (names::LABEL_ACM_CLUSTER, "true"),
            (names::LABEL_CLUSTER_NAME, name),
        ],
    );
    let mut data = BTreeMap::new();
    data.insert("name".to_string(), name.to_string());
    match credentials {
        Credentials::Blank => {
            data.insert("server".into(), format!("https://{name}-control-plane"));
        }
        Credentials::Token {
            server,
            bearer_token,
            ca_data,
        } => {
            data.insert("server".into(), server.clone());
            data.insert(
                "config".into(),
                token_config(bearer_token, ca_data.as_deref()),
            );
        }
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(cluster_secret_name(name, managed_service_account)),
            namespace: Some(argo_namespace.to_string()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_GITOPSCLUSTER.to_string(),
                owner.to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// The Secret of the basic mode: `<cluster>-secret`, `server: https://<cluster>-control-plane:6443`.
pub fn basic_secret(cluster: &ManagedCluster, argo_namespace: &str) -> Secret {
    let name = cluster_name(cluster);
    let labels = merged_labels(
        cluster,
        &[
            (names::LABEL_ARGOCD_SECRET_TYPE, "cluster"),
            (names::LABEL_CLUSTER_NAME, name),
            (LABEL_BASIC_MODE, "true"),
        ],
    );
    Secret {
        metadata: ObjectMeta {
            name: Some(basic_secret_name(name)),
            namespace: Some(argo_namespace.to_string()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([
            ("name".to_string(), name.to_string()),
            (
                "server".to_string(),
                format!("https://{name}-control-plane:6443"),
            ),
        ])),
        ..Default::default()
    }
}

/// The value of a Secret key, whether it is held in `stringData` (not yet normalised) or `data`.
pub fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
        return Some(v.clone());
    }
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// Whether `existing` already holds what `desired` (built by this module) says: same type,
/// same values, and every desired label and annotation present with the same value.
pub fn secret_up_to_date(existing: &Secret, desired: &Secret) -> bool {
    let subset = |want: &Option<BTreeMap<String, String>>,
                  have: &Option<BTreeMap<String, String>>| {
        want.iter()
            .flatten()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let same_values = desired
        .string_data
        .iter()
        .flatten()
        .all(|(k, v)| secret_value(existing, k).as_ref() == Some(v));
    let extra_values = {
        let want = desired.string_data.as_ref().map(|d| d.len()).unwrap_or(0);
        let have_keys: std::collections::BTreeSet<&String> = existing
            .data
            .iter()
            .flatten()
            .map(|(k, _)| k)
            .chain(existing.string_data.iter().flatten().map(|(k, _)| k))
            .collect();
        have_keys.len() != want
    };
    existing.type_.as_deref().unwrap_or("Opaque") == desired.type_.as_deref().unwrap_or("Opaque")
        && same_values
        && !extra_values
        && subset(&desired.metadata.labels, &existing.metadata.labels)
        && subset(
            &desired.metadata.annotations,
            &existing.metadata.annotations,
        )
}

/// Labels a previous version of the Secret carried from the ManagedCluster that the cluster no
/// longer has (they must be removed, not merely left behind by a merge).
pub fn stale_labels(existing: &Secret, desired: &Secret) -> Vec<String> {
    let want = desired.metadata.labels.clone().unwrap_or_default();
    existing
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !want.contains_key(*k))
        .map(|(k, _)| k.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use argocd_pull_api::ocm::cluster::{ClientConfig, ManagedClusterSpec};

    fn cluster(name: &str, labels: &[(&str, &str)]) -> ManagedCluster {
        let mut mc = ManagedCluster::new(name, ManagedClusterSpec::default());
        mc.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        mc
    }

    #[test]
    fn blank_secret_contents() {
        let mc = cluster("c1", &[("env", "prod"), ("cloud", "aws")]);
        let s = cluster_secret(
            &mc,
            "argocd",
            "application-manager",
            &Credentials::Blank,
            "ns/g",
        );
        assert_eq!(
            s.metadata.name.as_deref(),
            Some("c1-application-manager-cluster-secret")
        );
        assert_eq!(s.metadata.namespace.as_deref(), Some("argocd"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        let labels = s.metadata.labels.clone().unwrap();
        let expect: BTreeMap<String, String> = [
            ("argocd.argoproj.io/secret-type", "cluster"),
            ("apps.open-cluster-management.io/acm-cluster", "true"),
            ("apps.open-cluster-management.io/cluster-name", "c1"),
            ("env", "prod"),
            ("cloud", "aws"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(labels, expect);
        let data = s.string_data.clone().unwrap();
        assert_eq!(data.len(), 2, "{data:?}");
        assert_eq!(data["name"], "c1");
        assert_eq!(data["server"], "https://c1-control-plane");
        assert_eq!(
            s.metadata.annotations.unwrap()[ANNOTATION_GITOPSCLUSTER],
            "ns/g"
        );
    }

    #[test]
    fn system_labels_win_over_cluster_labels() {
        let mc = cluster(
            "c1",
            &[
                ("argocd.argoproj.io/secret-type", "repository"),
                ("apps.open-cluster-management.io/cluster-name", "evil"),
                ("apps.open-cluster-management.io/acm-cluster", "false"),
            ],
        );
        let s = cluster_secret(&mc, "argocd", "m", &Credentials::Blank, "ns/g");
        let labels = s.metadata.labels.unwrap();
        assert_eq!(labels["argocd.argoproj.io/secret-type"], "cluster");
        assert_eq!(labels["apps.open-cluster-management.io/cluster-name"], "c1");
        assert_eq!(
            labels["apps.open-cluster-management.io/acm-cluster"],
            "true"
        );
    }

    #[test]
    fn token_secret_contents() {
        let mut mc = cluster("c2", &[]);
        mc.spec.managed_cluster_client_configs = Some(vec![
            ClientConfig {
                url: "https://api.c2:6443".into(),
                ca_bundle: Some("Q0E=".into()),
            },
            ClientConfig {
                url: "https://ignored".into(),
                ca_bundle: None,
            },
        ]);
        let creds = token_credentials(&mc, "tok", Some("b3RoZXI=")).unwrap();
        let s = cluster_secret(&mc, "gitops", "msa", &creds, "ns/g");
        assert_eq!(s.metadata.name.as_deref(), Some("c2-msa-cluster-secret"));
        let data = s.string_data.unwrap();
        assert_eq!(data["server"], "https://api.c2:6443");
        let config: serde_json::Value = serde_json::from_str(&data["config"]).unwrap();
        assert_eq!(
            config,
            json!({"bearerToken": "tok", "tlsClientConfig": {"insecure": false, "caData": "Q0E="}})
        );
    }

    #[test]
    fn token_source_falls_back_to_token_ca_and_needs_a_url() {
        let mut mc = cluster("c3", &[]);
        assert_eq!(token_credentials(&mc, "t", None), None, "no client config");
        mc.spec.managed_cluster_client_configs = Some(vec![ClientConfig {
            url: "https://api.c3".into(),
            ca_bundle: None,
        }]);
        assert_eq!(
            token_credentials(&mc, "t", Some("Y2E=")),
            Some(Credentials::Token {
                server: "https://api.c3".into(),
                bearer_token: "t".into(),
                ca_data: Some("Y2E=".into())
            })
        );
        assert_eq!(
            token_config("t", None),
            r#"{"bearerToken":"t","tlsClientConfig":{"insecure":false}}"#
        );
    }

    #[test]
    fn basic_mode_secret_contents() {
        let mc = cluster("edge-7", &[("region", "eu")]);
        let s = basic_secret(&mc, "argocd");
        assert_eq!(s.metadata.name.as_deref(), Some("edge-7-secret"));
        let data = s.string_data.clone().unwrap();
        assert_eq!(data["server"], "https://edge-7-control-plane:6443");
        assert_eq!(data["name"], "edge-7");
        let labels = s.metadata.labels.unwrap();
        assert_eq!(labels["argocd.argoproj.io/secret-type"], "cluster");
        assert_eq!(labels["region"], "eu");
    }

    #[test]
    fn up_to_date_compares_values_labels_and_removed_labels() {
        let mc = cluster("c1", &[("env", "prod")]);
        let desired = cluster_secret(&mc, "argocd", "m", &Credentials::Blank, "ns/g");
        // As stored by an API server: stringData folded into data.
        let mut stored = desired.clone();
        stored.data = Some(
            desired
                .string_data
                .clone()
                .unwrap()
                .into_iter()
                .map(|(k, v)| (k, k8s_openapi::ByteString(v.into_bytes())))
                .collect(),
        );
        stored.string_data = None;
        assert!(secret_up_to_date(&stored, &desired));
        assert!(stale_labels(&stored, &desired).is_empty());

        let relabelled = cluster("c1", &[("env", "dev")]);
        let want = cluster_secret(&relabelled, "argocd", "m", &Credentials::Blank, "ns/g");
        assert!(!secret_up_to_date(&stored, &want));

        let unlabelled = cluster("c1", &[]);
        let want = cluster_secret(&unlabelled, "argocd", "m", &Credentials::Blank, "ns/g");
        assert!(secret_up_to_date(&stored, &want), "subset still holds");
        assert_eq!(stale_labels(&stored, &want), vec!["env".to_string()]);
    }
}
