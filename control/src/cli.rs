//! The command line (fixed by the user-facing contract, `docs/contract.md`).

use std::path::PathBuf;
use std::time::Duration;

/// Usage text.
pub const USAGE: &str = "\
usage: fastpathd --config FILE [--check-config] [--exit-when-idle MS] [--metrics-dump FILE]
                 [--stats-interval SECONDS] [-- EXTRA_EAL_ARGS...]

  --config FILE            the TOML config (see configs/demo.toml)
  --check-config           validate the config, print every error, exit 0 (valid) or 1
  --exit-when-idle MS      stop once no packet arrived for MS milliseconds after the first one
  --metrics-dump FILE      at exit, write the final metrics in Prometheus text format to FILE
  --stats-interval SECONDS print a one-line live view on stderr every SECONDS
  -- EXTRA_EAL_ARGS...     appended to the config's [dpdk] eal_args

SIGINT/SIGTERM stop cleanly. Exit codes: 0 clean stop, 1 bad config, 2 bad usage,
3 DPDK or port failure.";

/// Parsed options.
#[derive(Debug, Default, PartialEq)]
pub struct Options {
    /// `--config`.
    pub config: PathBuf,
    /// `--check-config`.
    pub check_config: bool,
    /// `--exit-when-idle`.
    pub exit_when_idle: Option<Duration>,
    /// `--metrics-dump`.
    pub metrics_dump: Option<PathBuf>,
    /// `--stats-interval`.
    pub stats_interval: Option<Duration>,
    /// After `--`.
    pub extra_eal_args: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Run (or check) with these options.
    Run(Options),
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Parses `args` (without the program name). The error is a one-line message for stderr.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut o = Options::default();
    let mut config = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag {
            "--" => {
                o.extra_eal_args = it.by_ref().cloned().collect();
                break;
            }
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--config" => config = Some(PathBuf::from(value("--config")?)),
            "--check-config" => o.check_config = true,
            "--exit-when-idle" => {
                let v = value("--exit-when-idle")?;
                let ms: u64 = v
                    .parse()
                    .map_err(|_| format!("--exit-when-idle: {v:?} is not a number of milliseconds"))?;
                o.exit_when_idle = Some(Duration::from_millis(ms));
            }
            "--metrics-dump" => o.metrics_dump = Some(PathBuf::from(value("--metrics-dump")?)),
            "--stats-interval" => {
                let v = value("--stats-interval")?;
                let s: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| format!("--stats-interval: {v:?} is not a positive number of seconds"))?;
                o.stats_interval = Some(Duration::from_secs_f64(s));
            }
            other => return Err(format!("unknown argument {other:?} (EAL arguments go after `--`)")),
        }
    }
    o.config = config.ok_or("--config FILE is required")?;
    Ok(Command::Run(o))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Command, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn full_command_line() {
        let Command::Run(o) =
            p("--config c.toml --exit-when-idle 500 --metrics-dump=m.prom --stats-interval 0.5 -- --vdev=x -m 64")
                .unwrap()
        else {
            panic!()
        };
        assert_eq!(o.config, PathBuf::from("c.toml"));
        assert_eq!(o.exit_when_idle, Some(Duration::from_millis(500)));
        assert_eq!(o.metrics_dump, Some(PathBuf::from("m.prom")));
        assert_eq!(o.stats_interval, Some(Duration::from_millis(500)));
        assert_eq!(o.extra_eal_args, vec!["--vdev=x", "-m", "64"]);
        assert!(!o.check_config);
    }

    #[test]
    fn usage_errors() {
        assert!(p("").unwrap_err().contains("--config"));
        assert!(p("--config").unwrap_err().contains("needs a value"));
        assert!(p("--config c --exit-when-idle soon")
            .unwrap_err()
            .contains("milliseconds"));
        assert!(p("--config c --stats-interval 0").is_err());
        assert!(p("--config c --bogus").unwrap_err().contains("unknown argument"));
        assert_eq!(p("--help").unwrap(), Command::Help);
    }
}
