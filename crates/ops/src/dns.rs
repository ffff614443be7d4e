//! Kubernetes name rules shared by the crates.

/// Whether `s` is an RFC 1123 label (apimachinery's `IsDNS1123Label`): 1–63 lowercase
/// alphanumerics or `-`, starting and ending with an alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::is_dns_label;

    #[test]
    fn rfc_1123_labels() {
        for ok in ["a", "cluster1", "my-agent", "0abc", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad}");
        }
    }
}
