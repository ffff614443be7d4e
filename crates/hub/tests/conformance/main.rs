//! Conformance tests of the embedded hub: each module pins one area of the apiserver behaviour
//! that controllers, the agent and kubectl rely on.

mod common;

mod basic;
mod counters;
mod create;
mod delete;
mod discovery;
mod errors;
mod http;
mod kubectl;
mod list;
mod patch;
mod update;
mod watch;
