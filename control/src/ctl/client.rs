//! `fastpathctl`: asks the running fastpathd over its control socket and prints the answer, as
//! tables for people or (`--json`) as the daemon's JSON for scripts. The command line is
//! clap's; the man page and the shell completions are generated from the same definition
//! (`--generate-man`, `--generate-completions SHELL`, hidden: the package build uses them).

use super::protocol::{Request, Show};
use clap::{CommandFactory, Parser, Subcommand};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The daemon answered, and the answer is a success.
pub const EXIT_OK: u8 = 0;
/// The daemon answered no: an error, or a reload refused (or one a dry run says would be).
pub const EXIT_REFUSED: u8 = 1;
/// The command line is invalid.
pub const EXIT_USAGE: u8 = 2;
/// The daemon could not be asked: no socket, nobody answering, no answer in time.
pub const EXIT_UNREACHABLE: u8 = 3;

const AFTER_HELP: &str = "\
Exit codes: 0 answered; 1 the daemon refused (an error, a reload refused or, with --dry-run, one
that would be); 2 bad usage; 3 the daemon could not be asked (not running, wrong --socket).";

/// `fastpathctl`: ask the running fastpathd what it is doing.
#[derive(Parser, Debug, PartialEq)]
#[command(
    name = "fastpathctl",
    about = "Ask the running fastpathd: status, live state, what it does with a flow, rates, reloads",
    version,
    after_help = AFTER_HELP
)]
pub struct Args {
    /// The daemon's control socket ([control] socket in its config).
    #[arg(long, value_name = "PATH", global = true, default_value = crate::config::DEFAULT_SOCKET)]
    pub socket: PathBuf,
    /// Print the daemon's answer as JSON (one object) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Write the man page (roff) to stdout.
    #[arg(long, hide = true)]
    pub generate_man: bool,
    /// Write the completion script for SHELL to stdout.
    #[arg(long, value_name = "SHELL", hide = true)]
    pub generate_completions: Option<clap_complete::Shell>,
    #[command(subcommand)]
    pub command: Option<Cmd>,
}

/// The subcommands.
#[derive(Subcommand, Debug, PartialEq)]
pub enum Cmd {
    /// Version, uptime, config generation and path, ports, lcores (busy share), health.
    Status,
    /// One area's live state.
    Show {
        /// services, sockets, tunnels, limits, reassembly or kernel.
        #[arg(value_enum)]
        what: ShowWhat,
    },
    /// What the running config does with a packet: RSS hash and queue, service, socket, backend
    /// (Maglev's pick, and each worker's connection-table entry for the flow), or the closed
    /// port's answer.
    Flow {
        /// udp or tcp (a TCP segment is taken as a SYN).
        #[arg(value_parser = ["udp", "tcp"])]
        protocol: String,
        /// Source ADDR[:PORT] ([ADDR]:PORT for IPv6); no port: 0.
        src: String,
        /// Destination ADDR[:PORT].
        dst: String,
    },
    /// Per-lcore and per-queue packet rates over an interval (two samples of the counters).
    Stats {
        /// Seconds between the two samples.
        #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_interval)]
        interval: f64,
    },
    /// Record what the RX lcores do with the next packets and why, one line each: the stages
    /// that decided and the outcome (the `fastpath_packets_total` label). Records stream as
    /// they come; a reader that falls behind loses records (reported), never packets.
    Trace {
        /// Packets to record before the trace ends.
        #[arg(long, value_name = "N", default_value_t = super::protocol::DEFAULT_TRACE_COUNT,
              value_parser = clap::value_parser!(u64).range(1..))]
        count: u64,
        /// Only this RX lcore (its lcore id).
        #[arg(long, value_name = "L")]
        lcore: Option<u32>,
        /// Which packets: terms joined by `and`: src|dst|host ADDR, [src|dst] port N,
        /// proto tcp|udp|icmp|icmp6|gre|N, outcome NAME, rxport N, rxqueue N.
        #[arg(long, value_name = "EXPR", default_value = "")]
        filter: String,
        /// Keep recording past --count, until interrupted.
        #[arg(long)]
        follow: bool,
    },
    /// Reload the config file as SIGHUP does and report it, key by key.
    Reload {
        /// Only say what a reload would change (live or restart), changing nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `show`'s argument.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowWhat {
    /// Every service: ports, action, fanout, totals.
    Services,
    /// Every socket: depth, capacity, counters.
    Sockets,
    /// Every tunnel: weight, drain, health check state, counters.
    Tunnels,
    /// ICMP error and TCP reset limits, as configured, and their counters.
    Limits,
    /// Reassembly memory, policy, counters.
    Reassembly,
    /// The kernel path: rules, punt budget, listening ports, interfaces.
    Kernel,
}

