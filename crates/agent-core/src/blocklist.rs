//! The TLS certificate blocklist (peer: internal/blocklist, internal/auth/mtls `Authenticate`,
//! principal/callbacks.go `updateBlocklistCallback`, cmd/ctl/blocklist.go): ConfigMap
//! `argocd-agent-tls-blocklist` in the principal's namespace, one key per blocked certificate —
//! the SHA-256 of its DER as uppercase hex, values ignored. The principal refuses a blocked
//! certificate at login and on the event stream, and drops the connected agent that presented it
//! within seconds of the ConfigMap changing.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// The peer's `config.ConfigMapNameTLSBlocklist`.
pub const CONFIGMAP: &str = "argocd-agent-tls-blocklist";

/// The peer's `tlsutil.CertificateFingerprint`: SHA-256 of the certificate's DER, uppercase hex.
pub fn fingerprint(der: &[u8]) -> String {
    hex::encode_upper(Sha256::digest(der))
}

/// The fingerprints of a blocklist ConfigMap (its `data` keys, normalised to uppercase hex
/// without `:` so `openssl x509 -fingerprint -sha256` output can be pasted).
pub fn from_configmap(cm: &Value) -> HashSet<String> {
    cm["data"]
        .as_object()
        .map(|d| d.keys().map(|k| normalise(k)).collect())
        .unwrap_or_default()
}

/// Uppercase hex without separators.
pub fn normalise(fp: &str) -> String {
    fp.trim()
        .trim_start_matches("sha256 Fingerprint=")
        .chars()
        .filter(|c| *c != ':')
        .collect::<String>()
        .to_ascii_uppercase()
}

/// Whether `fp` (normalised) is a SHA-256 fingerprint: 64 hex digits.
pub fn is_fingerprint(fp: &str) -> bool {
    fp.len() == 64 && fp.chars().all(|c| c.is_ascii_hexdigit())
}

/// The blocked fingerprints and which agent last presented which certificate.
#[derive(Default)]
pub struct Blocklist {
    entries: RwLock<HashSet<String>>,
    agents: Mutex<HashMap<String, String>>,
}

impl Blocklist {
    pub fn contains(&self, fp: &str) -> bool {
        self.entries.read().expect("poisoned").contains(fp)
    }

    /// Replaces the entries; returns the agents whose tracked certificate is now blocked.
    pub fn replace(&self, fps: HashSet<String>) -> Vec<String> {
        let agents = self.agents.lock().expect("poisoned");
        let hit = fps.iter().filter_map(|f| agents.get(f).cloned()).collect();
        *self.entries.write().expect("poisoned") = fps;
        hit
    }

    pub fn len(&self) -> usize {
        self.entries.read().expect("poisoned").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records that `agent` logged in with the certificate `fp`.
    pub fn track(&self, fp: &str, agent: &str) {
        self.agents
            .lock()
            .expect("poisoned")
            .insert(fp.to_string(), agent.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_as_the_peer_writes_them() {
        let fp = fingerprint(b"not really DER");
        assert_eq!(fp.len(), 64);
        assert_eq!(fp, fp.to_ascii_uppercase());
        assert!(is_fingerprint(&fp));
        let colons = fp
            .as_bytes()
            .chunks(2)
            .map(|c| std::str::from_utf8(c).unwrap().to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(normalise(&format!("sha256 Fingerprint={colons}")), fp);
        let cm = json!({"data": {fp.clone(): "", "ab": "x"}});
        assert!(from_configmap(&cm).contains(&fp));
        assert!(!is_fingerprint("AB"));
    }

    #[test]
    fn replacing_entries_names_the_tracked_agents_they_block() {
        let b = Blocklist::default();
        b.track("F1", "edge-1");
        b.track("F2", "edge-2");
        let hit = b.replace(["F2".to_string(), "F3".to_string()].into());
        assert_eq!(hit, vec!["edge-2".to_string()]);
        assert!(b.contains("F2") && !b.contains("F1"));
        assert!(b.replace(HashSet::new()).is_empty());
        assert!(b.is_empty());
    }
}
