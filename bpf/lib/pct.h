/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The policy layers' connection table (sdn_pol_ct, include/sdn/ct.h): the
 * canonical key and the per-packet state machine. A line-by-line mirror of
 * the `policy` crate's ct.rs, which the tests compare against: the key sorts
 * the two ends by {address bytes, port bytes, net}, and a packet either
 * passes by its entry (updating it), must be evaluated by the rules (no live
 * entry and it may open a flow), is invalid (no live entry and it may not:
 * TCP without a lone SYN), or must be re-checked (its entry was admitted under
 * an older sdn_pol_state.generation).
 *
 * Nothing here knows the layers; lib/policy.h runs them for EVALUATE and
 * RECHECK.
 */
#pragma once

#include "common.h"
#include "parse.h"

/* TCP header flag bits (byte 13). */
#define SDN_TCPF_FIN		0x01
#define SDN_TCPF_SYN		0x02
#define SDN_TCPF_RST		0x04
#define SDN_TCPF_ACK		0x10

#define SDN_PCT_NS		1000000000ULL

/* sdn_pct_step() results, ct.rs `Action`. */
#define SDN_PCT_PASS		0
#define SDN_PCT_EVALUATE	1
#define SDN_PCT_INVALID		2
#define SDN_PCT_RECHECK		3

/*
 * One packet as the policy layers see it: the tuple after service DNAT and
 * the bridge's rewrite, the nets of both ends, and their SecurityGroups. An
 * ICMP error is described by the flow it quotes (icmp_err set), in the
 * quoted packet's direction; the key is canonical either way.
 */
struct sdn_flow {
	struct sdn_addr src;
	struct sdn_addr dst;
	__u64 src_groups;	/* SG: the source's groups (sdn_sg_members or the tunnel option) */
	__u64 dst_groups;
	__u32 src_net;
	__u32 dst_net;
	__be16 sport;		/* TCP/UDP/SCTP; ICMP echo: the identifier in both */
	__be16 dport;
	__be16 rport;		/* the rule key's port: dport; ICMP: type << 8 | code */
	__u8 proto;
	__u8 tcp;		/* TCP flags (SDN_TCPF_*) */
	__u8 icmp_err;		/* an ICMP error: the fields above are its quote's */
	__u8 family;
	__u8 hdr[6];		/* header bytes read on the way (no stack to spare) */
};

/* -1, 0 or 1 as {a, pa, na} sorts before, equal to or after {b, pb, nb}:
 * address bytes, then port bytes (network order), then the net's value.
 */
static __always_inline int sdn_pct_cmp(const struct sdn_addr *a, __be16 pa,
				       __u32 na, const struct sdn_addr *b,
				       __be16 pb, __u32 nb)
{
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 x = bpf_ntohl(a->w[i]), y = bpf_ntohl(b->w[i]);

		if (x != y)
			return x < y ? -1 : 1;
	}
	if (pa != pb)
		return bpf_ntohs(pa) < bpf_ntohs(pb) ? -1 : 1;
	if (na != nb)
		return na < nb ? -1 : 1;
	return 0;
}

/* ct.rs key(): fills k, returns 1 when the sender (f->src) is side b. */
static __always_inline int sdn_pct_key_of(const struct sdn_flow *f,
					  struct sdn_pct_key *k)
{
	int from_b = sdn_pct_cmp(&f->src, f->sport, f->src_net, &f->dst,
				 f->dport, f->dst_net) > 0;

	__builtin_memset(k, 0, sizeof(*k));
	if (from_b) {
		k->a = f->dst;
		k->b = f->src;
		k->net_a = f->dst_net;
		k->net_b = f->src_net;
		k->port_a = f->dport;
		k->port_b = f->sport;
	} else {
		k->a = f->src;
		k->b = f->dst;
		k->net_a = f->src_net;
		k->net_b = f->dst_net;
		k->port_a = f->sport;
		k->port_b = f->dport;
	}
	k->proto = f->proto;
	return from_b;
}

/* ct.rs opens(): may this packet open a flow? */
static __always_inline int sdn_pct_opens(const struct sdn_flow *f)
{
	if (f->proto != IPPROTO_TCP)
		return 1;
	return (f->tcp & (SDN_TCPF_SYN | SDN_TCPF_ACK | SDN_TCPF_RST)) ==
	       SDN_TCPF_SYN;
}

static __always_inline int sdn_pct_is_icmp(__u8 proto)
{
	return proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6;
}

