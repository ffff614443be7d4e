//! `--full-detail` (argocd-agent's `ARGOCD_PRINCIPAL_FULL_DETAIL` / `ARGOCD_AGENT_FULL_DETAIL`):
//! the debug lines of events, actions and informer changes carry the whole object for the
//! categories named, through the real binaries.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::flags::{agent_args, principal_args};
use crate::otlp::Hub;
use crate::{Proc, demo_hub, free_port, run, temp_dir};

/// A named predicate on a JSON log line.
type Wanted<'a> = (&'a str, &'a dyn Fn(&Value) -> bool);

/// Reads `p`'s JSON log lines until every predicate matched one; returns the matches in order.
fn wait_json(p: &Proc, wanted: &[Wanted<'_>]) -> Vec<Value> {
    let mut got: Vec<Option<Value>> = vec![None; wanted.len()];
    let deadline = Instant::now() + Duration::from_secs(120);
    while got.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = p.lines.recv_timeout(left).unwrap_or_else(|_| {
            let missing: Vec<&str> = wanted
                .iter()
                .zip(&got)
                .filter(|(_, g)| g.is_none())
                .map(|((w, _), _)| *w)
                .collect();
            panic!("{}: no log line for {missing:?}", p.name)
        });
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        for ((_, f), g) in wanted.iter().zip(got.iter_mut()) {
            if g.is_none() && f(&v) {
                *g = Some(v.clone());
            }
        }
    }
    got.into_iter().map(Option::unwrap).collect()
}

fn is(v: &Value, fields: &[(&str, &str)]) -> bool {
    fields.iter().all(|(k, want)| v[*k] == *want)
}

#[test]
fn full_detail_puts_whole_objects_in_the_debug_lines_of_the_categories_named() {
    let dir = temp_dir("full-detail");
    let kubeconfig = dir.join("hub.kubeconfig");
    let pki = dir.join("pki");
    run(&["pki", "--dir", pki.to_str().unwrap(), "--agent", "edge"]);
    let _hub_proc = demo_hub(&kubeconfig);
    let hub = Hub::connect(&kubeconfig);
    hub.create_namespace("edge-local");
    hub.create_namespace("edge");
    let json_debug = ["--log-level=debug".to_string(), "--log-format=json".into()];

    // the principal: actions (by flag)
    let grpc: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut args = json_debug.to_vec();
    args.extend(principal_args(&pki, grpc, &["--full-detail=actions"]));
    let principal = Proc::spawn("principal", &args, Some(&kubeconfig));
    // the agent: events and informers (the peer's variable, any case), and a bad category
    let mut args = json_debug.to_vec();
    args.extend(agent_args(&pki, grpc, &[]));
    let agent = Proc::spawn_env(
        "agent",
        &args,
        Some(&kubeconfig),
        &[("ARGOCD_AGENT_FULL_DETAIL", "Events, informers,bogus")],
    );
    let warned = wait_json(
        &agent,
        &[("the warning", &|v: &Value| {
            v["level"] == "WARN"
                && v["message"]
                    == "an invalid full-detail category \"bogus\" was specified. Available categories are: all, actions, events, informers, skipping"
        })],
    );
    assert_eq!(warned.len(), 1);

    hub.create_app("edge", "guestbook");
    let repo = "argocd-example-apps";
    let agent_lines = wait_json(
        &agent,
        &[
            ("event received", &|v: &Value| {
                is(
                    v,
                    &[
                        ("log_category", "events"),
                        ("direction", "recv"),
                        ("event_target", "application"),
                        ("name", "guestbook"),
                    ],
                )
            }),
            ("action create", &|v: &Value| {
                is(
                    v,
                    &[
                        ("log_category", "actions"),
                        ("action", "create"),
                        ("resource_type", "application"),
                        ("namespace", "edge-local"),
                        ("name", "guestbook"),
                    ],
                )
            }),
            ("informer add", &|v: &Value| {
                is(
                    v,
                    &[
                        ("log_category", "informers"),
                        ("action", "create"),
                        ("resource_type", "application"),
                        ("namespace", "edge-local"),
                        ("name", "guestbook"),
                    ],
                )
            }),
        ],
    );
    let detail = |v: &Value| v["detail"].as_str().map(str::to_string);
    let [recv, create, informer] = &agent_lines[..] else {
        unreachable!()
    };
    assert_eq!(recv["level"], "DEBUG");
    assert!(
        recv["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("Event received: application ")),
        "{recv}"
    );
    assert!(detail(recv).is_some_and(|d| d.contains(repo)), "{recv}");
    assert!(
        detail(informer).is_some_and(|d| d.contains(repo)),
        "{informer}"
    );
    assert_eq!(
        create["message"],
        "Created application edge-local/guestbook"
    );
    assert!(detail(create).is_none(), "actions is off: {create}");

    let principal_lines = wait_json(
        &principal,
        &[
            ("identity ConfigMap created", &|v: &Value| {
                is(
                    v,
                    &[
                        ("log_category", "actions"),
                        ("action", "create"),
                        ("resource_type", "configmap"),
                        ("name", "argocd-agent-principal-identity"),
                    ],
                )
            }),
            ("event sent", &|v: &Value| {
                is(
                    v,
                    &[
                        ("log_category", "events"),
                        ("direction", "send"),
                        ("event_target", "application"),
                        ("name", "guestbook"),
                    ],
                )
            }),
        ],
    );
    let [identity, sent] = &principal_lines[..] else {
        unreachable!()
    };
    assert!(
        detail(identity).is_some_and(|d| d.contains("principal-uid")),
        "{identity}"
    );
    assert!(detail(sent).is_none(), "events is off: {sent}");
}
