//! `argocd-pull cmp install`: the objects and patches that enable the plugin.

use std::fmt::Write as _;

/// Health check (Lua) for `work.open-cluster-management.io/ManifestWork`.
pub const MANIFESTWORK_HEALTH_LUA: &str = include_str!("health/manifestwork.lua");
/// Health check (Lua) for `work.open-cluster-management.io/ManifestWorkReplicaSet`.
pub const MANIFESTWORKREPLICASET_HEALTH_LUA: &str =
    include_str!("health/manifestworkreplicaset.lua");

/// Name of the plugin, as Applications reference it (`spec.source.plugin.name`).
pub const PLUGIN_NAME: &str = "argocd-pull";

#[derive(Debug, Clone, clap::Args)]
pub struct InstallArgs {
    /// Namespace of Argo CD.
    #[arg(long, env = "ARGOCD_PULL_ARGOCD_NAMESPACE", default_value = "argocd")]
    pub namespace: String,
    /// Image of the sidecar; it must contain the `argocd-pull` binary.
    #[arg(long, env = "ARGOCD_PULL_CMP_IMAGE", default_value = concat!("ghcr.io/argocd-pull/argocd-pull:v", env!("CARGO_PKG_VERSION")))]
    pub image: String,
    /// AppProject to create for applications using the plugin.
    #[arg(long, env = "ARGOCD_PULL_CMP_PROJECT", default_value = "ocm-cmp")]
    pub project: String,
    /// Print one part only.
    #[arg(long, env = "ARGOCD_PULL_CMP_ONLY", value_enum)]
    pub only: Option<Component>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Component {
    /// ConfigMap holding the ConfigManagementPlugin (`kubectl apply -f`).
    Plugin,
    /// Strategic-merge patch adding the sidecar to argocd-repo-server (`kubectl patch --patch-file`).
    RepoServerPatch,
    /// AppProject allowing ManifestWork(ReplicaSet)s on the hub (`kubectl apply -f`).
    Project,
    /// ClusterRole(Binding) letting Argo CD manage ManifestWork(ReplicaSet)s (`kubectl apply -f`).
    Rbac,
    /// Merge patch of argocd-cm adding the health checks (`kubectl patch --type merge --patch-file`).
    HealthPatch,
}

fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check_name(what: &str, v: &str) -> Result<(), crate::CmpError> {
    crate::check_dns1123(what, v, what.contains("namespace"))
}

fn parameter_title(p: &str) -> &'static str {
    match p {
        "target-cluster" => "Managed clusters (one ManifestWork each)",
        "placement" => "Placement [namespace/]name (one ManifestWorkReplicaSet)",
        "include" => "Include globs (comma-separated)",
        "exclude" => "Exclude globs (comma-separated)",
        "recurse" => "Read subdirectories (true/false)",
        "max-work-bytes" => "Byte budget per work (e.g. 500Ki)",
        "default-namespace" => "Namespace for manifests without one",
        "work-name" => "Base name of the works (default: application name)",
        "application-namespace" => "Namespace of the hub Application",
        "allow-empty" => "Print no work when there is no manifest (true/false)",
        _ => "",
    }
}

/// The plugin's parameters (plugin.yaml) and the names accepted in `ARGOCD_APP_PARAMETERS`: the
/// long flag names.
pub const PARAMETERS: &[&str] = &[
    "target-cluster",
    "placement",
    "include",
    "exclude",
    "recurse",
    "max-work-bytes",
    "default-namespace",
    "work-name",
    "application-namespace",
    "allow-empty",
    "stdin",
];

fn plugin(a: &InstallArgs) -> String {
    let params: String = PARAMETERS
        .iter()
        .filter(|p| **p != "stdin")
        .map(|p| {
            let array = if *p == "target-cluster" {
                "\n  collectionType: array"
            } else {
                ""
            };
            format!("- name: {p}\n  title: {}{array}\n", parameter_title(p))
        })
        .collect();
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: argocd-pull-cmp-plugin
  namespace: {ns}
data:
  plugin.yaml: |
    apiVersion: argoproj.io/v1alpha1
    kind: ConfigManagementPlugin
    metadata:
      name: {PLUGIN_NAME}
    spec:
      # No `discover`: Applications opt in with `spec.source.plugin.name: {PLUGIN_NAME}`.
      generate:
        command: [argocd-pull, cmp, generate]
      parameters:
        static:
{params}      preserveFileMode: false
"#,
        ns = a.namespace,
        params = indent(&params, 8) + "\n",
    )
}

