//! `--leader-elect` with two replicas (on 127.0.0.1 and 127.0.0.2, the same ports): the active
//! replica is killed, the agents reconnect through the other, which takes the Lease: they are
//! never shown `Failed`, and stay connected since the same time.

use argocd_pull_agent_core::agent_status as st;

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_never_shows_a_working_agent_failed() {
    if std::net::TcpListener::bind("127.0.0.2:0").is_err() {
        eprintln!("SKIP: 127.0.0.2 is not a local address here; the failover test did not run");
        return;
    }
    let env = Env::new(&["m1", "a1"]).await;
    for a in ["m1", "a1"] {
        env.cluster_secret(a).await;
    }
    env.namespace(&env.principal_hub, "m1").await;
    env.namespace(&env.principal_hub, "a1").await;
    env.create(&env.principal_hub, app("m1", "web")).await;
    let grpc = free_port();
    let replica = |name: &str, host: &str| {
        let flags = [
            format!("--listen-host={host}"),
            "--leader-elect".into(),
            format!("--ha-replica-name={name}"),
            format!("--ha-advertise-address={host}"),
            "--lease-duration=2s".into(),
        ];
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let args = env.principal_args(grpc, &flags);
        Proc::spawn(name, &args, &env.kubeconfig)
    };
    let first = replica("replica-1", "127.0.0.1");
    first.wait_for_line(&["this replica holds the Lease"]);
    let second = replica("replica-2", "127.0.0.2");
    second.wait_for_line(&["HA front listening"]);
    // the agents reach the standby, whose front splices them to the active replica
    let standby = ["--server-address=127.0.0.2"];
    let m1 = env.agent("m1", "managed", grpc, &standby).await;
    let a1 = env.agent("a1", "autonomous", grpc, &standby).await;
    let secrets = env.secrets();
    let mut since = Vec::new();
    for a in ["m1", "a1"] {
        let s = wait_shown(&secrets, a, "connected", |s| {
            s.connection == st::Connection::Successful && s.kubernetes_version.known().is_some()
        })
        .await;
        since.push(s);
    }
    let seen: Vec<_> = ["m1", "a1"].iter().map(|a| record(&secrets, a)).collect();
    first.stop("KILL");
    second.wait_for_line(&["this replica holds the Lease"]);
    second.wait_for_lines(&[&["agent subscribed", "m1"], &["agent subscribed", "a1"]]);
    // the property over a window: past the new principal's start-up sweep (2 × the interval)
    tokio::time::sleep(HEARTBEAT * 3).await;
    for ((a, seen), since) in ["m1", "a1"].iter().zip(&seen).zip(since) {
        never_failed(seen, &since, &format!("{a} across a failover"));
    }
    let rows = env.agent_list_json();
    assert_eq!(rows["m1"]["connected"], true);
    assert_eq!(rows["a1"]["connected"], true);
    drop((m1, a1, second));
}
