//! The control socket's server: a UNIX stream socket served by tokio on a current-thread
//! runtime, the only one of its thread (`fastpath-ctl`), pinned with the control and metrics
//! threads off the RX lcores' CPUs.
//!
//! What a client cannot do to it (nor, through it, to the control thread, the metrics or the
//! lcores, which it never waits for):
//! - **Hold a slot.** At most [`MAX_CONNECTIONS`] connections; one more closes the one that has
//!   waited longest for its request. Only connections being answered are never closed for room;
//!   with all of them busy, the newcomer is told so and closed.
//! - **Stretch a deadline.** The request must be complete within [`REQUEST_TIME`] of the accept
//!   (absolute, not per read), the answer written within [`ANSWER_TIME`].
//! - **Send a book.** A request longer than [`MAX_REQUEST`] bytes is refused unread past that.
//! - **Flood the control thread.** Reloads (and dry runs) go to it one at a time, at least
//!   [`RELOAD_GAP`] apart, over the bounded channel SIGHUP uses, never blocking this thread.
//! - **Outlive the daemon.** [`Running::stop`] ends the runtime, joins the thread (dropping its
//!   references to the metric sources and the tables) and removes the socket file.

use super::protocol::{
    self, Request, ANSWER_TIME, MAX_CONNECTIONS, MAX_REQUEST, RELOAD_GAP, RELOAD_TIME, REQUEST_TIME,
};
use super::trace::Armed;
use super::view::View;
use crate::reload::ReloadReport;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// How often a trace takes the records the lcores made.
const TRACE_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// A reload (or dry run) the socket asks of the control thread, and where its report goes.
pub struct ReloadRequest {
    /// Only plan it.
    pub dry_run: bool,
    /// The report (dropped unanswered if the daemon stops first).
    pub reply: oneshot::Sender<ReloadReport>,
}

/// Hands a reload request to the control thread without waiting; gives it back if the
/// control thread cannot take it now.
pub type Submit = Box<dyn Fn(ReloadRequest) -> Result<(), ReloadRequest> + Send>;

/// The bound socket. Dropped, it removes its file (if the file is still this socket).
pub struct ControlSocket {
    listener: Option<std::os::unix::net::UnixListener>,
    path: PathBuf,
    /// (device, inode) of the socket file this bound.
    id: (u64, u64),
}

