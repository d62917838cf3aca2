//! Config input through the real binary: `--check-config` on a config whose holders could take
//! the whole packet pool (exit 1, every term named), on paths that are not regular files or
//! are too large (exit 1 at once, never blocked), and a live reload of such configs refused
//! while the running generation keeps serving and SIGTERM still stops the daemon; `[rss]
//! key_file`: the warning about tunnel services under the public key, a start with a secret key,
//! and a reload refused when the key file changed, none of them showing the key.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One net_null port, RX lcore 0 and worker 1, small rings: 64 + 128 descriptors, 96 cached, 320
/// reserved; `extra` adds sections.
fn config(name: &str, mbufs: u32, extra: &str) -> String {
    format!(
        "[dpdk]\neal_args = {}\nmbufs = {mbufs}\nmbuf_cache = 32\nrx_desc = 64\ntx_desc = 64\n\n\
         [[port]]\ndevice = \"net_null0\"\ntx_queues = 2\nipv4 = [\"192.0.2.1\"]\n\n\
         [lcores]\nrx = [0]\nworkers = [1]\n{METRICS_ANY_PORT}{extra}",
        eal_args(name, &["--vdev=net_null0,size=64".to_string()])
    )
}

/// `fastpathd --config path --check-config`, failing the test if it takes over 10 s.
fn check(path: &Path) -> (Option<i32>, String, Duration) {
    let t = Instant::now();
    let mut child = fastpathd()
        .args(["--config", path.to_str().unwrap(), "--check-config"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("--check-config {} did not return in 10 s", path.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out: Output = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        t.elapsed(),
    )
}

#[test]
fn check_config_refuses_a_pool_that_fragments_or_socket_rings_could_take() {
    let s = Scratch::new("budget-check");
    // Pools the budget refuses: 2047 mbufs with 8 MiB of held fragments, or 8 sockets x 1023.
    let frags = s.write(
        "frags.toml",
        &config("budget-check", 2047, "\n[reassembly]\nhigh_thresh_bytes = 8388608\n"),
    );
    let (code, err, _) = check(&frags);
    assert_eq!(code, Some(1), "{err}");
    let at = format!("{}:3: dpdk.mbufs: the packet pool is too small", frags.display());
    assert!(err.contains(&at), "{err}");
    for term in [
        "RX descriptors 64",
        "TX descriptors 128",
        "held fragments 3705",
        "socket rings 0",
        "mempool caches 96",
        "reserve 320",
        "= 4313 > dpdk.mbufs 2047",
    ] {
        assert!(err.contains(term), "{term:?}: {err}");
    }
    let sockets = "\n[reassembly]\nhigh_thresh_bytes = 65536\n\n[[service]]\nname = \"s\"\nports = [7]\nsockets = 8\n\
                   socket_capacity = 1023\naction = \"sink\"\n";
    let rings = s.write("rings.toml", &config("budget-check", 2047, sockets));
    let (code, err, _) = check(&rings);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("socket rings 8184") && err.contains("= 8885 > dpdk.mbufs 2047"),
        "{err}"
    );
    // Within the budget: accepted, and an exempt list's duplicate is a warning, not an error.
    let fits = s.write(
        "fits.toml",
        &config(
            "budget-check",
            2047,
            &format!(
                "{}\n[icmp]\nexempt = [\"198.51.100.0/24\", \"198.51.100.0/24\"]\n",
                sockets.replace("1023", "100")
            ),
        ),
    );
    let (code, err, _) = check(&fits);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ok"), "{err}");
    assert!(
        err.contains("warning: ") && err.contains("icmp.exempt[1]: 198.51.100.0/24: listed twice"),
        "{err}"
    );
}

#[test]
fn check_config_refuses_paths_that_are_not_regular_files_at_once() {
    let s = Scratch::new("cfg-paths");
    let fifo = s.path("fifo.toml");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let big = s.path("big.toml");
    std::fs::File::create(&big).unwrap().set_len(90 << 20).unwrap();
    for (path, what) in [
        (fifo.as_path(), "a FIFO; the config must be a regular file"),
        (
            Path::new("/dev/zero"),
            "a character device; the config must be a regular file",
        ),
        (s.0.as_path(), "a directory; the config must be a regular file"),
        (
            big.as_path(),
            "94371840 bytes; a config file may have at most 16777216 bytes (16 MiB)",
        ),
    ] {
        let (code, err, took) = check(path);
        assert_eq!(code, Some(1), "{}: {err}", path.display());
        assert!(err.contains(what), "{}: {err}", path.display());
        assert!(took < Duration::from_secs(5), "{}: {took:?}", path.display());
    }
}

/// A reload to a config over the budget, and one to a FIFO put in the config's place: both
/// refused, the running generation stays and serves, and SIGTERM still stops the daemon.
#[test]
fn reloads_over_the_budget_or_to_a_fifo_are_refused_and_the_running_config_stays() {
    let s = Scratch::new("budget-reload");
    let good = config("budget-reload", 4095, "");
    let cfg = s.write("c.toml", &good);
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let failures = |d: &Daemon| d.scrape()["fastpath_config_reloads_total{result=\"failure\"}"];
    let generation = |d: &Daemon| d.scrape()["fastpath_config_generation"];
    assert_eq!((failures(&d), generation(&d)), (0.0, 1.0));

    // Reassembly limits are live keys: this reload is refused by the budget alone.
    std::fs::write(&cfg, format!("{good}\n[reassembly]\nhigh_thresh_bytes = 16777216\n")).unwrap();
    d.signal("HUP");
    wait_for(10, "the refused reload", || failures(&d) >= 1.0);
    let log = d.log_text();
    assert!(
        log.contains("reload (SIGHUP) refused, generation 1 keeps running"),
        "{log}"
    );
    assert!(
        log.contains("dpdk.mbufs: the packet pool is too small") && log.contains("held fragments 7346"),
        "{log}"
    );
    assert_eq!(generation(&d), 1.0);

    // Within the budget: applied.
    std::fs::write(&cfg, format!("{good}\n[reassembly]\nhigh_thresh_bytes = 1048576\n")).unwrap();
    d.signal("HUP");
    wait_for(10, "the applied reload", || generation(&d) == 2.0);

    // A FIFO renamed over the config: the file watch and SIGHUP both try it; refused at once.
    let fifo = s.path("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    std::fs::rename(&fifo, &cfg).unwrap();
    let before = failures(&d);
    d.signal("HUP");
    wait_for(10, "the FIFO refused", || failures(&d) > before);
    assert!(d.log_text().contains("a FIFO; the config must be a regular file"));
    assert_eq!(generation(&d), 2.0);
    let t = Instant::now();
    let (code, _) = d.stop();
    assert_eq!(code, Some(0));
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// A tunnel on the one port and a `tunnel` service sending into it.
const TUNNEL_SERVICE: &str = "\n[[tunnel]]\nname = \"a\"\nlocal = \"192.0.2.1\"\nremote = \"198.51.100.2\"\n\
                              port = \"net_null0\"\nnext_hop_mac = \"02:00:00:00:00:fe\"\n\n\
                              [[service]]\nname = \"gw\"\nports = [9000]\naction = \"tunnel\"\ntunnel = \"a\"\n";

/// 52 random bytes as `head -c 52 /dev/urandom | xxd -p -c 52` writes them, mode 0600.
fn write_key(s: &Scratch, name: &str) -> String {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = [0u8; 52];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let p = s.write(name, &format!("{hex}\n"));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    hex
}

#[test]
fn tunnel_services_under_the_public_key_are_warned_about_and_a_key_file_starts_the_daemon() {
    let s = Scratch::new("rss-key-file");
    // No key: --check-config accepts it (exit 0) and warns.
    let public = s.write("public.toml", &config("rss-key-file", 4095, TUNNEL_SERVICE));
    let (code, err, _) = check(&public);
    assert_eq!(code, Some(0), "{err}");
    let at = format!("warning: {}:", public.display());
    assert!(
        err.contains(&at)
            && err.contains("service[0].action: tunnel services pick a backend by the flow hash")
            && err.contains("every ECMP node"),
        "{err}"
    );
    // The daemon logs it once as it starts, and runs.
    let d = Daemon::start(&s, &["--config", public.to_str().unwrap()]);
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    assert_eq!(log.matches("tunnel services pick a backend").count(), 1, "{log}");
    assert!(
        log.contains("rss key public (the Microsoft key) from the default"),
        "{log}"
    );
    // A secret key from a file next to the config (a relative path is the config's directory's):
    // no warning, and the key is nowhere in what fastpathd writes.
    let key = write_key(&s, "rss.key");
    let with_key = format!("{TUNNEL_SERVICE}\n[rss]\nkey_file = \"rss.key\"\n");
    let cfg = s.write("secret.toml", &config("rss-key-file", 4095, &with_key));
    let (code, err, _) = check(&cfg);
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("warning") && !err.contains(&key[..16]), "{err}");
    let d = Daemon::start(&s, &["--config", cfg.to_str().unwrap()]);
    let log = d.log_text();
    assert!(
        log.contains("rss key secret, sha-256 ") && log.contains(&format!("from {}", s.path("rss.key").display())),
        "{log}"
    );
    assert!(!log.contains("warning"), "{log}");
    // A new key in the file: a reload reads it and refuses it, naming the key file and its line.
    let failures = |d: &Daemon| d.scrape()["fastpath_config_reloads_total{result=\"failure\"}"];
    let new_key = write_key(&s, "rss.key");
    d.signal("HUP");
    wait_for(10, "the refused reload", || failures(&d) >= 1.0);
    let (code, log) = d.stop();
    assert_eq!(code, Some(0));
    let line = config("rss-key-file", 4095, &with_key)
        .lines()
        .position(|l| l.starts_with("key_file"))
        .unwrap()
        + 1;
    assert!(
        log.contains(&format!("{}:{line}: rss.key_file: ", cfg.display())) && log.contains("only a restart applies it"),
        "{log}"
    );
    for k in [&key, &new_key] {
        assert!(!log.contains(&k[..16]) && !log.contains(&k[80..]), "{log}");
    }
}
