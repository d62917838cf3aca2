//! Per-source budgets in front of services' sockets (`[source_limit]`): each source (or its
//! prefix, `ipv4_prefix` / `ipv6_prefix`) known to the RX lcore gets a budget of its own,
//! `rate` packets a second and `burst` at once (GCRA, as the punt budget), so one client, or a
//! few, cannot take a socket from the rest.
//!
//! What a flood of spoofed sources does to such a table is the design's question: each new
//! address would get a fresh, full budget, and 100,000 sources sending a little each take the
//! socket anyway while pushing the real clients' state out. So the table only takes what is
//! already there and what it can afford:
//! - a source in the table is held to its own budget;
//! - a source not in it (a newcomer) is charged to one budget shared by every newcomer of the
//!   lcore (`new_rate`, `new_burst`): under a flood of fresh addresses the newcomers together
//!   get that much, and the sources that were there before keep theirs;
//! - a newcomer the shared budget admits takes a slot in its bucket of four only if one is free
//!   or idle for `idle_ms` (the longest idle first): an active source is never evicted, so the
//!   flood cannot push the real clients out (the reassembler's probation, applied to sources);
//! - and only while newcomers are few: their budget at least half unspent, and none refused for
//!   `calm_ms`. Under a flood the fresh addresses stay newcomers however often they come back,
//!   so the flood as a whole never gets more than the newcomers' budget; a pause in it (or the
//!   lcore's, on a shared CPU) refills the budget but does not end it, or a flood that stops for
//!   a tenth of a second now and then would enter half a burst of its sources each time (seen:
//!   8,192 spoofed sources all known within seconds). Clients that arrive during a flood share
//!   that budget with it (SYN cookies' trade, and their hold-down after an overflow: the ones
//!   known before keep their service).
//!
//! Per RX lcore: the table, its seed and the newcomer budget are the lcore's own; nothing is
//! shared for writing, nothing allocates after the table is made.

use super::kernel::PuntBudget;
use super::verdict::Instant;
use crate::stats::Counter;
use std::net::IpAddr;

/// Entries a bucket holds.
const WAYS: usize = 4;

/// `[source_limit]` as the lcores read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceLimitConfig {
    /// Off: nothing is asked.
    pub enabled: bool,
    /// A known source's budget (per RX lcore).
    pub per_source: PuntBudget,
    /// The newcomers' shared budget (this lcore's share).
    pub newcomers: PuntBudget,
    /// Sources are counted by prefixes of these lengths.
    pub ipv4_prefix: u8,
    /// As `ipv4_prefix`, for IPv6.
    pub ipv6_prefix: u8,
    /// Entries per RX lcore (a power of two, at least [`WAYS`]).
    pub entries: usize,
    /// An entry idle this long may be taken by a newcomer.
    pub idle_ns: u64,
    /// Newcomers are entered only when none was refused for this long.
    pub calm_ns: u64,
    /// By service index: whether the budgets apply to it (empty: to every service).
    pub services: Vec<bool>,
}

impl SourceLimitConfig {
    /// Whether service `svc`'s packets are held to the budgets.
    #[inline]
    pub fn applies(&self, svc: usize) -> bool {
        self.enabled && (self.services.is_empty() || self.services.get(svc).copied().unwrap_or(false))
    }
}

crate::label_set! {
    /// Why a packet was refused: the `reason` label.
    pub enum Refusal {
        /// Its source spent its own budget.
        OverBudget => "over_budget",
        /// A newcomer, and the newcomers' shared budget was spent.
        Newcomer => "newcomer",
    }
}

/// What the budgets refused, per RX lcore (each lcore writes its own slot).
#[derive(Debug, Default)]
pub struct SourceLimitCounters {
    /// By RX lcore slot, by [`Refusal`].
    pub rx: Box<[[Counter; 2]]>,
}

impl SourceLimitCounters {
    /// Zeroed counters for `rx` RX lcores.
    pub fn new(rx: usize) -> Self {
        SourceLimitCounters {
            rx: (0..rx).map(|_| [Counter::default(), Counter::default()]).collect(),
        }
    }

