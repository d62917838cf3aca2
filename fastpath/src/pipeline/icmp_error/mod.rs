//! ICMP and ICMPv6 error messages, rate limited before any work is spent on them (seed 000).
//!
//! This first part: the rate limiters (see [`limit`]).

pub mod limit;

pub use limit::{GlobalBucket, PeerTable};
