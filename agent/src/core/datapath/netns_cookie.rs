//! Network namespace cookies: the key of `sdn_sock_netns`, by which the socket hooks of the
//! default network's Services (`bpf/lib/sock_lb.h`) tell this node's sockets from the rest of
//! the machine's. The agent registers its own netns (net 0) at start, and each pod's netns
//! (net 0, or the pod's VPC: left alone) at CNI ADD; DEL removes it by the cookie the record
//! keeps. A cookie is never reused while the machine runs, so a stale entry can never
//! stand for another netns.

use std::fs::File;
use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use cozyplane_bpf::maps::sock_netns::SockNetnsMap;
use nix::sched::{CloneFlags, setns};

/// The cookie of this thread's netns (the agent's: the node's, as it runs with the host
/// network). Any socket will do; a unix one needs no address and no interface up.
pub fn own() -> io::Result<u64> {
    let sock = UnixDatagram::unbound()?;
    cozyplane_bpf::sys::netns_cookie(sock.as_fd())
}

/// The cookie of the netns at `path` (a pod's `CNI_NETNS`, `/run/netns/<name>`): a
/// short-lived thread enters it (`setns` moves only the calling thread) and asks a socket
/// made there. The caller's thread never leaves its netns.
pub fn of_path(path: &Path) -> io::Result<u64> {
    let ns =
        File::open(path).map_err(|e| io::Error::new(e.kind(), format!("open {}: {e}", path.display())))?;
    std::thread::scope(|s| {
        s.spawn(|| {
            setns(&ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
                io::Error::new(
                    io::Error::from(e).kind(),
                    format!("setns {}: {e}", path.display()),
                )
            })?;
            own()
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the netns cookie thread panicked")))
    })
}

/// Registers the agent's own netns on net 0 in `sdn_sock_netns` under `pin_dir`, so the
/// node's own sockets are served; returns its cookie.
pub fn register_own(pin_dir: &Path) -> io::Result<u64> {
    let cookie = own()?;
    SockNetnsMap::from_pin(pin_dir)
        .and_then(|mut m| m.upsert(cookie, 0))
        .map_err(io::Error::other)?;
    Ok(cookie)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_calls_name_one_netns() {
        let own = own().unwrap();
        assert_ne!(own, 0);
        assert_eq!(super::own().unwrap(), own);
    }

    #[test]
    fn a_missing_netns_says_which() {
        let e = of_path(Path::new("/nonexistent/netns")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("/nonexistent/netns"), "{e}");
    }
}
