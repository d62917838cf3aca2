//! `[metrics]`: the Prometheus endpoint.

use super::errors::Errs;
use crate::locate::Seg::Key;
use serde::Deserialize;
use std::time::Duration;

/// `[metrics]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct MetricsSection {
    listen: Option<String>,
    enabled: Option<bool>,
    cache_ms: Option<u64>,
    max_connections: Option<u64>,
}

/// Default `[metrics] listen`: loopback only.
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
/// Default `[metrics] cache_ms`.
pub const DEFAULT_METRICS_CACHE_MS: u64 = 500;
/// Default `[metrics] max_connections`.
pub const DEFAULT_METRICS_MAX_CONNECTIONS: usize = 16;

/// `[metrics]`.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricsConfig {
    /// Where `GET /metrics` and `GET /healthz` are served; `None` when disabled.
    pub listen: Option<std::net::SocketAddr>,
    /// How long a rendered `/metrics` body is served again before it is rendered anew (zero:
    /// every scrape renders).
    pub cache: Duration,
    /// Connections held at once; one more closes the one idle the longest.
    pub max_connections: usize,
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
    let cache_ms = m.cache_ms.unwrap_or(DEFAULT_METRICS_CACHE_MS);
    if cache_ms > 60_000 {
        errs.add(
            &[Key("metrics"), Key("cache_ms")],
            format!("{cache_ms}: expected 0 to 60000 (milliseconds; 0 renders every scrape)"),
        );
    }
    let max_connections = m.max_connections.unwrap_or(DEFAULT_METRICS_MAX_CONNECTIONS as u64);
    if !(1..=1024).contains(&max_connections) {
        errs.add(
            &[Key("metrics"), Key("max_connections")],
            format!("{max_connections}: expected 1 to 1024"),
        );
    }
    MetricsConfig {
        listen: if m.enabled.unwrap_or(true) { listen } else { None },
        cache: Duration::from_millis(cache_ms),
        max_connections: max_connections.clamp(1, 1024) as usize,
    }
}
