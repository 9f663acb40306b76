//! The system calls the socket hooks need that aya 0.14 does not offer: a socket's netns
//! cookie (`SO_NETNS_COOKIE`), which keys `sdn_sock_netns`; `BPF_LINK_UPDATE` on a pinned
//! cgroup link, which swaps a restarted agent's hook in while the link stays attached (aya
//! updates TCX and XDP links only); and the cgroup such a link is attached to, which aya's
//! `LinkInfo` does not expose. Here rather than in the agent because the agent forbids unsafe
//! code; each call is one `unsafe` block with its reason.

use std::ffi::CString;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `SO_NETNS_COOKIE` (Linux 5.14), as `asm-generic/socket.h` numbers it: every architecture
/// this crate builds for (alpha, mips, parisc and sparc number it otherwise).
const SO_NETNS_COOKIE: libc::c_int = 71;
/// `enum bpf_cmd`.
const BPF_OBJ_GET: libc::c_int = 7;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_int = 15;
const BPF_LINK_UPDATE: libc::c_int = 29;
/// `enum bpf_link_type`.
const BPF_LINK_TYPE_CGROUP: u32 = 3;

/// The `BPF_OBJ_GET` part of `union bpf_attr`; the kernel zero-fills the rest.
#[repr(C)]
struct ObjGetAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

/// The `BPF_LINK_UPDATE` part of `union bpf_attr`.
#[repr(C)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

/// The `BPF_OBJ_GET_INFO_BY_FD` part of `union bpf_attr`.
#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `struct bpf_link_info` up to its `cgroup` member; the kernel fills what fits.
#[repr(C)]
#[derive(Default)]
struct CgroupLinkInfo {
    link_type: u32,
    id: u32,
    prog_id: u32,
    pad: u32,
    cgroup_id: u64,
    attach_type: u32,
    pad2: u32,
}

/// The cookie of the network namespace `sock` belongs to: what `bpf_get_netns_cookie()`
/// returns for that netns in a program. Any socket will do (a unix one needs no address).
///
/// # Errors
/// `ENOPROTOOPT` on kernels before 5.14; `EBADF`/`ENOTSOCK` if `sock` is no socket.
pub fn netns_cookie(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = size_of::<u64>() as libc::socklen_t;
    // SAFETY: `cookie` and `len` are valid for writes for the duration of the call, and `len`
    // is exactly `cookie`'s size, so the kernel writes at most those 8 bytes.
    #[expect(unsafe_code, reason = "getsockopt(SO_NETNS_COOKIE): no safe wrapper exists")]
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&raw mut cookie).cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != size_of::<u64>() {
        return Err(io::Error::other(format!("SO_NETNS_COOKIE returned {len} bytes")));
    }
    Ok(cookie)
}

/// Replace the program of the bpf link pinned at `pin` by `prog`, atomically: the hook is
/// never without a program. The link keeps its target (the cgroup) and its pin.
///
/// # Errors
/// `ENOENT` if nothing is pinned there; `ENOLINK` if the link's target is gone (its cgroup
/// removed: attach afresh); `EINVAL` if `prog` is of another type or attach type.
pub fn update_link(pin: &Path, prog: BorrowedFd<'_>) -> io::Result<()> {
    let link = obj_get(pin)?;
    let mut attr = LinkUpdateAttr {
        link_fd: link.as_raw_fd() as u32,
        new_prog_fd: prog.as_raw_fd() as u32,
        flags: 0,
        old_prog_fd: 0,
    };
    bpf(BPF_LINK_UPDATE, &mut attr).map(drop)
}

/// The cgroup the cgroup link pinned at `pin` is attached to: its id, which is the inode
/// number of its cgroup2 directory; 0 once the link is defunct (its cgroup was removed and
/// released).
///
/// # Errors
/// `ENOENT` if nothing is pinned there; `InvalidInput` if the pin is no cgroup link.
pub fn cgroup_link_target(pin: &Path) -> io::Result<u64> {
    let link = obj_get(pin)?;
    let mut info = CgroupLinkInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: link.as_raw_fd() as u32,
        info_len: size_of::<CgroupLinkInfo>() as u32,
        info: (&raw mut info) as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    if info.link_type != BPF_LINK_TYPE_CGROUP {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is a bpf link of type {}, not a cgroup link",
                pin.display(),
                info.link_type
            ),
        ));
    }
    Ok(info.cgroup_id)
}

/// A new descriptor of the bpf object pinned at `pin`.
fn obj_get(pin: &Path) -> io::Result<OwnedFd> {
    let path = CString::new(pin.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pin path contains a NUL byte"))?;
    let mut attr = ObjGetAttr {
        pathname: path.as_ptr() as u64,
        bpf_fd: 0,
        file_flags: 0,
    };
    let fd = bpf(BPF_OBJ_GET, &mut attr)?;
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("BPF_OBJ_GET returned no descriptor"))?;
    // SAFETY: BPF_OBJ_GET returned a new descriptor that nothing else owns.
    #[expect(
        unsafe_code,
        reason = "taking ownership of the descriptor BPF_OBJ_GET returned"
    )]
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `bpf(cmd, attr, sizeof(*attr))`; the kernel may write `attr` back (`info_len`).
fn bpf<T>(cmd: libc::c_int, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is the `#[repr(C)]` leading part of `union bpf_attr` for `cmd`, valid
    // for reads and writes of the size passed; the kernel copies that many bytes, zero-fills
    // the rest, and writes back at most that many. Every pointer inside it (a path, an info
    // buffer of the length given) is valid for the call.
    #[expect(unsafe_code, reason = "the bpf(2) system call has no safe wrapper")]
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<T>() as libc::c_uint,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixDatagram;

    use super::*;

    #[test]
    fn two_sockets_of_one_netns_have_one_cookie() {
        let a = UnixDatagram::unbound().unwrap();
        let b = UnixDatagram::unbound().unwrap();
        let ca = netns_cookie(a.as_fd()).unwrap();
        assert_ne!(ca, 0);
        assert_eq!(ca, netns_cookie(b.as_fd()).unwrap());
    }
}
