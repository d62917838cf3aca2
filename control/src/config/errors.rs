//! What a config error is, and the plumbing that names its key and finds its line.

use crate::locate::{Locator, Seg};
use std::fmt;

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The dotted key, e.g. `port[0].tx_queues` (empty if the file could not be read at all).
    pub key: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong and what is expected.
    pub message: String,
}

/// Every problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file name as given.
    pub file: String,
    /// The problems, in file order where known.
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            match e.line {
                Some(l) => write!(f, "{}:{}: ", self.file, l)?,
                None => write!(f, "{}: ", self.file)?,
            }
            if e.key.is_empty() {
                write!(f, "{}", e.message)?;
            } else {
                write!(f, "{}: {}", e.key, e.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The dotted key of `path`, e.g. `port[0].tx_queues`.
pub(crate) fn key_of(path: &[Seg]) -> String {
    path.iter().fold(String::new(), |mut s, seg| {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
        s
    })
}

/// Collects validation errors, and warnings (allowed but probably not meant), with their lines.
pub(crate) struct Errs<'a> {
    pub(crate) loc: &'a Locator,
    pub(crate) list: Vec<ConfigError>,
    pub(crate) warnings: Vec<ConfigError>,
}

impl Errs<'_> {
    /// The line where `path` (or its deepest written prefix) is written; line 1 for a key
    /// whose top-level section is not written at all (as the TOML parser's own "missing
    /// field" errors), so every problem has a line.
    fn line(&self, path: &[Seg]) -> Option<usize> {
        self.loc.line_of(path).or(Some(1))
    }

    /// Records a problem with the key at `path`, on the line where `path` is written.
    pub(crate) fn add(&mut self, path: &[Seg], message: impl Into<String>) {
        self.list.push(ConfigError {
            key: key_of(path),
            line: self.line(path),
            message: message.into(),
        });
    }

    /// Records a warning about the key at `path`: the config is accepted, and the line is logged.
    pub(crate) fn warn(&mut self, path: &[Seg], message: impl Into<String>) {
        self.warnings.push(ConfigError {
            key: key_of(path),
            line: self.line(path),
            message: message.into(),
        });
    }
}
