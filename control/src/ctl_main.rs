//! `fastpathctl`: asks the running fastpathd over its control socket (`control::ctl::client`).

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let (out, code) = control::ctl::client::run(std::env::args_os());
    // Errors (the daemon not there, usage) on stderr, answers on stdout.
    let _ = if code == control::ctl::client::EXIT_OK || code == control::ctl::client::EXIT_REFUSED {
        std::io::stdout().write_all(out.as_bytes())
    } else {
        std::io::stderr().write_all(out.as_bytes())
    };
    ExitCode::from(code)
}
