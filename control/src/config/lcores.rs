//! `[lcores]`: which lcore does what.

use super::errors::Errs;
use super::port::PortConfig;
use crate::locate::Seg::{Index, Key};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

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
    idle_poll_us: Option<u64>,
    idle_wait_ms: Option<u64>,
    mode: Option<String>,
    cpus: Option<String>,
}

/// `[lcores] idle_poll_us` by default: long enough to bridge the gaps of traffic at 500
/// packets a second and more, so that a packet then finds its lcores polling instead of
/// paying for two wake-ups (docs/operating.md, "Idle lcores").
pub const DEFAULT_IDLE_POLL_US: u64 = 2_000;

/// Highest CPU id accepted in `[lcores] cpus` (the kernel's default `CPU_SETSIZE` is 1024).
pub const MAX_CPU: u32 = 1023;

/// `[lcores]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LcoreConfig {
    /// Lcores polling RX queues.
    pub rx: Vec<u32>,
    /// Lcores draining sockets.
    pub workers: Vec<u32>,
    /// Microseconds an idle loop sleeps per empty poll once it stops polling, where it has
    /// nothing to block on; 0 means pure busy polling (no sleep, no block, no yield).
    pub idle_sleep_us: u64,
    /// Microseconds a loop keeps polling after its last poll that received something, giving
    /// its CPU to any other ready task between empty polls, before it blocks or sleeps.
    pub idle_poll_us: u64,
    /// Milliseconds an idle loop blocks at most, after those polls, on what wakes it (its RX
    /// queues' wake-up fds, its doorbell); 0 means it never blocks (it sleeps `idle_sleep_us`).
    pub idle_wait_ms: u64,
    /// What RX lcores do with packets.
    pub mode: LcoreMode,
    /// `[lcores] cpus` as written (DPDK's `--lcores` syntax), if given.
    pub cpus: Option<String>,
    /// Every lcore with a role and the CPUs it may run on: from `cpus`, else lcore N on CPU N.
    pub placement: BTreeMap<u32, Vec<u32>>,
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

    /// The CPUs `lcores` run on, ascending, without repeats.
    pub fn cpus_of(&self, lcores: &[u32]) -> Vec<u32> {
        let set: BTreeSet<u32> = lcores
            .iter()
            .flat_map(|l| self.placement.get(l).cloned().unwrap_or_else(|| vec![*l]))
            .collect();
        set.into_iter().collect()
    }

    /// The EAL's lcore argument: `-l` with the lcore list when every lcore runs on the CPU of
    /// its number, else `--lcores` with each lcore's CPU set (`0@0,1@0,2@(2,3)`).
    pub fn eal_lcore_args(&self) -> [String; 2] {
        let all = self.all();
        if self.cpus.is_none() {
            let list = all.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(",");
            return ["-l".to_string(), list];
        }
        let elems = all
            .iter()
            .map(|l| match self.placement.get(l).map(Vec::as_slice) {
                Some([c]) => format!("{l}@{c}"),
                Some(set) => format!(
                    "{l}@({})",
                    set.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
                ),
                None => format!("{l}@{l}"),
            })
            .collect::<Vec<_>>()
            .join(",");
        ["--lcores".to_string(), elems]
    }

    /// Lcores that share a CPU with another lcore: (CPU, the lcores on it), ascending.
    pub fn shared_cpus(&self) -> Vec<(u32, Vec<u32>)> {
        let mut by_cpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (&l, cpus) in &self.placement {
            for &c in cpus {
                by_cpu.entry(c).or_default().push(l);
            }
        }
        by_cpu.into_iter().filter(|(_, ls)| ls.len() > 1).collect()
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
    let placement = placement(lc.cpus.as_deref(), &seen, errs);
    let lcores = LcoreConfig {
        mode: mode(lc.mode.as_deref(), errs),
        rx: lc.rx,
        workers: lc.workers,
        idle_sleep_us: lc.idle_sleep_us.unwrap_or(50),
        idle_poll_us: lc.idle_poll_us.unwrap_or(DEFAULT_IDLE_POLL_US),
        idle_wait_ms: lc.idle_wait_ms.unwrap_or(10),
        cpus: lc.cpus,
        placement,
    };
    for (cpu, ls) in lcores.shared_cpus() {
        errs.warn(
            &[Key("lcores"), Key(if lcores.cpus.is_some() { "cpus" } else { "rx" })],
            format!(
                "lcores {ls:?} share CPU {cpu}: fine for tests, but in production each lcore polls \
                 a CPU of its own (a busy-polling lcore takes the whole CPU from the others)"
            ),
        );
    }
    if lcores.idle_sleep_us > 100_000 {
        errs.add(
            &[Key("lcores"), Key("idle_sleep_us")],
            "expected at most 100000 (0 = busy polling)",
        );
    }
    if lcores.idle_poll_us > 100_000 {
        errs.add(
            &[Key("lcores"), Key("idle_poll_us")],
            "expected at most 100000 (0 = stop polling after idle_sleep_us of empty polls)",
        );
    }
    // The health check calls an lcore that has not polled for 500 ms stalled.
    if lcores.idle_wait_ms > 100 {
        errs.add(
            &[Key("lcores"), Key("idle_wait_ms")],
            "expected at most 100 (0 = never block, sleep idle_sleep_us instead)",
        );
    }
    lcores
}

