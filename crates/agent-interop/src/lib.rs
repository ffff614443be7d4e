//! Test support for interop with argoproj-labs/argocd-agent (`acb60cd`): the peer's protos compiled
//! verbatim, the CloudEvents sdk-go v2.16.2 protobuf-format rules, replicas of the peer's event
//! constructors, a minimal peer agent (client) and a minimal peer principal (server).
//! Nothing here uses `argocd_pull_agent`'s wire code.

pub mod pb {
    //! Generated from the peer's .proto files (proto/).
    pub mod authapi {
        tonic::include_proto!("authapi");
    }
    pub mod versionapi {
        tonic::include_proto!("versionapi");
    }
    pub mod eventstreamapi {
        tonic::include_proto!("eventstreamapi");
    }
    pub mod replicationapi {
        tonic::include_proto!("replicationapi");
    }
    pub mod haadminapi {
        tonic::include_proto!("haadminapi");
    }
    pub mod io {
        pub mod cloudevents {
            pub mod v1 {
                tonic::include_proto!("io.cloudevents.v1");
            }
        }
    }
}

pub mod emitter;
pub mod peer_agent;
pub mod peer_principal;
pub mod peer_replication;
pub mod sdk;
