//! `[metrics]`: the Prometheus endpoint.

use super::errors::Errs;
use crate::locate::Seg::Key;
use serde::Deserialize;

/// `[metrics]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsSection {
    listen: Option<String>,
    enabled: Option<bool>,
}

/// Default `[metrics] listen`: loopback only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsConfig {
    /// Where `GET /metrics` and `GET /healthz` are served; `None` when disabled.
    pub listen: Option<std::net::SocketAddr>,
}

/// Validates `[metrics]` (absent: on, at [`DEFAULT_METRICS_LISTEN`]).
pub(super) fn validate(raw: Option<MetricsSection>, errs: &mut Errs) -> MetricsConfig {
    let m = raw.unwrap_or_default();
    let listen_text = m.listen.unwrap_or_else(|| DEFAULT_METRICS_LISTEN.to_string());
    let listen = match listen_text.parse::<std::net::SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.add(
                &[Key("metrics"), Key("listen")],
                format!("{listen_text:?}: expected ADDRESS:PORT, e.g. \"127.0.0.1:9464\" or \"[::1]:9464\""),
            );
            None
        }
    };
    MetricsConfig {
        listen: if m.enabled.unwrap_or(true) { listen } else { None },
    }
}
