//! Controller-level tests on the embedded hub (one binary; modules per area).

mod support;

mod cleanup;
mod e2e;
mod faults;
mod propagation;
mod rbac;
mod status;
mod traffic;
