//! Live reload: on SIGHUP or when the config file changes on disk, the new file is parsed and
//! fully validated here, on the control thread; the runtime tables are built from it and
//! published to the lcores in one step (see `fastpath::generation`). A file that is invalid, or
//! that changes settings only a restart can apply (`config::KEYS` says which), is refused with a
//! message naming the keys and their lines, and the running config stays. An applied reload logs
//! every key it changed.
//!
//! The file is watched by polling its metadata (device, inode, size, mtime) every control tick:
//! that sees in-place writes and editors' write-to-temp-then-rename alike, works on any file
//! system, and cannot miss an event. A change is applied once the file has been stable for
//! `[control] debounce_ms` (200 ms by default), so a half-written file is not read and a tool
//! that writes in steps causes one reload; `[control] watch = false` leaves reloads to SIGHUP.

use crate::config::{self, Config};
use crate::table_builder::TableBuilder;
use fastpath::generation::{Published, Retired};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Reload counters, read by the metrics collector.
#[derive(Default, Debug)]
pub struct ReloadStats {
    /// Reloads applied.
    pub success: AtomicU64,
    /// Reloads refused.
    pub failure: AtomicU64,
    /// Unix time of the last applied reload (or of the start), as f64 bits.
    pub last_success: AtomicU64,
}

impl ReloadStats {
    fn mark_success_now(&self) {
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        self.last_success.store(t.to_bits(), Ordering::Relaxed);
    }
    /// Unix time of the last success.
    pub fn last_success_seconds(&self) -> f64 {
        f64::from_bits(self.last_success.load(Ordering::Relaxed))
    }
}

/// The running config, shared with the control socket's thread: replaced whole at every
/// applied reload, read by cloning the `Arc` (never held across anything else).
pub type RunningConfig = Arc<RwLock<Arc<Config>>>;

/// What `fastpathctl reload` reports: a reload's (or a dry run's) result.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ReloadReport {
    /// The config file.
    pub file: String,
    /// Nothing was changed, only planned.
    pub dry_run: bool,
    /// A new generation was published.
    pub applied: bool,
    /// The generation running before.
    pub generation_before: u64,
    /// The generation running after (the same unless applied).
    pub generation_after: u64,
    /// Every key whose value changes, in the reload-key table's order.
    pub changes: Vec<ReportChange>,
    /// The changes only a restart applies, as the refusal logs them.
    pub refused: Vec<ReportError>,
    /// Why the file is invalid, if it is.
    pub errors: Vec<ReportError>,
    /// The reload's log line: what was (or would be) published, or why it is refused.
    pub message: String,
}

/// One changed key.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReportChange {
    /// As errors name it: `lcores.mode`, `port[0].ipv4`, `service[1]` (added).
    pub key: String,
    /// The service or tunnel: `service "dns"`.
    pub element: Option<String>,
    /// The value before (`None`: a section added).
    pub old: Option<String>,
    /// The value after (`None`: a section removed).
    pub new: Option<String>,
    /// `live` or `restart` (the reload-key table's class).
    pub reload: &'static str,
    /// Its line in the new file.
    pub line: Option<usize>,
}

/// One problem with key and line.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReportError {
    /// The key (empty when the file could not be read).
    pub key: String,
    /// Its line.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl ReportError {
    fn all(e: &config::ConfigErrors) -> Vec<ReportError> {
        e.errors
            .iter()
            .map(|e| ReportError {
                key: e.key.clone(),
                line: e.line,
                message: e.message.clone(),
            })
            .collect()
    }
}

/// A file's identity and version, to notice writes and renames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileSig {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

fn signature(path: &Path) -> Option<FileSig> {
    let m = std::fs::metadata(path).ok()?;
    Some(FileSig {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
    })
}

/// The reload machinery, owned by the control thread.
pub struct Reloader {
    path: PathBuf,
    running: Config,
    builder: TableBuilder,
    published: Arc<Published>,
    retired: Retired,
    stats: Arc<ReloadStats>,
    loaded_sig: Option<FileSig>,
    seen_sig: Option<FileSig>,
    changed_at: Option<Instant>,
    shared: RunningConfig,
    backends: Option<Arc<crate::backends::BackendHealth>>,
}

impl Reloader {
    /// A reloader for the config at `path`, currently running `running` as published.
    pub fn new(
        path: PathBuf,
        running: Config,
        builder: TableBuilder,
        published: Arc<Published>,
        stats: Arc<ReloadStats>,
    ) -> Self {
        stats.mark_success_now();
        let sig = signature(&path);
        let shared = Arc::new(RwLock::new(Arc::new(running.clone())));
        Reloader {
            path,
            running,
            builder,
            published,
            retired: Retired::default(),
            stats,
            loaded_sig: sig,
            seen_sig: sig,
            changed_at: None,
            shared,
            backends: None,
        }
    }

    /// Keeps `backends`' checks in step with each applied config, and publishes a generation
    /// whenever a backend's state changes (the builder must read the same `backends`).
    pub fn with_backend_health(mut self, backends: Arc<crate::backends::BackendHealth>) -> Self {
        self.backends = Some(backends);
        self
    }

