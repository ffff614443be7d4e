//! Active/active replicas on real clusters (env-gated: `ARGOCD_PULL_E2E_HUB_KUBECONFIG`,
//! `ARGOCD_PULL_E2E_MANAGED_KUBECONFIG`, the Argo CD CRDs installed on both): three
//! `argocd-pull principal --ha-mode active-active` processes on the real hub (shard Leases on the
//! real API server), `AGENTS` `argocd-pull agent` processes on the managed cluster reaching them
//! through one TCP balancer. An Application for every agent reaches its namespace on the managed
//! cluster; one replica is SIGKILLed: every agent is back and a new Application for each still
//! arrives; `kubectl` through every replica's resource proxy reaches an agent served by another.
//! Everything lives in namespaces named after a random suffix, deleted at the end. Without the
//! variables the test prints `SKIP: …` and passes.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;

use crate::{Proc, free_port, http_get, run};

const AGENTS: usize = 30;
const REPLICAS: usize = 3;
const WAIT: Duration = Duration::from_secs(180);

async fn client(path: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(path).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(cfg).unwrap()
}

fn applications() -> ApiResource {
    ApiResource {
        group: "argoproj.io".into(),
        version: "v1alpha1".into(),
        api_version: "argoproj.io/v1alpha1".into(),
        kind: "Application".into(),
        plural: "applications".into(),
    }
}

fn app(ns: &str, name: &str) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"project": "default",
                 "source": {"repoURL": "https://github.com/argoproj/argocd-example-apps.git",
                            "path": "guestbook", "targetRevision": "HEAD"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"}}
    }))
    .unwrap()
}