impl From<ShowWhat> for Show {
    fn from(w: ShowWhat) -> Show {
        match w {
            ShowWhat::Services => Show::Services,
            ShowWhat::Sockets => Show::Sockets,
            ShowWhat::Tunnels => Show::Tunnels,
            ShowWhat::Limits => Show::Limits,
            ShowWhat::Reassembly => Show::Reassembly,
            ShowWhat::Kernel => Show::Kernel,
        }
    }
}

fn parse_interval(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.01 && *s <= 3600.0)
        .ok_or_else(|| format!("{v:?}: seconds, 0.01 to 3600"))
}

/// The man page, fastpathctl(8), in roff.
pub fn man_page() -> Vec<u8> {
    let man = clap_mangen::Man::new(Args::command())
        .section("8")
        .manual("System Administration");
    let mut out = Vec::new();
    man.render(&mut out).expect("writing to a Vec cannot fail");
    out.extend_from_slice(MAN_EXTRA.as_bytes());
    out
}

const MAN_EXTRA: &str = r#".SH SUBCOMMANDS
.TP
\fBstatus\fR
Version, uptime, config generation and path, ports, lcores, health, backends down by their health checks.
.TP
\fBshow\fR \fIservices\fR|\fIsockets\fR|\fItunnels\fR|\fIlimits\fR|\fIreassembly\fR|\fIkernel\fR
One area's live state.
.TP
\fBflow\fR \fIudp\fR|\fItcp\fR \fISRC\fR[:\fIPORT\fR] \fIDST\fR[:\fIPORT\fR]
What the running config does with such a packet; for a tunnel service, Maglev's pick and what
each worker's connection table holds for the flow (the backend it is pinned to).
.TP
\fBstats\fR [\-\-interval \fISECONDS\fR]
Per-lcore and per-queue rates over the interval.
.TP
\fBtrace\fR [\-\-count \fIN\fR] [\-\-lcore \fIL\fR] [\-\-filter \fIEXPR\fR] [\-\-follow]
Record what the RX lcores do with the next packets, and why: one line per packet.
.TP
\fBreload\fR [\-\-dry\-run]
Reload the config as SIGHUP does, or only list what would change.
.SH FILES
.TP
\fI/run/fastpathd/control.sock\fR
The daemon's control socket (mode 0660), unless [control] socket says otherwise.
.SH EXIT STATUS
0 answered; 1 the daemon refused; 2 bad usage; 3 the daemon could not be asked.
.SH SEE ALSO
\fBfastpathd\fR(8)
"#;

/// The completion script for `shell`.
pub fn completions(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = Args::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "fastpathctl", &mut out);
    out
}

/// Why a request got no answer.
#[derive(Debug)]
pub struct Unreachable(pub String);

/// Sends `req` to the daemon at `socket` and reads its answer, within `within`.
pub fn ask(socket: &Path, req: &Request, within: Duration) -> Result<Value, Unreachable> {
    let shown = socket.display();
    let fail = |what: String| Unreachable(format!("fastpathctl: {shown}: {what}"));
    let mut s = connect(socket)?;
    s.set_read_timeout(Some(within)).ok();
    s.set_write_timeout(Some(within)).ok();
    let mut line = serde_json::to_string(req).expect("requests serialize");
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| fail(format!("cannot send the request: {e}")))?;
    let mut answer = String::new();
    s.take(64 << 20)
        .read_to_string(&mut answer)
        .map_err(|e| fail(format!("no answer: {e}")))?;
    serde_json::from_str(answer.trim()).map_err(|e| fail(format!("not an answer ({e}): {:?}", truncate(&answer, 200))))
}

fn connect(socket: &Path) -> Result<std::os::unix::net::UnixStream, Unreachable> {
    std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        Unreachable(format!(
            "fastpathctl: {}: {}",
            socket.display(),
            match e.kind() {
                std::io::ErrorKind::NotFound => {
                    "no such socket: is fastpathd running (and is this its [control] socket)?".into()
                }
                std::io::ErrorKind::ConnectionRefused => "nobody answers: fastpathd is not running".into(),
                _ => format!("cannot connect: {e}"),
            }
        ))
    })
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// Runs the command line `args` (program name first): what to print and the exit code.
pub fn run<I, T>(args: I) -> (String, u8)
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let a = match Args::try_parse_from(args) {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_USAGE } else { EXIT_OK };
            return (e.render().to_string(), code);
        }
    };
    if a.generate_man {
        return (String::from_utf8_lossy(&man_page()).into_owned(), EXIT_OK);
    }
    if let Some(shell) = a.generate_completions {
        return (String::from_utf8_lossy(&completions(shell)).into_owned(), EXIT_OK);
    }
    let Some(cmd) = a.command else {
        let mut c = Args::command();
        return (c.render_help().to_string(), EXIT_USAGE);
    };
    match execute(&a.socket, &cmd, a.json) {
        Ok(out) => out,
        Err(Unreachable(msg)) => (format!("{msg}\n"), EXIT_UNREACHABLE),
    }
}

