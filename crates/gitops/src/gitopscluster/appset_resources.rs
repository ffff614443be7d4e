//! What the ApplicationSet controller needs in the Argo CD namespace: the
//! `clusterDecisionResource` generator ConfigMaps and the Role (and RoleBinding) letting it read
//! placement decisions — built here, and created when missing (never updated).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};

use super::context::{CONTROLLER, Ctx, is_status};
use crate::FIELD_MANAGER;
use crate::status::Check;

/// ConfigMaps used by the ApplicationSet `clusterDecisionResource` generator.
pub const CONFIGMAP_PLACEMENT: &str = "acm-placement";
pub const CONFIGMAP_PLACEMENTRULE: &str = "acm-placementrule";
/// ApplicationSet controller service accounts bound to the placement reader Role: the upstream
/// Argo CD name and the OpenShift GitOps one.
pub const APPSET_SERVICE_ACCOUNTS: &[&str] = &[
    "argocd-applicationset-controller",
    "openshift-gitops-applicationset-controller",
];

/// The Role (and RoleBinding) letting the ApplicationSet controller read placement decisions.
pub fn placement_role_name(argo_namespace: &str) -> String {
    format!("{argo_namespace}-applicationset-controller-placement")
}

/// The two generator ConfigMaps (`acm-placement`, legacy `acm-placementrule`).
pub fn generator_configmaps(argo_namespace: &str) -> Vec<ConfigMap> {
    [
        (
            CONFIGMAP_PLACEMENT,
            "cluster.open-cluster-management.io/v1beta1",
            "placementdecisions",
        ),
        (
            CONFIGMAP_PLACEMENTRULE,
            "apps.open-cluster-management.io/v1",
            "placementrules",
        ),
    ]
    .into_iter()
    .map(|(name, api_version, kind)| ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(argo_namespace.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            ("apiVersion".to_string(), api_version.to_string()),
            ("kind".to_string(), kind.to_string()),
            ("statusListKey".to_string(), "decisions".to_string()),
            ("matchKey".to_string(), "clusterName".to_string()),
        ])),
        ..Default::default()
    })
    .collect()
}

fn placement_role(argo_namespace: &str) -> (Role, RoleBinding) {
    let name = placement_role_name(argo_namespace);
    let meta = ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(argo_namespace.into()),
        ..Default::default()
    };
    let verbs = vec!["get".to_string(), "list".to_string(), "watch".to_string()];
    let role = Role {
        metadata: meta.clone(),
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["cluster.open-cluster-management.io".into()]),
                resources: Some(vec!["placementdecisions".into()]),
                verbs: verbs.clone(),
                ..Default::default()
            },
            PolicyRule {
                api_groups: Some(vec!["apps.open-cluster-management.io".into()]),
                resources: Some(vec!["placementrules".into()]),
                verbs,
                ..Default::default()
            },
        ]),
    };
    let binding = RoleBinding {
        metadata: meta,
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name,
        },
        subjects: Some(
            APPSET_SERVICE_ACCOUNTS
                .iter()
                .map(|sa| Subject {
                    kind: "ServiceAccount".into(),
                    name: (*sa).into(),
                    namespace: Some(argo_namespace.into()),
                    ..Default::default()
                })
                .collect(),
        ),
    };
    (role, binding)
}

/// Creates (never updates) the generator ConfigMaps and the placement reader Role/RoleBinding.
pub(super) async fn ensure_appset_resources(ctx: &Ctx, argo_ns: &str) -> Check {
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let mut failures = Vec::new();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), argo_ns);
    for cm in generator_configmaps(argo_ns) {
        let name = cm.name_any();
        if let Err(e) = create_if_missing(&cms, &name, &cm, &pp).await {
            failures.push(format!("ConfigMap {name}: {e}"));
        } else {
            ctx.metrics.write(CONTROLLER, "ConfigMap", "ensure");
        }
    }
    let (role, binding) = placement_role(argo_ns);
    let roles: Api<Role> = Api::namespaced(ctx.client.clone(), argo_ns);
    if let Err(e) = create_if_missing(&roles, &role.name_any(), &role, &pp).await {
        failures.push(format!("Role {}: {e}", role.name_any()));
    }
    let bindings: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), argo_ns);
    if let Err(e) = create_if_missing(&bindings, &binding.name_any(), &binding, &pp).await {
        failures.push(format!("RoleBinding {}: {e}", binding.name_any()));
    }
    if failures.is_empty() {
        Check::ok(
            "Success",
            format!(
                "ConfigMaps {CONFIGMAP_PLACEMENT}, {CONFIGMAP_PLACEMENTRULE} and the placement reader Role are present"
            ),
        )
    } else {
        Check::failed("ResourceCreationFailed", failures.join("; "))
    }
}

async fn create_if_missing<K>(
    api: &Api<K>,
    name: &str,
    obj: &K,
    pp: &PostParams,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    if api.get_metadata_opt(name).await?.is_some() {
        return Ok(());
    }
    match api.create(pp, obj).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 409) => Ok(()),
        Err(e) => Err(e),
    }
}
