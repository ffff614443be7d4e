//! The peer's environment-only settings (argocd-agent internal/config/constants.go), read by the
//! principal, the agent and `ctl` alike, as the peer reads them (internal/env `NumWithDefault`:
//! Go's `strconv.ParseInt(v, 0, 32)` syntax):
//! * `ARGOCD_AGENT_KUBE_QPS` (100) / `ARGOCD_AGENT_KUBE_BURST` (300): the client-side rate limit
//!   of every Kubernetes client (internal/kube/client.go; client-go's token bucket, see
//!   [`crate::kube_client`]);
//! * `ARGOCD_AGENT_SEND_QUEUE_SIZE` / `ARGOCD_AGENT_RECV_QUEUE_SIZE` (1000 each, > 0): the bound of
//!   a send and a receive queue (internal/queue/queue.go `Create`).
//!
//! Unlike the peer, which logs a bad value and uses the default, a bad value stops the command
//! with an error naming the variable; an empty value counts as unset.

use anyhow::{anyhow, bail};

pub const KUBE_QPS: &str = "ARGOCD_AGENT_KUBE_QPS";
pub const KUBE_BURST: &str = "ARGOCD_AGENT_KUBE_BURST";
pub const SEND_QUEUE_SIZE: &str = "ARGOCD_AGENT_SEND_QUEUE_SIZE";
pub const RECV_QUEUE_SIZE: &str = "ARGOCD_AGENT_RECV_QUEUE_SIZE";

/// The peer's defaults (internal/kube/client.go).
pub const DEFAULT_KUBE_QPS: i64 = 100;
pub const DEFAULT_KUBE_BURST: i64 = 300;
/// client-go's `rest.DefaultQPS` / `rest.DefaultBurst`, used when QPS is set to 0.
const CLIENT_GO_DEFAULT_QPS: f64 = 5.0;
const CLIENT_GO_DEFAULT_BURST: i64 = 10;
/// The peer's `defaultMaxQueueSize` (internal/queue/queue.go).
pub const DEFAULT_RECV_QUEUE_SIZE: usize = 1000;

/// An integer in Go's `strconv.ParseInt(s, 0, 32)` syntax: optional sign, decimal, `0x` hex,
/// `0o` or leading-`0` octal, `0b` binary, `_` between digits; within 32 bits.
pub fn parse_go_int32(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = rest.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d.to_string(), true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d.to_string(), true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string(), true)
    } else {
        (10, lower, false)
    };
    // underscores only between digits (or right after a base prefix, as Go allows)
    let bad_underscore =
        digits.ends_with('_') || digits.contains("__") || (!prefixed && digits.starts_with('_'));
    let digits = digits.replace('_', "");
    if digits.is_empty() || bad_underscore {
        return None;
    }
    let v = i64::from_str_radix(&digits, radix).ok()?;
    let v = if neg { -v } else { v };
    (i64::from(i32::MIN)..=i64::from(i32::MAX))
        .contains(&v)
        .then_some(v)
}

/// `var` as an integer; `None` when unset or empty.
fn int_var(var: &str, what: &str) -> anyhow::Result<Option<i64>> {
    let Ok(v) = std::env::var(var) else {
        return Ok(None);
    };
    if v.trim().is_empty() {
        return Ok(None);
    }
    parse_go_int32(v.trim()).map(Some).ok_or_else(|| {
        anyhow!("{var}={v:?} is not an integer: set {what}, or unset {var} for the default")
    })
}

/// The client-side rate limit of the Kubernetes clients, as client-go derives it from QPS and
/// burst: `None` turns it off (a negative QPS).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KubeLimits {
    pub qps: f64,
    pub burst: u32,
}

/// [`KubeLimits`] from `qps` and `burst` (unset: the peer's 100 and 300) with client-go's rules:
/// QPS 0 is client-go's default of 5 per second (with burst 0: 10); a negative QPS means no
/// client-side limit; a positive QPS needs a positive burst (client-go refuses the client).
pub fn kube_limits_of(qps: Option<i64>, burst: Option<i64>) -> anyhow::Result<Option<KubeLimits>> {
    let qps = qps.unwrap_or(DEFAULT_KUBE_QPS);
    let burst = burst.unwrap_or(DEFAULT_KUBE_BURST);
    let (qps, burst) = match qps {
        q if q < 0 => return Ok(None),
        0 => (
            CLIENT_GO_DEFAULT_QPS,
            if burst == 0 {
                CLIENT_GO_DEFAULT_BURST
            } else {
                burst
            },
        ),
        q => (q as f64, burst),
    };
    if burst <= 0 {
        bail!(
            "{KUBE_BURST}={burst}: the burst must be greater than 0 while {KUBE_QPS} limits requests; set a positive burst (default {DEFAULT_KUBE_BURST}), or a negative {KUBE_QPS} to turn client-side throttling off"
        );
    }
    Ok(Some(KubeLimits {
        qps,
        burst: burst as u32,
    }))
}

