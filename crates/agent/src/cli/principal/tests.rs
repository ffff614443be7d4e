use super::*;
use std::path::PathBuf;

#[test]
fn only_tls_material_read_from_files_or_secrets_is_reloaded() {
    let p = |f: &[&str]| PrincipalArgs::try_parse_flags(f.iter().copied()).unwrap();
    assert!(tls_reloadable(&p(&[])), "the peer's Secrets");
    assert!(
        !tls_reloadable(&p(&["--insecure-tls-generate"])),
        "a generated certificate is not re-generated every minute"
    );
    assert!(!tls_reloadable(&p(&["--insecure-plaintext"])));
    assert!(tls_reloadable(&p(&[
        "--insecure-tls-generate",
        "--tls-cert=/c",
        "--tls-key=/k"
    ])));
}

#[test]
fn enable_websocket_is_the_peers_flag_on_both_sides() {
    let p = |f: &[&str]| {
        PrincipalArgs::try_parse_flags(f.iter().copied())
            .unwrap()
            .enable_websocket
    };
    let a = |f: &[&str]| {
        let flags = ["--server-address=principal.example.com"].iter().chain(f);
        crate::cli::AgentArgs::try_parse_flags(flags.copied())
            .unwrap()
            .enable_websocket
    };
    for parse in [p, a] {
        assert!(!parse(&[]), "off by default");
        assert!(parse(&["--enable-websocket"]));
        assert!(parse(&["--enable-websocket=true"]));
        assert!(!parse(&["--enable-websocket=false"]));
    }
}

#[test]
fn resource_proxy_and_redis_flags_as_the_peer() {
    let a = PrincipalArgs::try_parse_flags(Vec::<String>::new()).unwrap();
    assert_eq!(a.proxy.enable_resource_proxy, None, "default on, lenient");
    assert_eq!(
        a.proxy.resource_proxy_address,
        "argocd-agent-resource-proxy:9090"
    );
    assert_eq!(a.proxy.resource_proxy_listen.to_string(), "0.0.0.0:9090");
    assert_eq!(
        a.proxy.resource_proxy_secret_name,
        "argocd-agent-resource-proxy-tls"
    );
    assert_eq!(a.proxy.resource_proxy_ca_secret_name, "argocd-agent-ca");
    assert_eq!(a.proxy.redis_server_address, "argocd-redis:6379");
    assert_eq!(a.proxy.redis_compression_type, "gzip");
    let a = PrincipalArgs::try_parse_flags(["--enable-resource-proxy=false"]).unwrap();
    assert_eq!(a.proxy.enable_resource_proxy, Some(false));
    let a = PrincipalArgs::try_parse_flags([
        "--enable-resource-proxy",
        "--resource-proxy-cert-path",
        "/c",
        "--resource-proxy-key-path",
        "/k",
        "--resource-proxy-ca-path",
        "/ca",
    ])
    .unwrap();
    assert_eq!(a.proxy.enable_resource_proxy, Some(true));
    assert_eq!(a.proxy.resource_proxy_ca_path, Some(PathBuf::from("/ca")));
    let a = crate::cli::agent::AgentArgs::try_parse_flags([
        "--server-address",
        "p",
        "--enable-resource-proxy=false",
    ]);
    assert!(!a.unwrap().enable_resource_proxy);
    let a = crate::cli::agent::AgentArgs::try_parse_flags(["--server-address", "p"]).unwrap();
    assert!(a.enable_resource_proxy);
}
