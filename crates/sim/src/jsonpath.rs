//! The small JSONPath subset OCM feedback rules and `ignoreFields` use.
//!
//! Supported: `.field`, `["quoted key"]` / `['quoted key']`, `[index]`, `[*]` and the filter
//! `[?(@.key=="value")]` (also `@.a.b`, single quotes, `!=`). An optional surrounding `{…}` (the
//! Kubernetes jsonpath template form) is accepted. Anything else is a parse error naming the path.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
pub enum Segment {
    Field(String),
    Index(usize),
    Wildcard,
    /// `[?(@.a.b == "v")]` (or `!=`): keeps array elements whose value at `path` compares.
    Filter {
        path: Vec<String>,
        value: Value,
        negate: bool,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct JsonPath {
    pub segments: Vec<Segment>,
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("invalid JSONPath {path:?}: {reason}")]
pub struct ParseError {
    pub path: String,
    pub reason: String,
}

impl JsonPath {
    pub fn parse(input: &str) -> Result<JsonPath, ParseError> {
        let err = |reason: &str| ParseError {
            path: input.to_string(),
            reason: reason.to_string(),
        };
        let mut s = input.trim();
        if let Some(inner) = s.strip_prefix('{') {
            s = inner
                .strip_suffix('}')
                .ok_or_else(|| err("unbalanced '{'"))?
                .trim();
        }
        let s = s.strip_prefix('$').unwrap_or(s);
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        let mut segments = Vec::new();
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    i += 1;
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        i += 1;
                    }
                    if start == i {
                        return Err(err("empty field name"));
                    }
                    segments.push(Segment::Field(chars[start..i].iter().collect()));
                }
                '[' => {
                    let close = find_bracket_end(&chars, i).ok_or_else(|| err("unclosed '['"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    segments.push(parse_bracket(inner.trim()).map_err(|r| err(&r))?);
                    i = close + 1;
                }
                c => return Err(err(&format!("unexpected character {c:?}"))),
            }
        }
        if segments.is_empty() {
            return Err(err("empty path"));
        }
        Ok(JsonPath { segments })
    }

    /// Every value the path selects (several only with `[*]` or filters).
    pub fn select<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut current = vec![root];
        for seg in &self.segments {
            let mut next = Vec::new();
            for v in current {
                match seg {
                    Segment::Field(f) => {
                        if let Some(x) = v.get(f.as_str()) {
                            next.push(x);
                        }
                    }
                    Segment::Index(n) => {
                        if let Some(x) = v.get(*n) {
                            next.push(x);
                        }
                    }
                    Segment::Wildcard => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(o) => next.extend(o.values()),
                        _ => {}
                    },
                    Segment::Filter {
                        path,
                        value,
                        negate,
                    } => {
                        if let Value::Array(a) = v {
                            next.extend(a.iter().filter(|el| {
                                let got = path.iter().try_fold(*el, |acc, k| acc.get(k.as_str()));
                                (got == Some(value)) != *negate
                            }));
                        }
                    }
                }
            }
            current = next;
        }
        current
    }

    /// The single value the path selects, if exactly one.
    pub fn get<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        let mut all = self.select(root);
        if all.len() == 1 { all.pop() } else { None }
    }

    /// Removes what the path selects (only `Field`/`Index` paths; others are ignored).
    /// Returns whether something was removed.
    pub fn remove(&self, root: &mut Value) -> bool {
        let Some((last, parents)) = self.segments.split_last() else {
            return false;
        };
        let mut cur = root;
        for seg in parents {
            let next = match seg {
                Segment::Field(f) => cur.get_mut(f.as_str()),
                Segment::Index(n) => cur.get_mut(*n),
                _ => return false,
            };
            match next {
                Some(n) => cur = n,
                None => return false,
            }
        }
        match (last, cur) {
            (Segment::Field(f), Value::Object(o)) => o.remove(f.as_str()).is_some(),
            (Segment::Index(n), Value::Array(a)) if *n < a.len() => {
                a.remove(*n);
                true
            }
            _ => false,
        }
    }

    /// Sets the value at a `Field`/`Index` path, creating objects on the way. Returns false when
    /// the path cannot be written (a non-object in the way, an index out of range, a filter).
    pub fn set(&self, root: &mut Value, value: Value) -> bool {
        let Some((last, parents)) = self.segments.split_last() else {
            return false;
        };
        let mut cur = root;
        for seg in parents {
            let next = match seg {
                Segment::Field(f) => match cur {
                    Value::Object(o) => Some(
                        o.entry(f.clone())
                            .or_insert_with(|| Value::Object(Default::default())),
                    ),
                    _ => None,
                },
                Segment::Index(n) => cur.get_mut(*n),
                _ => None,
            };
            match next {
                Some(n) => cur = n,
                None => return false,
            }
        }
        match (last, cur) {
            (Segment::Field(f), Value::Object(o)) => {
                o.insert(f.clone(), value);
                true
            }
            (Segment::Index(n), Value::Array(a)) if *n < a.len() => {
                a[*n] = value;
                true
            }
            _ => false,
        }
    }
}

