//! Signal handling: handlers only set flags (signal-hook's async-signal-safe registration);
//! the control loop acts on them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Flags set by signals.
#[derive(Clone, Default)]
pub struct Signals {
    stop: Arc<AtomicBool>,
    hup: Arc<AtomicBool>,
}

impl Signals {
    /// Registers SIGINT and SIGTERM (stop) and SIGHUP (reload request).
    pub fn install() -> std::io::Result<Signals> {
        let s = Signals::default();
        signal_hook::flag::register(signal_hook::consts::SIGINT, s.stop.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGTERM, s.stop.clone())?;
        signal_hook::flag::register(signal_hook::consts::SIGHUP, s.hup.clone())?;
        Ok(s)
    }

    /// Whether SIGINT or SIGTERM arrived.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Whether a SIGHUP arrived since the last call (clears it).
    pub fn take_hangup(&self) -> bool {
        self.hup.swap(false, Ordering::SeqCst)
    }
}
