//! Reload outcomes and the published generation.

use super::*;

const CONFIG_RELOADS_TOTAL: Def = Def::counter(
    "fastpath_config_reloads_total",
    "Config reloads by result (success, failure).",
);
const CONFIG_GENERATION: Def = Def::gauge(
    "fastpath_config_generation",
    "The config generation published to the lcores.",
);
const CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS: Def = Def::gauge(
    "fastpath_config_last_reload_success_timestamp_seconds",
    "Unix time of the last successful config load (the start counts).",
);

/// Every family of this area.
pub(super) const FAMILIES: &[Def] = &[
    CONFIG_RELOADS_TOTAL,
    CONFIG_GENERATION,
    CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS,
];

/// This area's families and their samples.
pub(super) fn collect(x: &Scrape) -> Named {
    reload_families(x.sources)
}

/// Reload outcomes and the published generation.
fn reload_families(s: &Sources) -> Named {
    vec![
        (
            CONFIG_RELOADS_TOTAL,
            vec![
                (
                    vec![("result", "success".to_string())],
                    s.reload.success.load(Relaxed) as f64,
                ),
                (
                    vec![("result", "failure".to_string())],
                    s.reload.failure.load(Relaxed) as f64,
                ),
            ],
        ),
        (CONFIG_GENERATION, vec![(vec![], s.published.generation() as f64)]),
        (
            CONFIG_LAST_RELOAD_SUCCESS_TIMESTAMP_SECONDS,
            vec![(vec![], s.reload.last_success_seconds())],
        ),
    ]
}
