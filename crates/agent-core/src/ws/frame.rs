//! The framing of golang.stackrox.io/grpc-http1's gRPC-over-WebSocket protocol (what the peer's
//! `--enable-websocket` speaks), read from its `internal/grpcproto` and `internal/grpcwebsocket`:
//!
//! - one WebSocket connection per gRPC call, subprotocol `grpc-ws`, the call's path as the URL
//!   path and the call's request headers (metadata) as headers of the upgrade request;
//! - every WebSocket message is a *binary* message holding exactly one gRPC frame: a 5-byte prefix
//!   (flags, big-endian length) and that many bytes;
//! - a data frame has the flags' most significant bit clear (bit 0 is gRPC's compression flag);
//! - a metadata frame has it set (`0x80`): its payload is an HTTP/1 header block as Go's
//!   `http.Header.Write` writes it (`Key: value\r\n` per value, keys sorted); the server sends
//!   the response headers first and the trailers last (a single frame holding `Grpc-Status`
//!   is a trailers-only response);
//! - the client ends its half of the call with the end-of-stream frame `80 00 00 00 00`.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

/// `Sec-WebSocket-Protocol` of gRPC over WebSocket (grpcwebsocket.SubprotocolName).
pub const SUBPROTOCOL: &str = "grpc-ws";
/// The length of a gRPC frame's prefix.
pub const PREFIX_LEN: usize = 5;
/// The flag that marks a metadata frame.
pub const METADATA_FLAG: u8 = 0x80;
/// The client's end of stream (grpcproto.EndStreamHeader).
pub const END_OF_STREAM: [u8; PREFIX_LEN] = [METADATA_FLAG, 0, 0, 0, 0];

/// What one WebSocket message carries.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A gRPC message, prefix included (as it travels in an HTTP/2 body).
    Data(Bytes),
    /// Headers or trailers.
    Metadata(HeaderMap),
    /// The client sends no more messages.
    EndOfStream,
}

/// A message that breaks the framing rules.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FrameError {
    #[error("gRPC-WebSocket message of {0} bytes is shorter than the 5-byte gRPC frame prefix")]
    Short(usize),
    #[error("gRPC-WebSocket frame declares {declared} bytes but carries {actual}")]
    Length { declared: usize, actual: usize },
    #[error(
        "gRPC-WebSocket metadata frame has the compression flag set; compressed metadata is not supported"
    )]
    CompressedMetadata,
    #[error("gRPC-WebSocket metadata frame: invalid header line {0:?}")]
    Header(String),
}

/// Reads one WebSocket message (ValidateGRPCFrame, IsEndOfStream, IsDataFrame).
pub fn decode(msg: Bytes) -> Result<Frame, FrameError> {
    if msg.len() < PREFIX_LEN {
        return Err(FrameError::Short(msg.len()));
    }
    let declared = u32::from_be_bytes([msg[1], msg[2], msg[3], msg[4]]) as usize;
    if msg.len() - PREFIX_LEN != declared {
        return Err(FrameError::Length {
            declared,
            actual: msg.len() - PREFIX_LEN,
        });
    }
    if msg[0] & METADATA_FLAG == 0 {
        return Ok(Frame::Data(msg));
    }
    if msg[..] == END_OF_STREAM {
        return Ok(Frame::EndOfStream);
    }
    if msg[0] & 1 != 0 {
        return Err(FrameError::CompressedMetadata);
    }
    parse_header_block(&msg[PREFIX_LEN..]).map(Frame::Metadata)
}

/// A metadata frame holding `headers` (wsResponseWriter.WriteHeader / Close).
pub fn metadata(headers: &HeaderMap) -> Bytes {
    let block = header_block(headers);
    let mut out = BytesMut::with_capacity(PREFIX_LEN + block.len());
    out.put_u8(METADATA_FLAG);
    out.put_u32(block.len() as u32);
    out.extend_from_slice(&block);
    out.freeze()
}

