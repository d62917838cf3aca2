//! Consistent backend choice: the lookup table of Maglev (Eisenbud et al., "Maglev: A Fast and
//! Reliable Software Network Load Balancer", NSDI 2016, §3.4).
//!
//! Every backend has a permutation of the table's M slots (M prime), drawn from two hashes of
//! its name: `offset = h1 % M`, `skip = h2 % (M − 1) + 1`, slot j of its preference list is
//! `(offset + j·skip) % M`. Backends take turns claiming their next preferred free slot until
//! the table is full. A flow's hash picks a slot, the slot a backend. So:
//! - nodes with the same backends build the same table, whatever else differs (the backends are
//!   sorted by name first, so not even their order in the file matters), and send every flow to
//!   the same backend with no shared state;
//! - removing a backend moves its flows and few others (each remaining backend keeps almost all
//!   its slots), adding one takes about 1/(N+1) of the slots;
//! - each backend gets M·wᵢ/Σw slots within one, so the load follows the weights.
//!
//! Weights: each turn a backend adds its weight to a credit and claims one slot per `w_max` of
//! credit (the paper's weighted variant spreads turns the same way). Weight 0, `drain`, or not
//! `up` (a failed health check) means no slot. The table is built on the control thread at load and reload and read by the workers
//! without a lock (an `Arc` in the published tables); a lookup is one multiply, one shift and
//! one load of a `u16`.
//!
//! The choice is stateless: draining a backend moves its flows at once, and only its flows. The
//! workers' connection tables (`conntrack.rs`) keep established flows on their backend across
//! such changes; `up = false` takes a backend's slots and its connections.

/// The table's size: a prime (so every skip generates a full permutation), the paper's default,
/// the same for every backend count, because a table of another size maps every hash anew.
/// 65537 slots of `u16` are 128 KiB, shared by the workers; up to ~650 backends keep 100 slots
/// each (load shares to ~1%).
pub const SIZE: usize = 65537;
/// The largest weight.
pub const MAX_WEIGHT: u32 = 1000;

/// One backend as the table sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// Its identity across nodes: the tunnel's name.
    pub name: String,
    /// Its share (0 to [`MAX_WEIGHT`]).
    pub weight: u32,
    /// Drained: no slot, whatever its weight.
    pub drain: bool,
    /// false: no slot, like drain; pinned connections move. Set by the control side's backend
    /// health checks (down), or by anything else that must take a backend out without a config
    /// edit; true otherwise.
    pub up: bool,
}

/// A built table: slot → index into the backends as given to [`Maglev::build`].
#[derive(Clone, PartialEq, Eq)]
pub struct Maglev {
    slots: Box<[u16]>,
    /// No backend has a slot (all drained, down or weight 0).
    empty: bool,
}

impl std::fmt::Debug for Maglev {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "Maglev({} slots{})",
            self.slots.len(),
            if self.empty { ", empty" } else { "" }
        )
    }
}

/// FNV-1a over `bytes` from `basis`, then splitmix64's finaliser (FNV alone mixes short
/// names' high bits poorly). Fixed here, not `std`'s hasher, which may change between Rust
/// releases: nodes running different builds must still agree.
fn name_hash(bytes: &[u8], basis: u64) -> u64 {
    let mut h = basis;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    super::icmp_error::limit::mix(h)
}

