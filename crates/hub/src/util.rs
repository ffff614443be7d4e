//! Small helpers: YAML, time, names.

use argocd_pull_ops::dns::is_dns_label;
use serde_json::Value;

/// Parses a multi-document YAML stream (empty documents skipped).
pub(crate) fn parse_yaml_stream(yaml: &str) -> anyhow::Result<Vec<Value>> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| anyhow::anyhow!("invalid YAML: {e}"))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Parses a request body that is JSON or (for apply patches) YAML.
pub(crate) fn parse_body(body: &[u8], yaml: bool) -> Result<Value, String> {
    if !yaml {
        return serde_json::from_slice(body).map_err(|e| e.to_string());
    }
    // JSON is YAML; try JSON first (faster, exact numbers).
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    let s = std::str::from_utf8(body).map_err(|e| e.to_string())?;
    serde_saphyr::from_str::<Value>(s).map_err(|e| e.to_string())
}

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Human age like kubectl prints it (`5s`, `3m`, `2h`, `4d`).
pub(crate) fn age(ts: &str) -> String {
    let Ok(t) = ts.parse::<jiff::Timestamp>() else {
        return "<unknown>".into();
    };
    let secs = (jiff::Timestamp::now().as_second() - t.as_second()).max(0);
    if secs < 120 {
        format!("{secs}s")
    } else if secs < 120 * 60 {
        format!("{}m", secs / 60)
    } else if secs < 48 * 3600 {
        format!("{}h", secs / 3600)
    } else {
        format!("{}d", secs / 86400)
    }
}

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

/// Validates a DNS-1123 subdomain (most object names); returns the real server's message.
pub(crate) fn validate_subdomain(name: &str) -> Result<(), String> {
    if name.len() > 253 {
        return Err(format!(
            "Invalid value: \"{name}\": must be no more than 253 characters"
        ));
    }
    if !name.split('.').all(is_dns_label) {
        return Err(format!(
            "Invalid value: \"{name}\": {DNS1123_SUBDOMAIN_MSG}"
        ));
    }
    Ok(())
}

/// Validates a DNS-1123 label (namespace names).
pub(crate) fn validate_label(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!(
            "Invalid value: \"{name}\": must be no more than 63 characters"
        ));
    }
    if !is_dns_label(name) {
        return Err(format!("Invalid value: \"{name}\": {DNS1123_LABEL_MSG}"));
    }
    Ok(())
}

/// Five characters from the alphabet the real server uses for `generateName`.
pub(crate) fn random_suffix() -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| ALPHA[(*b as usize) % ALPHA.len()] as char)
        .collect()
}

pub(crate) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn str_at<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(|x| x.as_str())
}
