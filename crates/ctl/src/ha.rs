//! `ctl ha status|promote|demote` (peer: cmd/ctl/ha.go): the HA admin API of a principal, at
//! `--address` or through a port-forward to the principal pod's port 8405 (label
//! `app.kubernetes.io/name=argocd-agent-principal` in `--principal-namespace`).

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use tonic::transport::{Channel, Endpoint};

use argocd_pull_agent_core::proto::haadminapi::{self as api, ha_admin_client::HaAdminClient};

use super::CtlArgs;

/// The admin port the peer's ctl port-forwards to.
const ADMIN_PORT: u16 = 8405;
/// The principal pods' label.
const PRINCIPAL_POD_LABEL: &str = "app.kubernetes.io/name=argocd-agent-principal";

#[derive(clap::Subcommand, Debug, Clone)]
pub enum HaCommand {
    /// Show HA status of the principal server
    Status {
        /// Direct gRPC address (bypasses kube port-forward)
        #[arg(short = 'a', long, default_value = "")]
        address: String,
        /// Output format: text, yaml, json
        #[arg(short = 'o', long, default_value = "text")]
        output: String,
        /// Timeout for the operation
        #[arg(short = 't', long, default_value = "10s", value_parser = argocd_pull_agent_core::settings::parse_duration)]
        timeout: Duration,
    },
    /// Promote the principal to active
    ///
    /// Promote this principal to the ACTIVE role.
    ///
    /// Refuses if the peer is also ACTIVE (split-brain safety). Use --force to override the
    /// safety check.
    Promote {
        /// Direct gRPC address (bypasses kube port-forward)
        #[arg(short = 'a', long, default_value = "")]
        address: String,
        /// Skip safety check and confirmation
        #[arg(short = 'f', long, default_value_t = false)]
        force: bool,
        /// Timeout for the operation
        #[arg(short = 't', long, default_value = "30s", value_parser = argocd_pull_agent_core::settings::parse_duration)]
        timeout: Duration,
    },
    /// Demote the principal to replica
    ///
    /// Demote this principal from ACTIVE to REPLICATING.
    ///
    /// The principal will stop accepting agents and begin replicating from the peer.
    Demote {
        /// Direct gRPC address (bypasses kube port-forward)
        #[arg(short = 'a', long, default_value = "")]
        address: String,
        /// Skip confirmation prompt
        #[arg(short = 'f', long, default_value_t = false)]
        force: bool,
        /// Timeout for the operation
        #[arg(short = 't', long, default_value = "30s", value_parser = argocd_pull_agent_core::settings::parse_duration)]
        timeout: Duration,
    },
}