/// Go's `http.Header.Write`: canonical keys in sorted order, one `Key: value\r\n` line per value,
/// line breaks in values replaced by spaces and surrounding blanks trimmed.
pub fn header_block(headers: &HeaderMap) -> Vec<u8> {
    let mut keys: Vec<(String, &HeaderName)> =
        headers.keys().map(|k| (canonical(k.as_str()), k)).collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = Vec::new();
    for (key, name) in keys {
        for v in headers.get_all(name) {
            let v: Vec<u8> = v
                .as_bytes()
                .iter()
                .map(|b| if matches!(b, b'\r' | b'\n') { b' ' } else { *b })
                .collect();
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(v.trim_ascii());
            out.extend_from_slice(b"\r\n");
        }
    }
    out
}

/// Go's `textproto.CanonicalMIMEHeaderKey`: `grpc-status` → `Grpc-Status`.
pub fn canonical(key: &str) -> String {
    let mut upper = true;
    key.chars()
        .map(|c| {
            let c = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            c
        })
        .collect()
}

/// The header block of a metadata frame (textproto.ReadMIMEHeader): `Key: value` lines ended by
/// CRLF (a bare LF is accepted).
pub fn parse_header_block(block: &[u8]) -> Result<HeaderMap, FrameError> {
    let mut map = HeaderMap::new();
    for line in block.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        let bad = || FrameError::Header(String::from_utf8_lossy(line).into_owned());
        let colon = line.iter().position(|b| *b == b':').ok_or_else(bad)?;
        let name = HeaderName::from_bytes(&line[..colon]).map_err(|_| bad())?;
        let value = HeaderValue::from_bytes(line[colon + 1..].trim_ascii()).map_err(|_| bad())?;
        map.append(name, value);
    }
    Ok(map)
}

/// Cuts an HTTP/2 gRPC body (whose chunks need not align with messages) into whole gRPC frames,
/// one per WebSocket message (grpcwebsocket.Write).
#[derive(Default)]
pub struct Reframer {
    buf: BytesMut,
}

impl Reframer {
    pub fn push(&mut self, chunk: impl Buf) {
        self.buf.put(chunk);
    }

