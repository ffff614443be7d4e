//! `ctl jwt create-key` (peer: cmd/ctl/jwt.go): the principal's JWT signing key in Secret
//! `argocd-agent-jwt` (Opaque, field `jwt.key`, RSA 4096 PKCS#8 PEM).

use anyhow::bail;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::Clients;
use super::out::{put_secret, secret};
use crate::cli::common::SECRET_JWT;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum JwtCommand {
    /// Create the JWT signing key.
    CreateKey {
        /// Upsert the JWT key if it exists.
        #[arg(short, long)]
        upsert: bool,
        /// RSA key size (the peer always uses 4096).
        #[arg(long = "key-size", default_value_t = 4096, hide = true)]
        bits: usize,
    },
}

pub async fn run(cmd: &JwtCommand, c: &Clients) -> anyhow::Result<String> {
    let ns = &c.principal_namespace;
    match cmd {
        JwtCommand::CreateKey { upsert, bits } => {
            if !(2048..=8192).contains(bits) {
                bail!("--key-size {bits}: expected 2048 to 8192 bits");
            }
            let exists = Api::<Secret>::namespaced(c.principal.clone(), ns)
                .get_opt(SECRET_JWT)
                .await?
                .is_some();
            if exists && !upsert {
                bail!("JWT secret already exists. Use --upsert to recreate it.");
            }
            let bits = *bits;
            let pem =
                tokio::task::spawn_blocking(move || crate::auth::generate_rsa_pem(bits)).await??;
            let s = secret(SECRET_JWT, ns, "Opaque", &[("jwt.key", pem.as_bytes())]);
            let created = put_secret(&c.principal, ns, s, true, "").await?;
            Ok(if created {
                format!("Success. JWT signing key created and stored in secret {ns}/{SECRET_JWT}\n")
            } else {
                format!("Success. JWT signing key updated in secret {ns}/{SECRET_JWT}\n")
            })
        }
    }
}
