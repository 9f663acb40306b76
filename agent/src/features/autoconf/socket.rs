//! The responder's packet sockets: `AF_PACKET`/`SOCK_RAW` of one Ethernet type, unbound (all
//! interfaces), with a classic BPF filter that lets only the guests' requests through, so the
//! agent is woken for nothing else the node receives. A packet socket of one type sees what
//! the host receives after tc ingress, i.e. what the datapath passed (`bpf/lib/autoconf.h`);
//! the sender's veth is `sll_ifindex`. Answers are whole Ethernet frames sent out of that
//! veth (through its tc egress, `sdn_to_pod`, which lets the gateway's answers in).

use std::collections::HashMap;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::Mutex;

use nix::sys::socket::{LinkAddr, MsgFlags, SockaddrLike as _, recvfrom, sendto};
use socket2::{Domain, Protocol, SockFilter, Type};

use super::frame::{ETH_P_IP, ETH_P_IPV6};

// Classic BPF opcodes (linux/filter.h).
const LDH_ABS: u16 = 0x28;
const LDB_ABS: u16 = 0x30;
const LDH_IND: u16 = 0x48;
const LDXB_MSH: u16 = 0xb1;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter::new(code, jt, jf, k)
}

/// IPv4, UDP, not a later fragment, 68 -> 67.
pub fn filter4() -> Vec<SockFilter> {
    vec![
        op(LDH_ABS, 0, 0, 12),
        op(JEQ_K, 0, 10, u32::from(ETH_P_IP)),
        op(LDB_ABS, 0, 0, 23),
        op(JEQ_K, 0, 8, 17),
        op(LDH_ABS, 0, 0, 20),
        op(JSET_K, 6, 0, 0x1fff),
        op(LDXB_MSH, 0, 0, 14),
        op(LDH_IND, 0, 0, 14),
        op(JEQ_K, 0, 3, 68),
        op(LDH_IND, 0, 0, 16),
        op(JEQ_K, 0, 1, 67),
        op(RET_K, 0, 0, 0xffff),
        op(RET_K, 0, 0, 0),
    ]
}

/// IPv6 without extension headers: UDP 546 -> 547, or an ICMPv6 router solicitation.
pub fn filter6() -> Vec<SockFilter> {
    vec![
        op(LDH_ABS, 0, 0, 12),
        op(JEQ_K, 0, 10, u32::from(ETH_P_IPV6)),
        op(LDB_ABS, 0, 0, 20),
        op(JEQ_K, 0, 4, 17),
        op(LDH_ABS, 0, 0, 54),
        op(JEQ_K, 0, 6, 546),
        op(LDH_ABS, 0, 0, 56),
        op(JEQ_K, 3, 4, 547),
        op(JEQ_K, 0, 3, 58),
        op(LDB_ABS, 0, 0, 54),
        op(JEQ_K, 0, 1, 133),
        op(RET_K, 0, 0, 0xffff),
        op(RET_K, 0, 0, 0),
    ]
}

/// One family's packet socket.
#[derive(Debug)]
pub struct Socket {
    /// Blocking: its reader is a thread of its own ([`super::run`]); tokio's `AsyncFd` needs
    /// `unsafe` to register a descriptor, which this workspace forbids.
    fd: OwnedFd,
    /// Each veth's link address to send through, learned from its requests.
    links: Mutex<HashMap<u32, LinkAddr>>,
}

impl Socket {
    /// The socket of IPv6 (`v6`) or IPv4, filtered.
    pub fn open(v6: bool) -> std::io::Result<Self> {
        let ty = if v6 { ETH_P_IPV6 } else { ETH_P_IP };
        let s = socket2::Socket::new(
            Domain::PACKET,
            Type::RAW.cloexec(),
            Some(Protocol::from(i32::from(ty.to_be()))),
        )?;
        s.attach_filter(&if v6 { filter6() } else { filter4() })?;
        Ok(Self {
            fd: OwnedFd::from(s),
            links: Mutex::new(HashMap::new()),
        })
    }

    /// The next request (blocks): its length in `buf` and the index of the veth it came
    /// in on.
    pub fn recv(&self, buf: &mut [u8]) -> std::io::Result<(usize, u32)> {
        loop {
            match recvfrom::<LinkAddr>(self.fd.as_raw_fd(), buf) {
                Ok((n, Some(a))) => {
                    let ifindex = a.ifindex() as u32;
                    self.links
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .insert(ifindex, a);
                    return Ok((n, ifindex));
                }
                Ok((_, None)) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Send `frame` out of veth `ifindex`. The veth must have sent a request before (its link
    /// address is learned from it), else `NotFound`.
    pub fn send(&self, ifindex: u32, frame: &[u8]) -> std::io::Result<()> {
        let addr = self
            .links
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&ifindex)
            .copied()
            .or_else(|| link_of(ifindex))
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("no link {ifindex}")))?;
        debug_assert_eq!(addr.len() as usize, std::mem::size_of::<nix::libc::sockaddr_ll>());
        sendto(self.fd.as_raw_fd(), frame, &addr, MsgFlags::empty())?;
        Ok(())
    }
}

/// The link address of interface `ifindex`, from `getifaddrs` (its `AF_PACKET` entry).
fn link_of(ifindex: u32) -> Option<LinkAddr> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|i| {
        let l = *i.address?.as_link_addr()?;
        (l.ifindex() == ifindex as usize).then_some(l)
    })
}
