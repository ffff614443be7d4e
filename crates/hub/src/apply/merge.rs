//! Changing an object's content: merging an applied configuration into it (map lists by key,
//! set lists by value, other lists replaced) and removing one field path.

use serde_json::Value;

use super::leaves::{ListType, child_schema, item_key, list_type};

pub(super) fn remove_path(v: &mut Value, p: &[String]) {
    let Some((first, rest)) = p.split_first() else {
        return;
    };
    if let Some(f) = first.strip_prefix("f:") {
        let Some(m) = v.as_object_mut() else { return };
        if rest.is_empty() {
            m.remove(f);
            return;
        }
        if let Some(c) = m.get_mut(f) {
            remove_path(c, rest);
            let empty = c.as_object().is_some_and(|o| o.is_empty())
                || c.as_array().is_some_and(|a| a.is_empty());
            if empty {
                m.remove(f);
            }
        }
    } else if let Some(k) = first.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return;
        };
        let Some(arr) = v.as_array_mut() else { return };
        let idx = arr
            .iter()
            .position(|it| keys.iter().all(|(kk, kv)| it.get(kk) == Some(kv)));
        if let Some(i) = idx {
            if rest.first().map(|s| s.as_str()) == Some(".") {
                arr.remove(i);
            } else {
                remove_path(&mut arr[i], rest);
            }
        }
    } else if let Some(val) = first.strip_prefix("v:") {
        let Ok(target) = serde_json::from_str::<Value>(val) else {
            return;
        };
        if let Some(arr) = v.as_array_mut() {
            arr.retain(|x| *x != target);
        }
    }
}

pub(super) fn merge(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    match (live.as_object_mut(), cfg.as_object()) {
        (Some(lm), Some(cm)) => {
            for (k, cv) in cm {
                let cs = child_schema(schema, k);
                match lm.get_mut(k) {
                    Some(lv) if lv.is_object() && cv.is_object() => merge(lv, cv, cs),
                    Some(lv) if lv.is_array() && cv.is_array() => merge_list(lv, cv, cs),
                    _ => {
                        lm.insert(k.clone(), cv.clone());
                    }
                }
            }
        }
        _ => *live = cfg.clone(),
    }
}

fn merge_list(live: &mut Value, cfg: &Value, schema: Option<&Value>) {
    let items_schema = schema.and_then(|s| s.get("items"));
    match list_type(schema) {
        ListType::Map(keys) => {
            let (Some(la), Some(ca)) = (live.as_array_mut(), cfg.as_array()) else {
                return;
            };
            for it in ca {
                let k = item_key(it, &keys);
                let pos = la
                    .iter()
                    .position(|l| k.is_some() && item_key(l, &keys) == k);
                match pos {
                    Some(i) => merge(&mut la[i], it, items_schema),
                    None => la.push(it.clone()),
                }
            }
        }
        ListType::Set => {
            let (Some(la), Some(ca)) = (live.as_array_mut(), cfg.as_array()) else {
                return;
            };
            for it in ca {
                if !la.contains(it) {
                    la.push(it.clone());
                }
            }
        }
        ListType::Atomic => *live = cfg.clone(),
    }
}
