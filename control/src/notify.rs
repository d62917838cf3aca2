//! The systemd notification protocol (`sd_notify(3)`): with `Type=notify` the unit is "started"
//! only once fastpathd says `READY=1` (every port up, every lcore launched), a reload is
//! bracketed by `RELOADING=1` ... `READY=1`, the stop says `STOPPING=1`, and with `WatchdogSec=`
//! the control thread sends `WATCHDOG=1` from its loop, so a control thread that hangs gets the
//! service restarted. Datagrams to `$NOTIFY_SOCKET` (a path, or `@name` in the abstract
//! namespace); without it every call does nothing. Never called on the packet path.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

/// Where notifications go, if anywhere.
pub struct Notifier {
    socket: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    /// Half of `$WATCHDOG_USEC`, when the watchdog is on.
    watchdog: Option<Duration>,
    last_ping: Instant,
}

impl Notifier {
    /// From the environment systemd gives a `Type=notify` service.
    pub fn from_env() -> Notifier {
        let socket = std::env::var_os("NOTIFY_SOCKET").and_then(|p| {
            use std::os::linux::net::SocketAddrExt;
            let p = p.to_string_lossy().into_owned();
            let addr = match p.strip_prefix('@') {
                Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?,
                None => std::os::unix::net::SocketAddr::from_pathname(&p).ok()?,
            };
            Some((UnixDatagram::unbound().ok()?, addr))
        });
        // Only for this process (systemd sets WATCHDOG_PID to the main PID).
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|&u| u > 0 && for_us)
            .map(|u| Duration::from_micros(u / 2));
        Notifier {
            socket,
            watchdog,
            last_ping: Instant::now(),
        }
    }

    fn send(&self, state: &str) {
        if let Some((s, addr)) = &self.socket {
            // A lost notification is systemd's to time out on; nothing to do here.
            let _ = s.send_to_addr(state.as_bytes(), addr);
        }
    }

    /// Started: every port and lcore is up.
    pub fn ready(&self) {
        self.send(&format!("READY=1\nMAINPID={}\nSTATUS=running", std::process::id()));
    }

    /// A reload begins (systemd shows the unit `reloading` until the next `READY=1`).
    pub fn reloading(&self) {
        self.send("RELOADING=1\nSTATUS=reloading");
    }

    /// A reload ended (applied or refused): running again, `status` says which.
    pub fn reloaded(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
    }

    /// Stopping.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping");
    }

    /// Called every control tick: pings the watchdog at half its period.
    pub fn tick(&mut self) {
        if let Some(every) = self.watchdog {
            if self.last_ping.elapsed() >= every {
                self.send("WATCHDOG=1");
                self.last_ping = Instant::now();
            }
        }
    }
}
