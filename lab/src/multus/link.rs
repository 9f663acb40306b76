//! Multus's check of a delegate's interface name: the kernel asked for the link in the pod's
//! netns, as vishvananda/netlink's `LinkByName` asks it.

use std::fs::File;
use std::os::fd::AsRawFd as _;

/// Multus's `validateIfName`: `netlink.LinkByName(ifname)` in the pod's netns. Fine when the
/// kernel has no such link (`ENODEV`); the link existing, or any other answer of the kernel
/// (`ERANGE` for a name over 15 bytes), is an error.
pub(super) fn validate_ifname(netns: &str, ifname: &str) -> Result<(), String> {
    let file =
        File::open(netns).map_err(|e| format!("validateIfName: no net namespace {netns} found: {e}"))?;
    let found = std::thread::scope(|s| {
        s.spawn(|| {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)?;
            link_exists(ifname)
        })
        .join()
        .unwrap_or_else(|e| std::panic::resume_unwind(e))
    });
    match found {
        Ok(false) => Ok(()),
        Ok(true) => Err(format!("validateIfName: interface name {ifname} already exists")),
        // Go prints an errno as the C library's strerror, lower-cased.
        Err(errno) => {
            let text = std::io::Error::from_raw_os_error(errno as i32).to_string();
            let text = text.split(" (os error").next().unwrap_or_default();
            let mut c = text.chars();
            Err(c
                .next()
                .map_or_else(String::new, |f| f.to_lowercase().chain(c).collect()))
        }
    }
}

/// One `RTM_GETLINK` for `IFLA_IFNAME` = `name` (as vishvananda/netlink's `LinkByName` sends
/// it) on a netlink socket of the calling thread's netns: `Ok(false)` for `ENODEV`.
fn link_exists(name: &str) -> Result<bool, nix::errno::Errno> {
    use nix::sys::socket::{
        AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, send, socket,
    };
    const RTM_GETLINK: u16 = 18;
    const RTM_NEWLINK: u16 = 16;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST_ACK: u16 = 1 | 4;
    const IFLA_IFNAME: u16 = 3;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, 0))?;
    let mut attr = name.as_bytes().to_vec();
    attr.push(0);
    let attr_len = u16::try_from(4 + attr.len()).map_err(|_| nix::errno::Errno::E2BIG)?;
    let padded = (usize::from(attr_len) + 3) & !3;
    let total = u32::try_from(16 + 16 + padded).map_err(|_| nix::errno::Errno::E2BIG)?;
    let mut msg = Vec::with_capacity(total as usize);
    msg.extend(total.to_ne_bytes());
    msg.extend(RTM_GETLINK.to_ne_bytes());
    msg.extend(NLM_F_REQUEST_ACK.to_ne_bytes());
    msg.extend(1u32.to_ne_bytes()); // sequence
    msg.extend(0u32.to_ne_bytes()); // port id: the kernel
    msg.extend([0u8; 16]); // ifinfomsg: any family, any index
    msg.extend(attr_len.to_ne_bytes());
    msg.extend(IFLA_IFNAME.to_ne_bytes());
    msg.extend(&attr);
    msg.resize(total as usize, 0);
    send(fd.as_raw_fd(), &msg, MsgFlags::empty())?;
    let mut buf = vec![0u8; 65536];
    let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
    if n < 20 {
        return Err(nix::errno::Errno::EPROTO);
    }
    match u16::from_ne_bytes([buf[4], buf[5]]) {
        RTM_NEWLINK => Ok(true),
        NLMSG_ERROR => match -i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]) {
            0 => Ok(true),
            e if e == nix::errno::Errno::ENODEV as i32 => Ok(false),
            e => Err(nix::errno::Errno::from_raw(e)),
        },
        _ => Err(nix::errno::Errno::EPROTO),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_answers_the_link_lookup() {
        // This thread's netns always has `lo`; the kernel refuses a name over 15 bytes.
        assert_eq!(link_exists("lo"), Ok(true));
        assert_eq!(link_exists("cplab-nolink"), Ok(false));
        assert_eq!(
            link_exists("averyveryverylongname"),
            Err(nix::errno::Errno::ERANGE)
        );
        let me = "/proc/thread-self/ns/net";
        assert_eq!(validate_ifname(me, "cplab-nolink"), Ok(()));
        assert_eq!(
            validate_ifname(me, "lo"),
            Err("validateIfName: interface name lo already exists".into())
        );
        assert_eq!(
            validate_ifname(me, "averyveryverylongname"),
            Err("numerical result out of range".into())
        );
        assert!(
            validate_ifname("/nonexistent/netns", "x")
                .unwrap_err()
                .contains("no net namespace")
        );
    }
}
