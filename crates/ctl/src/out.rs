//! Output formats of the ctl commands (`-o json|yaml|text`, as the peer's `cmdutil.MarshalStruct`)
//! and Secret writes.

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;
use serde::Serialize;

/// JSON indented by one space (Go's `json.MarshalIndent(v, "", " ")`), YAML, or `Label: value`
/// lines; `labels` maps JSON keys to the peer's text labels.
pub fn render<T: Serialize>(
    v: &T,
    format: &str,
    labels: &[(&str, &str)],
) -> anyhow::Result<String> {
    match format.to_ascii_lowercase().as_str() {
        "json" => {
            let mut buf = Vec::new();
            let fmt = serde_json::ser::PrettyFormatter::with_indent(b" ");
            let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
            v.serialize(&mut ser)?;
            buf.push(b'\n');
            Ok(String::from_utf8(buf)?)
        }
        "yaml" => Ok(serde_saphyr::to_string(v).context("encoding YAML")?),
        "text" => {
            let j = serde_json::to_value(v)?;
            let mut rows = Vec::new();
            text_rows(&j, labels, "", &mut rows);
            let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
            Ok(rows
                .into_iter()
                .map(|(k, v)| format!("{:<w$}  {v}\n", format!("{k}:")))
                .collect())
        }
        other => bail!("Unknown output format: {other} (json, yaml or text)"),
    }
}

fn text_rows(
    v: &serde_json::Value,
    labels: &[(&str, &str)],
    prefix: &str,
    rows: &mut Vec<(String, String)>,
) {
    let Some(obj) = v.as_object() else { return };
    for (k, val) in obj {
        let label = labels
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, l)| l.to_string())
            .unwrap_or_else(|| k.clone());
        let label = format!("{prefix}{label}");
        match val {
            serde_json::Value::Object(_) => text_rows(val, labels, &format!("{label} "), rows),
            serde_json::Value::Array(a) => rows.push((
                label,
                a.iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| x.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
            serde_json::Value::String(s) => rows.push((label, s.clone())),
            other => rows.push((label, other.to_string())),
        }
    }
}

pub use argocd_pull_ops::api_error::is_status;

/// Creates `secret`; when it exists, replaces it if `upsert` (keeping nothing of the old one but
/// its resourceVersion), else fails with `exists_msg`. Returns `true` when it was created.
pub async fn put_secret(
    client: &kube::Client,
    namespace: &str,
    mut secret: Secret,
    upsert: bool,
    exists_msg: &str,
) -> anyhow::Result<bool> {
    let api = Api::<Secret>::namespaced(client.clone(), namespace);
    let name = secret.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        Err(e) if is_status(&e, 409) => {
            if !upsert {
                bail!("{exists_msg}");
            }
            let old = api
                .get(&name)
                .await
                .with_context(|| format!("reading secret {namespace}/{name}"))?;
            secret.metadata.resource_version = old.metadata.resource_version;
            api.replace(&name, &PostParams::default(), &secret)
                .await
                .with_context(|| format!("updating secret {namespace}/{name}"))?;
            Ok(false)
        }
        Err(e) => Err(e).with_context(|| format!("creating secret {namespace}/{name}")),
    }
}

/// A Secret with `data`.
pub fn secret(name: &str, namespace: &str, type_: &str, data: &[(&str, &[u8])]) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        type_: Some(type_.into()),
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}

/// Go's `json.MarshalIndent(v, "", indent)`.
pub fn go_json_indent(v: &serde_json::Value, indent: &str) -> String {
    let mut buf = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
    // serialising a Value into a Vec cannot fail
    let _ = v.serialize(&mut ser);
    String::from_utf8(buf).unwrap_or_default()
}

/// Rows aligned as Go's `tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)` aligns tab-separated cells:
/// every cell but the last of a row padded to the column's widest cell plus two spaces.
pub fn tabwriter(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; cols];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                out.push_str(c);
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            } else {
                out.push_str(c);
            }
        }
        out.push('\n');
    }
    out
}

/// A Kubernetes API error as client-go prints it (`secrets "x" not found`), other errors in full.
pub fn kube_msg(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

/// Reads a line from stdin after printing `prompt` (peer: `cmdutil.ReadFromTerm` with no
/// validator); `None` at end of input.
pub fn read_answer(prompt: &str) -> anyhow::Result<Option<String>> {
    use std::io::Write;
    print!("{prompt}");
    std::io::stdout().flush()?;
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\n', '\r']).to_string()))
}
