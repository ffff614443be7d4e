//! Every task of `cargo xtask` resolves to the commands the repository documents, checked through
//! the built binary with `--dry-run` (nothing long runs here): the scripts it calls exist and are
//! executable, the benches it knows are the ones under crates/*/benches, the charts are the ones
//! under charts/.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `xtask <args>` with the environment variables that change a plan cleared; stdout, or a panic
/// with stderr when it fails.
fn xtask(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = xtask_output(args, env);
    assert!(
        out.status.success(),
        "xtask {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn xtask_output(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xtask"));
    cmd.args(args);
    for k in [
        "ARGOCD_PULL_E2E_HUB_KUBECONFIG",
        "REALK8S",
        "CARGO_TARGET_DIR",
        "ARGOCD_PULL_HELM_TEMPLATE",
    ] {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run xtask")
}

fn assert_executable(rel: &str) {
    let path = root().join(rel);
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{rel}: {e}"))
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "{rel} is not executable");
}

#[test]
fn help_lists_every_task() {
    let help = xtask(&["--help"], &[]);
    for task in [
        "e2e",
        "bench",
        "image",
        "charts",
        "release",
        "ci",
        "--dry-run",
    ] {
        assert!(
            help.contains(task),
            "--help does not mention {task}:\n{help}"
        );
    }
    let help = xtask(&["bench", "--help"], &[]);
    assert!(help.contains("list") && help.contains("run"), "{help}");
}

#[test]
fn the_cargo_alias_runs_this_crate() {
    let config = std::fs::read_to_string(root().join(".cargo/config.toml")).unwrap();
    assert!(
        config.contains("[alias]") && config.contains(r#"xtask = "run --package xtask --""#),
        ".cargo/config.toml has no `xtask` alias:\n{config}"
    );
}

#[test]
fn e2e_wraps_the_real_env_script() {
    assert_eq!(xtask(&["--dry-run", "e2e"], &[]), "+ hack/e2e-real.sh\n");
    assert_eq!(
        xtask(
            &["e2e", "--disruptive", "controller", "cmp", "--dry-run"],
            &[]
        ),
        "+ hack/e2e-real.sh --disruptive controller cmp\n"
    );
    assert_executable("hack/e2e-real.sh");
    let out = xtask_output(&["--dry-run", "e2e", "nope"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no real-env suite \"nope\"; suites: ") && err.contains("controller"),
        "{err}"
    );
}

/// Every bench target as the crates lay them out: `[[bench]] name = ...` in crates/*/Cargo.toml
/// and, unless `autobenches = false`, what cargo discovers on its own (`benches/<name>.rs`,
/// `benches/<name>/main.rs`), as `crate/name`.
fn benches_on_disk() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for krate in std::fs::read_dir(root().join("crates")).unwrap() {
        let dir = krate.unwrap().path();
        let short = dir.file_name().unwrap().to_string_lossy().into_owned();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let mut lines = manifest.lines();
        while let Some(l) = lines.next() {
            if l.trim() == "[[bench]]" {
                let name = lines
                    .find_map(|l| l.trim().strip_prefix("name = "))
                    .expect("[[bench]] without a name");
                found.insert(format!("{short}/{}", name.trim_matches('"')));
            }
        }
        if manifest.contains("autobenches = false") {
            continue;
        }
        if let Ok(files) = std::fs::read_dir(dir.join("benches")) {
            for f in files {
                let p = f.unwrap().path();
                let discovered = p.extension().is_some_and(|e| e == "rs")
                    || (p.is_dir() && p.join("main.rs").is_file());
                if discovered {
                    let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                    found.insert(format!("{short}/{stem}"));
                }
            }
        }
    }
    found
}

#[test]
fn bench_list_names_every_bench_of_the_workspace_with_its_command() {
    let list = xtask(&["bench", "list"], &[]);
    let on_disk = benches_on_disk();
    assert!(on_disk.len() >= 10, "{on_disk:?}");
    let listed: BTreeSet<String> = list
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert_eq!(listed, on_disk, "bench list:\n{list}");
    assert!(
        list.contains("cargo bench -p argocd-pull-controller --bench controller"),
        "{list}"
    );
    let replication = list
        .lines()
        .find(|l| l.starts_with("agent/replication"))
        .unwrap();
    assert!(replication.ends_with("[real env]"), "{replication}");
}