fn find_bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut depth = 0;
    for (j, &c) in chars.iter().enumerate().skip(open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(j);
                    }
                }
                _ => {}
            },
        }
    }
    None
}

fn unquote(s: &str) -> Option<String> {
    let s = s.trim();
    for q in ['"', '\''] {
        if s.len() >= 2 && s.starts_with(q) && s.ends_with(q) {
            return Some(s[1..s.len() - 1].to_string());
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Result<Segment, String> {
    if inner == "*" {
        return Ok(Segment::Wildcard);
    }
    if let Some(key) = unquote(inner) {
        return Ok(Segment::Field(key));
    }
    if let Ok(n) = inner.parse::<usize>() {
        return Ok(Segment::Index(n));
    }
    if let Some(expr) = inner
        .strip_prefix("?(")
        .and_then(|e| e.strip_suffix(')'))
        .map(str::trim)
    {
        let (lhs, rhs, negate) = if let Some((l, r)) = expr.split_once("!=") {
            (l, r, true)
        } else if let Some((l, r)) = expr.split_once("==") {
            (l, r, false)
        } else {
            return Err(format!("unsupported filter {expr:?} (only == and !=)"));
        };
        let path = lhs
            .trim()
            .strip_prefix("@.")
            .ok_or_else(|| format!("filter must start with '@.': {lhs:?}"))?;
        let path: Vec<String> = path.split('.').map(str::to_string).collect();
        let rhs = rhs.trim();
        let value = match unquote(rhs) {
            Some(s) => Value::String(s),
            None => serde_json::from_str(rhs).map_err(|_| format!("bad filter value {rhs:?}"))?,
        };
        return Ok(Segment::Filter {
            path,
            value,
            negate,
        });
    }
    Err(format!("unsupported bracket expression [{inner}]"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn get(path: &str, v: &Value) -> Option<Value> {
        JsonPath::parse(path).unwrap().get(v).cloned()
    }

    #[test]
    fn dotted_paths_and_quoted_keys() {
        let v = json!({"status": {"health": {"status": "Healthy"}},
            "metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}});
        assert_eq!(get(".status.health.status", &v), Some(json!("Healthy")));
        assert_eq!(get("{.status.health.status}", &v), Some(json!("Healthy")));
        assert_eq!(
            get(r#".metadata.annotations["argocd.argoproj.io/refresh"]"#, &v),
            Some(json!("normal"))
        );
        assert_eq!(
            get(".metadata.annotations['argocd.argoproj.io/refresh']", &v),
            Some(json!("normal"))
        );
        assert_eq!(get(".status.missing", &v), None);
    }

    #[test]
    fn indexes_wildcards_and_filters() {
        let v = json!({"status": {"conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "False"}
        ]}});
        assert_eq!(
            get(r#".status.conditions[?(@.type=="Progressing")].status"#, &v),
            Some(json!("False"))
        );
        assert_eq!(
            get(".status.conditions[?(@.type != 'Progressing')].type", &v),
            Some(json!("Available"))
        );
        assert_eq!(
            get(".status.conditions[1].type", &v),
            Some(json!("Progressing"))
        );
        let p = JsonPath::parse(".status.conditions[*].type").unwrap();
        assert_eq!(p.select(&v).len(), 2);
        assert_eq!(p.get(&v), None, "two matches are not a single value");
    }

    #[test]
    fn bad_paths_name_the_path() {
        let e = JsonPath::parse(".a[?(@.x > 1)]").unwrap_err();
        assert!(e.to_string().contains(".a[?(@.x > 1)]"), "{e}");
        assert!(JsonPath::parse("").is_err());
        assert!(JsonPath::parse(".a..b").is_err());
        assert!(JsonPath::parse(".a[1").is_err());
    }

    #[test]
    fn remove_and_set() {
        let mut v =
            json!({"operation": {"sync": {}}, "metadata": {"annotations": {"a/b": "1", "c": "2"}}});
        assert!(JsonPath::parse(".operation").unwrap().remove(&mut v));
        assert!(
            JsonPath::parse(r#".metadata.annotations["a/b"]"#)
                .unwrap()
                .remove(&mut v)
        );
        assert!(!JsonPath::parse(".nope.x").unwrap().remove(&mut v));
        assert_eq!(v, json!({"metadata": {"annotations": {"c": "2"}}}));
        assert!(
            JsonPath::parse(".spec.replicas")
                .unwrap()
                .set(&mut v, json!(3))
        );
        assert_eq!(v["spec"]["replicas"], json!(3));
    }
}