/// [`kube_limits_of`] the environment.
pub fn kube_limits() -> anyhow::Result<Option<KubeLimits>> {
    kube_limits_of(
        int_var(
            KUBE_QPS,
            "the Kubernetes API requests per second (e.g. 100; negative: no limit)",
        )?,
        int_var(KUBE_BURST, "the Kubernetes API request burst (e.g. 300)")?,
    )
}

/// A queue size from `var` (`None`: unset); it must be greater than 0, as the peer's validator.
pub fn queue_size(var: &str) -> anyhow::Result<Option<usize>> {
    match int_var(var, "the number of events the queue holds (e.g. 1000)")? {
        None => Ok(None),
        Some(n) if n > 0 => Ok(Some(n as usize)),
        Some(n) => bail!("{var}={n}: queue size must be greater than 0"),
    }
}

/// The send queue's capacity: `--queue-capacity` (`flag`, described as `flag_desc`) or
/// `ARGOCD_AGENT_SEND_QUEUE_SIZE`, else `default`; both set to different values is an error
/// (one of them would be ignored).
pub fn send_queue_capacity(
    flag: Option<usize>,
    flag_desc: &str,
    default: usize,
) -> anyhow::Result<usize> {
    match (flag, queue_size(SEND_QUEUE_SIZE)?) {
        (Some(f), Some(e)) if f != e => bail!(
            "{flag_desc} ({f}) and {SEND_QUEUE_SIZE} ({e}) both set the send queue's capacity: set one of them"
        ),
        (Some(f), _) => Ok(f),
        (None, Some(e)) => Ok(e),
        (None, None) => Ok(default),
    }
}

/// The receive queue's bound (`ARGOCD_AGENT_RECV_QUEUE_SIZE`, default 1000).
pub fn recv_queue_size() -> anyhow::Result<usize> {
    Ok(queue_size(RECV_QUEUE_SIZE)?.unwrap_or(DEFAULT_RECV_QUEUE_SIZE))
}

/// Every variable of this module, checked at once (a command stops before it starts anything).
pub fn check() -> anyhow::Result<()> {
    kube_limits()?;
    queue_size(SEND_QUEUE_SIZE)?;
    recv_queue_size()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_integer_syntax() {
        for (s, v) in [
            ("100", Some(100)),
            ("+7", Some(7)),
            ("-1", Some(-1)),
            ("0", Some(0)),
            ("0x10", Some(16)),
            ("0X1f", Some(31)),
            ("010", Some(8)),
            ("0o17", Some(15)),
            ("0b101", Some(5)),
            ("1_000", Some(1000)),
            ("0x_ff", Some(255)),
            ("2147483647", Some(2147483647)),
            ("-2147483648", Some(-2147483648)),
            ("2147483648", None),
            ("1.5", None),
            ("abc", None),
            ("", None),
            ("-", None),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("09", None),
            (" 1", None),
        ] {
            assert_eq!(parse_go_int32(s), v, "{s:?}");
        }
    }

    #[test]
    fn limits_follow_client_go() {
        let l = |q, b| kube_limits_of(q, b);
        assert_eq!(
            l(None, None).unwrap(),
            Some(KubeLimits {
                qps: 100.0,
                burst: 300
            })
        );
        assert_eq!(
            l(Some(1), Some(1)).unwrap(),
            Some(KubeLimits { qps: 1.0, burst: 1 })
        );
        assert_eq!(l(Some(-1), Some(0)).unwrap(), None, "negative: no limit");
        assert_eq!(
            l(Some(0), Some(0)).unwrap(),
            Some(KubeLimits {
                qps: 5.0,
                burst: 10
            }),
            "client-go's DefaultQPS / DefaultBurst"
        );
        assert_eq!(
            l(Some(0), None).unwrap(),
            Some(KubeLimits {
                qps: 5.0,
                burst: 300
            })
        );
        let e = l(Some(10), Some(0)).unwrap_err().to_string();
        assert!(e.contains("ARGOCD_AGENT_KUBE_BURST=0"), "{e}");
        assert!(l(Some(10), Some(-3)).is_err());
    }
}
