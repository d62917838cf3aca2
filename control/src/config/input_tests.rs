//! Reading a config path (regular files only, size cap, never blocking), validation time linear
//! in the file's size, and the `[icmp] exempt` list's warnings and cap.

use super::*;
use std::time::{Duration, Instant};

const BASE: &str = "[dpdk]\neal_args = [\"--no-huge\"]\nmbufs = 16777216\n\n[[port]]\ndevice = \"net_null0\"\n\
                    tx_queues = 2\nipv4 = [\"192.0.2.1\"]\n\n[lcores]\nrx = [0]\nworkers = [1]\n";

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("fastpathd-cfg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `read(path)` on another thread, failing the test instead of hanging if it blocks.
fn read_within(path: &Path, limit: Duration) -> Result<String, ConfigErrors> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    std::thread::spawn(move || tx.send(read(&p)));
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("reading {} blocked for {limit:?}", path.display()))
}

fn refused(path: &Path, what: &str) {
    let e = read_within(path, Duration::from_secs(5)).unwrap_err();
    let text = e.to_string();
    assert!(text.contains(what), "{}: {text}", path.display());
    assert_eq!(e.errors.len(), 1);
}

#[test]
fn only_regular_files_are_read_and_nothing_blocks() {
    let d = scratch("types");
    // A FIFO with no writer: opening it blocking would wait forever.
    let fifo = d.join("fifo.toml");
    let st = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    refused(&fifo, "a FIFO; the config must be a regular file");
    refused(
        Path::new("/dev/zero"),
        "a character device; the config must be a regular file",
    );
    refused(&d, "a directory; the config must be a regular file");
    // A symlink is judged by what it points to, through the opened descriptor.
    let to_dev = d.join("null.toml");
    std::os::unix::fs::symlink("/dev/null", &to_dev).unwrap();
    refused(&to_dev, "a character device");
    let real = d.join("real.toml");
    std::fs::write(&real, BASE).unwrap();
    let link = d.join("link.toml");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    assert_eq!(read_within(&link, Duration::from_secs(5)).unwrap(), BASE);
    assert!(load(&link).is_ok());
    refused(&d.join("missing.toml"), "cannot read: No such file");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn files_over_16_mib_are_refused_before_reading() {
    let d = scratch("size");
    let big = d.join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    // Sparse: no 16 MiB written to disk.
    f.set_len(MAX_CONFIG_BYTES + 1).unwrap();
    let t = Instant::now();
    refused(
        &big,
        "16777217 bytes; a config file may have at most 16777216 bytes (16 MiB)",
    );
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // At the cap it is read (and is then not valid TOML: NUL bytes).
    f.set_len(MAX_CONFIG_BYTES).unwrap();
    assert_eq!(
        read_within(&big, Duration::from_secs(30)).unwrap().len() as u64,
        MAX_CONFIG_BYTES
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// `n` services, UDP then TCP; `bad` gives each an error (port 0).
fn services(n: usize, bad: bool) -> String {
    let mut s = String::from(BASE);
    for i in 0..n {
        let (proto, port) = if i < 65535 {
            ("udp", i + 1)
        } else {
            ("tcp", i - 65535 + 1)
        };
        let port = if bad { 0 } else { port };
        s.push_str(&format!(
            "\n[[service]]\nname = \"s{i}\"\nprotocol = \"{proto}\"\nports = [{port}]\nsocket_capacity = 1\naction = \"sink\"\n"
        ));
    }
    s
}

/// The fastest of three parses of `src` (a machine busy with other work slows some runs, never
/// speeds one up: the minimum is the parse's own time), and the result.
fn time(src: &str) -> (Duration, Result<Config, ConfigErrors>) {
    let mut best = Duration::MAX;
    let mut result = None;
    for _ in 0..3 {
        let t = Instant::now();
        let r = parse(src, "t.toml");
        best = best.min(t.elapsed());
        result = Some(r);
    }
    (best, result.expect("three runs"))
}

/// Validation time grows linearly with the file: ten times the services or errors take well under
/// a hundred times as long (a quadratic pass, a line lookup per error or a name scan per service,
/// took 42 s for 40,000 errors). In a debug build too; `--release` times are in docs/testing.md.
#[test]
fn validation_is_linear_in_the_file() {
    let (small, r) = time(&services(2_000, false));
    assert!(r.is_ok());
    let (large, r) = time(&services(20_000, false));
    let c = r.unwrap_or_else(|e| panic!("{}", e.errors[0].message));
    assert_eq!(c.services.len(), 20_000);
    assert!(large < small * 30, "10x the services: {small:?} -> {large:?}");
    let large_ok = large;

    let (small, r) = time(&services(4_000, true));
    assert_eq!(r.unwrap_err().errors.len(), 4_000);
    let (large, r) = time(&services(40_000, true));
    let e = r.unwrap_err();
    assert_eq!(e.errors.len(), 40_000);
    assert_eq!(e.errors[39_999].key, "service[39999].ports[0]");
    assert!(large < small * 30, "10x the errors: {small:?} -> {large:?}");

    // 100,000 services: past the 65,535 a file may have, found without a quadratic pass.
    let (t, r) = time(&services(100_000, false));
    let e = r.unwrap_err();
    assert!(
        e.errors
            .iter()
            .any(|e| e.message.contains("100000 services: at most 65535")),
        "{e}"
    );
    assert!(t < large * 10, "{t:?}");
    eprintln!("validation: 20,000 services {large_ok:?}, 40,000 errors {large:?}, 100,000 services {t:?}");
}

#[test]
fn many_tunnels_refer_to_each_other_by_name_in_linear_time() {
    let tunnels = |n: usize| {
        let mut s = String::from(BASE);
        for i in 0..n {
            let route = if i % 3 == 0 {
                "port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"".to_string()
            } else {
                format!("via = \"t{}\"", i - 1)
            };
            s.push_str(&format!(
                "\n[[tunnel]]\nname = \"t{i}\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.1\"\nkey = {i}\n{route}\n"
            ));
        }
        s.push_str("\n[[service]]\nname = \"f\"\nports = [9]\naction = \"tunnel\"\ntunnel = \"t0\"\n");
        s
    };
    let (small, r) = time(&tunnels(3_000));
    assert!(r.is_ok(), "{:?}", r.err().map(|e| e.to_string()));
    let (large, r) = time(&tunnels(30_000));
    let c = r.unwrap();
    assert_eq!(c.tunnels[29_999].depth, 3);
    assert!(large < small * 30, "10x the tunnels: {small:?} -> {large:?}");
}

#[test]
fn exempt_duplicates_and_default_routes_are_warnings_with_their_lines() {
    let src = format!(
        "{BASE}\n[icmp]\nexempt = [\n  \"198.51.100.0/24\",\n  \"0.0.0.0/0\",\n  \"198.51.100.0/24\",\n  \"::/0\",\n]\n"
    );
    let loaded = parse_checked(&src, "t.toml").unwrap();
    assert_eq!(loaded.config.icmp.exempt.prefixes().len(), 4);
    let w: Vec<(String, Option<usize>)> = loaded.warnings.errors.iter().map(|w| (w.key.clone(), w.line)).collect();
    assert_eq!(
        w,
        [
            ("icmp.exempt[1]".to_string(), Some(17)),
            ("icmp.exempt[2]".to_string(), Some(18)),
            ("icmp.exempt[3]".to_string(), Some(19)),
        ]
    );
    let text = loaded.warnings.to_string();
    assert!(
        text.contains("t.toml:18: icmp.exempt[2]: 198.51.100.0/24: listed twice (also at icmp.exempt[0])"),
        "{text}"
    );
    assert!(
        text.contains("t.toml:17: icmp.exempt[1]: 0.0.0.0/0: every source of the family skips every ICMP rate limit"),
        "{text}"
    );
    // No warning for a clean list.
    let clean = parse_checked(&format!("{BASE}\n[icmp]\nexempt = [\"198.51.100.0/24\"]\n"), "t.toml").unwrap();
    assert!(clean.warnings.errors.is_empty());
    assert!(clean.config.icmp.exempt.contains(&"198.51.100.9".parse().unwrap()));
}

#[test]
fn exempt_is_capped_at_65536_prefixes() {
    let list = |n: u32| {
        let p: Vec<String> = (0..n)
            .map(|i| format!("\"10.{}.{}.0/24\"", i >> 8 & 0xff, i & 0xff))
            .collect();
        format!("{BASE}\n[icmp]\nexempt = [{}]\n", p.join(", "))
    };
    let c = parse(&list(65_536), "t.toml").unwrap();
    assert_eq!(c.icmp.exempt.prefixes().len(), 65_536);
    // One more (a repeat of 10.0.0.0/24) is one too many.
    let e = errors_of(&list(65_537));
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!((e[0].key.as_str(), e[0].line), ("icmp.exempt", Some(15)));
    assert_eq!(e[0].message, "65537 prefixes: at most 65536");
}

fn errors_of(src: &str) -> Vec<ConfigError> {
    parse(src, "t.toml").unwrap_err().errors
}
