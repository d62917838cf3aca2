//! `[control]`: how the control thread notices config changes.

use super::errors::Errs;
use crate::locate::Seg::Key;
use serde::Deserialize;
use std::time::Duration;

/// `[control]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ControlSection {
    watch: Option<bool>,
    debounce_ms: Option<u64>,
}

/// The longest debounce: a minute. Longer only hides that a change was made.
pub const MAX_DEBOUNCE_MS: u64 = 60_000;

/// `[control]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlConfig {
    /// Reload when the file changes (SIGHUP always reloads).
    pub watch: bool,
    /// How long the file must stay unchanged before a change is read: configuration-management
    /// tools that write a file in several steps get one reload, of the last.
    pub debounce: Duration,
}

impl Default for ControlConfig {
    fn default() -> Self {
        ControlConfig {
            watch: true,
            debounce: Duration::from_millis(200),
        }
    }
}

pub(super) fn validate(raw: Option<ControlSection>, errs: &mut Errs) -> ControlConfig {
    let r = raw.unwrap_or_default();
    let d = ControlConfig::default();
    let ms = r.debounce_ms.unwrap_or(d.debounce.as_millis() as u64);
    if ms > MAX_DEBOUNCE_MS {
        errs.add(
            &[Key("control"), Key("debounce_ms")],
            format!("{ms} ms: at most {MAX_DEBOUNCE_MS} (a minute)"),
        );
    }
    ControlConfig {
        watch: r.watch.unwrap_or(d.watch),
        debounce: Duration::from_millis(ms.min(MAX_DEBOUNCE_MS)),
    }
}
