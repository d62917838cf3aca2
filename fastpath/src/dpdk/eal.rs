//! The Environment Abstraction Layer: start, lcores, launching loops, the TSC.

use super::{Error, Result};
use std::ffi::{c_char, c_int, c_void, CString};

/// A started EAL. DPDK allows one per process, ever: a second `rte_eal_init` fails even after
/// `rte_eal_cleanup`, so tests that need DPDK run the program in its own process.
pub struct Eal {
    _private: (),
}

impl Eal {
    /// Starts the EAL with `args` (`args[0]` is the program name). Returns the EAL and how many
    /// arguments it consumed.
    pub fn init(args: &[String]) -> Result<Eal> {
        let cargs: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(a.as_str())
                    .map_err(|_| Error::new(format!("EAL argument {a:?} contains NUL"), libc::EINVAL))
            })
            .collect::<Result<_>>()?;
        // rte_eal_init may permute argv, so it gets its own array of pointers; the strings
        // themselves are never written and outlive the EAL (leaked on purpose, EAL keeps some).
        let mut argv: Vec<*mut c_char> = cargs.into_iter().map(|c| c.into_raw()).collect();
        argv.push(std::ptr::null_mut());
        let argc = (argv.len() - 1) as c_int;
        let argv = Box::leak(argv.into_boxed_slice());
        // SAFETY: argv holds argc valid NUL-terminated strings followed by a NULL, all leaked so
        // they live as long as the process, as EAL expects.
        let rc = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if rc < 0 {
            return Err(Error::from_rte_errno("rte_eal_init"));
        }
        Ok(Eal { _private: () })
    }

    /// Initialises DPDK's packet-capture framework (librte_pdump), so `dpdk-dumpcap` and
    /// `dpdk-pdump` can attach to this process as secondaries and capture its ports' RX and TX.
    /// Nothing is installed on the packet path until a capture is enabled: the framework only
    /// registers a multi-process handler; the tool's request adds the RX/TX callbacks, and
    /// removes them when it stops. Fails (`ENOTSUP`) without a shared runtime directory
    /// (`--no-shconf`, `--in-memory`), where no secondary process can attach anyway.
    pub fn pdump_init(&self) -> Result<()> {
        // SAFETY: called once after `rte_eal_init`, from the main thread.
        let rc = unsafe { dpdk_sys::rte_pdump_init() };
        if rc != 0 {
            return Err(Error::from_rte_errno("rte_pdump_init"));
        }
        // SAFETY: stores a function pointer the shim calls after removing an ethdev callback
        // (`fp_remove_then_wait`); `callback_removal_wait` never unwinds.
        unsafe { dpdk_sys::fp_set_callback_removal_wait(Some(callback_removal_wait)) };
        Ok(())
    }

    /// The runtime directory (`/var/run/dpdk/<file-prefix>` for root): where DPDK's tools
    /// attach; `None` if the EAL has none.
    pub fn runtime_dir(&self) -> Option<std::path::PathBuf> {
        // SAFETY: a getter valid after init; the string is a static buffer of the EAL's, copied
        // here before anything can change it.
        let p = unsafe { dpdk_sys::rte_eal_get_runtime_dir() };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated by the EAL (checked just above).
        let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned();
        (!s.is_empty()).then(|| s.into())
    }

    /// Releases EAL resources. Call after every port is closed and every lcore has returned.
    pub fn cleanup(self) {
        // SAFETY: called once, from the main thread, after all lcores finished (caller's
        // contract, enforced by consuming the only Eal).
        unsafe {
            // Harmless when pdump was never initialised (it unregisters an absent handler).
            dpdk_sys::rte_pdump_uninit();
            dpdk_sys::rte_eal_cleanup()
        };
    }

    /// The main lcore's id (the thread that called `init`).
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: plain getter, valid after init.
        unsafe { dpdk_sys::rte_get_main_lcore() }
    }

    /// The NUMA socket of `lcore`'s CPUs as the EAL saw them (`rte_lcore_to_socket_id`); `None`
    /// for an lcore the EAL does not run.
    pub fn lcore_socket(&self, lcore: u32) -> Option<u32> {
        if !self.lcore_enabled(lcore) {
            return None;
        }
        // SAFETY: plain getter, valid after init, for an enabled lcore id (checked above).
        Some(unsafe { dpdk_sys::rte_lcore_to_socket_id(lcore) })
    }

    /// Whether `lcore` is enabled in the EAL's core list.
    pub fn lcore_enabled(&self, lcore: u32) -> bool {
        // SAFETY: plain getter, valid after init; out-of-range ids return 0.
        unsafe { dpdk_sys::rte_lcore_is_enabled(lcore) != 0 }
    }

    /// TSC ticks per second.
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: plain getter, valid after init.
        unsafe { dpdk_sys::rte_get_tsc_hz() }
    }

    /// Runs `f` on the (non-main) lcore `lcore`. Fails if the lcore is not idle or not enabled.
    pub fn launch<F: FnOnce() + Send + 'static>(&self, lcore: u32, f: F) -> Result<()> {
        extern "C" fn trampoline(arg: *mut c_void) -> c_int {
            // SAFETY: arg is the Box<Box<dyn FnOnce>> leaked by `launch` below and is handed to
            // exactly one trampoline call, so taking ownership back here is sound.
            let f = unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) };
            // A panic must not unwind into C; the release profile aborts on panic anyway.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                Ok(()) => 0,
                Err(_) => -1,
            }
        }
        let boxed: Box<Box<dyn FnOnce() + Send>> = Box::new(Box::new(f));
        let arg = Box::into_raw(boxed) as *mut c_void;
        // SAFETY: trampoline has the lcore_function_t signature; arg is a valid leaked box that
        // the trampoline frees; on failure the function is not run and we free it ourselves.
        let rc = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg, lcore) };
        if rc != 0 {
            // SAFETY: the launch failed, so the trampoline never received arg; we still own it.
            drop(unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) });
            return Err(Error::new(format!("rte_eal_remote_launch(lcore {lcore})"), rc));
        }
        Ok(())
    }

    /// Waits for the function launched on `lcore` to return; `Ok` when it returned normally.
    pub fn wait(&self, lcore: u32) -> std::result::Result<(), i32> {
        // SAFETY: waits on a worker lcore; valid from the main lcore after init.
        let rc = unsafe { dpdk_sys::rte_eal_wait_lcore(lcore) };
        if rc == 0 {
            Ok(())
        } else {
            Err(rc)
        }
    }
}

