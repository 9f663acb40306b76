//! `cozyplane-cni`, the CNI plugin (spec 1.1.0).
//!
//! A thin binary: it reads the CNI environment and the stdin config, forwards the command
//! to the node agent over a unix socket and prints the agent's result or a CNI error. All
//! logic is in the library ([`cozyplane_cni::plugin`]) so it can be tested without a process.
//!
//! kubelet execs the plugin for every pod ADD, DEL and CHECK, so it is built without libc:
//! `no_std`, its own `_start` and the few pieces of a runtime it needs ([`rt`]), and every
//! system call through rustix's linux_raw backend. On a VM, glibc's start-up alone cost
//! more CPU than the rest of the plugin (docs/datapath.md, "The CNI plugin").
//!
//! It behaves as the std binary it replaced: the same system calls on the socket in the same
//! order, std's error texts ([`cozyplane_cni::io::IoError::from_errno`]), interrupted calls
//! retried as std retries them, SIGPIPE ignored and closed stdio fds reopened on /dev/null
//! as std does before `main`.

#![no_std]
#![no_main]

extern crate alloc;

mod rt;

use alloc::string::ToString;
use alloc::vec::Vec;
use core::time::Duration;

use cozyplane_cni::env::{split_environ_entry, vars_lookup};
use cozyplane_cni::io::{IoError, IoErrorKind};
use cozyplane_cni::plugin::{Transport, TransportError, response, run};
use cozyplane_cni::proto::{MAX_MESSAGE, Request, Response};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::sockopt::{Timeout, set_socket_timeout};
use rustix::net::{AddressFamily, Shutdown, SocketAddrUnix, SocketFlags, SocketType};

/// The plugin, called by [`rt`] with the process environment; returns the exit status.
fn main(environ: rt::Environ) -> i32 {
    let mut stdin = Vec::new();
    // An unreadable stdin is treated as what was read of it (usually nothing); the config
    // parser reports it as code 6.
    let _ = read_up_to(rt::stdin(), &mut stdin, MAX_MESSAGE);
    let vars = environ.entries().filter_map(split_environ_entry);
    let out = run(vars_lookup(vars), &stdin, &SocketTransport);
    if let Some(v) = out.stdout {
        // A `Value` always serializes (this is its `Display`). Nothing useful can be done if
        // stdout is closed; the exit code still tells.
        if let Ok(mut line) = serde_json::to_vec(&v) {
            line.push(b'\n');
            let _ = write_all(rt::stdout(), &line);
        }
    }
    out.exit_code
}

/// The agent's unix socket over rustix: the std `UnixTransport`'s steps, in its order, with
/// its errors.
struct SocketTransport;

impl Transport for SocketTransport {
    fn call(&self, socket: &str, req: &Request, timeout: Duration) -> Result<Response, TransportError> {
        let failed = |e: Errno| TransportError::Failed(os_error(e));
        let s = connect(socket).map_err(TransportError::connect)?;
        let body = serde_json::to_vec(req).map_err(|e| TransportError::BadResponse(e.to_string()))?;
        set_socket_timeout(&s, Timeout::Send, Some(timeout)).map_err(failed)?;
        set_socket_timeout(&s, Timeout::Recv, Some(timeout)).map_err(failed)?;
        write_all(s.as_fd(), &body).map_err(TransportError::Failed)?;
        rustix::net::shutdown(&s, Shutdown::Write).map_err(failed)?;
        let mut out = Vec::new();
        read_up_to(s.as_fd(), &mut out, MAX_MESSAGE + 1).map_err(failed)?;
        response(&out)
    }
}

/// `sun_path`'s size in `sockaddr_un`.
const SUN_PATH_LEN: usize = 108;

/// std's `UnixStream::connect`: `socket(2)`, then std's checks of the path (with its
/// messages), then `connect(2)`.
fn connect(path: &str) -> Result<OwnedFd, IoError> {
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(os_error)?;
    let invalid = |msg| IoError::new(IoErrorKind::InvalidInput, msg);
    if path.as_bytes().contains(&0) {
        return Err(invalid("paths must not contain interior null bytes"));
    }
    // std keeps room for the terminating NUL.
    if path.len() >= SUN_PATH_LEN {
        return Err(invalid("path must be shorter than SUN_LEN"));
    }
    // std passes an empty path as the bare address family, which the kernel refuses (EINVAL);
    // rustix would make it an abstract address.
    let addr = if path.is_empty() {
        SocketAddrUnix::new_unnamed()
    } else {
        SocketAddrUnix::new(path).map_err(os_error)?
    };
    rustix::net::connect(&fd, &addr).map_err(os_error)?;
    Ok(fd)
}

/// std's error for a failed system call.
fn os_error(e: Errno) -> IoError {
    IoError::from_errno(e.raw_os_error())
}

/// Read until end of file, an error or `limit` bytes in all, retrying interrupted reads
/// (std's `Read::take(limit).read_to_end`). What was read before an error stays in `buf`.
fn read_up_to(fd: BorrowedFd<'_>, buf: &mut Vec<u8>, limit: usize) -> Result<(), Errno> {
    // A netconf is a KiB or two: usually one read and the one that sees the end. The buffer
    // doubles while reads fill it; each chunk is zeroed first, so a larger start would touch
    // (fault in) pages a small config never needs.
    let mut chunk = 4 * 1024;
    loop {
        let len = buf.len();
        if len >= limit {
            return Ok(());
        }
        let want = chunk.min(limit - len);
        buf.resize(len + want, 0);
        match rustix::io::read(fd, &mut buf[len..]) {
            Ok(n) => {
                buf.truncate(len + n);
                if n == 0 {
                    return Ok(());
                }
                if n == want {
                    chunk = chunk.saturating_mul(2);
                }
            }
            Err(Errno::INTR) => buf.truncate(len),
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Write all of `bytes`, retrying interrupted writes (std's `Write::write_all`).
fn write_all(fd: BorrowedFd<'_>, mut bytes: &[u8]) -> Result<(), IoError> {
    while !bytes.is_empty() {
        match rustix::io::write(fd, bytes) {
            Ok(0) => return Err(IoError::new(IoErrorKind::Other, "failed to write whole buffer")),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(os_error(e)),
        }
    }
    Ok(())
}