/// The request for `cmd`, asked, and what to print.
fn execute(socket: &Path, cmd: &Cmd, as_json: bool) -> Result<(String, u8), Unreachable> {
    let within = Duration::from_secs(10);
    let req = match cmd {
        Cmd::Status => Request::Status,
        Cmd::Show { what } => Request::Show { what: (*what).into() },
        Cmd::Flow { protocol, src, dst } => Request::Flow {
            protocol: protocol.clone(),
            src: src.clone(),
            dst: dst.clone(),
        },
        Cmd::Stats { interval } => return stats(socket, *interval, as_json, within),
        Cmd::Trace {
            count,
            lcore,
            filter,
            follow,
        } => {
            let req = Request::Trace {
                count: *count,
                lcore: *lcore,
                filter: filter.clone(),
                follow: *follow,
            };
            return trace(socket, &req, as_json, &mut std::io::stdout(), &mut std::io::stderr());
        }
        Cmd::Reload { dry_run } => Request::Reload { dry_run: *dry_run },
    };
    let within = match cmd {
        Cmd::Reload { .. } => super::protocol::RELOAD_TIME + Duration::from_secs(5),
        _ => within,
    };
    let answer = ask(socket, &req, within)?;
    if answer["ok"] != true {
        let msg = answer["error"].as_str().unwrap_or("the daemon refused").to_string();
        return Ok(if as_json {
            (format!("{answer}\n"), EXIT_REFUSED)
        } else {
            (format!("fastpathctl: {msg}\n"), EXIT_REFUSED)
        });
    }
    let r = &answer["result"];
    let code = match cmd {
        Cmd::Reload { dry_run } => {
            let would = r["errors"].as_array().is_some_and(|e| e.is_empty())
                && r["refused"].as_array().is_some_and(|e| e.is_empty());
            if (*dry_run && would) || r["applied"] == true {
                EXIT_OK
            } else {
                EXIT_REFUSED
            }
        }
        _ => EXIT_OK,
    };
    if as_json {
        return Ok((
            format!("{}\n", serde_json::to_string_pretty(r).unwrap_or_default()),
            code,
        ));
    }
    let text = match cmd {
        Cmd::Status => render_status(r),
        Cmd::Show { what } => render_show(*what, r),
        Cmd::Flow { .. } => render_flow(r),
        Cmd::Reload { .. } => render_reload(r),
        Cmd::Stats { .. } | Cmd::Trace { .. } => unreachable!("returned above"),
    };
    Ok((text, code))
}

/// `trace`: sends the request, then copies the daemon's stream: each record to `out` as it
/// comes (a line, or with `--json` the record's object on one line), what else the stream says
/// (armed, records lost, the end) to `note`. What is left to print when it ends is returned.
fn trace(
    socket: &Path,
    req: &Request,
    as_json: bool,
    out: &mut dyn Write,
    note: &mut dyn Write,
) -> Result<(String, u8), Unreachable> {
    use std::io::BufRead;
    let shown = socket.display();
    let fail = |what: String| Unreachable(format!("fastpathctl: {shown}: {what}"));
    let mut s = connect(socket)?;
    s.set_write_timeout(Some(Duration::from_secs(10))).ok();
    let mut line = serde_json::to_string(req).expect("requests serialize");
    line.push('\n');
    s.write_all(line.as_bytes())
        .map_err(|e| fail(format!("cannot send the request: {e}")))?;
    // The first line within the usual time; then records may be a long time coming.
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let mut lines = std::io::BufReader::new(s.try_clone().map_err(|e| fail(e.to_string()))?).lines();
    let head: Value = match lines.next() {
        Some(Ok(l)) => {
            serde_json::from_str(&l).map_err(|e| fail(format!("not an answer ({e}): {:?}", truncate(&l, 200))))?
        }
        Some(Err(e)) => return Err(fail(format!("no answer: {e}"))),
        None => return Err(fail("closed without an answer".into())),
    };
    if head["ok"] != true {
        let msg = head["error"].as_str().unwrap_or("the daemon refused");
        return Ok(if as_json {
            (format!("{head}\n"), EXIT_REFUSED)
        } else {
            (format!("fastpathctl: {msg}\n"), EXIT_REFUSED)
        });
    }
    let r = &head["result"];
    let _ = writeln!(
        note,
        "fastpathctl: tracing {} on lcore{} {}{}",
        if r["follow"] == true {
            "until interrupted".to_string()
        } else {
            format!("{} packet{}", r["count"], if r["count"] == 1 { "" } else { "s" })
        },
        if r["lcores"].as_array().is_some_and(|a| a.len() > 1) {
            "s"
        } else {
            ""
        },
        r["lcores"]
            .as_array()
            .map(|a| a.iter().map(|l| l.to_string()).collect::<Vec<_>>().join(", "))
            .unwrap_or_default(),
        match r["filter"].as_str() {
            Some(f) if !f.is_empty() => format!(" matching {f:?}"),
            _ => String::new(),
        }
    );
    let _ = note.flush();
    s.set_read_timeout(None).ok();
    for l in lines {
        let l = l.map_err(|e| fail(format!("the trace broke off: {e}")))?;
        let v: Value =
            serde_json::from_str(&l).map_err(|e| fail(format!("not a trace line ({e}): {:?}", truncate(&l, 200))))?;
        if let Some(rec) = v.get("record") {
            let text = if as_json {
                rec.to_string()
            } else {
                crate::trace::line(rec)
            };
            if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
                // The reader of our output went away (a pipe to `head`): so do we.
                return Ok((String::new(), EXIT_OK));
            }
        } else if let Some(n) = v.get("lost") {
            let _ = writeln!(
                note,
                "fastpathctl: {n} records lost so far: this reader fell behind (no packet was)"
            );
        } else if let Some(d) = v.get("done") {
            let _ = writeln!(note, "fastpathctl: {} records, {} lost", d["records"], d["lost"]);
            return Ok((String::new(), EXIT_OK));
        }
    }
    Err(fail(
        "the trace ended without its last line: did fastpathd stop?".into(),
    ))
}

