//! A real nginx in front of a plaintext principal, as a service-mesh sidecar would be: nginx
//! terminates the agent's mTLS, verifies its certificate and passes the verified subject in a
//! header (`grpc_set_header x-client-id $ssl_client_s_dn`) over h2c to the principal, which runs
//! with `--insecure-plaintext --auth header:x-client-id:^CN=(.+)$`. Needs `nginx` on PATH
//! (Debian `nginx-light`); prints `SKIP:` otherwise.

use std::io::Write;
use std::process::Stdio;

use argocd_pull_agent::local::LocalPki;
use argocd_pull_agent_core::Mode;
use argocd_pull_agent_core::store::MemStore;

use crate::harness::*;

pub fn nginx() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .map(|d| d.join("nginx"))
            .find(|f| f.is_file())
    })
}

pub struct Nginx(pub std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn agent_through_nginx_terminating_mtls_to_a_plaintext_principal() {
    let Some(bin) = nginx() else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: agent_through_nginx_terminating_mtls_to_a_plaintext_principal needs nginx (apt-get install nginx-light)"
        );
        return;
    };
    let pki = LocalPki::new().unwrap();
    let (hub, spoke) = (MemStore::new(), MemStore::new());
    let p = principal_with(&pki, &hub, "127.0.0.1:0", |c| {
        c.insecure_plaintext = true;
        c.identity_header = Some("x-client-id".into());
        c.identity_regex = "^CN=(.+)$".into();
    })
    .await;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("server.crt"), &pki.principal.cert_pem).unwrap();
    std::fs::write(d.join("server.key"), &pki.principal.key_pem).unwrap();
    std::fs::write(d.join("ca.crt"), &pki.principal.ca_pem).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = format!(
        r#"user root;
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{}}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {d}/server.crt;
    ssl_certificate_key {d}/server.key;
    ssl_client_certificate {d}/ca.crt;
    ssl_verify_client on;
    ssl_protocols TLSv1.3;
    location / {{
      grpc_pass grpc://{upstream};
      grpc_set_header x-client-id $ssl_client_s_dn;
      grpc_read_timeout 1h;
      grpc_send_timeout 1h;
    }}
  }}
}}
"#,
        d = d.display(),
        upstream = p.local_addr(),
    );
    std::fs::write(d.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(bin)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(d.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts");
    let _nginx = Nginx(child);
    // nginx is up once its port accepts connections
    wait_idle(|| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()).await;

    // the agent speaks mTLS to nginx and logs in with the header method; its identity is the
    // certificate subject nginx verified and forwarded
    let a = agent_with(&pki, &p, "edge-mesh", Mode::Managed, &spoke, |c| {
        c.principal = ([127, 0, 0, 1], port).into();
        c.auth_method = "header".into();
    })
    .await;
    assert_eq!(p.connected_agents(), ["edge-mesh"]);
    put(&hub, app("edge-mesh", "web", "v1")).await;
    wait_for(&spoke, "argocd", "web", "through nginx", |o| o.is_some()).await;
    let log = std::fs::read_to_string(d.join("access.log")).unwrap_or_default();
    // (the stream is logged when it ends; the Application above came through it)
    assert!(
        log.contains("\"POST /authapi.Authentication/Authenticate HTTP/2.0\" 200"),
        "nginx carried the login: {log}"
    );
    a.shutdown().await;
    p.shutdown().await;
}
