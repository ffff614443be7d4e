//! `argocd-pull principal`: runs the principal from its flags (`args`: the flags and environment
//! variables of argocd-agent's `principal` command).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

use super::ha::InCluster;
use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::settings::{IdentitySource, read};
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_ops::CancellationToken;
use argocd_pull_principal::{Principal, PrincipalConfig};

mod args;
#[cfg(test)]
mod tests;

pub use args::PrincipalArgs;

/// Runs the principal against the current kube context until SIGTERM or Ctrl-C.
pub async fn run_principal(args: PrincipalArgs) -> anyhow::Result<()> {
    run(args, None, None, argocd_pull_ops::shutdown::on_signal()).await
}

/// Runs the principal until `shutdown` is cancelled, then stops serving and drops every stream.
/// `store`: the hub backend (`None`: the current kube context).
pub async fn run_principal_until(
    args: PrincipalArgs,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, None, store, shutdown).await
}

/// Runs the principal against `client`'s cluster (hub objects and the peer's Secrets) until
/// `shutdown` is cancelled.
pub async fn run_principal_in(
    args: PrincipalArgs,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, Some(client), None, shutdown).await
}

/// The resource proxy's TLS material: from the three files when all are given (the peer's rule),
/// else from the two Secrets.
async fn proxy_material(
    args: &PrincipalArgs,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<TlsMaterial> {
    if let (Some(c), Some(k), Some(ca)) = (
        &args.proxy.resource_proxy_cert_path,
        &args.proxy.resource_proxy_key_path,
        &args.proxy.resource_proxy_ca_path,
    ) {
        return Ok(TlsMaterial {
            cert_pem: read(c)?,
            key_pem: read(k)?,
            ca_pem: read(ca)?,
        });
    }
    let Some(kube) = client else {
        bail!(
            "no Kubernetes client to read the resource proxy Secrets; give --resource-proxy-cert-path, --resource-proxy-key-path and --resource-proxy-ca-path"
        );
    };
    tracing::info!(secret = %args.proxy.resource_proxy_secret_name, ca_secret = %args.proxy.resource_proxy_ca_secret_name, %namespace, "loading resource proxy TLS certificate from secrets");
    let (cert_pem, key_pem) = argocd_pull_agent_core::settings::tls_from_secret(
        kube,
        namespace,
        &args.proxy.resource_proxy_secret_name,
    )
    .await?;
    let ca_pem = argocd_pull_agent_core::settings::ca_from_secret(
        kube,
        namespace,
        &args.proxy.resource_proxy_ca_secret_name,
        &["tls.crt", "ca.crt"],
    )
    .await?;
    Ok(TlsMaterial {
        cert_pem,
        key_pem,
        ca_pem,
    })
}

struct Material {
    tls: TlsMaterial,
    jwt: String,
    client: Option<kube::Client>,
    /// what `client` was built from, when the principal built it (not given one)
    client_config: Option<kube::Config>,
    namespace: String,
}

/// Whether the gRPC TLS material comes from files or Secrets that can change (not generated, not
/// plaintext): only then is it re-read while running.
fn tls_reloadable(args: &PrincipalArgs) -> bool {
    let generated = args.tls_cert.is_none() && args.insecure_tls_generate;
    !(args.insecure_plaintext || generated)
}

/// The gRPC server certificate, key and client-CA bundle: files, the peer's Secrets, or (with
/// `--insecure-tls-generate`) a one-time certificate; empty behind a service mesh.
async fn load_tls(
    args: &PrincipalArgs,
    client: Option<&kube::Client>,
    namespace: &str,
) -> anyhow::Result<TlsMaterial> {
    let kube = || client.expect("client present when Secrets are read");
    let (cert_pem, key_pem) = match (&args.tls_cert, &args.tls_key) {
        // behind a service mesh the sidecar terminates TLS: no certificate, no CA here
        _ if args.insecure_plaintext => (Vec::new(), Vec::new()),
        (Some(c), Some(k)) => (read(c)?, read(k)?),
        (Some(_), None) | (None, Some(_)) => {
            bail!("Both --tls-cert and --tls-key have to be given")
        }
        (None, None) if args.insecure_tls_generate => {
            tracing::warn!("INSECURE: using a one-time generated TLS certificate for gRPC");
            let ca = argocd_pull_agent_core::pki::Ca::new("argocd-agent-principal--generated")?;
            let s = ca.issue_server(&[])?;
            (s.cert_pem.into_bytes(), s.key_pem.into_bytes())
        }
        (None, None) => {
            tracing::debug!(secret = %args.tls_secret_name, namespace = %namespace, "loading gRPC TLS certificate from secret");
            argocd_pull_agent_core::settings::tls_from_secret(
                kube(),
                namespace,
                &args.tls_secret_name,
            )
            .await?
        }
    };
    let ca_pem = match &args.root_ca_path {
        _ if args.insecure_plaintext => Vec::new(),
        Some(p) => read(p)?,
        None => {
            tracing::debug!(secret = %args.tls_ca_secret_name, namespace = %namespace, "loading root CA certificate from secret");
            argocd_pull_agent_core::settings::ca_from_secret(
                kube(),
                namespace,
                &args.tls_ca_secret_name,
                &["tls.crt", "ca.crt"],
            )
            .await?
        }
    };
    Ok(TlsMaterial {
        cert_pem,
        key_pem,
        ca_pem,
    })
}

/// What [`run_reloading_tls`] reloads TLS material with: the flags, the shutdown token, and the
/// client and namespace of the Secrets.
type TlsReload<'a> = (
    &'a PrincipalArgs,
    &'a CancellationToken,
    Option<&'a kube::Client>,
    &'a str,
);

