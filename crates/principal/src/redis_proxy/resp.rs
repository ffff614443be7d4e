//! RESP framing of Argo CD's traffic with the `redis-protocol` crate: commands are decoded as
//! ranges into the read buffer (nothing is copied, a 25 MB `SET` bound for the hub Redis is
//! forwarded byte for byte), replies the proxy writes itself are encoded by the crate.

use redis_protocol::resp2::decode::decode_range;
use redis_protocol::resp2::types::{BorrowedFrame as Frame2, RangeFrame};
use redis_protocol::resp3::types::BorrowedFrame as Frame3;

/// One command read from Argo CD.
pub struct Command {
    /// Byte ranges of the arguments in the buffer (command name first).
    pub args: Vec<(usize, usize)>,
    /// Bytes the command took (its raw form is `buf[..len]`).
    pub len: usize,
}

/// The next complete command at the start of `buf` (`Ok(None)`: more bytes needed). Clients send
/// arrays of bulk strings (RESP2 framing, also in RESP3 mode).
pub fn next_command(buf: &[u8]) -> Result<Option<Command>, String> {
    let Some((frame, len)) = decode_range(buf).map_err(|e| format!("Protocol error: {e}"))? else {
        return Ok(None);
    };
    let RangeFrame::Array(items) = frame else {
        return Err("Protocol error: expected an array of bulk strings".into());
    };
    let mut args = Vec::with_capacity(items.len());
    for i in items {
        match i {
            RangeFrame::BulkString(r) | RangeFrame::SimpleString(r) => args.push(r),
            _ => return Err("Protocol error: expected an array of bulk strings".into()),
        }
    }
    Ok(Some(Command { args, len }))
}

fn encode2(f: &Frame2) -> Vec<u8> {
    let mut buf = vec![0u8; f.encode_len(false)];
    let n = redis_protocol::resp2::encode::encode_borrowed(&mut buf, f, false)
        .expect("buffer sized by encode_len");
    buf.truncate(n);
    buf
}

fn encode3(f: &Frame3) -> Vec<u8> {
    let mut buf = vec![0u8; f.encode_len(false)];
    let n = redis_protocol::resp3::encode::complete::encode_borrowed(&mut buf, f, false)
        .expect("buffer sized by encode_len");
    buf.truncate(n);
    buf
}

/// A GET hit: the value as a bulk string.
pub fn bulk(v: &[u8]) -> Vec<u8> {
    encode2(&Frame2::BulkString(v))
}

/// A GET miss: the null Redis itself sends (`_` in RESP3, `$-1` in RESP2), which Argo CD's
/// client reads as `redis.Nil`, i.e. a cache miss.
pub fn nil(resp3: bool) -> Vec<u8> {
    if resp3 {
        encode3(&Frame3::Null)
    } else {
        encode2(&Frame2::Null)
    }
}

/// An error reply (`-ERR <message>`; CR/LF in the message become spaces).
pub fn error(message: &str) -> Vec<u8> {
    let m = format!("ERR {}", message.replace(['\r', '\n'], " "));
    encode2(&Frame2::Error(&m))
}

/// A pub/sub frame `[kind, channel, last]`: a `>` push in RESP3 (what the peer always writes),
/// an array in RESP2.
fn pubsub(kind: &str, channel: &str, last: Result<i64, &[u8]>, resp3: bool) -> Vec<u8> {
    if resp3 {
        let last = match last {
            Ok(n) => Frame3::Number {
                data: n,
                attributes: None,
            },
            Err(b) => Frame3::BlobString {
                data: b,
                attributes: None,
            },
        };
        let data = [
            Frame3::BlobString {
                data: kind.as_bytes(),
                attributes: None,
            },
            Frame3::BlobString {
                data: channel.as_bytes(),
                attributes: None,
            },
            last,
        ];
        encode3(&Frame3::Push {
            data: &data,
            attributes: None,
        })
    } else {
        let last = match last {
            Ok(n) => Frame2::Integer(n),
            Err(b) => Frame2::BulkString(b),
        };
        let data = [
            Frame2::BulkString(kind.as_bytes()),
            Frame2::BulkString(channel.as_bytes()),
            last,
        ];
        encode2(&Frame2::Array(&data))
    }
}

/// The SUBSCRIBE confirmation (`count`: subscriptions of the connection).
pub fn subscribed(channel: &str, count: i64, resp3: bool) -> Vec<u8> {
    pubsub("subscribe", channel, Ok(count), resp3)
}

/// A published message: Argo CD's update notifications carry an empty payload (the only kind the
/// peer's agent forwards).
pub fn message(channel: &str, resp3: bool) -> Vec<u8> {
    pubsub("message", channel, Err(b""), resp3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_the_bytes_the_peer_and_redis_write() {
        // the peer's handleAgentSubscribe / handleInternalNotify, byte for byte
        let ch = "app|managed-resources|agent-managed_my-app|1.8.3";
        assert_eq!(
            subscribed(ch, 1, true),
            format!(">3\r\n$9\r\nsubscribe\r\n${}\r\n{ch}\r\n:1\r\n", ch.len()).into_bytes()
        );
        assert_eq!(
            message(ch, true),
            format!(">3\r\n$7\r\nmessage\r\n${}\r\n{ch}\r\n$0\r\n\r\n", ch.len()).into_bytes()
        );
        assert_eq!(
            message("c", false),
            b"*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$0\r\n\r\n".to_vec()
        );
        assert_eq!(bulk(b"hello"), b"$5\r\nhello\r\n".to_vec());
        assert_eq!(nil(false), b"$-1\r\n".to_vec());
        assert_eq!(nil(true), b"_\r\n".to_vec());
        assert_eq!(error("a\r\nb"), b"-ERR a  b\r\n".to_vec());
    }

    #[test]
    fn commands_are_framed_without_copying() {
        let raw = b"*2\r\n$3\r\nget\r\n$3\r\nkey\r\n*1\r\n$4\r\nPI";
        let c = next_command(raw).unwrap().unwrap();
        assert_eq!(c.len, 22);
        let args: Vec<&[u8]> = c.args.iter().map(|(s, e)| &raw[*s..*e]).collect();
        assert_eq!(args, vec![&b"get"[..], &b"key"[..]]);
        assert!(next_command(&raw[c.len..]).unwrap().is_none(), "incomplete");
        assert!(
            next_command(b"PING\r\n").is_err(),
            "inline commands are refused"
        );
    }
}