    /// Every lcore's count of `r`.
    pub fn total(&self, r: Refusal) -> u64 {
        self.rx.iter().map(|c| c[r as usize].get()).sum()
    }
}

/// One RX lcore's table of sources and their budgets.
#[derive(Clone, Debug)]
pub struct SourceTable {
    /// Keyed fingerprints of the sources' prefixes (0: empty).
    keys: Box<[u64]>,
    /// Each entry's GCRA theoretical arrival time.
    tat: Box<[u64]>,
    /// The newcomers' shared GCRA state.
    newcomer_tat: u64,
    /// When the newcomers' budget last refused one (0: never).
    newcomer_refused_at: u64,
    /// Keys the fingerprints (per lcore, from the OS): nobody can aim sources at one bucket.
    seed: u64,
}

impl SourceTable {
    /// The entries a table asked for `entries` has: rounded up to a power of two, at least
    /// [`WAYS`].
    pub fn entries_for(entries: usize) -> usize {
        entries.max(WAYS).next_power_of_two()
    }

    /// A table of [`SourceTable::entries_for`] `entries` keyed by `seed`.
    pub fn new(entries: usize, seed: u64) -> Self {
        let n = Self::entries_for(entries);
        SourceTable {
            keys: vec![0; n].into_boxed_slice(),
            tat: vec![0; n].into_boxed_slice(),
            newcomer_tat: 0,
            newcomer_refused_at: 0,
            seed: seed | 1,
        }
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never empty (at least [`WAYS`] entries).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Entries holding a source.
    pub fn used(&self) -> usize {
        self.keys.iter().filter(|&&k| k != 0).count()
    }

    fn fingerprint(&self, cfg: &SourceLimitConfig, src: IpAddr) -> u64 {
        let bits: u128 = match src {
            IpAddr::V4(a) => {
                let m = if cfg.ipv4_prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - cfg.ipv4_prefix.min(32) as u32)
                };
                (u32::from(a) & m) as u128 | 1 << 64
            }
            IpAddr::V6(a) => {
                let l = cfg.ipv6_prefix.min(128) as u32;
                let m = if l == 0 { 0 } else { u128::MAX << (128 - l) };
                u128::from(a) & m
            }
        };
        // Two rounds of multiply-xorshift over both halves, keyed: not cryptographic, but the
        // seed is secret and a collision only makes two sources share a budget.
        let mut h = (bits as u64) ^ self.seed;
        h = (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= (bits >> 64) as u64;
        h = (h ^ (h >> 32)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (h ^ (h >> 31)) | 1
    }

    /// Whether a packet from `src` may go on at `now`; its credit taken if so.
    #[inline]
    pub fn admit(&mut self, cfg: &SourceLimitConfig, src: IpAddr, now: Instant) -> Result<(), Refusal> {
        let key = self.fingerprint(cfg, src);
        let mask = self.keys.len() - 1;
        let base = (key as usize).wrapping_mul(WAYS) & mask;
        let now = now.0;
        let mut free: Option<usize> = None;
        let mut idlest: Option<(u64, usize)> = None;
        for i in base..base + WAYS {
            let k = self.keys[i];
            if k == key {
                return if gcra(&mut self.tat[i], cfg.per_source, now) {
                    Ok(())
                } else {
                    Err(Refusal::OverBudget)
                };
            }
            if k == 0 {
                free.get_or_insert(i);
            } else if self.tat[i].saturating_add(cfg.idle_ns) <= now && idlest.is_none_or(|(t, _)| self.tat[i] < t) {
                idlest = Some((self.tat[i], i));
            }
        }
        if !gcra(&mut self.newcomer_tat, cfg.newcomers, now) {
            self.newcomer_refused_at = now.max(1);
            return Err(Refusal::Newcomer);
        }
        // Entered into the table only while newcomers are few (their budget at least half
        // unspent, none refused for `calm_ns`): under a flood of fresh addresses none of them
        // becomes known, however often it comes back or pauses, and they go on sharing the
        // newcomers' budget.
        let calm = self.newcomer_tat.saturating_sub(now) <= cfg.newcomers.limit_ns / 2
            && (self.newcomer_refused_at == 0 || now.saturating_sub(self.newcomer_refused_at) >= cfg.calm_ns);
        if let Some(i) = free.or(idlest.map(|(_, i)| i)).filter(|_| calm) {
            self.keys[i] = key;
            self.tat[i] = 0;
            // The packet that admitted it is its first.
            let _ = gcra(&mut self.tat[i], cfg.per_source, now);
        }
        Ok(())
    }
}

/// GCRA (RFC 2697's intent, the punt budget's form): admit if the theoretical arrival time after
/// this packet is within the burst of `now`.
#[inline]
fn gcra(tat: &mut u64, b: PuntBudget, now: u64) -> bool {
    if b.cost_ns == 0 {
        return true;
    }
    let next = (*tat).max(now) + b.cost_ns;
    if next - now > b.limit_ns {
        return false;
    }
    *tat = next;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn cfg(rate: u32, burst: u32, new_rate: u32, new_burst: u32) -> SourceLimitConfig {
        SourceLimitConfig {
            enabled: true,
            per_source: PuntBudget::per_lcore(rate, burst, 1),
            newcomers: PuntBudget::per_lcore(new_rate, new_burst, 1),
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            entries: 1024,
            idle_ns: 1_000_000_000,
            calm_ns: 1_000_000_000,
            services: vec![],
        }
    }

    fn v4(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0xc633_6400 + i))
    }

    #[test]
    fn a_known_source_gets_its_burst_then_its_rate() {
        let c = cfg(1000, 10, 1_000_000, 1000);
        let mut t = SourceTable::new(c.entries, 7);
        let now = Instant(5_000_000_000);
        let ok = (0..20).filter(|_| t.admit(&c, v4(1), now).is_ok()).count();
        assert_eq!(ok, 10, "the burst");
        assert_eq!(t.admit(&c, v4(1), now), Err(Refusal::OverBudget));
        // 1000/s: one more every millisecond.
        assert!(t.admit(&c, v4(1), Instant(now.0 + 1_000_000)).is_ok());
        assert!(t.admit(&c, v4(2), now).is_ok(), "another source has its own");
    }

    #[test]
    fn prefixes_share_a_budget() {
        let mut c = cfg(1000, 5, 1_000_000, 1000);
        c.ipv4_prefix = 24;
        let mut t = SourceTable::new(c.entries, 7);
        let now = Instant(5_000_000_000);
        let ok = (0..10).filter(|&i| t.admit(&c, v4(i), now).is_ok()).count();
        assert_eq!(ok, 5, "one /24, one budget");
        c.ipv6_prefix = 48;
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:3::9".parse().unwrap();
        let ok = (0..10)
            .filter(|&i| t.admit(&c, if i % 2 == 0 { a } else { b }, now).is_ok())
            .count();
        assert_eq!(ok, 5, "one /48");
    }

    /// 100,000 spoofed sources, each new, against 50 clients known before the flood: the
    /// clients keep their whole budget, the flood gets the newcomers' budget and no more, and
    /// none of the clients' entries is taken.
    #[test]
    fn a_flood_of_new_sources_gets_the_newcomer_budget_and_evicts_nobody() {
        let c = cfg(100, 10, 1000, 100);
        let mut t = SourceTable::new(4096, 0x5eed);
        let mut now = 1_000_000_000u64;
        for i in 0..50 {
            assert!(t.admit(&c, v4(i), Instant(now)).is_ok());
        }
        let used_before = t.used();
        let (mut flood_in, mut legit_in, mut legit_sent) = (0, 0, 0);
        // One second: every 10 µs one spoofed packet (100,000 sources); every client sends 50.
        for step in 0..100_000u32 {
            now += 10_000;
            let spoofed = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + step * 7919));
            if t.admit(&c, spoofed, Instant(now)).is_ok() {
                flood_in += 1;
            }
            if step % 40 == 0 {
                let client = v4((step / 40) % 50);
                legit_sent += 1;
                if t.admit(&c, client, Instant(now)).is_ok() {
                    legit_in += 1;
                }
            }
        }
        assert_eq!(legit_in, legit_sent, "every client under its rate got through");
        // The newcomers' budget: 100 at once, 1000 a second.
        assert!(flood_in <= 1000 + 100 + 1, "{flood_in} of the flood admitted");
        assert!(flood_in >= 1000, "{flood_in}");
        for i in 0..50 {
            let key = t.fingerprint(&c, v4(i));
            assert!(t.keys.contains(&key), "client {i} evicted");
        }
        assert_eq!(t.used(), used_before, "no flood source became known");
    }

    /// A flood that pauses: 8,192 spoofed sources in pulses of 10 ms, 200 ms apart (each pause
    /// refills the newcomers' budget). With `calm_ns` none becomes known; without it (0) half a
    /// burst of them would at every pulse. Once the flood has been over for `calm_ns`, a new
    /// client is entered again.
    #[test]
    fn a_pausing_flood_enters_none_of_its_sources_until_it_has_been_over_for_calm() {
        let known_after = |calm_ns: u64| {
            let mut c = cfg(100, 10, 1000, 100);
            c.calm_ns = calm_ns;
            let mut t = SourceTable::new(65536, 0x5eed);
            let mut now = 1_000_000_000u64;
            for i in 0..50 {
                assert!(t.admit(&c, v4(i), Instant(now)).is_ok());
            }
            let mut n = 0u32;
            for _pulse in 0..40 {
                for _ in 0..10_000 {
                    now += 1_000;
                    let spoofed = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n % 8192));
                    let _ = t.admit(&c, spoofed, Instant(now));
                    n += 1;
                }
                now += 200_000_000;
            }
            (t.used() - 50, t, c, now)
        };
        let (entered, _, _, _) = known_after(0);
        assert!(
            entered >= 40 * 40,
            "without calm_ns the pauses enter the flood: {entered}"
        );
        let (entered, mut t, c, now) = known_after(1_000_000_000);
        assert_eq!(entered, 0, "a flood source became known");
        // Still within calm_ns of the last refusal (the last pulse ended 200 ms ago): a
        // newcomer passes on the newcomers' budget but is not entered ...
        assert!(t.admit(&c, v4(900), Instant(now)).is_ok());
        assert_eq!(t.used(), 50);
        // ... and is once the flood has been over for calm_ns.
        assert!(t.admit(&c, v4(901), Instant(now + 1_000_000_000)).is_ok());
        assert_eq!(t.used(), 51);
    }

    #[test]
    fn an_idle_entry_is_taken_and_an_active_one_is_not() {
        let c = cfg(1_000_000, 1000, 1_000_000, 1000);
        // One bucket: four entries.
        let mut t = SourceTable::new(WAYS, 1);
        let now = 10_000_000_000u64;
        for i in 0..4 {
            assert!(t.admit(&c, v4(i), Instant(now)).is_ok());
        }
        assert_eq!(t.used(), 4);
        // A fifth source passes (the newcomer budget) but takes no active entry.
        assert!(t.admit(&c, v4(9), Instant(now + 1)).is_ok());
        let k9 = t.fingerprint(&c, v4(9));
        assert!(!t.keys.contains(&k9));
        // Two seconds on, source 2 alone was active: the idlest other entry is taken.
        assert!(t.admit(&c, v4(2), Instant(now + 1_500_000_000)).is_ok());
        assert!(t.admit(&c, v4(9), Instant(now + 2_000_000_000)).is_ok());
        assert!(t.keys.contains(&k9));
        assert!(t.keys.contains(&t.fingerprint(&c, v4(2))), "the active one stays");
    }
}

