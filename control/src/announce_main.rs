//! `fastpathd-announce`: announces a node's service addresses through BIRD while fastpathd's
//! `/healthz` is good, withdraws them at the first failure. What it does and why:
//! `control/src/announce.rs`; how to deploy it: `docs/operating.md`, "Scale out".

#![forbid(unsafe_code)]

use clap::Parser;
use control::announce::{probe, Actuator, Bird, Gate, Health, Want};
use crossbeam_channel::RecvTimeoutError;
use signal_hook::consts::{SIGINT, SIGTERM};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Announce fastpathd's service routes through BIRD 2 while /healthz is good.
#[derive(Parser, Debug)]
#[command(
    name = "fastpathd-announce",
    version,
    after_help = "Polls GET /healthz every --interval-ms; the first bad answer (or --fall of them) runs \
`birdc -s SOCKET disable PROTOCOL` (for each --protocol), --rise good answers in a row run `enable`. Starts withdrawn. \
SIGTERM/SIGINT withdraw, then exit 0."
)]
struct Args {
    /// fastpathd's metrics endpoint ([metrics] listen).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:9464")]
    healthz: SocketAddr,
    /// BIRD's control socket.
    #[arg(long, value_name = "PATH", default_value = "/run/bird/bird.ctl")]
    bird_socket: PathBuf,
    /// The BIRD protocol that holds the service routes (a `protocol static`, declared
    /// `disabled`); repeat it for each (one per address family: fastpathd_vips6 for IPv6).
    #[arg(long, value_name = "NAME", default_value = "fastpathd_vips")]
    protocol: Vec<String>,
    /// The birdc binary.
    #[arg(long, value_name = "PATH", default_value = "birdc")]
    birdc: PathBuf,
    /// How often to ask /healthz.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    interval_ms: u64,
    /// How long one answer may take (connect included) before it counts as a failure.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    timeout_ms: u64,
    /// Good answers in a row before announcing.
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rise: u32,
    /// Bad answers in a row before withdrawing.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    fall: u32,
    /// Instead of birdc: a shell command that announces (FRR's vtysh, ExaBGP's pipe...); exit 0 is success.
    #[arg(long, value_name = "COMMAND", requires = "withdraw_command")]
    announce_command: Option<String>,
    /// Instead of birdc: a shell command that withdraws.
    #[arg(long, value_name = "COMMAND", requires = "announce_command")]
    withdraw_command: Option<String>,
    /// Withdraw once and exit (for ExecStopPost, or by hand).
    #[arg(long)]
    withdraw: bool,
}

fn log(msg: &str) {
    eprintln!("fastpathd-announce: {msg}");
}

fn main() -> ExitCode {
    let a = Args::parse();
    let bird = match (&a.announce_command, &a.withdraw_command) {
        (Some(up), Some(down)) => Actuator::Commands {
            announce: up.clone(),
            withdraw: down.clone(),
        },
        _ => Actuator::Bird(Bird {
            birdc: a.birdc.clone(),
            socket: a.bird_socket.clone(),
            protocols: a.protocol.clone(),
        }),
    };
    if a.withdraw {
        return match bird.apply(Want::Withdraw) {
            Ok(()) => {
                log(&format!("withdrawn ({})", bird.describe()));
                ExitCode::SUCCESS
            }
            Err(e) => {
                log(&format!("could not withdraw: {e}"));
                ExitCode::FAILURE
            }
        };
    }

    let (tx, rx) = crossbeam_channel::bounded(4);
    let mut signals = match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            log(&format!("cannot handle signals: {e}"));
            return ExitCode::FAILURE;
        }
    };
    std::thread::spawn(move || {
        for s in signals.forever() {
            let _ = tx.send(s);
        }
    });

    log(&format!(
        "watching http://{}/healthz every {} ms (rise {}, fall {}), switching {}",
        a.healthz,
        a.interval_ms,
        a.rise,
        a.fall,
        bird.describe()
    ));
    let interval = Duration::from_millis(a.interval_ms);
    let timeout = Duration::from_millis(a.timeout_ms);
    let mut gate = Gate::new(a.rise, a.fall);
    // What BIRD last confirmed, and the last problem logged (each logged once, not per poll).
    let mut applied: Option<Want> = None;
    let mut last_health: Option<Health> = None;
    let mut last_error: Option<String> = None;
    let mut next = Instant::now();
    loop {
        let h = probe(a.healthz, timeout);
        let want = gate.observe(&h);
        // Logged when it changes, not per poll (a stuck lcore's `for 0.7 s` grows every time).
        let shape = |h: &Health| match h {
            Health::Good => String::new(),
            Health::Bad(why) => why.chars().filter(|c| !c.is_ascii_digit()).collect(),
        };
        if last_health.as_ref().map(shape) != Some(shape(&h)) {
            match &h {
                Health::Good => log("fastpathd healthy"),
                Health::Bad(why) => log(&format!("fastpathd unhealthy: {why}")),
            }
            last_health = Some(h.clone());
        }
        // BIRD's state is applied on every poll: idempotent there, and a restarted BIRD (whose
        // config has the protocol disabled) gets the wanted state back within one interval.
        // Commands run when the wanted state changes, and again after a failure.
        if applied == Some(want) && !bird.reapply_each_poll() {
            // Nothing to do until the wanted state changes.
        } else {
            match bird.apply(want) {
                Ok(()) => {
                    if applied != Some(want) {
                        match want {
                            Want::Announce => log("announced"),
                            Want::Withdraw => log("withdrawn"),
                        }
                    }
                    applied = Some(want);
                    last_error = None;
                }
                Err(e) => {
                    if last_error.as_ref() != Some(&e) {
                        log(&format!("not applied, retrying at the next poll: {e}"));
                    }
                    applied = None;
                    last_error = Some(e);
                }
            }
        }
        next += interval;
        let now = Instant::now();
        if next < now {
            next = now;
        }
        match rx.recv_timeout(next - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(_) | Err(RecvTimeoutError::Disconnected) => {
                let r = bird.apply(Want::Withdraw);
                match &r {
                    Ok(()) => log("stopping: withdrawn"),
                    Err(e) => log(&format!("stopping: could not withdraw: {e}")),
                }
                return if r.is_ok() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                };
            }
        }
    }
}
