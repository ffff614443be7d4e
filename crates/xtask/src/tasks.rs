//! What each task runs: the scripts in hack/, cargo and Helm, as a [`Plan`]. Building a plan runs
//! nothing but look-ups (`cargo metadata`, `git rev-parse`), so `--dry-run` shows exactly what a
//! real run would do.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::benches::{self, Bench};
use crate::step::{Plan, Step};

/// The env-gated real-cluster suites: `hack/e2e-real.sh` (which builds the test binaries, then
/// runs each suite under `flock -o $REALK8S.lock`).
pub fn e2e(root: &Path, disruptive: bool, suites: &[String]) -> anyhow::Result<Plan> {
    let known = e2e_suites(root)?;
    if let Some(bad) = suites.iter().find(|s| !known.contains(s)) {
        bail!("no real-env suite {bad:?}; suites: {}", known.join(", "));
    }
    let mut step = Step::new("hack/e2e-real.sh");
    if disruptive {
        step = step.arg("--disruptive");
    }
    Ok(plan([step.args(suites.iter().cloned())]))
}

/// The suite names of `hack/e2e-real.sh` (its `SUITES` array: `"name|package|target|filters"`).
pub fn e2e_suites(root: &Path) -> anyhow::Result<Vec<String>> {
    let path = root.join("hack/e2e-real.sh");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let names: Vec<String> = text
        .lines()
        .skip_while(|l| !l.starts_with("SUITES=("))
        .skip(1)
        .take_while(|l| !l.starts_with(')'))
        .filter_map(|l| l.trim().strip_prefix('"'))
        .filter_map(|l| l.split_once('|').map(|(name, _)| name.to_string()))
        .collect();
    if names.is_empty() {
        bail!("found no SUITES=( \"name|…\" ) in {}", path.display());
    }
    Ok(names)
}

/// `cargo bench` of each selected bench. A bench that measures the shared real env when its
/// kubeconfig is set is built first, then run under `flock -o $REALK8S.lock` (held only while it
/// runs, not while it compiles).
pub fn bench_run(selected: &[&Bench], args: &[String], real_env_lock: Option<&str>) -> Plan {
    let mut steps = Vec::new();
    for b in selected {
        let cargo_bench = Step::new("cargo").args(["bench", "-p", &b.package, "--bench", &b.name]);
        let with_args = |s: Step| {
            if args.is_empty() {
                s
            } else {
                s.arg("--").args(args.iter().cloned())
            }
        };
        match real_env_lock.filter(|_| b.real_env) {
            Some(lock) => {
                steps.push(cargo_bench.clone().arg("--no-run"));
                let run = with_args(cargo_bench);
                steps.push(Step {
                    program: "flock".into(),
                    args: [vec!["-o".into(), lock.into(), run.program], run.args].concat(),
                    ..run
                });
            }
            None => steps.push(with_args(cargo_bench)),
        }
    }
    Plan {
        steps,
        keep_going: selected.len() > 1,
    }
}

/// The lock every command using the shared real env holds (`$REALK8S.lock`, as
/// `hack/e2e-real.sh`), when the real env's kubeconfig is set; `None` otherwise (the real-env
/// benches then measure in memory or print `SKIP:`).
pub fn real_env_lock() -> Option<String> {
    std::env::var_os("ARGOCD_PULL_E2E_HUB_KUBECONFIG")?;
    let realk8s = std::env::var("REALK8S").unwrap_or_else(|_| "/root/realk8s".into());
    Some(format!("{}.lock", realk8s.trim_end_matches('/')))
}

/// The table `bench list` prints: id, where the real env is used, summary, and the command.
pub fn bench_table(all: &[Bench]) -> String {
    let width = all.iter().map(|b| b.id().len()).max().unwrap_or(0);
    let mut out = String::new();
    for b in all {
        let env = if b.real_env { " [real env]" } else { "" };
        out.push_str(&format!(
            "{:width$}  {}{env}\n{:width$}  cargo bench -p {} --bench {}\n",
            b.id(),
            b.summary,
            "",
            b.package,
            b.name,
        ));
    }
    out
}

/// How to build the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Engine {
    /// `hack/image.sh`: buildah, no daemon; compiles the static binary on this machine.
    Buildah,
    /// `docker build -f Containerfile` (compiles inside the build stage).
    Docker,
    /// `podman build -f Containerfile`.
    Podman,
}

