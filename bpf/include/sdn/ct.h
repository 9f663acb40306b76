/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * sdn_pol_ct: the connection table the three policy layers share (issue 14).
 * One entry per flow, found with ONE lookup from either direction: the key is
 * canonical (the endpoint that sorts first is side a), and the value records
 * which side started the flow. docs/policy.md, "Connection table".
 *
 * Keyed by the tuple as the enforcement point sees it: after service DNAT and
 * the fabric bridge's rewrite, before any SNAT. Family-agnostic: addresses
 * are struct sdn_addr (IPv4 as 64:ff9b::a.b.c.d).
 *
 * Rust mirror: bpf/src/abi.rs (PctKey, Pct), bpf/src/maps/pol_ct.rs; the
 * canonical ordering and the state machine's pure half live in the `policy`
 * crate (ct.rs) so the datapath tests can compare against it.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

struct sdn_pct_key {
	struct sdn_addr a;	/* side a: the endpoint whose {ip, port, net} sorts first, bytewise */
	struct sdn_addr b;
	__u32 net_a;		/* the net side a lives in (VNI; 0 = default network / node) */
	__u32 net_b;		/* differs from net_a only across a peering */
	__be16 port_a;		/* TCP/UDP/SCTP port; ICMP echo: the identifier on both sides */
	__be16 port_b;
	__u8 proto;		/* IPPROTO_*; ICMPv6 echo as IPPROTO_ICMPV6 */
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_pct_key) == 48, "ABI: sdn_pct_key");

struct sdn_pct {
	__u64 expires;		/* bpf_ktime_get_ns() deadline; a dead entry is a miss */
	__u32 generation;	/* sdn_pol_state.generation the flow was last admitted under */
	__u32 rule;		/* id of the rule that admitted it (metrics, trace); 0 = default allow */
	__u16 flags;		/* SDN_PCT_F_* */
	__u8 tcp;		/* SDN_TCP_*; 0 for other protocols */
	__u8 layers;		/* bit SDN_LAYER_x set: that layer was consulted and admitted */
	__u8 pad[4];
};
_Static_assert(sizeof(struct sdn_pct) == 24, "ABI: sdn_pct");

#define SDN_PCT_F_INIT_B	(1u << 0)	/* side b sent the first packet */
#define SDN_PCT_F_REPLIED	(1u << 1)	/* the responder has answered */
#define SDN_PCT_F_FIN_A		(1u << 2)	/* side a sent FIN */
#define SDN_PCT_F_FIN_B		(1u << 3)	/* side b sent FIN */

/* TCP: just enough to tell new from established, and to age a closing flow
 * out quickly. Only a SYN without ACK may create an entry; anything else that
 * misses is dropped (a reason of the policy block, -43..-50), which is what admits replies by
 * state and not by a guess. */
#define SDN_TCP_SYN_SENT	1	/* SYN seen from the initiator */
#define SDN_TCP_ESTABLISHED	2	/* the responder's SYN-ACK seen */
#define SDN_TCP_CLOSING		3	/* a FIN seen */
#define SDN_TCP_CLOSED		4	/* RST, or FINs both ways */

/* Timeouts in seconds, per state; refreshed by every packet that passes. */
#define SDN_CT_TCP_SYN_S	60
#define SDN_CT_TCP_EST_S	21600
#define SDN_CT_TCP_CLOSE_S	10
#define SDN_CT_UDP_S		30	/* one-way so far */
#define SDN_CT_UDP_REPLIED_S	120	/* answered */
#define SDN_CT_ICMP_S		30

#define SDN_POL_CT_MAX		262144
