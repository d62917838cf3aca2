//! Seeds from the OS's random source (`getrandom(2)`), drawn when an lcore's state is made,
//! never per packet. A seed anyone can know (a constant, an lcore's number) lets a sender predict
//! `fanout = "random"`, aim collisions at a keyed table or foresee a randomised eviction; so
//! every seed of per-lcore state comes from here, each lcore its own.

/// A `u64` from the OS's random source.
///
/// # Panics
///
/// If the OS gives no random bytes (Linux has `getrandom(2)` since 3.17, and the fallback is
/// `/dev/urandom`): the daemon calls [`check`] before it makes any lcore's state, so there it
/// never panics.
pub fn os_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Err(e) = getrandom::fill(&mut b) {
        panic!("the OS random source failed: {e}");
    }
    u64::from_ne_bytes(b)
}

/// Whether the OS's random source answers (what [`os_u64`] needs): an error says why not.
pub fn check() -> Result<(), String> {
    getrandom::fill(&mut [0u8; 8]).map_err(|e| format!("the OS random source failed: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64 draws, all distinct: a constant or a counter would not be (and two equal draws of 64
    /// random bits happen with probability below 2^-52).
    #[test]
    fn draws_differ() {
        check().unwrap();
        let mut v: Vec<u64> = (0..64).map(|_| os_u64()).collect();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), 64);
    }
}
