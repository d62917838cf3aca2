//! The parts of `fastpathd` other code needs too: the config parser, the builder of a
//! generation's runtime tables, and the metrics endpoint with its collector and the reload
//! counters it reads (here so the fuzz targets in `fuzz/` reach them without a socket). The
//! binary (`src/main.rs`) uses them from here; the capture corpus's in-process runner
//! (`tests/corpus.rs`) builds the same tables from the same config without DPDK rings.

#![forbid(unsafe_code)]

pub mod announce;
pub mod backends;
pub mod config;
pub mod ctl;
// Test-only (the fuzz targets and tests/fuzz_corpus.rs): feature "testing" keeps it out of the
// daemon.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod health;
pub mod http;
pub mod kernel_interface;
#[doc(hidden)]
pub mod locate;
pub mod metrics;
pub mod numa;
pub mod reload;
pub mod replay;
pub mod table_builder;
pub mod trace;