/// Runs an `ha` command; prints as it goes (the confirmation prompt reads stdin).
pub async fn run(cmd: &HaCommand, args: &CtlArgs) -> anyhow::Result<()> {
    match cmd {
        HaCommand::Status {
            address,
            output,
            timeout,
        } => {
            if !matches!(output.as_str(), "text" | "json" | "yaml") {
                anyhow::bail!("unknown output format: {output}");
            }
            let resp = with_timeout(*timeout, async {
                let mut c = client(address, args).await?;
                c.status(api::StatusRequest {})
                    .await
                    .map_err(|s| anyhow::anyhow!("failed to get HA status: {}", go_status(&s)))
            })
            .await?
            .into_inner();
            print!("{}", render_status(&resp, output, now_unix())?);
            Ok(())
        }
        HaCommand::Promote {
            address,
            force,
            timeout,
        } => {
            if !force
                && !confirm(
                    "WARNING: This will promote the principal to ACTIVE.\nConnected agents may need to reconnect.\n",
                )?
            {
                println!("Operation cancelled.");
                return Ok(());
            }
            let r = with_timeout(*timeout, async {
                let mut c = client(address, args).await?;
                c.promote(api::PromoteRequest { force: *force })
                    .await
                    .map_err(|s| anyhow::anyhow!("promote failed: {}", go_status(&s)))
            })
            .await?;
            println!("Promoted. State is now: {}", r.into_inner().state);
            Ok(())
        }
        HaCommand::Demote {
            address,
            force,
            timeout,
        } => {
            if !force
                && !confirm(
                    "WARNING: This will demote the principal to REPLICA.\nAll connected agents will be disconnected.\n",
                )?
            {
                println!("Operation cancelled.");
                return Ok(());
            }
            let r = with_timeout(*timeout, async {
                let mut c = client(address, args).await?;
                c.demote(api::DemoteRequest {})
                    .await
                    .map_err(|s| anyhow::anyhow!("demote failed: {}", go_status(&s)))
            })
            .await?;
            println!("Demoted. State is now: {}", r.into_inner().state);
            Ok(())
        }
    }
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

async fn with_timeout<T>(
    t: Duration,
    f: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::time::timeout(t, f)
        .await
        .map_err(|_| anyhow::anyhow!("context deadline exceeded (after {t:?}; raise --timeout)"))?
}

/// A gRPC status as grpc-go prints one.
fn go_status(s: &tonic::Status) -> String {
    let code = format!("{:?}", s.code());
    format!("rpc error: code = {code} desc = {}", s.message())
}

/// The peer's `[y/N]` question on stdin.
fn confirm(warning: &str) -> anyhow::Result<bool> {
    print!("{warning}\nProceed? [y/N]: ");
    std::io::stdout().flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    Ok(matches!(line.trim(), "y" | "Y"))
}

async fn client(address: &str, args: &CtlArgs) -> anyhow::Result<HaAdminClient<Channel>> {
    if !address.is_empty() {
        let ep = Endpoint::from_shared(format!("http://{address}"))
            .with_context(|| format!("failed to connect to {address}"))?
            .connect_timeout(Duration::from_secs(10));
        let ch = ep.connect().await.map_err(|e| {
            anyhow::anyhow!(
                "failed to connect to {address}: {e}{}",
                std::error::Error::source(&e)
                    .map(|s| format!(": {s}"))
                    .unwrap_or_default()
            )
        })?;
        return Ok(HaAdminClient::new(ch));
    }
    // the principal pod's admin port, through the API server
    let kube = argocd_pull_agent_core::settings::kube_client(
        args.kubeconfig.as_ref(),
        args.principal_context.as_deref(),
    )
    .await
    .context("failed to create kube client")?;
    let ns = &args.principal_namespace;
    let pods: kube::Api<Pod> = kube::Api::namespaced(kube, ns);
    let list = pods
        .list(&ListParams::default().labels(PRINCIPAL_POD_LABEL).limit(1))
        .await
        .context("failed to list principal pods")?;
    let pod = list
        .items
        .first()
        .and_then(|p| p.metadata.name.clone())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no principal pod found with label {PRINCIPAL_POD_LABEL} in namespace {ns} (set --principal-namespace / --principal-context, or give --address)"
            )
        })?;
    let mut pf = pods
        .portforward(&pod, &[ADMIN_PORT])
        .await
        .context("port-forward failed")?;
    let stream = pf
        .take_stream(ADMIN_PORT)
        .ok_or_else(|| anyhow::anyhow!("port-forward failed: no stream for port {ADMIN_PORT}"))?;
    let slot = std::sync::Arc::new(std::sync::Mutex::new(Some(stream)));
    let ch = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let s = slot.lock().expect("poisoned").take();
            async move {
                s.map(hyper_util::rt::TokioIo::new).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotConnected, "port-forward used")
                })
            }
        }))
        .await
        .context("port-forward failed")?;
    // the forwarder lives as long as the process (one command)
    std::mem::forget(pf);
    Ok(HaAdminClient::new(ch))
}

/// YAML scalar as yaml.v3 writes a string (quoted when empty or ambiguous).
fn yaml_str(s: &str) -> String {
    let plain = !s.is_empty()
        && !s.contains(": ")
        && !s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c))
        && s.parse::<f64>().is_err()
        && !matches!(s, "true" | "false" | "null" | "~" | "yes" | "no");
    match plain {
        true => s.to_string(),
        false => format!("{s:?}"),
    }
}