/// The calling thread's lcore id (`u32::MAX` for threads EAL did not launch).
#[inline]
pub fn lcore_id() -> u32 {
    // SAFETY: reads a per-thread variable; valid on any thread.
    unsafe { dpdk_sys::fp_lcore_id() }
}

/// The time stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    // Inline on x86-64 (what rte_rdtsc is there): every lcore loop reads the TSC once per poll,
    // and a call through the shim for one instruction showed up in the forward loop's profile.
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC only reads the time-stamp counter; it touches no memory and every x86-64
    // CPU has it.
    return unsafe { core::arch::x86_64::_rdtsc() };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: reads the TSC; no memory is touched.
    unsafe {
        dpdk_sys::fp_rdtsc()
    }
}

/// A CPU pause hint for spin loops.
#[inline(always)]
pub fn pause() {
    // PAUSE on x86-64, like rte_pause, without a call through the shim.
    core::hint::spin_loop()
}

/// Pins thread `tid` of this process (its kernel thread id, as in `/proc/self/task`) to `cpus`:
/// for the threads the EAL starts itself (interrupt, multi-process), which it leaves on the main
/// lcore's CPU.
pub fn pin_thread(tid: i32, cpus: &[u32]) -> Result<()> {
    let n = u32::try_from(cpus.len()).map_err(|_| Error::new("too many CPUs", libc::EINVAL))?;
    // SAFETY: `cpus` is a valid slice of `n` u32 that the callee only reads; a `tid` that is not
    // a thread of this process makes sched_setaffinity fail (ESRCH), nothing else.
    let rc = unsafe { dpdk_sys::fp_pin_thread(tid, cpus.as_ptr(), n) };
    if rc != 0 {
        return Err(Error::new(format!("cannot pin thread {tid} to CPUs {cpus:?}"), rc));
    }
    Ok(())
}

/// Pins the calling thread to `cpus` (for threads that are not lcores: control, metrics).
pub fn pin_current_thread(cpus: &[u32]) -> Result<()> {
    let n = u32::try_from(cpus.len()).map_err(|_| Error::new("too many CPUs", libc::EINVAL))?;
    // SAFETY: `cpus` is a valid slice of `n` u32 that the callee only reads; it affects the
    // calling thread only.
    let rc = unsafe { dpdk_sys::fp_pin_current_thread(cpus.as_ptr(), n) };
    if rc != 0 {
        return Err(Error::new(format!("cannot pin the thread to CPUs {cpus:?}"), rc));
    }
    Ok(())
}

/// After librte_pdump removed an RX or TX callback (a capture tool stopping), before the tool
/// is told and frees what the callback copied into: every lcore loop through a poll begun
/// after the removal (`runtime::quiesce`). DPDK 22.11's pdump does not wait, and an lcore still
/// in the callback crashed the daemon (see `dpdk-sys/shim.c`).
extern "C" fn callback_removal_wait() {
    let limit = std::time::Duration::from_secs(1);
    let done = std::panic::catch_unwind(|| crate::runtime::quiesce::wait_for_every_loop(limit)).unwrap_or(false);
    if !done {
        eprintln!("fastpathd: a capture callback was removed but not every lcore finished a poll within 1 s");
    }
}
