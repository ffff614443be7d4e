//! Principal address discovery (the peer's `server_discovery.go`), and the principal's SANs.

use k8s_openapi::api::core::v1::{Node, Service};

/// The principal Service names looked up, in order.
pub const PRINCIPAL_SERVICES: &[&str] =
    &["argocd-agent-principal", "openshift-gitops-agent-principal"];
/// The resource proxy Service (the peer's default `argocd-agent-resource-proxy:9090`).
pub const RESOURCE_PROXY_SERVICE: &str = "argocd-agent-resource-proxy";
pub const RESOURCE_PROXY_PORT: u16 = 9090;

fn https_like(p: &k8s_openapi::api::core::v1::ServicePort) -> bool {
    p.name.as_deref() == Some("https") || p.port == 443 || p.port == 8443
}

/// Address and port from a Service: the first LoadBalancer ingress (hostname before IP) with
/// the https/443/8443 port (default 443), else a NodePort with the first node's InternalIP.
pub fn discover(svc: &Service, nodes: &[Node]) -> Result<(String, String), String> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let ns = svc.metadata.namespace.clone().unwrap_or_default();
    let spec = svc.spec.clone().unwrap_or_default();
    let ports = spec.ports.clone().unwrap_or_default();
    let ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first());
    if let Some(ing) = ingress
        && let Some(addr) = ing
            .hostname
            .clone()
            .filter(|h| !h.is_empty())
            .or_else(|| ing.ip.clone().filter(|i| !i.is_empty()))
    {
        let port = ports
            .iter()
            .find(|p| https_like(p))
            .map(|p| p.port.to_string())
            .unwrap_or_else(|| "443".into());
        return Ok((addr, port));
    }
    if spec.type_.as_deref() == Some("NodePort") {
        let node_port = ports
            .iter()
            .find(|p| https_like(p) && p.node_port.is_some())
            .or_else(|| ports.iter().find(|p| p.node_port.is_some()))
            .and_then(|p| p.node_port);
        if let (Some(port), Some(ip)) = (node_port, nodes.iter().find_map(internal_ip)) {
            return Ok((ip, port.to_string()));
        }
    }
    Err(format!(
        "no external endpoint found for service {name} in namespace {ns} (type={}, no LoadBalancer ingress)",
        spec.type_.unwrap_or_default()
    ))
}

pub fn internal_ip(n: &Node) -> Option<String> {
    n.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

const LOCAL: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

fn svc_names(svc: &str, ns: &str) -> [String; 2] {
    [
        format!("{svc}.{ns}.svc"),
        format!("{svc}.{ns}.svc.cluster.local"),
    ]
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for s in v {
        if !s.is_empty() && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The principal certificate's SANs: LB ingress names, node InternalIPs (NodePort only), the
/// Service DNS names, the localhost set, then the advertised address (#219).
pub fn principal_sans(
    svc: Option<&Service>,
    nodes: &[Node],
    ns: &str,
    advertised: &str,
) -> Vec<String> {
    let mut v = Vec::new();
    let name = svc
        .and_then(|s| s.metadata.name.clone())
        .unwrap_or_else(|| PRINCIPAL_SERVICES[0].to_string());
    if let Some(s) = svc {
        if let Some(ing) = s
            .status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
        {
            for i in ing {
                v.extend(i.hostname.clone());
                v.extend(i.ip.clone());
            }
        }
        if s.spec.as_ref().and_then(|sp| sp.type_.as_deref()) == Some("NodePort") {
            v.extend(nodes.iter().filter_map(internal_ip));
        }
    }
    v.extend(svc_names(&name, ns));
    v.extend(LOCAL.map(String::from));
    v.push(advertised.to_string());
    dedup(v)
}

/// The resource proxy certificate's SANs: the principal's Service DNS names (as the peer), the
/// resource proxy Service names (short and qualified: the cluster secrets' `server` uses the
/// short one) and the localhost set.
pub fn resource_proxy_sans(ns: &str) -> Vec<String> {
    let mut v: Vec<String> = svc_names(PRINCIPAL_SERVICES[0], ns).to_vec();
    v.push(RESOURCE_PROXY_SERVICE.to_string());
    v.extend(svc_names(RESOURCE_PROXY_SERVICE, ns));
    v.extend(LOCAL.map(String::from));
    dedup(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn load_balancer_ingress_and_https_port() {
        let s = svc(
            json!({"metadata": {"name": "argocd-agent-principal", "namespace": "argocd"},
            "spec": {"type": "LoadBalancer", "ports": [{"name": "metrics", "port": 8000}, {"name": "https", "port": 443}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
        );
        assert_eq!(
            discover(&s, &[]).unwrap(),
            ("203.0.113.10".into(), "443".into())
        );
        let sans = principal_sans(Some(&s), &[], "argocd", "203.0.113.10");
        assert_eq!(
            sans,
            [
                "203.0.113.10",
                "argocd-agent-principal.argocd.svc",
                "argocd-agent-principal.argocd.svc.cluster.local",
                "localhost",
                "127.0.0.1",
                "::1"
            ]
        );
    }

    #[test]
    fn node_port_uses_the_first_internal_ip() {
        let s = svc(
            json!({"metadata": {"name": "argocd-agent-principal", "namespace": "argocd"},
            "spec": {"type": "NodePort", "ports": [{"name": "https", "port": 443, "nodePort": 30443}]}}),
        );
        let n: Node = serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"addresses": [{"type": "Hostname", "address": "n"}, {"type": "InternalIP", "address": "10.0.0.5"}]}}))
        .unwrap();
        assert_eq!(
            discover(&s, &[n]).unwrap(),
            ("10.0.0.5".into(), "30443".into())
        );
    }

    #[test]
    fn cluster_ip_is_not_reachable_and_says_so() {
        let s = svc(
            json!({"metadata": {"name": "argocd-agent-principal", "namespace": "argocd"},
            "spec": {"type": "ClusterIP", "ports": [{"port": 443}]}}),
        );
        assert_eq!(
            discover(&s, &[]).unwrap_err(),
            "no external endpoint found for service argocd-agent-principal in namespace argocd (type=ClusterIP, no LoadBalancer ingress)"
        );
    }
}
