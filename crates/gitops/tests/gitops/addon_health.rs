//! Condition `AgentConnected` on the agent's ManagedClusterAddOn, on the embedded hub: OCM's
//! addon manager is played by writing its `Available` condition (server-side apply of its own
//! entries, as its patches leave others' conditions alone); the controller derives the
//! condition from it, leaves OCM's conditions as they are, and writes nothing when nothing
//! changed. (On the real env, with OCM's own addon manager: crates/cli/tests/signals/
//! addon_available.rs.)

use argocd_pull_gitops::addon::{apply, health};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::addon::{FIRST_PASS, addon_only, fleet, gitopscluster};
use crate::util::{Env, eventually, eventually_within};

const ADDON: &str = "argocd-agent-addon";

fn api(env: &Env, ns: &str) -> Api<DynamicObject> {
    let (ar, _) = apply::resource("ManagedClusterAddOn");
    Api::namespaced_with(env.client.clone(), ns, &ar)
}

/// What OCM's addon manager writes: `ManifestApplied` and `Available`.
async fn ocm_reports(env: &Env, status: &str, reason: &str, message: &str) {
    api(env, "c1")
        .patch_status(
            ADDON,
            &PatchParams::apply("ocm-addon-manager").force(),
            &Patch::Apply(json!({
                "apiVersion": "addon.open-cluster-management.io/v1alpha1",
                "kind": "ManagedClusterAddOn",
                "metadata": {"name": ADDON, "namespace": "c1"},
                "status": {"conditions": [
                    {"type": "ManifestApplied", "status": "True", "reason": "AddonManifestApplied",
                     "message": "manifests of addon are applied successfully",
                     "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "Available", "status": status, "reason": reason, "message": message,
                     "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
            })),
        )
        .await
        .expect("OCM's status write");
}

async fn mca(env: &Env) -> Option<Value> {
    let o = api(env, "c1").get_opt(ADDON).await.ok()??;
    Some(serde_json::to_value(o).unwrap())
}

fn condition(mca: &Value, t: &str) -> Option<Value> {
    mca["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

/// Waits until `AgentConnected` has `status` and `reason`; the condition.
async fn agent_connected(env: &Env, status: &str, reason: &str) -> Value {
    eventually(&format!("AgentConnected {status} {reason}"), || async {
        let c = condition(&mca(env).await?, health::COND_AGENT_CONNECTED)?;
        (c["status"] == status && c["reason"] == reason).then_some(c)
    })
    .await
}

#[tokio::test]
async fn agent_connected_follows_ocms_available_in_words_a_person_can_act_on() {
    let env = Env::start(addon_only()).await;
    fleet(&env, false).await;
    gitopscluster(
        &env,
        "Placement",
        json!({"principalServerAddress": "principal.example.com", "principalServerPort": "443",
               "mode": "managed"}),
    )
    .await;
    // before OCM reports anything: unknown, never connected
    let c = eventually_within(FIRST_PASS, "AgentConnected before OCM reports", || async {
        condition(&mca(&env).await?, health::COND_AGENT_CONNECTED)
    })
    .await;
    assert_eq!(c["status"], "Unknown", "{c}");
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("no Available condition"),
        "{c}"
    );

    // the stream is up: OCM's workload probe found the agent ready
    ocm_reports(
        &env,
        "True",
        "ProbeAvailable",
        "argocd-agent-addon add-on is available.",
    )
    .await;
    let up = agent_connected(&env, "True", health::REASON_CONNECTED).await;
    let m = up["message"].as_str().unwrap();
    assert!(
        m.contains("c1") && m.contains("principal.example.com:443"),
        "{m}"
    );
    let now = mca(&env).await.unwrap();
    assert_eq!(
        condition(&now, "ManifestApplied").unwrap()["status"],
        "True",
        "OCM's conditions stay"
    );
    assert_eq!(condition(&now, "Available").unwrap()["status"], "True");

    // the stream is down
    ocm_reports(
        &env,
        "False",
        "ProbeUnavailable",
        "Probe addon unavailable with err readyReplica is not probed",
    )
    .await;
    let down = agent_connected(&env, "False", health::REASON_NOT_CONNECTED).await;
    let m = down["message"].as_str().unwrap();
    for want in [
        "The argocd-pull agent on c1 has no stream to its principal at principal.example.com:443",
        "Deployment argocd/argocd-agent-addon has no ready replica",
        "kubectl -n argocd logs deploy/argocd-agent-addon",
    ] {
        assert!(m.contains(want), "{want}: {m}");
    }
    assert!(down["lastTransitionTime"].is_string());

    // the health cannot be probed: unknown with OCM's reason, never connected
    ocm_reports(
        &env,
        "Unknown",
        "NoProbeResult",
        "Probe results are not returned",
    )
    .await;
    let unknown = agent_connected(&env, "Unknown", health::REASON_HEALTH_UNKNOWN).await;
    let m = unknown["message"].as_str().unwrap();
    assert!(
        m.contains("NoProbeResult: Probe results are not returned") && m.contains("klusterlet"),
        "{m}"
    );

    // nothing changed: a pass writes nothing
    let before = env.reconciles("argocd-agent-addon-health");
    // the resourceVersion of the touch itself: any later write changes it
    let rv = api(&env, "c1")
        .patch(
            ADDON,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap()
        .metadata
        .resource_version;
    eventually("a pass over the touched addon", || async {
        (env.reconciles("argocd-agent-addon-health") > before).then_some(())
    })
    .await;
    assert_eq!(
        mca(&env).await.unwrap()["metadata"]["resourceVersion"].as_str(),
        rv.as_deref(),
        "no write when the condition is current"
    );
    env.stop().await;
}
