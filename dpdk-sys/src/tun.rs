//! Safe wrappers over the TUN/TAP ioctls (linux/if_tun.h) the kernel interface's own backend
//! needs: attaching a queue file to a multi-queue TAP device, the virtio-net header size and
//! the offloads the kernel may use toward us. Reading and writing the file is plain `std`.

use std::ffi::{c_int, c_ulong};
use std::io;
use std::os::fd::AsRawFd;

extern "C" {
    fn ioctl(fd: c_int, request: c_ulong, ...) -> c_int;
}

/// `IFF_TAP`: Ethernet frames.
pub const IFF_TAP: i16 = 0x0002;
/// `IFF_NO_PI`: no packet-information prefix.
pub const IFF_NO_PI: i16 = 0x1000;
/// `IFF_MULTI_QUEUE`: one file per queue.
pub const IFF_MULTI_QUEUE: i16 = 0x0100;
/// `IFF_VNET_HDR`: every frame is prefixed by a `virtio_net_hdr`.
pub const IFF_VNET_HDR: i16 = 0x4000;
/// `TUN_F_CSUM`: we take frames with a partial checksum (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
pub const TUN_F_CSUM: u32 = 0x01;
/// `TUN_F_TSO4`: we take TCP/IPv4 frames to segment.
pub const TUN_F_TSO4: u32 = 0x02;
/// `TUN_F_TSO6`: we take TCP/IPv6 frames to segment.
pub const TUN_F_TSO6: u32 = 0x04;
/// `TUN_F_TSO_ECN`: such frames may carry CWR (set on the first segment only).
pub const TUN_F_TSO_ECN: u32 = 0x08;

/// `_IOW('T', nr, int)`.
const fn iow_t(nr: c_ulong) -> c_ulong {
    (1 << 30) | (4 << 16) | ((b'T' as c_ulong) << 8) | nr
}
const TUNSETIFF: c_ulong = iow_t(202);
const TUNSETOFFLOAD: c_ulong = iow_t(208);
const TUNSETVNETHDRSZ: c_ulong = iow_t(216);

fn check(rc: c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Attaches `file` (an open `/dev/net/tun`) to the device `name` with `flags`, creating the
/// device if it does not exist (`TUNSETIFF`); with `IFF_MULTI_QUEUE`, each file is one queue.
pub fn attach(file: &impl AsRawFd, name: &str, flags: i16) -> io::Result<()> {
    // struct ifreq: the name (IFNAMSIZ = 16, NUL-terminated), then a union of which
    // `ifr_flags` (a short) is the first member; 40 bytes on Linux.
    let mut ifr = [0u8; 40];
    if name.is_empty() || name.len() >= 16 || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name: 1 to 15 bytes",
        ));
    }
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    ifr[16..18].copy_from_slice(&flags.to_ne_bytes());
    // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `ifr` is laid out as (and
    // large enough for); it lives across the call, and the fd is the caller's open file.
    check(unsafe { ioctl(file.as_raw_fd(), TUNSETIFF, ifr.as_mut_ptr()) })
}

/// Sets the size of the header before every frame (`TUNSETVNETHDRSZ`).
pub fn set_vnet_hdr_size(file: &impl AsRawFd, size: i32) -> io::Result<()> {
    let size: c_int = size;
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which points at a live int.
    check(unsafe { ioctl(file.as_raw_fd(), TUNSETVNETHDRSZ, &size as *const c_int) })
}

/// Tells the kernel which offloads the reader of the device handles (`TUNSETOFFLOAD`, the
/// `TUN_F_*` flags): what it may hand us unsegmented or with a partial checksum.
pub fn set_offload(file: &impl AsRawFd, flags: u32) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes the flags by value (an unsigned long argument).
    check(unsafe { ioctl(file.as_raw_fd(), TUNSETOFFLOAD, flags as c_ulong) })
}
