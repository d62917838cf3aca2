//! What changed between the running config and a reloaded one, key by key, read through
//! [`KEYS`]: the reload refuses the changes only a restart can apply, and logs the others.

use super::errors::key_of;
use super::keys::{flow_limit_lcores, Get, KeySpec, Reload, KEYS};
use super::{Config, ConfigError, ConfigErrors};
use crate::locate::Locator;
use crate::locate::Seg::{self, Index, Key};
use std::collections::HashMap;

/// One key whose effective value differs between two configs.
#[derive(Clone, Debug)]
pub struct Change {
    /// The key's entry in [`KEYS`] (for a section added or removed, the array's: `service`).
    pub spec: &'static KeySpec,
    /// The key as errors name it: `lcores.mode`, `port[0].forward_to`; `service[2]` for a
    /// service added (its index in the new file), `service` for one removed, `port` for a
    /// changed number of ports.
    pub key: String,
    /// The service or tunnel it belongs to, as the log names it: `service "echo"`.
    pub element: Option<String>,
    /// The value before, as the log shows it; `None` for a section that was not there.
    pub old: Option<String>,
    /// The value after; `None` for a section removed.
    pub new: Option<String>,
    /// Where it is written in the new file.
    path: Vec<Seg<'static>>,
}

fn section_of(key: &'static str) -> &'static str {
    key.split('.').next().unwrap_or(key)
}

fn field_of(key: &'static str) -> &'static str {
    key.split_once('.').map_or(key, |(_, f)| f)
}

impl Config {
    /// Every key whose effective value differs from `self` in `new`, in the order of [`KEYS`]:
    /// ports matched by position, services and tunnels by name.
    pub fn changes(&self, new: &Config) -> Vec<Change> {
        let mut out = Vec::new();
        let mut sections: Vec<&'static str> = Vec::new();
        for s in KEYS {
            if !sections.contains(&section_of(s.key)) {
                sections.push(section_of(s.key));
            }
        }
        for section in sections {
            let specs: Vec<&'static KeySpec> = KEYS.iter().filter(|s| section_of(s.key) == section).collect();
            let (old, new) = (self, new);
            if specs.iter().any(|s| matches!(s.get, Get::Port(_))) {
                port_changes(old, new, &specs, &mut out);
            } else if specs.iter().any(|s| matches!(s.get, Get::Service(_))) {
                let get = |g: &Get| if let Get::Service(f) = *g { Some(f) } else { None };
                named_changes(
                    old,
                    new,
                    section,
                    &specs,
                    (&old.services, &new.services),
                    |s| &s.name,
                    get,
                    &mut out,
                );
            } else if specs.iter().any(|s| matches!(s.get, Get::Tunnel(_))) {
                let get = |g: &Get| if let Get::Tunnel(f) = *g { Some(f) } else { None };
                named_changes(
                    old,
                    new,
                    section,
                    &specs,
                    (&old.tunnels, &new.tunnels),
                    |t| &t.name,
                    get,
                    &mut out,
                );
            } else {
                top_changes(old, new, &specs, &mut out);
            }
        }
        out
    }

    /// [`Config::changes`], each with its line in `new`'s text `src` (what `fastpathctl reload`
    /// shows).
    pub fn located_changes(&self, new: &Config, src: &str) -> Vec<(Change, Option<usize>)> {
        let loc = Locator::new(src);
        self.changes(new)
            .into_iter()
            .map(|c| {
                let line = loc.line_of(&c.path);
                (c, line)
            })
            .collect()
    }

    /// The keys, as errors name them, that `new` changes but only a restart can apply.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<String> {
        self.changes(new)
            .into_iter()
            .filter(|c| matches!(c.spec.reload, Reload::Restart(_)))
            .map(|c| c.key)
            .collect()
    }

    /// The restart-only changes of `new` as errors on the lines of its text `src` (named `file`),
    /// each saying what reads the key at start-up; `None` if a reload can apply `new`.
    pub fn restart_errors(&self, new: &Config, src: &str, file: &str) -> Option<ConfigErrors> {
        let loc = Locator::new(src);
        let errors: Vec<ConfigError> = self
            .changes(new)
            .into_iter()
            .filter_map(|c| match c.spec.reload {
                Reload::Live => None,
                Reload::Restart(read_by) => Some(ConfigError {
                    line: loc.line_of(&c.path),
                    message: format!(
                        "{} -> {}: {read_by}, so only a restart applies it",
                        c.old.as_deref().unwrap_or("none"),
                        c.new.as_deref().unwrap_or("none"),
                    ),
                    key: c.key,
                }),
            })
            .collect();
        (!errors.is_empty()).then(|| ConfigErrors {
            file: file.to_string(),
            errors,
        })
    }

    /// What a reload from `self` to `new` changes, for the log: one line per plain table, per
    /// service or tunnel, and per port key.
    pub fn describe_changes(&self, new: &Config) -> Vec<String> {
        let changes = self.changes(new);
        let mut out = Vec::new();
        let mut rest = &changes[..];
        while let Some(first) = rest.first() {
            let n = rest.iter().take_while(|c| line_of(c) == line_of(first)).count();
            out.push(describe(self, new, &rest[..n]));
            rest = &rest[n..];
        }
        out
    }
}

/// The keys of a plain table.
fn top_changes(old: &Config, new: &Config, specs: &[&'static KeySpec], out: &mut Vec<Change>) {
    for &spec in specs {
        let Get::Top(get) = spec.get else { continue };
        let (a, b) = (get(old), get(new));
        if a != b {
            out.push(Change {
                spec,
                key: spec.key.to_string(),
                element: None,
                old: Some(a),
                new: Some(b),
                path: vec![Key(section_of(spec.key)), Key(field_of(spec.key))],
            });
        }
    }
}

/// The `[[port]]` keys, ports matched by position, and a changed number of ports.
fn port_changes(old: &Config, new: &Config, specs: &[&'static KeySpec], out: &mut Vec<Change>) {
    if old.ports.len() != new.ports.len() {
        if let Some(&spec) = specs.iter().find(|s| matches!(s.get, Get::Sections)) {
            out.push(Change {
                spec,
                key: spec.key.to_string(),
                element: None,
                old: Some(old.ports.len().to_string()),
                new: Some(new.ports.len().to_string()),
                path: vec![Key(spec.key), Index(old.ports.len().min(new.ports.len()))],
            });
        }
    }
    for (i, (a, b)) in old.ports.iter().zip(&new.ports).enumerate() {
        for &spec in specs {
            let Get::Port(get) = spec.get else { continue };
            let (x, y) = (get(old, a), get(new, b));
            if x != y {
                let (section, field) = (section_of(spec.key), field_of(spec.key));
                out.push(Change {
                    spec,
                    key: format!("{section}[{i}].{field}"),
                    element: None,
                    old: Some(x),
                    new: Some(y),
                    path: vec![Key(section), Index(i), Key(field)],
                });
            }
        }
    }
}

/// The keys of an array of named tables (services, tunnels), matched by name: the ones added
/// or changed in the new file's order, then the ones removed.
#[allow(clippy::too_many_arguments)]
fn named_changes<'a, T>(
    old: &Config,
    new: &Config,
    section: &'static str,
    specs: &[&'static KeySpec],
    (olds, news): (&'a [T], &'a [T]),
    name: fn(&T) -> &String,
    get: impl Fn(&Get) -> Option<fn(&Config, &T) -> String>,
    out: &mut Vec<Change>,
) {
    let Some(&whole) = specs.iter().find(|s| matches!(s.get, Get::Sections)) else {
        return;
    };
    let label = |e: &T| format!("{section} {:?}", name(e));
    // By name, first of each (names are unique in a valid config): one lookup per element, so
    // comparing two large files stays linear.
    let index = |list: &'a [T]| {
        let mut m: HashMap<&'a str, &'a T> = HashMap::with_capacity(list.len());
        for e in list {
            m.entry(name(e).as_str()).or_insert(e);
        }
        m
    };
    let (old_by_name, new_by_name) = (index(olds), index(news));
    for (i, e) in news.iter().enumerate() {
        let Some(&o) = old_by_name.get(name(e).as_str()) else {
            out.push(Change {
                spec: whole,
                key: format!("{section}[{i}]"),
                element: Some(label(e)),
                old: None,
                new: Some(name(e).clone()),
                path: vec![Key(section), Index(i)],
            });
            continue;
        };
        for &spec in specs {
            let Some(f) = get(&spec.get) else { continue };
            let (x, y) = (f(old, o), f(new, e));
            if x != y {
                let field = field_of(spec.key);
                out.push(Change {
                    spec,
                    key: key_of(&[Key(section), Index(i), Key(field)]),
                    element: Some(label(e)),
                    old: Some(x),
                    new: Some(y),
                    path: vec![Key(section), Index(i), Key(field)],
                });
            }
        }
    }
    for o in olds.iter().filter(|o| !new_by_name.contains_key(name(o).as_str())) {
        out.push(Change {
            spec: whole,
            key: section.to_string(),
            element: Some(label(o)),
            old: Some(name(o).clone()),
            new: None,
            path: vec![Key(section)],
        });
    }
}

/// Which log line a change goes on: its service's or tunnel's, its port key's own, or its
/// plain table's.
fn line_of(c: &Change) -> &str {
    match &c.element {
        Some(e) => e,
        None if c.key.contains('[') => &c.key,
        None => section_of(c.spec.key),
    }
}

/// One log line for changes that share it.
fn describe(old: &Config, new: &Config, group: &[Change]) -> String {
    let first = &group[0];
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".to_string());
    let fields = || {
        group
            .iter()
            .map(|c| format!("{} {} -> {}", field_of(c.spec.key), value(&c.old), value(&c.new)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match &first.element {
        Some(e) if first.old.is_none() => format!("{e} added"),
        Some(e) if first.new.is_none() => format!("{e} removed"),
        Some(e) => format!("{e} changed: {}", fields()),
        None if matches!(first.spec.get, Get::Sections) => {
            format!("{} sections {} -> {}", first.key, value(&first.old), value(&first.new))
        }
        None if first.key.contains('[') => format!("{} {} -> {}", first.key, value(&first.old), value(&first.new)),
        None => match section_of(first.spec.key) {
            "flow_limit" => format!("flow_limit {} -> {}", flow_limit_state(old), flow_limit_state(new)),
            "icmp" => format!("icmp limits changed: {}", fields()),
            "tcp_reset" => format!("tcp_reset limits changed: {}", fields()),
            "reassembly" => format!("reassembly limits {}", fields()),
            section => format!("{section} {}", fields()),
        },
    }
}

/// `on table_len 4096` (and the lcores, when only some): the whole of `[flow_limit]` in one
/// phrase, as the reload log line has always put it.
fn flow_limit_state(c: &Config) -> String {
    let f = &c.flow_limit;
    let mut s = format!("{} table_len {}", if f.enabled { "on" } else { "off" }, f.table_len);
    if f.rx_slots.is_some() {
        s.push_str(&format!(" lcores {}", flow_limit_lcores(c)));
    }
    s
}
