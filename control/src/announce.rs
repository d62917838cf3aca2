//! `fastpathd-announce`: health-gated route announcement through a routing daemon.
//!
//! fastpathd speaks no BGP. A node's service addresses are announced by the routing daemon
//! already on the host (BIRD 2: a `protocol static` holding the service routes, exported to
//! the BGP sessions with the routers), and this helper turns that protocol on and off from
//! fastpathd's `/healthz`:
//!
//! - every `interval` it asks `GET /healthz` (connect and answer within `timeout`);
//! - the first answer that is not `200 ok` (a 503 with its reason, a refused or timed-out
//!   connection, garbage) withdraws: `birdc -s SOCKET disable PROTOCOL` (`fall` failures in a
//!   row, 1 by default: a node that cannot forward is taken out at once);
//! - `rise` good answers in a row (3 by default) announce again: `birdc ... enable PROTOCOL`,
//!   so a node that flaps is not put back on every good second;
//! - at start the routes are withdrawn until `rise` good answers (the BIRD config declares the
//!   protocol `disabled`, so a BIRD that starts, or restarts, without the helper announces
//!   nothing either); the wanted state is applied again on every poll, so a restarted BIRD
//!   gets it back within one interval, and a failed `birdc` is retried;
//! - SIGTERM or SIGINT withdraws, then exits (stopping the helper drains the node); `--withdraw`
//!   withdraws once and exits (the systemd unit's `ExecStopPost`, which runs even after the
//!   helper was killed).
//!
//! The pieces are here, in the library, so they are unit-tested: [`Gate`] (the hysteresis),
//! [`probe`] (one health check) and [`Bird`] (the commands).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// What one health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    Good,
    /// Why not: the 503's reason, or what went wrong asking.
    Bad(String),
}

/// Whether the routes should be announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Announce,
    Withdraw,
}

/// The hysteresis: withdraw after `fall` bad answers in a row, announce after `rise` good ones.
/// Starts withdrawn.
#[derive(Debug, Clone)]
pub struct Gate {
    rise: u32,
    fall: u32,
    good: u32,
    bad: u32,
    want: Want,
}

impl Gate {
    pub fn new(rise: u32, fall: u32) -> Gate {
        Gate {
            rise: rise.max(1),
            fall: fall.max(1),
            good: 0,
            bad: 0,
            want: Want::Withdraw,
        }
    }

    /// Takes one answer; returns what is wanted now.
    pub fn observe(&mut self, h: &Health) -> Want {
        match h {
            Health::Good => {
                self.bad = 0;
                self.good = self.good.saturating_add(1);
                if self.good >= self.rise {
                    self.want = Want::Announce;
                }
            }
            Health::Bad(_) => {
                self.good = 0;
                self.bad = self.bad.saturating_add(1);
                if self.bad >= self.fall {
                    self.want = Want::Withdraw;
                }
            }
        }
        self.want
    }

    pub fn want(&self) -> Want {
        self.want
    }
}

/// One `GET /healthz` to `addr`: good only for `200` with the body `ok`. `timeout` bounds the
/// connect and the whole answer (a daemon that accepts and never answers is bad too).
pub fn probe(addr: SocketAddr, timeout: Duration) -> Health {
    match ask(addr, timeout) {
        Ok((200, body)) if body.trim() == "ok" => Health::Good,
        Ok((code, body)) => Health::Bad(format!("/healthz answered {code}: {}", body.trim())),
        Err(e) => Health::Bad(format!("/healthz on {addr}: {e}")),
    }
}

/// The status and body of `GET /healthz` (ureq: the HTTP client is not ours to write). The
/// body is read up to 64 KiB; `timeout` bounds connect, request and answer together.
fn ask(addr: SocketAddr, timeout: Duration) -> Result<(u16, String), String> {
    use std::io::Read;
    let agent = ureq::AgentBuilder::new()
        .timeout(timeout)
        .user_agent("fastpathd-announce")
        .build();
    let resp = match agent.get(&format!("http://{addr}/healthz")).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(ureq::Error::Transport(t)) => {
            return Err(match t.kind() {
                ureq::ErrorKind::ConnectionFailed => {
                    format!("connection refused or failed ({})", t.message().unwrap_or("no detail"))
                }
                _ if t.to_string().contains("timed out") => "no answer in time".to_string(),
                _ => t.to_string(),
            })
        }
    };
    let code = resp.status();
    let mut body = String::new();
    resp.into_reader()
        .take(64 * 1024)
        .read_to_string(&mut body)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok((code, body))
}