/// Two samples `interval` apart and the rates between them.
fn stats(socket: &Path, interval: f64, as_json: bool, within: Duration) -> Result<(String, u8), Unreachable> {
    let sample = || -> Result<Value, Unreachable> {
        let a = ask(socket, &Request::Stats, within)?;
        if a["ok"] != true {
            return Err(Unreachable(format!(
                "fastpathctl: {}: {}",
                socket.display(),
                a["error"].as_str().unwrap_or("refused")
            )));
        }
        Ok(a["result"].clone())
    };
    let a = sample()?;
    std::thread::sleep(Duration::from_secs_f64(interval));
    let b = sample()?;
    let r = rates(&a, &b);
    Ok(if as_json {
        (
            format!("{}\n", serde_json::to_string_pretty(&r).unwrap_or_default()),
            EXIT_OK,
        )
    } else {
        (render_stats(&r), EXIT_OK)
    })
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// The rates between two `stats` samples, per second of the daemon's clock.
pub fn rates(a: &Value, b: &Value) -> Value {
    let secs = (num(&b["uptime_seconds"]) - num(&a["uptime_seconds"])).max(1e-9);
    let hz = num(&b["tsc_hz"]).max(1.0);
    let empty = Vec::new();
    let la = a["lcores"].as_array().unwrap_or(&empty);
    let lb = b["lcores"].as_array().unwrap_or(&empty);
    let mut lcores = Vec::new();
    let mut queues = Vec::new();
    for (x, y) in la.iter().zip(lb) {
        let d = |k: &str| (num(&y[k]) - num(&x[k])).max(0.0);
        let q_sum = |v: &Value, dir: &str| {
            v[dir]
                .as_array()
                .map_or(0.0, |q| q.iter().map(|q| num(&q["packets"])).sum())
        };
        for dir in ["rx", "tx"] {
            for (qx, qy) in x[dir]
                .as_array()
                .unwrap_or(&empty)
                .iter()
                .zip(y[dir].as_array().unwrap_or(&empty))
            {
                queues.push(json!({
                    "port": qy["port"],
                    "queue": qy["queue"],
                    "direction": dir,
                    "lcore": y["lcore"],
                    "pps": (num(&qy["packets"]) - num(&qx["packets"])).max(0.0) / secs,
                    "bps": 8.0 * (num(&qy["bytes"]) - num(&qx["bytes"])).max(0.0) / secs,
                }));
            }
        }
        let polls = d("busy_polls") + d("idle_polls");
        // Cycles per packet by outcome over the interval, from the sampled polls.
        let mut cost = serde_json::Map::new();
        if let Some(cy) = y["cost"].as_object() {
            for (o, v) in cy {
                let at = |v: &Value, i: usize| v.get(i).map_or(0.0, num);
                let before = &x["cost"][o];
                let (c, p) = (at(v, 0) - at(before, 0), at(v, 1) - at(before, 1));
                if p > 0.0 {
                    cost.insert(o.clone(), json!({"cycles_per_packet": c / p, "sampled": p}));
                }
            }
        }
        lcores.push(json!({
            "lcore": y["lcore"],
            "role": y["role"],
            // Of the lcore's loop cycles over the interval; wall time where idle is not counted.
            "busy_share": match d("busy_cycles") + d("idle_cycles") {
                total if total > 0.0 => d("busy_cycles") / total,
                _ => (d("busy_cycles") / (secs * hz)).min(1.0),
            },
            "busy_poll_share": if polls > 0.0 { d("busy_polls") / polls } else { 0.0 },
            "rx_pps": (q_sum(y, "rx") - q_sum(x, "rx")).max(0.0) / secs,
            "tx_pps": (q_sum(y, "tx") - q_sum(x, "tx")).max(0.0) / secs,
            "cost": cost,
        }));
    }
    let mut outcomes = serde_json::Map::new();
    if let (Some(oa), Some(ob)) = (a["outcomes"].as_object(), b["outcomes"].as_object()) {
        for (k, v) in ob {
            let d = num(v) - oa.get(k).map_or(0.0, num);
            if d > 0.0 {
                outcomes.insert(k.clone(), (d / secs).into());
            }
        }
    }
    json!({
        "interval_seconds": secs,
        "generation": b["generation"],
        "lcores": lcores,
        "queues": queues,
        "outcomes": outcomes,
    })
}

/// Columns padded to their widest cell.
fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<width$}  ", width = w[i]));
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.iter().map(|h| h.to_string()).collect());
    for r in rows {
        out.push_str(&line(r.clone()));
    }
    out
}