/// The image: an OCI archive by `hack/image.sh`, or the `Containerfile` built by Docker/Podman.
pub fn image(
    root: &Path,
    engine: Engine,
    out: Option<&Path>,
    target: Option<&str>,
    image: Option<&str>,
) -> anyhow::Result<Plan> {
    let version = workspace_version(root)?;
    let step = match engine {
        Engine::Buildah => {
            let arch = match target.unwrap_or("x86_64-unknown-linux-musl") {
                t if t.starts_with("x86_64-") => "amd64",
                t if t.starts_with("aarch64-") => "arm64",
                t => bail!(
                    "unsupported --target {t}: x86_64-unknown-linux-musl or aarch64-unknown-linux-musl"
                ),
            };
            let out = out.map(Path::to_path_buf).unwrap_or_else(|| {
                target_dir().join(format!("image/argocd-pull-{version}-linux-{arch}.tar"))
            });
            let mut s = Step::new("hack/image.sh");
            if let Some(t) = target {
                s = s.env("TARGET", t);
            }
            if let Some(i) = image {
                s = s.env("IMAGE", i);
            }
            let build = s.arg(out.to_string_lossy());
            // buildah writes the archive but does not create its directory
            return Ok(match out.parent().filter(|d| !d.as_os_str().is_empty()) {
                Some(dir) => plan([
                    Step::new("mkdir").args(["-p".into(), dir.to_string_lossy().into_owned()]),
                    build,
                ]),
                None => plan([build]),
            });
        }
        Engine::Docker | Engine::Podman => {
            if target.is_some() || out.is_some() {
                bail!(
                    "--target and OUT are for --engine buildah (hack/image.sh); the Containerfile builds for the engine's own platform into its image store"
                );
            }
            let program = if engine == Engine::Docker {
                "docker"
            } else {
                "podman"
            };
            let revision = git_revision(root);
            let tag = image
                .map(str::to_string)
                .unwrap_or_else(|| format!("ghcr.io/argocd-pull/argocd-pull:{version}"));
            Step::new(program).args([
                "build".into(),
                "-f".into(),
                "Containerfile".into(),
                "-t".into(),
                tag,
                "--build-arg".into(),
                format!("VERSION={version}"),
                "--build-arg".into(),
                format!("REVISION={revision}"),
                ".".into(),
            ])
        }
    };
    Ok(plan([step]))
}

/// Every chart under `charts/` (a directory with a `Chart.yaml`) linted strictly and rendered with
/// its default values by Helm's engine (`helm-template`, as crates/packaging's tests run it), the
/// render written to `target/charts/<chart>.yaml`; with `gen_deploy`, `deploy/` regenerated from
/// the hub chart (`hack/gen-deploy.sh`).
pub fn charts(root: &Path, gen_deploy: bool) -> anyhow::Result<Plan> {
    let helm = helm_binary(root);
    let dir = root.join("charts");
    let mut charts: Vec<String> = std::fs::read_dir(&dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Chart.yaml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    if charts.is_empty() {
        bail!(
            "no chart (a directory with Chart.yaml) under {}",
            dir.display()
        );
    }
    let out_dir = target_dir().join("charts");
    let mut steps = Vec::new();
    for c in &charts {
        let path = format!("charts/{c}");
        steps.push(Step::new(&helm).args(["lint", &path, "--strict"]));
        steps.push(
            Step::new(&helm)
                .args(["template", c, &path, "--namespace", "argocd-pull"])
                .stdout_to(out_dir.join(format!("{c}.yaml"))),
        );
    }
    if gen_deploy {
        let mut s = Step::new("hack/gen-deploy.sh");
        if helm != "helm" {
            s = s.env("ARGOCD_PULL_HELM_TEMPLATE", &helm);
        }
        steps.push(s);
    }
    Ok(Plan {
        steps,
        keep_going: true,
    })
}

/// Helm's engine: `ARGOCD_PULL_HELM_TEMPLATE`, else `shared/bin/helm-template` beside the clone or
/// one of its parents (the project's tool for the packaging tests), else `helm` on PATH.
pub fn helm_binary(root: &Path) -> String {
    if let Some(p) = std::env::var_os("ARGOCD_PULL_HELM_TEMPLATE") {
        return p.to_string_lossy().into_owned();
    }
    root.ancestors()
        .skip(1)
        .map(|d| d.join("shared/bin/helm-template"))
        .find(|p| p.is_file())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| "helm".into())
}

