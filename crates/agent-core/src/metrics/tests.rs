use super::*;

/// Every metric the peer's example dashboards query (argocd-agent acb60cd
/// examples/o11y/argocd-agent-{principal,agent}-dashboard.json), as (metric, labels used).
const PRINCIPAL_DASHBOARD: &[(&str, &[&str])] = &[
    ("argocd_agent_build_info", &[]),
    ("argocd_principal_agent_connections_total", &["agent_name"]),
    ("argocd_principal_connected_agents", &[]),
    ("principal_agent_avg_connection_time", &[]),
    ("principal_app_projects_created", &[]),
    ("principal_app_projects_deleted", &[]),
    ("principal_app_projects_updated", &[]),
    ("principal_applications_created", &[]),
    ("principal_applications_deleted", &[]),
    ("principal_applications_updated", &[]),
    ("principal_events_received", &[]),
    ("principal_events_sent", &[]),
    (
        "principal_event_processing_time_bucket",
        &["status", "agent_name", "resource_type"],
    ),
    ("principal_event_processing_time_count", &["status"]),
    (
        "principal_event_writer_send_errors_total",
        &["agent_name", "reason"],
    ),
    (
        "argocd_principal_event_writer_events_discarded_total",
        &["event_type"],
    ),
    ("principal_errors", &["resource_type"]),
    (
        "argocd_principal_redis_proxy_requests_total",
        &["agent_name", "command"],
    ),
    (
        "argocd_principal_redis_proxy_errors_total",
        &["agent_name", "command"],
    ),
    ("grpc_server_started_total", &["grpc_type"]),
    ("grpc_server_handled_total", &["grpc_code"]),
    ("grpc_server_msg_received_total", &[]),
    ("grpc_server_msg_sent_total", &[]),
    ("grpc_server_handling_seconds_bucket", &["le"]),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
    ("process_open_fds", &[]),
    ("rest_client_requests_total", &["code"]),
    ("rest_client_request_duration_seconds_bucket", &["le"]),
];
const AGENT_DASHBOARD: &[(&str, &[&str])] = &[
    ("argocd_agent_build_info", &[]),
    ("argocd_agent_connection_status", &[]),
    ("argocd_agent_connection_start_timestamp_seconds", &[]),
    ("argocd_agent_connections_total", &[]),
    ("argocd_agent_auth_failures_total", &[]),
    ("agent_events_received", &[]),
    ("agent_events_sent", &[]),
    (
        "agent_event_processing_time_bucket",
        &["status", "agent_mode", "resource_type"],
    ),
    (
        "agent_event_propagation_latency_seconds_bucket",
        &["resource_type"],
    ),
    (
        "argocd_agent_event_writer_events_discarded_total",
        &["event_type"],
    ),
    ("agent_errors", &["resource_type"]),
    ("argocd_agent_redis_proxy_requests_total", &["command"]),
    ("argocd_agent_redis_proxy_errors_total", &["command"]),
    ("grpc_client_started_total", &["grpc_type"]),
    ("grpc_client_handled_total", &["grpc_code"]),
    ("grpc_client_msg_received_total", &[]),
    ("grpc_client_msg_sent_total", &[]),
    ("grpc_client_handling_seconds_bucket", &["le"]),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
    ("process_open_fds", &[]),
    ("rest_client_requests_total", &["code"]),
    ("rest_client_request_duration_seconds_bucket", &["le"]),
];

fn sample<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    body.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

fn check(body: &str, expected: &[(&str, &[&str])]) {
    for (name, labels) in expected {
        let line =
            sample(body, name).unwrap_or_else(|| panic!("metric {name} missing from:\n{body}"));
        for l in *labels {
            assert!(
                line.contains(&format!("{l}=\"")),
                "{name} lacks label {l}: {line}"
            );
        }
    }
}