impl Maglev {
    /// Builds the table for `backends` (at most 65535). Deterministic: the same backends, in
    /// any order, give the same choice of backend (by name) for every hash.
    pub fn build(backends: &[Backend]) -> Maglev {
        assert!(backends.len() < u16::MAX as usize, "at most 65534 backends");
        let m = SIZE;
        // Sorted by name: the file's order does not matter across nodes.
        let mut order: Vec<usize> = (0..backends.len()).collect();
        order.sort_by(|&a, &b| backends[a].name.cmp(&backends[b].name));
        let live: Vec<usize> = order
            .into_iter()
            .filter(|&i| backends[i].up && !backends[i].drain && backends[i].weight > 0)
            .collect();
        const FREE: u16 = u16::MAX;
        let mut slots = vec![FREE; m].into_boxed_slice();
        if live.is_empty() {
            return Maglev { slots, empty: true };
        }
        let perm: Vec<(usize, usize)> = live
            .iter()
            .map(|&i| {
                let name = backends[i].name.as_bytes();
                let offset = (name_hash(name, 0xcbf2_9ce4_8422_2325) % m as u64) as usize;
                let skip = (name_hash(name, 0x6c62_272e_07bb_0142) % (m as u64 - 1)) as usize + 1;
                (offset, skip)
            })
            .collect();
        let w_max = live.iter().map(|&i| backends[i].weight).max().unwrap_or(1) as u64;
        let mut next = vec![0usize; live.len()];
        let mut credit = vec![0u64; live.len()];
        let mut filled = 0;
        'fill: loop {
            for (k, &i) in live.iter().enumerate() {
                credit[k] += backends[i].weight as u64;
                while credit[k] >= w_max {
                    credit[k] -= w_max;
                    let (offset, skip) = perm[k];
                    // Its next preferred slot that is still free (a full permutation: found
                    // within m steps while any slot is free).
                    let mut c = (offset + next[k] * skip) % m;
                    while slots[c] != FREE {
                        next[k] += 1;
                        c = (offset + next[k] * skip) % m;
                    }
                    slots[c] = i as u16;
                    next[k] += 1;
                    filled += 1;
                    if filled == m {
                        break 'fill;
                    }
                }
            }
        }
        Maglev { slots, empty: false }
    }

    /// The backend (an index into the slice given to [`Maglev::build`]) for a flow's 32-bit
    /// hash; `None` when no backend may take flows.
    #[inline]
    pub fn lookup(&self, hash: u32) -> Option<usize> {
        if self.empty {
            return None;
        }
        // Multiply-shift maps the hash onto [0, M) without a division.
        let slot = ((hash as u64 * self.slots.len() as u64) >> 32) as usize;
        Some(self.slots[slot] as usize)
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no backend may take flows.
    pub fn is_empty(&self) -> bool {
        self.empty
    }

    /// Slots per backend (by index), for the tests and the metrics.
    pub fn shares(&self, backends: usize) -> Vec<usize> {
        let mut v = vec![0; backends];
        if !self.empty {
            for &s in self.slots.iter() {
                v[s as usize] += 1;
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<Backend> {
        names
            .iter()
            .map(|n| Backend {
                name: n.to_string(),
                weight: 1,
                drain: false,
                up: true,
            })
            .collect()
    }

    /// 100,000 flow hashes, spread as the Toeplitz hash spreads distinct flows.
    fn flows() -> Vec<u32> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u32
            })
            .collect()
    }

    fn choose(t: &Maglev, b: &[Backend], flows: &[u32]) -> Vec<Option<String>> {
        flows.iter().map(|&h| t.lookup(h).map(|i| b[i].name.clone())).collect()
    }

    fn moved(a: &[Option<String>], b: &[Option<String>]) -> f64 {
        a.iter().zip(b).filter(|(x, y)| x != y).count() as f64 / a.len() as f64
    }

    #[test]
    fn the_size_is_a_prime() {
        assert!((2..=256).all(|d| !SIZE.is_multiple_of(d)));
    }

    /// The bounds: removing one of N moves at most 1/N + 2% of 100,000 flows, adding
    /// one at most 1/(N+1) + 2%, and every backend's load is within 5% of even.
    #[test]
    fn removing_or_adding_a_backend_moves_few_flows_and_load_is_even() {
        let f = flows();
        for n in [2usize, 3, 4, 5, 8, 10, 16, 32] {
            let names: Vec<String> = (0..n).map(|i| format!("backend-{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let all = named(&refs);
            let t = Maglev::build(&all);
            let before = choose(&t, &all, &f);
            // Load.
            for name in &names {
                let share = before.iter().filter(|c| c.as_deref() == Some(name)).count() as f64 / f.len() as f64;
                let even = 1.0 / n as f64;
                assert!(
                    (share - even).abs() <= 0.05 * even,
                    "n={n}: {name} has {share}, even is {even}"
                );
            }
            // Remove the middle one.
            let fewer: Vec<Backend> = all.iter().filter(|b| b.name != names[n / 2]).cloned().collect();
            let after = choose(&Maglev::build(&fewer), &fewer, &f);
            let m = moved(&before, &after);
            assert!(m <= 1.0 / n as f64 + 0.02, "n={n}: removing one moved {m}");
            let removed = m;
            // Add one.
            let mut more = all.clone();
            more.push(Backend {
                name: "backend-new".into(),
                weight: 1,
                drain: false,
                up: true,
            });
            let after = choose(&Maglev::build(&more), &more, &f);
            let m = moved(&before, &after);
            assert!(m <= 1.0 / (n + 1) as f64 + 0.02, "n={n}: adding one moved {m}");
            eprintln!(
                "n={n}: removing one moved {removed:.4} (1/n = {:.4}), adding one {m:.4} (1/(n+1) = {:.4})",
                1.0 / n as f64,
                1.0 / (n + 1) as f64
            );
        }
    }

    #[test]
    fn the_same_backends_in_any_order_choose_the_same_backend() {
        let f = flows();
        let a = named(&["b", "a", "c", "d"]);
        let b = named(&["d", "c", "b", "a"]);
        assert_eq!(choose(&Maglev::build(&a), &a, &f), choose(&Maglev::build(&b), &b, &f));
    }

    #[test]
    fn weights_set_the_shares_and_drain_empties_a_backend() {
        let mut b = named(&["x", "y", "z"]);
        b[0].weight = 3;
        let t = Maglev::build(&b);
        let s = t.shares(3);
        let m = t.len() as f64;
        assert!(((s[0] as f64 / m) - 0.6).abs() < 0.01, "{s:?}");
        assert!(((s[1] as f64 / m) - 0.2).abs() < 0.01, "{s:?}");
        // Drained: no slot, and only its flows move.
        let f = flows();
        let before = choose(&t, &b, &f);
        b[1].drain = true;
        let t2 = Maglev::build(&b);
        assert_eq!(t2.shares(3)[1], 0);
        let after = choose(&t2, &b, &f);
        // Its flows move, and few others (the weighted fill may shift a few slots).
        let y_share = before.iter().filter(|c| c.as_deref() == Some("y")).count() as f64 / f.len() as f64;
        assert!(moved(&before, &after) <= y_share + 0.02, "{}", moved(&before, &after));
        // Down (not up): no slot, exactly as drained, so the same flows move.
        b[1].drain = false;
        b[1].up = false;
        let t3 = Maglev::build(&b);
        assert_eq!(t3.shares(3)[1], 0);
        assert_eq!(choose(&t3, &b, &f), after, "down moves the flows drain moves");
        b[1].up = true;
        // Nobody left: no choice.
        for x in &mut b {
            x.drain = true;
        }
        let none = Maglev::build(&b);
        assert!(none.is_empty() && none.lookup(7).is_none());
    }
}
