//! `[lcores]`: which lcore does what.

use super::errors::Errs;
use super::port::PortConfig;
use crate::locate::Seg::{Index, Key};
use serde::Deserialize;
use std::collections::BTreeSet;

/// Highest lcore id DPDK 22.11 is built for (RTE_MAX_LCORE).
pub const MAX_LCORE: u32 = 128;

/// `[lcores]` as written.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct LcoresSection {
    rx: Vec<u32>,
    #[serde(default)]
    workers: Vec<u32>,
    idle_sleep_us: Option<u64>,
    mode: Option<String>,
}

/// `[lcores]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LcoreConfig {
    /// Lcores polling RX queues.
    pub rx: Vec<u32>,
    /// Lcores draining sockets.
    pub workers: Vec<u32>,
    /// Microseconds an idle loop sleeps per empty poll after 1024 empty polls in a row; 0 means
    /// pure busy polling.
    pub idle_sleep_us: u64,
    /// What RX lcores do with packets.
    pub mode: LcoreMode,
}

/// `[lcores] mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LcoreMode {
    /// `"pipeline"` (default): every stage runs on every packet.
    #[default]
    Pipeline,
    /// `"forward"`: RX to TX unchanged, no stage (`[[port]] forward_to` picks the TX port): the
    /// cost of the DPDK layer and the lcore loop alone, for benchmarks against dpdk-testpmd.
    Forward,
}

impl LcoreConfig {
    /// Every lcore with a role, ascending. The lowest becomes the EAL main lcore.
    pub fn all(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.rx.iter().chain(self.workers.iter()).copied().collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Lcores that own a TX queue on every port, in TX-queue order: RX lcores first, then
    /// workers. Lcore `transmitters()[i]` sends on queue `i` of each port.
    pub fn transmitters(&self) -> Vec<u32> {
        self.rx.iter().chain(self.workers.iter()).copied().collect()
    }
}

/// Validates `[lcores]`, defaults applied.
pub(super) fn validate(lc: LcoresSection, errs: &mut Errs) -> LcoreConfig {
    if lc.rx.is_empty() {
        errs.add(&[Key("lcores"), Key("rx")], "at least one RX lcore is needed");
    }
    let mut seen = BTreeSet::new();
    for (name, list) in [("rx", &lc.rx), ("workers", &lc.workers)] {
        for (i, &l) in list.iter().enumerate() {
            if l >= MAX_LCORE {
                errs.add(
                    &[Key("lcores"), Key(name), Index(i)],
                    format!("lcore {l}: expected an lcore id below {MAX_LCORE}"),
                );
            } else if !seen.insert(l) {
                errs.add(
                    &[Key("lcores"), Key(name), Index(i)],
                    format!("lcore {l} is listed twice: each lcore has exactly one role"),
                );
            }
        }
    }
    let lcores = LcoreConfig {
        mode: mode(lc.mode.as_deref(), errs),
        rx: lc.rx,
        workers: lc.workers,
        idle_sleep_us: lc.idle_sleep_us.unwrap_or(50),
    };
    if lcores.idle_sleep_us > 100_000 {
        errs.add(
            &[Key("lcores"), Key("idle_sleep_us")],
            "expected at most 100000 (0 = busy polling)",
        );
    }
    lcores
}

fn mode(text: Option<&str>, errs: &mut Errs) -> LcoreMode {
    match text {
        None | Some("pipeline") => LcoreMode::Pipeline,
        Some("forward") => LcoreMode::Forward,
        Some(m) => {
            errs.add(
                &[Key("lcores"), Key("mode")],
                format!("{m:?}: expected \"pipeline\" or \"forward\""),
            );
            LcoreMode::Pipeline
        }
    }
}

/// Every RX lcore needs an RX queue to poll (checked once the ports are known).
pub(super) fn check_rx_queues(lcores: &LcoreConfig, ports: &[PortConfig], errs: &mut Errs) {
    let total_rx_queues: usize = ports.iter().map(|p| p.rx_queues as usize).sum();
    if !ports.is_empty() && lcores.rx.len() > total_rx_queues {
        errs.add(
            &[Key("lcores"), Key("rx")],
            format!(
                "{} RX lcores but only {total_rx_queues} RX queues in all ports: every RX lcore needs a queue",
                lcores.rx.len()
            ),
        );
    }
}