/* ct.rs new_entry(). */
static __always_inline void sdn_pct_new(struct sdn_pct *e,
					const struct sdn_flow *f, int from_b,
					__u64 now, __u32 gen, __u32 rule)
{
	__u64 life = SDN_CT_UDP_S;

	__builtin_memset(e, 0, sizeof(*e));
	e->rule = rule;
	if (f->proto == IPPROTO_TCP) {
		e->tcp = SDN_TCP_SYN_SENT;
		life = SDN_CT_TCP_SYN_S;
	} else if (sdn_pct_is_icmp(f->proto)) {
		life = SDN_CT_ICMP_S;
	}
	e->expires = now + life * SDN_PCT_NS;
	e->generation = gen;
	e->flags = from_b ? SDN_PCT_F_INIT_B : 0;
}

/* ct.rs step(): one packet (from side b when from_b) against its entry, which
 * is updated in place when the packet passes.
 */
static __always_inline int sdn_pct_step(struct sdn_pct *e,
					const struct sdn_flow *f, int from_b,
					__u64 now, __u32 gen)
{
	int responder;
	__u64 life;

	if (!e || e->expires <= now)
		return sdn_pct_opens(f) ? SDN_PCT_EVALUATE : SDN_PCT_INVALID;
	if (e->generation != gen)
		return SDN_PCT_RECHECK;
	responder = from_b != !!(e->flags & SDN_PCT_F_INIT_B);
	if (f->proto == IPPROTO_TCP) {
		if (f->tcp & SDN_TCPF_RST) {
			e->tcp = SDN_TCP_CLOSED;
		} else {
			if ((f->tcp & (SDN_TCPF_SYN | SDN_TCPF_ACK)) ==
				    (SDN_TCPF_SYN | SDN_TCPF_ACK) &&
			    responder && e->tcp == SDN_TCP_SYN_SENT)
				e->tcp = SDN_TCP_ESTABLISHED;
			if (f->tcp & SDN_TCPF_FIN) {
				e->flags |= from_b ? SDN_PCT_F_FIN_B :
						     SDN_PCT_F_FIN_A;
				e->tcp = (e->flags & SDN_PCT_F_FIN_A) &&
						 (e->flags & SDN_PCT_F_FIN_B) ?
					 SDN_TCP_CLOSED :
					 SDN_TCP_CLOSING;
			}
		}
		if (e->tcp == SDN_TCP_SYN_SENT)
			life = SDN_CT_TCP_SYN_S;
		else if (e->tcp == SDN_TCP_ESTABLISHED)
			life = SDN_CT_TCP_EST_S;
		else
			life = SDN_CT_TCP_CLOSE_S;
	} else if (sdn_pct_is_icmp(f->proto)) {
		life = SDN_CT_ICMP_S;
	} else if (responder || (e->flags & SDN_PCT_F_REPLIED)) {
		life = SDN_CT_UDP_REPLIED_S;
	} else {
		life = SDN_CT_UDP_S;
	}
	if (responder)
		e->flags |= SDN_PCT_F_REPLIED;
	e->expires = now + life * SDN_PCT_NS;
	return SDN_PCT_PASS;
}

/* The flow turned around: the re-check runs in the flow's first direction.
 * An ICMP flow is re-checked as the echo request that opens one. Swapped
 * word by word, in registers: the caller's stack has no room to spare.
 */
static __always_inline void sdn_flow_reverse(struct sdn_flow *f)
{
	__u64 g = f->src_groups;
	__u32 n = f->src_net;
	__be16 port = f->sport;

#pragma unroll
	for (int i = 0; i < 4; i++) {
		__be32 w = f->src.w[i];

		f->src.w[i] = f->dst.w[i];
		f->dst.w[i] = w;
	}
	f->src_groups = f->dst_groups;
	f->dst_groups = g;
	f->src_net = f->dst_net;
	f->dst_net = n;
	f->sport = f->dport;
	f->dport = port;
	if (sdn_pct_is_icmp(f->proto))
		f->rport = bpf_htons((f->family == 6 ? ICMPV6_ECHO_REQUEST :
						      ICMP_ECHO) << 8);
	else
		f->rport = f->dport;
}

/* ICMP errors: v4 unreachable, source quench, redirect, time exceeded,
 * parameter problem; v6 unreachable, too big, time exceeded, parameter
 * problem.
 */
