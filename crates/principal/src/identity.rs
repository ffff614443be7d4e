//! The principal's persistent identity (peer: pkg/principal/identity.go `EnsurePrincipalUID`):
//! ConfigMap `argocd-agent-principal-identity`, key `principal-uid`, in the principal's
//! namespace; created with a new UUID when missing. Every replica of one principal (in-cluster
//! Lease failover) shares it; the two principals of a cross-cluster HA pair differ, which is how
//! an agent recognises a failover (the `principaluid` event extension).

use serde_json::json;

use argocd_pull_agent_core::store::{Kind, Store, StoreError};

pub const CONFIGMAP: &str = "argocd-agent-principal-identity";
pub const KEY: &str = "principal-uid";

/// Reads or creates the identity.
pub async fn ensure_principal_uid(store: &dyn Store, namespace: &str) -> anyhow::Result<String> {
    for _ in 0..3 {
        match store.get(Kind::ConfigMap, namespace, CONFIGMAP).await {
            Ok(Some(cm)) => {
                return match cm["data"][KEY].as_str().filter(|u| !u.is_empty()) {
                    Some(u) => Ok(u.to_string()),
                    None => anyhow::bail!(
                        "identity ConfigMap {namespace}/{CONFIGMAP} exists but {KEY:?} key is empty: delete the ConfigMap (a new identity is created) or set the key"
                    ),
                };
            }
            Ok(None) => {}
            Err(e) => {
                anyhow::bail!("failed to get identity ConfigMap {namespace}/{CONFIGMAP}: {e}")
            }
        }
        let uid = uuid::Uuid::new_v4().to_string();
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": namespace},
            "data": {KEY: uid}});
        match store.create(Kind::ConfigMap, cm).await {
            Ok(_) => return Ok(uid),
            Err(StoreError::AlreadyExists) => continue,
            Err(e) => anyhow::bail!(
                "failed to create identity ConfigMap {namespace}/{CONFIGMAP}: {e} (the principal needs get/create on configmaps in its namespace)"
            ),
        }
    }
    anyhow::bail!("identity ConfigMap {namespace}/{CONFIGMAP} keeps changing")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn created_once_then_kept() {
        let store = argocd_pull_agent_core::store::MemStore::new();
        let a = ensure_principal_uid(&store, "argocd").await.unwrap();
        assert_eq!(a.len(), 36);
        assert_eq!(ensure_principal_uid(&store, "argocd").await.unwrap(), a);
        assert_ne!(
            ensure_principal_uid(&store, "other").await.unwrap(),
            a,
            "another principal, another identity"
        );
    }
}
