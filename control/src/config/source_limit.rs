//! `[source_limit]`: per-source budgets in front of services' sockets
//! (`fastpath::pipeline::source_limit`).

use super::errors::Errs;
use super::service::ServiceConfig;
use crate::locate::Seg::{Index, Key};
use serde::Deserialize;

/// Highest rate and burst accepted (packets).
const MAX: i64 = 100_000_000;
/// Most entries per RX lcore: 16 M (256 MiB of table each).
const MAX_ENTRIES: i64 = 1 << 24;

/// `[source_limit]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SourceLimitSection {
    rate: Option<i64>,
    burst: Option<i64>,
    new_rate: Option<i64>,
    new_burst: Option<i64>,
    ipv4_prefix: Option<i64>,
    ipv6_prefix: Option<i64>,
    entries: Option<i64>,
    idle_ms: Option<i64>,
    calm_ms: Option<i64>,
    services: Option<Vec<String>>,
}

/// `[source_limit]`, validated (present: on).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct SourceLimitConfig {
    /// The section is there.
    pub enabled: bool,
    /// Packets a second a source may send, per RX lcore.
    pub rate: u32,
    /// Packets a source may send at once.
    pub burst: u32,
    /// Packets a second all newcomers together may send, all RX lcores together.
    pub new_rate: u32,
    /// Newcomers' packets at once, all RX lcores together.
    pub new_burst: u32,
    /// Sources are counted by IPv4 prefixes of this length.
    pub ipv4_prefix: u8,
    /// ... and IPv6 prefixes of this length.
    pub ipv6_prefix: u8,
    /// Table entries per RX lcore (a power of two).
    pub entries: u32,
    /// An entry idle this long may be taken by a newcomer.
    pub idle_ms: u32,
    /// Newcomers are entered into the table only when none was refused for this long.
    pub calm_ms: u32,
    /// The services it applies to (empty: every service).
    pub services: Vec<String>,
}

fn num(v: Option<i64>, default: i64, lo: i64, hi: i64, key: &'static str, what: &str, errs: &mut Errs) -> i64 {
    let x = v.unwrap_or(default);
    if x < lo || x > hi {
        errs.add(
            &[Key("source_limit"), Key(key)],
            format!("{x}: {what} from {lo} to {hi}"),
        );
        return default;
    }
    x
}

/// Validates `[source_limit]` against the services (each name in `services` must be one).
pub(super) fn validate(
    raw: Option<SourceLimitSection>,
    services: &[ServiceConfig],
    errs: &mut Errs,
) -> SourceLimitConfig {
    let Some(r) = raw else {
        return SourceLimitConfig::default();
    };
    let rate = num(r.rate, 1000, 1, MAX, "rate", "packets a second", errs) as u32;
    let burst = num(r.burst, (rate as i64 / 10).max(10), 1, MAX, "burst", "packets", errs) as u32;
    let new_rate = num(r.new_rate, 10_000, 1, MAX, "new_rate", "packets a second", errs) as u32;
    let new_burst = num(r.new_burst, 1000, 1, MAX, "new_burst", "packets", errs) as u32;
    let ipv4_prefix = num(r.ipv4_prefix, 32, 8, 32, "ipv4_prefix", "a prefix length", errs) as u8;
    let ipv6_prefix = num(r.ipv6_prefix, 64, 16, 128, "ipv6_prefix", "a prefix length", errs) as u8;
    let entries = num(r.entries, 65536, 16, MAX_ENTRIES, "entries", "entries", errs);
    if entries.count_ones() != 1 {
        errs.add(
            &[Key("source_limit"), Key("entries")],
            format!("{entries}: a power of two"),
        );
    }
    let idle_ms = num(r.idle_ms, 10_000, 1, 3_600_000, "idle_ms", "milliseconds", errs) as u32;
    let calm_ms = num(r.calm_ms, 10_000, 0, 3_600_000, "calm_ms", "milliseconds", errs) as u32;
    let names = r.services.unwrap_or_default();
    for (i, n) in names.iter().enumerate() {
        if !services.iter().any(|s| &s.name == n) {
            errs.add(
                &[Key("source_limit"), Key("services"), Index(i)],
                format!("{n:?} is no [[service]]"),
            );
        }
    }
    SourceLimitConfig {
        enabled: true,
        rate,
        burst,
        new_rate,
        new_burst,
        ipv4_prefix,
        ipv6_prefix,
        entries: entries as u32,
        idle_ms,
        calm_ms,
        services: names,
    }
}