impl ControlSocket {
    /// Binds `path`: its directory is created if missing; a socket file nobody answers on (a
    /// crashed run's) is replaced; one somebody answers on is another daemon's, and refused;
    /// anything else at the path is refused untouched. The socket file gets mode 0660.
    pub fn bind(path: &Path) -> Result<ControlSocket, String> {
        let shown = path.display();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_socket() => match std::os::unix::net::UnixStream::connect(path) {
                Ok(_) => {
                    return Err(format!(
                        "another fastpathd answers on the control socket {shown}: stop it first, or give this one \
                         another [control] socket"
                    ))
                }
                Err(_) => {
                    std::fs::remove_file(path)
                        .map_err(|e| format!("cannot replace the stale control socket {shown}: {e}"))?;
                    tracing::info!("fastpathd: replaced the stale control socket {shown} (nothing answered on it)");
                }
            },
            Ok(_) => {
                return Err(format!(
                    "{shown} exists and is not a socket; remove it or pick another path"
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot look at {shown}: {e}")),
        }
        let listener = std::os::unix::net::UnixListener::bind(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                format!("another fastpathd took the control socket {shown} just now")
            }
            _ => format!("cannot listen on {shown}: {e}"),
        })?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot look at {shown}: {e}"))?;
        let sock = ControlSocket {
            listener: Some(listener),
            path: path.to_path_buf(),
            id: (meta.dev(), meta.ino()),
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
            .map_err(|e| format!("cannot set the mode of {shown}: {e}"))?;
        sock.listener
            .as_ref()
            .map(|l| l.set_nonblocking(true))
            .transpose()
            .map_err(|e| format!("{shown}: {e}"))?;
        Ok(sock)
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves until [`Running::stop`] on a thread of its own; `on_start` runs first there (it
    /// pins the thread).
    pub fn spawn(
        mut self,
        view: View,
        submit: Submit,
        on_start: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Running> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        let listener = self.listener.take().expect("a bound socket has its listener");
        let thread = std::thread::Builder::new().name("fastpath-ctl".into()).spawn(move || {
            on_start();
            let local = tokio::task::LocalSet::new();
            let ep = Rc::new(Endpoint {
                view,
                submit,
                conns: RefCell::new(HashMap::new()),
                next_id: Cell::new(0),
                reloading: Cell::new(false),
                last_reload: Cell::new(None),
            });
            local.block_on(&runtime, accept_loop(listener, ep, stopped));
            drop(local);
            drop(runtime);
            // The file goes with the server, here, once nothing answers on it.
            drop(self);
        })?;
        Ok(Running { thread, stop })
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        // Only our own file: a newer daemon's socket at the same path stays.
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.id);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The serving thread.
pub struct Running {
    thread: std::thread::JoinHandle<()>,
    stop: oneshot::Sender<()>,
}

impl Running {
    /// Stops serving and removes the socket file; once this returns the thread is gone.
    pub fn stop(self) {
        let _ = self.stop.send(());
        if self.thread.join().is_err() {
            tracing::error!("fastpathd: the control socket's thread panicked");
        }
    }
}

/// A connection's slot.
struct Slot {
    accepted: Instant,
    /// Being answered: never closed for room.
    busy: Rc<Cell<bool>>,
    abort: tokio::task::AbortHandle,
}

/// What the connections share (one thread: `Rc` and cells, no lock).
struct Endpoint {
    view: View,
    submit: Submit,
    conns: RefCell<HashMap<u64, Slot>>,
    next_id: Cell<u64>,
    /// A reload is with the control thread.
    reloading: Cell<bool>,
    /// When the last one was answered.
    last_reload: Cell<Option<Instant>>,
}

impl Endpoint {
    /// Room for one more: closes the connection that has waited longest for its request;
    /// `false` when every one is being answered.
    fn make_room(&self) -> bool {
        let mut conns = self.conns.borrow_mut();
        if conns.len() < MAX_CONNECTIONS {
            return true;
        }
        let oldest = conns
            .iter()
            .filter(|(_, s)| !s.busy.get())
            .min_by_key(|(id, s)| (s.accepted, **id))
            .map(|(id, _)| *id);
        let Some(id) = oldest else { return false };
        if let Some(s) = conns.remove(&id) {
            s.abort.abort();
        }
        true
    }

    /// The answer to `r`.
    async fn answer(&self, r: Request) -> serde_json::Value {
        let v = &self.view;
        match r {
            Request::Status => protocol::ok(v.status()),
            Request::Show { what } => protocol::ok(v.show(what)),
            Request::Stats => protocol::ok(v.stats()),
            Request::Flow { protocol: p, src, dst } => match protocol::parse_flow(&p, &src, &dst) {
                Ok(q) => protocol::ok(v.flow_tracked(&q).await),
                Err(e) => protocol::error(e),
            },
            Request::Reload { dry_run } => self.reload(dry_run).await,
            Request::Trace { .. } => protocol::error("trace is answered by a stream"),
        }
    }

    /// `trace`: arms the lcores, streams their records ([`super::trace`]) until the count, the
    /// client's close, a write that stalls past [`ANSWER_TIME`], or the daemon's stop.
    async fn trace(&self, mut stream: UnixStream, count: u64, lcore: Option<u32>, filter: &str, follow: bool) {
        let armed = match self.arm_trace(count, lcore, filter, follow) {
            Ok(a) => a,
            Err(e) => return write_answer(&mut stream, &protocol::error(e)).await,
        };
        let head = protocol::ok(serde_json::json!({
            "lcores": armed.lcores(),
            "count": count,
            "follow": follow,
            "filter": filter,
        }));
        let (mut rd, mut wr) = stream.split();
        let mut sent = 0u64;
        let mut lost = 0u64;
        let mut out = format!("{head}\n");
        let mut tick = tokio::time::interval(TRACE_POLL);
        let mut scratch = [0u8; 256];
        let mut open = true;
        // Set once the count is reached: the workers' records of the last packets until then.
        let mut grace: Option<Instant> = None;
        loop {
            if !out.is_empty() {
                let w = tokio::time::timeout(ANSWER_TIME, wr.write_all(out.as_bytes())).await;
                if !matches!(w, Ok(Ok(()))) {
                    open = false;
                    break;
                }
                out.clear();
            }
            if !follow && sent >= count {
                match grace {
                    Some(t) if Instant::now() >= t => break,
                    None => grace = Some(Instant::now() + super::trace::WORKER_GRACE),
                    _ => {}
                }
            }
            tokio::select! {
                _ = tick.tick() => {}
                // Anything the client sends is ignored; its close ends the trace.
                r = rd.read(&mut scratch) => if !matches!(r, Ok(n) if n > 0) {
                    open = false;
                    break;
                },
            }
            let tables = self.view.sources.published.current();
            for r in armed.take(usize::MAX) {
                // RX records past the count are not the ones asked for.
                if !r.worker && !follow && sent >= count {
                    continue;
                }
                let v = serde_json::json!({ "record": crate::trace::to_json(&r, Some(&tables)) });
                out.push_str(&v.to_string());
                out.push('\n');
                sent += u64::from(!r.worker);
            }
            if armed.lost() > lost {
                lost = armed.lost();
                out.push_str(&serde_json::json!({ "lost": lost }).to_string());
                out.push('\n');
            }
        }
        let released = armed.disarm();
        if open {
            let done = serde_json::json!({ "done": { "records": sent, "lost": lost } });
            let _ = tokio::time::timeout(ANSWER_TIME, async {
                wr.write_all(format!("{done}\n").as_bytes()).await?;
                wr.shutdown().await
            })
            .await;
        }
        // The sessions go here, once no lcore holds them (an lcore lets go at its next burst).
        let deadline = Instant::now() + ANSWER_TIME;
        while !released.released() && Instant::now() < deadline {
            tokio::time::sleep(TRACE_POLL).await;
        }
    }

    fn arm_trace(&self, count: u64, lcore: Option<u32>, filter: &str, follow: bool) -> Result<Armed, String> {
        if count == 0 && !follow {
            return Err("count 0: nothing to trace".into());
        }
        let filter = fastpath::trace::Filter::parse(filter).map_err(|e| format!("filter: {e}"))?;
        let cfg = self.view.config.read().unwrap_or_else(|e| e.into_inner()).clone();
        if cfg.lcores.mode == crate::config::LcoreMode::Forward {
            return Err(
                "the lcores forward without the RX engine ([lcores] mode = \"forward\"): nothing to trace".into(),
            );
        }
        let per_lcore = if follow { u64::MAX } else { count };
        Armed::arm(
            &self.view.sources.lcores,
            &cfg.lcores.rx,
            &cfg.lcores.workers,
            lcore,
            filter,
            per_lcore,
        )
    }

    /// A reload through the control thread: one at a time, [`RELOAD_GAP`] apart.
    async fn reload(&self, dry_run: bool) -> serde_json::Value {
        if self.reloading.get() {
            return protocol::error("another reload asked through the control socket is in progress; try again");
        }
        self.reloading.set(true);
        let _done = Finally(|| {
            self.reloading.set(false);
            self.last_reload.set(Some(Instant::now()));
        });
        if let Some(last) = self.last_reload.get() {
            tokio::time::sleep_until(last + RELOAD_GAP).await;
        }
        let (tx, rx) = oneshot::channel();
        if (self.submit)(ReloadRequest { dry_run, reply: tx }).is_err() {
            return protocol::error("the control thread has reloads queued; try again");
        }
        match tokio::time::timeout(RELOAD_TIME, rx).await {
            Ok(Ok(report)) => protocol::ok(serde_json::to_value(report).unwrap_or_default()),
            Ok(Err(_)) => protocol::error("the daemon is stopping"),
            Err(_) => protocol::error(format!(
                "no answer from the control thread within {} s",
                RELOAD_TIME.as_secs()
            )),
        }
    }
}

/// Runs its closure when dropped (also when the task is cancelled).
struct Finally<F: FnMut()>(F);

impl<F: FnMut()> Drop for Finally<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

async fn accept_loop(listener: std::os::unix::net::UnixListener, ep: Rc<Endpoint>, mut stopped: oneshot::Receiver<()>) {
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("fastpathd: the control socket cannot serve: {e}");
            let _ = stopped.await;
            return;
        }
    };
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    admit(stream, &ep);
                    // The new connection reads its request before the next accept.
                    tokio::task::yield_now().await;
                }
                // Out of descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(10)).await,
            },
        }
    }
}