/// A JSON value as a cell: strings bare, null as `-`, arrays comma-joined.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "-".into(),
        Value::Array(a) => a.iter().map(cell).collect::<Vec<_>>().join(","),
        Value::Number(n) if n.is_f64() => format!("{:.3}", n.as_f64().unwrap_or(0.0)),
        other => other.to_string(),
    }
}

fn rate(pps: f64) -> String {
    if pps >= 1e6 {
        format!("{:.2}M", pps / 1e6)
    } else if pps >= 1e3 {
        format!("{:.1}k", pps / 1e3)
    } else {
        format!("{pps:.0}")
    }
}

fn pct(v: &Value) -> String {
    format!("{:.1}%", 100.0 * num(v))
}

fn rows_of(list: &Value, cols: &[&str]) -> Vec<Vec<String>> {
    list.as_array()
        .map(|a| a.iter().map(|x| cols.iter().map(|c| cell(&x[*c])).collect()).collect())
        .unwrap_or_default()
}

fn render_status(r: &Value) -> String {
    let mut out = format!(
        "fastpathd {} (commit {}, {}), pid {}, up {:.1} s, mode {}\nconfig {} generation {} (reloads: {} applied, {} refused)\nhealth: {}\n",
        cell(&r["version"]),
        cell(&r["commit"]),
        cell(&r["dpdk"]),
        cell(&r["pid"]),
        num(&r["uptime_seconds"]),
        cell(&r["mode"]),
        cell(&r["config"]["path"]),
        cell(&r["config"]["generation"]),
        cell(&r["config"]["reloads"]["success"]),
        cell(&r["config"]["reloads"]["failure"]),
        if r["health"]["ok"] == true {
            "ok".to_string()
        } else {
            format!("NOT OK: {}", cell(&r["health"]["reasons"]))
        },
    );
    if let Some(b) = r["backends"].as_array().filter(|b| !b.is_empty()) {
        for line in b {
            out.push_str(&format!("backends: {}\n", cell(line)));
        }
    }
    out.push_str("\nPORTS\n");
    out.push_str(&table(
        &[
            "DEVICE", "ID", "DRIVER", "LINK", "RXQ", "TXQ", "MAC", "IPV4", "IPV6", "RX", "TX",
        ],
        &rows_of(
            &r["ports"],
            &[
                "device",
                "port_id",
                "driver",
                "link",
                "rx_queues",
                "tx_queues",
                "mac",
                "ipv4",
                "ipv6",
                "rx_packets",
                "tx_packets",
            ],
        ),
    ));
    out.push_str("\nLCORES\n");
    let rows: Vec<Vec<String>> = r["lcores"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| {
                    let queues = l["rx_queues"]
                        .as_array()
                        .map(|q| {
                            q.iter()
                                .map(|q| format!("{}:{}", cell(&q["port"]), cell(&q["queue"])))
                                .collect::<Vec<_>>()
                                .join(",")
                        })
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| "-".into());
                    vec![
                        cell(&l["lcore"]),
                        cell(&l["role"]),
                        cell(&l["cpus"]),
                        queues,
                        pct(&l["busy_share"]),
                        cell(&l["generation"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&table(
        &["LCORE", "ROLE", "CPUS", "RX QUEUES", "BUSY", "GENERATION"],
        &rows,
    ));
    out
}

fn render_show(what: ShowWhat, r: &Value) -> String {
    match what {
        ShowWhat::Services => table(
            &[
                "SERVICE",
                "PROTO",
                "PORTS",
                "ACTION",
                "TUNNELS",
                "FANOUT",
                "SOCKETS",
                "DEPTH",
                "DELIVERED",
                "FULL",
                "ROLLOVER",
            ],
            &rows_of(
                &r["services"],
                &[
                    "name",
                    "protocol",
                    "ports",
                    "action",
                    "tunnels",
                    "fanout",
                    "sockets",
                    "depth",
                    "delivered",
                    "full",
                    "rollover_total",
                ],
            ),
        ),
        ShowWhat::Sockets => table(
            &[
                "SERVICE",
                "SOCKET",
                "WORKER",
                "DEPTH",
                "CAPACITY",
                "PRESSURE",
                "DELIVERED",
                "FULL",
                "ROLLOVER",
                "HUGE",
                "FAILED",
                "DEQUEUED",
            ],
            &rows_of(
                &r["sockets"],
                &[
                    "service",
                    "socket",
                    "worker",
                    "depth",
                    "capacity",
                    "pressure",
                    "delivered",
                    "full",
                    "rollover",
                    "rollover_huge",
                    "rollover_failed",
                    "dequeued",
                ],
            ),
        ),
        ShowWhat::Tunnels => table(
            &[
                "TUNNEL", "LOCAL", "REMOTE", "WEIGHT", "DRAIN", "HEALTH", "UP", "SERVICES", "ENCAP", "DECAP",
                "SEQ_DROP", "TOO_BIG", "TX_FULL",
            ],
            &rows_of(
                &r["tunnels"],
                &[
                    "name",
                    "local",
                    "remote",
                    "weight",
                    "drain",
                    "health",
                    "up",
                    "services",
                    "encap",
                    "decap",
                    "seq_dropped",
                    "too_big",
                    "tx_full",
                ],
            ),
        ),
        ShowWhat::Limits => {
            let i = &r["icmp"];
            let t = &r["tcp_reset"];
            let mut out = String::from("ICMP ERRORS\n");
            out.push_str(&format!(
                "  ratemask {}  {} msgs/s  burst {}  per destination 1 per {} ms, burst {}  exempt {}\n  sent {}  rate limited {}  outcomes {}\n",
                cell(&i["ratemask"]), cell(&i["msgs_per_sec"]), cell(&i["burst"]), cell(&i["peer_interval_ms"]),
                cell(&i["peer_burst"]), cell(&i["exempt"]), i["sent"], i["rate_limited"], i["outcomes"]
            ));
            out.push_str("TCP RESETS\n");
            out.push_str(&format!(
                "  enabled {}  {} resets/s  burst {}  per destination 1 per {} ms, burst {}\n  sent {}  rate limited {}  outcomes {}\n",
                cell(&t["enabled"]), cell(&t["msgs_per_sec"]), cell(&t["burst"]), cell(&t["peer_interval_ms"]),
                cell(&t["peer_burst"]), t["sent"], t["rate_limited"], t["outcomes"]
            ));
            out
        }
        ShowWhat::Reassembly => {
            let mut out = format!(
                "policy {}  high_thresh_bytes {}  timeout_ms {}  max_fragments {}  max_per_source {}  max_datagrams {}  buffers {}\nmemory held {} bytes\n",
                cell(&r["policy"]), cell(&r["high_thresh_bytes"]), cell(&r["timeout_ms"]), cell(&r["max_fragments"]),
                cell(&r["max_per_source"]), cell(&r["max_datagrams"]), cell(&r["buffers"]), cell(&r["memory_bytes"])
            );
            out.push_str(&table(&["LCORE", "BYTES"], &rows_of(&r["memory"], &["lcore", "bytes"])));
            if let Some(f) = r["families"].as_object() {
                for (fam, v) in f {
                    let refused: Vec<String> = v["refused"]
                        .as_object()
                        .map(|m| {
                            m.iter()
                                .filter(|(_, n)| num(n) > 0.0)
                                .map(|(k, n)| format!("{k}={n}"))
                                .collect()
                        })
                        .unwrap_or_default();
                    out.push_str(&format!(
                        "{fam}: completed {} timeouts {} refused {}\n",
                        cell(&v["completed"]),
                        cell(&v["timeouts"]),
                        if refused.is_empty() {
                            "0".into()
                        } else {
                            refused.join(" ")
                        }
                    ));
                }
            }
            out
        }
        ShowWhat::Kernel => {
            if r["enabled"] != true {
                return "no kernel path: no [[port]] has a kernel_interface\n".into();
            }
            let mut out = format!(
                "punt {}  punt_rate {}/s  punt_burst {}  socket_capacity {}\nkernel listens on TCP {}\n",
                cell(&r["punt"]),
                cell(&r["punt_rate"]),
                cell(&r["punt_burst"]),
                cell(&r["socket_capacity"]),
                cell(&r["listeners"])
            );
            out.push_str(&table(
                &[
                    "PORT",
                    "INTERFACE",
                    "LINK",
                    "TO_KERNEL",
                    "FROM_KERNEL",
                    "IF_FULL",
                    "PORT_FULL",
                    "INVALID",
                ],
                &rows_of(
                    &r["interfaces"],
                    &[
                        "port",
                        "kernel_interface",
                        "link",
                        "to_kernel",
                        "from_kernel",
                        "interface_full",
                        "port_full",
                        "invalid",
                    ],
                ),
            ));
            out.push_str(&format!("outcomes {}\n", r["outcomes"]));
            out
        }
    }
}

fn render_flow(r: &Value) -> String {
    let d = &r["detail"];
    let mut out = format!(
        "{} {} -> {}\n  hash {} ({})\n  port {}  rx queue {} ({})  rx lcore {}\n  decision: {}\n",
        cell(&r["protocol"]),
        cell(&r["src"]),
        cell(&r["dst"]),
        cell(&r["hash"]),
        cell(&r["hash_basis"]),
        cell(&r["port"]),
        cell(&r["rx_queue"]),
        cell(&r["rx_queue_basis"]),
        cell(&r["rx_lcore"]),
        cell(&r["decision"]),
    );
    if !d["service"].is_null() {
        out.push_str(&format!("  service {}\n", cell(&d["service"])));
    }
    match &d["socket"] {
        Value::Object(s) => out.push_str(&format!(
            "  socket {} #{} (depth {} of {})\n",
            cell(&s["service"]),
            cell(&s["socket"]),
            cell(&s["depth"]),
            cell(&s["capacity"])
        )),
        Value::String(s) => out.push_str(&format!("  socket: {s}\n")),
        _ => {}
    }
    if d.get("backend").is_some_and(|b| !b.is_null()) {
        out.push_str(&format!("  backend tunnel {} (Maglev's pick)\n", cell(&d["backend"])));
    }
    for e in d["conntrack"].as_array().into_iter().flatten() {
        match e["backend"].as_str() {
            Some(b) => out.push_str(&format!(
                "  connection table of lcore {}: tunnel {b}, {}{}{}\n",
                cell(&e["lcore"]),
                cell(&e["state"]),
                if e["pinned"] == true {
                    ", pinned (not Maglev's pick)"
                } else {
                    ""
                },
                if e["kept"] == false {
                    "; its backend left the service or is down: the next packet re-pins it"
                } else {
                    ""
                },
            )),
            None => out.push_str(&format!(
                "  connection table of lcore {}: {} (generation {})\n",
                cell(&e["lcore"]),
                cell(&e["state"]),
                cell(&e["generation"])
            )),
        }
    }
    if let Some(n) = d["conntrack_note"].as_str() {
        out.push_str(&format!("  {n}\n"));
    }
    if let Some(n) = d["note"].as_str() {
        out.push_str(&format!("  {n}\n"));
    }
    out
}

fn render_reload(r: &Value) -> String {
    let mut out = String::new();
    let rows: Vec<Vec<String>> = r["changes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    vec![
                        cell(&c["key"]),
                        cell(&c["line"]),
                        cell(&c["reload"]),
                        cell(&c["old"]),
                        cell(&c["new"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        out.push_str("no key changes\n");
    } else {
        out.push_str(&table(&["KEY", "LINE", "RELOAD", "OLD", "NEW"], &rows));
    }
    for e in r["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "invalid: line {}: {}: {}\n",
            cell(&e["line"]),
            cell(&e["key"]),
            cell(&e["message"])
        ));
    }
    for e in r["refused"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "refused: line {}: {}: {}\n",
            cell(&e["line"]),
            cell(&e["key"]),
            cell(&e["message"])
        ));
    }
    let verdict = if r["dry_run"] == true {
        "dry run, nothing changed"
    } else if r["applied"] == true {
        "applied"
    } else {
        "refused, the running config stays"
    };
    out.push_str(&format!(
        "{verdict}: generation {} -> {}: {}\n",
        cell(&r["generation_before"]),
        cell(&r["generation_after"]),
        r["message"].as_str().unwrap_or("").lines().next().unwrap_or("")
    ));
    out
}

fn render_stats(r: &Value) -> String {
    let mut out = format!(
        "over {:.2} s, generation {}\n",
        num(&r["interval_seconds"]),
        cell(&r["generation"])
    );
    let rows: Vec<Vec<String>> = r["lcores"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|l| {
                    vec![
                        cell(&l["lcore"]),
                        cell(&l["role"]),
                        pct(&l["busy_share"]),
                        rate(num(&l["rx_pps"])),
                        rate(num(&l["tx_pps"])),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&table(&["LCORE", "ROLE", "BUSY", "RX PPS", "TX PPS"], &rows));
    let rows: Vec<Vec<String>> = r["queues"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|q| {
                    vec![
                        cell(&q["port"]),
                        cell(&q["direction"]),
                        cell(&q["queue"]),
                        cell(&q["lcore"]),
                        rate(num(&q["pps"])),
                        rate(num(&q["bps"])),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    out.push('\n');
    out.push_str(&table(&["PORT", "DIR", "QUEUE", "LCORE", "PPS", "BPS"], &rows));
    // Cycles per packet by outcome, sampled (one poll in 64 that received packets).
    let rows: Vec<Vec<String>> = r["lcores"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| {
            let mut v: Vec<(String, f64, f64)> = l["cost"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(o, c)| (o.clone(), num(&c["cycles_per_packet"]), num(&c["sampled"])))
                .collect();
            v.sort_by(|a, b| b.2.total_cmp(&a.2));
            v.into_iter()
                .map(|(o, c, n)| vec![cell(&l["lcore"]), o, format!("{c:.0}"), format!("{n:.0}")])
                .collect::<Vec<_>>()
        })
        .collect();
    if !rows.is_empty() {
        out.push('\n');
        out.push_str(&table(&["LCORE", "OUTCOME", "CYCLES/PACKET", "SAMPLED"], &rows));
    }
    if let Some(o) = r["outcomes"].as_object() {
        let mut v: Vec<(&String, f64)> = o.iter().map(|(k, v)| (k, num(v))).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.push_str("\noutcomes/s:");
        if v.is_empty() {
            out.push_str(" idle");
        }
        for (k, n) in v {
            out.push_str(&format!(" {k} {}", rate(n)));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("fastpathctl").chain(s.split_whitespace()))
    }

    #[test]
    fn global_flags_go_anywhere_and_subcommands_parse() {
        let a = parse("status --json --socket /tmp/x.sock").unwrap();
        assert_eq!(
            (a.json, a.socket.as_path(), a.command),
            (true, Path::new("/tmp/x.sock"), Some(Cmd::Status))
        );
        let a = parse("--socket=/tmp/y show sockets").unwrap();
        assert_eq!(
            a.command,
            Some(Cmd::Show {
                what: ShowWhat::Sockets
            })
        );
        assert_eq!(a.socket, PathBuf::from("/tmp/y"));
        assert_eq!(
            parse("status").unwrap().socket,
            PathBuf::from("/run/fastpathd/control.sock")
        );
        assert!(matches!(
            parse("flow udp 1.2.3.4:5 192.0.2.1:53").unwrap().command,
            Some(Cmd::Flow { .. })
        ));
        assert_eq!(
            parse("reload --dry-run").unwrap().command,
            Some(Cmd::Reload { dry_run: true })
        );
        assert_eq!(
            parse("stats --interval 0.5").unwrap().command,
            Some(Cmd::Stats { interval: 0.5 })
        );
        assert_eq!(
            parse("trace --filter anything --lcore 2 --follow").unwrap().command,
            Some(Cmd::Trace {
                count: 10,
                lcore: Some(2),
                filter: "anything".into(),
                follow: true
            })
        );
        for bad in [
            "show everything",
            "flow icmp a b",
            "stats --interval 0",
            "trace --count 0",
            "trace --lcore x",
            "status --bogus",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        Args::command().debug_assert();
    }

    #[test]
    fn without_a_daemon_the_error_names_the_socket_and_exits_3() {
        let (out, code) = run(["fastpathctl", "--socket", "/nonexistent/fp.sock", "status"]);
        assert_eq!(code, EXIT_UNREACHABLE);
        assert!(
            out.contains("/nonexistent/fp.sock") && out.lines().count() == 1,
            "{out}"
        );
    }

    #[test]
    fn rates_between_two_samples() {
        let s = |t: f64, rx: u64, cyc: u64| {
            json!({"uptime_seconds": t, "tsc_hz": 1000, "generation": 1,
                "lcores": [{"lcore": 0, "role": "rx", "busy_cycles": cyc, "idle_cycles": cyc, "busy_polls": 0, "idle_polls": 0,
                    "cost": {"delivered": [cyc * 3, rx / 10], "icmp_error": [cyc, 5]},
                    "rx": [{"port": "p", "queue": 0, "packets": rx, "bytes": rx * 100}], "tx": []}],
                "outcomes": {"delivered": rx, "malformed": 0}})
        };
        let r = rates(&s(1.0, 100, 0), &s(3.0, 300, 1000));
        assert_eq!(r["lcores"][0]["rx_pps"], 100.0);
        assert_eq!(r["lcores"][0]["busy_share"], 0.5);
        assert_eq!(r["queues"][0]["bps"], 8.0 * 100.0 * 100.0);
        assert_eq!(r["outcomes"], json!({"delivered": 100.0}));
        // 3,000 cycles over 20 sampled packets; nothing sampled of icmp_error in between.
        assert_eq!(
            r["lcores"][0]["cost"],
            json!({"delivered": {"cycles_per_packet": 150.0, "sampled": 20.0}})
        );
        assert!(render_stats(&r).contains("delivered"), "{}", render_stats(&r));
    }

    #[test]
    fn man_page_and_completions_name_every_subcommand() {
        let man = String::from_utf8(man_page()).unwrap();
        let bash = String::from_utf8(completions(clap_complete::Shell::Bash)).unwrap();
        for sub in ["status", "show", "flow", "stats", "reload"] {
            assert!(man.contains(sub), "man page lacks {sub}");
            assert!(bash.contains(sub), "bash completion lacks {sub}");
        }
        assert!(
            man.contains(".TH fastpathctl 8") && man.contains("EXIT STATUS"),
            "{man}"
        );
        assert!(bash.contains("--socket") && bash.contains("--json"));
    }
}
