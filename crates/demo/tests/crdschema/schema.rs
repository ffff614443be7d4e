//! The vendored CRDs' `openAPIV3Schema`s as JSON-schema validators (the `jsonschema` crate,
//! draft 4, which OpenAPI v3's schema object is built on), with the Kubernetes rules JSON schema
//! has no word for turned into JSON schema:
//!
//! * `nullable: true` → the type also admits `null` (otherwise `null` fails, as in a
//!   client-side validation; the API server would prune it);
//! * an object with `properties` and neither `additionalProperties` nor
//!   `x-kubernetes-preserve-unknown-fields: true` → `additionalProperties: false` (the API server
//!   silently prunes an unknown field, so a misspelt one is lost);
//! * `x-kubernetes-int-or-string: true` → integer or string.
//!
//! Checked: `required`, `type`, `enum`, `pattern`, `minimum`/`maximum`, `minLength`/`maxLength`,
//! `minItems`/`maxItems`, `format: date-time`, unknown fields. **Not** checked: CEL rules
//! (`x-kubernetes-validations`), list semantics (`x-kubernetes-list-type`/`-map-keys`
//! uniqueness), `metadata` (the API server's own rules: names, labels), formats Kubernetes defines
//! and JSON schema does not (`int32`, `int64`, `byte`), and defaults (validation sees the object
//! as written, before the API server defaults anything — which is what client-side validation
//! sees too).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// `(apiVersion, kind)` → validator, for every served version of every vendored CRD.
pub struct Schemas {
    validators: BTreeMap<(String, String), jsonschema::Validator>,
}

impl Schemas {
    pub fn load(crds: &[&str]) -> Schemas {
        let mut validators = BTreeMap::new();
        for yaml in crds {
            let crd: Value = serde_saphyr::from_str(yaml).expect("vendored CRD parses");
            let group = crd["spec"]["group"].as_str().unwrap();
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap();
            for v in crd["spec"]["versions"].as_array().unwrap() {
                let name = v["name"].as_str().unwrap();
                let mut schema = v["schema"]["openAPIV3Schema"].clone();
                kubernetes_rules(&mut schema);
                let validator = jsonschema::options()
                    .with_draft(jsonschema::Draft::Draft4)
                    .should_validate_formats(true)
                    .build(&schema)
                    .unwrap_or_else(|e| panic!("{group}/{name} {kind}: {e}"));
                validators.insert((format!("{group}/{name}"), kind.to_string()), validator);
            }
        }
        Schemas { validators }
    }

    /// The schema errors of `obj` (`path: message`), or `Err` when no vendored CRD serves its
    /// apiVersion and kind.
    pub fn errors(&self, obj: &Value) -> Result<Vec<String>, String> {
        let av = obj["apiVersion"].as_str().unwrap_or_default();
        let kind = obj["kind"].as_str().unwrap_or_default();
        let v = self
            .validators
            .get(&(av.to_string(), kind.to_string()))
            .ok_or_else(|| format!("no vendored CRD serves {av} {kind}"))?;
        Ok(v.iter_errors(obj)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect())
    }

    /// Panics listing every schema error of every object, each named by kind, namespace/name and
    /// `origin` (who wrote it).
    pub fn assert_valid<'a>(
        &self,
        origin: &str,
        objects: impl IntoIterator<Item = &'a Value>,
    ) -> usize {
        let mut bad = Vec::new();
        let mut n = 0;
        for o in objects {
            n += 1;
            let id = format!(
                "{} {} {}/{}",
                o["apiVersion"].as_str().unwrap_or("?"),
                o["kind"].as_str().unwrap_or("?"),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("?")
            );
            match self.errors(o) {
                Ok(e) if e.is_empty() => {}
                Ok(e) => bad.push(format!("{id}:\n    {}", e.join("\n    "))),
                Err(e) => bad.push(format!("{id}: {e}")),
            }
        }
        assert!(
            bad.is_empty(),
            "{origin}: {} of {n} objects do not validate against the vendored CRDs:\n{}",
            bad.len(),
            bad.join("\n")
        );
        n
    }
}

/// Rewrites the Kubernetes schema extensions into JSON schema (see the module docs).
fn kubernetes_rules(node: &mut Value) {
    let Some(o) = node.as_object_mut() else {
        return;
    };
    let preserve = o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !o.contains_key("anyOf") {
        o.insert("type".into(), serde_json::json!(["integer", "string"]));
    }
    if o.get("nullable") == Some(&Value::Bool(true))
        && let Some(t) = o.get("type").cloned()
    {
        let mut types = match t {
            Value::Array(a) => a,
            t => vec![t],
        };
        types.push(Value::String("null".into()));
        o.insert("type".into(), Value::Array(types));
        // an `enum` must admit null too
        if let Some(Value::Array(e)) = o.get_mut("enum") {
            e.push(Value::Null);
        }
    }
    if o.contains_key("properties") && !o.contains_key("additionalProperties") && !preserve {
        o.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "patternProperties", "definitions"] {
        if let Some(Value::Object(m)) = o.get_mut(key) {
            for v in m.values_mut() {
                kubernetes_rules(v);
            }
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = o.get_mut(key) {
            kubernetes_rules(v);
        }
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(a)) = o.get_mut(key) {
            for v in a {
                kubernetes_rules(v);
            }
        }
    }
    let _: &mut Map<String, Value> = o;
}
