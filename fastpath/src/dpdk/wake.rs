//! Blocking an idle lcore until work arrives: a [`Doorbell`] (an eventfd with an "asleep" flag
//! on a line of its own) that other threads ring, and a [`Waiter`] (an epoll set over the
//! doorbell and the lcore's RX queues' wake-up fds) the loop blocks in, with a bound.
//!
//! Why not a short sleep: a sleep or wake-up costs CPU and a short sleep overshoots by the timer
//! slack, so sleeping per empty poll cost an idle daemon much of a core and answered late
//! (benches/NOTES.md, "Idle lcores block instead of sleeping per poll").
//!
//! The lost wake-up race (a producer enqueues just as the consumer decides to block) is closed
//! the Dekker way: the consumer stores its flag, fences, re-checks its queues, then blocks; the
//! producer publishes its enqueue, fences, then reads the flag and rings if it is set. One of
//! the two sees the other's store. An eventfd stays readable until read, so a ring that comes
//! before the block is not lost either. The fences are asymmetric where the kernel has
//! `membarrier(2)` (Linux 4.14): the consumer, about to sleep (rare), makes every running
//! thread of the process pass a full barrier, so the producer, at every publication, needs
//! only a compiler barrier (an `mfence` per published burst would be on the RX lcore's path);
//! the `membarrier(2)` manual gives this pairing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{compiler_fence, fence, AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Wakes one lcore's [`Waiter`]. Its flag is written only by that lcore, when it goes to sleep
/// and when it wakes, so a producer that reads it per published burst keeps the line shared.
#[repr(align(128))]
pub struct Doorbell {
    asleep: AtomicBool,
    /// The sleeper's side issues `membarrier`, so the ringer's needs no fence.
    asymmetric: bool,
    fd: OwnedFd,
}

/// `membarrier(2)` commands (linux/membarrier.h; not in the libc crate).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Whether this process may use private expedited membarriers (registered once).
fn asymmetric() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| {
        // SAFETY: membarrier takes two integers and a flags word; no pointer.
        let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) };
        rc == 0
    })
}

/// A full barrier on this thread and on every running thread of the process.
fn barrier_everywhere() {
    // SAFETY: as above; registered by `asymmetric` before any doorbell existed.
    let rc = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) };
    if rc != 0 {
        // Cannot happen once registered; a plain fence is not enough then, but is the best left.
        fence(Ordering::SeqCst);
    }
}

impl Doorbell {
    /// A doorbell over a new non-blocking eventfd.
    pub fn new() -> io::Result<Doorbell> {
        // SAFETY: eventfd takes no pointer; a non-negative return is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Doorbell {
            asleep: AtomicBool::new(false),
            asymmetric: asymmetric(),
            // SAFETY: fd was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// After publishing work for the doorbell's lcore: rings it if it sleeps (or is about to).
    /// At load the lcore does not sleep, so this is a fence and a read of a shared line.
    #[inline]
    pub fn ring_if_asleep(&self) {
        // Orders the caller's publication before the flag's read (StoreLoad): module docs.
        if self.asymmetric {
            compiler_fence(Ordering::SeqCst);
        } else {
            fence(Ordering::SeqCst);
        }
        if self.asleep.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    /// Rings whether the lcore sleeps or not (a stop: rare, and must not be missed).
    #[cold]
    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd; a full counter (EAGAIN) means
        // it is readable already, which is all a ring is for.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), std::ptr::from_ref(&one).cast(), 8) };
    }

    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into a live u64 from our non-blocking eventfd.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), std::ptr::from_mut(&mut v).cast(), 8) };
    }
}

/// Gives this thread's CPU to another task ready to run on it, if there is one (returns at once
/// if not): what a polling lcore does between empty polls while it waits for traffic.
#[inline]
pub fn yield_cpu() {
    // SAFETY: sched_yield takes no argument and only reschedules the calling thread.
    unsafe { libc::sched_yield() };
}

/// Why [`Waiter::wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    /// A wake-up fd of an RX queue reported a packet (or the re-check found work).
    Io,
    /// The doorbell rang.
    Bell,
    /// The bound passed.
    Timeout,
}

/// Marks the doorbell's data in the epoll set.
const BELL: u64 = u64::MAX;

/// An epoll set over a doorbell and wake-up fds (level-triggered: a queue the loop left
/// non-empty wakes it again at once).
pub struct Waiter {
    ep: OwnedFd,
    bell: std::sync::Arc<Doorbell>,
    events: [libc::epoll_event; 8],
}

