//! Principal HA flags: the peer's cross-cluster replication (`--ha-enabled`, `--ha-*`, its env
//! and defaults, cmd/argocd-agent/principal.go) and our in-cluster Lease failover
//! (`--leader-elect`).

use std::time::Duration;

use argocd_pull_agent_core::settings::parse_duration;

/// `--ha-mode`: how several principal replicas share the agents.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaMode {
    /// The holder of one Lease serves every agent, the others forward to it (`--leader-elect`).
    ActivePassive,
    /// Every replica serves the agents of its shards and forwards the others' to their owner.
    ActiveActive,
}

/// Several principal replicas in one cluster, by mode.
#[derive(Debug)]
pub enum InCluster {
    ActivePassive(argocd_pull_principal::ha::HaConfig),
    ActiveActive(argocd_pull_principal::ha::active_active::ActiveActive),
}

#[derive(clap::Args, Debug, Clone)]
pub struct HaArgs {
    /// Run as one of several replicas: the holder of a Lease serves, the others forward their
    /// connections to it and take over when it is gone (see the agent crate's README, "Principal
    /// HA"). The same as `--ha-mode active-passive`.
    #[arg(
        long = "leader-elect",
        env = "ARGOCD_PRINCIPAL_LEADER_ELECT",
        default_value_t = false
    )]
    pub leader_elect: bool,
    /// Run as one of several replicas: `active-passive` (as --leader-elect) or `active-active`
    /// (every replica serves its share of the agents, held on shard Leases
    /// `<lease-name>-shard-<k>`, and forwards the other agents' calls to their owner on
    /// --ha-replica-port).
    #[arg(long = "ha-mode", env = "ARGOCD_PRINCIPAL_HA_MODE", value_enum)]
    pub ha_mode: Option<HaMode>,
    /// Active/active: how many shards the agents are split into (1-1024, the same on every
    /// replica; to change it, stop every replica first).
    #[arg(
        long = "ha-shards",
        env = "ARGOCD_PRINCIPAL_HA_SHARDS",
        default_value_t = 32
    )]
    pub ha_shards: u32,
    /// Active/active: the port the replicas take each other's forwarded calls on (mutual TLS
    /// with the principal's own certificate), at the address in --ha-advertise-address.
    #[arg(
        long = "ha-replica-port",
        env = "ARGOCD_PRINCIPAL_HA_REPLICA_PORT",
        default_value_t = 8406
    )]
    pub ha_replica_port: u16,
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

    /// Cross-cluster HA: this principal is one of two in two clusters, one active and one
    /// replicating its hub (see the agent crate's README, "Cross-cluster HA").
    #[arg(long = "ha-enabled", env = "ARGOCD_PRINCIPAL_HA_ENABLED", default_value_t = false,
          action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub ha_enabled: bool,
    /// Preferred HA role: 'primary' or 'replica' (the state it starts in: active or syncing).
    #[arg(
        long = "ha-preferred-role",
        env = "ARGOCD_PRINCIPAL_HA_PREFERRED_ROLE",
        default_value = "primary"
    )]
    pub ha_preferred_role: String,
    /// Address of the HA peer principal (required for replicas, optional for primary): host:port
    /// of its gRPC port.
    #[arg(
        long = "ha-peer-address",
        env = "ARGOCD_PRINCIPAL_HA_PEER_ADDRESS",
        default_value = ""
    )]
    pub ha_peer_address: String,
    /// How long a replica that has not reached its peer since it started waits before it counts
    /// the peer as unreachable (state disconnected), from where it can be promoted.
    #[arg(long = "ha-failover-timeout", env = "ARGOCD_PRINCIPAL_HA_FAILOVER_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub ha_failover_timeout: Duration,
    /// Port for the localhost-only HAAdmin gRPC server (0 uses the default 8405).
    #[arg(
        long = "ha-admin-port",
        env = "ARGOCD_PRINCIPAL_HA_ADMIN_PORT",
        default_value_t = 0
    )]
    pub ha_admin_port: u16,
    /// Comma-separated list of peer identities allowed to connect for replication (as --auth
    /// extracts them; empty: any authenticated peer).
    #[arg(
        long = "ha-allowed-replication-clients",
        env = "ARGOCD_PRINCIPAL_HA_ALLOWED_REPLICATION_CLIENTS",
        value_delimiter = ','
    )]
    pub ha_allowed_replication_clients: Vec<String>,
    /// How long the primary waits for the replica's initial ACK after snapshot fetch (0: the
    /// default 5m).
    #[arg(long = "ha-replication-initial-ack-timeout", env = "ARGOCD_PRINCIPAL_HA_REPLICATION_INITIAL_ACK_TIMEOUT", default_value = "0", value_parser = parse_duration)]
    pub ha_replication_initial_ack_timeout: Duration,
}

