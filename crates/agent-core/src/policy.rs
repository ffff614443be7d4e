//! A managed agent's policies for Applications it did not create itself, as argocd-agent's
//! (internal/manager/manager.go, agent/inbound.go `syncManagedApplication`,
//! `effectiveMismatchPolicy`, `effectiveAdoptionPolicy`, `RevertUserInitiatedDeletion`).

use serde_json::Value;

use crate::objects as o;

/// Per-Application override of [`MismatchPolicy`] (on the principal's Application).
pub const MISMATCH_ANNOTATION: &str = "argocd.argoproj.io/source-uid-mismatch-policy";
/// Per-Application override of [`AdoptionPolicy`] (on the agent's existing Application).
pub const ADOPTION_ANNOTATION: &str = "argocd.argoproj.io/adoption-policy";
/// The identity of the principal an Application came from (the event's `principaluid`), as
/// the peer's agent stamps it (internal/manager/manager.go `PrincipalUIDAnnotation`).
pub const PRINCIPAL_UID_ANNOTATION: &str = "argocd.argoproj.io/principal-uid";

/// `--source-uid-mismatch-policy`: the principal's Application was deleted and recreated (a new
/// UID) while the agent holds the old one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MismatchPolicy {
    /// Delete the agent's Application and create the new one (the peer's default).
    #[default]
    Recreate,
    /// Update the agent's Application in place and stamp the new UID.
    Upsert,
}

/// `--adoption-policy`: the principal creates an Application that already exists on the agent
/// and was not created by the principal (no source-uid).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AdoptionPolicy {
    /// Take it over (the peer's default).
    #[default]
    Always,
    /// Leave it alone and report an error to the principal.
    Never,
}

/// `--on-application-recreate`: after a managed Application deleted on the agent by someone else
/// is recreated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RecreateAction {
    /// Nothing more (the peer's default).
    #[default]
    Ignore,
    /// Drop `status.operationState`, so automated sync starts again.
    ClearStatus,
    /// Request a sync operation at once.
    Resync,
}

/// The peer's message when adoption is refused (shown on the hub Application).
pub const ADOPTION_REFUSED: &str = "Adoption policy for application is set to never. Either change the policy and recreate the app on the principal or delete the existing app on the agent.";

/// What a managed agent does with a `create` / `spec-update` from the principal, given the
/// Application it has under that name.
#[derive(Debug, PartialEq, Eq)]
pub enum Identity {
    /// None there, or the same source UID: create / update.
    Apply,
    /// A different source UID: the principal's Application was recreated.
    Mismatch(MismatchPolicy),
    /// No source UID: an Application the agent's cluster had before.
    Adopt(AdoptionPolicy),
    /// Another principal (an HA failover): its UIDs differ but the Application is the same;
    /// updated in place with the new identity (the peer's `identityActionTransition`).
    Transition,
}

/// Sorts an incoming principal Application (`incoming`, its UID the source UID) against the
/// agent's `existing` one.
pub fn identity(
    incoming: &Value,
    existing: Option<&Value>,
    mismatch: MismatchPolicy,
    adoption: AdoptionPolicy,
) -> Identity {
    identity_from(incoming, existing, "", mismatch, adoption)
}

