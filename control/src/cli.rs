//! The command line (fixed by the user-facing contract, `docs/contract.md`), parsed by clap.
//!
//! The flags and exit codes are a contract: `--config FILE` (required to run), `--check-config`,
//! `--exit-when-idle MS`, `--metrics-dump FILE`, `--stats-interval SECONDS`, `--log-level
//! LEVEL`, `--version`, and EAL arguments after `--`. A malformed value, a value given to a
//! switch (`--check-config=no`), a flag taken for a value (`--config --check-config`) and a
//! repeated option are usage errors (exit 2), as is anything unknown. The man page and the
//! shell completions are generated from the same definition (`--generate-man`,
//! `--generate-completions SHELL`, hidden: the package build uses them).

use clap::{CommandFactory, Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
SIGHUP reloads the config; SIGINT and SIGTERM stop cleanly.
Exit codes: 0 clean stop, 1 bad config, 2 bad usage, 3 DPDK or port failure.";

/// `fastpathd`: the DPDK fast-path packet processor.
#[derive(Parser, Debug, PartialEq)]
#[command(
    name = "fastpathd",
    about = "DPDK fast-path packet processor: ARP/NDP/echo, reassembly, GRE, UDP/TCP services, rate-limited ICMP",
    after_help = AFTER_HELP,
    disable_version_flag = true,
    args_override_self = false
)]
pub struct Args {
    /// The TOML config (see /etc/fastpathd/fastpathd.toml or configs/demo.toml).
    #[arg(long, value_name = "FILE", required_unless_present_any = ["version", "generate_man", "generate_completions"])]
    pub config: Option<PathBuf>,
    /// Validate the config and check it against this machine, print every problem, exit 0 (valid) or 1.
    #[arg(long)]
    pub check_config: bool,
    /// Stop once no packet arrived for MS milliseconds after the first one.
    #[arg(long, value_name = "MS", value_parser = parse_millis)]
    pub exit_when_idle: Option<Duration>,
    /// At exit, write the final metrics in Prometheus text format to FILE.
    #[arg(long, value_name = "FILE")]
    pub metrics_dump: Option<PathBuf>,
    /// Print a one-line live view on stderr every SECONDS.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub stats_interval: Option<Duration>,
    /// The least severe messages logged, fastpathd's and DPDK's alike.
    #[arg(long, value_name = "LEVEL", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,
    /// Run every packet of CAPTURE (pcap or pcapng) through the config's pipeline offline (no
    /// DPDK, no root): one trace record per packet, then a summary by outcome; exit 0.
    #[arg(long, value_name = "CAPTURE")]
    pub explain: Option<PathBuf>,
    /// With --explain: one JSON object per line instead of text.
    #[arg(long, requires = "explain")]
    pub json: bool,
    /// With --explain: time follows the capture's timestamps (default: as fast as it reads,
    /// as the daemon replaying it through net_pcap).
    #[arg(long, requires = "explain")]
    pub capture_time: bool,
    /// Print fastpathd's version, the commit it was built from and the DPDK version it runs on.
    #[arg(short = 'V', long)]
    pub version: bool,
    /// Write the man page (roff) to stdout.
    #[arg(long, hide = true)]
    pub generate_man: bool,
    /// Write the completion script for SHELL to stdout.
    #[arg(long, value_name = "SHELL", hide = true)]
    pub generate_completions: Option<clap_complete::Shell>,
    /// Appended to the config's [dpdk] eal_args.
    #[arg(last = true, value_name = "EXTRA_EAL_ARGS")]
    pub extra_eal_args: Vec<String>,
}

/// `--log-level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Errors and warnings.
    Warn,
    /// The default: start-up, reloads, link changes, the stop summary.
    Info,
    /// More detail (DPDK's debug messages included).
    Debug,
    /// Everything.
    Trace,
}

fn parse_millis(v: &str) -> Result<Duration, String> {
    v.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("{v:?} is not a number of milliseconds"))
}

fn parse_seconds(v: &str) -> Result<Duration, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{v:?} is not a positive number of seconds"))
}

/// Parsed options for a run (or a check).
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
    /// `--explain CAPTURE`.
    pub explain: Option<PathBuf>,
    /// `--json`.
    pub json: bool,
    /// `--capture-time`.
    pub capture_time: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    /// Run (or check) with these options.
    Run(Options, LogLevel),
    /// `--version`.
    Version,
    /// `--generate-man`.
    Man,
    /// `--generate-completions SHELL`.
    Completions(clap_complete::Shell),
}

/// Parses the whole command line (program name first). `Err` is clap's: `--help` (print it,
/// exit 0) or a usage error (print it, exit 2); `clap::Error::exit` does both.
pub fn parse<I, T>(args: I) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let a = Args::try_parse_from(args)?;
    if a.version {
        return Ok(Command::Version);
    }
    if a.generate_man {
        return Ok(Command::Man);
    }
    if let Some(shell) = a.generate_completions {
        return Ok(Command::Completions(shell));
    }
    let level = a.log_level;
    Ok(Command::Run(
        Options {
            config: a.config.expect("clap requires --config"),
            check_config: a.check_config,
            exit_when_idle: a.exit_when_idle,
            metrics_dump: a.metrics_dump,
            stats_interval: a.stats_interval,
            extra_eal_args: a.extra_eal_args,
            explain: a.explain,
            json: a.json,
            capture_time: a.capture_time,
        },
        level,
    ))
}