static __always_inline int sdn_pct_icmp_error(const struct sdn_pkt *p)
{
	if (p->proto == IPPROTO_ICMP)
		return p->icmp_type == 3 || p->icmp_type == 4 ||
		       p->icmp_type == 5 || p->icmp_type == 11 ||
		       p->icmp_type == 12;
	if (p->proto == IPPROTO_ICMPV6)
		return p->icmp_type >= 1 && p->icmp_type <= 4;
	return 0;
}

/* The quote of an ICMP error p: the flow it is about, as that flow's packet
 * travelled (from the error's destination). Read field by field into f: the
 * caller's stack has no room for a header. 0, or DROP_INVALID.
 */
static __always_inline int sdn_flow_quote(struct __sk_buff *skb,
					  const struct sdn_pkt *p,
					  struct sdn_flow *f)
{
	__u32 off = p->l4_off + 8, l4;

	if (p->family == 4) {
		if (bpf_skb_load_bytes(skb, off, f->hdr, 1) < 0 ||
		    (f->hdr[0] & 0xf) < 5)
			return DROP_INVALID;
		l4 = off + (f->hdr[0] & 0xf) * 4;
		sdn_addr_from_v4(&f->src, 0);
		sdn_addr_from_v4(&f->dst, 0);
		if (bpf_skb_load_bytes(skb, off + 9, &f->proto, 1) < 0 ||
		    bpf_skb_load_bytes(skb, off + 12, &f->src.w[3], 4) < 0 ||
		    bpf_skb_load_bytes(skb, off + 16, &f->dst.w[3], 4) < 0)
			return DROP_INVALID;
	} else {
		l4 = off + 40;
		if (bpf_skb_load_bytes(skb, off + 6, &f->proto, 1) < 0 ||
		    bpf_skb_load_bytes(skb, off + 8, f->src.b, 16) < 0 ||
		    bpf_skb_load_bytes(skb, off + 24, f->dst.b, 16) < 0)
			return DROP_INVALID;
	}
	/* Ports; an echo's identifier sits where the ports' second half does. */
	if (sdn_pct_is_icmp(f->proto)) {
		if (bpf_skb_load_bytes(skb, (l4 + 4) & 0xffff, &f->sport, 2) < 0)
			return DROP_INVALID;
		f->dport = f->sport;
	} else {
		if (bpf_skb_load_bytes(skb, l4 & 0xffff, &f->sport, 2) < 0 ||
		    bpf_skb_load_bytes(skb, (l4 + 2) & 0xffff, &f->dport, 2) < 0)
			return DROP_INVALID;
	}
	f->icmp_err = 1;
	return 0;
}

/* Fills f from the parsed packet p, between the nets src_net and dst_net.
 * 0, or DROP_INVALID.
 */
static __always_inline int sdn_flow_of(struct __sk_buff *skb,
				       const struct sdn_pkt *p, __u32 src_net,
				       __u32 dst_net, struct sdn_flow *f)
{
	__builtin_memset(f, 0, sizeof(*f));
	f->family = p->family;
	f->src_net = src_net;
	f->dst_net = dst_net;
	if (sdn_pct_icmp_error(p)) {
		/* The quoted packet went the other way: its source is
		 * this error's destination.
		 */
		f->src_net = dst_net;
		f->dst_net = src_net;
		return sdn_flow_quote(skb, p, f);
	}
	f->src = p->src;
	f->dst = p->dst;
	f->proto = p->proto;
	f->sport = p->sport;
	f->dport = p->dport;
	f->rport = p->dport;
	if (p->proto == IPPROTO_TCP) {
		if (bpf_skb_load_bytes(skb, p->l4_off + 13, &f->tcp, 1) < 0)
			return DROP_INVALID;
	} else if (p->proto == IPPROTO_SCTP) {
		/* parse.h reads no SCTP ports; they sit where UDP's do. */
		if (bpf_skb_load_bytes(skb, p->l4_off, &f->sport, 2) < 0 ||
		    bpf_skb_load_bytes(skb, p->l4_off + 2, &f->dport, 2) < 0)
			return DROP_INVALID;
		f->rport = f->dport;
	} else if (sdn_pct_is_icmp(p->proto)) {
		/* type << 8 | code in network order: the header's first bytes. */
		if (bpf_skb_load_bytes(skb, p->l4_off, &f->rport, 2) < 0)
			return DROP_INVALID;
	}
	return 0;
}
