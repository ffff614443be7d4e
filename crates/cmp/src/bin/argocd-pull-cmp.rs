//! Standalone `cmp` binary (same commands as `argocd-pull cmp`), used by the process-level
//! tests and the RSS measurement. The product binary is `argocd-pull` (crates/cli).

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "argocd-pull-cmp", version)]
struct Cli {
    #[command(flatten)]
    cmp: argocd_pull_cmp::cli::CmpArgs,
}

fn main() -> std::process::ExitCode {
    argocd_pull_cmp::cli::run(Cli::parse().cmp)
}