/// BIRD's control socket and the protocols that carry the service routes (one per address
/// family: a BIRD 2 `protocol static` has one channel).
#[derive(Debug, Clone)]
pub struct Bird {
    pub birdc: PathBuf,
    pub socket: PathBuf,
    pub protocols: Vec<String>,
}

impl Bird {
    /// The `birdc` arguments that make `protocol`'s routes `w`.
    pub fn args(&self, w: Want, protocol: &str) -> Vec<String> {
        let verb = match w {
            Want::Announce => "enable",
            Want::Withdraw => "disable",
        };
        vec![
            "-s".into(),
            self.socket.display().to_string(),
            verb.into(),
            protocol.into(),
        ]
    }

    /// Runs `birdc` for every protocol (all of them, also after one fails: a withdrawal takes
    /// out what it can); Ok once BIRD says each is (or already was) in that state.
    pub fn apply(&self, w: Want) -> Result<(), String> {
        let errs: Vec<String> = self
            .protocols
            .iter()
            .filter_map(|p| self.apply_one(w, p).err())
            .collect();
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    fn apply_one(&self, w: Want, protocol: &str) -> Result<(), String> {
        let args = self.args(w, protocol);
        let out = Command::new(&self.birdc)
            .args(&args)
            .output()
            .map_err(|e| format!("{}: {e}", self.birdc.display()))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        check_reply(&text, protocol, w)
            .map_err(|e| format!("birdc {}: {e} (exit {:?})", args.join(" "), out.status.code()))
    }
}

/// What turns the announcement on and off: BIRD's protocol, or two shell commands of the
/// operator's (for FRR, ExaBGP or anything else: exit 0 means done).
#[derive(Debug, Clone)]
pub enum Actuator {
    Bird(Bird),
    Commands { announce: String, withdraw: String },
}

impl Actuator {
    pub fn apply(&self, w: Want) -> Result<(), String> {
        match self {
            Actuator::Bird(b) => b.apply(w),
            Actuator::Commands { announce, withdraw } => {
                let cmd = match w {
                    Want::Announce => announce,
                    Want::Withdraw => withdraw,
                };
                // stdout is the helper's own (ExaBGP reads its process's stdout); stderr is
                // kept for the log line of a failure.
                let out = Command::new("/bin/sh")
                    .args(["-c", cmd])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::inherit())
                    .output()
                    .map_err(|e| format!("/bin/sh: {e}"))?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "`{cmd}` exited {:?}: {}",
                        out.status.code(),
                        String::from_utf8_lossy(&out.stderr).trim()
                    ))
                }
            }
        }
    }

    /// Whether the wanted state is applied on every poll (BIRD: idempotent and cheap, and it
    /// repairs a restarted BIRD) or only when it changes or the last try failed (commands: an
    /// ExaBGP pipe would send an UPDATE each time).
    pub fn reapply_each_poll(&self) -> bool {
        matches!(self, Actuator::Bird(_))
    }

    /// For the log: what is switched.
    pub fn describe(&self) -> String {
        match self {
            Actuator::Bird(b) => format!(
                "BIRD protocol{} {} on {}",
                if b.protocols.len() > 1 { "s" } else { "" },
                b.protocols.join(", "),
                b.socket.display()
            ),
            Actuator::Commands { .. } => "the announce and withdraw commands".into(),
        }
    }
}

