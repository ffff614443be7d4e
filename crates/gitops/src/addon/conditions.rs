//! The peer's 14 condition types and 5 reasons, and `meta.SetStatusCondition` semantics
//! (lastTransitionTime kept unless the status changes; observedGeneration set).

use argocd_pull_api::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const COND_RBAC_READY: &str = "RBACReady";
pub const COND_SERVER_DISCOVERED: &str = "ServerDiscovered";
pub const COND_JWT_SECRET_READY: &str = "JWTSecretReady";
pub const COND_CA_CERTIFICATE_READY: &str = "CACertificateReady";
pub const COND_PRINCIPAL_CERTIFICATE_READY: &str = "PrincipalCertificateReady";
pub const COND_RESOURCE_PROXY_CERTIFICATE_READY: &str = "ResourceProxyCertificateReady";
pub const COND_PLACEMENT_EVALUATED: &str = "PlacementEvaluated";
pub const COND_CLUSTERS_IMPORTED: &str = "ClustersImported";
pub const COND_MANIFEST_WORK_CREATED: &str = "ManifestWorkCreated";
pub const COND_ARGOCD_CR_DELIVERED: &str = "ArgoCDCRDelivered";
pub const COND_ADDON_CONFIGURED: &str = "AddonConfigured";
pub const COND_PLACEMENT_TOLERATION_CONFIGURED: &str = "PlacementTolerationConfigured";
pub const COND_ADDON_TEMPLATE_READY: &str = "AddOnTemplateReady";
pub const COND_REMOVED_CLUSTERS_CLEANED_UP: &str = "RemovedClustersCleanedUp";

/// The 13 types initialised as Unknown/InProgress (all but `RemovedClustersCleanedUp`).
pub const INITIAL: [&str; 13] = [
    COND_RBAC_READY,
    COND_SERVER_DISCOVERED,
    COND_JWT_SECRET_READY,
    COND_CA_CERTIFICATE_READY,
    COND_PRINCIPAL_CERTIFICATE_READY,
    COND_RESOURCE_PROXY_CERTIFICATE_READY,
    COND_PLACEMENT_EVALUATED,
    COND_CLUSTERS_IMPORTED,
    COND_MANIFEST_WORK_CREATED,
    COND_ARGOCD_CR_DELIVERED,
    COND_ADDON_CONFIGURED,
    COND_PLACEMENT_TOLERATION_CONFIGURED,
    COND_ADDON_TEMPLATE_READY,
];

pub const REASON_SUCCESS: &str = "Success";
pub const REASON_FAILED: &str = "Failed";
pub const REASON_IN_PROGRESS: &str = "InProgress";
pub const REASON_SERVER_NOT_DISCOVERED: &str = "ServerNotDiscovered";
pub const REASON_NO_CLUSTERS: &str = "NoClusters";

/// The conditions being computed in one pass, starting from the object's current ones.
#[derive(Clone, Debug)]
pub struct Conditions {
    pub list: Vec<Condition>,
    generation: Option<i64>,
    now: Time,
}

impl Conditions {
    /// Starts from `current`, adding every missing initial type as Unknown/InProgress.
    pub fn new(current: &[Condition], generation: Option<i64>, now: Time) -> Self {
        let mut c = Conditions {
            list: current.to_vec(),
            generation,
            now,
        };
        for t in INITIAL {
            if !c.list.iter().any(|x| x.type_ == t) {
                c.set(
                    t,
                    "Unknown",
                    REASON_IN_PROGRESS,
                    "Reconciliation in progress",
                );
            }
        }
        c
    }

    pub fn set(&mut self, type_: &str, status: &str, reason: &str, message: impl Into<String>) {
        let message = message.into();
        match self.list.iter_mut().find(|x| x.type_ == type_) {
            Some(x) => {
                if x.status != status {
                    x.last_transition_time = self.now.clone();
                }
                x.status = status.into();
                x.reason = reason.into();
                x.message = message;
                x.observed_generation = self.generation;
            }
            None => self.list.push(Condition {
                type_: type_.into(),
                status: status.into(),
                reason: reason.into(),
                message,
                observed_generation: self.generation,
                last_transition_time: self.now.clone(),
            }),
        }
    }

    pub fn ok(&mut self, type_: &str, message: impl Into<String>) {
        self.set(type_, "True", REASON_SUCCESS, message);
    }

    pub fn failed(&mut self, type_: &str, message: impl Into<String>) {
        self.set(type_, "False", REASON_FAILED, message);
    }

    pub fn get(&self, type_: &str) -> Option<&Condition> {
        self.list.iter().find(|x| x.type_ == type_)
    }
}

/// The peer's cluster list format: ≤ 3 names `[a b c]`; more `[a b c]... (N total)`.
pub fn cluster_list(names: &[String]) -> String {
    let head = names.iter().take(3).cloned().collect::<Vec<_>>().join(" ");
    if names.len() > 3 {
        format!("[{head}]... ({} total)", names.len())
    } else {
        format!("[{head}]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn thirteen_initial_types_unknown_in_progress() {
        let c = Conditions::new(&[], Some(1), t("2026-01-01T00:00:00Z"));
        assert_eq!(c.list.len(), 13);
        assert!(
            c.list
                .iter()
                .all(|x| x.status == "Unknown" && x.reason == "InProgress")
        );
        assert!(c.get(COND_REMOVED_CLUSTERS_CLEANED_UP).is_none());
    }

    #[test]
    fn transition_time_moves_only_when_the_status_changes() {
        let mut c = Conditions::new(&[], Some(1), t("2026-01-01T00:00:00Z"));
        c.ok(COND_RBAC_READY, "RBAC resources created successfully");
        let first = c.get(COND_RBAC_READY).unwrap().clone();
        let mut again = Conditions::new(&c.list, Some(1), t("2026-01-02T00:00:00Z"));
        again.ok(COND_RBAC_READY, "RBAC resources created successfully");
        assert_eq!(again.get(COND_RBAC_READY).unwrap(), &first);
        assert_eq!(
            again.list, c.list,
            "an unchanged pass yields equal conditions (no write)"
        );
    }

    #[test]
    fn cluster_list_format() {
        let n = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(cluster_list(&n(&["a", "b"])), "[a b]");
        assert_eq!(
            cluster_list(&n(&["a", "b", "c", "d"])),
            "[a b c]... (4 total)"
        );
    }
}
