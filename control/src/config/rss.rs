//! `[rss]`: the flow hash key, shared by the NICs and the software hash.
//!
//! The key decides which RX queue, socket and (for `tunnel` services, through Maglev) which
//! backend every flow gets. Anyone who knows it can choose flows offline that all land on one of
//! them, so a key meant to be secret never reaches a log, an error or `Debug`: what is shown is
//! [`fingerprint`].

use super::errors::Errs;
use super::ServiceConfig;
use crate::locate::Seg::{Index, Key};
use fastpath::pipeline::Action;
use fastpath::wire::toeplitz::{RssKey, LONG_KEY_LEN};
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// `[rss]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RssSection {
    key: Option<Secret>,
    key_file: Option<String>,
    symmetric: Option<bool>,
}

/// The text of `key`: its `Debug` shows none of it.
#[derive(Deserialize)]
#[serde(transparent)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("(secret)")
    }
}

/// `[rss]`: the Toeplitz key programmed into the NICs and used by the software hash when a
/// driver supplies none, so both agree.
#[derive(Clone, Debug, PartialEq)]
pub struct RssConfig {
    /// The key, 40 or 52 bytes (the Microsoft key unless `key` or `key_file` gives one); its
    /// `Debug` shows no byte of it.
    pub key: RssKey,
    /// Where the key came from.
    pub source: KeySource,
    /// Hash (a, b) and (b, a) alike in software (both directions of a flow on one lcore).
    pub symmetric: bool,
}

/// Where the `[rss]` key came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// Neither `key` nor `key_file`: the public Microsoft key.
    Default,
    /// `key`, in the config.
    Inline,
    /// `key_file`: this file (relative paths taken from the config's directory), read when the
    /// config is.
    File(PathBuf),
}

impl RssConfig {
    /// Whether the key is the public one (unset, or written out as the Microsoft key).
    pub fn is_public(&self) -> bool {
        self.key.is_public()
    }
}

/// The key as logs and errors show it: `public (the Microsoft key)`, or `secret, sha-256`
/// and the first 8 bytes of the SHA-256 of its bytes in hex (`xxd -r -p FILE | sha256sum` of a
/// key file of bare hex starts with the same 16 digits), so two nodes' keys can be compared
/// without showing either.
pub fn fingerprint(key: &RssKey) -> String {
    use sha2::{Digest, Sha256};
    if key.is_public() {
        return "public (the Microsoft key)".to_string();
    }
    let digest = Sha256::digest(key.as_bytes());
    format!("secret, sha-256 {}", hex(&digest[..8]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const ACCEPTED: &str = "40 or 52 bytes as 80 or 104 hex digits";

/// Validates `[rss]` (absent: the Microsoft key, asymmetric); `dir` is the config's directory,
/// which a relative `key_file` is taken from.
pub(super) fn validate(raw: Option<RssSection>, dir: &Path, errs: &mut Errs) -> RssConfig {
    let r = raw.unwrap_or_default();
    let mut key = RssKey::default();
    let mut source = KeySource::Default;
    match (&r.key, &r.key_file) {
        (Some(_), Some(_)) => errs.add(
            &[Key("rss"), Key("key_file")],
            "rss.key and rss.key_file both give the key: keep one (key_file keeps it out of the config)",
        ),
        (Some(text), None) => match parse_key_text(&text.0) {
            Some(k) => {
                key = k;
                source = KeySource::Inline;
            }
            None => errs.add(
                &[Key("rss"), Key("key")],
                format!("expected {ACCEPTED} (separators ':' or ' ' allowed)"),
            ),
        },
        (None, Some(file)) => {
            let path = dir.join(file);
            match read_key_file(&path) {
                Ok((k, mode)) => {
                    key = k;
                    source = KeySource::File(path.clone());
                    if mode & 0o077 != 0 {
                        errs.warn(
                            &[Key("rss"), Key("key_file")],
                            format!(
                                "{}: readable by group or others (mode {:03o}): the key is a secret, chmod 0600 it",
                                path.display(),
                                mode & 0o777
                            ),
                        );
                    }
                }
                Err(message) => errs.add(&[Key("rss"), Key("key_file")], message),
            }
        }
        (None, None) => {}
    }
    RssConfig {
        key,
        source,
        symmetric: r.symmetric.unwrap_or(false),
    }
}

/// Warns when a `tunnel` service picks its backends by a flow hash under the public key: the
/// warning names its first such service's `action`.
pub(super) fn warn_public_key(rss: &RssConfig, services: &[ServiceConfig], errs: &mut Errs) {
    if !rss.is_public() {
        return;
    }
    let Some(i) = services.iter().position(|s| matches!(s.action, Action::Tunnel(_))) else {
        return;
    };
    errs.warn(
        &[Key("service"), Index(i), Key("action")],
        "tunnel services pick a backend by the flow hash, and [rss] has the public (Microsoft) \
         key: anyone can choose flows offline that all reach one backend. Set [rss] key_file to \
         a secret key; every ECMP node and every node sending to these tunnels needs the same one",
    );
}

/// The key in `text`: hex digits, two a byte, ':' or ' ' between them anywhere.
fn parse_key_text(text: &str) -> Option<RssKey> {
    let digits: Vec<u8> = text.bytes().filter(|b| *b != b':' && *b != b' ').collect();
    key_of_digits(&digits).ok()
}

/// Bytes of a key file read at most: a key with a few comment lines fits many times over.
const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

/// Reads a key file: its key and its permission bits, or an error naming the file (and, for a
/// character that does not belong, its line), never any of its content.
///
/// Opened as the config is (`super::read`): only a regular file, non-blocking, at most
/// [`MAX_KEY_FILE_BYTES`], so no path makes the parse wait or read without end.
fn read_key_file(path: &Path) -> Result<(RssKey, u32), String> {
    use std::io::Read;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let shown = path.display();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot read {shown}: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("cannot read {shown}: not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "{shown}: more than {MAX_KEY_FILE_BYTES} bytes; a key file holds {ACCEPTED}"
        ));
    }
    let mut digits = Vec::with_capacity(2 * LONG_KEY_LEN);
    for (n, line) in bytes.split(|b| *b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'#') {
            continue;
        }
        for (col, &b) in line.iter().enumerate() {
            match b {
                b':' | b' ' | b'\t' => {}
                b if b.is_ascii_hexdigit() => digits.push(b),
                _ => {
                    return Err(format!(
                        "{shown}:{}: column {} is not a hex digit, ':' or a space (comment lines start with '#')",
                        n + 1,
                        col + 1
                    ))
                }
            }
        }
    }
    let key = key_of_digits(&digits).map_err(|e| format!("{shown}: {e}"))?;
    Ok((key, meta.permissions().mode()))
}

/// The key of `digits`, or what is wrong with them (never a digit of them).
fn key_of_digits(digits: &[u8]) -> Result<RssKey, String> {
    if !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err("not hex digits".to_string());
    }
    if !digits.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits, an odd number; expected {ACCEPTED}",
            digits.len()
        ));
    }
    let nibble = |d: u8| (d as char).to_digit(16).unwrap_or(0) as u8;
    let bytes: Vec<u8> = digits.chunks(2).map(|p| nibble(p[0]) << 4 | nibble(p[1])).collect();
    RssKey::new(&bytes).ok_or_else(|| format!("{} bytes; expected {ACCEPTED}", bytes.len()))
}

#[cfg(test)]
mod tests;
