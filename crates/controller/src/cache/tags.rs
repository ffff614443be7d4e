//! Labels and annotations as the caches keep them: [`Pairs`], one string and its boundaries
//! instead of a `BTreeMap` (whose leaf node takes ≈ 540 bytes for a single entry).

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use argocd_pull_api::ObjectMeta;

/// A map of text to text (an object's labels or its annotations), sorted by key: every key and
/// value one after the other in one string, and where each ends. Two allocations whatever the
/// number of entries; none when empty. Compares, hashes and iterates as the `BTreeMap` it was
/// made from.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Pairs {
    /// `k0 v0 k1 v1 …` without separators.
    text: Box<str>,
    /// The end of each key and value in `text` (`2 × len` offsets).
    ends: Box<[u32]>,
}

impl Pairs {
    /// The entries of `map`, in its (key) order.
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        let mut text = String::with_capacity(map.iter().map(|(k, v)| k.len() + v.len()).sum());
        let mut ends = Vec::with_capacity(2 * map.len());
        for (k, v) in map {
            for s in [k, v] {
                text.push_str(s);
                // the API server takes objects of a few MiB at most
                ends.push(u32::try_from(text.len()).expect("labels or annotations under 4 GiB"));
            }
        }
        Pairs {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
        }
    }

    /// The map again.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// The entries, by key.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        (0..self.len()).map(|i| (self.string(2 * i), self.string(2 * i + 1)))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        // a handful of entries: a binary search over the keys
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.string(2 * mid).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(self.string(2 * mid + 1)),
            }
        }
        None
    }

    /// The `i`th string (keys even, values odd).
    fn string(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.text[start..self.ends[i] as usize]
    }
}

impl Hash for Pairs {
    /// As `BTreeMap<String, String>` hashes: the length, then each key and value.
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_usize(self.len());
        for (k, v) in self.iter() {
            k.hash(h);
            v.hash(h);
        }
    }
}

impl fmt::Debug for Pairs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// An object's labels and annotations, kept apart from its `ObjectMeta` (whose maps are then
/// `None`); absent and empty maps stay apart, as in `ObjectMeta`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Tags {
    pub labels: Option<Pairs>,
    pub annotations: Option<Pairs>,
}

impl Tags {
    /// Moves the labels and annotations out of `meta`.
    pub fn take(meta: &mut ObjectMeta) -> Self {
        Tags {
            labels: meta.labels.take().as_ref().map(Pairs::from_map),
            annotations: meta.annotations.take().as_ref().map(Pairs::from_map),
        }
    }

    /// Puts them (back) into `meta`, as maps.
    pub fn restore(&self, meta: &mut ObjectMeta) {
        meta.labels = self.labels.as_ref().map(Pairs::to_map);
        meta.annotations = self.annotations.as_ref().map(Pairs::to_map);
    }

    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels.as_ref()?.get(key)
    }

    /// The value of annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.as_ref()?.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash<T: Hash>(x: &T) -> u64 {
        let mut h = DefaultHasher::new();
        x.hash(&mut h);
        h.finish()
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn pairs_read_compare_and_hash_as_the_map() {
        let maps = [
            map(&[]),
            map(&[("a", "")]),
            map(&[("", "a")]),
            map(&[("ab", "c")]),
            map(&[("a", "bc")]),
            map(&[("z", "1"), ("a", "2"), ("m", "3"), ("é/ü", "∞")]),
            map(&[("z", "1"), ("a", "2"), ("m", "4"), ("é/ü", "∞")]),
        ];
        for m in &maps {
            let p = Pairs::from_map(m);
            assert_eq!(p.to_map(), *m);
            assert_eq!(p.len(), m.len());
            assert!(p.iter().eq(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))));
            for (k, v) in m {
                assert_eq!(p.get(k), Some(v.as_str()), "{k}");
            }
            for k in ["", "0", "b", "zz", "a\0"] {
                assert_eq!(p.get(k), m.get(k).map(String::as_str), "{k:?}");
            }
            // the same hash as the map (and so as the fingerprints' before)
            assert_eq!(hash(&p), hash(m));
            assert_eq!(hash(&Some(p.clone())), hash(&Some(m.clone())));
            assert_eq!(format!("{p:?}"), format!("{m:?}"));
            for n in &maps {
                assert_eq!(p == Pairs::from_map(n), m == n);
            }
        }
        assert_eq!(
            hash(&None::<Pairs>),
            hash(&None::<BTreeMap<String, String>>)
        );
    }

    #[test]
    fn tags_leave_the_metadata_and_come_back_as_they_were() {
        for (labels, annotations) in [
            (None, None),
            (Some(map(&[])), None),
            (None, Some(map(&[]))),
            (
                Some(map(&[("l", "1")])),
                Some(map(&[("a", "x"), ("b", "y")])),
            ),
        ] {
            let meta = ObjectMeta {
                name: Some("n".into()),
                labels: labels.clone(),
                annotations: annotations.clone(),
                ..Default::default()
            };
            let mut bare = meta.clone();
            let tags = Tags::take(&mut bare);
            assert_eq!(
                (bare.labels.as_ref(), bare.annotations.as_ref()),
                (None, None)
            );
            assert_eq!(bare.name, meta.name);
            assert_eq!(tags.labels.is_some(), labels.is_some());
            assert_eq!(tags.annotations.is_some(), annotations.is_some());
            tags.restore(&mut bare);
            assert_eq!(bare, meta);
        }
        let mut meta = ObjectMeta {
            labels: Some(map(&[("l", "1")])),
            annotations: Some(map(&[("a", "x")])),
            ..Default::default()
        };
        let tags = Tags::take(&mut meta);
        assert_eq!((tags.label("l"), tags.label("a")), (Some("1"), None));
        assert_eq!(
            (tags.annotation("a"), tags.annotation("l")),
            (Some("x"), None)
        );
    }
}