/// The share of a service's socket its known clients keep under a flood of spoofed sources,
/// through the whole pipeline, measured in simulated time.
#[cfg(test)]
mod share_tests {
    use super::*;
    use crate::buf::HeapBuf;
    use crate::pipeline::fanout::{FanoutMode, Group};
    use crate::pipeline::parse::tests::{udp_bytes, v4_frame};
    use crate::pipeline::service::{Action, Service, ServiceTable};
    use crate::pipeline::{Pipeline, Tables, Verdict};
    use crate::socket::{SimQueue, Socket, SocketCounters};
    use crate::wire::IpProtocol;
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    const CAPACITY: usize = 256;
    /// Packets the worker takes from the socket a millisecond (50 kpps).
    const DRAIN: usize = 50;

    fn tables(limit: Option<SourceLimitConfig>) -> Arc<Tables> {
        let socket = Arc::new(Socket::new(
            "dns",
            0,
            SimQueue::new(CAPACITY),
            0,
            Arc::new(SocketCounters::new(1, 1)),
        ));
        let svc = Service {
            name: "dns".into(),
            protocol: IpProtocol::UDP,
            addresses: vec![],
            group: Group {
                sockets: vec![0],
                mode: FanoutMode::Hash,
                rollover: false,
                huge_flows: false,
                flow_limit: true,
            },
            action: Action::Sink,
            cost_ns: 0,
            echo_allow_low_ports: false,
        };
        Arc::new(Tables {
            generation: 1,
            ports: vec![crate::pipeline::tests::port()],
            services: ServiceTable::new(vec![(svc, vec![53])]),
            sockets: vec![socket],
            source_limit: limit.unwrap_or_default(),
            source_limit_counters: Arc::new(SourceLimitCounters::new(1)),
            ..Default::default()
        })
    }

