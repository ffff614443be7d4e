//! Who holds the Lease, from a watch of that one Lease: every replica's front needs to know where
//! the active replica is as soon as it changes.

use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use super::{Holder, View};

/// The holder a Lease names, with the time its claim runs out (`renewTime` +
/// `leaseDurationSeconds`); `None` when nobody holds it.
pub(crate) fn holder(lease: &Lease) -> Option<Holder> {
    let spec = lease.spec.as_ref()?;
    let identity = spec.holder_identity.clone().filter(|h| !h.is_empty())?;
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| SystemTime::from(t.0))?;
    let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
    Some(Holder {
        identity,
        expires: renewed + duration,
    })
}

/// Keeps `view.holder` current until the sender's receivers are all gone. Watch errors are
/// retried by the watcher's backoff; meanwhile the last known holder stays (its expiry still
/// applies).
pub(crate) async fn follow(api: kube::Api<Lease>, name: String, view: watch::Sender<View>) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    // the project's watch retry policy (capped at 5 s): a standby learns of a new holder soon
    // after an API-server hiccup, not after kube-runtime's default backoff of up to a minute
    let mut events = watcher::watcher(api, cfg)
        .backoff(argocd_pull_ops::watch::backoff())
        .boxed();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                let h = holder(&l);
                view.send_if_modified(|v| {
                    let changed = v.holder != h;
                    v.holder = h;
                    changed
                });
            }
            Ok(watcher::Event::Delete(_)) => {
                view.send_modify(|v| v.holder = None);
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(e) => {
                tracing::warn!(error = %e, lease = %name, "watching the HA Lease failed; retrying")
            }
        }
        if view.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_and_the_end_of_its_claim_come_from_the_lease_spec() {
        let renewed = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        // 1,000,000 s after the epoch
        let lease = |id: Option<&str>| -> Lease {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "argocd-agent-principal"},
                "spec": {
                    "holderIdentity": id,
                    "leaseDurationSeconds": 3,
                    "renewTime": "1970-01-12T13:46:40.000000Z"
                }
            }))
            .unwrap()
        };
        let h = holder(&lease(Some("principal-0@10.0.0.7"))).unwrap();
        assert_eq!(h.identity, "principal-0@10.0.0.7");
        assert_eq!(h.host(), Some("10.0.0.7"));
        assert_eq!(h.expires, renewed + Duration::from_secs(3));
        // released (kube-lease-manager clears the holder) or never held
        assert_eq!(holder(&lease(None)), None);
        assert_eq!(holder(&lease(Some(""))), None);
        assert_eq!(holder(&Lease::default()), None);
    }
}