fn repo_server_patch(a: &InstallArgs) -> String {
    format!(
        r#"# kubectl -n {ns} patch deployment argocd-repo-server --patch-file <this document>
spec:
  template:
    spec:
      containers:
      - name: argocd-pull-cmp
        image: {image}
        command: [/var/run/argocd/argocd-cmp-server]
        securityContext:
          runAsNonRoot: true
          runAsUser: 999
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities:
            drop: [ALL]
        volumeMounts:
        - mountPath: /var/run/argocd
          name: var-files
        - mountPath: /home/argocd/cmp-server/plugins
          name: plugins
        - mountPath: /home/argocd/cmp-server/config/plugin.yaml
          subPath: plugin.yaml
          name: argocd-pull-cmp-plugin
        - mountPath: /tmp
          name: argocd-pull-cmp-tmp
      volumes:
      - name: argocd-pull-cmp-plugin
        configMap:
          name: argocd-pull-cmp-plugin
      - name: argocd-pull-cmp-tmp
        emptyDir: {{}}
"#,
        ns = a.namespace,
        image = a.image,
    )
}

fn project(a: &InstallArgs) -> String {
    format!(
        r#"# Applications using the plugin deploy ManifestWorks to the hub itself (destination
# https://kubernetes.default.svc); the works land in the managed clusters' namespaces.
apiVersion: argoproj.io/v1alpha1
kind: AppProject
metadata:
  name: {project}
  namespace: {ns}
spec:
  description: Applications delivered to OCM managed clusters through ManifestWorks (argocd-pull cmp)
  sourceRepos:
  - '*'
  destinations:
  - server: https://kubernetes.default.svc
    namespace: '*'
  clusterResourceWhitelist: []
  namespaceResourceWhitelist:
  - group: work.open-cluster-management.io
    kind: ManifestWork
  - group: work.open-cluster-management.io
    kind: ManifestWorkReplicaSet
"#,
        project = a.project,
        ns = a.namespace,
    )
}

fn rbac(a: &InstallArgs) -> String {
    format!(
        r#"# Argo CD's controller applies and prunes the works; its server deletes them from the UI.
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: argocd-pull-cmp-manifestworks
rules:
- apiGroups: [work.open-cluster-management.io]
  resources: [manifestworks, manifestworkreplicasets]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: argocd-pull-cmp-manifestworks
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: argocd-pull-cmp-manifestworks
subjects:
- kind: ServiceAccount
  name: argocd-application-controller
  namespace: {ns}
- kind: ServiceAccount
  name: argocd-server
  namespace: {ns}
"#,
        ns = a.namespace,
    )
}

fn health_patch(a: &InstallArgs) -> String {
    format!(
        r#"# kubectl -n {ns} patch configmap argocd-cm --type merge --patch-file <this document>
data:
  resource.customizations.health.work.open-cluster-management.io_ManifestWork: |
{mw}
  resource.customizations.health.work.open-cluster-management.io_ManifestWorkReplicaSet: |
{mwrs}
"#,
        ns = a.namespace,
        mw = indent(MANIFESTWORK_HEALTH_LUA.trim_end(), 4),
        mwrs = indent(MANIFESTWORKREPLICASET_HEALTH_LUA.trim_end(), 4),
    )
}

/// Renders the install output (everything, or one component).
pub fn render(a: &InstallArgs) -> Result<String, crate::CmpError> {
    check_name("namespace", &a.namespace)?;
    check_name("project", &a.project)?;
    if a.image.trim().is_empty() || a.image.contains(char::is_whitespace) {
        return Err(crate::CmpError::Config(format!(
            "image {:?} is not an image reference",
            a.image
        )));
    }
    let parts: [(Component, &str, String); 5] = [
        (
            Component::Plugin,
            "1. The plugin configuration (kubectl apply -f)",
            plugin(a),
        ),
        (
            Component::RepoServerPatch,
            "2. The repo-server sidecar (a patch)",
            repo_server_patch(a),
        ),
        (
            Component::Project,
            "3. An AppProject for plugin applications (kubectl apply -f)",
            project(a),
        ),
        (
            Component::Rbac,
            "4. RBAC for Argo CD on ManifestWorks (kubectl apply -f)",
            rbac(a),
        ),
        (
            Component::HealthPatch,
            "5. Health checks shown in the Argo CD UI (a patch of argocd-cm)",
            health_patch(a),
        ),
    ];
    let mut out = String::new();
    match a.only {
        Some(only) => {
            let (_, _, text) = parts
                .into_iter()
                .find(|(c, _, _)| *c == only)
                .expect("every component is listed");
            out.push_str(&text);
        }
        None => {
            out.push_str(
                "# argocd-pull cmp: enable the Config Management Plugin on the hub's Argo CD.\n\
                 # Print one part alone with --only <plugin|repo-server-patch|project|rbac|health-patch>.\n\
                 # Then create Applications with `spec.source.plugin: {name: argocd-pull, env: [{name: TARGET_CLUSTER, value: cluster1}]}`\n\
                 # and `spec.destination.server: https://kubernetes.default.svc`.\n",
            );
            for (i, (_, title, text)) in parts.iter().enumerate() {
                if i > 0 {
                    out.push_str("---\n");
                }
                let _ = writeln!(out, "# {title}");
                out.push_str(text);
            }
        }
    }
    Ok(out)
}
