//! DPDK's own log, routed into the application's sink.
//!
//! DPDK 22.11 on Linux writes every message to stdout and to syslog (its default stream is a
//! `fopencookie` stream doing both), so under journald each of its lines arrived twice, and at
//! no priority. [`route`] replaces that stream, before `rte_eal_init`, with one whose writes go
//! to a Rust callback together with the message's DPDK level (`rte_log_cur_msg_loglevel`): the
//! application logs them once, through its own logger, with the right priority. The same call
//! sets DPDK's global level, so one switch filters both; EAL's `--log-level` arguments still
//! refine it per log type.
//!
//! DPDK writes a message with one `vfprintf` then `fflush`; the stream is unbuffered, so glibc
//! hands the formatted message to the callback in one `write` (`fp_log_to` in the shim).

use std::ffi::c_char;
use std::sync::OnceLock;

/// A DPDK log level (`RTE_LOG_EMERG` = 1 ... `RTE_LOG_DEBUG` = 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Level(pub u32);

impl Level {
    /// `RTE_LOG_ERR`, and worse below it.
    pub const ERR: Level = Level(4);
    /// `RTE_LOG_WARNING`.
    pub const WARNING: Level = Level(5);
    /// `RTE_LOG_NOTICE`.
    pub const NOTICE: Level = Level(6);
    /// `RTE_LOG_INFO`.
    pub const INFO: Level = Level(7);
    /// `RTE_LOG_DEBUG`.
    pub const DEBUG: Level = Level(8);
}

/// Where DPDK's messages go: the level and one line (without its newline).
pub type Sink = fn(Level, &str);

static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends every later DPDK log message to `sink` (one call per line) and sets DPDK's global log
/// level to `level` (messages less severe are dropped inside DPDK, unformatted). Call once,
/// before `rte_eal_init`; a second call changes nothing and returns false.
pub fn route(sink: Sink, level: Level) -> bool {
    if SINK.set(sink).is_err() {
        return false;
    }
    // SAFETY: `on_message` is a valid callback for the program's lifetime; the shim keeps the
    // stream it makes open for good (DPDK holds it) and sets DPDK's global level.
    unsafe { dpdk_sys::fp_log_to(Some(on_message), level.0) == 0 }
}

/// The stream's write: `len` bytes of formatted text from the calling thread, at `level`.
extern "C" fn on_message(level: u32, text: *const c_char, len: usize) {
    if text.is_null() || len == 0 {
        return;
    }
    // SAFETY: the shim passes glibc's buffer of `len` readable bytes, valid for this call.
    let bytes = unsafe { std::slice::from_raw_parts(text as *const u8, len) };
    if let Some(sink) = SINK.get() {
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            sink(Level(level), line.trim_end());
        }
    }
}