/// Serves `stream` on a task of its own, making room for it first.
fn admit(stream: UnixStream, ep: &Rc<Endpoint>) {
    if !ep.make_room() {
        let mut line = protocol::error("busy: every connection is being answered; try again").to_string();
        line.push('\n');
        let _ = stream.try_write(line.as_bytes());
        return;
    }
    let id = ep.next_id.get();
    ep.next_id.set(id + 1);
    let busy = Rc::new(Cell::new(false));
    let task = tokio::task::spawn_local(serve(stream, ep.clone(), id, busy.clone()));
    ep.conns.borrow_mut().insert(
        id,
        Slot {
            accepted: Instant::now(),
            busy,
            abort: task.abort_handle(),
        },
    );
}

/// One connection: its request, its answer, the close.
async fn serve(mut stream: UnixStream, ep: Rc<Endpoint>, id: u64, busy: Rc<Cell<bool>>) {
    let _slot = Finally(|| {
        ep.conns.borrow_mut().remove(&id);
    });
    let request = match tokio::time::timeout(REQUEST_TIME, read_request(&mut stream)).await {
        Ok(Ok(r)) => r,
        Ok(Err(Some(msg))) => {
            write_answer(&mut stream, &protocol::error(msg)).await;
            return;
        }
        // Closed, or no request in time: nothing to answer.
        Ok(Err(None)) | Err(_) => return,
    };
    busy.set(true);
    let answer = match protocol::parse_request(&request) {
        Ok(Request::Trace {
            count,
            lcore,
            filter,
            follow,
        }) => return ep.trace(stream, count, lcore, &filter, follow).await,
        Ok(r) => ep.answer(r).await,
        Err(e) => protocol::error(e),
    };
    write_answer(&mut stream, &answer).await;
}