/// The peer's `printHAStatus`.
pub fn render_status(r: &api::HaStatusResponse, format: &str, now: i64) -> anyhow::Result<String> {
    Ok(match format {
        // encoding/json of the generated struct: snake_case names, omitempty, two-space indent
        "json" => {
            let mut m = serde_json::Map::new();
            let mut put = |k: &str, v: serde_json::Value, empty: bool| {
                if !empty {
                    m.insert(k.into(), v);
                }
            };
            put("state", r.state.clone().into(), r.state.is_empty());
            put(
                "preferred_role",
                r.preferred_role.clone().into(),
                r.preferred_role.is_empty(),
            );
            put(
                "peer_address",
                r.peer_address.clone().into(),
                r.peer_address.is_empty(),
            );
            put("peer_reachable", r.peer_reachable.into(), !r.peer_reachable);
            put(
                "peer_state",
                r.peer_state.clone().into(),
                r.peer_state.is_empty(),
            );
            put(
                "connected_replicas",
                r.connected_replicas.into(),
                r.connected_replicas == 0,
            );
            put(
                "last_event_timestamp",
                r.last_event_timestamp.into(),
                r.last_event_timestamp == 0,
            );
            put(
                "last_sequence_num",
                r.last_sequence_num.into(),
                r.last_sequence_num == 0,
            );
            put(
                "connected_agents",
                r.connected_agents.into(),
                r.connected_agents == 0,
            );
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b"  ");
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            serde::Serialize::serialize(&serde_json::Value::Object(m), &mut ser)?;
            buf.push(b'\n');
            String::from_utf8(buf)?
        }
        // yaml.v3 of the generated struct: lower-cased field names, every field
        "yaml" => format!(
            "state: {}\npreferredrole: {}\npeeraddress: {}\npeerreachable: {}\npeerstate: {}\nconnectedreplicas: {}\nlasteventtimestamp: {}\nlastsequencenum: {}\nconnectedagents: {}\n",
            yaml_str(&r.state),
            yaml_str(&r.preferred_role),
            yaml_str(&r.peer_address),
            r.peer_reachable,
            yaml_str(&r.peer_state),
            r.connected_replicas,
            r.last_event_timestamp,
            r.last_sequence_num,
            r.connected_agents
        ),
        "text" => {
            let mut s = String::from("HA Status\n---------\n");
            s += &format!("State:             {}\n", r.state);
            s += &format!("Preferred Role:    {}\n", r.preferred_role);
            if !r.peer_address.is_empty() {
                s += &format!("Peer Address:      {}\n", r.peer_address);
            }
            if r.state == "active" {
                s += &format!("Connected Replicas: {}\n", r.connected_replicas);
            } else {
                s += &format!("Replicating:       {}\n", r.peer_reachable);
            }
            s += &format!("Connected Agents:  {}\n", r.connected_agents);
            if r.last_event_timestamp > 0 {
                s += &format!("Last Event:        {}s ago\n", now - r.last_event_timestamp);
            }
            if r.last_sequence_num > 0 {
                s += &format!("Last Sequence:     {}\n", r.last_sequence_num);
            }
            s
        }
        other => anyhow::bail!("unknown output format: {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica() -> api::HaStatusResponse {
        api::HaStatusResponse {
            state: "replicating".into(),
            preferred_role: "replica".into(),
            peer_address: "principal.region-a.internal:8443".into(),
            peer_reachable: true,
            last_event_timestamp: 1_000,
            last_sequence_num: 42,
            ..Default::default()
        }
    }

    #[test]
    fn status_prints_as_the_peers_ctl() {
        assert_eq!(
            render_status(&replica(), "text", 1_007).unwrap(),
            "HA Status\n---------\nState:             replicating\nPreferred Role:    replica\nPeer Address:      principal.region-a.internal:8443\nReplicating:       true\nConnected Agents:  0\nLast Event:        7s ago\nLast Sequence:     42\n"
        );
        let active = api::HaStatusResponse {
            state: "active".into(),
            preferred_role: "primary".into(),
            connected_replicas: 1,
            connected_agents: 12,
            ..Default::default()
        };
        assert_eq!(
            render_status(&active, "text", 0).unwrap(),
            "HA Status\n---------\nState:             active\nPreferred Role:    primary\nConnected Replicas: 1\nConnected Agents:  12\n"
        );
        assert_eq!(
            render_status(&active, "json", 0).unwrap(),
            "{\n  \"state\": \"active\",\n  \"preferred_role\": \"primary\",\n  \"connected_replicas\": 1,\n  \"connected_agents\": 12\n}\n"
        );
        assert_eq!(
            render_status(&active, "yaml", 0).unwrap(),
            "state: active\npreferredrole: primary\npeeraddress: \"\"\npeerreachable: false\npeerstate: \"\"\nconnectedreplicas: 1\nlasteventtimestamp: 0\nlastsequencenum: 0\nconnectedagents: 12\n"
        );
        assert!(render_status(&active, "toml", 0).is_err());
    }
}
