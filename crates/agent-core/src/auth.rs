//! JWT access, refresh and resource-proxy tokens exactly as argocd-agent issues them
//! (peer: internal/issuer/jwt.go, principal/apis/auth/auth.go): RS512, issuer
//! `argocd-agent-server`, audiences `<issuer>-access` / `-refresh` / `-resource-proxy` (a JSON
//! array of one, as golang-jwt v5 marshals `ClaimStrings`), claims `iss sub aud exp nbf iat jti`,
//! access tokens valid 5 minutes, refresh tokens 24 hours, resource-proxy tokens without `exp`.

use std::time::Duration;

use anyhow::{Context, anyhow};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, EncodePublicKey, LineEnding};
use serde::{Deserialize, Serialize};

use crate::Mode;

pub const ISSUER: &str = "argocd-agent-server";
/// Audience of access tokens.
pub const AUD_ACCESS: &str = "argocd-agent-server-access";
/// Audience of refresh tokens.
pub const AUD_REFRESH: &str = "argocd-agent-server-refresh";
/// Audience of resource-proxy tokens (self-registered cluster secrets).
pub const AUD_RESOURCE_PROXY: &str = "argocd-agent-server-resource-proxy";
/// Access token lifetime (peer: `accessTokenValidity`).
pub const ACCESS_TTL: Duration = Duration::from_secs(5 * 60);
/// Refresh token lifetime (peer: `refreshTokenValidity`).
pub const REFRESH_TTL: Duration = Duration::from_secs(24 * 3600);
/// A refresh also renews the refresh token when it has less than this left
/// (peer: `refreshTokenAutoRefresh`).
pub const REFRESH_TOKEN_AUTO_REFRESH: Duration = Duration::from_secs(10 * 60);
/// The agent refreshes its access token this long before it expires (peer: pkg/client/remote.go).
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(30);

/// Registered claims in golang-jwt's `RegisteredClaims` order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claims {
    pub iss: String,
    pub sub: String,
    /// One audience, as a JSON array (golang-jwt v5); a plain string is accepted when reading.
    #[serde(deserialize_with = "one_or_many")]
    pub aud: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<u64>,
    pub nbf: u64,
    pub iat: u64,
    pub jti: String,
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Aud::deserialize(d)? {
        Aud::One(s) => vec![s],
        Aud::Many(v) => v,
    })
}

/// The claims of a token, read without verifying the signature (for `exp`-based refresh
/// decisions on the agent and for inspection; never for authorization).
pub fn unverified_claims(token: &str) -> anyhow::Result<Claims> {
    use base64::Engine as _;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| anyhow!("not a JWT: expected three dot-separated parts"))?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .context("JWT payload is not base64url")?;
    serde_json::from_slice(&bytes).context("JWT payload is not a claims object")
}

/// Seconds left before `token` expires (0 when expired; `None` without `exp`).
pub fn seconds_left(token: &str) -> anyhow::Result<Option<u64>> {
    let exp = unverified_claims(token)?.exp;
    Ok(exp.map(|e| e.saturating_sub(jsonwebtoken::get_current_timestamp())))
}

