//! Signals as control-plane messages: signal-hook's iterator (async-signal-safe: the handler
//! only writes to a self-pipe) runs on a thread of its own and sends each signal as a
//! [`ControlMsg`] on a bounded `crossbeam-channel`, which the control thread waits on between
//! its ticks. A SIGHUP is acted on as it arrives, not at the next tick, and nothing polls a flag.

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::time::Duration;

/// What the control thread is asked to do.
pub enum ControlMsg {
    /// Stop cleanly (the signal's name).
    Stop(&'static str),
    /// Reload the config (why: the signal's name).
    Reload(&'static str),
    /// `fastpathctl reload [--dry-run]`, from the control socket's thread: answered on its
    /// channel.
    Ctl(control::ctl::server::ReloadRequest),
}

/// The signal thread and the receiving end of its messages.
pub struct Signals {
    rx: Receiver<ControlMsg>,
    tx: Sender<ControlMsg>,
    handle: signal_hook::iterator::Handle,
}

impl Signals {
    /// Registers SIGINT and SIGTERM (stop) and SIGHUP (reload) and starts the thread that turns
    /// them into messages.
    pub fn install() -> std::io::Result<Signals> {
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
        let handle = signals.handle();
        // Signals that arrive while the control thread is busy wait here; a burst of more than
        // 64 SIGHUPs is one reload anyway, so a full channel drops the newest.
        let (tx, rx) = crossbeam_channel::bounded(64);
        let sender = tx.clone();
        std::thread::Builder::new().name("fp-signals".into()).spawn(move || {
            for s in signals.forever() {
                let msg = match s {
                    SIGHUP => ControlMsg::Reload("SIGHUP"),
                    SIGINT => ControlMsg::Stop("SIGINT"),
                    _ => ControlMsg::Stop("SIGTERM"),
                };
                // A stop always gets through: block for it, drop only surplus reloads.
                let sent = match msg {
                    ControlMsg::Stop(_) => tx.send(msg).is_ok(),
                    _ => !matches!(tx.try_send(msg), Err(crossbeam_channel::TrySendError::Disconnected(_))),
                };
                if !sent {
                    break;
                }
            }
        })?;
        Ok(Signals { rx, tx: sender, handle })
    }

    /// Hands the control socket's reload requests to the control thread on the same channel,
    /// never waiting: a full channel gives the request back.
    pub fn submitter(&self) -> control::ctl::server::Submit {
        let tx = self.tx.clone();
        Box::new(move |r| {
            tx.try_send(ControlMsg::Ctl(r)).map_err(|e| match e.into_inner() {
                ControlMsg::Ctl(r) => r,
                _ => unreachable!("only a request was sent"),
            })
        })
    }

    /// The receiving end, for the control thread.
    pub fn messages(&self) -> Messages {
        Messages { rx: self.rx.clone() }
    }
}

/// The control thread's end of the channel.
#[derive(Clone)]
pub struct Messages {
    rx: Receiver<ControlMsg>,
}

impl Messages {
    /// The next message, waiting at most `timeout`; `None` when none came.
    pub fn next(&self, timeout: Duration) -> Option<ControlMsg> {
        match self.rx.recv_timeout(timeout) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => None,
            // The signal thread is gone (it never returns normally): keep the tick's pace.
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(timeout);
                None
            }
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.handle.close();
    }
}
