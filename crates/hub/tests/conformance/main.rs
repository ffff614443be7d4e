//! Conformance tests of the embedded hub: each module pins one area of the apiserver behaviour
//! that controllers, the agent and kubectl rely on.

mod common;

mod basic;
mod discovery;
mod list;
mod watch;
