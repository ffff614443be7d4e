//! The AddOnTemplate: OCM's addon manager renders it per cluster and applies it through
//! ManifestWorks `addon-argocd-agent-addon-deploy-*`. It deploys **our** agent
//! (`argocd-pull agent`) directly — no operator in between — into the install namespace (the
//! spoke Argo CD namespace, from the AddOnDeploymentConfig), where the CA ManifestWork puts
//! `argocd-agent-ca` and OCM puts the agent's client certificate (CustomSigner registration
//! signed by the hub's `argocd-agent-ca`; OCM renews it, 24 h).

use serde_json::{Value, json};

use super::*;

/// Where the agent mounts its client certificate and the CA (the kubelet refreshes both files
/// when OCM renews the certificate or the CA work ships a new bundle).
const TLS_DIR: &str = "/app/config/tls";
const CA_DIR: &str = "/app/config/ca";
/// The agent's admin ports (its defaults, `--metrics-port`, `--healthz-port`).
pub const METRICS_PORT: u16 = 8181;
pub const HEALTHZ_PORT: u16 = 8001;

/// The agent's readiness probe, which is what makes the ManagedClusterAddOn's `Available` follow
/// the agent's stream to the principal. OCM's addon manager health-checks every AddOnTemplate
/// addon with `WorkloadAvailability` (ocm `pkg/addon/templateagent/template_agent.go`): the deploy
/// ManifestWork feeds back the Deployment's `readyReplicas`, and `Available` is True only while
/// one replica is ready (addon-framework `utils.WorkloadAvailabilityHealthChecker`; Lease mode is
/// not offered for template addons). The agent's `/healthz` answers 200 only while its stream to
/// the principal is up (503 "not connected to the principal" otherwise, as argocd-agent's
/// `healthzHandler`), so the pod is ready exactly while the agent is connected. Detection: at
/// most `period × failureThreshold` = 10 s on the kubelet, plus the work agent's status sync.
pub fn readiness_probe() -> Value {
    json!({"httpGet": {"path": "/healthz", "port": "healthz"},
        "periodSeconds": 5, "timeoutSeconds": 2, "failureThreshold": 2, "successThreshold": 1})
}

/// What the AddOnTemplate's agent is given.
pub struct Agent<'a> {
    pub image: &'a str,
    /// The principal's address and port.
    pub address: &'a str,
    pub port: &'a str,
    /// `managed` or `autonomous`.
    pub mode: &'static str,
    /// Where the signing CA's Secret is (the GitOpsCluster's namespace).
    pub ca_namespace: &'a str,
}

pub fn addon_template(name: &str, agent: &Agent, labels: Value) -> Value {
    let sa = ADDON_NAME;
    let env = |n: &str, v: &str| json!({"name": n, "value": v});
    json!({
        "apiVersion": ADDON_API, "kind": "AddOnTemplate",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "addonName": ADDON_NAME,
            "agentSpec": {"workload": {"manifests": [
                {"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": sa, "namespace": DEFAULT_INSTALL_NAMESPACE}},
                {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                 "metadata": {"name": ADDON_NAME},
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                 "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "{{INSTALL_NAMESPACE}}"}]},
                {"apiVersion": "apps/v1", "kind": "Deployment",
                 "metadata": {"name": ADDON_NAME, "namespace": DEFAULT_INSTALL_NAMESPACE,
                              "labels": {"app": ADDON_NAME}},
                 // One agent per cluster: a rolling update would run two pods with one identity,
                 // each replacing the other's stream at the principal.
                 "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": {"app": ADDON_NAME}},
                    "template": {"metadata": {"labels": {"app": ADDON_NAME}},
                      "spec": {"serviceAccountName": sa,
                        "containers": [{"name": "agent", "image": agent.image,
                          "args": ["agent"],
                          "env": [
                            env("ARGOCD_AGENT_REMOTE_SERVER", agent.address),
                            env("ARGOCD_AGENT_REMOTE_PORT", agent.port),
                            env("ARGOCD_AGENT_MODE", agent.mode),
                            env("ARGOCD_AGENT_NAMESPACE", "{{INSTALL_NAMESPACE}}"),
                            env("ARGOCD_AGENT_TLS_CLIENT_CERT_PATH", &format!("{TLS_DIR}/tls.crt")),
                            env("ARGOCD_AGENT_TLS_CLIENT_KEY_PATH", &format!("{TLS_DIR}/tls.key")),
                            env("ARGOCD_AGENT_TLS_ROOT_CA_PATH", &format!("{CA_DIR}/ca.crt")),
                            env("ARGOCD_AGENT_METRICS_PORT", &METRICS_PORT.to_string()),
                            env("ARGOCD_AGENT_HEALTH_CHECK_PORT", &HEALTHZ_PORT.to_string()),
                          ],
                          "ports": [
                            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
                            {"name": "healthz", "containerPort": HEALTHZ_PORT, "protocol": "TCP"}],
                          "readinessProbe": readiness_probe(),
                          "securityContext": {"readOnlyRootFilesystem": true,
                            "allowPrivilegeEscalation": false, "runAsNonRoot": true,
                            "capabilities": {"drop": ["ALL"]}},
                          "volumeMounts": [
                            {"name": "tls", "mountPath": TLS_DIR, "readOnly": true},
                            {"name": "ca", "mountPath": CA_DIR, "readOnly": true}]}],
                        "volumes": [
                          {"name": "tls", "secret": {"secretName": CLIENT_CERT_SECRET}},
                          {"name": "ca", "secret": {"secretName": SECRET_CA}}]}}}}
            ]}},
            "registration": [{"type": "CustomSigner", "customSigner": {
                "signerName": SIGNER_NAME,
                "signingCA": {"name": SECRET_CA, "namespace": agent.ca_namespace}}}]
        }
    })
}
