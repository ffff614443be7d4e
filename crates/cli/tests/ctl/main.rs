//! `argocd-pull ctl …` as a process (the peer's `argocd-agentctl`): every command through the
//! built binary against embedded hubs served over HTTP (a principal cluster and an agent
//! cluster, contexts `principal` and `agent` of one kubeconfig), and, env-gated, against the real
//! clusters.

mod commands;
mod config;
mod real;
mod validate;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;

const BIN: &str = env!("CARGO_BIN_EXE_argocd-pull");
const APP_CRD: &str = include_str!("../../../api/crds/argocd/application-crd.yaml");

/// What a ctl process printed and its exit code.
#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// Panics unless the command succeeded; returns stdout.
    #[track_caller]
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "ctl failed: {self:?}");
        &self.stdout
    }
    /// Panics unless the command exited 1 with `[FATAL]: <msg…>`; returns the message.
    #[track_caller]
    pub fn fatal(&self) -> &str {
        assert_eq!(self.code, 1, "expected exit code 1: {self:?}");
        self.stderr
            .trim_end()
            .strip_prefix("[FATAL]: ")
            .unwrap_or_else(|| panic!("expected [FATAL]: on stderr: {self:?}"))
    }
}

/// A ctl invocation environment: kubeconfig, HOME (for the default config path).
pub struct Env {
    pub kubeconfig: PathBuf,
    pub home: PathBuf,
}

impl Env {
    pub fn run(&self, args: &[&str]) -> Out {
        self.run_stdin(args, None)
    }

    pub fn run_stdin(&self, args: &[&str], stdin: Option<&str>) -> Out {
        let mut cmd = Command::new(BIN);
        cmd.arg("ctl")
            .args(args)
            .env_remove("KUBECONFIG")
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", &self.home)
            .env("NO_COLOR", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for v in [
            "ARGOCD_AGENT_PRINCIPAL_CONTEXT",
            "ARGOCD_AGENT_PRINCIPAL_NAMESPACE",
            "ARGOCD_AGENT_AGENT_CONTEXT",
            "ARGOCD_AGENT_AGENT_NAMESPACE",
        ] {
            cmd.env_remove(v);
        }
        let mut child = cmd.spawn().expect("spawning argocd-pull");
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        let o = Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!("$ argocd-pull ctl {}\n{o:?}", args.join(" "));
        o
    }
}

/// Two embedded hubs served over HTTP, and a kubeconfig naming them `principal` and `agent`.
pub struct Hubs {
    pub rt: tokio::runtime::Runtime,
    pub principal: argocd_pull_hub::Hub,
    pub agent: argocd_pull_hub::Hub,
    _servers: Vec<argocd_pull_hub::HubServer>,
    pub env: Env,
    _dir: tempfile::TempDir,
}

impl Hubs {
    pub fn start() -> Hubs {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (principal, agent) = (argocd_pull_hub::Hub::new(), argocd_pull_hub::Hub::new());
        for h in [&principal, &agent] {
            h.install_crds_yaml(APP_CRD).unwrap();
        }
        let addr: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
        let servers = rt.block_on(async {
            vec![
                principal.serve(addr).await.unwrap(),
                agent.serve(addr).await.unwrap(),
            ]
        });
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            two_context_kubeconfig(&servers[0].url(), &servers[1].url()),
        )
        .unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let hubs = Hubs {
            rt,
            principal,
            agent,
            _servers: servers,
            env: Env { kubeconfig, home },
            _dir: dir,
        };
        hubs.namespace(Side::Principal, "argocd");
        hubs.namespace(Side::Agent, "argocd");
        hubs
    }

    pub fn client(&self, side: Side) -> kube::Client {
        let _in_runtime = self.rt.enter();
        match side {
            Side::Principal => self.principal.client(),
            Side::Agent => self.agent.client(),
        }
    }

    pub fn namespace(&self, side: Side, name: &str) {
        let c = self.client(side);
        self.rt.block_on(async {
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
            let _ = Api::<Namespace>::all(c)
                .create(&Default::default(), &ns)
                .await;
        });
    }

    /// Creates (or replaces) any namespaced object given as JSON.
    pub fn apply(&self, side: Side, obj: serde_json::Value) {
        let c = self.client(side);
        self.rt.block_on(async {
            let gvk = kube::api::GroupVersionKind::try_from(
                &serde_json::from_value::<kube::api::TypeMeta>(obj.clone()).unwrap(),
            )
            .unwrap();
            let (ar, _) = kube::discovery::pinned_kind(&c, &gvk).await.unwrap();
            let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
            let api = Api::<kube::api::DynamicObject>::namespaced_with(c, &ns, &ar);
            let o: kube::api::DynamicObject = serde_json::from_value(obj).unwrap();
            api.patch(
                o.metadata.name.as_deref().unwrap(),
                &kube::api::PatchParams::apply("test").force(),
                &kube::api::Patch::Apply(&o),
            )
            .await
            .unwrap();
        });
    }

    pub fn secret(&self, side: Side, ns: &str, name: &str) -> Option<Secret> {
        let c = self.client(side);
        self.rt.block_on(async {
            Api::<Secret>::namespaced(c, ns)
                .get_opt(name)
                .await
                .unwrap()
        })
    }
}

#[derive(Clone, Copy)]
pub enum Side {
    Principal,
    Agent,
}

pub fn two_context_kubeconfig(principal: &str, agent: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: principal\n  cluster:\n    server: {principal}\n- name: agent\n  cluster:\n    server: {agent}\ncontexts:\n- name: principal\n  context:\n    cluster: principal\n    user: u\n    namespace: default\n- name: agent\n  context:\n    cluster: agent\n    user: u\n    namespace: default\ncurrent-context: principal\nusers:\n- name: u\n  user: {{}}\npreferences: {{}}\n"
    )
}

pub fn data(s: &Secret, k: &str) -> Vec<u8> {
    s.data.as_ref().unwrap()[k].0.clone()
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}