/// Release artefacts: the static musl binaries and their tarballs with checksums
/// (`hack/release.sh`), or with `host` the plain release build for this machine.
pub fn release(targets: &[String], out: Option<&Path>, host: bool) -> anyhow::Result<Plan> {
    if host {
        if !targets.is_empty() || out.is_some() {
            bail!(
                "--host builds target/release/argocd-pull for this machine; --target and --out are for the static release (hack/release.sh)"
            );
        }
        return Ok(plan([Step::new("cargo").args([
            "build",
            "--release",
            "--locked",
            "-p",
            "argocd-pull",
        ])]));
    }
    let mut step = Step::new("hack/release.sh");
    if !targets.is_empty() {
        step = step.env("TARGETS", targets.join(" "));
    }
    if let Some(o) = out {
        step = step.arg(o.to_string_lossy());
    }
    Ok(plan([step]))
}

/// What CI runs, exactly: `.ci/run` (its tool installs, fmt, clippy, the workspace's tests).
pub fn ci() -> Plan {
    plan([Step::new("bash").arg(".ci/run")])
}

fn plan<const N: usize>(steps: [Step; N]) -> Plan {
    Plan {
        steps: steps.into(),
        keep_going: false,
    }
}

/// `CARGO_TARGET_DIR`, else `target` (relative to the root, where every step runs).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
}

/// `[workspace.package] version` of the root Cargo.toml.
pub fn workspace_version(root: &Path) -> anyhow::Result<String> {
    let path = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .find_map(|l| {
            let v = l.strip_prefix("version")?.trim_start().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
        .with_context(|| format!("no [workspace.package] version in {}", path.display()))
}

fn git_revision(root: &Path) -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `bench list` / `bench run`: discovery and selection.
pub fn benches(root: &Path) -> anyhow::Result<Vec<Bench>> {
    let all = benches::discover(root)?;
    if all.is_empty() {
        bail!("cargo metadata lists no bench target in the workspace");
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(name: &str, real_env: bool) -> Bench {
        Bench {
            package: "argocd-pull-agent".into(),
            name: name.into(),
            source: PathBuf::new(),
            summary: String::new(),
            real_env,
        }
    }

    #[test]
    fn a_real_env_bench_is_built_first_and_run_under_the_lock() {
        let (a, r) = (bench("agent", false), bench("principal_real", true));
        let plan = bench_run(&[&a, &r], &["x".into()], Some("/root/realk8s.lock"));
        let lines: Vec<_> = plan.steps.iter().map(ToString::to_string).collect();
        assert_eq!(
            lines,
            [
                "cargo bench -p argocd-pull-agent --bench agent -- x",
                "cargo bench -p argocd-pull-agent --bench principal_real --no-run",
                "flock -o /root/realk8s.lock cargo bench -p argocd-pull-agent --bench principal_real -- x",
            ]
        );
        assert!(plan.keep_going);
        let plan = bench_run(&[&r], &[], None);
        assert_eq!(
            plan.steps[0].to_string(),
            "cargo bench -p argocd-pull-agent --bench principal_real"
        );
        assert!(!plan.keep_going);
    }

    #[test]
    fn the_version_is_the_workspace_packages() {
        let dir = std::env::temp_dir().join(format!("xtask-version-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("Cargo.toml"),
            "[workspace]\nmembers = []\n\n[workspace.package]\nedition = \"2024\"\nversion = \"1.2.3\"\n\n[x]\nversion = \"9\"\n",
        )
        .unwrap();
        assert_eq!(workspace_version(&dir).unwrap(), "1.2.3");
        std::fs::write(dir.join("Cargo.toml"), "[package]\nversion = \"9\"\n").unwrap();
        assert!(workspace_version(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn release_and_image_refuse_flags_that_do_not_apply() {
        let e = release(&["x".into()], None, true).unwrap_err().to_string();
        assert!(
            e.contains("--host builds target/release/argocd-pull"),
            "{e}"
        );
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let e = image(
            &root,
            Engine::Docker,
            None,
            Some("aarch64-unknown-linux-musl"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--target and OUT are for --engine buildah"),
            "{e}"
        );
        let e = image(
            &root,
            Engine::Buildah,
            None,
            Some("riscv64gc-unknown-linux-musl"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unsupported --target riscv64gc"), "{e}");
    }
}
