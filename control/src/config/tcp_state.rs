//! `[tcp_state]`: the RX lcores' TCP state table in front of the services with
//! `tcp_state = true` (`fastpath::pipeline::tcp_state`): its size, timeouts, learning window
//! and per-source SYN budget.

use super::errors::Errs;
use crate::locate::Seg::Key;
use fastpath::pipeline::conntrack::{MAX_ENTRIES, MIN_ENTRIES};
use serde::Deserialize;

/// `[tcp_state]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct TcpStateSection {
    entries: Option<i64>,
    handshake_timeout_s: Option<i64>,
    established_timeout_s: Option<i64>,
    closing_timeout_s: Option<i64>,
    learn_s: Option<i64>,
    syn_rate: Option<i64>,
    syn_burst: Option<i64>,
    syn_new_rate: Option<i64>,
    syn_new_burst: Option<i64>,
}

/// `[tcp_state]`, validated (absent keys: the defaults below).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpStateSettings {
    /// Entries per RX lcore (16 bytes each), fixed at start.
    pub entries: u32,
    /// Lifetime of a handshake's entry (and of a learned one not yet confirmed), seconds.
    pub handshake_timeout_s: u32,
    /// Idle timeout of an established flow, seconds.
    pub established_timeout_s: u32,
    /// Idle timeout after the client's FIN or RST, seconds.
    pub closing_timeout_s: u32,
    /// The learning window, seconds (0: none).
    pub learn_s: u32,
    /// SYNs a second a source may send, per RX lcore (0: no SYN budget).
    pub syn_rate: u32,
    /// SYNs a source may send at once.
    pub syn_burst: u32,
    /// SYNs a second all newcomer sources together may send, all RX lcores together.
    pub syn_new_rate: u32,
    /// Newcomers' SYNs at once, all RX lcores together.
    pub syn_new_burst: u32,
}

impl Default for TcpStateSettings {
    fn default() -> Self {
        TcpStateSettings {
            entries: 262_144,
            handshake_timeout_s: 10,
            // Above the two hours of RFC 1122 §4.2.3.6's keep-alive interval (Linux's default),
            // so a kept-alive idle connection is never forgotten.
            established_timeout_s: 7440,
            closing_timeout_s: 30,
            learn_s: 60,
            syn_rate: 200,
            syn_burst: 50,
            syn_new_rate: 20_000,
            syn_new_burst: 2000,
        }
    }
}

/// The most a timeout may be: a day.
const MAX_TIMEOUT_S: i64 = 86_400;
/// Highest SYN rate and burst accepted.
const MAX_RATE: i64 = 100_000_000;

/// Validates `[tcp_state]`.
pub(super) fn validate(raw: Option<TcpStateSection>, errs: &mut Errs) -> TcpStateSettings {
    let r = raw.unwrap_or_default();
    let d = TcpStateSettings::default();
    let mut num = |key: &'static str, v: Option<i64>, default: u32, lo: i64, hi: i64, what: &str| -> u32 {
        match v {
            None => default,
            Some(v) if (lo..=hi).contains(&v) => v as u32,
            Some(v) => {
                errs.add(
                    &[Key("tcp_state"), Key(key)],
                    format!("{v}: expected {what} from {lo} to {hi}"),
                );
                default
            }
        }
    };
    TcpStateSettings {
        entries: num(
            "entries",
            r.entries,
            d.entries,
            MIN_ENTRIES as i64,
            MAX_ENTRIES as i64,
            "entries per RX lcore",
        ),
        handshake_timeout_s: num(
            "handshake_timeout_s",
            r.handshake_timeout_s,
            d.handshake_timeout_s,
            1,
            600,
            "seconds",
        ),
        established_timeout_s: num(
            "established_timeout_s",
            r.established_timeout_s,
            d.established_timeout_s,
            1,
            MAX_TIMEOUT_S,
            "seconds",
        ),
        closing_timeout_s: num(
            "closing_timeout_s",
            r.closing_timeout_s,
            d.closing_timeout_s,
            1,
            MAX_TIMEOUT_S,
            "seconds",
        ),
        learn_s: num("learn_s", r.learn_s, d.learn_s, 0, MAX_TIMEOUT_S, "seconds"),
        syn_rate: num(
            "syn_rate",
            r.syn_rate,
            d.syn_rate,
            0,
            MAX_RATE,
            "SYNs a second (0: no budget)",
        ),
        syn_burst: num("syn_burst", r.syn_burst, d.syn_burst, 1, MAX_RATE, "SYNs"),
        syn_new_rate: num(
            "syn_new_rate",
            r.syn_new_rate,
            d.syn_new_rate,
            1,
            MAX_RATE,
            "SYNs a second",
        ),
        syn_new_burst: num("syn_new_burst", r.syn_new_burst, d.syn_new_burst, 1, MAX_RATE, "SYNs"),
    }
}