/// Runs an HA mode's principal (`run`) while reloading the TLS material (files or Secrets) into
/// `tx` when it changes; then waits for the admin servers.
async fn run_reloading_tls(
    run: impl std::future::Future<Output = anyhow::Result<()>>,
    (args, shutdown, client, namespace): TlsReload<'_>,
    initial: TlsMaterial,
    tx: tokio::sync::watch::Sender<TlsMaterial>,
    admin: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
) -> anyhow::Result<()> {
    let reload = async {
        if tls_reloadable(args) {
            super::reload_tls_until(
                shutdown,
                initial,
                || load_tls(args, client, namespace),
                |m| {
                    tx.send_replace(m.clone());
                    Ok(())
                },
            )
            .await;
        }
        std::future::pending::<()>().await
    };
    let r = tokio::select! {
        r = run => r,
        _ = reload => unreachable!("pending"),
    };
    for a in admin {
        let _ = a.await;
    }
    r
}

async fn material(
    args: &PrincipalArgs,
    client: Option<kube::Client>,
    store_given: bool,
) -> anyhow::Result<Material> {
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(argocd_pull_agent_core::settings::default_namespace);
    let (client, client_config) = match (client, args.client_reason(store_given)) {
        (Some(c), _) => (Some(c), None),
        (None, Some(why)) => {
            let (client, config) = argocd_pull_agent_core::settings::kube_client_and_config(
                args.kubeconfig.as_ref(),
                args.kubecontext.as_deref(),
            )
            .await
            .with_context(|| {
                format!(
                    "a Kubernetes client is needed for {why}: set KUBECONFIG or --kubeconfig, or run in a pod with a service account"
                )
            })?;
            (Some(client), Some(config))
        }
        (None, None) => (None, None),
    };
    let tls = load_tls(args, client.as_ref(), &namespace).await?;
    let kube = || {
        client
            .as_ref()
            .expect("client present when Secrets are read")
    };
    let jwt = match args.jwt_key.as_ref().or(args.jwt_key_legacy.as_ref()) {
        Some(p) => String::from_utf8(read(p)?).context("JWT key is not UTF-8 PEM")?,
        None if args.insecure_jwt_generate => {
            tracing::warn!("INSECURE: using a one-time generated JWT signing key");
            tokio::task::spawn_blocking(|| argocd_pull_agent_core::auth::generate_rsa_pem(2048))
                .await??
        }
        None => {
            tracing::debug!(secret = %args.jwt_secret_name, %namespace, "loading JWT signing key from secret");
            argocd_pull_agent_core::settings::jwt_key_from_secret(
                kube(),
                &namespace,
                &args.jwt_secret_name,
            )
            .await?
        }
    };
    Ok(Material {
        tls,
        jwt,
        client,
        client_config,
        namespace,
    })
}