impl HaArgs {
    /// The cross-cluster HA settings when `--ha-enabled` is on (the peer's options and
    /// validation, with the fix named).
    pub fn replication(
        &self,
    ) -> anyhow::Result<Option<argocd_pull_principal::ha::replication::Settings>> {
        use argocd_pull_principal::ha::replication as r;
        if !self.ha_enabled {
            return Ok(None);
        }
        if self.mode()?.is_some() {
            anyhow::bail!(
                "--ha-enabled (cross-cluster replication) cannot be combined with --leader-elect or --ha-mode (in-cluster replicas): run one principal per cluster with --ha-enabled (Kubernetes restarts it in place), or several with --ha-mode and no --ha-enabled"
            );
        }
        let port = match self.ha_admin_port {
            0 => r::DEFAULT_ADMIN_PORT,
            p => p,
        };
        let s = r::Settings {
            preferred_role: r::PreferredRole::parse(&self.ha_preferred_role)?,
            peer_address: self.ha_peer_address.trim().to_string(),
            failover_timeout: self.ha_failover_timeout,
            admin_addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            allowed_clients: self
                .ha_allowed_replication_clients
                .iter()
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect(),
            initial_ack_timeout: match self.ha_replication_initial_ack_timeout {
                d if d.is_zero() => r::DEFAULT_INITIAL_ACK_TIMEOUT,
                d => d,
            },
        };
        s.validate()?;
        Ok(Some(s))
    }

    /// The in-cluster HA mode: `--ha-mode`, or active/passive with `--leader-elect`.
    pub fn mode(&self) -> anyhow::Result<Option<HaMode>> {
        match (self.leader_elect, self.ha_mode) {
            (true, Some(HaMode::ActiveActive)) => anyhow::bail!(
                "--leader-elect is --ha-mode active-passive: drop it to run active/active replicas (--ha-mode active-active)"
            ),
            (true, _) => Ok(Some(HaMode::ActivePassive)),
            (false, m) => Ok(m),
        }
    }

    fn advertise(&self) -> String {
        self.advertise_address
            .clone()
            .or_else(|| std::env::var("POD_IP").ok())
            .unwrap_or_default()
    }

