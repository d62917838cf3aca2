//! Flow-limit shedding (Linux's "rps: selective flow shedding during softnet overflow").
//!
//! When the socket a packet is headed for is at least half full, the RX lcore records the
//! packet's flow bucket in a ring of the last 256 such packets and counts it in a per-bucket
//! byte counter; a packet whose bucket then holds more than 128 of the last 256 is dropped
//! (`flow_limited`). One flow that exceeds what the consumer can serve is shed before it takes
//! the service down for everyone else, while flows below half the recent traffic pass.
//!
//! The table is per RX lcore (no sharing) and carries its own mask: a new table length is
//! applied by swapping in a whole new table, so the race Linux's review found (a global
//! length read apart from the table, then used as a mask on a table of another size) cannot
//! happen. Below half backlog the check costs one comparison the fanout makes anyway.

/// Packets remembered (a power of two).
pub const HISTORY: usize = 256;
/// A bucket holding more than this many of the last [`HISTORY`] packets is dropped.
pub const THRESHOLD: u8 = (HISTORY / 2) as u8;
/// Largest table length accepted.
pub const MAX_TABLE_LEN: u32 = 1 << 20;
/// Default table length (the kernel's `flow_limit_table_len`).
pub const DEFAULT_TABLE_LEN: u32 = 4096;

/// Marks an empty history slot.
const EMPTY: u32 = u32::MAX;

/// Where flow limiting applies, part of a config generation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowLimitConfig {
    /// Whether it is on at all.
    pub enabled: bool,
    /// Buckets per table (a power of two).
    pub table_len: u32,
    /// RX lcore slots that use it; `None`: every RX lcore.
    pub rx_slots: Option<Vec<usize>>,
}

impl Default for FlowLimitConfig {
    fn default() -> Self {
        FlowLimitConfig {
            enabled: true,
            table_len: DEFAULT_TABLE_LEN,
            rx_slots: None,
        }
    }
}

impl FlowLimitConfig {
    /// The table length RX lcore `slot` runs with, or `None` if the limit is off there.
    pub fn for_slot(&self, slot: usize) -> Option<u32> {
        let on = self.enabled && self.rx_slots.as_ref().is_none_or(|s| s.contains(&slot));
        on.then_some(self.table_len)
    }
}

/// One RX lcore's flow-limit table.
#[derive(Clone, Debug)]
pub struct FlowLimit {
    /// `table_len - 1`; lives with the table it masks.
    mask: u32,
    head: usize,
    history: Box<[u32; HISTORY]>,
    buckets: Box<[u8]>,
}

impl FlowLimit {
    /// A table of `table_len` buckets (a power of two, 1..=[`MAX_TABLE_LEN`]; validated by the
    /// config, clamped here).
    pub fn new(table_len: u32) -> Self {
        let len = table_len.clamp(1, MAX_TABLE_LEN).next_power_of_two();
        FlowLimit {
            mask: len - 1,
            head: 0,
            history: Box::new([EMPTY; HISTORY]),
            buckets: vec![0; len as usize].into(),
        }
    }

    /// Number of buckets.
    pub fn table_len(&self) -> u32 {
        self.mask + 1
    }

    /// Records a packet of flow `hash` sent to a socket at least half full; `true` if it must be
    /// dropped because its bucket holds more than half of the last 256 such packets.
    #[inline]
    pub fn over_limit(&mut self, hash: u32) -> bool {
        let new = hash & self.mask;
        let old = std::mem::replace(&mut self.history[self.head], new);
        self.head = (self.head + 1) & (HISTORY - 1);
        if old != EMPTY {
            let b = &mut self.buckets[old as usize];
            *b = b.saturating_sub(1);
        }
        let b = &mut self.buckets[new as usize];
        // 256 of 256 would overflow a byte: saturating keeps it above the threshold, and the
        // count heals as other flows replace it in the history.
        *b = b.saturating_add(1);
        *b > THRESHOLD
    }

    /// How many of the last 256 recorded packets fell into the bucket of `hash`.
    pub fn bucket(&self, hash: u32) -> u8 {
        self.buckets[(hash & self.mask) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_more_than_128_of_256() {
        let mut f = FlowLimit::new(4096);
        // 128 packets of flow 1 and 128 of others: exactly half is allowed.
        for i in 0..256u32 {
            let h = if i % 2 == 0 { 1 } else { 1000 + i };
            assert!(!f.over_limit(h), "packet {i}");
        }
        assert_eq!(f.bucket(1), 128);
        // The next packet of flow 1 replaces an "other" entry (the oldest is flow 1, then other):
        // history head is at slot 0, which holds flow 1, so its count stays at 128.
        assert!(!f.over_limit(1));
        assert_eq!(f.bucket(1), 128);
        // Now slot 1 (another flow) is replaced by flow 1: 129 of 256 -> dropped.
        assert!(f.over_limit(1));
        assert_eq!(f.bucket(1), 129);
    }

    #[test]
    fn a_dominant_flow_is_shed_and_others_pass() {
        let mut f = FlowLimit::new(64);
        let mut shed = 0;
        for i in 0..10_000u32 {
            // 50 small flows that all share bucket 1 of 64 (a quarter of the traffic), and a storm.
            let h = if i % 4 == 0 { (i % 50) * 64 + 1 } else { 0xdead_beef };
            let drop = f.over_limit(h);
            if h != 0xdead_beef {
                assert!(
                    !drop,
                    "a flow with a quarter of the traffic in one bucket is never shed"
                );
            } else if drop {
                shed += 1;
            }
        }
        assert!(shed > 7000, "the storm is shed: {shed}");
    }

    #[test]
    fn buckets_are_masked_by_the_tables_own_length() {
        let mut small = FlowLimit::new(16);
        assert_eq!(small.table_len(), 16);
        // Hashes that differ only above the mask share a bucket.
        for _ in 0..200 {
            small.over_limit(0x10);
            small.over_limit(0x20);
        }
        assert_eq!(small.bucket(0x30), small.bucket(0));
        assert!(small.bucket(0) > THRESHOLD);
        let big = FlowLimit::new(MAX_TABLE_LEN);
        assert_eq!(big.table_len(), MAX_TABLE_LEN);
        assert_eq!(FlowLimit::new(0).table_len(), 1);
    }

    #[test]
    fn counts_saturate_at_255_and_heal() {
        let mut f = FlowLimit::new(8);
        for _ in 0..1000 {
            assert!(f.over_limit(3) || f.bucket(3) <= THRESHOLD);
        }
        assert_eq!(f.bucket(3), 255);
        for i in 0..256u32 {
            f.over_limit(4 + (i % 2));
        }
        assert_eq!(f.bucket(3), 0);
        assert!(!f.over_limit(3));
        assert_eq!(f.bucket(3), 1);
    }
}
