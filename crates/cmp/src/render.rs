//! Rendering a plan: pretty JSON documents, one work per target namespace and part, with the
//! manifests (serialized beforehand) written in place.

use serde_json::Value;

use crate::envelope::{
    MARKER, envelope, envelope_with_marker, manifests_indent, part_name, target_namespaces,
};
use crate::feedback;
use crate::options::GenerateOptions;
use crate::plan::Plan;

/// Renders the plan: pretty JSON documents separated by `---` lines, per target namespace
/// (sorted) then per part. Byte-identical for identical input.
pub fn render(plan: &Plan, options: &GenerateOptions) -> String {
    let total: usize = plan.manifests.iter().map(|m| m.pretty.len() + 64).sum();
    let mut out = Vec::with_capacity(total * target_namespaces(options).len() + 4096);
    render_to(plan, options, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("rendered JSON is UTF-8")
}

/// [`render`] into a writer (e.g. a buffered stdout), without holding the whole output.
pub fn render_to(
    plan: &Plan,
    options: &GenerateOptions,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let namespaces = target_namespaces(options);
    let marker_json = serde_json::to_string(MARKER).expect("string serializes");
    let mut first = true;
    for ns in &namespaces {
        for (index, range) in plan.parts.iter().enumerate() {
            let configs: Vec<Value> = plan.manifests[range.clone()]
                .iter()
                .filter_map(feedback::manifest_config)
                .collect();
            let env = envelope(options, &part_name(&options.work_name, index), ns, configs);
            let (text, at) = envelope_with_marker(options, env);
            let needle = format!("\"manifests\": {marker_json}");
            let line_start = text[..at].rfind('\n').map_or(0, |p| p + 1);
            let indent = &text[line_start..at];
            let item_indent = format!("{indent}  ");
            debug_assert_eq!(item_indent.len(), manifests_indent(options));
            if !first {
                out.write_all(b"---\n")?;
            }
            first = false;
            out.write_all(&text.as_bytes()[..at])?;
            out.write_all(b"\"manifests\": [\n")?;
            for (k, m) in plan.manifests[range.clone()].iter().enumerate() {
                if k > 0 {
                    out.write_all(b",\n")?;
                }
                out.write_all(item_indent.as_bytes())?;
                out.write_all(m.pretty.as_bytes())?; // already indented for this place
            }
            out.write_all(b"\n")?;
            out.write_all(indent.as_bytes())?;
            out.write_all(b"]")?;
            out.write_all(&text.as_bytes()[at + needle.len()..])?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}