#[tokio::test]
async fn principal_exports_every_metric_of_the_peers_dashboard_with_its_labels() {
    let m = Metrics::new("argocd_principal");
    crate::kube_client::one_request().await;
    m.agent_connected("agent-a");
    m.sent("create");
    m.received("status-update");
    m.processed_for(
        &PeerProcessing::new("agent-a"),
        "failure",
        "application",
        0.01,
    );
    m.discarded("agent-a", "create", "application");
    m.peer
        .event_writer_send_errors
        .get_or_create(&vec![
            ("agent_name".into(), "agent-a".into()),
            ("reason".into(), "x".into()),
        ])
        .inc();
    for (k, op) in [
        ("Application", "created"),
        ("Application", "updated"),
        ("Application", "deleted"),
        ("AppProject", "created"),
        ("AppProject", "updated"),
        ("AppProject", "deleted"),
        ("Repository", "created"),
        ("Repository", "updated"),
        ("Repository", "deleted"),
    ] {
        m.hub_write(k, op);
    }
    for op in ["created", "updated", "deleted"] {
        assert!(
            m.encode()
                .contains(&format!("principal_repositories_{op} 1\n")),
            "principal_repositories_{op}"
        );
    }
    m.redis_proxy_request("agent-a", "get");
    m.redis_proxy_error("agent-a", "subscribe");
    // the gRPC server's services are metered from the start (principal::run)
    m.grpc.initialize("eventstreamapi.EventStream");
    let body = m.encode();
    check(&body, PRINCIPAL_DASHBOARD);
    assert!(body.contains(
        "argocd_principal_redis_proxy_errors_total{agent_name=\"agent-a\",command=\"subscribe\"} 1\n"
    ));
    assert!(body.contains("principal_events_sent 1\n"), "{body}");
    assert!(body.contains("# TYPE principal_events_sent unknown"));
    assert!(body.contains("argocd_principal_connected_agents 1\n"));
    assert!(body.contains("principal_agent_avg_connection_time 0\n"));
    assert!(body.contains("principal_errors{resource_type=\"application\"} 1\n"));
    assert!(body.contains("argocd_principal_agent_connections_total{agent_name=\"agent-a\"} 1\n"));
    // our own metrics stay, as additions
    assert!(body.contains("argocd_principal_events_sent_total{type=\"create\"} 1\n"));
    assert!(body.contains("argocd_principal_agent_connected{agent_name=\"agent-a\"} 1\n"));
    m.agent_disconnected("agent-a");
    assert!(m.encode().contains("argocd_principal_connected_agents 0\n"));
    assert!(
        m.encode()
            .contains("argocd_principal_agent_connected{agent_name=\"agent-a\"} 0\n"),
        "a disconnected agent stays, at 0"
    );
    // agent-only metrics are not exported by the principal
    assert!(sample(&body, "agent_events_sent").is_none());
}

#[tokio::test]
async fn agent_exports_every_metric_of_the_peers_dashboard_with_its_labels() {
    let m = Metrics::new("argocd_agent");
    crate::kube_client::one_request().await;
    // one call through the metered channel (agent::connect)
    {
        use tower::ServiceExt;
        let answer = tower::service_fn(|_req: http::Request<tonic::body::Body>| async {
            http::Response::builder()
                .header("grpc-status", "16")
                .body(tonic::body::Body::empty())
        });
        let req = http::Request::builder()
            .uri("/authapi.Authentication/Authenticate")
            .body(tonic::body::Body::empty())
            .unwrap();
        crate::grpc_metrics::MeteredClient::new(answer, &m.grpc)
            .oneshot(req)
            .await
            .unwrap();
    }
    m.connection_up();
    m.sent("status-update");
    m.received("create");
    let p = PeerProcessing::new("managed");
    m.processed_for(&p, "success", "application", 0.002);
    m.processed_for(&p, "failure", "application", 0.002);
    m.processed_for(&p, "failure", "application", 0.003);
    m.propagation("application", 0.05);
    m.discarded("", "status-update", "application");
    m.auth_failure("token");
    m.agent_redis_proxy_request("get");
    m.agent_redis_proxy_error("get");
    let body = m.encode();
    check(&body, AGENT_DASHBOARD);
    assert!(body.contains("argocd_agent_redis_proxy_requests_total{command=\"get\"} 1\n"));
    assert!(body.contains("argocd_agent_connection_status 1\n"));
    assert!(body.contains("argocd_agent_connections_total 1\n"));
    assert!(body.contains("agent_events_received 1\n"));
    // the session's cached handle counts into the exported series, one per label set
    assert!(body.contains("agent_event_processing_time_count{status=\"failure\",agent_mode=\"managed\",resource_type=\"application\"} 2\n"), "{body}");
    assert!(body.contains("agent_event_processing_time_count{status=\"success\",agent_mode=\"managed\",resource_type=\"application\"} 1\n"), "{body}");
    assert!(
        body.contains("agent_errors{resource_type=\"application\"} 2\n"),
        "{body}"
    );
    assert!(body.contains("grpc_client_handled_total{grpc_code=\"Unauthenticated\",grpc_method=\"Authenticate\",grpc_service=\"authapi.Authentication\",grpc_type=\"unary\"} 1\n"), "{body}");
    assert!(m.ready.get());
    let ts = sample(&body, "argocd_agent_connection_start_timestamp_seconds").unwrap();
    let ts: f64 = ts.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(ts > 1.7e9, "a unix timestamp: {ts}");
    m.connection_down();
    assert!(m.encode().contains("argocd_agent_connection_status 0\n"));
    assert!(!m.ready.get());
    assert!(sample(&body, "principal_events_sent").is_none());
}
