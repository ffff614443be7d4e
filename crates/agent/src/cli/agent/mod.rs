//! `argocd-pull agent`: runs an agent from its flags (`args`: the flags and environment variables
//! of argocd-agent's `agent` command).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use anyhow::{Context, bail};

use argocd_pull_agent_core::metrics::Metrics;
use argocd_pull_agent_core::settings::read;
use argocd_pull_agent_core::store::Store;
use argocd_pull_agent_core::tls::TlsMaterial;
use argocd_pull_ops::CancellationToken;
use argocd_pull_spoke::{Agent, AgentConfig};

mod args;

pub use args::AgentArgs;

/// Runs an agent against the current kube context until SIGTERM or Ctrl-C.
pub async fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
    run(args, None, None, argocd_pull_ops::shutdown::on_signal()).await
}

/// Runs an agent until `shutdown` is cancelled. `store`: the local backend (`None`: the current
/// kube context).
pub async fn run_agent_until(
    args: AgentArgs,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, None, store, shutdown).await
}

/// Runs an agent against `client`'s cluster (local objects and the peer's Secrets) until
/// `shutdown` is cancelled.
pub async fn run_agent_in(
    args: AgentArgs,
    client: kube::Client,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    run(args, Some(client), None, shutdown).await
}

async fn material(
    args: &AgentArgs,
    client: Option<kube::Client>,
) -> anyhow::Result<(TlsMaterial, Option<kube::Client>)> {
    if args.insecure_plaintext {
        // the mesh sidecar holds the certificates; no TLS material here
        return Ok((
            TlsMaterial {
                cert_pem: Vec::new(),
                key_pem: Vec::new(),
                ca_pem: Vec::new(),
            },
            client,
        ));
    }
    let needs_kube = args.tls_cert.is_none() || (args.root_ca_path.is_none() && !args.insecure_tls);
    let client = match client {
        Some(c) => Some(c),
        None if needs_kube || args.kubeconfig.is_some() || args.kubecontext.is_some() => Some(
            argocd_pull_agent_core::settings::kube_client(
                args.kubeconfig.as_ref(),
                args.kubecontext.as_deref(),
            )
            .await
            .context("TLS material comes from Secrets")?,
        ),
        None => None,
    };
    let kube = || {
        client
            .as_ref()
            .expect("client present when Secrets are read")
    };
    let ns = &args.namespace;
    let ca_pem = match &args.root_ca_path {
        // as the peer: with --insecure-tls no root CA is loaded
        _ if args.insecure_tls => Vec::new(),
        Some(p) => read(p)?,
        None => {
            tracing::debug!(secret = %args.root_ca_secret_name, namespace = %ns, "loading root CA certificate from secret");
            argocd_pull_agent_core::settings::ca_from_secret(
                kube(),
                ns,
                &args.root_ca_secret_name,
                &[],
            )
            .await?
        }
    };
    let (cert_pem, key_pem) = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => (read(c)?, read(k)?),
        (None, None) => {
            tracing::debug!(secret = %args.tls_secret_name, namespace = %ns, "loading client TLS certificate from secret");
            argocd_pull_agent_core::settings::tls_from_secret(kube(), ns, &args.tls_secret_name)
                .await?
        }
        _ => bail!("Both --tls-client-cert and --tls-client-key have to be given"),
    };
    Ok((
        TlsMaterial {
            cert_pem,
            key_pem,
            ca_pem,
        },
        client,
    ))
}

/// Where the agent reads its cluster's Kubernetes version: a client of the same cluster without
/// kube's retries (an API server answering 503 is reported as such, not after minutes of
/// retrying); a client given by the caller as it is.
async fn version_source(
    args: &AgentArgs,
    given_client: bool,
    client: Option<&kube::Client>,
) -> Option<argocd_pull_spoke::KubeVersionSource> {
    let client = client?;
    if !given_client
        && let Ok(mut c) = argocd_pull_agent_core::settings::kube_config(
            args.kubeconfig.as_ref(),
            args.kubecontext.as_deref(),
        )
        .await
    {
        c.default_retry = false;
        if let Ok(c) = kube::Client::try_from(c) {
            return Some(argocd_pull_spoke::KubeVersionSource::from_client(c));
        }
    }
    Some(argocd_pull_spoke::KubeVersionSource::from_client(
        client.clone(),
    ))
}