    /// The next whole frame, if buffered.
    pub fn next_frame(&mut self) -> Option<Bytes> {
        if self.buf.len() < PREFIX_LEN {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if self.buf.len() < PREFIX_LEN + len {
            return None;
        }
        Some(self.buf.split_to(PREFIX_LEN + len).freeze())
    }

    /// Bytes of an incomplete frame left at the end of the body (a malformed body).
    pub fn leftover(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        m
    }

    /// The response headers grpc-go's ServeHTTP transport writes, as stackrox's
    /// wsResponseWriter.WriteHeader frames them (the announced `Trailer` header removed):
    /// `MakeMessageHeader(MetadataFlags, len)` + `http.Header{"Content-Type": ...}.Write`.
    #[test]
    fn response_headers_are_the_bytes_the_peer_server_sends() {
        let golden: &[u8] = b"\x80\x00\x00\x00\x20Content-Type: application/grpc\r\n";
        let h = headers(&[("content-type", "application/grpc")]);
        assert_eq!(&metadata(&h)[..], golden);
        assert_eq!(
            decode(Bytes::from_static(golden)).unwrap(),
            Frame::Metadata(h)
        );
    }

    /// Trailers of a successful call from the peer: only `Grpc-Status` (grpc-go sets
    /// `Grpc-Message` only for a non-empty message); of a failed one: sorted keys, percent-encoded
    /// message (grpcproto.EncodeGrpcMessage).
    #[test]
    fn trailers_are_sorted_canonical_lines_as_go_writes_them() {
        let ok: &[u8] = b"\x80\x00\x00\x00\x10Grpc-Status: 0\r\n";
        assert_eq!(&metadata(&headers(&[("grpc-status", "0")]))[..], ok);
        let failed = headers(&[
            ("grpc-status", "16"),
            ("grpc-message", "token expired%3A retry"),
        ]);
        let block = b"Grpc-Message: token expired%3A retry\r\nGrpc-Status: 16\r\n";
        let mut golden = vec![0x80, 0, 0, 0, block.len() as u8];
        golden.extend_from_slice(block);
        assert_eq!(&metadata(&failed)[..], &golden[..]);
        // the peer's textproto reader canonicalises; ours lower-cases: the same map either way
        assert_eq!(decode(golden.into()).unwrap(), Frame::Metadata(failed));
        // multi-valued metadata: one line per value, in order
        let multi = headers(&[("x-trace", "a"), ("x-trace", "b")]);
        assert_eq!(header_block(&multi), b"X-Trace: a\r\nX-Trace: b\r\n");
    }

    #[test]
    fn the_clients_end_of_stream_and_data_frames() {
        assert_eq!(
            decode(Bytes::from_static(&[0x80, 0, 0, 0, 0])).unwrap(),
            Frame::EndOfStream
        );
        // a protobuf message `0a 01 78` (field 1 = "x"), uncompressed and compressed
        for flags in [0u8, 1] {
            let msg = Bytes::from(vec![flags, 0, 0, 0, 3, 0x0a, 0x01, 0x78]);
            assert_eq!(decode(msg.clone()).unwrap(), Frame::Data(msg));
        }
        // an empty message is a valid data frame
        let empty = Bytes::from_static(&[0, 0, 0, 0, 0]);
        assert_eq!(decode(empty.clone()).unwrap(), Frame::Data(empty));
    }

    #[test]
    fn malformed_messages_are_refused_as_the_peer_refuses_them() {
        assert_eq!(
            decode(Bytes::from_static(&[0, 0, 0])),
            Err(FrameError::Short(3))
        );
        assert_eq!(
            decode(Bytes::from_static(&[0, 0, 0, 0, 4, 1, 2])),
            Err(FrameError::Length {
                declared: 4,
                actual: 2
            })
        );
        assert_eq!(
            decode(Bytes::from_static(&[0x81, 0, 0, 0, 1, b'x'])),
            Err(FrameError::CompressedMetadata)
        );
        assert!(matches!(
            decode(Bytes::from_static(b"\x80\x00\x00\x00\x0cno colon\r\n\r\n")),
            Err(FrameError::Header(_))
        ));
    }

    #[test]
    fn header_values_with_line_breaks_cannot_split_a_header() {
        // HeaderValue refuses CR/LF, but a block written by us never carries them either
        let h = headers(&[("grpc-message", "  padded  ")]);
        assert_eq!(header_block(&h), b"Grpc-Message: padded\r\n");
        assert_eq!(
            canonical("x-forwarded-client-cert"),
            "X-Forwarded-Client-Cert"
        );
        assert_eq!(canonical("GRPC-STATUS"), "Grpc-Status");
    }

    #[test]
    fn a_body_is_cut_into_one_websocket_message_per_grpc_message() {
        let a = [0u8, 0, 0, 0, 2, 0xaa, 0xbb];
        let b = [1u8, 0, 0, 0, 1, 0xcc];
        let body: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
        // any chunking of the body gives the same two frames
        for cut in 0..=body.len() {
            let mut r = Reframer::default();
            let mut out = Vec::new();
            for chunk in [&body[..cut], &body[cut..]] {
                r.push(chunk);
                while let Some(f) = r.next_frame() {
                    out.push(f);
                }
            }
            assert_eq!(
                out,
                [Bytes::copy_from_slice(&a), Bytes::copy_from_slice(&b)]
            );
            assert_eq!(r.leftover(), 0);
        }
        let mut r = Reframer::default();
        r.push(&a[..6]);
        assert_eq!(r.next_frame(), None);
        assert_eq!(r.leftover(), 6);
    }
}
