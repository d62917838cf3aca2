//! `[icmp]`: the rate limits of the ICMP errors we send.

use super::errors::Errs;
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::icmp_error::limit::MAX_PEER_TABLE_SIZE;
use fastpath::pipeline::icmp_error::{
    ExemptSet, ExemptWarning, IcmpConfig, MAX_EXEMPT, MAX_PEER_BURST, MAX_PEER_INTERVAL_MS,
};
use serde::Deserialize;

/// `[icmp]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct IcmpSection {
    ratemask: Option<u32>,
    msgs_per_sec: Option<u32>,
    burst: Option<u32>,
    peer_interval_ms: Option<u32>,
    peer_burst: Option<u32>,
    exempt: Option<Vec<String>>,
    peer_table_size: Option<u32>,
    build_first: Option<bool>,
}

/// Validates `[icmp]` (absent keys: Linux's defaults).
pub(super) fn validate(raw: Option<IcmpSection>, errs: &mut Errs) -> IcmpConfig {
    let ic = raw.unwrap_or_default();
    let mut icmp = IcmpConfig::default();
    macro_rules! set {
        ($f:ident) => {
            if let Some(v) = ic.$f {
                icmp.$f = v as _;
            }
        };
    }
    set!(ratemask);
    set!(msgs_per_sec);
    set!(burst);
    set!(peer_interval_ms);
    set!(peer_burst);
    set!(peer_table_size);
    if let Some(b) = ic.build_first {
        icmp.build_first = b;
    }
    icmp.exempt = exempt_set("icmp", ic.exempt.as_deref().unwrap_or_default(), errs);
    peer_limits(
        "icmp",
        icmp.peer_table_size,
        icmp.peer_burst,
        icmp.peer_interval_ms,
        errs,
    );
    icmp
}

/// `<section>.peer_table_size`, `peer_burst` and `peer_interval_ms` (`icmp`, `tcp_reset`):
/// the values the per-destination table can work with; the first one it cannot is reported.
pub(super) fn peer_limits(section: &'static str, table_size: usize, burst: u32, interval_ms: u32, errs: &mut Errs) {
    let (key, message) = if !table_size.is_power_of_two() || table_size > MAX_PEER_TABLE_SIZE {
        (
            "peer_table_size",
            format!("{table_size} is not a power of two between 1 and {MAX_PEER_TABLE_SIZE}"),
        )
    } else if burst == 0 || burst > MAX_PEER_BURST {
        ("peer_burst", format!("{burst} is not between 1 and {MAX_PEER_BURST}"))
    } else if interval_ms > MAX_PEER_INTERVAL_MS {
        (
            "peer_interval_ms",
            format!("{interval_ms} is more than {MAX_PEER_INTERVAL_MS}"),
        )
    } else {
        return;
    };
    errs.add(&[Key(section), Key(key)], message);
}

/// `<section>.exempt` (`icmp`, `tcp_reset`): at most [`MAX_EXEMPT`] prefixes, built into the
/// set the RX lcores search; a repeated prefix and `0.0.0.0/0` / `::/0` are accepted with a
/// warning.
pub(super) fn exempt_set(section: &'static str, list: &[String], errs: &mut Errs) -> ExemptSet {
    if list.len() > MAX_EXEMPT {
        errs.add(
            &[Key(section), Key("exempt")],
            format!("{} prefixes: at most {MAX_EXEMPT}", list.len()),
        );
        return ExemptSet::default();
    }
    let mut prefixes = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        match e.parse() {
            Ok(prefix) => prefixes.push(prefix),
            Err(err) => errs.add(
                &[Key(section), Key("exempt"), Index(i)],
                format!("{e:?}: {err}: expected a prefix like \"198.51.100.0/24\" or \"2001:db8:1::/48\""),
            ),
        }
    }
    if prefixes.len() == list.len() {
        for w in ExemptSet::warnings(&prefixes) {
            match w {
                ExemptWarning::Duplicate(i, first) => errs.warn(
                    &[Key(section), Key("exempt"), Index(i)],
                    format!("{}: listed twice (also at {section}.exempt[{first}])", prefixes[i]),
                ),
                ExemptWarning::Everything(i) => errs.warn(
                    &[Key(section), Key("exempt"), Index(i)],
                    format!(
                        "{}: every source of the family skips every {} rate limit",
                        prefixes[i],
                        if section == "icmp" { "ICMP" } else { "reset" }
                    ),
                ),
            }
        }
    }
    match ExemptSet::new(prefixes) {
        Ok(set) => set,
        Err(e) => {
            errs.add(&[Key(section), Key("exempt")], e.to_string());
            ExemptSet::default()
        }
    }
}
