//! Loopback tests: real TLS 1.3 + gRPC between a principal and agents in one process.
mod autonomous;
mod cuts;
mod deletion;
mod e2e;
mod harness;
mod hub;
mod managed;
mod mesh;
mod ops;
mod policies;
mod projects;
mod rejections;
mod repos;
mod restarts;
mod resync;
