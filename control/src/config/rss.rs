//! `[rss]`: the flow hash key, shared by the NICs and the software hash.

use super::errors::Errs;
use crate::locate::Seg::Key;
use serde::Deserialize;

/// `[rss]` as written.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RssSection {
    key: Option<String>,
    symmetric: Option<bool>,
}

/// `[rss]`: the Toeplitz key programmed into the NICs and used by the software hash when a
/// driver supplies none, so both agree.
#[derive(Clone, Debug, PartialEq)]
pub struct RssConfig {
    /// The 40-byte key.
    pub key: [u8; 40],
    /// Hash (a, b) and (b, a) alike in software (both directions of a flow on one lcore).
    pub symmetric: bool,
}

/// Validates `[rss]` (absent: the Microsoft key, asymmetric).
pub(super) fn validate(raw: Option<RssSection>, errs: &mut Errs) -> RssConfig {
    let r = raw.unwrap_or_default();
    let mut key = fastpath::wire::toeplitz::MICROSOFT_KEY;
    if let Some(text) = &r.key {
        match parse_hex_key(text) {
            Some(k) => key = k,
            None => errs.add(
                &[Key("rss"), Key("key")],
                "expected 40 bytes as 80 hex digits (separators ':' or ' ' allowed)",
            ),
        }
    }
    RssConfig {
        key,
        symmetric: r.symmetric.unwrap_or(false),
    }
}

fn parse_hex_key(text: &str) -> Option<[u8; 40]> {
    let digits: Vec<u8> = text.bytes().filter(|b| *b != b':' && *b != b' ').collect();
    if digits.len() != 80 {
        return None;
    }
    let mut key = [0u8; 40];
    for (i, pair) in digits.chunks(2).enumerate() {
        key[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(key)
}