async fn run(
    args: PrincipalArgs,
    client: Option<kube::Client>,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if argocd_pull_agent_core::ciphers::is_list(&args.tls_ciphersuites) {
        print!("{}", argocd_pull_agent_core::ciphers::list_text());
        return Ok(());
    }
    // as the peer: the profiling server first, a taken port ends the command
    let _pprof = super::serve_pprof(args.pprof_port, &shutdown).await?;
    argocd_pull_agent_core::full_detail::set(
        argocd_pull_agent_core::full_detail::FullDetail::parse(&args.full_detail),
    );
    // bad input is reported before anything is loaded or connected
    if args.enable_self_cluster_registration && args.self_registration_client_cert_secret.is_empty()
    {
        bail!(
            "--enable-self-cluster-registration requires --self-registration-client-cert-secret (a kubernetes.io/tls Secret with tls.crt, tls.key and ca.crt: the client certificate Argo CD presents to the resource proxy)"
        );
    }
    let replication = args.ha.replication()?;
    {
        let ns = args
            .namespace
            .clone()
            .unwrap_or_else(argocd_pull_agent_core::settings::default_namespace);
        args.ha.in_cluster(&ns)?;
    }
    let selector = super::label_selector(&args.label_selector)?;
    let namespace_create = namespace_create(&args)?;
    let auth = match &args.identity_regex {
        Some(re) => argocd_pull_agent_core::settings::parse_auth(&format!("mtls:subject:{re}"))?,
        None => argocd_pull_agent_core::settings::parse_auth(&args.auth)?,
    };
    // peer: validateAuthTLSPairing
    match (&auth.source, args.insecure_plaintext) {
        (IdentitySource::Header(_), false) => bail!(
            "invalid configuration: header-based authentication requires --insecure-plaintext=true: it is for service meshes (e.g. Istio) whose sidecar terminates mTLS and injects the identity header; otherwise use --auth mtls:subject:<regex>"
        ),
        (IdentitySource::Subject | IdentitySource::Uri, true) => bail!(
            "invalid configuration: mtls authentication cannot be used with --insecure-plaintext: no client certificate reaches a plaintext server; remove --insecure-plaintext or use --auth header:<header>:<regex> behind a service mesh"
        ),
        _ => {}
    }
    let allow_tls12 = args.tls_allow_12
        || argocd_pull_agent_core::settings::allow_tls12(
            &args.tls_min_version,
            &args.tls_max_version,
            "tls1.3",
        )?;
    let listen = args.listen_addr()?;
    let max_event_size = args
        .max_event_size_legacy
        .unwrap_or(args.grpc_max_message_size);
    if max_event_size == 0 {
        bail!("--grpc-max-message-size must be greater than 0");
    }
    argocd_pull_agent_core::env_tuning::check()?;
    let queue_capacity = argocd_pull_agent_core::env_tuning::send_queue_capacity(
        args.queue_capacity,
        "--queue-capacity (ARGOCD_PRINCIPAL_QUEUE_CAPACITY)",
        argocd_pull_agent_core::DEFAULT_QUEUE_CAPACITY,
    )?;
    if args.heartbeat_interval < Duration::from_secs(1) {
        bail!(
            "--heartbeat-interval {:?} is too short: give at least 1s (default 30s)",
            args.heartbeat_interval
        );
    }
    // the peer's ValidateTLSConfig: every suite supports the minimum version (default tls1.3)
    let cipher_suites =
        argocd_pull_agent_core::ciphers::parse(&args.tls_ciphersuites, Some(!allow_tls12))
            .map_err(|e| anyhow::anyhow!("--tls-ciphersuites: {e}"))?;
    let Some(m) = super::or_shutdown(&shutdown, material(&args, client, store.is_some())).await?
    else {
        return Ok(());
    };
    let (initial_tls, reload_client, reload_namespace) =
        (m.tls.clone(), m.client.clone(), m.namespace.clone());
    let mut cfg = PrincipalConfig::new(listen, m.tls, m.jwt);
    cfg.allow_tls12 = allow_tls12;
    cfg.cipher_suites = cipher_suites;
    cfg.identity_regex = auth.regex;
    cfg.identity_from_uri = auth.source == IdentitySource::Uri;
    if let IdentitySource::Header(h) = &auth.source {
        cfg.identity_header = Some(h.clone());
    }
    cfg.insecure_plaintext = args.insecure_plaintext;
    if args.insecure_plaintext && (args.require_client_certs || args.client_cert_subject_match) {
        tracing::warn!(
            "--require-client-certs / --client-cert-subject-match have no effect with --insecure-plaintext: the principal sees no client certificate (the service mesh terminates TLS)"
        );
    }
    // peer: `--auth mtls:` forces client certificates on; every TLS mode here is mTLS
    cfg.client_cert_subject_match = args.client_cert_subject_match && !args.insecure_plaintext;
    cfg.enable_websocket = args.enable_websocket;
    cfg.namespace = m.namespace;
    cfg.max_event_size = max_event_size;
    cfg.queue_capacity = queue_capacity;
    cfg.recv_queue_size = argocd_pull_agent_core::env_tuning::recv_queue_size()?;
    cfg.version = args.report_version.clone();
    cfg.concurrency = args.event_processors.unwrap_or(args.concurrency).max(1);
    cfg.compression = args.compression;
    cfg.keepalive_min_interval = args.keepalive_min_interval;
    cfg.heartbeat = args.heartbeat_interval;
    cfg.resync_min_interval = args.resync_min_interval;
    cfg.max_in_flight = args.max_events_in_flight as usize;
    cfg.publish_agent_status = args.publish_agent_status;
    cfg.namespace_create = namespace_create;
    cfg.allowed_namespaces = args
        .allowed_namespaces
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    cfg.destination_based_mapping = args.destination_based_mapping;
    if cfg.destination_based_mapping {
        tracing::info!("Destination-based mapping is enabled on the principal");
    }
    let gzip = match args.proxy.redis_compression_type.as_str() {
        "gzip" => true,
        "none" => false,
        other => bail!("--redis-compression-type {other:?} is not supported; use gzip or none"),
    };
    cfg.cluster_secrets = m
        .client
        .clone()
        .map(argocd_pull_principal::cluster_secrets::SecretsClient);
    if args.enable_self_cluster_registration {
        if cfg.cluster_secrets.is_none() {
            bail!(
                "--enable-self-cluster-registration needs a Kubernetes client (the cluster secrets are written to the principal's namespace)"
            );
        }
        cfg.self_registration = Some(argocd_pull_principal::SelfRegistration {
            client_cert_secret: args.self_registration_client_cert_secret.clone(),
            resource_proxy_address: args.proxy.resource_proxy_address.clone(),
        });
    }
    // as the peer: the password from the directory, its username file ignored
    let (_, redis_password) = super::creds::redis_creds(
        args.proxy.redis_creds_dir_path.as_deref(),
        "",
        &args.proxy.redis_password,
    )?;
    cfg.argocd_cache = Some(argocd_pull_agent_core::argocd_cache::ArgoCacheConfig {
        address: args.proxy.redis_server_address.clone(),
        password: Some(redis_password).filter(|p| !p.is_empty()),
        gzip,
        resource_proxy_address: args.proxy.resource_proxy_address.clone(),
    });
    cfg.redis_proxy = super::redis::config(
        &args.proxy.redis,
        &args.proxy.redis_server_address,
        m.client.as_ref(),
        &cfg.namespace,
    )
    .await?;
    if args.proxy.enable_resource_proxy != Some(false) {
        match proxy_material(&args, m.client.as_ref(), &cfg.namespace).await {
            Ok(t) => {
                let mut rp = argocd_pull_principal::ResourceProxyConfig::new(
                    args.proxy.resource_proxy_listen,
                    t,
                );
                rp.allow_tls12 = allow_tls12;
                rp.cipher_suites = cfg.cipher_suites.clone();
                cfg.resource_proxy = Some(rp);
            }
            Err(e) if args.proxy.enable_resource_proxy.is_none() => {
                tracing::warn!(error = %format!("{e:#}"), "resource proxy disabled: its TLS material could not be loaded (create the Secrets, give the --resource-proxy-*-path files, or pass --enable-resource-proxy=false)");
            }
            Err(e) => {
                return Err(e.context("Could not load resource proxy TLS configuration"));
            }
        }
    }
    let (ha_client, lease_config) = (m.client.clone(), m.client_config.clone());
    let Some(store) =
        super::or_shutdown(&shutdown, super::store_or(store, m.client, "hub")).await?
    else {
        return Ok(());
    };
    let store = super::selected(store, selector, "principal");
    let metrics = Metrics::new("argocd_principal");
    let admin = super::serve_admin(
        &metrics,
        &super::admin_addrs(
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            args.metrics_port,
            args.healthz_port,
            args.metrics_addr,
        ),
        &shutdown,
    )
    .await?;
    // the principal's identity (the peer's principal-identity ConfigMap): agents tell a
    // failover to the other principal of an HA pair from a recreated object by it
    match argocd_pull_principal::identity::ensure_principal_uid(store.as_ref(), &cfg.namespace)
        .await
    {
        Ok(uid) => {
            tracing::info!(%uid, "principal identity");
            cfg.principal_uid = Some(uid);
        }
        Err(e) if replication.is_some() => return Err(e.context("--ha-enabled")),
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "no principal identity: agents cannot tell a failover to another principal from a recreated Application");
        }
    }
    if let Some(settings) = replication {
        let (tls_tx, tls_rx) = tokio::sync::watch::channel(initial_tls.clone());
        let node = argocd_pull_principal::ha::replication::Node {
            store,
            metrics,
            tls: tls_reloadable(&args).then_some(tls_rx),
            state: None,
        };
        let run =
            argocd_pull_principal::ha::replication::run(settings, cfg, node, shutdown.clone());
        let reload = (
            &args,
            &shutdown,
            reload_client.as_ref(),
            reload_namespace.as_str(),
        );
        return run_reloading_tls(run, reload, initial_tls, tls_tx, admin).await;
    }
    // several replicas: active/active (shard Leases) or active/passive (one Lease)
    if let Some(mode) = args.ha.in_cluster(&cfg.namespace)? {
        let Some(client) = ha_client else {
            bail!(
                "--leader-elect / --ha-mode need a Kubernetes client for their Leases (run in a cluster or set KUBECONFIG)"
            );
        };
        let (tls_tx, tls_rx) = tokio::sync::watch::channel(initial_tls.clone());
        let replica = argocd_pull_principal::ha::Replica {
            client,
            store,
            metrics,
            role: tokio::sync::watch::channel(argocd_pull_principal::ha::Role::Recovering).0,
            tls: tls_reloadable(&args).then_some(tls_rx),
            lease_config,
        };
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<()>> + Send>> =
            match mode {
                InCluster::ActiveActive(aa) => {
                    Box::pin(argocd_pull_principal::ha::active_active::run(
                        aa,
                        cfg,
                        replica,
                        shutdown.clone(),
                    ))
                }
                InCluster::ActivePassive(ha) => Box::pin(argocd_pull_principal::ha::run(
                    ha,
                    cfg,
                    replica,
                    shutdown.clone(),
                )),
            };
        let reload = (
            &args,
            &shutdown,
            reload_client.as_ref(),
            reload_namespace.as_str(),
        );
        return run_reloading_tls(run, reload, initial_tls, tls_tx, admin).await;
    }
    let Some(p) = super::or_shutdown(&shutdown, Principal::start(cfg, store, metrics)).await?
    else {
        return Ok(());
    };
    if tls_reloadable(&args) {
        // only the TLS material is re-read (not the JWT key)
        super::reload_tls_until(
            &shutdown,
            initial_tls,
            || load_tls(&args, reload_client.as_ref(), &reload_namespace),
            |m| p.reload_tls(m),
        )
        .await;
    } else {
        shutdown.cancelled().await;
    }
    tracing::info!("principal shutting down");
    super::bounded_stop("principal", async {
        p.shutdown().await;
        for a in admin {
            let _ = a.await;
        }
    })
    .await;
    Ok(())
}

/// `--namespace-create-*` as the peer reads them (`labels.StringsToMap`, `regexp.Compile`).
fn namespace_create(
    args: &PrincipalArgs,
) -> anyhow::Result<Option<argocd_pull_principal::NamespaceCreate>> {
    if !args.namespace_create_enable {
        return Ok(None);
    }
    let pattern = match args.namespace_create_pattern.as_str() {
        "" => None,
        p => Some(regex::Regex::new(p).map_err(|e| {
            anyhow::anyhow!("--namespace-create-pattern: invalid auto-namespace pattern {p:?}: {e}")
        })?),
    };
    let mut labels = std::collections::BTreeMap::new();
    for l in args
        .namespace_create_labels
        .iter()
        .filter(|l| !l.is_empty())
    {
        let (k, v) = l.split_once('=').ok_or_else(|| {
            anyhow::anyhow!(
                "--namespace-create-labels: could not parse auto namespace labels: {l:?} is not key=value"
            )
        })?;
        labels.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(Some(argocd_pull_principal::NamespaceCreate {
        pattern,
        labels,
    }))
}
