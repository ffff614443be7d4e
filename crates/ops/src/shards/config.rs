//! Where a replica's shard Leases live, who it is, and how often it reads and renews them.

use std::time::Duration;

use super::error::ShardError;
use super::id::ShardCount;

/// Settings of a [`super::ShardOwner`]. Every replica must use the same `lease_name`,
/// `namespace` and `shards`; each its own `identity`.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Prefix of the Leases: `<lease_name>-shard-<k>` and `<lease_name>-replica-<identity>`. At
    /// most 63 characters (it is also a label value).
    pub lease_name: String,
    /// The replicas' namespace.
    pub namespace: String,
    /// The holder identity written in the Leases; unique per replica (its pod name, possibly with
    /// its address).
    pub identity: String,
    pub shards: ShardCount,
    /// How long a Lease stays valid unrenewed: a replica killed without releasing its shards loses
    /// them to the others this long (plus one `poll_period`) after its last renewal.
    pub lease_duration: Duration,
    /// How often a held Lease is renewed. At most half the `lease_duration`: a replica stops
    /// counting a shard as its own `lease_duration - renew_period` after the last renewal it
    /// sent, before anyone else may take it.
    pub renew_period: Duration,
    /// How often the Leases are read (one list): how soon a free or expired shard is noticed.
    /// At most `renew_period`.
    pub poll_period: Duration,
}

impl ShardConfig {
    /// The defaults: 32 shards, Leases of 15 s renewed every 5 s, read every second.
    pub fn new(
        lease_name: impl Into<String>,
        namespace: impl Into<String>,
        identity: impl Into<String>,
    ) -> ShardConfig {
        ShardConfig {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            shards: ShardCount::DEFAULT,
            lease_duration: Duration::from_secs(15),
            renew_period: Duration::from_secs(5),
            poll_period: Duration::from_secs(1),
        }
    }

    /// Checks the settings; the error says which one is wrong and why.
    pub fn validate(&self) -> Result<(), ShardError> {
        let bad = |m: String| Err(ShardError::Config(m));
        let name = &self.lease_name;
        let label_ok = crate::dns::is_dns_label;
        if !label_ok(name) {
            return bad(format!(
                "lease name {name:?} must be 1 to 63 characters of a-z, 0-9 and '-', starting \
                 and ending with a letter or digit"
            ));
        }
        if !label_ok(&self.namespace) {
            return bad(format!(
                "namespace {:?} is not a namespace name",
                self.namespace
            ));
        }
        if self.identity.is_empty() {
            return bad("the replica identity is empty (set POD_NAME)".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return bad(format!(
                "lease duration {:?} is below 1s",
                self.lease_duration
            ));
        }
        if self.renew_period.is_zero() || self.renew_period * 2 > self.lease_duration {
            return bad(format!(
                "renew period {:?} must be above 0 and at most half the lease duration {:?}",
                self.renew_period, self.lease_duration
            ));
        }
        if self.poll_period.is_zero() || self.poll_period > self.renew_period {
            return bad(format!(
                "poll period {:?} must be above 0 and at most the renew period {:?}",
                self.poll_period, self.renew_period
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_refused_with_what_is_wrong() {
        let ok = ShardConfig::new("principal", "argocd", "p-0");
        ok.validate().unwrap();
        let err = |f: fn(&mut ShardConfig)| {
            let mut c = ok.clone();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(err(|c| c.lease_name = "Principal".into()).contains("lease name \"Principal\""));
        assert!(err(|c| c.lease_name = "p".repeat(64)).contains("1 to 63 characters"));
        assert!(err(|c| c.identity.clear()).contains("identity is empty"));
        assert!(err(|c| c.renew_period = Duration::from_secs(8)).contains("at most half"));
        assert!(err(|c| c.poll_period = Duration::from_secs(6)).contains("poll period"));
        assert!(err(|c| c.lease_duration = Duration::from_millis(500)).contains("below 1s"));
    }
}