impl Waiter {
    /// A waiter woken by `bell` and by input on any of `fds` (which must stay open while the
    /// waiter is used: a port's queues are closed only after its lcores stopped).
    pub fn new(bell: std::sync::Arc<Doorbell>, fds: &[RawFd]) -> io::Result<Waiter> {
        // SAFETY: epoll_create1 takes no pointer; a non-negative return is a new fd we own.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: ep was just created and is owned by nobody else.
        let ep = unsafe { OwnedFd::from_raw_fd(ep) };
        let add = |fd: RawFd, data: u64| {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: data,
            };
            // SAFETY: ep is our epoll fd, ev a live event the kernel copies; fd is the caller's
            // open fd (an error, e.g. a closed fd, is returned, not undefined behaviour).
            let rc = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        add(bell.fd.as_raw_fd(), BELL)?;
        for &fd in fds {
            add(fd, fd as u64)?;
        }
        Ok(Waiter {
            ep,
            bell,
            events: [libc::epoll_event { events: 0, u64: 0 }; 8],
        })
    }

    /// Blocks for at most `bound` (whole milliseconds, at least 1) until a wake-up fd has input
    /// or the doorbell rings, unless `idle()`, asked after the doorbell is armed, says work
    /// arrived meanwhile.
    pub fn wait(&mut self, bound: Duration, idle: impl FnOnce() -> bool) -> Woken {
        self.bell.asleep.store(true, Ordering::Relaxed);
        // Orders the flag's store before the re-check's reads, here and against every
        // producer's publication (module docs).
        if self.bell.asymmetric {
            barrier_everywhere();
        } else {
            fence(Ordering::SeqCst);
        }
        if !idle() {
            self.bell.asleep.store(false, Ordering::Relaxed);
            return Woken::Io;
        }
        let ms = bound.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: events is a live array of 8 epoll_events the kernel may fill.
        let n = unsafe { libc::epoll_wait(self.ep.as_raw_fd(), self.events.as_mut_ptr(), 8, ms) };
        self.bell.asleep.store(false, Ordering::Relaxed);
        let mut woken = Woken::Timeout;
        for ev in &self.events[..n.max(0) as usize] {
            let (data, what) = (ev.u64, ev.events);
            if data == BELL {
                self.bell.drain();
                if woken == Woken::Timeout {
                    woken = Woken::Bell;
                }
            } else {
                if what & (libc::EPOLLERR | libc::EPOLLHUP) as u32 != 0 {
                    clear_socket_error(data as RawFd);
                }
                woken = Woken::Io;
            }
        }
        woken
    }
}

/// An AF_PACKET socket whose interface went down keeps reporting EPOLLERR until its error is
/// read (a level-triggered wait would spin on it): reads it. Harmless on other fds.
fn clear_socket_error(fd: RawFd) {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: err and len are live and sized as SO_ERROR expects; an fd that is not a socket
    // only makes the call fail.
    let _ = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            std::ptr::from_mut(&mut err).cast(),
            &mut len,
        )
    };
}

/// Sets the calling thread's timer slack (PR_SET_TIMERSLACK): the default slack about doubles
/// a short sleep, and makes an epoll bound late by as much. Best effort.
pub fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long by value and affects this thread only.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// Whether `fd` is an AF_PACKET socket bound to interface `if_index`.
pub(crate) fn is_packet_socket_on(fd: RawFd, if_index: u32) -> bool {
    if fd < 0 || if_index == 0 {
        return false;
    }
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: sa is a live sockaddr_ll of `len` bytes the kernel writes at most `len` of; a
    // bad fd only makes the call fail.
    let rc = unsafe { libc::getsockname(fd, std::ptr::from_mut(&mut sa).cast(), &mut len) };
    rc == 0 && sa.sll_family as i32 == libc::AF_PACKET && sa.sll_ifindex as u32 == if_index
}