#[test]
fn bench_run_resolves_names_packages_and_all() {
    let all = xtask(&["--dry-run", "bench", "run", "--all"], &[]);
    assert_eq!(all.lines().count(), benches_on_disk().len(), "{all}");
    assert!(
        all.lines()
            .all(|l| l.starts_with("+ cargo bench -p argocd-pull-")),
        "{all}"
    );
    assert_eq!(
        xtask(&["--dry-run", "bench", "run", "gitops/report", "hub"], &[]),
        "+ cargo bench -p argocd-pull-gitops --bench report\n+ cargo bench -p argocd-pull-hub --bench hub\n"
    );
    let agent = xtask(&["--dry-run", "bench", "run", "-p", "agent"], &[]);
    assert!(
        agent.contains("--bench websocket") && !agent.contains("argocd-pull-hub"),
        "{agent}"
    );

    // With the real env's kubeconfig set, a bench that measures it is built first and then runs
    // under the env's lock.
    assert_eq!(
        xtask(
            &["--dry-run", "bench", "run", "replication", "--", "x"],
            &[
                (
                    "ARGOCD_PULL_E2E_HUB_KUBECONFIG",
                    "/nonexistent/hub.kubeconfig"
                ),
                ("REALK8S", "/nonexistent/realk8s/"),
            ],
        ),
        "+ cargo bench -p argocd-pull-agent --bench replication --no-run\n\
         + flock -o /nonexistent/realk8s.lock cargo bench -p argocd-pull-agent --bench replication -- x\n"
    );

    let out = xtask_output(&["--dry-run", "bench", "run", "no-such-bench"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no benchmark \"no-such-bench\"; benchmarks: agent/agent"),
        "{err}"
    );
}

fn workspace_version() -> String {
    let toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let section = toml.split("[workspace.package]").nth(1).unwrap();
    let line = section.lines().find(|l| l.starts_with("version")).unwrap();
    line.split('"').nth(1).unwrap().to_string()
}

#[test]
fn image_wraps_the_buildah_script_or_the_containerfile() {
    let v = workspace_version();
    assert_eq!(
        xtask(&["--dry-run", "image"], &[]),
        format!(
            "+ mkdir -p target/image\n+ hack/image.sh target/image/argocd-pull-{v}-linux-amd64.tar\n"
        )
    );
    assert_eq!(
        xtask(
            &[
                "--dry-run",
                "image",
                "/tmp/x.tar",
                "--target",
                "aarch64-unknown-linux-musl"
            ],
            &[]
        ),
        "+ mkdir -p /tmp\n+ TARGET=aarch64-unknown-linux-musl hack/image.sh /tmp/x.tar\n"
    );
    assert_eq!(
        xtask(&["--dry-run", "image", "x.tar"], &[]),
        "+ hack/image.sh x.tar\n"
    );
    assert_executable("hack/image.sh");
    let docker = xtask(&["--dry-run", "image", "--engine", "docker"], &[]);
    assert!(
        docker.starts_with(&format!(
            "+ docker build -f Containerfile -t ghcr.io/argocd-pull/argocd-pull:{v} --build-arg VERSION={v} --build-arg REVISION="
        )) && docker.ends_with(" .\n"),
        "{docker}"
    );
    assert!(root().join("Containerfile").is_file());
}

#[test]
fn charts_lints_and_renders_every_chart_with_helms_engine() {
    let helm = "/nonexistent/helm-template";
    let out = xtask(
        &["--dry-run", "charts", "--gen-deploy"],
        &[("ARGOCD_PULL_HELM_TEMPLATE", helm)],
    );
    let mut charts: Vec<String> = std::fs::read_dir(root().join("charts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Chart.yaml").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    charts.sort();
    assert!(charts.len() >= 3, "{charts:?}");
    let mut expected = String::new();
    for c in &charts {
        expected.push_str(&format!(
            "+ {helm} lint charts/{c} --strict\n+ {helm} template {c} charts/{c} --namespace argocd-pull > target/charts/{c}.yaml\n"
        ));
    }
    expected.push_str(&format!(
        "+ ARGOCD_PULL_HELM_TEMPLATE={helm} hack/gen-deploy.sh\n"
    ));
    assert_eq!(out, expected);
    assert_executable("hack/gen-deploy.sh");
}

#[test]
fn release_wraps_the_static_release_script() {
    assert_eq!(xtask(&["--dry-run", "release"], &[]), "+ hack/release.sh\n");
    assert_eq!(
        xtask(
            &[
                "--dry-run",
                "release",
                "--target",
                "x86_64-unknown-linux-musl",
                "--out",
                "/tmp/d"
            ],
            &[]
        ),
        "+ TARGETS=x86_64-unknown-linux-musl hack/release.sh /tmp/d\n"
    );
    assert_eq!(
        xtask(&["--dry-run", "release", "--host"], &[]),
        "+ cargo build --release --locked -p argocd-pull\n"
    );
    assert_executable("hack/release.sh");
    assert_executable("hack/build-static.sh");
}

#[test]
fn ci_runs_what_ci_runs() {
    assert_eq!(xtask(&["--dry-run", "ci"], &[]), "+ bash .ci/run\n");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo test --workspace"), "{ci}");
}
