//! The conflicts of a server-side apply (manager, apiVersion, field path) and their message.

use std::collections::BTreeMap;

use serde_json::Value;

use super::leaves::Path;

pub(super) fn path_string(p: &Path) -> String {
    let mut s = String::new();
    for seg in p {
        if let Some(f) = seg.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = seg.strip_prefix("k:") {
            let inner = serde_json::from_str::<Value>(k)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            s.push_str(&format!("[{inner}]"));
        } else if let Some(v) = seg.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

pub(crate) struct Conflicts(pub Vec<(String, String, String)>); // manager, apiVersion, path

impl Conflicts {
    pub fn message(&self) -> String {
        let n = self.0.len();
        let mut by_mgr: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for (m, a, p) in &self.0 {
            by_mgr
                .entry((m.clone(), a.clone()))
                .or_default()
                .push(p.clone());
        }
        if n == 1 {
            let (m, a, p) = &self.0[0];
            return format!("Apply failed with 1 conflict: conflict with \"{m}\" using {a}: {p}");
        }
        let mut s = format!("Apply failed with {n} conflicts: ");
        let parts: Vec<String> = by_mgr
            .iter()
            .map(|((m, a), ps)| {
                if ps.len() == 1 {
                    format!("conflict with \"{m}\" using {a}: {}", ps[0])
                } else {
                    format!(
                        "conflicts with \"{m}\" using {a}:\n{}",
                        ps.iter()
                            .map(|p| format!("- {p}"))
                            .collect::<Vec<_>>()
                            .join("\n")
                    )
                }
            })
            .collect();
        s.push_str(&parts.join("\n"));
        s
    }
}
