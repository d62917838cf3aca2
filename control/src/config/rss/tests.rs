//! `[rss]`: the key inline or from `key_file`, their errors with key and line, the warning for
//! tunnel services under the public key, and that no rendering of a config shows the key.

use super::super::{parse, parse_checked, spec, Config, ConfigError, Reload};
use super::*;
use std::os::unix::fs::PermissionsExt;

const BASE: &str = r#"
[dpdk]
eal_args = ["--no-huge", "--vdev=net_null0"]

[[port]]
device = "net_null0"
rx_queues = 1
tx_queues = 2
ipv4 = ["192.0.2.1"]

[lcores]
rx = [0]
workers = [1]
"#;

/// A tunnel and a `tunnel` service sending into it.
const TUNNEL_SERVICE: &str = r#"
[[tunnel]]
name = "a"
local = "192.0.2.1"
remote = "198.51.100.2"
port = "net_null0"
next_hop_mac = "02:00:00:00:00:fe"

[[service]]
name = "gw"
ports = [9000]
action = "tunnel"
tunnel = "a"
"#;

/// 52 bytes no test elsewhere uses, and their hex.
fn long_key() -> (Vec<u8>, String) {
    let bytes: Vec<u8> = (0..52u8).map(|i| i.wrapping_mul(151).wrapping_add(29)).collect();
    let hex = bytes.iter().map(|b| format!("{b:02x}")).collect();
    (bytes, hex)
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fastpathd-rss-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes `text` to `dir/name`, mode 0600.
fn key_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn with_rss(rss: &str) -> String {
    format!("{BASE}\n[rss]\n{rss}\n")
}

/// The line of the config that starts with `prefix`.
fn line_of(src: &str, prefix: &str) -> usize {
    src.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
}

fn errors(src: &str, file: &str) -> Vec<ConfigError> {
    parse(src, file).unwrap_err().errors
}

#[test]
fn key_file_of_40_or_52_bytes_with_comments_and_separators() {
    let dir = scratch("good");
    let (bytes, hex) = long_key();
    // 52 bytes over three lines, with comments, colons, spaces, a tab and CRLF line ends.
    let colons: Vec<String> = bytes.iter().map(|b| format!("{b:02X}")).collect();
    let text = format!(
        "# fastpathd's RSS key\r\n{}\r\n  # more\n{} {}\t{}\n",
        colons[..20].join(":"),
        colons[20..40].join(":"),
        colons[40..46].concat(),
        colons[46..].concat()
    );
    let p = key_file(&dir, "long.key", &text);
    let c = parse(&with_rss(&format!("key_file = \"{}\"", p.display())), "t.toml").unwrap();
    assert_eq!(c.rss.key.as_bytes(), &bytes[..]);
    assert_eq!(
        &c.rss.key.hash_key()[..],
        &bytes[..40],
        "the software hash takes the first 40"
    );
    assert_eq!(c.rss.source, KeySource::File(p.clone()));
    assert!(!c.rss.is_public());
    // 40 bytes, as `xxd -p -c 40` writes them; a relative path is taken from the config's
    // directory, not the current one.
    key_file(&dir, "short.key", &format!("{}\n", &hex[..80]));
    let cfg = dir.join("c.toml");
    let c = parse(&with_rss("key_file = \"short.key\""), &cfg.display().to_string()).unwrap();
    assert_eq!(c.rss.key.as_bytes(), &bytes[..40]);
    assert_eq!(c.rss.source, KeySource::File(dir.join("short.key")));
    // An inline key may have 52 bytes too.
    let c = parse(&with_rss(&format!("key = \"{hex}\"")), "t.toml").unwrap();
    assert_eq!((c.rss.key.as_bytes(), &c.rss.source), (&bytes[..], &KeySource::Inline));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreadable_key_file_is_an_error_naming_the_file_with_key_and_line() {
    let dir = scratch("missing");
    let src = with_rss(&format!("symmetric = true\nkey_file = \"{}/nope.key\"", dir.display()));
    let e = errors(&src, "t.toml");
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("rss.key_file", Some(line_of(&src, "key_file")))
    );
    assert!(
        e[0].message
            .starts_with(&format!("cannot read {}/nope.key: ", dir.display())),
        "{}",
        e[0].message
    );
    // A directory, or a FIFO nobody writes: refused at once, never read or waited on.
    let fifo = dir.join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    for (path, what) in [(&dir, "not a regular file"), (&fifo, "not a regular file")] {
        let e = errors(&with_rss(&format!("key_file = \"{}\"", path.display())), "t.toml");
        assert!(e[0].message.contains(what), "{}", e[0].message);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_key_file_content_names_the_file_and_its_line_never_the_key() {
    let dir = scratch("bad");
    let (_, hex) = long_key();
    let cases = [
        // A character that is no hex digit, on line 3 of the file.
        (
            format!("# key\n{}\n{}z{}\n", &hex[..40], &hex[40..60], &hex[61..80]),
            ":3: column 21 is not a hex digit",
        ),
        (
            format!("{}\n", &hex[..82]),
            ": 41 bytes; expected 40 or 52 bytes as 80 or 104 hex digits",
        ),
        (format!("{}\n", &hex[..81]), ": 81 hex digits, an odd number"),
        ("# only a comment\n".to_string(), ": 0 bytes; expected 40 or 52"),
    ];
    for (text, what) in cases {
        let p = key_file(&dir, "k", &text);
        let src = with_rss(&format!("key_file = \"{}\"", p.display()));
        let e = errors(&src, "t.toml");
        assert_eq!(
            (e[0].key.as_str(), e[0].line),
            ("rss.key_file", Some(line_of(&src, "key_file"))),
            "{text:?}"
        );
        assert!(
            e[0].message.starts_with(&p.display().to_string()) && e[0].message.contains(what),
            "{what}: {}",
            e[0].message
        );
        assert!(!e[0].message.contains(&hex[..16]), "{}", e[0].message);
    }
    // An inline key of the wrong length: its key and line, and none of its digits.
    let src = with_rss(&format!("key = \"{}\"", &hex[..82]));
    let e = errors(&src, "t.toml");
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("rss.key", Some(line_of(&src, "key =")))
    );
    assert!(e[0].message.contains("40 or 52 bytes") && !e[0].message.contains(&hex[..16]));
    let e = errors(&with_rss(&format!("key = \"+{}\"", &hex[1..80])), "t.toml");
    assert_eq!(e[0].key, "rss.key", "only hex digits, no sign");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn key_and_key_file_together_is_an_error_naming_both() {
    let dir = scratch("both");
    let (_, hex) = long_key();
    let p = key_file(&dir, "k", &hex[..80]);
    let src = with_rss(&format!("key = \"{}\"\nkey_file = \"{}\"", &hex[..80], p.display()));
    let e = errors(&src, "t.toml");
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        (e[0].key.as_str(), e[0].line),
        ("rss.key_file", Some(line_of(&src, "key_file")))
    );
    assert!(e[0].message.contains("rss.key and rss.key_file"), "{}", e[0].message);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_key_file_readable_by_others_is_a_warning() {
    let dir = scratch("mode");
    let (_, hex) = long_key();
    let p = key_file(&dir, "k", &hex[..80]);
    let src = with_rss(&format!("key_file = \"{}\"", p.display()));
    assert!(parse_checked(&src, "t.toml").unwrap().warnings.errors.is_empty());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let w = parse_checked(&src, "t.toml").unwrap().warnings.errors;
    assert_eq!(
        (w[0].key.as_str(), w[0].line),
        ("rss.key_file", Some(line_of(&src, "key_file")))
    );
    assert!(
        w[0].message.contains("mode 644") && w[0].message.contains("chmod 0600"),
        "{}",
        w[0].message
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn key_file_is_restart_only_and_a_changed_file_refuses_the_reload() {
    assert!(matches!(spec("rss.key_file").unwrap().reload, Reload::Restart(_)));
    let dir = scratch("restart");
    let (_, hex) = long_key();
    let p = key_file(&dir, "k", &hex[..80]);
    let src = with_rss(&format!("key_file = \"{}\"", p.display()));
    let running = parse(&src, "t.toml").unwrap();
    assert!(running
        .restart_errors(&parse(&src, "t.toml").unwrap(), &src, "t.toml")
        .is_none());
    // The same config, the file rewritten: the reload reads it, and only a restart applies it.
    key_file(&dir, "k", &hex[4..84]);
    let new = parse(&src, "t.toml").unwrap();
    let e = running.restart_errors(&new, &src, "t.toml").expect("refused");
    assert_eq!(e.errors.len(), 1, "{e}");
    assert_eq!(
        (e.errors[0].key.as_str(), e.errors[0].line),
        ("rss.key_file", Some(line_of(&src, "key_file")))
    );
    let shown = e.to_string();
    assert!(
        shown.contains("secret, sha-256 ") && shown.contains("only a restart"),
        "{shown}"
    );
    assert!(!shown.contains(&hex[..16]) && !shown.contains(&hex[4..20]), "{shown}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every way the control plane renders a config or a change of it: the key's bytes in none, as
/// hex (either case) or as the decimal list a byte array's `Debug` writes.
#[test]
fn no_rendering_of_a_config_shows_the_key() {
    let dir = scratch("redact");
    let (bytes, hex) = long_key();
    let p = key_file(&dir, "k", &hex);
    let leaks = |what: &str, shown: &str| {
        let decimal = format!("{:?}", &bytes[..6]);
        for needle in [
            &hex[..12],
            &hex[40..52],
            &hex[..12].to_uppercase(),
            decimal.trim_matches(['[', ']']),
        ] {
            assert!(!shown.contains(needle), "{what} shows the key ({needle}): {shown}");
        }
    };
    let default = parse(BASE, "t.toml").unwrap();
    for rss in [format!("key = \"{hex}\""), format!("key_file = \"{}\"", p.display())] {
        let src = with_rss(&rss);
        let loaded = parse_checked(&src, "t.toml").unwrap();
        let c: &Config = &loaded.config;
        leaks("Debug", &format!("{c:?} {c:#?} {loaded:?}"));
        leaks("the reload log", &default.describe_changes(c).join("\n"));
        leaks("the reload log", &c.describe_changes(&default).join("\n"));
        leaks("a change", &format!("{:?}", default.changes(c)));
        let refused = default
            .restart_errors(c, &src, "t.toml")
            .expect("a restart-only change");
        leaks("the refusal", &refused.to_string());
        assert!(refused.to_string().contains("secret, sha-256 "), "{refused}");
        // What shows instead: public or secret, and a fingerprint to compare nodes by.
        assert!(format!("{c:?}").contains("RssKey(52 bytes, secret)"), "{c:?}");
    }
    // The errors of a bad key do not show it either.
    let src = with_rss(&format!("key = \"{}\"", &hex[..90]));
    leaks("an error", &parse(&src, "t.toml").unwrap_err().to_string());
    // The raw section, before validation, neither.
    let raw: RssSection = toml::from_str(&format!("key = \"{hex}\"")).unwrap();
    leaks("the section as written", &format!("{raw:?}"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fingerprints_tell_keys_apart_and_name_the_public_one() {
    let (bytes, _) = long_key();
    let a = RssKey::new(&bytes).unwrap();
    let b = RssKey::new(&bytes[..40]).unwrap();
    assert_eq!(fingerprint(&RssKey::default()), "public (the Microsoft key)");
    // SHA-256 of the 52 bytes, its first 8 bytes: what `xxd -r -p FILE | sha256sum` starts with.
    // (Python's hashlib.sha256 of the same bytes gives 26e8559e5aebc28e...)
    let (fa, fb) = (fingerprint(&a), fingerprint(&b));
    assert_eq!(fa, "secret, sha-256 26e8559e5aebc28e");
    assert!(fb.starts_with("secret, sha-256 ") && fa != fb, "{fb}");
    assert_eq!(fa, fingerprint(&RssKey::new(&bytes).unwrap()), "stable");
}

#[test]
fn tunnel_services_under_the_public_key_are_warned_about() {
    let warnings = |src: &str| parse_checked(src, "t.toml").unwrap().warnings.errors;
    // No key given: the public default.
    let src = format!("{BASE}{TUNNEL_SERVICE}");
    let w = warnings(&src);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(
        (w[0].key.as_str(), w[0].line),
        ("service[0].action", Some(line_of(&src, "action")))
    );
    for what in ["public (Microsoft) key", "key_file", "every ECMP node"] {
        assert!(w[0].message.contains(what), "{what}: {}", w[0].message);
    }
    // The Microsoft key written out is the same key.
    let ms: String = fastpath::wire::toeplitz::MICROSOFT_KEY
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(warnings(&format!("{src}\n[rss]\nkey = \"{ms}\"\n")).len(), 1);
    // A secret key, or no tunnel service: nothing to say.
    let (_, hex) = long_key();
    assert!(warnings(&format!("{src}\n[rss]\nkey = \"{hex}\"\n")).is_empty());
    let echo = TUNNEL_SERVICE.replace("action = \"tunnel\"\ntunnel = \"a\"", "action = \"echo\"");
    assert!(warnings(&format!("{BASE}{echo}")).is_empty());
}
