//! Kubernetes label selectors (apimachinery's `labels.Parse` syntax: `a=b`, `a==b`, `a!=b`,
//! `a in (x,y)`, `a notin (x)`, `a`, `!a`): the one parser of the workspace, used by the embedded
//! API server's `labelSelector` and by the agent's `--label-selector`.

#[derive(Clone, Debug, PartialEq)]
pub enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(pub Vec<Req>);

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

fn parse_set(rest: &str, orig: &str) -> Result<Vec<String>, String> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            format!("unable to parse requirement: {orig:?}: expected a parenthesised set")
        })?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    for v in &vals {
        if !valid_value(v) {
            return Err(format!(
                "unable to parse requirement: invalid label value: {v:?}"
            ));
        }
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(LabelSelector::default());
        }
        let mut reqs = Vec::new();
        for term in split_top(s) {
            let t = term.trim();
            if t.is_empty() {
                return Err(format!("unable to parse requirement: empty term in {s:?}"));
            }
            let req = if let Some(k) = t.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = t.split_once("!=") {
                Req::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = t.split_once("==") {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = t.split_once('=') {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some(idx) = t.find(" notin") {
                Req::NotIn(t[..idx].trim().to_string(), parse_set(&t[idx + 6..], t)?)
            } else if let Some(idx) = t.find(" in") {
                Req::In(t[..idx].trim().to_string(), parse_set(&t[idx + 3..], t)?)
            } else if t.contains(['(', ')', '<', '>', ' ']) {
                return Err(format!("unable to parse requirement: {t:?}"));
            } else {
                Req::Exists(t.to_string())
            };
            let (k, vals): (&str, Vec<&str>) = match &req {
                Req::Eq(k, v) | Req::NotEq(k, v) => (k, vec![v.as_str()]),
                Req::In(k, v) | Req::NotIn(k, v) => (k, v.iter().map(|s| s.as_str()).collect()),
                Req::Exists(k) | Req::NotExists(k) => (k, vec![]),
            };
            if !valid_key(k) {
                return Err(format!(
                    "unable to parse requirement: invalid label key {k:?}: name part must consist of alphanumeric characters, '-', '_' or '.'"
                ));
            }
            for v in vals {
                if !valid_value(v) {
                    return Err(format!(
                        "unable to parse requirement: invalid label value: {v:?}"
                    ));
                }
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the labels (key, value pairs) are selected.
    pub fn matches<K: AsRef<str>, V: AsRef<str>>(&self, labels: &[(K, V)]) -> bool {
        self.matches_with(|k| {
            labels
                .iter()
                .find(|(lk, _)| lk.as_ref() == k)
                .map(|(_, v)| v.as_ref())
        })
    }

    /// Whether the labels `get` looks up are selected.
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(pairs: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn full_syntax() {
        let labels = l(&[("app", "web"), ("tier", "fe")]);
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web,db)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("missing notin (x)", true),
            ("app=web,tier in (fe)", true),
            ("app=web,tier=be", false),
            ("example.com/x", false),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&labels),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("a,,b").is_err());
        assert!(LabelSelector::parse("a=b c").is_err());
    }
}
