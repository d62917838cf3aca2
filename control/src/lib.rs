//! The parts of `fastpathd` other code needs too: the config parser and the builder of a
//! generation's runtime tables. The binary (`src/main.rs`) uses them from here; the capture
//! corpus's in-process runner (`tests/corpus.rs`) builds the same tables from the same config
//! without DPDK rings.

#![forbid(unsafe_code)]

pub mod config;
pub mod http;
#[doc(hidden)]
pub mod locate;
pub mod metrics;
pub mod reload;
pub mod tables;