/// BIRD 2 answers `NAME: enabled` / `NAME: already enabled` (and `disabled`); anything else
/// (no such protocol, no BIRD on the socket) is a failure, retried at the next poll.
pub fn check_reply(text: &str, protocol: &str, w: Want) -> Result<(), String> {
    let state = match w {
        Want::Announce => "enabled",
        Want::Withdraw => "disabled",
    };
    let ok = text.lines().any(|l| {
        l.trim()
            .strip_prefix(protocol)
            .and_then(|r| r.strip_prefix(':'))
            .is_some_and(|r| matches!(r.trim(), s if s == state || s == format!("already {state}")))
    });
    if ok {
        Ok(())
    } else {
        Err(text.trim().replace('\n', " / "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::time::Instant;

    #[test]
    fn gate_withdraws_on_the_first_failure_and_announces_after_rise_good_answers() {
        let bad = Health::Bad("x".into());
        let mut g = Gate::new(3, 1);
        assert_eq!(g.want(), Want::Withdraw, "starts withdrawn");
        assert_eq!(g.observe(&Health::Good), Want::Withdraw);
        assert_eq!(g.observe(&Health::Good), Want::Withdraw);
        assert_eq!(g.observe(&Health::Good), Want::Announce);
        assert_eq!(g.observe(&bad), Want::Withdraw, "fall = 1");
        assert_eq!(g.observe(&Health::Good), Want::Withdraw);
        assert_eq!(g.observe(&Health::Good), Want::Withdraw);
        assert_eq!(g.observe(&bad), Want::Withdraw, "a failure restarts the count");
        for _ in 0..2 {
            assert_eq!(g.observe(&Health::Good), Want::Withdraw);
        }
        assert_eq!(g.observe(&Health::Good), Want::Announce);
    }

    #[test]
    fn gate_with_fall_two_rides_out_one_failure() {
        let bad = Health::Bad("x".into());
        let mut g = Gate::new(1, 2);
        assert_eq!(g.observe(&Health::Good), Want::Announce);
        assert_eq!(g.observe(&bad), Want::Announce);
        assert_eq!(g.observe(&Health::Good), Want::Announce);
        assert_eq!(g.observe(&bad), Want::Announce);
        assert_eq!(g.observe(&bad), Want::Withdraw);
    }

    /// Serves one connection with `answer` (or holds it open without answering).
    fn serve_once(answer: Option<&'static str>) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // The whole request head first, as a server reads it.
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            match answer {
                Some(a) => {
                    let _ = s.write_all(a.as_bytes());
                }
                None => std::thread::sleep(Duration::from_secs(3)),
            }
        });
        addr
    }

    #[test]
    fn probe_is_good_only_for_200_ok() {
        let t = Duration::from_secs(2);
        let ok = serve_once(Some("HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"));
        assert_eq!(probe(ok, t), Health::Good);
        let down = serve_once(Some(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 9\r\n\r\nstopping\n",
        ));
        assert_eq!(probe(down, t), Health::Bad("/healthz answered 503: stopping".into()));
        let odd = serve_once(Some("HTTP/1.1 200 OK\r\n\r\nmaybe\n"));
        assert!(matches!(probe(odd, t), Health::Bad(_)));
        let junk = serve_once(Some("hello"));
        assert!(matches!(probe(junk, t), Health::Bad(_)));
        // Nobody listening: refused.
        let gone = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let Health::Bad(why) = probe(gone, t) else {
            panic!("a refused connection is bad")
        };
        assert!(why.contains("refused"), "{why}");
    }

    #[test]
    fn probe_gives_up_on_a_daemon_that_accepts_and_never_answers() {
        let mute = serve_once(None);
        let t = Instant::now();
        let h = probe(mute, Duration::from_millis(300));
        assert!(
            matches!(h, Health::Bad(ref w) if w.contains("no answer in time")),
            "{h:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn birds_replies_are_read_exactly() {
        let p = "fastpathd_vips";
        let en = Want::Announce;
        assert!(check_reply("BIRD 2.0.12 ready.\nfastpathd_vips: enabled\n", p, en).is_ok());
        assert!(check_reply("BIRD 2.0.12 ready.\nfastpathd_vips: already enabled\n", p, en).is_ok());
        assert!(check_reply("fastpathd_vips: disabled\n", p, en).is_err());
        assert!(check_reply("fastpathd_vips: disabled\n", p, Want::Withdraw).is_ok());
        assert!(check_reply("BIRD 2.0.12 ready.\nsyntax error, unexpected CF_SYM_UNDEFINED\n", p, en).is_err());
        assert!(check_reply("Unable to connect to server control socket", p, en).is_err());
        assert!(check_reply("fastpathd_vips2: enabled", p, en).is_err());
        let b = Bird {
            birdc: "birdc".into(),
            socket: "/run/bird/bird.ctl".into(),
            protocols: vec![p.into()],
        };
        assert_eq!(b.args(Want::Withdraw, p), ["-s", "/run/bird/bird.ctl", "disable", p]);
        // No BIRD on that socket: an error, not a success, naming each protocol.
        let nobody = Bird {
            birdc: "birdc".into(),
            socket: "/nonexistent/bird.ctl".into(),
            protocols: vec![p.into(), "fastpathd_vips6".into()],
        };
        let e = nobody.apply(Want::Withdraw).unwrap_err();
        assert!(
            e.contains("disable fastpathd_vips:") && e.contains("disable fastpathd_vips6:"),
            "{e}"
        );
    }

    #[test]
    fn commands_succeed_by_exit_status() {
        let a = Actuator::Commands {
            announce: "true".into(),
            withdraw: "echo no >&2; exit 3".into(),
        };
        assert!(a.apply(Want::Announce).is_ok());
        let e = a.apply(Want::Withdraw).unwrap_err();
        assert!(e.contains("exited Some(3): no"), "{e}");
    }
}
