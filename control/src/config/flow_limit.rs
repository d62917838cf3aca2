//! `[flow_limit]`: shedding the heaviest flows when a socket is under pressure.

use super::errors::Errs;
use super::lcores::LcoreConfig;
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::flow_limit::{FlowLimitConfig, DEFAULT_TABLE_LEN, MAX_TABLE_LEN};
use serde::Deserialize;

/// `[flow_limit]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FlowLimitSection {
    enabled: Option<bool>,
    table_len: Option<i64>,
    lcores: Option<Vec<u32>>,
}

/// Validates `[flow_limit]`; its `lcores` become RX slots (indexes into `lcores.rx`).
pub(super) fn validate(raw: Option<FlowLimitSection>, lcores: &LcoreConfig, errs: &mut Errs) -> FlowLimitConfig {
    let fl = raw.unwrap_or_default();
    let len = fl.table_len.unwrap_or(DEFAULT_TABLE_LEN as i64);
    if len <= 0 || len > MAX_TABLE_LEN as i64 || (len as u64).count_ones() != 1 {
        errs.add(
            &[Key("flow_limit"), Key("table_len")],
            format!("{len}: expected a power of two from 1 to {MAX_TABLE_LEN} (2^20)"),
        );
    }
    let rx_slots = fl.lcores.map(|list| {
        let mut slots = Vec::new();
        for (i, l) in list.iter().enumerate() {
            match lcores.rx.iter().position(|r| r == l) {
                Some(slot) => slots.push(slot),
                None => errs.add(
                    &[Key("flow_limit"), Key("lcores"), Index(i)],
                    format!("lcore {l} is not an RX lcore (lcores.rx = {:?})", lcores.rx),
                ),
            }
        }
        slots
    });
    FlowLimitConfig {
        enabled: fl.enabled.unwrap_or(true),
        table_len: len.clamp(1, MAX_TABLE_LEN as i64) as u32,
        rx_slots,
    }
}