/// Whether the agent should refresh `access_token` now: less than [`REFRESH_BEFORE_EXPIRY`] left,
/// or unreadable.
pub fn needs_refresh(access_token: &str) -> bool {
    match seconds_left(access_token) {
        Ok(Some(left)) => left < REFRESH_BEFORE_EXPIRY.as_secs(),
        Ok(None) => false,
        Err(_) => true,
    }
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
    /// The same key in ring (through rustls): RS512 signatures in about a tenth of the time of the
    /// pure-Rust `rsa` crate, which matters when thousands of agents log in at once (two
    /// signatures each) and refresh every 5 minutes. `None` for keys ring refuses (below 2048
    /// bits): those sign through `enc`. PKCS#1 v1.5 signatures are deterministic, so both give
    /// the same token.
    fast: Option<std::sync::Arc<dyn rustls::sign::SigningKey>>,
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
        let fast = rustls_pemfile::private_key(&mut pem.as_bytes())
            .ok()
            .flatten()
            .and_then(|der| rustls::crypto::ring::sign::any_supported_type(&der).ok());
        Ok(Self {
            enc: EncodingKey::from_rsa_pem(pem.as_bytes()).context("JWT signing key")?,
            fast,
            dec: DecodingKey::from_rsa_pem(public.as_bytes()).context("JWT verification key")?,
            access_ttl: ACCESS_TTL,
            refresh_ttl: REFRESH_TTL,
        })
    }

    fn issue(&self, agent: &str, mode: Mode, aud: &str, ttl: Duration) -> anyhow::Result<String> {
        let sub = serde_json::to_string(&Subject {
            client_id: agent.into(),
            mode: mode.as_str().into(),
        })?;
        self.sign(sub, aud, Some(ttl))
    }

    fn sign(&self, sub: String, aud: &str, ttl: Option<Duration>) -> anyhow::Result<String> {
        let now = jsonwebtoken::get_current_timestamp();
        let claims = Claims {
            iss: ISSUER.into(),
            sub,
            aud: vec![aud.into()],
            exp: ttl.map(|t| now + t.as_secs()),
            nbf: now,
            iat: now,
            jti: uuid::Uuid::new_v4().to_string(),
        };
        self.encode(&claims)
    }

    /// `claims` as an RS512 JWT, as `jsonwebtoken::encode` writes it.
    fn encode<T: Serialize>(&self, claims: &T) -> anyhow::Result<String> {
        use base64::Engine as _;
        let signer = self
            .fast
            .as_ref()
            .and_then(|k| k.choose_scheme(&[rustls::SignatureScheme::RSA_PKCS1_SHA512]));
        let Some(signer) = signer else {
            return Ok(jsonwebtoken::encode(
                &Header::new(Algorithm::RS512),
                claims,
                &self.enc,
            )?);
        };
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let message = format!(
            "{}.{}",
            b64(&serde_json::to_vec(&Header::new(Algorithm::RS512))?),
            b64(&serde_json::to_vec(claims)?)
        );
        let signature = signer
            .sign(message.as_bytes())
            .map_err(|e| anyhow!("signing a token: {e}"))?;
        Ok(format!("{message}.{}", b64(&signature)))
    }

    /// (access, refresh) tokens.
    pub fn issue_pair(&self, agent: &str, mode: Mode) -> anyhow::Result<(String, String)> {
        Ok((
            self.issue(agent, mode, AUD_ACCESS, self.access_ttl)?,
            self.issue(agent, mode, AUD_REFRESH, self.refresh_ttl)?,
        ))
    }

    /// A resource-proxy token for `agent` (subject = the agent name, no expiry), as the peer puts
    /// into self-registered cluster secrets.
    pub fn issue_resource_proxy(&self, agent: &str) -> anyhow::Result<String> {
        self.sign(agent.into(), AUD_RESOURCE_PROXY, None)
    }

    /// Verifies a resource-proxy token: the agent name.
    pub fn verify_resource_proxy(&self, token: &str) -> anyhow::Result<String> {
        let mut v = Validation::new(Algorithm::RS512);
        v.set_issuer(&[ISSUER]);
        v.set_audience(&[AUD_RESOURCE_PROXY]);
        v.required_spec_claims.remove("exp");
        v.validate_exp = false;
        let data = jsonwebtoken::decode::<Claims>(token, &self.dec, &v)
            .map_err(|e| anyhow!("invalid resource-proxy token: {e}"))?;
        Ok(data.claims.sub)
    }

    /// What a refresh answers (peer: `RefreshToken`, principal/apis/auth/auth.go) to the agent
    /// whose refresh token [`Self::verify_refresh`] read: a new access token, and a new refresh
    /// token only when the presented one has less than [`REFRESH_TOKEN_AUTO_REFRESH`] left, else
    /// none (the agent keeps its own). An agent reconnecting costs one signature, not two.
    pub fn issue_on_refresh(&self, r: &RefreshClaims) -> anyhow::Result<(String, Option<String>)> {
        let access = self.issue(&r.agent, r.mode, AUD_ACCESS, self.access_ttl)?;
        let renew = r
            .exp
            .map(|e| e.saturating_sub(jsonwebtoken::get_current_timestamp()))
            .is_none_or(|left| left < REFRESH_TOKEN_AUTO_REFRESH.as_secs());
        let refresh = match renew {
            true => Some(self.issue(&r.agent, r.mode, AUD_REFRESH, self.refresh_ttl)?),
            false => None,
        };
        Ok((access, refresh))
    }

    fn verify(&self, token: &str, aud: &str) -> anyhow::Result<(String, Mode)> {
        self.verify_claims(token, aud).map(|(a, m, _)| (a, m))
    }

    /// (agent, mode, `exp`) of a valid token.
    fn verify_claims(&self, token: &str, aud: &str) -> anyhow::Result<(String, Mode, Option<u64>)> {
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
        Ok((sub.client_id, mode, data.claims.exp))
    }

    /// Verifies an access token: (agent, mode).
    pub fn verify_access(&self, token: &str) -> anyhow::Result<(String, Mode)> {
        self.verify(token, AUD_ACCESS)
    }

    /// Verifies a refresh token.
    pub fn verify_refresh(&self, token: &str) -> anyhow::Result<RefreshClaims> {
        let (agent, mode, exp) = self.verify_claims(token, AUD_REFRESH)?;
        Ok(RefreshClaims { agent, mode, exp })
    }
}

