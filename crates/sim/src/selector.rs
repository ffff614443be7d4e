//! `metav1.LabelSelector` matching.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` match `selector` (an empty selector matches everything). An unknown operator
/// is an error naming it.
pub fn matches(
    selector: &LabelSelector,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    for (k, v) in selector.match_labels.iter().flatten() {
        if labels.get(k) != Some(v) {
            return Ok(false);
        }
    }
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or(&[]);
        let have = labels.get(&req.key);
        let ok = match req.operator.as_str() {
            "In" => have.is_some_and(|h| values.contains(h)),
            "NotIn" => !have.is_some_and(|h| values.contains(h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => {
                return Err(format!(
                    "label selector operator {other:?} for key {:?} is not one of In, NotIn, Exists, DoesNotExist",
                    req.key
                ));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions() {
        let l = labels(&[("cloud", "Amazon"), ("env", "prod")]);
        let mut s = LabelSelector {
            match_labels: Some(labels(&[("cloud", "Amazon")])),
            ..Default::default()
        };
        assert_eq!(matches(&s, &l), Ok(true));
        s.match_expressions = Some(vec![req("env", "In", &["dev", "test"])]);
        assert_eq!(matches(&s, &l), Ok(false));
        s.match_expressions = Some(vec![
            req("env", "NotIn", &["dev"]),
            req("region", "DoesNotExist", &[]),
            req("cloud", "Exists", &[]),
        ]);
        assert_eq!(matches(&s, &l), Ok(true));
        assert_eq!(matches(&LabelSelector::default(), &l), Ok(true));
        s.match_expressions = Some(vec![req("env", "Gt", &["1"])]);
        assert!(matches(&s, &l).unwrap_err().contains("\"Gt\""));
    }
}
