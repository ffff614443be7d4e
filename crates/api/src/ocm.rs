//! Open Cluster Management APIs: clusters and placement ([`cluster`]), work ([`work`]).

pub mod cluster;
pub mod work;
