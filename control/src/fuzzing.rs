//! What the control fuzz targets (`control/fuzz/`) run, shared with the test that replays their
//! corpora on stable (`tests/fuzz_corpus.rs`). Not part of the daemon's API.

use crate::http::{self, HttpStats, Limits};
use crate::metrics::{self, Sources};
use crate::reload::ReloadStats;
use fastpath::generation::Published;
use fastpath::pipeline::Tables;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `data` as a config file: text as is, or, if it is not UTF-8 (which reading a file refuses
/// before parsing), its lossy conversion. Never panics; every error names a line of the text
/// (1 to its line count, plus one for an error at the very end) and renders. Returns `valid`,
/// or `line<N>` for the first error's line.
pub fn config_one(data: &[u8]) -> String {
    let src = String::from_utf8_lossy(data);
    let lines = src.lines().count().max(1);
    match crate::config::parse_checked(&src, "fuzz.toml") {
        Ok(loaded) => {
            let _ = loaded.warnings.to_string();
            "valid".into()
        }
        Err(e) => {
            assert!(!e.errors.is_empty(), "an error without errors");
            for err in &e.errors {
                let line = err.line.unwrap_or_else(|| panic!("an error without a line: {err:?}"));
                assert!((1..=lines + 1).contains(&line), "line {line} of {lines}: {err:?}");
            }
            assert!(e.to_string().starts_with("fuzz.toml:"), "{e}");
            format!("line{}", e.errors[0].line.unwrap_or(0))
        }
    }
}

/// A registry and sources with nothing in them but the endpoint's own counters: what
/// [`http_exchange`] serves.
pub fn http_sources() -> (prometheus::Registry, Arc<Sources>) {
    let sources = Arc::new(Sources {
        port_names: vec![],
        port_info: vec![],
        lcores: vec![],
        dpdk_version: "fuzz".into(),
        start_time: 0.0,
        tsc_hz: 1,
        mbufs_in_use: Box::new(|| 0),
        mbufs_capacity: 0,
        port_stats: Box::new(|_| None),
        port_xstats: Box::new(|_| Vec::new()),
        published: Arc::new(Published::new(Arc::new(Tables::default()))),
        reload: Arc::new(ReloadStats::default()),
        http: Arc::new(HttpStats::default()),
        health: Arc::new(crate::health::Health::always_ok()),
        backends: Arc::default(),
    });
    (metrics::registry(sources.clone()), sources)
}

/// `data` as everything a client sends on one connection to the metrics endpoint (then, a
/// while later, it closes its side), served by [`http::serve_stream`] over an in-memory stream on `rt`, a
/// current-thread runtime with time enabled (paused, in the fuzz target and the test, so the
/// gap between answers costs no wall time). Returns what the endpoint sent. The connection
/// must end (the endpoint answers or closes), and what it sent is nothing or HTTP
/// responses.
pub fn http_exchange(rt: &tokio::runtime::Runtime, data: &[u8]) -> Vec<u8> {
    let (registry, sources) = http_sources();
    let limits = Limits {
        max_connections: 4,
        cache: Duration::from_secs(1),
    };
    let (client, server) = tokio::io::duplex(64 << 10);
    let (mut rd, mut wr) = tokio::io::split(client);
    let out = rt.block_on(async move {
        let send = async {
            // The endpoint may close before taking everything: a failed write is its answer.
            let _ = wr.write_all(data).await;
            // Then the client waits, as a pipelining client does, before it closes its side
            // (which makes the endpoint close after the answer in progress): on paused time the
            // clock only moves once the endpoint waits too, so this lets it answer every request
            // it has (up to 400 of them, 10 ms apart) and stays below every deadline.
            tokio::time::sleep(Duration::from_secs(4)).await;
            let _ = wr.shutdown().await;
            wr
        };
        let receive = async {
            let mut out = Vec::new();
            let _ = rd.read_to_end(&mut out).await;
            out
        };
        let (_, out, ()) = tokio::join!(send, receive, http::serve_stream(server, registry, sources, limits));
        out
    });
    assert!(
        out.is_empty() || out.starts_with(b"HTTP/1.1 ") || out.starts_with(b"HTTP/1.0 "),
        "not an HTTP response: {:?}",
        String::from_utf8_lossy(&out[..out.len().min(64)])
    );
    out
}

/// The status codes of the responses in `out` (`200+404`), or `closed` for none: the outcome
/// part of an HTTP corpus file's name.
pub fn http_name(out: &[u8]) -> String {
    let text = String::from_utf8_lossy(out);
    let codes: Vec<&str> = text
        .split('\n')
        .filter_map(|l| l.strip_prefix("HTTP/1.1 ").or_else(|| l.strip_prefix("HTTP/1.0 ")))
        .filter_map(|l| l.get(..3))
        .collect();
    if codes.is_empty() {
        "closed".into()
    } else {
        codes.join("+")
    }
}
