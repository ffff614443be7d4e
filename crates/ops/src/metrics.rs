//! Prometheus metrics: components register their metrics into a shared [`Registry`] and the admin
//! server renders it in the OpenMetrics text format.

pub use prometheus_client::registry::Registry;

/// Renders `registry` in the OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing metrics to a String cannot fail");
    out
}
