//! Planning the works: the manifests split into parts, each under the per-work byte budget.

use serde_json::json;

use crate::envelope::{envelope, target_namespaces};
use crate::error::CmpError;
use crate::feedback;
use crate::manifest::{self, Manifest};
use crate::options::{GenerateOptions, check_dns1123};

/// A planned set of works: the same parts go to every target namespace.
#[derive(Debug)]
pub struct Plan {
    pub manifests: Vec<Manifest>,
    /// Each part is a range into `manifests`.
    pub parts: Vec<std::ops::Range<usize>>,
}

/// Assigns manifests to parts: greedy in the canonical order, a new part whenever the next
/// manifest would push the work's compact JSON size over the budget.
pub fn plan(manifests: Vec<Manifest>, options: &GenerateOptions) -> Result<Plan, CmpError> {
    let budget = options.max_work_bytes;
    let longest_ns = target_namespaces(options)
        .into_iter()
        .max_by_key(String::len)
        .unwrap_or_default();
    // Upper bound of the envelope size: longest namespace, a part suffix, an empty config list.
    let widest_name = format!("{}-part-{}", options.work_name, manifests.len().max(1));
    check_dns1123("work name", &widest_name, false).map_err(|_| {
        CmpError::Config(format!(
            "work name {:?} is too long to add a part suffix (\"-part-N\"); set ARGOCD_ENV_WORK_NAME to a shorter name",
            options.work_name
        ))
    })?;
    let base = manifest::compact_len(&envelope(
        options,
        &widest_name,
        &longest_ns,
        vec![json!({})],
    ));
    if base >= budget {
        return Err(CmpError::Config(format!(
            "max work bytes {budget} is smaller than an empty work ({base} bytes)"
        )));
    }
    let mut parts = Vec::new();
    let mut start = 0;
    let mut used = base;
    for (i, m) in manifests.iter().enumerate() {
        // the manifest and, for kinds with status feedback, its `manifestConfigs` entry
        let config_len = feedback::manifest_config(m).map(|c| manifest::compact_len(&c));
        let cost = m.compact_len + 1 + config_len.map_or(0, |len| len + 1);
        if base + cost > budget {
            return Err(CmpError::ObjectTooLarge {
                origin: m.origin.clone(),
                kind: m.kind.clone(),
                name: m.name.clone(),
                size: m.compact_len,
                budget,
            });
        }
        if used + cost > budget && i > start {
            parts.push(start..i);
            start = i;
            used = base;
        }
        used += cost;
    }
    parts.push(start..manifests.len());
    Ok(Plan { manifests, parts })
}
