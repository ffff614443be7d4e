//! Principal HA flags (`--leader-elect`, ours: the peer's `--ha-*` flags configure its
//! cross-cluster replication, which we do not have).

use std::time::Duration;

use super::common::parse_duration;

#[derive(clap::Args, Debug, Clone)]
pub struct HaArgs {
    /// Run as one of several replicas: the holder of a Lease serves, the others forward their
    /// connections to it and take over when it is gone (see the agent crate's README, "Principal
    /// HA").
    #[arg(
        long = "leader-elect",
        env = "ARGOCD_PRINCIPAL_LEADER_ELECT",
        default_value_t = false
    )]
    pub leader_elect: bool,
    /// Name of the Lease the replicas elect the active one with.
    #[arg(
        long = "lease-name",
        env = "ARGOCD_PRINCIPAL_LEASE_NAME",
        default_value = "argocd-agent-principal"
    )]
    pub lease_name: String,
    /// Namespace of the Lease (default: the principal's namespace).
    #[arg(long = "lease-namespace", env = "ARGOCD_PRINCIPAL_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long the active replica's claim lasts without renewal: a crashed replica is replaced
    /// this long after its last renewal (whole seconds, at least 2s).
    #[arg(long = "lease-duration", env = "ARGOCD_PRINCIPAL_LEASE_DURATION", default_value = "3s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// The host the other replicas reach this one at on the same ports (in a pod: its IP).
    #[arg(
        long = "ha-advertise-address",
        env = "ARGOCD_PRINCIPAL_HA_ADVERTISE_ADDRESS"
    )]
    pub advertise_address: Option<String>,
    /// This replica's unique name (default: $POD_NAME, else $HOSTNAME).
    #[arg(long = "ha-replica-name", env = "ARGOCD_PRINCIPAL_HA_REPLICA_NAME")]
    pub replica_name: Option<String>,
}

impl HaArgs {
    /// The HA settings when `--leader-elect` is on.
    pub fn config(&self, namespace: &str) -> anyhow::Result<Option<crate::ha::HaConfig>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let advertise = self
            .advertise_address
            .clone()
            .or_else(|| std::env::var("POD_IP").ok())
            .unwrap_or_default();
        let name = self
            .replica_name
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("principal-{}", std::process::id()));
        let ns = self.lease_namespace.as_deref().unwrap_or(namespace);
        crate::ha::HaConfig::new(&self.lease_name, ns, &name, &advertise, self.lease_duration)
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        ha: HaArgs,
    }

    fn parse(args: &[&str]) -> HaArgs {
        Cli::try_parse_from(std::iter::once("principal").chain(args.iter().copied()))
            .unwrap()
            .ha
    }

    #[test]
    fn leader_election_settings_and_their_errors() {
        assert!(
            parse(&[]).config("argocd").unwrap().is_none(),
            "off by default"
        );
        let c = parse(&[
            "--leader-elect",
            "--ha-replica-name=principal-7d9f",
            "--ha-advertise-address=10.0.0.7",
            "--lease-duration=6s",
        ])
        .config("argocd")
        .unwrap()
        .unwrap();
        assert_eq!(c.lease.identity, "principal-7d9f@10.0.0.7");
        assert_eq!(c.lease.lease_name, "argocd-agent-principal");
        assert_eq!(c.lease.lease_namespace, "argocd");
        assert_eq!(
            (c.lease.duration, c.lease.grace),
            (Duration::from_secs(6), Duration::from_secs(2))
        );
        let err = |args: &[&str]| {
            parse(args)
                .config("argocd")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(
            err(&[
                "--leader-elect",
                "--ha-advertise-address=",
                "--ha-replica-name=a"
            ])
            .contains("POD_IP"),
            "a replica without an address the others can reach is refused"
        );
        assert!(
            err(&[
                "--leader-elect",
                "--ha-advertise-address=10.0.0.7",
                "--lease-duration=1s"
            ])
            .contains("at least 2s")
        );
    }
}