/// The frames the kernel dropped at AF_PACKET socket `fd`'s ring since the last call
/// (`PACKET_STATISTICS`, which resets the socket's counts); 0 if `fd` is not one.
pub(crate) fn packet_drops(fd: RawFd) -> u32 {
    let mut st = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: st and len are live and sized as PACKET_STATISTICS expects for a TPACKET_V2 ring
    // (the layout net_af_packet uses); on an fd that is not a packet socket the call fails and
    // st stays zero.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            std::ptr::from_mut(&mut st).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        st.tp_drops
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_waiter_and_a_ring_before_the_wait_is_not_lost() {
        let bell = Arc::new(Doorbell::new().unwrap());
        let mut w = Waiter::new(bell.clone(), &[]).unwrap();
        // Nobody rings: the bound.
        let t = Instant::now();
        assert_eq!(w.wait(Duration::from_millis(5), || true), Woken::Timeout);
        assert!(t.elapsed() >= Duration::from_millis(4));
        // Not asleep: no ring.
        bell.ring_if_asleep();
        assert_eq!(w.wait(Duration::from_millis(5), || true), Woken::Timeout);
        // A forced ring before the wait.
        bell.ring();
        assert_eq!(w.wait(Duration::from_secs(5), || true), Woken::Bell);
        // Work found at the re-check: no block.
        let t = Instant::now();
        assert_eq!(w.wait(Duration::from_secs(5), || false), Woken::Io);
        assert!(t.elapsed() < Duration::from_secs(1));
        // Rung from another thread while asleep.
        let b = bell.clone();
        let ringer = std::thread::spawn(move || {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if b.asleep.load(Ordering::Relaxed) {
                    b.ring_if_asleep();
                    return;
                }
                std::thread::yield_now();
            }
        });
        let t = Instant::now();
        assert_eq!(w.wait(Duration::from_secs(5), || true), Woken::Bell);
        assert!(t.elapsed() < Duration::from_secs(4));
        ringer.join().unwrap();
    }

    /// A producer publishes a counter and rings just as the consumer goes to sleep, thousands
    /// of times, each publication landing before, during or after the consumer's arming and
    /// re-check: a lost wake-up would leave the consumer waiting for the 3 s bound (without the
    /// re-check, dozens of the 2000 were lost here).
    #[test]
    fn no_wake_up_is_lost_when_publication_and_sleep_race() {
        use std::sync::atomic::AtomicU64;
        const N: u64 = 2000;
        let bell = Arc::new(Doorbell::new().unwrap());
        let published = Arc::new(AtomicU64::new(0));
        // The consumer's last look found `published` at window - 1: it is about to sleep.
        let window = Arc::new(AtomicU64::new(0));
        let spin = |n: u64| (0..n).for_each(|_| std::hint::spin_loop());
        let producer = {
            let (bell, published, window) = (bell.clone(), published.clone(), window.clone());
            std::thread::spawn(move || {
                for i in 1..=N {
                    while window.load(Ordering::Acquire) < i {
                        std::hint::spin_loop();
                    }
                    spin((i * 7919) % 4000);
                    published.store(i, Ordering::Release);
                    bell.ring_if_asleep();
                }
            })
        };
        let mut w = Waiter::new(bell, &[]).unwrap();
        let mut mine = 0;
        let mut timeouts = 0;
        while mine < N {
            let p = published.load(Ordering::Acquire);
            if p > mine {
                mine = p;
                continue;
            }
            window.store(mine + 1, Ordering::Release);
            spin(2000);
            if w.wait(Duration::from_secs(3), || published.load(Ordering::Acquire) == mine) == Woken::Timeout {
                timeouts += 1;
            }
        }
        producer.join().unwrap();
        assert_eq!(timeouts, 0, "waits that were not woken");
    }

    #[test]
    fn input_on_a_watched_fd_wakes_the_waiter_until_it_is_read() {
        let mut fds = [0; 2];
        // SAFETY: fds is a live array of two ints for pipe's fds.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both fds were just created and are owned here only.
        let (r, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut w = Waiter::new(Arc::new(Doorbell::new().unwrap()), &[r.as_raw_fd()]).unwrap();
        assert_eq!(w.wait(Duration::from_millis(2), || true), Woken::Timeout);
        // SAFETY: writes one byte from a live buffer to our pipe.
        assert_eq!(unsafe { libc::write(wr.as_raw_fd(), b"x".as_ptr().cast(), 1) }, 1);
        assert_eq!(w.wait(Duration::from_secs(5), || true), Woken::Io);
        // Level-triggered: still unread, still woken.
        assert_eq!(w.wait(Duration::from_secs(5), || true), Woken::Io);
        assert!(!is_packet_socket_on(r.as_raw_fd(), 1), "a pipe is no packet socket");
    }
}
