//! The fastpathd data plane.
//!
//! Layers never reach upward:
//! - [`wire`]: zero-copy views over header bytes and writers for what we emit (no DPDK, no state);
//! - [`buf`]: the [`buf::PacketBuf`] trait every stage works on, with a heap implementation for tests;
//! - [`pipeline`]: the per-packet stages. Each is a plain struct that takes `now` and returns a
//!   [`pipeline::Verdict`]; none reads a clock, allocates per packet or calls DPDK;
//! - [`ident`]: the IP identification of every packet an lcore originates;
//! - [`outcome`] and [`stats`]: the closed set of packet outcomes and the per-lcore counter blocks;
//! - [`seed`]: seeds for per-lcore state, from the OS's random source;
//! - [`rx`] and [`worker`]: the RX and worker engines, everything the lcores decide, generic over
//!   the buffer and their I/O (no DPDK);
//! - [`trace`]: the per-packet trace's records, filter and per-lcore ring (what the RX engine
//!   did with a packet and why);
//! - [`vnet`]: the virtio-net header of the kernel interface's own TAP backend, and its
//!   offloads on byte buffers: coalescing TCP segments into the kernel (GRO), cutting the
//!   kernel's large segments (TSO);
//! - [`socket`] and [`spsc`]: the sockets' queue abstraction, and the lock-free single-producer,
//!   single-consumer ring of words behind a socket fed by one RX lcore;
//! - [`dpdk`] (feature `dpdk`): the only module that touches `dpdk-sys` and mbufs — EAL, mempools,
//!   ports, the owned mbuf, bursts and lcore launch;
//! - [`runtime`] (feature `dpdk`): the lcore loops that glue the two together.

// The perimeter, held by the compiler: `unsafe` only in the DPDK layer (`dpdk/`, which allows it
// for itself), every public item documented, nothing `pub` that nobody outside can reach.
#![deny(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

pub mod buf;
// Test-only: what the fuzz targets, benches and corpus tests run; feature "testing" keeps it out
// of the daemon.
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod generation;
pub mod ident;
pub mod label;
pub mod outcome;
pub mod pipeline;
pub mod rx;
pub mod seed;
pub mod socket;
pub mod spsc;
pub mod stats;
pub mod trace;
pub mod tx;
pub mod vnet;
pub mod wire;
pub mod worker;

#[cfg(feature = "dpdk")]
#[allow(unsafe_code)]
pub mod dpdk;
#[cfg(feature = "dpdk")]
pub mod runtime;
