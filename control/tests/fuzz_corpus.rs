//! The control fuzz targets' corpora (`fuzz/corpus/{config,http}/`) on stable: the committed
//! files are what the generators below write (`FASTPATH_WRITE_CORPUS=1` rewrites them), and
//! every committed file, fuzzer finds and `crash--<what>` regressions included, is replayed
//! through the same checks the targets make. Files named `<outcome>--<what>` must also end in
//! that outcome: `valid` or `line<N>` (the first error's line) for a config, the status codes
//! answered (`200+404`) or `closed` for a connection.

use std::path::{Path, PathBuf};

const BASE: &str = "[dpdk]\neal_args = [\"--no-huge\"]\nmbufs = 16777216\n\n[[port]]\ndevice = \"net_null0\"\n\
                    tx_queues = 2\nipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n";

fn config_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let with = |extra: &str| format!("{BASE}{extra}").into_bytes();
    let demo = std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo.toml")).unwrap();
    vec![
        ("valid--minimal", BASE.into()),
        ("valid--demo", demo),
        (
            "valid--service-tunnel-metrics",
            with(
                "\n[metrics]\nlisten = \"127.0.0.1:9100\"\n\n[[service]]\nname = \"echo\"\nprotocol = \"udp\"\n\
                 ports = [7]\nsockets = 2\naction = \"echo\"\n\n[[tunnel]]\nname = \"gre1\"\n\
                 local = \"192.0.2.1\"\nremote = \"198.51.100.2\"\nport = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"\nkey = 7\n",
            ),
        ),
        ("line1--empty", vec![]),
        ("line1--not-toml", b"[dpdk\n".to_vec()),
        ("line13--unknown-section", with("[nope]\nx = 1\n")),
        (
            "line7--tx-queues-string",
            BASE.replace("tx_queues = 2", "tx_queues = \"2\"").into_bytes(),
        ),
        (
            "line13--service-without-name",
            with("[[service]]\nprotocol = \"udp\"\nports = [7]\n"),
        ),
        ("line1--not-utf8", b"[dpdk]\neal_args = [\"\xff\xfe\"]\n".to_vec()),
        ("line5--duplicate-table", b"[dpdk]\nmbufs = 1\n\n\n[dpdk]\n".to_vec()),
    ]
}

fn http_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let long_head = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n",
        "a".repeat(9000)
    );
    let long_body = format!(
        "GET /healthz HTTP/1.1\r\nContent-Length: 9000\r\n\r\n{}",
        "b".repeat(9000)
    );
    vec![
        ("200--get-metrics", b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("200--head-metrics", b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("200--get-healthz-http10", b"GET /healthz HTTP/1.0\r\n\r\n".to_vec()),
        (
            "200+404+405--pipelined",
            b"GET /healthz HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\n\r\nPOST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
                .to_vec(),
        ),
        (
            "200--close-ends-it",
            b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\nGET /healthz HTTP/1.1\r\n\r\n".to_vec(),
        ),
        (
            "200--chunked-body-read",
            b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
        ),
        ("413--long-body", long_body.into_bytes()),
        ("431--long-head", long_head.into_bytes()),
        ("400--garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec()),
        ("400--bad-header", b"GET / HTTP/1.1\r\nHost x\r\n\r\n".to_vec()),
        ("closed--empty", vec![]),
        ("closed--partial-head", b"GET /metrics HTTP/1.1\r\nHo".to_vec()),
        ("413--partial-body", b"GET /healthz HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc".to_vec()),
    ]
}

fn dir(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(sub)
}

/// The committed corpus is what the generator writes (or is rewritten, with
/// `FASTPATH_WRITE_CORPUS=1`); then every committed file, in name order.
fn corpus(sub: &str, generated: Vec<(&'static str, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    let d = dir(sub);
    let write = std::env::var_os("FASTPATH_WRITE_CORPUS").is_some();
    if write {
        std::fs::create_dir_all(&d).unwrap();
    }
    for (name, bytes) in generated {
        let path = d.join(name);
        if write {
            std::fs::write(&path, &bytes).unwrap();
        } else {
            let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                committed,
                bytes,
                "{} is stale: FASTPATH_WRITE_CORPUS=1 cargo test",
                path.display()
            );
        }
    }
    let mut files: Vec<_> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| {
            (
                f.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(f).unwrap(),
            )
        })
        .collect()
}

/// The name's outcome part, unless it is a fuzzer find or a crash regression.
fn want(name: &str) -> Option<&str> {
    name.split_once("--").map(|(w, _)| w).filter(|w| *w != "crash")
}

#[test]
fn replay_config_corpus() {
    let files = corpus("config", config_corpus());
    assert!(files.len() >= 8, "config corpus has {} files", files.len());
    for (name, bytes) in &files {
        let got = control::fuzzing::config_one(bytes);
        if let Some(w) = want(name) {
            assert_eq!(
                got,
                w,
                "{name}: {:?}",
                control::config::parse_checked(&String::from_utf8_lossy(bytes), "f")
                    .err()
                    .map(|e| e.to_string())
            );
        }
    }
}

#[test]
fn replay_http_corpus() {
    let files = corpus("http", http_corpus());
    assert!(files.len() >= 10, "http corpus has {} files", files.len());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    for (name, bytes) in &files {
        let out = control::fuzzing::http_exchange(&rt, bytes);
        if let Some(w) = want(name) {
            assert_eq!(
                control::fuzzing::http_name(&out),
                w,
                "{name}: {}",
                String::from_utf8_lossy(&out)
            );
        }
    }
}
