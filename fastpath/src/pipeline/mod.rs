//! The per-packet pipeline.
//!
//! It knows nothing of DPDK: it runs over any [`PacketBuf`] and is handed `now`, so every stage is
//! tested over heap buffers with simulated time. Each stage returns what happened to the packet as
//! a [`Verdict`] carrying exactly one [`Outcome`].
//!
//! Layout:
//! - the vocabulary every stage speaks, which stages import directly: `verdict` ([`Instant`],
//!   [`Verdict`]) and `tables` ([`PortAddrs`], [`Tables`]);
//! - the stages, each knowing only the vocabulary and the stages it calls: `parse`, `arp`,
//!   `echo`, `ndp`, `service`, `source`, `filter` (with `prefix`, its sets), `fanout`, `flow_limit`, `icmp_error`, `tunnel`, `reasm`, `kernel`;
//! - `explain`: what the tables would do with one flow, from the stages' own pure functions
//!   (no packet, no state: `fastpathctl flow`);
//! - the orchestrator, `process`: one lcore's [`Pipeline`], which calls the stages in order.
//!
//! This file only declares them and re-exports the names used elsewhere.
//!
//! [`PacketBuf`]: crate::buf::PacketBuf
//! [`Outcome`]: crate::outcome::Outcome

mod arp;
pub mod conntrack;
pub(crate) mod echo;
pub mod explain;
pub mod fanout;
pub mod filter;
pub mod flow_limit;
pub mod icmp_error;
pub mod kernel;
pub mod maglev;
pub(crate) mod ndp;
pub mod parse;
pub mod prefix;
mod process;
pub mod reasm;
pub mod service;
pub mod source;
pub mod source_limit;
mod tables;
pub mod tcp_reset;
pub mod tcp_state;
#[cfg(test)]
pub(crate) mod tests;
pub mod tunnel;
mod verdict;

pub use fanout::{Choice, FanoutMode, FanoutState, FlowHash, Group, HashOnDemand};
pub use parse::{FragmentInfo, IpVersion, Parsed};
pub use process::{Lead, Pipeline};
pub use service::{Action, Backends, Service, ServiceTable};
pub use tables::{PortAddrs, PortView, Tables};
pub use verdict::{Instant, Verdict};
