//! Applying one manifest of a work to its cluster per the work's update strategy, and the
//! manifest's conditions and status feedback that follow.

use std::sync::Arc;

use argocd_pull_api::Condition;
use argocd_pull_api::ocm::work::{
    ManifestCondition, ManifestResourceMeta, ManifestWork, StatusFeedbackResult, UpdateStrategy,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use tracing::debug;

use super::config::OBJECT_HASH_ANNOTATION;
use super::identity::{Resolved, find_config};
use super::state::{Agent, Spoke};
use super::stats::AgentStats;
use crate::feedback;
use crate::jsonpath::JsonPath;
use crate::util::{condition, hash_json, is_subset};

fn manifest_failed(
    ordinal: i32,
    meta: ManifestResourceMeta,
    prev: &[Condition],
    generation: Option<i64>,
    message: String,
) -> ManifestCondition {
    let _ = ordinal;
    ManifestCondition {
        resource_meta: meta,
        status_feedback: None,
        conditions: vec![
            condition(
                prev,
                "Applied",
                false,
                "AppliedManifestFailed",
                message,
                generation,
            ),
            condition(
                prev,
                "Available",
                false,
                "ResourceNotAvailable",
                "Resource is not available",
                generation,
            ),
        ],
    }
}

pub(super) async fn apply_manifest(
    agent: &Arc<Agent>,
    spoke: &Arc<Spoke>,
    work: &ManifestWork,
    ordinal: i32,
    manifest: &Value,
    previous: &[ManifestCondition],
) -> (ManifestCondition, Option<Resolved>) {
    let generation = work.metadata.generation;
    let s = |p: &str| manifest.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind, name) = (s("/apiVersion"), s("/kind"), s("/metadata/name"));
    let mut meta = ManifestResourceMeta {
        ordinal,
        kind: kind.to_string(),
        name: name.to_string(),
        namespace: s("/metadata/namespace").to_string(),
        ..Default::default()
    };
    let prev_for = |m: &ManifestResourceMeta| -> Vec<Condition> {
        previous
            .iter()
            .find(|p| p.resource_meta.ordinal == m.ordinal)
            .map(|p| p.conditions.clone())
            .unwrap_or_default()
    };
    if api_version.is_empty() || kind.is_empty() || name.is_empty() {
        let msg = format!("manifest {ordinal} lacks apiVersion, kind or metadata.name");
        return (
            manifest_failed(ordinal, meta.clone(), &prev_for(&meta), generation, msg),
            None,
        );
    }
    let ti = match spoke
        .resolver
        .resolve(&spoke.client, api_version, kind)
        .await
    {
        Ok(t) => t,
        Err(e) => {
            return (
                manifest_failed(ordinal, meta.clone(), &prev_for(&meta), generation, e),
                None,
            );
        }
    };
    let namespace = if ti.namespaced {
        let ns = s("/metadata/namespace");
        if ns.is_empty() { "default" } else { ns }.to_string()
    } else {
        String::new()
    };
    let res = Resolved {
        ti,
        name: name.to_string(),
        namespace,
    };
    meta = res.meta(ordinal);
    let prev = prev_for(&meta);
    let config = find_config(&work.spec.manifest_configs, &res.id());
    let strategy = config
        .and_then(|c| c.update_strategy.clone())
        .unwrap_or(UpdateStrategy {
            type_: "Update".into(),
            server_side_apply: None,
        });
    let watch = agent.type_watch(spoke, &res.ti);
    let api = res.api(&spoke.client);
    let oref = {
        let r = ObjectRef::new_with(&res.name, res.ti.api_resource());
        if res.ti.namespaced {
            r.within(&res.namespace)
        } else {
            r
        }
    };
    let live: Option<Value> = match watch.store.get(&oref) {
        Some(o) => serde_json::to_value(&*o).ok(),
        None => match api.get_opt(&res.name).await {
            Ok(o) => o.and_then(|o| serde_json::to_value(o).ok()),
            Err(e) => {
                return (
                    manifest_failed(ordinal, meta, &prev, generation, e.to_string()),
                    Some(res),
                );
            }
        },
    };

    let applied = apply_with_strategy(agent, &api, &res, manifest, &strategy, live).await;
    let (live, apply_error) = match applied {
        Ok(l) => (l, None),
        Err(e) => (None, Some(e)),
    };
    let mut conditions = Vec::new();
    match &apply_error {
        None => conditions.push(condition(
            &prev,
            "Applied",
            true,
            "AppliedManifestComplete",
            "Apply manifest complete",
            generation,
        )),
        Some(e) => conditions.push(condition(
            &prev,
            "Applied",
            false,
            "AppliedManifestFailed",
            e.clone(),
            generation,
        )),
    }
    conditions.push(if live.is_some() {
        condition(
            &prev,
            "Available",
            true,
            "ResourceAvailable",
            "Resource is available",
            generation,
        )
    } else {
        condition(
            &prev,
            "Available",
            false,
            "ResourceNotAvailable",
            "Resource is not available",
            generation,
        )
    });
    let mut status_feedback = None;
    if let Some(cfg) = config.filter(|c| !c.feedback_rules.is_empty()) {
        let (values, errors) = match &live {
            Some(l) => feedback::evaluate(
                &cfg.feedback_rules,
                &res.ti.group,
                &res.ti.kind,
                l,
                agent.config.json_raw_limit,
            ),
            None => (Vec::new(), Vec::new()),
        };
        conditions.push(if errors.is_empty() {
            condition(
                &prev,
                "StatusFeedbackSynced",
                true,
                "StatusFeedbackSynced",
                "",
                generation,
            )
        } else {
            condition(
                &prev,
                "StatusFeedbackSynced",
                false,
                "StatusFeedbackSyncFailed",
                errors.join("; "),
                generation,
            )
        });
        status_feedback = Some(StatusFeedbackResult { values });
    }
    (
        ManifestCondition {
            resource_meta: meta,
            status_feedback,
            conditions,
        },
        Some(res),
    )
}