async fn run(
    args: AgentArgs,
    client: Option<kube::Client>,
    store: Option<Arc<dyn Store>>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if argocd_pull_agent_core::ciphers::is_list(&args.tls_ciphersuites) {
        print!("{}", argocd_pull_agent_core::ciphers::list_text());
        return Ok(());
    }
    let given_client = client.is_some();
    // as the peer: the profiling server first, a taken port ends the command
    let _pprof = super::serve_pprof(args.pprof_port, &shutdown).await?;
    argocd_pull_agent_core::full_detail::set(
        argocd_pull_agent_core::full_detail::FullDetail::parse(&args.full_detail),
    );
    argocd_pull_agent_core::settings::check_creds(&args.creds)?;
    // as the peer's NewAgent
    if args.destination_based_mapping && args.mode == argocd_pull_agent_core::Mode::Autonomous {
        bail!(
            "destination-based mapping is not supported for autonomous agents: remove --destination-based-mapping (ARGOCD_AGENT_DESTINATION_BASED_MAPPING) or use --agent-mode managed"
        );
    }
    if args.create_namespace && !args.destination_based_mapping {
        bail!(
            "cannot create namespaces if destination based mapping is disabled: remove --create-namespace (ARGOCD_AGENT_CREATE_NAMESPACE) or add --destination-based-mapping"
        );
    }
    // bad input is reported before anything is loaded or connected
    let selector = super::label_selector(&args.label_selector)?;
    argocd_pull_agent_core::env_tuning::check()?;
    let queue_capacity = argocd_pull_agent_core::env_tuning::send_queue_capacity(
        args.queue_capacity,
        "--queue-capacity (ARGOCD_AGENT_QUEUE_CAPACITY)",
        argocd_pull_agent_core::DEFAULT_QUEUE_CAPACITY,
    )?;
    if args.namespace.is_empty() {
        bail!("namespace value is empty and must be specified");
    }
    let allow_tls12 = args.tls_allow_12
        || argocd_pull_agent_core::settings::allow_tls12(
            &args.tls_min_version,
            &args.tls_max_version,
            "",
        )?;
    let (host, port) = args.server()?;
    let max_event_size = args
        .max_event_size_legacy
        .unwrap_or(args.grpc_max_message_size);
    if max_event_size == 0 {
        bail!("--grpc-max-message-size must be greater than 0");
    }
    let Some((tls, client)) = super::or_shutdown(&shutdown, material(&args, client)).await? else {
        return Ok(());
    };
    let (initial_tls, reload_client) = (tls.clone(), client.clone());
    let resolve = async {
        tokio::net::lookup_host((host.as_str(), port))
            .await
            .with_context(|| format!("resolving {host}:{port}"))?
            .next()
            .with_context(|| format!("{host}:{port} resolves to no address"))
    };
    let Some(addr) = super::or_shutdown(&shutdown, resolve).await? else {
        return Ok(());
    };
    let mut cfg = AgentConfig::new(addr, tls, args.mode);
    cfg.server_name = args.server_name.clone().unwrap_or_else(|| host.clone());
    cfg.allow_tls12 = allow_tls12;
    // the peer's ValidateTLSConfig, against --tls-min-version when it is set
    let min13 = match args.tls_min_version.trim() {
        "" if !args.tls_allow_12 => None,
        "tls1.3" => Some(true),
        _ => Some(false),
    };
    if args.insecure_tls && !args.insecure_plaintext {
        tracing::warn!("INSECURE: Not verifying remote TLS certificate (--insecure-tls)");
    }
    cfg.insecure_tls = args.insecure_tls;
    cfg.cipher_suites = argocd_pull_agent_core::ciphers::parse(&args.tls_ciphersuites, min13)
        .map_err(|e| anyhow::anyhow!("--tls-ciphersuites: {e}"))?;
    cfg.namespace = args.namespace.clone();
    cfg.max_event_size = max_event_size;
    cfg.queue_capacity = queue_capacity;
    cfg.recv_queue_size = argocd_pull_agent_core::env_tuning::recv_queue_size()?;
    cfg.version = args.report_version.clone();
    cfg.compression = args.compression;
    cfg.heartbeat_interval = args.heartbeat_interval;
    cfg.resync_interval = args.resync_interval;
    cfg.insecure_plaintext = args.insecure_plaintext;
    cfg.enable_websocket = args.enable_websocket;
    cfg.auth_method = match args.creds.split_once(':').map(|x| x.0) {
        Some("header") => "header".into(),
        _ => "mtls".into(),
    };
    cfg.mismatch_policy = args.source_uid_mismatch_policy;
    cfg.adoption_policy = args.adoption_policy;
    cfg.on_recreate = args.on_application_recreate;
    if !args.keepalive.is_zero() {
        cfg.keepalive_interval = args.keepalive;
    }
    cfg.enable_resource_proxy = args.enable_resource_proxy;
    cfg.resource_proxy_managed_only = args.resource_proxy_managed_only;
    if args.cache_refresh_interval.is_zero() {
        bail!("--cache-refresh-interval must be greater than 0");
    }
    cfg.cache_refresh_interval = args.cache_refresh_interval;
    if args.informer_sync_timeout.is_zero() {
        bail!("--informer-sync-timeout must be greater than 0");
    }
    cfg.informer_sync_timeout = args.informer_sync_timeout;
    cfg.informer_event_buffer_interval = args.buffer_informer_event_interval;
    cfg.destination_based_mapping = args.destination_based_mapping;
    if cfg.destination_based_mapping {
        tracing::info!("Destination-based mapping is enabled");
    }
    cfg.create_namespace = args.create_namespace;
    cfg.allowed_namespaces = args
        .allowed_namespaces
        .iter()
        .filter(|n| !n.is_empty())
        .cloned()
        .collect();
    let (redis_username, redis_password) = super::creds::redis_creds(
        args.redis_creds_dir_path.as_deref(),
        &args.redis_username,
        &args.redis_password,
    )?;
    cfg.local_redis = Some(argocd_pull_spoke::LocalRedis {
        address: args.redis_addr.clone(),
        password: Some(redis_password.clone()).filter(|p| !p.is_empty()),
    });
    cfg.redis_proxy = Some(argocd_pull_spoke::LocalRedisProxy {
        username: Some(redis_username).filter(|u| !u.is_empty()),
        password: Some(redis_password).filter(|p| !p.is_empty()),
        ..argocd_pull_spoke::LocalRedisProxy::new(&args.redis_addr)
    });
    let client = match (client, &store) {
        (Some(c), _) => Some(c),
        (None, None) => {
            let Some(c) = super::or_shutdown(&shutdown, async {
                argocd_pull_agent_core::kube_client::infer()
                    .await
                    .context("connecting to the local cluster")
            })
            .await?
            else {
                return Ok(());
            };
            Some(c)
        }
        (None, Some(_)) => None,
    };
    cfg.resource_proxy = client.clone().map(argocd_pull_spoke::ResourceProxyClient);
    cfg.kube_version = version_source(&args, given_client, client.as_ref()).await;
    if let Some(rp) = cfg.redis_proxy.as_mut() {
        rp.tls = super::redis::agent_tls(&args.redis_tls, client.as_ref(), &args.namespace).await?;
    }
    let Some(store) =
        super::or_shutdown(&shutdown, super::store_or(store, client, "local")).await?
    else {
        return Ok(());
    };
    let store = super::selected(store, selector, "agent");
    let metrics = Metrics::new("argocd_agent");
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
    let Some(a) = super::or_shutdown(&shutdown, Agent::start(cfg, store, metrics)).await? else {
        return Ok(());
    };
    if args.insecure_plaintext {
        shutdown.cancelled().await;
    } else {
        super::reload_tls_until(
            &shutdown,
            initial_tls,
            || async { Ok(material(&args, reload_client.clone()).await?.0) },
            |m| a.reload_tls(m),
        )
        .await;
    }
    tracing::info!("agent shutting down");
    super::bounded_stop("agent", async {
        a.shutdown().await;
        for t in admin {
            let _ = t.await;
        }
    })
    .await;
    Ok(())
}
