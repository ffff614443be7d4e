//! `argocd-pull crds`: print the CRDs argocd-pull serves.

use std::io::Write;
use std::process::ExitCode;

use argocd_pull_api::crds;

#[derive(clap::Args, Debug)]
pub struct CrdsArgs {
    /// Also print the upstream CRDs the controllers read (Argo CD and OCM), for a test cluster.
    #[arg(long, env = "ARGOCD_PULL_CRDS_ALL")]
    pub all: bool,
}

/// The YAML stream `argocd-pull crds` prints: one document per CRD, separated by `---`.
pub fn render(args: &CrdsArgs) -> String {
    let mut docs: Vec<&str> = crds::OWN.to_vec();
    if args.all {
        docs.extend(crds::ARGOCD);
        docs.extend(crds::OCM_HUB);
    }
    let mut out = String::new();
    for doc in docs {
        let body = doc.trim_start_matches("---\n").trim_end();
        out.push_str("---\n");
        out.push_str(body);
        out.push('\n');
    }
    out
}

pub fn run(args: &CrdsArgs) -> ExitCode {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(render(args).as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("argocd-pull crds: writing to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `deploy/crds/` is what users apply; it must be exactly what the binary prints.
    #[test]
    fn deploy_crds_match_the_printed_crds() {
        let committed = include_str!("../../../deploy/crds/argocd-pull-crds.yaml");
        assert_eq!(
            committed,
            render(&CrdsArgs { all: false }),
            "run `argocd-pull crds > deploy/crds/argocd-pull-crds.yaml`"
        );
    }

    #[test]
    fn printed_crds_are_gitopscluster_and_report() {
        let out = render(&CrdsArgs { all: false });
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("  name: "))
            .filter(|n| n.contains('.'))
            .collect();
        assert_eq!(
            names,
            [
                "gitopsclusters.apps.open-cluster-management.io",
                "multiclusterapplicationsetreports.apps.open-cluster-management.io"
            ]
        );
        assert_eq!(
            render(&CrdsArgs { all: true }).matches("\n---\n").count() + 1,
            2 + 3 + 11
        );
    }
}
