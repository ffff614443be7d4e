//! The workspace's benchmarks, as cargo knows them (`cargo metadata`: every `[[bench]]` target and
//! every file under a crate's `benches/` that cargo picks up on its own), so a new bench needs no
//! change here.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

/// One benchmark target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bench {
    /// The package, e.g. `argocd-pull-agent`.
    pub package: String,
    /// The bench target, e.g. `replication`.
    pub name: String,
    /// Its source file, relative to the repository root.
    pub source: PathBuf,
    /// The first sentence of the source's `//!` comment.
    pub summary: String,
    /// It measures against the shared real env when `ARGOCD_PULL_E2E_HUB_KUBECONFIG` is set
    /// (its source reads that variable), so it runs under the env's lock.
    pub real_env: bool,
}

impl Bench {
    /// `package/name`, the unambiguous way to name it.
    pub fn id(&self) -> String {
        format!("{}/{}", short_package(&self.package), self.name)
    }
}

/// `argocd-pull-agent` → `agent`: what a user types.
pub fn short_package(package: &str) -> &str {
    package.strip_prefix("argocd-pull-").unwrap_or(package)
}

/// Every bench target of the workspace, sorted by package and name.
pub fn discover(root: &Path) -> anyhow::Result<Vec<Bench>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .with_context(|| format!("cannot run `{cargo} metadata`"))?;
    if !out.status.success() {
        bail!(
            "`cargo metadata --no-deps` failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: Value =
        serde_json::from_slice(&out.stdout).context("`cargo metadata` printed no JSON")?;
    from_metadata(&meta, root)
}

/// The bench targets of `cargo metadata --no-deps` output.
pub fn from_metadata(meta: &Value, root: &Path) -> anyhow::Result<Vec<Bench>> {
    let mut benches = Vec::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        let package = pkg["name"].as_str().unwrap_or_default();
        for target in pkg["targets"].as_array().into_iter().flatten() {
            let is_bench = target["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bench"));
            if !is_bench {
                continue;
            }
            let src = PathBuf::from(target["src_path"].as_str().unwrap_or_default());
            let text = std::fs::read_to_string(&src)
                .with_context(|| format!("cannot read bench source {}", src.display()))?;
            benches.push(Bench {
                package: package.to_string(),
                name: target["name"].as_str().unwrap_or_default().to_string(),
                source: src.strip_prefix(root).map(Path::to_path_buf).unwrap_or(src),
                summary: summary(&text),
                real_env: text.contains("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
            });
        }
    }
    benches.sort_by(|a, b| (&a.package, &a.name).cmp(&(&b.package, &b.name)));
    Ok(benches)
}

/// The first sentence of a file's leading `//!` lines (at most ~110 characters).
pub fn summary(source: &str) -> String {
    let text = source
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let end = text
        .match_indices(". ")
        .map(|(i, _)| i + 1)
        .next()
        .unwrap_or(text.len());
    let sentence = text[..end].trim_end_matches('.');
    if sentence.chars().count() > 110 {
        let cut: String = sentence.chars().take(109).collect();
        format!("{}…", cut.trim_end())
    } else {
        sentence.to_string()
    }
}

/// The benches `names` (a bench name, or `package/name` where a name is not unique; the package
/// with or without `argocd-pull-`), every bench of `package`, or all of them.
pub fn select<'a>(
    all: &'a [Bench],
    names: &[String],
    package: Option<&str>,
    every: bool,
) -> anyhow::Result<Vec<&'a Bench>> {
    let known = || all.iter().map(Bench::id).collect::<Vec<_>>().join(", ");
    if every {
        return Ok(all.iter().collect());
    }
    if let Some(p) = package {
        let p = short_package(p);
        let of: Vec<_> = all
            .iter()
            .filter(|b| short_package(&b.package) == p)
            .collect();
        if of.is_empty() {
            bail!("package {p:?} has no benchmark; benchmarks: {}", known());
        }
        if names.is_empty() {
            return Ok(of);
        }
    }
    if names.is_empty() {
        bail!(
            "name a benchmark (or -p PACKAGE, or --all); `cargo xtask bench list` lists them: {}",
            known()
        );
    }
    let mut picked = Vec::new();
    for name in names {
        let (pkg, bench) = match name.split_once('/') {
            Some((p, b)) => (Some(short_package(p)), b),
            None => (package.map(short_package), name.as_str()),
        };
        let matches: Vec<_> = all
            .iter()
            .filter(|b| b.name == bench && pkg.is_none_or(|p| short_package(&b.package) == p))
            .collect();
        match matches.as_slice() {
            [one] => picked.push(*one),
            [] => bail!("no benchmark {name:?}; benchmarks: {}", known()),
            many => bail!(
                "{name:?} is ambiguous: {}; name it as package/bench",
                many.iter().map(|b| b.id()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(package: &str, name: &str) -> Bench {
        Bench {
            package: package.into(),
            name: name.into(),
            source: PathBuf::new(),
            summary: String::new(),
            real_env: false,
        }
    }

    #[test]
    fn the_summary_is_the_first_sentence_of_the_module_comment() {
        let src = "//! Report benchmark: 1,000 clusters. The rest\n//! goes on.\n\nfn main() {}\n";
        assert_eq!(summary(src), "Report benchmark: 1,000 clusters");
        let src = "//! Events per second through one agent over WebSocket (`--enable-websocket`),\n//! two lines.\n//!\n//! Later.";
        assert_eq!(
            summary(src),
            "Events per second through one agent over WebSocket (`--enable-websocket`), two lines"
        );
        assert_eq!(summary("fn main() {}"), "");
        let long = format!("//! {}", "word ".repeat(40));
        assert!(summary(&long).ends_with('…') && summary(&long).chars().count() <= 110);
    }

    #[test]
    fn benches_are_picked_by_name_package_or_all() {
        let all = vec![
            bench("argocd-pull-agent", "agent"),
            bench("argocd-pull-agent", "report"),
            bench("argocd-pull-gitops", "report"),
        ];
        let ids = |v: Vec<&Bench>| v.iter().map(|b| b.id()).collect::<Vec<_>>();
        assert_eq!(
            ids(select(&all, &["agent".into()], None, false).unwrap()),
            ["agent/agent"]
        );
        assert_eq!(
            ids(select(&all, &["argocd-pull-gitops/report".into()], None, false).unwrap()),
            ["gitops/report"]
        );
        assert_eq!(
            ids(select(&all, &["report".into()], Some("gitops"), false).unwrap()),
            ["gitops/report"]
        );
        assert_eq!(
            ids(select(&all, &[], Some("argocd-pull-agent"), false).unwrap()),
            ["agent/agent", "agent/report"]
        );
        assert_eq!(select(&all, &[], None, true).unwrap().len(), 3);

        let err = select(&all, &["report".into()], None, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ambiguous: agent/report, gitops/report"),
            "{err}"
        );
        let err = select(&all, &["nope".into()], None, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no benchmark \"nope\"; benchmarks: agent/agent"),
            "{err}"
        );
        let err = select(&all, &[], None, false).unwrap_err().to_string();
        assert!(err.contains("name a benchmark"), "{err}");
        let err = select(&all, &[], Some("cli"), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("package \"cli\" has no benchmark"), "{err}");
    }
}