    fn name(&self) -> String {
        self.replica_name
            .clone()
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("principal-{}", std::process::id()))
    }

    /// The in-cluster replicas' settings, in whichever mode is on.
    pub fn in_cluster(&self, namespace: &str) -> anyhow::Result<Option<InCluster>> {
        Ok(match self.mode()? {
            None => None,
            Some(HaMode::ActivePassive) => self.config(namespace)?.map(InCluster::ActivePassive),
            Some(HaMode::ActiveActive) => {
                self.active_active(namespace)?.map(InCluster::ActiveActive)
            }
        })
    }

    /// The HA settings in active/passive mode (`--leader-elect`).
    pub fn config(
        &self,
        namespace: &str,
    ) -> anyhow::Result<Option<argocd_pull_principal::ha::HaConfig>> {
        if self.mode()? != Some(HaMode::ActivePassive) {
            return Ok(None);
        }
        let ns = self.lease_namespace.as_deref().unwrap_or(namespace);
        argocd_pull_principal::ha::HaConfig::new(
            &self.lease_name,
            ns,
            &self.name(),
            &self.advertise(),
            self.lease_duration,
        )
        .map(Some)
    }

    /// The settings in active/active mode (`--ha-mode active-active`).
    pub fn active_active(
        &self,
        namespace: &str,
    ) -> anyhow::Result<Option<argocd_pull_principal::ha::active_active::ActiveActive>> {
        if self.mode()? != Some(HaMode::ActiveActive) {
            return Ok(None);
        }
        let ns = self.lease_namespace.as_deref().unwrap_or(namespace);
        argocd_pull_principal::ha::active_active::ActiveActive::new(
            &self.lease_name,
            ns,
            &self.name(),
            &self.advertise(),
            self.lease_duration,
            self.ha_shards,
            self.ha_replica_port,
        )
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
    fn cross_cluster_flags_have_the_peers_names_defaults_and_checks() {
        use argocd_pull_principal::ha::replication::PreferredRole;
        assert!(
            parse(&[]).replication().unwrap().is_none(),
            "off by default"
        );
        let s = parse(&["--ha-enabled"]).replication().unwrap().unwrap();
        assert_eq!(
            s.preferred_role,
            PreferredRole::Primary,
            "the peer's flag default"
        );
        assert_eq!(s.admin_addr.to_string(), "127.0.0.1:8405");
        assert_eq!(s.failover_timeout, Duration::from_secs(30));
        assert_eq!(s.initial_ack_timeout, Duration::from_secs(300));
        assert!(s.allowed_clients.is_empty());
        let s = parse(&[
            "--ha-enabled=true",
            "--ha-preferred-role=replica",
            "--ha-peer-address=principal.region-a.internal:8443",
            "--ha-failover-timeout=1m",
            "--ha-admin-port=9405",
            "--ha-allowed-replication-clients=region-a, principal-replica",
            "--ha-replication-initial-ack-timeout=10m",
        ])
        .replication()
        .unwrap()
        .unwrap();
        assert_eq!(s.preferred_role, PreferredRole::Replica);
        assert_eq!(s.peer_address, "principal.region-a.internal:8443");
        assert_eq!(s.failover_timeout, Duration::from_secs(60));
        assert_eq!(s.admin_addr.to_string(), "127.0.0.1:9405");
        assert_eq!(s.allowed_clients, ["region-a", "principal-replica"]);
        assert_eq!(s.initial_ack_timeout, Duration::from_secs(600));
        let err = |args: &[&str]| parse(args).replication().unwrap_err().to_string();
        assert!(
            err(&["--ha-enabled", "--ha-preferred-role=replica"])
                .contains("peer address is required for replica role")
        );
        assert!(
            err(&["--ha-enabled", "--ha-preferred-role=leader"]).contains("unknown role: leader")
        );
        assert!(err(&["--ha-enabled", "--ha-peer-address=nohost"]).contains("host:port"));
        assert!(err(&["--ha-enabled", "--leader-elect"]).contains("cannot be combined"));
        assert!(err(&["--ha-enabled", "--ha-mode=active-active"]).contains("cannot be combined"));
        assert!(
            !parse(&["--ha-enabled=false"]).ha_enabled,
            "the peer's boolean flag syntax"
        );
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

    #[test]
    fn the_ha_modes_and_the_active_active_settings_and_their_errors() {
        assert_eq!(parse(&[]).mode().unwrap(), None);
        assert_eq!(
            parse(&["--leader-elect"]).mode().unwrap(),
            Some(HaMode::ActivePassive)
        );
        let p = parse(&[
            "--ha-mode=active-passive",
            "--ha-advertise-address=10.0.0.7",
        ]);
        assert!(
            p.config("argocd").unwrap().is_some(),
            "active-passive is --leader-elect"
        );
        assert!(p.active_active("argocd").unwrap().is_none());
        let aa = parse(&[
            "--ha-mode=active-active",
            "--ha-replica-name=principal-0",
            "--ha-advertise-address=10.0.0.7",
            "--ha-shards=64",
            "--ha-replica-port=9406",
            "--lease-duration=6s",
        ]);
        assert!(aa.config("argocd").unwrap().is_none());
        let c = aa.active_active("argocd").unwrap().unwrap();
        assert_eq!(c.shards.identity, "principal-0@10.0.0.7");
        assert_eq!(c.shards.lease_name, "argocd-agent-principal");
        assert_eq!(c.shards.namespace, "argocd");
        assert_eq!(c.shards.shards.get(), 64);
        assert_eq!(c.replica_port, 9406);
        assert_eq!(
            (
                c.shards.lease_duration,
                c.shards.renew_period,
                c.shards.poll_period
            ),
            (
                Duration::from_secs(6),
                Duration::from_secs(2),
                Duration::from_secs(1)
            )
        );
        let d = parse(&["--ha-mode=active-active", "--ha-advertise-address=10.0.0.7"])
            .active_active("argocd")
            .unwrap()
            .unwrap();
        assert_eq!(
            (d.shards.shards.get(), d.replica_port),
            (32, 8406),
            "the defaults"
        );
        let err = |args: &[&str]| {
            let mut a = vec!["--ha-mode=active-active", "--ha-replica-name=p"];
            a.extend_from_slice(args);
            parse(&a)
                .active_active("argocd")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert!(err(&["--ha-advertise-address="]).contains("POD_IP"));
        assert!(err(&["--ha-advertise-address=pod.example"]).contains("not an IP address"));
        assert!(err(&["--ha-advertise-address=10.0.0.7", "--ha-shards=0"]).contains("1 to 1024"));
        assert!(
            err(&["--ha-advertise-address=10.0.0.7", "--ha-shards=2000"]).contains("1 to 1024")
        );
        assert!(
            err(&["--ha-advertise-address=10.0.0.7", "--lease-duration=1s"])
                .contains("at least 2s")
        );
        assert!(
            err(&["--ha-advertise-address=10.0.0.7", "--lease-name=Principal"])
                .contains("--lease-name")
        );
        assert!(
            err(&["--ha-advertise-address=10.0.0.7", "--leader-elect"])
                .contains("drop it to run active/active")
        );
    }
}
