//! Prefix filters: `[filter]` (every port) and a service's own `deny`, `allow`, `deny_file`,
//! `allow_file`. Inline lists and files are read here, so a reload re-reads the files and a
//! malformed line is refused, with the file and its line, like any key.

use super::errors::Errs;
use crate::locate::Seg::{self, Index, Key};
use fastpath::pipeline::prefix::{parse_list, Prefix};
use serde::Deserialize;
use std::path::Path;
use std::sync::Arc;

/// The most prefixes one list holds (inline and file together): 16 M, four times a full
/// table of every IPv4 /24; the IPv4 half of a set is 4 MiB whatever its size.
pub const MAX_PREFIXES: usize = 1 << 24;

/// `[filter]` as written (a service's four keys are the same, read by [`lists`]).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FilterSection {
    pub(super) deny: Option<Vec<String>>,
    pub(super) allow: Option<Vec<String>>,
    pub(super) deny_file: Option<String>,
    pub(super) allow_file: Option<String>,
}

/// One list: its inline prefixes and its file's (repeats kept: the set drops them).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ListConfig {
    /// `deny` / `allow`.
    pub inline: Vec<Prefix>,
    /// `deny_file` / `allow_file`, as read.
    pub file: Option<ListFile>,
}

/// A list file as read at load or reload.
#[derive(Clone, Debug, PartialEq)]
pub struct ListFile {
    /// Where (relative paths from the config's directory).
    pub path: std::path::PathBuf,
    /// Its prefixes.
    pub prefixes: Arc<Vec<Prefix>>,
}

impl ListConfig {
    /// Every prefix, inline then file.
    pub fn all(&self) -> Vec<Prefix> {
        let mut v = self.inline.clone();
        if let Some(f) = &self.file {
            v.extend_from_slice(&f.prefixes);
        }
        v
    }

    /// The file as the reload log shows it: path and size.
    pub fn file_shown(&self) -> String {
        match &self.file {
            Some(f) => format!("{} ({} prefixes)", f.path.display(), f.prefixes.len()),
            None => "none".into(),
        }
    }

    /// The inline prefixes as the reload log shows them.
    pub fn inline_shown(&self) -> String {
        let v: Vec<String> = self.inline.iter().map(|p| p.to_string()).collect();
        format!("[{}]", v.join(", "))
    }
}

/// One filter's lists, validated.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FilterConfig {
    /// Sources refused; `None`: no deny list.
    pub deny: Option<ListConfig>,
    /// If present, the only sources admitted (never empty: refused at validation).
    pub allow: Option<ListConfig>,
}

impl FilterConfig {
    /// Neither list.
    pub fn is_empty(&self) -> bool {
        self.deny.is_none() && self.allow.is_none()
    }
}

/// `list`'s inline prefixes as the reload log shows them (`none` without the list).
pub fn inline_shown(list: &Option<ListConfig>) -> String {
    list.as_ref().map_or_else(|| "none".into(), ListConfig::inline_shown)
}

/// `list`'s file as the reload log shows it.
pub fn file_shown(list: &Option<ListConfig>) -> String {
    list.as_ref().map_or_else(|| "none".into(), ListConfig::file_shown)
}

/// Validates `[filter]`.
pub(super) fn validate(raw: Option<FilterSection>, dir: &Path, errs: &mut Errs) -> FilterConfig {
    lists(&[Key("filter")], raw.unwrap_or_default(), dir, errs)
}

/// Validates one filter's four keys at `at` (`filter`, or `service[i]`); relative files are
/// read from `dir` (the config's directory).
pub(super) fn lists(at: &[Seg], raw: FilterSection, dir: &Path, errs: &mut Errs) -> FilterConfig {
    let deny = list(at, "deny", raw.deny, raw.deny_file, dir, errs);
    let allow = list(at, "allow", raw.allow, raw.allow_file, dir, errs);
    if allow
        .as_ref()
        .is_some_and(|a| a.inline.is_empty() && a.file.as_ref().is_none_or(|f| f.prefixes.is_empty()))
    {
        let mut k = at.to_vec();
        k.push(Key("allow"));
        errs.add(
            &k,
            "the allow list is empty: it would refuse every source; remove the key (and allow_file) to admit all",
        );
    }
    FilterConfig { deny, allow }
}

/// The list `name` (`deny` or `allow`): its inline prefixes and those of `NAME_file`, or `None`
/// if neither key is there.
fn list(
    at: &[Seg],
    name: &'static str,
    inline: Option<Vec<String>>,
    file: Option<String>,
    dir: &Path,
    errs: &mut Errs,
) -> Option<ListConfig> {
    if inline.is_none() && file.is_none() {
        return None;
    }
    let mut out = ListConfig::default();
    for (i, text) in inline.unwrap_or_default().iter().enumerate() {
        let mut k = at.to_vec();
        k.push(Key(name));
        k.push(Index(i));
        match Prefix::parse(text) {
            Ok(p) => out.inline.push(p),
            Err(e) => errs.add(&k, e),
        }
    }
    if let Some(f) = file {
        let file_key: &'static str = if name == "deny" { "deny_file" } else { "allow_file" };
        let mut k = at.to_vec();
        k.push(Key(file_key));
        let path = dir.join(&f);
        match std::fs::read_to_string(&path) {
            Err(e) => errs.add(&k, format!("cannot read {}: {e}", path.display())),
            Ok(text) => match parse_list(&text) {
                Ok(v) => {
                    out.file = Some(ListFile {
                        path,
                        prefixes: Arc::new(v),
                    })
                }
                Err((line, e)) => errs.add(&k, format!("{}:{line}: {e}", path.display())),
            },
        }
    }
    let n = out.inline.len() + out.file.as_ref().map_or(0, |f| f.prefixes.len());
    if n > MAX_PREFIXES {
        let mut k = at.to_vec();
        k.push(Key(name));
        errs.add(&k, format!("{n} prefixes: at most {MAX_PREFIXES}"));
    }
    Some(out)
}
