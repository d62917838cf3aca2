//! `[tcp_reset]`: the resets sent for TCP segments to a closed port, and their rate limits.

use super::errors::Errs;
use fastpath::pipeline::tcp_reset::TcpResetConfig;
use serde::Deserialize;

/// `[tcp_reset]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct TcpResetSection {
    enabled: Option<bool>,
    msgs_per_sec: Option<u32>,
    burst: Option<u32>,
    peer_interval_ms: Option<u32>,
    peer_burst: Option<u32>,
    peer_table_size: Option<u32>,
    exempt: Option<Vec<String>>,
}

/// Validates `[tcp_reset]` (absent keys: [`TcpResetConfig::default`]).
pub(super) fn validate(raw: Option<TcpResetSection>, errs: &mut Errs) -> TcpResetConfig {
    let r = raw.unwrap_or_default();
    let d = TcpResetConfig::default();
    let cfg = TcpResetConfig {
        enabled: r.enabled.unwrap_or(d.enabled),
        msgs_per_sec: r.msgs_per_sec.unwrap_or(d.msgs_per_sec),
        burst: r.burst.unwrap_or(d.burst),
        peer_interval_ms: r.peer_interval_ms.unwrap_or(d.peer_interval_ms),
        peer_burst: r.peer_burst.unwrap_or(d.peer_burst),
        peer_table_size: r.peer_table_size.map_or(d.peer_table_size, |v| v as usize),
        exempt: super::icmp::exempt_set("tcp_reset", r.exempt.as_deref().unwrap_or_default(), errs),
    };
    super::icmp::peer_limits(
        "tcp_reset",
        cfg.peer_table_size,
        cfg.peer_burst,
        cfg.peer_interval_ms,
        errs,
    );
    cfg
}