/// Applies one manifest; returns the live object afterwards (None when absent, e.g. ReadOnly).
async fn apply_with_strategy(
    agent: &Agent,
    api: &Api<DynamicObject>,
    res: &Resolved,
    manifest: &Value,
    strategy: &UpdateStrategy,
    live: Option<Value>,
) -> Result<Option<Value>, String> {
    let mut required = manifest.clone();
    if let Some(o) = required.as_object_mut() {
        o.remove("status");
    }
    if res.ti.namespaced {
        required["metadata"]["namespace"] = json!(res.namespace);
    }
    let to_value = |o: DynamicObject| serde_json::to_value(o).map_err(|e| e.to_string());
    match strategy.type_.as_str() {
        "ReadOnly" => Ok(live),
        "CreateOnly" => match live {
            Some(l) => Ok(Some(l)),
            None => create(agent, api, &required).await.map(Some),
        },
        "Update" | "" => match live {
            None => create(agent, api, &required).await.map(Some),
            Some(l) if is_subset(&required, &l) => Ok(Some(l)),
            Some(l) => {
                let mut merged = l.clone();
                for (k, v) in required.as_object().into_iter().flatten() {
                    if k == "metadata" {
                        for (mk, mv) in v.as_object().into_iter().flatten() {
                            match (mk.as_str(), mv) {
                                ("labels" | "annotations", Value::Object(m)) => {
                                    for (lk, lv) in m {
                                        merged["metadata"][mk][lk] = lv.clone();
                                    }
                                }
                                _ => merged["metadata"][mk] = mv.clone(),
                            }
                        }
                    } else {
                        merged[k] = v.clone();
                    }
                }
                merged["metadata"]["resourceVersion"] = l["metadata"]["resourceVersion"].clone();
                let obj: DynamicObject =
                    serde_json::from_value(merged).map_err(|e| e.to_string())?;
                AgentStats::bump(&agent.stats.spoke_writes);
                let out = api
                    .replace(&res.name, &PostParams::default(), &obj)
                    .await
                    .map_err(|e| e.to_string())?;
                to_value(out).map(Some)
            }
        },
        "ServerSideApply" => {
            let ssa = strategy.server_side_apply.clone().unwrap_or_default();
            let mut patch = required.clone();
            let mut on_change = Vec::new();
            for f in &ssa.ignore_fields {
                for p in &f.json_paths {
                    let jp = JsonPath::parse(p).map_err(|e| e.to_string())?;
                    match f.condition.as_str() {
                        "OnSpokeChange" => on_change.push(jp),
                        _ => {
                            // OnSpokePresent: never written once the object exists.
                            if live.is_some() {
                                jp.remove(&mut patch);
                            }
                        }
                    }
                }
            }
            if !on_change.is_empty() {
                let hash = hash_json(&required);
                let spoke_hash = live
                    .as_ref()
                    .and_then(|l| l.pointer("/metadata/annotations"))
                    .and_then(|a| a.get(OBJECT_HASH_ANNOTATION))
                    .and_then(Value::as_str);
                if spoke_hash == Some(hash.as_str()) {
                    // The work did not change since the last apply: keep what the spoke did.
                    for jp in &on_change {
                        jp.remove(&mut patch);
                    }
                }
                patch["metadata"]["annotations"][OBJECT_HASH_ANNOTATION] = json!(hash);
            }
            if let Some(l) = &live
                && is_subset(&patch, l)
            {
                return Ok(live);
            }
            let manager = ssa
                .field_manager
                .clone()
                .unwrap_or_else(|| agent.config.field_manager.clone());
            let mut pp = PatchParams::apply(&manager);
            pp.force = ssa.force.unwrap_or(false);
            AgentStats::bump(&agent.stats.spoke_writes);
            let out = api
                .patch(&res.name, &pp, &Patch::Apply(&patch))
                .await
                .map_err(|e| e.to_string())?;
            to_value(out).map(Some)
        }
        other => Err(format!(
            "unknown update strategy type {other:?} (expected Update, CreateOnly, ServerSideApply or ReadOnly)"
        )),
    }
}

async fn create(
    agent: &Agent,
    api: &Api<DynamicObject>,
    required: &Value,
) -> Result<Value, String> {
    AgentStats::bump(&agent.stats.spoke_writes);
    let obj: DynamicObject = serde_json::from_value(required.clone()).map_err(|e| e.to_string())?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(o) => serde_json::to_value(o).map_err(|e| e.to_string()),
        Err(e) => {
            debug!(error = %e, "work agent create failed");
            Err(e.to_string())
        }
    }
}