async fn namespace(c: &kube::Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Polls until `f` holds (the processes and the API server move on their own); the time taken.
async fn until<F, Fut>(what: &str, f: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t0 = Instant::now();
    while !f().await {
        assert!(t0.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    t0.elapsed()
}

/// How many agents hold Application `name` in their namespace on the managed cluster.
async fn holding(managed: &kube::Client, agents: &[String], name: &str) -> usize {
    let mut n = 0;
    for a in agents {
        let api: Api<DynamicObject> =
            Api::namespaced_with(managed.clone(), &format!("{a}-local"), &applications());
        if api.get_opt(name).await.ok().flatten().is_some() {
            n += 1;
        }
    }
    n
}

fn connected(healthz: u16) -> bool {
    http_get(healthz, "/healthz").is_some_and(|(c, _)| c == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clusters_three_active_active_replicas_serve_thirty_agent_processes() {
    let (Ok(hub_kc), Ok(managed_kc)) = (
        std::env::var("ARGOCD_PULL_E2E_HUB_KUBECONFIG"),
        std::env::var("ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"),
    ) else {
        eprintln!(
            "SKIP: ha::real needs ARGOCD_PULL_E2E_HUB_KUBECONFIG and ARGOCD_PULL_E2E_MANAGED_KUBECONFIG"
        );
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let suffix = format!(
        "{:06x}",
        std::process::id() ^ (Instant::now().elapsed().as_nanos() as u32)
    );
    let pns = format!("aa-e2e-{suffix}");
    let agents: Vec<String> = (0..AGENTS).map(|i| format!("aa-{suffix}-{i}")).collect();
    let (hub, managed) = (client(&hub_kc).await, client(&managed_kc).await);
    namespace(&hub, &pns).await;
    for a in &agents {
        namespace(&hub, a).await;
        namespace(&managed, &format!("{a}-local")).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    let (code, _, err) = tokio::task::block_in_place(|| {
        run(&[
            "pki",
            "--dir",
            pki.to_str().unwrap(),
            "--agent",
            &agents.join(","),
        ])
    });
    assert_eq!(code, Some(0), "{err}");
    let f = |n: &str| pki.join(n).display().to_string();

    // three replicas on the real hub, one balancer in front
    let (grpc, replica_port, proxy) = (free_port(), free_port(), free_port());
    let hub_path = std::path::PathBuf::from(&hub_kc);
    let mut replicas: Vec<Option<Proc>> = (0..REPLICAS)
        .map(|i| {
            let host = format!("127.0.0.{}", i + 2);
            Some(Proc::spawn(
                &format!("principal-{i}"),
                &[
                    "principal".into(),
                    "--ha-mode=active-active".into(),
                    format!("--ha-replica-name=principal-{i}"),
                    format!("--ha-advertise-address={host}"),
                    format!("--ha-replica-port={replica_port}"),
                    format!("--listen-host={host}"),
                    format!("--listen-port={grpc}"),
                    format!("--tls-cert={}", f("principal.crt")),
                    format!("--tls-key={}", f("principal.key")),
                    format!("--root-ca-path={}", f("ca.crt")),
                    format!("--jwt-key={}", f("jwt.key")),
                    format!("--namespace={pns}"),
                    format!("--allowed-namespaces=aa-{suffix}-*"),
                    "--metrics-port=0".into(),
                    "--healthz-port=0".into(),
                    "--enable-resource-proxy=true".into(),
                    format!("--resource-proxy-listen-address={host}:{proxy}"),
                    format!("--resource-proxy-cert-path={}", f("principal.crt")),
                    format!("--resource-proxy-key-path={}", f("principal.key")),
                    format!("--resource-proxy-ca-path={}", f("ca.crt")),
                    "--disable-redis-proxy".into(),
                    "--publish-agent-status=false".into(),
                ],
                &[("KUBECONFIG", &hub_path)],
            ))
        })
        .collect();
    for r in replicas.iter().flatten() {
        r.wait_for_line("serving as an active/active replica");
    }
    let leases: Api<Lease> = Api::namespaced(hub.clone(), &pns);
    let shard_holders = || async {
        let l = leases
            .list(&ListParams::default().labels(&format!(
                "{}=argocd-agent-principal",
                argocd_pull_ops::shards::LEASE_LABEL
            )))
            .await
            .unwrap();
        l.items
            .iter()
            .filter(|l| l.metadata.name.as_deref().unwrap_or("").contains("-shard-"))
            .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
            .collect::<Vec<String>>()
    };
    until(
        "the three replicas hold every shard on the real API server",
        || async {
            let h = shard_holders().await;
            h.len() == 32
                && (0..REPLICAS)
                    .all(|i| h.iter().any(|x| x.starts_with(&format!("principal-{i}@"))))
        },
    )
    .await;
    let svc = argocd_pull_agent::local::balancer(
        (0..REPLICAS)
            .map(|i| format!("127.0.0.{}:{grpc}", i + 2).parse().unwrap())
            .collect(),
    )
    .await
    .unwrap();

    // an Application for every agent, then the agents
    let hub_apps =
        |ns: &str| Api::<DynamicObject>::namespaced_with(hub.clone(), ns, &applications());
    for a in &agents {
        hub_apps(a)
            .create(&PostParams::default(), &app(a, "first"))
            .await
            .unwrap();
    }
    let t0 = Instant::now();
    let mut procs = Vec::new();
    for a in &agents {
        let healthz = free_port();
        let p = Proc::spawn(
            a,
            &[
                "agent".into(),
                format!("--server-address={}", svc.ip()),
                format!("--server-port={}", svc.port()),
                "--server-name=localhost".into(),
                "--agent-mode=managed".into(),
                format!("--namespace={a}-local"),
                format!("--root-ca-path={}", f("ca.crt")),
                format!("--tls-client-cert={}", f(&format!("{a}.crt"))),
                format!("--tls-client-key={}", f(&format!("{a}.key"))),
                "--metrics-port=0".into(),
                format!("--healthz-port={healthz}"),
                "--redis-addr=127.0.0.1:1".into(),
            ],
            &[("KUBECONFIG", std::path::Path::new(&managed_kc))],
        );
        procs.push((p, healthz));
    }
    let agents = &agents;
    let managed = &managed;
    until(
        "every agent's Application on the managed cluster",
        || async { holding(managed, agents, "first").await == AGENTS },
    )
    .await;
    let first = t0.elapsed();

    // kubectl (when installed) or kube's client through every replica's resource proxy reaches
    // an agent, whichever replica serves it
    let target = &agents[0];
    for i in 0..REPLICAS {
        let kc = argocd_pull_agent_core::resource::kubeconfig_yaml(
            &format!("https://127.0.0.{}:{proxy}", i + 2),
            &argocd_pull_agent_core::tls::TlsMaterial {
                cert_pem: std::fs::read(pki.join(format!("{target}.crt"))).unwrap(),
                key_pem: std::fs::read(pki.join(format!("{target}.key"))).unwrap(),
                ca_pem: std::fs::read(pki.join("ca.crt")).unwrap(),
            },
            target,
        );
        let mut cfg = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::from_yaml(&kc).unwrap(),
            &Default::default(),
        )
        .await
        .unwrap();
        cfg.tls_server_name = Some("localhost".into());
        let c = kube::Client::try_from(cfg).unwrap();
        let got =
            Api::<DynamicObject>::namespaced_with(c, &format!("{target}-local"), &applications())
                .get("first")
                .await
                .unwrap_or_else(|e| panic!("through replica {i}'s resource proxy: {e}"));
        assert_eq!(got.metadata.name.as_deref(), Some("first"));
    }

    // SIGKILL one replica (dropping a Proc kills it)
    let t1 = Instant::now();
    drop(replicas[0].take());
    until("the survivors hold every shard", || async {
        let h = shard_holders().await;
        h.len() == 32 && !h.iter().any(|x| x.starts_with("principal-0@"))
    })
    .await;
    let taken = t1.elapsed();
    until("every agent connected again", || async {
        procs.iter().all(|(_, h)| connected(*h))
    })
    .await;
    let back = t1.elapsed();
    for a in agents {
        hub_apps(a)
            .create(&PostParams::default(), &app(a, "second"))
            .await
            .unwrap();
    }
    until(
        "a new Application on every agent after the kill",
        || async { holding(managed, agents, "second").await == AGENTS },
    )
    .await;
    let second = t1.elapsed();
    println!(
        "active/active on the real env: {REPLICAS} replicas, {AGENTS} agent processes: every \
         Application on the managed cluster {first:?} after the agents started; kubectl-style \
         GET through every replica's resource proxy; one replica SIGKILLed: shards taken in \
         {taken:?}, every agent healthy again {back:?}, a new Application on every agent {second:?} \
         after the kill"
    );

    drop(procs);
    drop(replicas);
    for ns in std::iter::once(&pns).chain(agents.iter()) {
        let _ = Api::<Namespace>::all(hub.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    for a in agents {
        let _ = Api::<Namespace>::all(managed.clone())
            .delete(&format!("{a}-local"), &DeleteParams::default())
            .await;
    }
}
