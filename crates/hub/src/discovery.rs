//! Discovery: API groups, resource lists and the OpenAPI v3 documents of what is served.

use std::sync::Arc;

use http::Response;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::registry::ResourceType;
use crate::response::*;
use crate::store::State;

pub(crate) fn group_list(st: &State) -> Value {
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut order: Vec<String> = Vec::new();
    let mut types: Vec<&Arc<ResourceType>> = st.stores.values().map(|s| &s.rt).collect();
    types.sort_by_key(|t| (!t.builtin, t.group.clone()));
    for rt in types {
        if rt.group.is_empty() {
            continue;
        }
        if !groups.contains_key(&rt.group) {
            order.push(rt.group.clone());
        }
        let e = groups.entry(rt.group.clone()).or_default();
        for v in sorted_versions(rt) {
            if !e.contains(&v) {
                e.push(v);
            }
        }
    }
    let arr: Vec<Value> = order
        .iter()
        .map(|g| {
            let mut vs = groups[g].clone();
            vs.sort_by_key(|b| std::cmp::Reverse(version_priority(b)));
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": arr})
}

/// `/openapi/v3`: the group-version index kubectl reads to learn that the server validates
/// fields itself (`fieldValidation`), so it skips client-side schema validation.
pub(crate) fn openapi_root(st: &State) -> Value {
    let mut paths = serde_json::Map::new();
    for s in st.stores.values() {
        for v in &s.rt.versions {
            let gv = if s.rt.group.is_empty() {
                format!("api/{}", v.name)
            } else {
                format!("apis/{}/{}", s.rt.group, v.name)
            };
            paths.insert(
                gv.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", st.rv)}),
            );
        }
    }
    json!({"paths": paths})
}

/// A minimal OpenAPI v3 document of one group-version: the PATCH operations with their query
/// parameters and GVK extension (no schemas).
pub(crate) fn openapi_gv(st: &State, group: &str, version: &str) -> Response<HubBody> {
    let mut paths = serde_json::Map::new();
    let params = json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}
    ]);
    let mut found = false;
    for s in st.stores.values() {
        let rt = &s.rt;
        if rt.group != group || rt.version(version).is_none() {
            continue;
        }
        found = true;
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let p = if rt.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{prefix}/{}/{{name}}", rt.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": rt.kind});
        paths.insert(
            p,
            json!({"patch": {"operationId": format!("patch{}", rt.kind), "parameters": params,
                "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk,
                "responses": {"200": {"description": "OK"}}}}),
        );
    }
    if !found {
        return error_response(&ApiError::no_resource());
    }
    json_response(
        200,
        &json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.37.0"},
            "paths": paths, "components": {"schemas": {}}}),
    )
}

pub(crate) fn resource_list(st: &State, group: &str, version: &str) -> Response<HubBody> {
    let mut resources = Vec::new();
    let mut types: Vec<&Arc<ResourceType>> = st
        .stores
        .values()
        .map(|s| &s.rt)
        .filter(|rt| rt.group == group && rt.version(version).is_some())
        .collect();
    if types.is_empty() {
        return error_response(&ApiError::no_resource());
    }
    types.sort_by_key(|t| t.plural.clone());
    for rt in types {
        resources.extend(rt.discovery(version));
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    json_response(
        200,
        &json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}
