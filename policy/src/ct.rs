//! The pure half of the connection table (`bpf/include/sdn/ct.h`): the canonical key and
//! the per-packet state machine, as the datapath must implement them. The datapath tests
//! (and the trace API, for "is this an established flow?") compare against this.

use std::net::IpAddr;

use crate::cidr::addr128;
use crate::model::proto;

/// One end of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Side {
    /// Address.
    pub ip: IpAddr,
    /// Port (ICMP echo: the identifier).
    pub port: u16,
    /// The net it lives in (0: the default network or a node).
    pub net: u32,
}

impl Side {
    /// The bytes `ct.h` compares: address (128-bit form), port (network order), net.
    fn sort_key(&self) -> ([u8; 16], [u8; 2], u32) {
        (addr128(self.ip).to_be_bytes(), self.port.to_be_bytes(), self.net)
    }
}

/// `struct sdn_pct_key`: side `a` sorts first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The side that sorts first.
    pub a: Side,
    /// The other.
    pub b: Side,
    /// IP protocol.
    pub proto: u8,
}

/// The canonical key of a packet from `src` to `dst`, and whether `src` is side b.
pub fn key(src: Side, dst: Side, proto: u8) -> (Key, bool) {
    if src.sort_key() <= dst.sort_key() {
        (
            Key {
                a: src,
                b: dst,
                proto,
            },
            false,
        )
    } else {
        (
            Key {
                a: dst,
                b: src,
                proto,
            },
            true,
        )
    }
}

/// `SDN_TCP_*`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tcp {
    /// Not TCP.
    None = 0,
    /// The initiator's SYN seen.
    SynSent = 1,
    /// The responder's SYN-ACK seen.
    Established = 2,
    /// A FIN seen.
    Closing = 3,
    /// RST, or FINs both ways.
    Closed = 4,
}

/// `struct sdn_pct`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Deadline, nanoseconds of the datapath's monotonic clock.
    pub expires: u64,
    /// The generation the flow was last admitted under.
    pub generation: u32,
    /// Side b started the flow.
    pub init_b: bool,
    /// The responder has answered.
    pub replied: bool,
    /// FIN seen from a / b.
    pub fin: [bool; 2],
    /// TCP state.
    pub tcp: Tcp,
}

/// TCP flags of a packet (all false for other protocols).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// SYN.
    pub syn: bool,
    /// ACK.
    pub ack: bool,
    /// FIN.
    pub fin: bool,
    /// RST.
    pub rst: bool,
}

const S: u64 = 1_000_000_000;
/// Timeouts of `ct.h`, seconds.
pub const TCP_SYN_S: u64 = 60;
/// Established TCP.
pub const TCP_EST_S: u64 = 21_600;
/// Closing or closed TCP.
pub const TCP_CLOSE_S: u64 = 10;
/// UDP/SCTP, one way so far.
pub const UDP_S: u64 = 30;
/// UDP/SCTP, answered.
pub const UDP_REPLIED_S: u64 = 120;
/// ICMP echo.
pub const ICMP_S: u64 = 30;

/// What the datapath does with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// No live entry and the packet may open a flow: run the policy layers; if they admit
    /// it, store [`new_entry`].
    Evaluate,
    /// No live entry and the packet cannot open a flow (TCP without a lone SYN): drop.
    Invalid,
    /// The entry admits it; the entry was updated.
    Pass,
    /// The entry is from an older generation: run the policy layers on the flow's original
    /// direction; admitted → [`Entry::generation`] := current and pass, else delete + drop.
    Recheck,
}

/// Can this packet open a flow?
pub fn opens(proto_: u8, f: Flags) -> bool {
    proto_ != proto::TCP || (f.syn && !f.ack && !f.rst)
}

/// The entry a first packet creates (`from_b`: the initiator is side b).
pub fn new_entry(proto_: u8, from_b: bool, now: u64, generation: u32) -> Entry {
    let (tcp, life) = match proto_ {
        proto::TCP => (Tcp::SynSent, TCP_SYN_S),
        proto::ICMP | proto::ICMPV6 => (Tcp::None, ICMP_S),
        _ => (Tcp::None, UDP_S),
    };
    Entry {
        expires: now + life * S,
        generation,
        init_b: from_b,
        replied: false,
        fin: [false; 2],
        tcp,
    }
}

