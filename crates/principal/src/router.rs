//! Active/active replicas: which replica serves an agent ([`Owners`], from the shard Leases) and
//! the links to the others ([`Links`]). One routing rule for every path that reaches an agent:
//! gRPC calls, resource-proxy requests, container logs, the web terminal and Redis commands.
//! A principal that is not one of several replicas has no router and serves every agent.

use std::net::SocketAddr;

use argocd_pull_agent_core::tls::TlsMaterial;

use super::owners::{Owner, Owners};
use super::replica_link::{Io, Links};

pub(super) struct Router {
    pub(super) owners: Owners,
    links: Links,
}

/// The replica that serves an agent this one does not, and the link to it.
pub(super) struct Remote<'a> {
    pub(super) addr: SocketAddr,
    links: &'a Links,
}

impl Remote<'_> {
    /// The gRPC / HTTP/2 channel to the owner (shared by every call to it).
    pub(super) fn channel(&self) -> tonic::transport::Channel {
        self.links.channel(self.addr)
    }

    /// The owner refused its last connection (a replica gone without releasing its shards).
    pub(super) fn is_down(&self) -> bool {
        self.links.is_down(self.addr)
    }

    /// A new HTTP/1.1 connection to the owner (for an upgrade: the web terminal).
    pub(super) async fn connect_http1(&self) -> anyhow::Result<Box<dyn Io>> {
        self.links.connect_http1(self.addr).await
    }
}

impl Router {
    pub(super) fn new(owners: Owners, links: Links) -> Router {
        Router { owners, links }
    }

    /// Whether this replica serves `agent` now.
    pub(super) fn owns(&self, agent: &str) -> bool {
        self.owners.owns(agent)
    }

    /// New TLS material for the links: the next calls connect with it.
    pub(super) fn reload(&self, m: &TlsMaterial) -> anyhow::Result<()> {
        self.links.reload(m)
    }

    /// `None` when this replica serves `agent`, else the owner; `Err` says why nobody can take
    /// it now. `forwarded`: it came over the replica link, and a forwarded call is never
    /// forwarded again.
    pub(super) async fn owner(
        &self,
        agent: &str,
        forwarded: bool,
    ) -> Result<Option<Remote<'_>>, String> {
        let mut owner = self.owners.wait_owner(agent).await;
        // an owner that refused its last connection (gone without releasing its shards): wait
        // for its shards to be taken rather than fail every call until then
        if let Owner::Replica { addr, .. } = &owner
            && self.links.is_down(*addr)
        {
            owner = self.owners.wait_owner_other_than(agent, &owner).await;
        }
        match owner {
            Owner::Me => Ok(None),
            Owner::Replica { identity, .. } if forwarded => Err(format!(
                "this principal replica no longer serves agent {agent:?} (replica {identity} does): retry"
            )),
            Owner::Replica { addr, identity } => {
                tracing::debug!(agent, owner = %identity, "forwarding to the replica serving the agent");
                Ok(Some(Remote {
                    addr,
                    links: &self.links,
                }))
            }
            Owner::Nobody(shard) => Err(format!(
                "no principal replica holds shard {shard} of agent {agent:?} yet (a replica left or is starting): retry"
            )),
            Owner::Loading(shard) => Err(format!(
                "this principal replica took shard {shard} of agent {agent:?} and is still reading its hub Applications: retry"
            )),
        }
    }
}
