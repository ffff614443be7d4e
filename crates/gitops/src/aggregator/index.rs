//! The aggregator's in-memory state ([`Index`]): works by ApplicationSet, digests of the stored
//! reports, the ApplicationSets that exist, and which of them are dirty. Pure: events in,
//! [`Decision`]s out.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{BuildHasher, DefaultHasher, Hasher, RandomState};

use argocd_pull_api::names;
use argocd_pull_api::ocm::work::ManifestWorkStatus;
use argocd_pull_api::report::MulticlusterApplicationSetReport;
use kube::api::ObjectMeta;

use crate::report::{self, AppSetKey, WorkEntry};

/// A work by namespace and name.
pub(super) type WorkKey = (String, String);

pub(super) fn key_of(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The in-memory state of the aggregator (pure: events in, decisions out).
#[derive(Default)]
pub struct Index {
    work_appset: HashMap<WorkKey, AppSetKey>,
    by_appset: HashMap<AppSetKey, HashMap<WorkKey, WorkEntry>>,
    /// A 128-bit digest of each stored report (label and statuses) instead of the report itself:
    /// enough to write only on change, at a fraction of the memory.
    reports: HashMap<AppSetKey, u128>,
    appsets: HashSet<AppSetKey>,
    pub(super) dirty: HashSet<AppSetKey>,
    digest_keys: (RandomState, RandomState),
}

/// Feeds serialised bytes to two independently keyed SipHashers (a 128-bit digest).
struct DigestWriter(DefaultHasher, DefaultHasher);

impl std::io::Write for DigestWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b);
        self.1.write(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What a flush decided for one ApplicationSet.
#[derive(Debug)]
pub enum Decision {
    Write(AppSetKey, Box<MulticlusterApplicationSetReport>),
    /// The ApplicationSet is gone: delete the report (if any) and these works (plus, when it
    /// has a report, the works the report names — read when deleting).
    Delete(AppSetKey, bool, Vec<WorkKey>),
}

impl Index {
    /// A work was added or changed.
    pub fn apply_work(&mut self, meta: &ObjectMeta, status: Option<&ManifestWorkStatus>) {
        let key = key_of(meta);
        let appset = if meta.deletion_timestamp.is_some() {
            None
        } else {
            report::work_appset(meta)
        };
        let Some(appset) = appset else {
            self.delete_work(meta);
            return;
        };
        let entry = report::work_entry(&appset, meta, status);
        if let Some(old) = self.work_appset.insert(key.clone(), appset.clone())
            && old != appset
        {
            self.remove_entry(&old, &key);
        }
        let works = self.by_appset.entry(appset.clone()).or_default();
        if works.get(&key) != Some(&entry) {
            works.insert(key, entry);
            self.dirty.insert(appset);
        }
    }

    /// A work was deleted.
    pub fn delete_work(&mut self, meta: &ObjectMeta) {
        let key = key_of(meta);
        if let Some(old) = self.work_appset.remove(&key) {
            self.remove_entry(&old, &key);
        }
    }

    fn remove_entry(&mut self, appset: &AppSetKey, key: &WorkKey) {
        if let Some(works) = self.by_appset.get_mut(appset) {
            works.remove(key);
            if works.is_empty() {
                self.by_appset.remove(appset);
            }
        }
        self.dirty.insert(appset.clone());
    }

    /// The work list was relisted: drop works no longer present.
    pub fn retain_works(&mut self, present: &HashSet<WorkKey>) {
        let gone: Vec<ObjectMeta> = self
            .work_appset
            .keys()
            .filter(|k| !present.contains(*k))
            .map(|(ns, name)| ObjectMeta {
                namespace: Some(ns.clone()),
                name: Some(name.clone()),
                ..Default::default()
            })
            .collect();
        for m in gone {
            self.delete_work(&m);
        }
    }

    pub fn set_report(&mut self, r: &MulticlusterApplicationSetReport) {
        let k = AppSetKey {
            namespace: r.metadata.namespace.clone().unwrap_or_default(),
            name: r.metadata.name.clone().unwrap_or_default(),
        };
        let d = self.digest(r);
        self.reports.insert(k, d);
    }

    /// The digest of what [`report::report_up_to_date`] compares: the `hosting-applicationset`
    /// label and the statuses.
    fn digest(&self, r: &MulticlusterApplicationSetReport) -> u128 {
        let label = r
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(names::HOSTING_APPLICATIONSET));
        let mut w = DigestWriter(
            self.digest_keys.0.build_hasher(),
            self.digest_keys.1.build_hasher(),
        );
        // Serialising plain data into a hasher cannot fail.
        let _ = serde_json::to_writer(&mut w, &(label, &r.statuses));
        (u128::from(w.0.finish()) << 64) | u128::from(w.1.finish())
    }

    pub fn remove_report(&mut self, ns: &str, name: &str) {
        let k = AppSetKey {
            namespace: ns.into(),
            name: name.into(),
        };
        if self.reports.remove(&k).is_some() {
            // Deleted by someone else while the ApplicationSet still has works: write it again.
            self.dirty.insert(k);
        }
    }

    pub fn set_appset(&mut self, k: AppSetKey, present: bool) {
        let changed = if present {
            self.appsets.insert(k.clone())
        } else {
            self.appsets.remove(&k)
        };
        if changed {
            self.dirty.insert(k);
        }
    }

    pub fn retain_appsets(&mut self, present: HashSet<AppSetKey>) {
        for k in self.appsets.symmetric_difference(&present) {
            self.dirty.insert(k.clone());
        }
        self.appsets = present;
    }

    /// Marks every ApplicationSet with works or a report dirty (after the initial lists).
    pub fn mark_all(&mut self) {
        let keys: Vec<AppSetKey> = self
            .by_appset
            .keys()
            .chain(self.reports.keys())
            .cloned()
            .collect();
        self.dirty.extend(keys);
    }

    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    pub fn works(&self) -> usize {
        self.work_appset.len()
    }

    pub fn appsets_with_works(&self) -> usize {
        self.by_appset.len()
    }

    /// The desired report of one ApplicationSet from the index.
    pub fn desired(&self, k: &AppSetKey) -> MulticlusterApplicationSetReport {
        let entries = self.by_appset.get(k).into_iter().flat_map(|m| m.values());
        report::report(k, report::aggregate(entries))
    }

    /// Decides what to write for the dirty ApplicationSets. `appsets_known`: the ApplicationSet
    /// list is complete (otherwise nothing is deleted).
    pub fn flush(&mut self, appsets_known: bool) -> Vec<Decision> {
        let mut dirty: Vec<AppSetKey> = self.dirty.drain().collect();
        dirty.sort();
        let mut out = Vec::new();
        for k in dirty {
            let has_works = self.by_appset.contains_key(&k);
            let report = self.reports.get(&k);
            if appsets_known && !self.appsets.contains(&k) {
                if !has_works && report.is_none() {
                    continue;
                }
                let works: BTreeSet<WorkKey> = self
                    .by_appset
                    .get(&k)
                    .into_iter()
                    .flat_map(|m| m.keys().cloned())
                    .collect();
                out.push(Decision::Delete(
                    k,
                    report.is_some(),
                    works.into_iter().collect(),
                ));
                continue;
            }
            if !has_works && report.is_none() {
                continue;
            }
            let desired = self.desired(&k);
            if report.is_some_and(|r| *r == self.digest(&desired)) {
                continue;
            }
            out.push(Decision::Write(k, Box::new(desired)));
        }
        out
    }
}
