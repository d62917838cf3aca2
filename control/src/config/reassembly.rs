//! `[reassembly]`: the limits of IPv4 and IPv6 fragment reassembly.

use super::errors::Errs;
use crate::locate::Seg::Key;
use fastpath::pipeline::reasm::{Policy, ReasmConfig};
use serde::Deserialize;

/// `[reassembly]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ReassemblySection {
    policy: Option<String>,
    high_thresh_bytes: Option<i64>,
    timeout_ms: Option<i64>,
    max_fragments: Option<i64>,
    max_per_source: Option<i64>,
    max_datagrams: Option<i64>,
    buffers: Option<i64>,
}

/// Validates `[reassembly]`: the limits (reloadable) and the number of 64 KiB buffers (read at
/// start-up).
pub(super) fn validate(raw: Option<ReassemblySection>, errs: &mut Errs) -> (ReasmConfig, u32) {
    let r = raw.unwrap_or_default();
    let mut reassembly = ReasmConfig::default();
    let mut num = |key: &'static str, v: Option<i64>, lo: i64, hi: i64, what: &str| -> Option<i64> {
        let v = v?;
        if (lo..=hi).contains(&v) {
            Some(v)
        } else {
            errs.add(
                &[Key("reassembly"), Key(key)],
                format!("{v}: expected {what} from {lo} to {hi}"),
            );
            None
        }
    };
    if let Some(v) = num(
        "high_thresh_bytes",
        r.high_thresh_bytes,
        65536,
        1 << 30,
        "a number of bytes",
    ) {
        reassembly.high_thresh_bytes = v as usize;
    }
    if let Some(v) = num("timeout_ms", r.timeout_ms, 1, 600_000, "milliseconds") {
        reassembly.timeout_ns = v as u64 * 1_000_000;
    }
    if let Some(v) = num("max_fragments", r.max_fragments, 2, 1024, "fragments per datagram") {
        reassembly.max_fragments = v as usize;
    }
    if let Some(v) = num("max_per_source", r.max_per_source, 1, 65536, "datagrams per source") {
        reassembly.max_per_source = v as usize;
    }
    if let Some(v) = num("max_datagrams", r.max_datagrams, 1, 65536, "concurrent datagrams") {
        reassembly.max_datagrams = v as usize;
    }
    let buffers = num("buffers", r.buffers, 16, 65536, "64 KiB buffers").unwrap_or(256) as u32;
    if let Some(p) = r.policy {
        match Policy::from_label(&p) {
            Some(p) => reassembly.policy = p,
            None => {
                let all: Vec<_> = Policy::ALL.iter().map(|p| format!("\"{}\"", p.label())).collect();
                errs.add(
                    &[Key("reassembly"), Key("policy")],
                    format!("\"{p}\": expected one of {}", all.join(", ")),
                );
            }
        }
    }
    (reassembly, buffers)
}