/// The `--version` text: fastpathd's version and commit, and the DPDK version it runs on (read
/// from the linked librte_eal, so a DPDK upgrade under the same binary shows).
pub fn version_text() -> String {
    format!(
        "fastpathd {}\ncommit {}\n{}",
        env!("CARGO_PKG_VERSION"),
        env!("FASTPATHD_COMMIT"),
        fastpath::dpdk::version()
    )
}

/// The man page, fastpathd(8), in roff.
pub fn man_page() -> Vec<u8> {
    let cmd = Args::command();
    let man = clap_mangen::Man::new(cmd).section("8").manual("System Administration");
    let mut out = Vec::new();
    man.render(&mut out).expect("writing to a Vec cannot fail");
    out.extend_from_slice(MAN_EXTRA.as_bytes());
    out
}

/// Sections clap does not generate: files, signals, exit codes, where the rest is documented.
const MAN_EXTRA: &str = r#".SH FILES
.TP
\fI/etc/fastpathd/fastpathd.toml\fR
The config the systemd unit runs with. Every key is described in
/usr/share/doc/fastpathd/contract.md.
.SH SIGNALS
.TP
\fBSIGHUP\fR
Reload the config (also done when the file changes, unless [control] watch = false).
A config that is invalid, or changes keys only a restart can apply, is refused and the
running one stays.
.TP
\fBSIGINT\fR, \fBSIGTERM\fR
Stop cleanly: every lcore stops, ports are closed, \-\-metrics\-dump is written.
.SH EXIT STATUS
0 clean stop; 1 bad config; 2 bad usage; 3 DPDK or port failure.
.SH SEE ALSO
\fBdpdk\-dumpcap\fR(1), \fBdpdk\-proc\-info\fR(1), \fBsystemctl\fR(1), \fBjournalctl\fR(1)
"#;

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = Args::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "fastpathd", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    fn p(s: &str) -> Result<Command, clap::Error> {
        parse(std::iter::once("fastpathd").chain(s.split_whitespace()))
    }

    fn run(s: &str) -> Options {
        match p(s).unwrap() {
            Command::Run(o, _) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn full_command_line() {
        let o =
            run("--config c.toml --exit-when-idle 500 --metrics-dump=m.prom --stats-interval 0.5 -- --vdev=x -m 64");
        assert_eq!(o.config, PathBuf::from("c.toml"));
        assert_eq!(o.exit_when_idle, Some(Duration::from_millis(500)));
        assert_eq!(o.metrics_dump, Some(PathBuf::from("m.prom")));
        assert_eq!(o.stats_interval, Some(Duration::from_millis(500)));
        assert_eq!(o.extra_eal_args, vec!["--vdev=x", "-m", "64"]);
        assert!(!o.check_config);
        assert!(run("--check-config --config=c").check_config);
    }

    #[test]
    fn log_levels() {
        let level = |s: &str| match p(s).unwrap() {
            Command::Run(_, l) => l,
            other => panic!("{other:?}"),
        };
        assert_eq!(level("--config c"), LogLevel::Info);
        assert_eq!(level("--config c --log-level debug"), LogLevel::Debug);
        assert_eq!(level("--config c --log-level=error"), LogLevel::Error);
        assert_eq!(
            p("--config c --log-level loud").unwrap_err().kind(),
            ErrorKind::InvalidValue
        );
    }

    #[test]
    fn usage_errors() {
        let kind = |s: &str| p(s).unwrap_err().kind();
        assert_eq!(kind(""), ErrorKind::MissingRequiredArgument);
        assert_eq!(kind("--config"), ErrorKind::InvalidValue);
        assert_eq!(kind("--config c --exit-when-idle soon"), ErrorKind::ValueValidation);
        assert_eq!(kind("--config c --stats-interval 0"), ErrorKind::ValueValidation);
        assert_eq!(kind("--config c --stats-interval NaN"), ErrorKind::ValueValidation);
        assert_eq!(kind("--config c --bogus"), ErrorKind::UnknownArgument);
        // A switch takes no value; a flag is not a file name; an option is given once.
        assert_eq!(kind("--config c --check-config=no"), ErrorKind::TooManyValues);
        assert!(p("--config --check-config").is_err());
        assert_eq!(kind("--config a --config b"), ErrorKind::ArgumentConflict);
        assert_eq!(kind("--help"), ErrorKind::DisplayHelp);
        assert_eq!(kind("-h"), ErrorKind::DisplayHelp);
        // EAL arguments only after `--`.
        assert_eq!(kind("--config c --vdev=x"), ErrorKind::UnknownArgument);
    }

    #[test]
    fn version_and_generators_need_no_config() {
        assert_eq!(p("--version").unwrap(), Command::Version);
        assert_eq!(p("-V").unwrap(), Command::Version);
        assert_eq!(p("--generate-man").unwrap(), Command::Man);
        assert_eq!(
            p("--generate-completions bash").unwrap(),
            Command::Completions(clap_complete::Shell::Bash)
        );
    }

    #[test]
    fn man_page_and_completions_name_every_flag() {
        Args::command().debug_assert();
        let man = String::from_utf8(man_page()).unwrap();
        let bash = String::from_utf8(completions(clap_complete::Shell::Bash)).unwrap();
        for flag in [
            "config",
            "check\\-config",
            "exit\\-when\\-idle",
            "metrics\\-dump",
            "stats\\-interval",
            "log\\-level",
        ] {
            assert!(man.contains(&format!("\\-\\-{flag}")), "man page lacks --{flag}");
            let plain = flag.replace('\\', "");
            assert!(bash.contains(&format!("--{plain}")), "bash completion lacks --{plain}");
        }
        assert!(man.contains("EXIT STATUS") && man.contains(".TH fastpathd 8"), "{man}");
    }
}