/// A verified refresh token ([`TokenIssuer::verify_refresh`]).
#[derive(Debug)]
pub struct RefreshClaims {
    /// The agent it names.
    pub agent: String,
    pub mode: Mode,
    /// Its expiry (seconds since the epoch).
    pub exp: Option<u64>,
}

/// A throwaway RSA key for JWTs, generated once per process (RSA key generation is slow).
pub fn throwaway_jwt_key() -> String {
    static KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    KEY.get_or_init(|| generate_rsa_pem(2048).expect("RSA key generation"))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        TokenIssuer::from_pem(&throwaway_jwt_key()).unwrap()
    }

    fn header_and_claims(token: &str) -> (serde_json::Value, serde_json::Value) {
        use base64::Engine as _;
        let mut parts = token.split('.');
        let dec = |p: &str| -> serde_json::Value {
            serde_json::from_slice(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD
                    .decode(p)
                    .unwrap(),
            )
            .unwrap()
        };
        (dec(parts.next().unwrap()), dec(parts.next().unwrap()))
    }

    #[test]
    fn tokens_have_the_peers_header_claims_audiences_and_lifetimes() {
        let i = issuer();
        let (access, refresh) = i.issue_pair("agent-1", Mode::Managed).unwrap();
        for (tok, aud, ttl) in [
            (&access, "argocd-agent-server-access", 300),
            (&refresh, "argocd-agent-server-refresh", 86_400),
        ] {
            let (h, c) = header_and_claims(tok);
            assert_eq!(h["alg"], "RS512");
            assert_eq!(h["typ"], "JWT");
            assert_eq!(c["iss"], "argocd-agent-server");
            assert_eq!(c["aud"], serde_json::json!([aud]), "aud is an array of one");
            assert_eq!(
                serde_json::from_str::<serde_json::Value>(c["sub"].as_str().unwrap()).unwrap(),
                serde_json::json!({"clientID": "agent-1", "mode": "managed"})
            );
            let (exp, iat, nbf) = (
                c["exp"].as_u64().unwrap(),
                c["iat"].as_u64().unwrap(),
                c["nbf"].as_u64().unwrap(),
            );
            assert_eq!(exp - iat, ttl);
            assert_eq!(nbf, iat);
            assert!(uuid::Uuid::parse_str(c["jti"].as_str().unwrap()).is_ok());
            let keys: Vec<_> = c.as_object().unwrap().keys().cloned().collect();
            assert_eq!(keys.len(), 7, "{keys:?}");
        }
        assert_eq!(
            i.verify_access(&access).unwrap(),
            ("agent-1".into(), Mode::Managed)
        );
        assert!(i.verify_refresh(&access).is_err(), "audiences are distinct");
        assert!(i.verify_access(&refresh).is_err());

        let rp = i.issue_resource_proxy("agent-1").unwrap();
        let (h, c) = header_and_claims(&rp);
        assert_eq!(h["alg"], "RS512");
        assert_eq!(
            c["aud"],
            serde_json::json!(["argocd-agent-server-resource-proxy"])
        );
        assert_eq!(c["sub"], "agent-1");
        assert!(
            c.get("exp").is_none(),
            "resource-proxy tokens do not expire"
        );
        assert_eq!(i.verify_resource_proxy(&rp).unwrap(), "agent-1");
        assert!(i.verify_access(&rp).is_err());
    }

    #[test]
    fn a_peer_style_token_with_a_string_audience_verifies() {
        // golang-jwt can be configured to marshal one audience as a string: accept both forms
        let i = issuer();
        let now = jsonwebtoken::get_current_timestamp();
        let claims = serde_json::json!({
            "iss": ISSUER, "sub": "{\"clientID\":\"a\",\"mode\":\"autonomous\"}",
            "aud": AUD_ACCESS, "exp": now + 60, "nbf": now, "iat": now, "jti": "x"
        });
        let tok = jsonwebtoken::encode(&Header::new(Algorithm::RS512), &claims, &i.enc).unwrap();
        assert!(i.fast.is_some(), "a 2048-bit key signs through ring");
        assert_eq!(
            i.encode(&claims).unwrap(),
            tok,
            "ring's signature gives the very token jsonwebtoken (the rsa crate) gives"
        );
        assert_eq!(
            i.verify_access(&tok).unwrap(),
            ("a".into(), Mode::Autonomous)
        );
    }

    #[test]
    fn a_refresh_renews_the_refresh_token_only_when_it_is_close_to_expiry() {
        let mut i = issuer();
        // a refresh token with 24 h left: a new access token, no new refresh token (the peer's
        // `RefreshToken`: the agent keeps its own)
        let (_, long) = i.issue_pair("agent-1", Mode::Autonomous).unwrap();
        let claims = i.verify_refresh(&long).unwrap();
        assert_eq!(
            (claims.agent.as_str(), claims.mode),
            ("agent-1", Mode::Autonomous)
        );
        let (access, refresh) = i.issue_on_refresh(&claims).unwrap();
        assert_eq!(
            i.verify_access(&access).unwrap(),
            ("agent-1".to_string(), Mode::Autonomous)
        );
        assert_eq!(refresh, None);
        // less than 10 minutes left: renewed too, for the refresh token's whole lifetime
        i.refresh_ttl = REFRESH_TOKEN_AUTO_REFRESH - Duration::from_secs(60);
        let (_, short) = i.issue_pair("agent-1", Mode::Autonomous).unwrap();
        i.refresh_ttl = REFRESH_TTL;
        let (_, refresh) = i
            .issue_on_refresh(&i.verify_refresh(&short).unwrap())
            .unwrap();
        let renewed = i.verify_refresh(&refresh.expect("renewed")).unwrap();
        let left = renewed.exp.unwrap() - jsonwebtoken::get_current_timestamp();
        assert!(left > REFRESH_TTL.as_secs() - 60, "{left}");
    }

    #[test]
    fn refresh_is_due_30_seconds_before_expiry() {
        let mut i = issuer();
        i.access_ttl = Duration::from_secs(29);
        let (short, _) = i.issue_pair("a", Mode::Managed).unwrap();
        assert!(needs_refresh(&short));
        i.access_ttl = Duration::from_secs(300);
        let (long, _) = i.issue_pair("a", Mode::Managed).unwrap();
        assert!(!needs_refresh(&long));
        assert!(needs_refresh("garbage"));
        let left = seconds_left(&long).unwrap().unwrap();
        assert!((299..=300).contains(&left), "{left}");
    }
}