    /// 20 clients at 1,000 packets a second each, known before the flood; then 2 s of a flood
    /// at 200,000 packets a second from 100,000 addresses (each sends 4). The socket's worker
    /// takes 50,000 a second: the clients' share of what they sent that reached the socket.
    fn clients_share(limit: Option<SourceLimitConfig>) -> f64 {
        let mut p = Pipeline::new(tables(limit), 0);
        let me = Ipv4Addr::new(192, 0, 2, 1);
        let frame = |src: Ipv4Addr, sport: u16| {
            HeapBuf::new(&v4_frame(src, me, IpProtocol::UDP, &[], 0, &udp_bytes(sport, 53, b"q")))
        };
        let mut backlog = 0usize;
        let (mut sent, mut got) = (0u64, 0u64);
        let mut spoofed = 0u32;
        for ms in 0..2100u64 {
            let now = crate::pipeline::Instant(1_000_000_000 + ms * 1_000_000);
            p.tables().sockets[0].queue(0).sim().unwrap().set_len(backlog);
            let flood = ms >= 100;
            for i in 0..20u32 {
                let mut b = frame(Ipv4Addr::from(0xc633_6400 + i), 5000 + i as u16);
                let v = p.process(0, &mut b, now);
                if flood {
                    sent += 1;
                    got += (v == Verdict::Deliver) as u64;
                }
                if flood {
                    for _ in 0..10 {
                        let src = Ipv4Addr::from(0x0a00_0000 + (spoofed % 100_000) * 97);
                        spoofed += 1;
                        let _ = p.process(0, &mut frame(src, 1024 + (spoofed % 60000) as u16), now);
                    }
                }
            }
            let staged: usize = p.staged().map(|(_, n)| n).sum();
            p.burst_done();
            backlog = (backlog + staged).min(CAPACITY).saturating_sub(DRAIN);
        }
        got as f64 / sent as f64
    }

    #[test]
    fn known_clients_keep_their_share_of_a_socket_under_a_many_source_flood() {
        let without = clients_share(None);
        let with = clients_share(Some(SourceLimitConfig {
            enabled: true,
            per_source: PuntBudget::per_lcore(2000, 200, 1),
            newcomers: PuntBudget::per_lcore(20_000, 2000, 1),
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            entries: 65536,
            idle_ns: 10_000_000_000,
            calm_ns: 10_000_000_000,
            services: vec![],
        }));
        eprintln!("clients' share under the flood: {without:.3} without [source_limit], {with:.3} with");
        assert!(without < 0.35, "the flood takes the socket without it: {without:.3}");
        assert!(with > 0.97, "the clients keep it with it: {with:.3}");
    }
}
