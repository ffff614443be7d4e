//! The shard owner against the embedded hub's Leases: replicas converge to a fair split, hand
//! their shards over on shutdown, lose them when killed, share them with a newcomer, and stop with
//! a clear error on conflicting settings.

mod harness;
mod ownership;
mod settings;