/// One packet (`from_b`: sent by side b) against the table's entry for its key.
pub fn step(
    entry: Option<&mut Entry>,
    proto_: u8,
    from_b: bool,
    f: Flags,
    now: u64,
    generation: u32,
) -> Action {
    let Some(e) = entry.filter(|e| e.expires > now) else {
        return if opens(proto_, f) {
            Action::Evaluate
        } else {
            Action::Invalid
        };
    };
    if e.generation != generation {
        return Action::Recheck;
    }
    let responder = from_b != e.init_b;
    let life = if proto_ == proto::TCP {
        if f.rst {
            e.tcp = Tcp::Closed;
        } else {
            if f.syn && f.ack && responder && e.tcp == Tcp::SynSent {
                e.tcp = Tcp::Established;
            }
            if f.fin {
                e.fin[usize::from(from_b)] = true;
                e.tcp = if e.fin[0] && e.fin[1] {
                    Tcp::Closed
                } else {
                    Tcp::Closing
                };
            }
        }
        match e.tcp {
            Tcp::SynSent => TCP_SYN_S,
            Tcp::Established => TCP_EST_S,
            _ => TCP_CLOSE_S,
        }
    } else if proto_ == proto::ICMP || proto_ == proto::ICMPV6 {
        ICMP_S
    } else if responder || e.replied {
        UDP_REPLIED_S
    } else {
        UDP_S
    };
    e.replied |= responder;
    e.expires = now + life * S;
    Action::Pass
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(ip: &str, port: u16) -> Side {
        Side {
            ip: ip.parse().unwrap(),
            port,
            net: 0,
        }
    }

    #[test]
    fn both_directions_share_one_key() {
        let (c, s) = (side("10.0.0.9", 40000), side("10.0.0.2", 80));
        let (k1, b1) = key(c, s, proto::TCP);
        let (k2, b2) = key(s, c, proto::TCP);
        assert_eq!(k1, k2);
        assert_ne!(b1, b2);
        // Same address (hairpin): the port decides.
        let (k3, _) = key(side("10.0.0.2", 9), side("10.0.0.2", 8), proto::UDP);
        assert_eq!(k3.a.port, 8);
    }

    #[test]
    fn tcp_only_a_syn_opens_and_replies_pass_by_state() {
        let syn = Flags {
            syn: true,
            ..Flags::default()
        };
        let synack = Flags {
            syn: true,
            ack: true,
            ..Flags::default()
        };
        let ack = Flags {
            ack: true,
            ..Flags::default()
        };
        assert_eq!(step(None, proto::TCP, false, ack, 0, 1), Action::Invalid);
        assert_eq!(step(None, proto::TCP, false, synack, 0, 1), Action::Invalid);
        assert_eq!(step(None, proto::TCP, false, syn, 0, 1), Action::Evaluate);
        let mut e = new_entry(proto::TCP, false, 0, 1);
        assert_eq!(step(Some(&mut e), proto::TCP, true, synack, 1, 1), Action::Pass);
        assert_eq!(e.tcp, Tcp::Established);
        assert_eq!(e.expires, 1 + TCP_EST_S * S);
        // The initiator cannot establish its own flow with a forged SYN-ACK.
        let mut e2 = new_entry(proto::TCP, false, 0, 1);
        step(Some(&mut e2), proto::TCP, false, synack, 1, 1);
        assert_eq!(e2.tcp, Tcp::SynSent);
        let fin = Flags {
            fin: true,
            ack: true,
            ..Flags::default()
        };
        step(Some(&mut e), proto::TCP, false, fin, 2, 1);
        assert_eq!(e.tcp, Tcp::Closing);
        step(Some(&mut e), proto::TCP, true, fin, 3, 1);
        assert_eq!(e.tcp, Tcp::Closed);
        assert_eq!(
            step(Some(&mut e), proto::TCP, true, ack, 4 + TCP_CLOSE_S * S, 1),
            Action::Invalid
        );
    }

    #[test]
    fn a_new_generation_rechecks_and_expiry_forgets() {
        let mut e = new_entry(proto::UDP, false, 0, 1);
        assert_eq!(
            step(Some(&mut e), proto::UDP, true, Flags::default(), 1, 2),
            Action::Recheck
        );
        assert_eq!(
            step(Some(&mut e), proto::UDP, true, Flags::default(), 1, 1),
            Action::Pass
        );
        assert_eq!(e.expires, 1 + UDP_REPLIED_S * S);
        assert_eq!(
            step(
                Some(&mut e),
                proto::UDP,
                true,
                Flags::default(),
                2 + UDP_REPLIED_S * S,
                1
            ),
            Action::Evaluate
        );
    }
}
