//! `[control]`: how the control thread notices config changes, and where operators ask the
//! running daemon (`fastpathctl`).

use super::errors::Errs;
use crate::locate::Seg::Key;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `[control]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlSection {
    watch: Option<bool>,
    debounce_ms: Option<u64>,
    socket: Option<String>,
}

/// The longest debounce: a minute. Longer only hides that a change was made.
pub const MAX_DEBOUNCE_MS: u64 = 60_000;

/// Where the control socket is unless `[control] socket` says otherwise.
pub const DEFAULT_SOCKET: &str = "/run/fastpathd/control.sock";

/// The longest socket path: `sun_path` holds 108 bytes with the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// `[control]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// Reload when the file changes (SIGHUP always reloads).
    pub watch: bool,
    /// How long the file must stay unchanged before a change is read: configuration-management
    /// tools that write a file in several steps get one reload, of the last.
    pub debounce: Duration,
    /// The control socket's path (a relative one taken from the config's directory).
    pub socket: PathBuf,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            watch: true,
            debounce: Duration::from_millis(200),
            socket: PathBuf::from(DEFAULT_SOCKET),
        }
    }
}

/// `[control]` of a config in `dir`.
pub(super) fn validate(raw: Option<ControlSection>, dir: &Path, errs: &mut Errs) -> ControlConfig {
    let r = raw.unwrap_or_default();
    let d = ControlConfig::default();
    let ms = r.debounce_ms.unwrap_or(d.debounce.as_millis() as u64);
    if ms > MAX_DEBOUNCE_MS {
        errs.add(
            &[Key("control"), Key("debounce_ms")],
            format!("{ms} ms: at most {MAX_DEBOUNCE_MS} (a minute)"),
        );
    }
    let socket = match r.socket {
        None => d.socket,
        Some(s) => {
            let path = dir.join(&s);
            let len = path.as_os_str().len();
            if s.is_empty() || s.ends_with('/') || s.contains('\0') {
                errs.add(
                    &[Key("control"), Key("socket")],
                    format!("{s:?}: the path of a socket file, e.g. {DEFAULT_SOCKET:?}"),
                );
            } else if len > MAX_SOCKET_PATH {
                errs.add(
                    &[Key("control"), Key("socket")],
                    format!(
                        "{}: {len} bytes; a UNIX socket's path has at most {MAX_SOCKET_PATH}",
                        path.display()
                    ),
                );
            }
            path
        }
    };
    ControlConfig {
        watch: r.watch.unwrap_or(d.watch),
        debounce: Duration::from_millis(ms.min(MAX_DEBOUNCE_MS)),
        socket,
    }
}
