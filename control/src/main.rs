//! `fastpathd`: the DPDK fast-path packet processor daemon.

#![forbid(unsafe_code)]

mod cli;
mod daemon;
mod placement;
mod signals;

// Shared with the tests and the fuzz targets through the library target (src/lib.rs).
use control::{config, http, metrics, reload, tables};

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match cli::parse(&args) {
        Ok(cli::Command::Help) => {
            println!("{}", cli::USAGE);
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Version) => {
            println!("fastpathd {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Ok(cli::Command::Run(opts)) => ExitCode::from(daemon::run(opts)),
        Err(msg) => {
            eprintln!("fastpathd: {msg}\n\n{}", cli::USAGE);
            ExitCode::from(daemon::EXIT_USAGE)
        }
    }
}
