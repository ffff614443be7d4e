//! Running Helm's engine (`helm-template`, /work/shared/bin/README.md) and parsing its output.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `helm-template`: `ARGOCD_PULL_HELM_TEMPLATE`, else `../shared/bin/helm-template` beside the
/// clone. `None` (with a visible `SKIP:`) when neither exists.
pub fn helm(test: &str) -> Option<Helm> {
    let path = match std::env::var_os("ARGOCD_PULL_HELM_TEMPLATE") {
        Some(p) => PathBuf::from(p),
        None => root().join("../shared/bin/helm-template"),
    };
    if path.is_file() {
        Some(Helm { path })
    } else {
        println!(
            "SKIP: {test}: no helm-template at {} (set ARGOCD_PULL_HELM_TEMPLATE)",
            path.display()
        );
        None
    }
}

pub struct Helm {
    path: PathBuf,
}

impl Helm {
    /// `helm template <release> charts/<chart> -n <ns> <args>`: the rendered YAML, or Helm's error.
    pub fn template_raw(
        &self,
        chart: &str,
        release: &str,
        ns: &str,
        args: &[&str],
    ) -> Result<String, String> {
        let out = Command::new(&self.path)
            .arg("template")
            .arg(release)
            .arg(root().join("charts").join(chart))
            .args(["-n", ns])
            .args(args)
            .output()
            .expect("run helm-template");
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).expect("UTF-8 output"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Renders and parses every document.
    pub fn template(&self, chart: &str, release: &str, ns: &str, args: &[&str]) -> Objects {
        let yaml = self
            .template_raw(chart, release, ns, args)
            .unwrap_or_else(|e| panic!("helm template {chart} {args:?} failed:\n{e}"));
        Objects(parse(&yaml))
    }

    /// Renders with invalid values: Helm's error message.
    pub fn template_err(&self, chart: &str, args: &[&str]) -> String {
        match self.template_raw(chart, "r", "default", args) {
            Ok(_) => panic!("helm template {chart} {args:?} rendered, expected a values error"),
            Err(e) => e,
        }
    }

    /// `helm-template lint charts/<chart> --strict`: exit status and report.
    pub fn lint_strict(&self, chart: &str) -> (bool, String) {
        let out = Command::new(&self.path)
            .arg("lint")
            .arg(root().join("charts").join(chart))
            .arg("--strict")
            .output()
            .expect("run helm-template lint");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

/// Every document of a YAML stream (empty ones skipped).
pub fn parse(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("valid YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// Rendered objects.
pub struct Objects(pub Vec<Value>);

impl Objects {
    /// `(kind, name)` of every object, sorted.
    pub fn ids(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.0.iter().map(id).collect();
        v.sort();
        v
    }

    pub fn get(&self, kind: &str, name: &str) -> &Value {
        self.find(kind, name)
            .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", self.ids()))
    }

    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    pub fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.0.iter().filter(|o| o["kind"] == kind).collect()
    }
}

pub fn id(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// The first container of a Deployment.
pub fn container(deploy: &Value) -> &Value {
    &deploy["spec"]["template"]["spec"]["containers"][0]
}

/// `env` of a container as name → value (valueFrom entries as their JSON).
pub fn env(c: &Value) -> std::collections::BTreeMap<String, Value> {
    c["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    let v = if e.get("value").is_some() {
                        e["value"].clone()
                    } else {
                        e["valueFrom"].clone()
                    };
                    (e["name"].as_str().unwrap().to_string(), v)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `(apiGroup, resource, verb)` grants of a Role/ClusterRole.
pub fn grants(role: &Value) -> std::collections::BTreeSet<(String, String, String)> {
    let mut out = std::collections::BTreeSet::new();
    for rule in role["rules"].as_array().expect("rules") {
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    out.insert((
                        g.as_str().unwrap().to_string(),
                        r.as_str().unwrap().to_string(),
                        v.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    out
}

/// Checks the security context every argocd-pull container must have (hardened, restricted PSS).
pub fn assert_hardened(deploy: &Value) {
    let name = &deploy["metadata"]["name"];
    let pod = &deploy["spec"]["template"]["spec"];
    assert_eq!(
        pod["securityContext"]["runAsNonRoot"], true,
        "{name}: runAsNonRoot"
    );
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
        "{name}: seccomp"
    );
    for c in pod["containers"].as_array().unwrap() {
        let sc = &c["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}: read-only root");
        assert_eq!(
            sc["allowPrivilegeEscalation"], false,
            "{name}: no escalation"
        );
        assert_eq!(
            sc["capabilities"]["drop"],
            serde_json::json!(["ALL"]),
            "{name}: drop ALL"
        );
        assert!(
            c["resources"]["requests"]["memory"].is_string(),
            "{name}: memory request"
        );
        assert!(
            c["resources"]["limits"]["memory"].is_string(),
            "{name}: memory limit"
        );
    }
}
