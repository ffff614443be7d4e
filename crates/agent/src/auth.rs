//! JWT access and refresh tokens (RS512, issuer `argocd-agent-server`), as argocd-agent issues.

use std::time::Duration;

use anyhow::{Context, anyhow};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use serde::{Deserialize, Serialize};

use crate::Mode;

pub const ISSUER: &str = "argocd-agent-server";
const AUD_ACCESS: &str = "argocd-agent-server";
const AUD_REFRESH: &str = "argocd-agent-server-refresh";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    iss: String,
    sub: String,
    aud: String,
    exp: u64,
    nbf: u64,
    iat: u64,
    jti: String,
}

/// The `sub` claim: `{"clientID":"<agent>","mode":"managed|autonomous"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub mode: String,
}

/// Issues and verifies tokens.
pub struct TokenIssuer {
    enc: EncodingKey,
    dec: DecodingKey,
    pub access_ttl: Duration,
    pub refresh_ttl: Duration,
}

/// Generates an RSA private key as PKCS#8 PEM (slow in debug builds: generate once).
pub fn generate_rsa_pem(bits: usize) -> anyhow::Result<String> {
    let key =
        rsa::RsaPrivateKey::new(&mut rand::thread_rng(), bits).context("generating RSA key")?;
    Ok(key
        .to_pkcs8_pem(LineEnding::LF)
        .context("encoding RSA key")?
        .to_string())
}

impl TokenIssuer {
    /// From an RSA PKCS#8 PEM private key.
    pub fn from_pem(pem: &str) -> anyhow::Result<Self> {
        let key = rsa::RsaPrivateKey::from_pkcs8_pem(pem)
            .context("JWT signing key must be an RSA PKCS#8 PEM key")?;
        let public = key
            .to_public_key()
            .to_public_key_pem(LineEnding::LF)
            .context("encoding public key")?;
        Ok(Self {
            enc: EncodingKey::from_rsa_pem(pem.as_bytes()).context("JWT signing key")?,
            dec: DecodingKey::from_rsa_pem(public.as_bytes()).context("JWT verification key")?,
            access_ttl: Duration::from_secs(300),
            refresh_ttl: Duration::from_secs(24 * 3600),
        })
    }

    fn issue(&self, agent: &str, mode: Mode, aud: &str, ttl: Duration) -> anyhow::Result<String> {
        let now = jsonwebtoken::get_current_timestamp();
        let sub = serde_json::to_string(&Subject {
            client_id: agent.into(),
            mode: mode.as_str().into(),
        })?;
        let claims = Claims {
            iss: ISSUER.into(),
            sub,
            aud: aud.into(),
            exp: now + ttl.as_secs(),
            nbf: now,
            iat: now,
            jti: uuid::Uuid::new_v4().to_string(),
        };
        Ok(jsonwebtoken::encode(
            &Header::new(Algorithm::RS512),
            &claims,
            &self.enc,
        )?)
    }

    /// (access, refresh) tokens.
    pub fn issue_pair(&self, agent: &str, mode: Mode) -> anyhow::Result<(String, String)> {
        Ok((
            self.issue(agent, mode, AUD_ACCESS, self.access_ttl)?,
            self.issue(agent, mode, AUD_REFRESH, self.refresh_ttl)?,
        ))
    }

    fn verify(&self, token: &str, aud: &str) -> anyhow::Result<(String, Mode)> {
        let mut v = Validation::new(Algorithm::RS512);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[aud]);
        v.leeway = 5;
        let data = jsonwebtoken::decode::<Claims>(token, &self.dec, &v)
            .map_err(|e| anyhow!("invalid token: {e}"))?;
        let sub: Subject = serde_json::from_str(&data.claims.sub)
            .map_err(|e| anyhow!("invalid token subject: {e}"))?;
        let mode = Mode::parse(&sub.mode)
            .ok_or_else(|| anyhow!("invalid mode {:?} in token", sub.mode))?;
        Ok((sub.client_id, mode))
    }

    /// Verifies an access token: (agent, mode).
    pub fn verify_access(&self, token: &str) -> anyhow::Result<(String, Mode)> {
        self.verify(token, AUD_ACCESS)
    }

    /// Verifies a refresh token: (agent, mode).
    pub fn verify_refresh(&self, token: &str) -> anyhow::Result<(String, Mode)> {
        self.verify(token, AUD_REFRESH)
    }
}
