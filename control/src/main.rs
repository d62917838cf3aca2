//! `fastpathd`: the DPDK fast-path packet processor daemon.

#![forbid(unsafe_code)]

mod cli;
mod daemon;
mod logging;
mod notify;
mod placement;
mod signals;

// Shared with the tests and the fuzz targets through the library target (src/lib.rs).
use control::{config, http, metrics, reload, table_builder};

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let write = |bytes: &[u8]| {
        let _ = std::io::stdout().write_all(bytes);
        ExitCode::SUCCESS
    };
    match cli::parse(std::env::args_os()) {
        Ok(cli::Command::Version) => write(format!("{}\n", cli::version_text()).as_bytes()),
        Ok(cli::Command::Man) => write(&cli::man_page()),
        Ok(cli::Command::Completions(shell)) => write(&cli::completions(shell)),
        Ok(cli::Command::Run(opts, _)) if opts.explain.is_some() => {
            let clock = match opts.capture_time {
                true => control::replay::Clock::Capture,
                false => control::replay::Clock::Wall,
            };
            let idle = opts.exit_when_idle.map(|d| d.as_millis() as u64);
            let capture = opts.explain.as_deref().unwrap_or(std::path::Path::new(""));
            ExitCode::from(control::replay::explain(&opts.config, capture, opts.json, clock, idle))
        }
        Ok(cli::Command::Run(opts, level)) => {
            logging::init(level);
            ExitCode::from(daemon::run(opts))
        }
        // --help (exit 0) or a usage error (exit 2, daemon::EXIT_USAGE), printed by clap.
        Err(e) => {
            let _ = e.print();
            ExitCode::from(if e.use_stderr() { daemon::EXIT_USAGE } else { 0 })
        }
    }
}
