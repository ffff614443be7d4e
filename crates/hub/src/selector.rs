//! Label and field selectors (the apimachinery syntax); the label selector is the workspace's
//! one (`argocd_pull_ops::labels`).

pub(crate) use argocd_pull_ops::labels::LabelSelector;

#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FieldSelector {
    /// (field, value, equal?)
    reqs: Vec<(bool, String, bool)>,
}

impl FieldSelector {
    /// Only `metadata.name` and `metadata.namespace` are supported (like for custom resources).
    pub fn parse(s: &str) -> Result<FieldSelector, String> {
        let s = s.trim();
        let mut reqs = Vec::new();
        if s.is_empty() {
            return Ok(FieldSelector { reqs });
        }
        for term in s.split(',') {
            let t = term.trim();
            let (f, v, eq) = if let Some((f, v)) = t.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = t.split_once("==") {
                (f, v, true)
            } else if let Some((f, v)) = t.split_once('=') {
                (f, v, true)
            } else {
                return Err(format!("invalid selector: '{s}'; can't understand '{t}'"));
            };
            let is_name = match f.trim() {
                "metadata.name" => true,
                "metadata.namespace" => false,
                other => return Err(format!("field label not supported: {other}")),
            };
            reqs.push((is_name, v.trim().to_string(), eq));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// A single `metadata.name=x` equality (fast path: a point lookup).
    pub fn exact_name(&self) -> Option<&str> {
        self.reqs
            .iter()
            .find(|(n, _, eq)| *n && *eq)
            .map(|(_, v, _)| v.as_str())
    }

    pub fn matches(&self, ns: &str, name: &str) -> bool {
        self.reqs.iter().all(|(is_name, v, eq)| {
            let actual = if *is_name { name } else { ns };
            (actual == v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields() {
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=x").unwrap();
        assert!(f.matches("y", "a"));
        assert!(!f.matches("x", "a"));
        assert_eq!(
            FieldSelector::parse("spec.foo=1").unwrap_err(),
            "field label not supported: spec.foo"
        );
    }
}
