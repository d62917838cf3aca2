//! `[conntrack]`: the tunnel services' connection table (its size, read at start-up, and its
//! timeouts) and the rate of ICMP errors forwarded to a flow's backend.

use super::errors::Errs;
use crate::locate::Seg::Key;
use fastpath::pipeline::conntrack::{ConntrackConfig, MAX_ENTRIES, MIN_ENTRIES};
use serde::Deserialize;

/// `[conntrack]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ConntrackSection {
    entries: Option<i64>,
    tcp_timeout_s: Option<i64>,
    tcp_closing_timeout_s: Option<i64>,
    udp_timeout_s: Option<i64>,
    unconfirmed_timeout_s: Option<i64>,
    icmp_per_sec: Option<i64>,
}

/// The most a timeout may be: a day.
const MAX_TIMEOUT_S: i64 = 86_400;

/// Validates `[conntrack]` (absent keys: [`ConntrackConfig::default`]).
pub(super) fn validate(raw: Option<ConntrackSection>, errs: &mut Errs) -> ConntrackConfig {
    let r = raw.unwrap_or_default();
    let mut c = ConntrackConfig::default();
    let mut num = |key: &'static str, v: Option<i64>, lo: i64, hi: i64, what: &str| -> Option<u32> {
        let v = v?;
        // 0 turns the table off; anything else is a size.
        if (lo..=hi).contains(&v) || (key == "entries" && v == 0) {
            Some(v as u32)
        } else {
            let zero = if key == "entries" { "0 (off) or " } else { "" };
            errs.add(
                &[Key("conntrack"), Key(key)],
                format!("{v}: expected {zero}{what} from {lo} to {hi}"),
            );
            None
        }
    };
    if let Some(v) = num(
        "entries",
        r.entries,
        MIN_ENTRIES as i64,
        MAX_ENTRIES as i64,
        "entries per worker",
    ) {
        c.entries = v;
    }
    if let Some(v) = num("tcp_timeout_s", r.tcp_timeout_s, 1, MAX_TIMEOUT_S, "seconds") {
        c.tcp_timeout_s = v;
    }
    if let Some(v) = num(
        "tcp_closing_timeout_s",
        r.tcp_closing_timeout_s,
        1,
        MAX_TIMEOUT_S,
        "seconds",
    ) {
        c.tcp_closing_timeout_s = v;
    }
    if let Some(v) = num("udp_timeout_s", r.udp_timeout_s, 1, MAX_TIMEOUT_S, "seconds") {
        c.udp_timeout_s = v;
    }
    if let Some(v) = num("unconfirmed_timeout_s", r.unconfirmed_timeout_s, 1, 600, "seconds") {
        c.unconfirmed_timeout_s = v;
    }
    if let Some(v) = num(
        "icmp_per_sec",
        r.icmp_per_sec,
        0,
        1_000_000,
        "messages a second (0: none forwarded)",
    ) {
        c.icmp_per_sec = v;
    }
    c
}
