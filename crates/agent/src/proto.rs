//! Generated gRPC/protobuf code, packages exactly as argocd-agent's.
#![allow(clippy::all, missing_docs)]

pub mod authapi {
    tonic::include_proto!("authapi");
}
pub mod versionapi {
    tonic::include_proto!("versionapi");
}
pub mod eventstreamapi {
    tonic::include_proto!("eventstreamapi");
}
/// The peer's principal/apis/logstreamapi (package `principal.apis.logstreamapi`).
pub mod logstreamapi {
    tonic::include_proto!("principal.apis.logstreamapi");
}
/// The peer's principal/apis/terminalstream (package `terminalstreamapi`).
pub mod terminalstreamapi {
    tonic::include_proto!("terminalstreamapi");
}
/// The peer's principal/apis/replication (package `replicationapi`): principal-to-principal
/// replication for cross-cluster HA.
pub mod replicationapi {
    tonic::include_proto!("replicationapi");
}
/// The peer's principal/apis/haadmin (package `haadminapi`): `ha status|promote|demote`.
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
