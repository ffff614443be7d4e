//! Agent-based pull model: principal and agent over mTLS gRPC streams.
pub mod checksum;
pub mod event;
pub mod proto;
pub mod queue;
