//! Logging: one sink for fastpathd's messages and DPDK's, with levels, set by `--log-level`.
//!
//! - On a terminal or a pipe: plain lines on stderr, the message as it always read (tests and
//!   scripts grep `fastpathd: running`, `file:line: key: ...`), no timestamp or level column:
//!   whoever reads stderr has their own clock.
//! - Under systemd (stderr is the journal: `JOURNAL_STREAM` names stderr's device and inode, as
//!   `systemd.exec(5)` documents): native journald entries with their priority (`journalctl -p
//!   err` shows errors only), `SYSLOG_IDENTIFIER=fastpathd` and the target (`fastpathd` or
//!   `dpdk`) as a field. If the journal socket cannot be opened, plain lines.
//! - DPDK's log goes through the same sink, once (not also to syslog as DPDK does by default),
//!   at its own priority, filtered by the same level (see `fastpath::dpdk::log`).
//!
//! Nothing here is on the per-packet path: lcores do not log; what they count, the control
//! thread reports (at most once a second for the rate-limited events).

use crate::cli::LogLevel;
use fastpath::dpdk::log::Level as DpdkLevel;
use std::fmt;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The event target of DPDK's messages.
pub const DPDK_TARGET: &str = "dpdk";

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    }
}

/// DPDK's global level for `level`: the least severe DPDK level that is still logged.
pub fn dpdk_level(level: LogLevel) -> DpdkLevel {
    match level {
        LogLevel::Error => DpdkLevel::ERR,
        LogLevel::Warn => DpdkLevel::WARNING,
        LogLevel::Info => DpdkLevel::INFO,
        LogLevel::Debug | LogLevel::Trace => DpdkLevel::DEBUG,
    }
}

/// Whether stderr is connected to the journal (`JOURNAL_STREAM=<dev>:<inode>` of stderr).
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(v) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.split_once(':') else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// Plain lines: the message and any fields, nothing else.
struct Plain;

impl<S, N> FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Installs the logger at `level` and routes DPDK's log into it. Call once, first thing.
pub fn init(level: LogLevel) {
    let journal = if stderr_is_journal() {
        tracing_journald::layer()
            .ok()
            .map(|l| l.with_syslog_identifier("fastpathd".to_string()))
    } else {
        None
    };
    let plain = journal.is_none().then(|| {
        tracing_subscriber::fmt::layer()
            .event_format(Plain)
            .with_writer(std::io::stderr)
            .with_ansi(false)
    });
    let _ = tracing_subscriber::registry()
        .with(journal.with_filter(filter(level)))
        .with(plain.with_filter(filter(level)))
        .try_init();
    fastpath::dpdk::log::route(dpdk_sink, dpdk_level(level));
}

/// DPDK's messages, at their priority: EMERG..ERR are errors, WARNING warnings, NOTICE and INFO
/// information, DEBUG debug.
fn dpdk_sink(level: DpdkLevel, line: &str) {
    if level <= DpdkLevel::ERR {
        tracing::error!(target: DPDK_TARGET, "{line}");
    } else if level == DpdkLevel::WARNING {
        tracing::warn!(target: DPDK_TARGET, "{line}");
    } else if level <= DpdkLevel::INFO {
        tracing::info!(target: DPDK_TARGET, "{line}");
    } else {
        tracing::debug!(target: DPDK_TARGET, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_map_one_to_one() {
        assert_eq!(dpdk_level(LogLevel::Error), DpdkLevel::ERR);
        assert_eq!(dpdk_level(LogLevel::Warn), DpdkLevel::WARNING);
        assert_eq!(dpdk_level(LogLevel::Info), DpdkLevel::INFO);
        assert_eq!(filter(LogLevel::Warn), LevelFilter::WARN);
        assert!(filter(LogLevel::Trace) > filter(LogLevel::Debug));
    }

    #[test]
    fn journal_stream_must_name_stderr() {
        // Not set by `cargo test`, and a value naming another file is not stderr.
        std::env::set_var("JOURNAL_STREAM", "1:1");
        assert!(!stderr_is_journal());
        std::env::remove_var("JOURNAL_STREAM");
        assert!(!stderr_is_journal());
    }
}
