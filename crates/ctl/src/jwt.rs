//! `ctl jwt create-key|inspect-key|delete-key` (peer: cmd/ctl/jwt.go): the principal's JWT signing
//! key in Secret `argocd-agent-jwt` (Opaque, field `jwt.key`, RSA 4096 PKCS#8 PEM).

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde::Serialize;

use super::Clients;
use super::out::{is_status, kube_msg, put_secret, read_answer, render, secret};
use argocd_pull_agent_core::settings::{SECRET_JWT, jwt_key_from_secret};

/// The variants are the peer's subcommand names (`create-key`, `inspect-key`, `delete-key`).
#[allow(clippy::enum_variant_names)]
#[derive(clap::Subcommand, Debug, Clone)]
pub enum JwtCommand {
    /// Create a JWT signing key and store it in a Kubernetes secret.
    CreateKey {
        /// Upsert the JWT key if it exists.
        #[arg(short, long)]
        upsert: bool,
        /// RSA key size (the peer always uses 4096).
        #[arg(long = "key-size", default_value_t = 4096, hide = true)]
        bits: usize,
    },
    /// Inspect the JWT signing key.
    InspectKey {
        /// Output format (json, yaml or text).
        #[arg(short, long, default_value = "json")]
        output: String,
    },
    /// Delete the JWT signing key secret.
    DeleteKey {
        /// Force deletion without confirmation.
        #[arg(short, long)]
        force: bool,
    },
}

/// The peer's `jwt inspect-key` summary.
#[derive(Serialize)]
struct KeySummary {
    #[serde(rename = "keyType")]
    key_type: String,
    #[serde(rename = "keyLength")]
    key_length: usize,
    created: String,
    sha256: String,
}

pub async fn run(cmd: &JwtCommand, c: &Clients) -> anyhow::Result<String> {
    let ns = &c.principal_namespace;
    let api = Api::<Secret>::namespaced(c.principal.clone(), ns);
    match cmd {
        JwtCommand::CreateKey { upsert, bits } => {
            if !(2048..=8192).contains(bits) {
                bail!("--key-size {bits}: expected 2048 to 8192 bits");
            }
            let exists = api
                .get_opt(SECRET_JWT)
                .await
                .map_err(|e| anyhow::anyhow!("Error getting JWT secret: {}", kube_msg(&e)))?
                .is_some();
            if exists && !upsert {
                bail!("JWT secret already exists. Use --upsert to recreate it.");
            }
            let bits = *bits;
            let pem = tokio::task::spawn_blocking(move || {
                argocd_pull_agent_core::auth::generate_rsa_pem(bits)
            })
            .await?
            .context("Could not generate RSA private key")?;
            let s = secret(SECRET_JWT, ns, "Opaque", &[("jwt.key", pem.as_bytes())]);
            let created = put_secret(&c.principal, ns, s, true, "")
                .await
                .context("Could not create JWT secret")?;
            Ok(if created {
                format!(
                    "Generating JWT signing key...\nSuccess. JWT signing key created and stored in secret {ns}/{SECRET_JWT}\n"
                )
            } else {
                format!(
                    "Generating JWT signing key...\nSuccess. JWT signing key updated in secret {ns}/{SECRET_JWT}\n"
                )
            })
        }
        JwtCommand::InspectKey { output } => {
            use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey};
            use rsa::traits::PublicKeyParts;
            use sha2::Digest;
            let pem = jwt_key_from_secret(&c.principal, ns, SECRET_JWT)
                .await
                .context("Could not read JWT signing key from secret")?;
            let key = rsa::RsaPrivateKey::from_pkcs8_pem(&pem).map_err(|e| {
                anyhow::anyhow!(
                    "JWT signing key is not an RSA private key (PKCS#8 PEM expected): {e}; create one with `argocd-pull ctl jwt create-key --upsert`"
                )
            })?;
            let s = api.get(SECRET_JWT).await.map_err(|e| {
                anyhow::anyhow!("Could not read JWT secret metadata: {}", kube_msg(&e))
            })?;
            let public = key
                .to_public_key()
                .to_public_key_der()
                .context("Could not marshal public key")?;
            let created = s
                .metadata
                .creation_timestamp
                .map(|t| rfc1123z(t.0))
                .unwrap_or_default();
            let sum = KeySummary {
                key_type: "RSA".into(),
                key_length: key.size() * 8,
                created,
                sha256: hex::encode(sha2::Sha256::digest(public.as_bytes())),
            };
            render(
                &sum,
                output,
                &[
                    ("keyType", "Key type"),
                    ("keyLength", "Key length"),
                    ("created", "Created"),
                    ("sha256", "Key fingerprint"),
                ],
            )
            .context("Could not marshal summary")
        }
        JwtCommand::DeleteKey { force } => {
            if !force {
                let answer =
                    read_answer("Are you sure you want to delete the JWT signing key? [y/N]: ")?
                        .unwrap_or_default();
                if answer != "y" && answer != "Y" {
                    return Ok("Aborted.\n".into());
                }
            }
            match api.delete(SECRET_JWT, &Default::default()).await {
                Ok(_) => Ok(format!(
                    "JWT signing key secret {ns}/{SECRET_JWT} deleted successfully.\n"
                )),
                Err(e) if is_status(&e, 404) => {
                    Ok(format!("JWT secret {ns}/{SECRET_JWT} does not exist.\n"))
                }
                Err(e) => bail!("Could not delete JWT secret: {}", kube_msg(&e)),
            }
        }
    }
}

/// Go's `time.RFC1123Z` in UTC.
fn rfc1123z(t: jiff::Timestamp) -> String {
    t.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string()
}
