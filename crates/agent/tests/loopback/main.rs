//! Loopback tests: real TLS 1.3 + gRPC between a principal and agents in one process.
mod autonomous;
mod cluster_info;
mod deletion;
mod e2e;
mod harness;
mod hub;
mod managed;
mod ops;
mod projects;
mod rejections;
mod resource_proxy;
mod resource_proxy_kubectl;
mod restarts;
mod resync;