/// Every lcore of `roles` and its CPUs: as `[lcores] cpus` maps it (DPDK's `--lcores` syntax:
/// elements `LCORES[@CPUS]` separated by commas, each set a number, a range `a-b` or a group
/// `(a,b-c)`; without `@` the lcores run on the CPUs of their own numbers), lcore N on CPU N
/// for the lcores it does not name. An lcore it names must have a role, and only once.
fn placement(text: Option<&str>, roles: &BTreeSet<u32>, errs: &mut Errs) -> BTreeMap<u32, Vec<u32>> {
    let mut out: BTreeMap<u32, Vec<u32>> = roles.iter().map(|&l| (l, vec![l])).collect();
    let Some(text) = text else {
        return out;
    };
    let path = [Key("lcores"), Key("cpus")];
    let elems = match parse_lcores_arg(text) {
        Ok(e) => e,
        Err(why) => {
            errs.add(
                &path,
                format!("{text:?}: {why}; expected DPDK's --lcores syntax, e.g. \"0@0,1@1,(2,3)@(2-3)\""),
            );
            return out;
        }
    };
    let mut named = BTreeSet::new();
    for (lcores, cpus) in elems {
        for l in lcores {
            if !roles.contains(&l) {
                errs.warn(
                    &path,
                    format!("lcore {l} has no role (not in lcores.rx or lcores.workers): its placement is ignored"),
                );
            } else if !named.insert(l) {
                errs.add(&path, format!("lcore {l} is placed twice"));
            } else if let Some(&c) = cpus.iter().find(|&&c| c > MAX_CPU) {
                errs.add(&path, format!("CPU {c}: expected a CPU id up to {MAX_CPU}"));
            } else {
                out.insert(l, cpus.clone());
            }
        }
    }
    out
}

/// One element of DPDK's `--lcores` argument: a set of lcores and the CPUs they may run on.
type Placed = (Vec<u32>, Vec<u32>);

/// Splits DPDK's `--lcores` argument into its elements.
fn parse_lcores_arg(text: &str) -> Result<Vec<Placed>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("empty".into());
    }
    while !rest.is_empty() {
        let (lcores, after) = take_set(rest)?;
        let (cpus, after) = match after.strip_prefix('@') {
            Some(a) => take_set(a)?,
            None => (lcores.clone(), after),
        };
        out.push((lcores, cpus));
        rest = match after.strip_prefix(',') {
            Some(a) if !a.is_empty() => a,
            Some(_) => return Err("a trailing comma".into()),
            None if after.is_empty() => after,
            None => return Err(format!("unexpected {:?}", after)),
        };
    }
    Ok(out)
}

/// One set at the start of `s`: `N`, `a-b` or `(items)`; the set (sorted, no repeats) and the
/// rest of `s`.
fn take_set(s: &str) -> Result<(Vec<u32>, &str), String> {
    let (body, rest) = match s.strip_prefix('(') {
        Some(inner) => {
            let end = inner.find(')').ok_or("an unclosed '('")?;
            (&inner[..end], &inner[end + 1..])
        }
        None => {
            let end = s.find([',', '@']).unwrap_or(s.len());
            (&s[..end], &s[end..])
        }
    };
    let mut set = BTreeSet::new();
    for item in body.split(',').map(str::trim) {
        let num = |t: &str| t.trim().parse::<u32>().map_err(|_| format!("{t:?} is not a number"));
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b || b - a > MAX_CPU {
                    return Err(format!("bad range {item:?}"));
                }
                set.extend(a..=b);
            }
            None => {
                set.insert(num(item)?);
            }
        }
    }
    Ok((set.into_iter().collect(), rest))
}

/// Checks the lcores' CPUs against the CPUs this process may use (`allowed`): a CPU the
/// machine lacks, or that the process may not run on, is refused (the EAL would fail to start).
pub(super) fn check_machine(lcores: &LcoreConfig, allowed: &[u32], errs: &mut Errs) {
    let key = if lcores.cpus.is_some() { "cpus" } else { "rx" };
    for (&l, cpus) in &lcores.placement {
        let missing: Vec<u32> = cpus.iter().copied().filter(|c| !allowed.contains(c)).collect();
        if !missing.is_empty() {
            errs.add(
                &[Key("lcores"), Key(key)],
                format!(
                    "lcore {l} would run on CPU(s) {missing:?}, which this machine lacks or this process may not use \
                     (allowed: {allowed:?}); map the lcores onto allowed CPUs with lcores.cpus, e.g. \"{l}@{}\"",
                    allowed.first().copied().unwrap_or(0)
                ),
            );
        }
    }
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