/// [`identity`] for an event from principal `principal_uid` (its `principaluid`; empty: a
/// principal without one). A different source UID is a failover, not a recreation, when the
/// principal differs from the one the existing Application came from, or when that one is
/// unknown (an Application from before principal identities: the peer's rule).
pub fn identity_from(
    incoming: &Value,
    existing: Option<&Value>,
    principal_uid: &str,
    mismatch: MismatchPolicy,
    adoption: AdoptionPolicy,
) -> Identity {
    let Some(existing) = existing else {
        return Identity::Apply;
    };
    let have = o::source_uid(existing);
    if have.is_empty() {
        let p = match o::annotation(existing, ADOPTION_ANNOTATION) {
            Some("always") => AdoptionPolicy::Always,
            Some("never") => AdoptionPolicy::Never,
            _ => adoption,
        };
        return Identity::Adopt(p);
    }
    let uid = o::uid(incoming);
    if uid.is_empty() || uid == have {
        return Identity::Apply;
    }
    let from = o::annotation(existing, PRINCIPAL_UID_ANNOTATION).unwrap_or_default();
    if !principal_uid.is_empty() && from != principal_uid {
        return Identity::Transition;
    }
    let p = match o::annotation(incoming, MISMATCH_ANNOTATION) {
        Some("recreate") => MismatchPolicy::Recreate,
        Some("upsert") => MismatchPolicy::Upsert,
        _ => mismatch,
    };
    Identity::Mismatch(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(uid: &str, annotations: Value) -> Value {
        json!({"metadata": {"name": "a", "uid": uid, "annotations": annotations}})
    }

    #[test]
    fn identities_as_the_peer_sorts_them() {
        let (m, a) = (MismatchPolicy::Recreate, AdoptionPolicy::Always);
        let incoming = obj("u2", json!({}));
        assert_eq!(identity(&incoming, None, m, a), Identity::Apply);
        let same = obj("local", json!({o::SOURCE_UID: "u2"}));
        assert_eq!(identity(&incoming, Some(&same), m, a), Identity::Apply);
        let older = obj("local", json!({o::SOURCE_UID: "u1"}));
        assert_eq!(
            identity(&incoming, Some(&older), m, a),
            Identity::Mismatch(MismatchPolicy::Recreate)
        );
        let upsert_here = obj("u2", json!({MISMATCH_ANNOTATION: "upsert"}));
        assert_eq!(
            identity(&upsert_here, Some(&older), m, a),
            Identity::Mismatch(MismatchPolicy::Upsert),
            "the principal's annotation overrides the flag"
        );
        let foreign = obj("local", json!({}));
        assert_eq!(
            identity(&incoming, Some(&foreign), m, AdoptionPolicy::Never),
            Identity::Adopt(AdoptionPolicy::Never)
        );
        let keep_mine = obj("local", json!({ADOPTION_ANNOTATION: "never"}));
        assert_eq!(
            identity(&incoming, Some(&keep_mine), m, a),
            Identity::Adopt(AdoptionPolicy::Never),
            "the agent's annotation overrides the flag"
        );
        let bogus = obj("local", json!({ADOPTION_ANNOTATION: "sometimes"}));
        assert_eq!(
            identity(&incoming, Some(&bogus), m, a),
            Identity::Adopt(AdoptionPolicy::Always),
            "an unknown value falls back to the flag"
        );
    }

    #[test]
    fn another_principal_is_a_transition_not_a_recreation() {
        let (m, a) = (MismatchPolicy::Recreate, AdoptionPolicy::Always);
        let incoming = obj("u2", json!({}));
        let from_a = obj(
            "local",
            json!({o::SOURCE_UID: "u1", PRINCIPAL_UID_ANNOTATION: "principal-a"}),
        );
        assert_eq!(
            identity_from(&incoming, Some(&from_a), "principal-b", m, a),
            Identity::Transition,
            "a failover to principal b keeps the Application"
        );
        assert_eq!(
            identity_from(&incoming, Some(&from_a), "principal-a", m, a),
            Identity::Mismatch(MismatchPolicy::Recreate),
            "the same principal with a new UID: the Application was recreated there"
        );
        let unstamped = obj("local", json!({o::SOURCE_UID: "u1"}));
        assert_eq!(
            identity_from(&incoming, Some(&unstamped), "principal-b", m, a),
            Identity::Transition,
            "an Application from before principal identities transitions (the peer's rule)"
        );
        assert_eq!(
            identity_from(&incoming, Some(&unstamped), "", m, a),
            Identity::Mismatch(MismatchPolicy::Recreate),
            "a principal without identity: as before"
        );
    }
}