    /// A backend's health changed: the running config's tables again, built with the new
    /// states, published like a reload's (no file read, not counted as a reload).
    fn publish_backend_health(&mut self) {
        let generation = self.published.generation() + 1;
        let started = Instant::now();
        match self.builder.build(&self.running, generation) {
            Ok(t) => {
                let old = self.published.publish(Arc::new(t));
                self.retired.retire(old);
                tracing::info!(
                    "fastpathd: backend health changed: generation {generation} published (built in {:.1} ms)",
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
            // Only a ring that cannot be made fails a build, and this one makes none; the
            // flag is set again to retry at the next tick.
            Err(e) => {
                tracing::error!("fastpathd: backend health changed but the tables cannot be built: {e}");
                if let Some(b) = &self.backends {
                    b.mark_changed();
                }
            }
        }
    }

    /// Called every control tick: applies a change of the file once it is stable, and frees
    /// generations no lcore runs any more.
    pub fn tick(&mut self) {
        self.retired.collect();
        if self.backends.as_ref().is_some_and(|b| b.take_changed()) {
            self.publish_backend_health();
        }
        // `[control] watch = false`: only SIGHUP reloads (a watch turned back on by a SIGHUP
        // starts from the version that SIGHUP loaded).
        if !self.running.control.watch {
            self.changed_at = None;
            self.seen_sig = self.loaded_sig;
            return;
        }
        let sig = signature(&self.path);
        if sig != self.seen_sig {
            self.seen_sig = sig;
            self.changed_at = Some(Instant::now());
        }
        if let Some(t) = self.changed_at {
            if t.elapsed() >= self.running.control.debounce {
                self.changed_at = None;
                // A SIGHUP may already have loaded exactly this version.
                if sig.is_some() && sig != self.loaded_sig {
                    self.reload("file changed");
                }
            }
        }
    }

    /// Reads, validates and applies the config file. Returns whether it was applied.
    pub fn reload(&mut self, why: &str) -> bool {
        self.run(why, false).applied
    }

    /// What a reload of the file now would do, changing nothing: the file read and validated,
    /// every changed key with its class and line, the refusals as a reload would log them.
    pub fn dry_run(&mut self) -> ReloadReport {
        self.run("fastpathctl reload --dry-run", true)
    }

    /// A reload asked for by `fastpathctl reload`: exactly SIGHUP's, reported.
    pub fn reload_reporting(&mut self, why: &str) -> ReloadReport {
        self.run(why, false)
    }

    /// The reload (or, `dry_run`, its plan), as a report.
    fn run(&mut self, why: &str, dry_run: bool) -> ReloadReport {
        let sig = signature(&self.path);
        let file = self.path.display().to_string();
        let before = self.published.generation();
        let mut report = ReloadReport {
            file: file.clone(),
            dry_run,
            applied: false,
            generation_before: before,
            generation_after: before,
            ..Default::default()
        };
        let loaded = config::read(&self.path).and_then(|src| Ok((config::parse_checked(&src, &file)?, src)));
        let (new, src) = match loaded {
            Ok((loaded, src)) => {
                if !dry_run {
                    loaded.log_warnings();
                }
                (loaded.config, src)
            }
            Err(e) => {
                report.errors = ReportError::all(&e);
                report.message = format!("the new config is invalid:\n{e}");
                if !dry_run {
                    self.loaded_sig = sig;
                    self.fail(why, &report.message);
                }
                return report;
            }
        };
        report.changes = self
            .running
            .located_changes(&new, &src)
            .into_iter()
            .map(|(c, line)| ReportChange {
                key: c.key,
                element: c.element,
                old: c.old,
                new: c.new,
                reload: match c.spec.reload {
                    config::Reload::Live => "live",
                    config::Reload::Restart(_) => "restart",
                },
                line,
            })
            .collect();
        if !dry_run {
            self.loaded_sig = sig;
        }
        // Keys only read at start-up (config::KEYS says which): named with their lines.
        if let Some(restart) = self.running.restart_errors(&new, &src, &file) {
            let keys: Vec<&str> = restart.errors.iter().map(|e| e.key.as_str()).collect();
            report.message = format!(
                "these settings need a restart, not a reload: {}; edit them back or restart\n{restart}",
                keys.join(", ")
            );
            report.refused = ReportError::all(&restart);
            if !dry_run {
                self.fail(why, &report.message);
            }
            return report;
        }
        let changes = self.running.describe_changes(&new);
        let what = if changes.is_empty() {
            "no table changed".to_string()
        } else {
            changes.join("; ")
        };
        if dry_run {
            report.message = format!("would publish generation {}: {what}", before + 1);
            return report;
        }
        let generation = before + 1;
        if let Some(b) = &self.backends {
            b.sync(&new);
        }
        let tables = match self.builder.build(&new, generation) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                if let Some(b) = &self.backends {
                    b.sync(&self.running);
                }
                report.message = format!("cannot build the new tables: {e}");
                self.fail(why, &report.message);
                return report;
            }
        };
        let old = self.published.publish(tables);
        self.retired.retire(old);
        crate::kernel_interface::sync_addresses(&self.running, &new);
        self.running = new;
        *self.shared.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(self.running.clone());
        self.stats.success.fetch_add(1, Ordering::Relaxed);
        self.stats.mark_success_now();
        tracing::info!("fastpathd: reload ({why}): generation {generation} published: {what}");
        report.applied = true;
        report.generation_after = generation;
        report.message = format!("generation {generation} published: {what}");
        report
    }

    /// The running config, as the control socket reads it (replaced at every applied reload).
    pub fn running(&self) -> RunningConfig {
        self.shared.clone()
    }

    fn fail(&mut self, why: &str, msg: &str) -> bool {
        self.stats.failure.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            "fastpathd: reload ({why}) refused, generation {} keeps running: {msg}",
            self.published.generation()
        );
        false
    }
}
