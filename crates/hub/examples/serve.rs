//! Runs an embedded hub over HTTP for manual use with kubectl:
//! `cargo run -p argocd-pull-hub --example serve -- [--port N] [--kubeconfig PATH] [CRD.yaml ...]`

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut port = 0u16;
    let mut kubeconfig = std::path::PathBuf::from("hub.kubeconfig");
    let mut crds = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => port = args.next().unwrap_or_default().parse()?,
            "--kubeconfig" => kubeconfig = args.next().unwrap_or_default().into(),
            other => crds.push(other.to_string()),
        }
    }
    let hub = argocd_pull_hub::Hub::new();
    for path in crds {
        let names = hub.install_crds_yaml(&std::fs::read_to_string(&path)?)?;
        eprintln!("installed {names:?} from {path}");
    }
    let server = hub.serve(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    server.write_kubeconfig(&kubeconfig)?;
    eprintln!(
        "serving {} (kubeconfig {})",
        server.url(),
        kubeconfig.display()
    );
    // SIGTERM or Ctrl-C: close the watches and exit 0
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = term.recv() => {}
            r = tokio::signal::ctrl_c() => r?,
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c().await?;
    server.shutdown().await;
    Ok(())
}
