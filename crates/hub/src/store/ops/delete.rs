//! DELETE and DELETECOLLECTION: finalizers, deletion timestamps, garbage collection of
//! dependents (foreground, background, orphan).

use super::*;

/// Removes an object now and queues the side effects.
pub(super) fn remove(
    st: &mut State,
    key: &str,
    ns: &str,
    name: &str,
    val: Value,
    orphan: bool,
    work: &mut Vec<Work>,
) -> Bytes {
    let json = st.commit_remove(key, ns, name, val.clone());
    if key == CRD_KEY
        && let Ok(t) = registry::crd_to_type(&val)
    {
        let tkey = t.key();
        let items: Vec<(String, String, Arc<Obj>)> = st
            .store(&tkey)
            .map(|s| {
                s.objects
                    .iter()
                    .map(|((n, m), o)| (n.clone(), m.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default();
        for (n, m, o) in items {
            let v = o.value();
            st.commit_remove(&tkey, &n, &m, v);
            if !o.uid.is_empty() {
                work.push(Work::Gc(o.uid.to_string()));
            }
        }
        st.unregister(&tkey);
    }
    if let Some(uid) = meta_str(&val, "uid") {
        if orphan {
            orphan_dependents(st, uid);
        } else {
            work.push(Work::Gc(uid.to_string()));
        }
    }
    if !ns.is_empty() && st.namespace_state(ns) == Some(true) {
        work.push(Work::CheckNs(ns.to_string()));
    }
    json
}

pub(super) fn owner_exists(st: &State, r: &Value, dep_ns: &str) -> bool {
    let (Some(av), Some(kind), Some(name), Some(uid)) = (
        r.get("apiVersion").and_then(|x| x.as_str()),
        r.get("kind").and_then(|x| x.as_str()),
        r.get("name").and_then(|x| x.as_str()),
        r.get("uid").and_then(|x| x.as_str()),
    ) else {
        return false;
    };
    let Some(rt) = st.lookup_kind(av, kind) else {
        return false;
    };
    let ns = if rt.namespaced { dep_ns } else { "" };
    st.get(&rt.key(), ns, name).is_some_and(|o| &*o.uid == uid)
}

pub(super) fn orphan_dependents(st: &mut State, uid: &str) {
    let Some(deps) = st.dependents.remove(uid) else {
        return;
    };
    for (key, ns, name) in deps {
        let Some(o) = st.get(&key, &ns, &name) else {
            continue;
        };
        let mut v = o.value();
        let Some(refs) = v
            .pointer_mut("/metadata/ownerReferences")
            .and_then(|r| r.as_array_mut())
        else {
            continue;
        };
        let before = refs.len();
        refs.retain(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid));
        if refs.len() != before {
            if refs.is_empty() {
                meta_mut(&mut v).remove("ownerReferences");
            }
            st.commit_put(&key, &ns, &name, v);
        }
    }
}

/// Runs queued garbage collection and namespace finalization to completion.
pub(crate) fn drain(st: &mut State, mut work: Vec<Work>) {
    let mut guard = 0usize;
    while let Some(w) = work.pop() {
        guard += 1;
        if guard > 10_000_000 {
            tracing::error!("hub: cascade did not converge");
            break;
        }
        match w {
            Work::Gc(uid) => {
                let Some(deps) = st.dependents.remove(uid.as_str()) else {
                    continue;
                };
                for (key, ns, name) in deps {
                    let Some(o) = st.get(&key, &ns, &name) else {
                        continue;
                    };
                    let mut v = o.value();
                    let refs: Vec<Value> = v
                        .pointer("/metadata/ownerReferences")
                        .and_then(|r| r.as_array())
                        .cloned()
                        .unwrap_or_default();
                    if !refs
                        .iter()
                        .any(|r| r.get("uid").and_then(|u| u.as_str()) == Some(uid.as_str()))
                    {
                        continue;
                    }
                    let others: Vec<Value> = refs
                        .into_iter()
                        .filter(|r| r.get("uid").and_then(|u| u.as_str()) != Some(uid.as_str()))
                        .collect();
                    if others.iter().any(|r| owner_exists(st, r, &ns)) {
                        meta_mut(&mut v).insert("ownerReferences".into(), Value::Array(others));
                        st.commit_put(&key, &ns, &name, v);
                    } else {
                        let _ =
                            delete_inner(st, &key, &ns, &name, &DeleteOpts::default(), &mut work);
                    }
                }
            }
            Work::CheckNs(ns) => {
                let empty = st
                    .stores
                    .values()
                    .filter(|s| s.rt.namespaced)
                    .all(|s| s.iter_ns(Some(&ns)).next().is_none());
                if !empty {
                    continue;
                }
                if let Some(o) = st.get(NS_KEY, "", &ns) {
                    let v = o.value();
                    if v.pointer("/metadata/deletionTimestamp").is_some()
                        && finalizers(&v).is_empty()
                    {
                        remove(st, NS_KEY, "", &ns, v, false, &mut work);
                    }
                }
            }
        }
    }
}

pub(crate) fn delete(
    st: &mut State,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> ApiResult<Bytes> {
    let mut work = Vec::new();
    let r = delete_inner(st, &rt.key(), ns, name, opts, &mut work);
    drain(st, work);
    r
}

pub(super) fn delete_inner(
    st: &mut State,
    key: &str,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
    work: &mut Vec<Work>,
) -> ApiResult<Bytes> {
    let rt = st.type_by_key(key).ok_or_else(ApiError::no_resource)?;
    let old = st
        .get(key, ns, name)
        .ok_or_else(|| ApiError::not_found(&rt.plural, &rt.group, name))?;
    let mut v = old.value();
    if let Some(uid) = &opts.uid
        && **uid != *old.uid
    {
        return Err(ApiError::conflict(
            &rt.plural,
            &rt.group,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                old.uid
            ),
        ));
    }
    if let Some(rv) = &opts.rv
        && *rv != old.rv.to_string()
    {
        return Err(ApiError::conflict(
            &rt.plural,
            &rt.group,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                old.rv
            ),
        ));
    }
    let orphan = opts.propagation.as_deref() == Some("Orphan");
    let is_ns = key == NS_KEY;
    let has_finalizers = !finalizers(&v).is_empty();
    if is_ns || has_finalizers {
        if v.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(old.json.bytes());
        }
        let m = meta_mut(&mut v);
        m.insert(
            "deletionTimestamp".into(),
            Value::String(util::now_rfc3339()),
        );
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if is_ns {
            v["status"] = json!({"phase": "Terminating"});
        }
        if opts.dry_run {
            return Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()));
        }
        let obj = st.commit_put(key, ns, name, v);
        if is_ns {
            let keys: Vec<(String, String)> = st
                .stores
                .iter()
                .filter(|(_, s)| s.rt.namespaced)
                .flat_map(|(k, s)| {
                    s.iter_ns(Some(name))
                        .map(|((_, n), _)| (k.clone(), n.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (k, n) in keys {
                let _ = delete_inner(st, &k, name, &n, &DeleteOpts::default(), work);
            }
            work.push(Work::CheckNs(name.to_string()));
        }
        return Ok(obj.json.bytes());
    }
    if opts.dry_run {
        return Ok(old.json.bytes());
    }
    Ok(remove(st, key, ns, name, v, orphan, work))
}

/// Deletes every object matching a filter; returns the deleted objects' final JSON.
pub(crate) fn delete_collection(
    st: &mut State,
    rt: &ResourceType,
    targets: Vec<(String, String)>,
    opts: &DeleteOpts,
) -> Vec<Bytes> {
    let mut work = Vec::new();
    let mut out = Vec::new();
    for (ns, name) in targets {
        if let Ok(j) = delete_inner(st, &rt.key(), &ns, &name, opts, &mut work) {
            out.push(j);
        }
    }
    drain(st, work);
    out
}
