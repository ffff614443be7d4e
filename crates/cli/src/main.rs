//! `argocd-pull`: Argo CD pull-model delivery for Open Cluster Management fleets.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod crds;

/// Argo CD pull-model delivery for Open Cluster Management (OCM) fleets.
///
/// Managed clusters pull their Argo CD applications from the hub instead of the hub pushing
/// with stored credentials. Run `argocd-pull demo` to see it work with no cluster at all.
#[derive(Parser, Debug)]
#[command(
    name = "argocd-pull",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Config Management Plugin mode: wrap rendered manifests in ManifestWorks (run by Argo CD's cmp-server).
    Cmp(argocd_pull_cmp::cli::CmpArgs),
    /// Print the CustomResourceDefinitions argocd-pull serves (GitOpsCluster, MulticlusterApplicationSetReport).
    Crds(crds::CrdsArgs),
    /// Print the version.
    Version,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Cmp(args) => argocd_pull_cmp::cli::run(args),
        Command::Crds(args) => crds::run(&args),
        Command::Version => {
            println!("argocd-pull {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
