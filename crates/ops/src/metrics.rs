//! Prometheus metrics: components register their metrics into a shared [`Registry`] and the admin
//! server renders it in the OpenMetrics text format.
//!
//! A principal's exposition grows with its agents (the peer's per-agent series: about 10 KB of
//! text an agent), so `/metrics` is rendered into chunks of whole lines ([`render_chunks`])
//! rather than into one `String` that doubles its buffer as it grows: a scrape costs the size of
//! the text, not up to three times it.

use bytes::{Bytes, BytesMut};
pub use prometheus_client::registry::Registry;

/// Renders `registry` in the OpenMetrics text format.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing metrics to a String cannot fail");
    out
}

/// The size a chunk of [`render_chunks`] reaches before the next line starts a new one.
const CHUNK: usize = 64 * 1024;

/// [`render`] as chunks of about 64 KiB, each ending at the end of a line (so a reader can take
/// every chunk's lines on their own).
pub fn render_chunks(registry: &Registry) -> Vec<Bytes> {
    let mut out = Chunks::default();
    prometheus_client::encoding::text::encode(&mut out, registry)
        .expect("writing metrics to memory cannot fail");
    out.finish()
}

#[derive(Default)]
struct Chunks {
    done: Vec<Bytes>,
    current: BytesMut,
}

impl Chunks {
    fn finish(mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.done.push(self.current.freeze());
        }
        self.done
    }
}

impl std::fmt::Write for Chunks {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.current.capacity() == 0 {
            self.current.reserve(CHUNK + 1024);
        }
        self.current.extend_from_slice(s.as_bytes());
        if self.current.len() >= CHUNK && s.ends_with('\n') {
            self.done.push(self.current.split().freeze());
            self.current = BytesMut::new();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;

    #[test]
    fn chunks_hold_the_same_text_in_whole_lines() {
        let mut reg = Registry::default();
        let f = Family::<Vec<(String, String)>, Counter>::default();
        reg.register("per_agent", "one series an agent", f.clone());
        for i in 0..5_000 {
            f.get_or_create(&vec![("agent_name".into(), format!("agent-{i:05}"))])
                .inc();
        }
        let chunks = render_chunks(&reg);
        assert!(chunks.len() > 2, "{} chunks", chunks.len());
        for c in &chunks {
            assert!(c.ends_with(b"\n"));
            assert!(c.len() < CHUNK + 1024, "{}", c.len());
        }
        let joined: Vec<u8> = chunks.concat();
        assert_eq!(String::from_utf8(joined).unwrap(), render(&reg));
    }
}
