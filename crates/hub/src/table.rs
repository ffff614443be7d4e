//! `meta.k8s.io/v1 Table` output (what `kubectl get` asks for), using CRD
//! `additionalPrinterColumns` with a simple JSONPath evaluator.

use serde_json::{Value, json};

use crate::registry::{PrinterColumn, ResourceType};

#[derive(Clone, Debug)]
pub(crate) struct TableCtx {
    pub version: String,
    /// `includeObject`: None | Metadata (default) | Object
    pub include: String,
}

fn columns(rt: &ResourceType, version: &str) -> Vec<PrinterColumn> {
    let mut cols = rt
        .version(version)
        .map(|v| v.columns.clone())
        .unwrap_or_default();
    if cols.is_empty() {
        cols.push(PrinterColumn {
            name: "Age".into(),
            type_: "date".into(),
            json_path: ".metadata.creationTimestamp".into(),
            priority: 0,
            description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
            format: String::new(),
        });
    }
    cols
}

impl TableCtx {
    pub fn table_for(
        &self,
        rt: &ResourceType,
        items: &[Value],
        rv: Option<u64>,
        cont: Option<String>,
        with_columns: bool,
    ) -> Value {
        let cols = columns(rt, &self.version);
        let mut defs = vec![json!({"name": "Name", "type": "string", "format": "name",
            "description": "Name must be unique within a namespace.", "priority": 0})];
        for c in &cols {
            defs.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority}));
        }
        let rows: Vec<Value> = items
            .iter()
            .map(|it| {
                let mut cells = vec![it.pointer("/metadata/name").cloned().unwrap_or(Value::Null)];
                for c in &cols {
                    let v = eval(it, &c.json_path);
                    let cell = match (c.type_.as_str(), v) {
                        (_, None) => Value::Null,
                        ("date", Some(Value::String(s))) => Value::String(crate::util::age(&s)),
                        (_, Some(v)) => v,
                    };
                    cells.push(cell);
                }
                let mut row = json!({"cells": cells});
                match self.include.as_str() {
                    "None" => {}
                    "Object" => row["object"] = it.clone(),
                    _ => {
                        row["object"] = json!({"kind": "PartialObjectMetadata",
                            "apiVersion": "meta.k8s.io/v1",
                            "metadata": it.get("metadata").cloned().unwrap_or(json!({}))})
                    }
                }
                row
            })
            .collect();
        let mut meta = json!({});
        if let Some(rv) = rv {
            meta["resourceVersion"] = json!(rv.to_string());
        }
        if let Some(c) = cont {
            meta["continue"] = json!(c);
        }
        let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta,
            "rows": rows});
        t["columnDefinitions"] = if with_columns { json!(defs) } else { json!([]) };
        t
    }
}

/// Evaluates a simple JSONPath (`.a.b`, `.a[0].b`, `.a[*].b`, `.a[?(@.k=="v")].b`, optional
/// `{}`); returns the first match (several matches are joined with `,`).
pub(crate) fn eval(root: &Value, path: &str) -> Option<Value> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|x| x.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut cur: Vec<&Value> = vec![root];
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                i += 1;
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                if name.is_empty() {
                    continue;
                }
                cur = cur.into_iter().filter_map(|v| v.get(&name)).collect();
            }
            '[' => {
                let start = i + 1;
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '[' {
                        depth += 1;
                    }
                    if chars[i] == ']' {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    i += 1;
                }
                let inner: String = chars[start..i.min(chars.len())].iter().collect();
                i += 1;
                let inner = inner.trim();
                if inner == "*" {
                    cur = cur
                        .into_iter()
                        .filter_map(|v| v.as_array())
                        .flatten()
                        .collect();
                } else if let Ok(n) = inner.parse::<i64>() {
                    cur = cur
                        .into_iter()
                        .filter_map(|v| v.as_array())
                        .filter_map(|a| {
                            let idx = if n < 0 { a.len() as i64 + n } else { n };
                            a.get(usize::try_from(idx).ok()?)
                        })
                        .collect();
                } else if let Some(f) = inner.strip_prefix("?(@.").and_then(|x| x.strip_suffix(')'))
                {
                    let (k, v) = f.split_once("==")?;
                    let k = k.trim().to_string();
                    let v = v.trim().trim_matches(|c| c == '"' || c == '\'').to_string();
                    cur = cur
                        .into_iter()
                        .filter_map(|x| x.as_array())
                        .flatten()
                        .filter(|it| {
                            it.get(&k).is_some_and(|x| match x {
                                Value::String(s) => *s == v,
                                other => {
                                    serde_json::from_str::<Value>(&v).ok().as_ref() == Some(other)
                                }
                            })
                        })
                        .collect();
                } else {
                    let key = inner.trim_matches(|c| c == '"' || c == '\'');
                    cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
                }
            }
            _ => {
                return None;
            }
        }
    }
    match cur.len() {
        0 => None,
        1 => Some(cur[0].clone()),
        _ => Some(Value::String(
            cur.iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    o => o.to_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath() {
        let v = json!({"status":{"sync":{"status":"Synced"},"conditions":[{"type":"A","status":"False"},{"type":"Ready","status":"True"}]},"spec":{"c":[{"image":"x"}]}});
        assert_eq!(eval(&v, ".status.sync.status"), Some(json!("Synced")));
        assert_eq!(
            eval(&v, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(json!("True"))
        );
        assert_eq!(eval(&v, ".spec.c[0].image"), Some(json!("x")));
        assert_eq!(eval(&v, "{.spec.c[*].image}"), Some(json!("x")));
        assert_eq!(eval(&v, ".status.missing"), None);
    }
}
