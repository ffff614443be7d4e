//! `cargo xtask`: the project's habits as one command (the alias is in `.cargo/config.toml`).
//! Every task prints each command as `+ <command>` before running it; `--dry-run` prints them and
//! runs nothing. The tasks wrap what the repository already has (hack/, .ci/run, cargo, Helm's
//! engine), so they stay the single source of how each thing is done.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod benches;
mod step;
mod tasks;

use tasks::Engine;

/// The project's tasks: real-env e2e, benchmarks, image, charts, release, CI.
///
/// Each task prints every command it runs (`+ <command>`), from the repository root.
#[derive(Parser, Debug)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
struct Cli {
    /// Print the commands the task would run, one per line (`+ <command>`), and run nothing.
    #[arg(long, global = true)]
    dry_run: bool,
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Every env-gated real-cluster suite against the real env, one after another, each under the
    /// env's lock (hack/e2e-real.sh; kubeconfigs from ARGOCD_PULL_E2E_* or $REALK8S).
    E2e {
        /// Also the fault tests that stop and restart the hub API server.
        #[arg(long)]
        disruptive: bool,
        /// Only these suites (default: all; the names are hack/e2e-real.sh's).
        suites: Vec<String>,
    },
    /// List or run the benchmarks (every bench target of crates/*/benches).
    #[command(subcommand)]
    Bench(BenchTask),
    /// The image: an OCI archive built by buildah (hack/image.sh), or the Containerfile with
    /// Docker/Podman.
    Image {
        /// Where the OCI archive goes (buildah; default target/image/argocd-pull-<version>-linux-<arch>.tar).
        out: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "buildah")]
        engine: Engine,
        /// Rust target of the static binary (buildah): x86_64-unknown-linux-musl (default) or
        /// aarch64-unknown-linux-musl.
        #[arg(long)]
        target: Option<String>,
        /// Image reference (default ghcr.io/argocd-pull/argocd-pull:<version>).
        #[arg(long)]
        image: Option<String>,
    },
    /// Lint (--strict) and render every chart under charts/ with Helm's engine (helm-template, as
    /// the packaging tests run it); renders go to target/charts/.
    Charts {
        /// Also regenerate deploy/ from the hub chart (hack/gen-deploy.sh).
        #[arg(long)]
        gen_deploy: bool,
    },
    /// Release artefacts: static musl binaries, tarballs and checksums (hack/release.sh).
    Release {
        /// Rust targets (repeatable; default x86_64- and aarch64-unknown-linux-musl).
        #[arg(long = "target")]
        targets: Vec<String>,
        /// Output directory (default target/dist).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Only the plain release build for this machine (target/release/argocd-pull).
        #[arg(long)]
        host: bool,
    },
    /// What CI runs: .ci/run (tools the tests need, fmt, clippy -D warnings, the workspace's tests).
    Ci,
}

#[derive(Subcommand, Debug)]
enum BenchTask {
    /// Every benchmark with what it measures and its command.
    List,
    /// Run benchmarks: by name (or package/name), every one of a package (-p), or --all.
    Run {
        /// Bench names, e.g. `replication` or `agent/replication`.
        names: Vec<String>,
        /// Every bench of this package (`agent` or `argocd-pull-agent`).
        #[arg(short = 'p', long)]
        package: Option<String>,
        /// Every bench of the workspace, one after another (long: tens of minutes).
        #[arg(long, conflicts_with_all = ["names", "package"])]
        all: bool,
        /// Passed to the bench binary (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli, &repo_root()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli, root: &Path) -> anyhow::Result<()> {
    let plan = match cli.task {
        Task::E2e { disruptive, suites } => tasks::e2e(root, disruptive, &suites)?,
        Task::Bench(BenchTask::List) => {
            print!("{}", tasks::bench_table(&tasks::benches(root)?));
            return Ok(());
        }
        Task::Bench(BenchTask::Run {
            names,
            package,
            all,
            args,
        }) => {
            let benches = tasks::benches(root)?;
            let selected = benches::select(&benches, &names, package.as_deref(), all)?;
            tasks::bench_run(&selected, &args, tasks::real_env_lock().as_deref())
        }
        Task::Image {
            out,
            engine,
            target,
            image,
        } => tasks::image(
            root,
            engine,
            out.as_deref(),
            target.as_deref(),
            image.as_deref(),
        )?,
        Task::Charts { gen_deploy } => tasks::charts(root, gen_deploy)?,
        Task::Release { targets, out, host } => tasks::release(&targets, out.as_deref(), host)?,
        Task::Ci => tasks::ci(),
    };
    step::execute(&plan, root, cli.dry_run)
}

/// The workspace root: this crate lives in `crates/xtask`.
fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        super::Cli::command().debug_assert();
    }
}