/// The request's bytes, up to its newline or the client's end of writing. `Err(Some(..))`: too
/// long (answered); `Err(None)`: closed before sending anything, or a read error.
async fn read_request(stream: &mut UnixStream) -> Result<Vec<u8>, Option<String>> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| None)?;
        if n == 0 {
            return if buf.is_empty() { Err(None) } else { Ok(buf) };
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.iter().position(|&b| b == b'\n') {
            buf.truncate(end);
            return Ok(buf);
        }
        if buf.len() > MAX_REQUEST {
            return Err(Some(format!(
                "request longer than {MAX_REQUEST} bytes: one JSON object on one line"
            )));
        }
    }
}

/// Writes one answer line within [`ANSWER_TIME`], then closes.
async fn write_answer(stream: &mut UnixStream, answer: &serde_json::Value) {
    let mut line = answer.to_string();
    line.push('\n');
    let _ = tokio::time::timeout(ANSWER_TIME, async {
        stream.write_all(line.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_socket_is_replaced_a_live_one_and_other_files_refused_and_the_file_goes_at_drop() {
        let dir = std::env::temp_dir().join(format!("fp-ctl-bind-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub/c.sock");
        // A crashed run's socket: bound, then its listener gone.
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let s = ControlSocket::bind(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o660);
        let e = ControlSocket::bind(&path).err().unwrap();
        assert!(
            e.contains("another fastpathd") && e.contains(&path.display().to_string()),
            "{e}"
        );
        drop(s);
        assert!(!path.exists(), "removed at drop");
        std::fs::write(&path, "x").unwrap();
        let e = ControlSocket::bind(&path).err().unwrap();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "x");
        // A directory that is not there yet is made.
        let fresh = dir.join("new/deeper/c.sock");
        let s = ControlSocket::bind(&fresh).unwrap();
        assert!(std::fs::symlink_metadata(&fresh).unwrap().file_type().is_socket());
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
