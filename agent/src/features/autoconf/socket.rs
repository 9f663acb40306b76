//! The responder's packet sockets: `AF_PACKET`/`SOCK_RAW` of one Ethernet type, unbound (all
//! interfaces), with a classic BPF filter that lets only the guests' requests through (the
//! frames the datapath marked `PACKET_OTHERHOST`, of the protocols answered), so the agent is
//! woken for nothing else the node receives, an uplink's broadcasts included. A packet
//! socket of one type sees what the host receives after tc ingress, i.e. what the datapath
//! passed (`bpf/lib/autoconf.h`);
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
const LDW_ABS: u16 = 0x20;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the skb's packet type.
const AD_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
/// `PACKET_OTHERHOST`: what the datapath marks a guest's request with.
const OTHERHOST: u32 = 3;

fn op(code: u16, jt: u8, jf: u8, k: u32) -> SockFilter {
    SockFilter::new(code, jt, jf, k)
}

/// Only what the datapath kept on a pod's link (`bpf/lib/autoconf.h` marks it
/// `PACKET_OTHERHOST`), then `rest`: a DHCP broadcast or router solicitation of another host
/// on the node's uplink is none of the responder's business (it was counted as a `no_port`
/// drop, and woke the agent, for every such frame on the segment).
fn kept(rest: Vec<SockFilter>) -> Vec<SockFilter> {
    let mut v = vec![
        op(LDW_ABS, 0, 0, AD_PKTTYPE),
        op(JEQ_K, 1, 0, OTHERHOST),
        op(RET_K, 0, 0, 0),
    ];
    v.extend(rest);
    v
}

/// Kept on a pod's link; IPv4, UDP, not a later fragment, 68 -> 67.
pub fn filter4() -> Vec<SockFilter> {
    kept(vec![
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
    ])
}

/// Kept on a pod's link; IPv6 without extension headers: UDP 546 -> 547, or an ICMPv6 router
/// solicitation.
pub fn filter6() -> Vec<SockFilter> {
    kept(vec![
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
    ])
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
        // What the socket queued between its creation and the filter passed no filter (a
        // busy node's loopback TCP, the uplink's broadcasts): read and discarded, else each
        // was a `no_port` drop at start. (Binding only after the filter would avoid it, but a
        // `sockaddr_ll` for `bind` needs `unsafe`, which this workspace forbids.) A guest's
        // request lost here is retransmitted.
        s.set_nonblocking(true)?;
        let mut junk = [std::mem::MaybeUninit::<u8>::uninit(); 2048];
        while s.recv(&mut junk).is_ok() {}
        s.set_nonblocking(false)?;
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
