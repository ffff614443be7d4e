//! Integration tests of `argocd-pull cmp` (one test binary: see docs/dev/parallel-work.md).

mod support;

mod cli;
mod embedded_hub;
mod errors;
mod golden;
mod health;
mod real_cluster;
mod split;
