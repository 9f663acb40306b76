/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The stateful SNAT engine of the north-south doors: net-0 masquerade and the
 * VPC gateway (lib/egress.h decides who is NATed to what; this file keeps the
 * flows). Both families, addresses 128 bits as everywhere.
 *
 * A flow has two halves. sdn_snat_fwd is keyed by the flow as it leaves the
 * pod ({net, pod, peer, ports, proto}: the net keeps overlapping tenants
 * apart) and names its NAT address and port. sdn_snat_rev is keyed by the
 * reply as it arrives from outside ({nat, peer, ports, proto}) and names the
 * pod. The reverse half is inserted with BPF_NOEXIST, so a NAT port is never
 * shared by two flows towards the same peer address and port: that is the
 * whole collision rule, and why one port serves many peers.
 *
 * Ports come from a range the caller gives (a dedicated masquerade range, or
 * this node's gateway shard), probed at random. Both halves are LRU maps, so
 * a full table evicts the least recently used flows; besides, a reverse entry
 * may be taken over by a new flow once its flow is over (sdn_snat_takeable:
 * a TCP connection closed by RST or by both FINs and the last ACK at once,
 * other flows after SDN_SNAT_TTL_* idle); its forward half is removed with
 * it, so the old flow cannot keep using the port. A takeover happens under a
 * claim (sdn_snat_take), so two CPUs never hand one port to two flows. A new
 * flow that finds no port is dropped and counted (DROP_SNAT_FULL); a TCP
 * packet other than a SYN never opens a flow (DROP_SNAT_TCP_NO_FLOW).
 *
 * TCP and UDP by port, ICMP and ICMPv6 echo by identifier. ICMP and ICMPv6
 * errors about a NATed flow (fragmentation needed / packet too big, time
 * exceeded, unreachable, parameter problem) are translated back to the pod,
 * their quote included (lib/icmp_err.h); the errors a pod sends about a
 * reply it got through the NAT leave translated the same way, outwards
 * (sdn_snat_err_out). IPv4 fragments follow their first fragment
 * (lib/frag.h).
 */
#pragma once

#include "common.h"
#include "frag.h"
#include "icmp_err.h"
#include "nat.h"
#include "nat6.h"
#include "parse.h"
#include "xlat.h"

/* "Not mine, carry on": returned by the door functions besides a tc verdict
 * or a DROP_* reason (negative). No tc action has this value.
 */
#define SDN_SNAT_PASS		0x100
/* sdn_snat_in: a reply the caller must translate to IPv6 (sdn_snat_in64). */
#define SDN_SNAT_XLAT		0x101

#define SDN_SNAT_TRIES		16
/* Idle seconds (units of 2^30 ns) after which a flow's port may be reused:
 * an established TCP connection, one with both FINs but no last ACK seen (a
 * lost ACK, or the NAT saw only part of the close), and everything else (UDP,
 * echo, a TCP SYN never answered). A closed TCP connection (RST, or the last
 * ACK after both FINs) has none: see sdn_snat_takeable.
 */
#define SDN_SNAT_TTL_TCP	3600
#define SDN_SNAT_TTL_FIN	2
#define SDN_SNAT_TTL_OTHER	120

/* TCP header flag bits (byte 13), as lib/pct.h names them. */
#ifndef SDN_TCPF_FIN
#define SDN_TCPF_FIN		0x01
#define SDN_TCPF_SYN		0x02
#define SDN_TCPF_RST		0x04
#define SDN_TCPF_ACK		0x10
#endif

/* The NAT paths are BPF-to-BPF calls, not inlined: each has its own stack
 * frame, which keeps every program's frame within the 512 bytes.
 */
#ifndef __sdn_noinline
#define __sdn_noinline		__attribute__((noinline, unused))
#endif

#define SDN_AF_INET		2
#define SDN_AF_INET6		10

static __always_inline struct sdn_snat_conf *sdn_snat_conf_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&sdn_snat_conf, &zero);
}

static __always_inline __u32 sdn_snat_now(void)
{
	return bpf_ktime_get_ns() >> 30;
}

/* p's TCP flags (SDN_TCPF_*); 0 for anything else or an unreadable header. */
static __always_inline __u8 sdn_snat_tcp_flags(struct __sk_buff *skb,
					       const struct sdn_pkt *p)
{
	__u8 f = 0;

	if (p->proto != IPPROTO_TCP || p->frag == SDN_FRAG_LATER ||
	    bpf_skb_load_bytes(skb, p->l4_off + 13, &f, sizeof(f)) < 0)
		return 0;
	return f;
}

/* A lone SYN: the only TCP packet that may open a flow. */
static __always_inline int sdn_snat_is_syn(__u8 tcp)
{
	return (tcp & (SDN_TCPF_SYN | SDN_TCPF_ACK | SDN_TCPF_RST)) ==
	       SDN_TCPF_SYN;
}

/* Counts event e (SDN_SNAT_S_*) in cur->state if s (as read) has not seen it:
 * an atomic add, since the other direction may be counting another event on
 * another CPU. Two CPUs counting the same event at once count 2, which still
 * reads as seen; a byte would need 256 to overflow into the next.
 */
static __always_inline void sdn_snat_mark(struct sdn_snat_rev *cur, __u32 s,
					  __u32 e)
{
	if (!SDN_SNAT_S_SEEN(s, e))
		__sync_fetch_and_add(&cur->state, e);
}

/* A TCP packet of the flow cur crossed the NAT, outwards (out) or back. */
static __always_inline void sdn_snat_track(struct sdn_snat_rev *cur, __u8 tcp,
					   int out)
{
	__u32 s = *(volatile __u32 *)&cur->state;

	if (!out)
		sdn_snat_mark(cur, s, SDN_SNAT_S_REPLIED);
	if (tcp & SDN_TCPF_RST)
		sdn_snat_mark(cur, s, SDN_SNAT_S_CLOSED);
	else if (tcp & SDN_TCPF_FIN)
		sdn_snat_mark(cur, s,
			      out ? SDN_SNAT_S_FIN_OUT : SDN_SNAT_S_FIN_IN);
	else if (SDN_SNAT_S_SEEN(s, SDN_SNAT_S_FIN_OUT) &&
		 SDN_SNAT_S_SEEN(s, SDN_SNAT_S_FIN_IN) && (tcp & SDN_TCPF_ACK))
		/* The ACK of the second FIN: the close is complete. Its FIN
		 * was counted before the packet was delivered, so before the
		 * ACK could be sent.
		 */
		sdn_snat_mark(cur, s, SDN_SNAT_S_CLOSED);
}

/*
 * Whether the flow of the reverse entry old (protocol proto) is over, now:
 * its port may go to a new flow towards the same peer address and port.
 *
 * A closed TCP connection has no hold at all. It is closed by an RST (no
 * packet of it is answered after one) or by the ACK that follows the second
 * FIN, i.e. the last packet of the closing handshake has already crossed the
 * NAT, so nothing of the old connection is still to come but retransmissions
 * of a lost last ACK. What is left is the peer's own state for the tuple: if
 * it closed first it sits in TIME_WAIT, and a TIME_WAIT socket accepts a new
 * SYN whose timestamp is newer (RFC 6191; Linux does, the pod's timestamps
 * being monotonic per {pod, peer}) or whose sequence lies beyond the old
 * connection's, exactly what it does for the kernel's own port reuse and for
 * iptables MASQUERADE, which keeps the pod's port. A hold of a few seconds
 * would buy nothing against TIME_WAIT (60 s) and would cap the new
 * connections per second to one peer port at span / hold. Both FINs without
 * the last ACK wait SDN_SNAT_TTL_FIN, which the lost ACK's retransmission
 * needs.
 */
static __always_inline int sdn_snat_takeable(const struct sdn_snat_rev *old,
					     __u32 now, __u8 proto)
{
	__u32 idle = now - old->seen;
	__u32 s = old->state;

	if (proto != IPPROTO_TCP)
		return idle > SDN_SNAT_TTL_OTHER;
	if (SDN_SNAT_S_SEEN(s, SDN_SNAT_S_CLOSED))
		return 1;
	if (SDN_SNAT_S_SEEN(s, SDN_SNAT_S_FIN_OUT) &&
	    SDN_SNAT_S_SEEN(s, SDN_SNAT_S_FIN_IN))
		return idle > SDN_SNAT_TTL_FIN;
	if (!SDN_SNAT_S_SEEN(s, SDN_SNAT_S_REPLIED))
		return idle > SDN_SNAT_TTL_OTHER;
	return idle > SDN_SNAT_TTL_TCP;
}

/*
 * Takes the reverse entry w->rk (nat_port set) over for the flow w->rv, if
 * its flow is over. Two CPUs could both see the old entry takeable and both
 * overwrite it, leaving one flow with a port the reverse map gives to the
 * other: so the takeover is done only by the CPU that inserted the claim key
 * (w->rk with pad[0] SDN_SNAT_CLAIM; BPF_NOEXIST is atomic), which looks
 * again under it. The old flow's forward half goes, if it still names this
 * port. Returns 0 when the entry is now w->rv's.
 */
static __always_inline int sdn_snat_take(struct sdn_snat_work *w)
{
	struct sdn_snat_rev *old;
	struct sdn_snat_fwd *of;
	int ret = -1;

	w->rk.pad[0] = SDN_SNAT_CLAIM;
	if (bpf_map_update_elem(&sdn_snat_rev, &w->rk, &w->rv, BPF_NOEXIST)) {
		w->rk.pad[0] = 0;
		return -1;
	}
	w->rk.pad[0] = 0;
	old = bpf_map_lookup_elem(&sdn_snat_rev, &w->rk);
	if (old && sdn_snat_takeable(old, w->rv.seen, w->rk.proto)) {
		w->old.net = old->net;
		w->old.src = old->pod;
		w->old.dst = w->rk.peer;
		w->old.sport = old->pod_port;
		w->old.dport = w->rk.peer_port;
		w->old.proto = w->rk.proto;
		of = bpf_map_lookup_elem(&sdn_snat_fwd, &w->old);
		if (of && of->nat_port == w->rk.nat_port &&
		    sdn_addr_eq(&of->nat, &w->rk.nat))
			bpf_map_delete_elem(&sdn_snat_fwd, &w->old);
		ret = bpf_map_update_elem(&sdn_snat_rev, &w->rk, &w->rv, BPF_ANY);
	}
	w->rk.pad[0] = SDN_SNAT_CLAIM;
	bpf_map_delete_elem(&sdn_snat_rev, &w->rk);
	w->rk.pad[0] = 0;
	return ret ? -1 : 0;
}

/* The flow's ports as it leaves the pod; DROP_SNAT_UNSUPPORTED if the engine
 * cannot translate it (other protocols, ICMP other than an echo request).
 */
static __always_inline int sdn_snat_out_ports(const struct sdn_pkt *p,
					      __be16 *sport, __be16 *dport)
{
	switch (p->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		*sport = p->sport;
		*dport = p->dport;
		return 0;
	case IPPROTO_ICMP:
		if (p->family != 4 || p->icmp_type != ICMP_ECHO)
			return DROP_SNAT_UNSUPPORTED;
		*sport = p->sport;
		*dport = 0;
		return 0;
	case IPPROTO_ICMPV6:
		if (p->family != 6 || p->icmp_type != ICMPV6_ECHO_REQUEST)
			return DROP_SNAT_UNSUPPORTED;
		*sport = p->sport;
		*dport = 0;
		return 0;
	}
	return DROP_SNAT_UNSUPPORTED;
}

/* A free NAT port in [min, min + span) for the reverse key w->rk (nat, peer,
 * peer_port, proto set): on success w->rk.nat_port is it and w->rv is
 * inserted.
 */
static __sdn_noinline int sdn_snat_alloc(struct sdn_snat_work *w, __u32 min,
					 __u32 span)
{
	__u32 start = bpf_get_prandom_u32();

	if (!span)
		return DROP_SNAT_FULL;
	/* A span of at most SDN_SNAT_TRIES ports is walked whole, from a random
	 * start: a free port is always found. A wider one is probed at random:
	 * with closed connections' ports free at once, live flows are what
	 * fills a span, and they sit at random ports, whose runs a linear probe
	 * would walk instead (primary clustering).
	 */
#pragma unroll
	for (int i = 0; i < SDN_SNAT_TRIES; i++) {
		struct sdn_snat_rev *old;
		__u32 off;

		if (span <= SDN_SNAT_TRIES)
			off = (start + i) % span;
		else
			off = bpf_get_prandom_u32() % span;
		w->rk.nat_port = bpf_htons((__u16)(min + off));
		if (!bpf_map_update_elem(&sdn_snat_rev, &w->rk, &w->rv, BPF_NOEXIST))
			return 0;
		old = bpf_map_lookup_elem(&sdn_snat_rev, &w->rk);
		if (!old || !sdn_snat_takeable(old, w->rv.seen, w->rk.proto))
			continue;
		if (!sdn_snat_take(w))
			return 0;
	}
	return DROP_SNAT_FULL;
}

/*
 * Translates p, leaving a pod of net, to the source nat with a port from
 * [min, min + span) (range: min << 32 | span). On success p holds the new source and port; a first
 * fragment's outcome is noted for the later ones. Returns 0 or a DROP_*.
 */
static __sdn_noinline int sdn_snat_out(struct __sk_buff *skb,
				       struct sdn_pkt *p, __u32 net,
				       const struct sdn_addr *nat, __u64 range)
{
	__u32 min = range >> 32, span = (__u32)range;
	struct sdn_snat_work *w;
	struct sdn_snat_fwd *hit;
	__be16 sport, dport, nat_port;
	__u32 zero = 0;
	int ret, have = 0;
	__u8 tcp;

	ret = sdn_snat_out_ports(p, &sport, &dport);
	if (ret)
		return ret;
	tcp = sdn_snat_tcp_flags(skb, p);
	w = bpf_map_lookup_elem(&sdn_snat_work, &zero);
	if (!w)
		return DROP_SNAT_FULL;
	__builtin_memset(w, 0, sizeof(*w));
	w->fk.net = net;
	w->fk.src = p->src;
	w->fk.dst = p->dst;
	w->fk.sport = sport;
	w->fk.dport = dport;
	w->fk.proto = p->proto;
	w->rk.nat = *nat;
	w->rk.peer = p->dst;
	w->rk.peer_port = dport;
	w->rk.proto = p->proto;
	w->rv.net = net;
	w->rv.pod = p->src;
	w->rv.pod_port = sport;
	w->rv.seen = sdn_snat_now();

	hit = bpf_map_lookup_elem(&sdn_snat_fwd, &w->fk);
	if (hit && sdn_addr_eq(&hit->nat, nat)) {
		struct sdn_snat_rev *cur;

		w->fv = *hit;
		w->rk.nat_port = w->fv.nat_port;
		cur = bpf_map_lookup_elem(&sdn_snat_rev, &w->rk);
		if (cur && cur->net == net && cur->pod_port == sport &&
		    sdn_addr_eq(&cur->pod, &p->src)) {
			if (!sdn_snat_is_syn(tcp) ||
			    !SDN_SNAT_S_SEEN(cur->state, SDN_SNAT_S_CLOSED)) {
				if (cur->seen != w->rv.seen)
					cur->seen = w->rv.seen;
				if (p->proto == IPPROTO_TCP)
					sdn_snat_track(cur, tcp, 1);
				have = 1;
			} else if (!sdn_snat_take(w)) {
				/* A new connection of the same 5-tuple on a
				 * closed one: it reopens on the same port.
				 */
				have = 2;
			}
		} else if (!cur && !bpf_map_update_elem(&sdn_snat_rev, &w->rk,
							&w->rv, BPF_NOEXIST)) {
			/* The LRU had evicted only the reverse half. */
			have = 1;
		}
	}
	if (!have) {
		/* Only a SYN opens a TCP flow: an ACK, FIN or RST without one
		 * is of a connection the NAT no longer (or never) knew, and
		 * a new port would only show the peer a stranger.
		 */
		if (p->proto == IPPROTO_TCP && !sdn_snat_is_syn(tcp))
			return DROP_SNAT_TCP_NO_FLOW;
		ret = sdn_snat_alloc(w, min, span);
		if (ret)
			return ret;
		have = 2;
	}
	if (have == 2) {
		w->fv.nat = *nat;
		w->fv.nat_port = w->rk.nat_port;
		if (bpf_map_update_elem(&sdn_snat_fwd, &w->fk, &w->fv, BPF_ANY)) {
			bpf_map_delete_elem(&sdn_snat_rev, &w->rk);
			return DROP_SNAT_FULL;
		}
	}
	nat_port = w->fv.nat_port;

	sdn_frag_key(&w->frk, p, net);
	if (p->family == 4) {
		if (sdn_nat4_addr(skb, p, 1, p->src.w[3], nat->w[3]) ||
		    sdn_nat4_port(skb, p, 1, sport, nat_port))
			return DROP_REWRITE;
	} else if (sdn_nat6_addr(skb, p, 1, &p->src, nat) ||
		   sdn_nat4_port(skb, p, 1, sport, nat_port)) {
		return DROP_REWRITE;
	}
	p->src = *nat;
	p->sport = nat_port;
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6)
		p->dport = nat_port;
	if (p->frag) {
		/* sdn_frag_note, with the value in the scratch space. */
		w->frag.src = p->src;
		w->frag.dst = p->dst;
		w->frag.sport = p->sport;
		w->frag.dport = p->dport;
		bpf_map_update_elem(&sdn_frags, &w->frk, &w->frag, BPF_ANY);
	}
	return 0;
}

/*
 * An ICMP(v6) error p that a pod of net sends about a packet it got through
 * the NAT address nat: a reply of one of its NATed flows, un-NATed on the way
 * in, so the quote is peer:peer_port -> pod:pod_port (an echo reply: the
 * pod's id). The quote becomes what the peer sent, peer:peer_port ->
 * nat:nat_port, and the error leaves from nat, so the peer finds its socket
 * by it. Returns 0 (p->src is nat), SDN_SNAT_PASS when the error is about no
 * flow NATed to nat, or a DROP_*.
 */
static __sdn_noinline int sdn_snat_err_out(struct __sk_buff *skb,
					    struct sdn_pkt *p, __u32 net,
					    const struct sdn_addr *nat)
{
	struct sdn_icmp_quote q = {};
	struct sdn_snat_work *w;
	struct sdn_snat_fwd *fv;
	__u32 zero = 0;

	if (sdn_icmp_quote(skb, p, &q))
		return SDN_SNAT_PASS;
	/* From the peer the error goes to, to the pod; the only ICMP a NATed
	 * flow brings in is an echo reply.
	 */
	if (!sdn_addr_eq(&q.dst, &p->src) || !sdn_addr_eq(&q.src, &p->dst) ||
	    sdn_icmp_quote_not_echo(&q, 1))
		return SDN_SNAT_PASS;
	w = bpf_map_lookup_elem(&sdn_snat_work, &zero);
	if (!w)
		return SDN_SNAT_PASS;
	__builtin_memset(&w->fk, 0, sizeof(w->fk));
	w->fk.net = net;
	w->fk.src = p->src;
	w->fk.dst = p->dst;
	w->fk.sport = q.dport;
	w->fk.dport = sdn_icmp_quote_is_icmp(&q) ? 0 : q.sport;
	w->fk.proto = q.proto;
	fv = bpf_map_lookup_elem(&sdn_snat_fwd, &w->fk);
	if (!fv || !sdn_addr_eq(&fv->nat, nat))
		return SDN_SNAT_PASS;
	w->fv = *fv;
	if (sdn_icmp_quote_addr(skb, p, &q, 0, &w->fv.nat) ||
	    sdn_icmp_quote_port(skb, p, &q, 0, w->fv.nat_port) ||
	    sdn_icmp_outer_addr(skb, p, 1, &p->src, &w->fv.nat))
		return DROP_REWRITE;
	p->src = w->fv.nat;
	return 0;
}

/*
 * Sends a NATed packet out of the uplink: the host's FIB picks the next hop
 * (restricted to the uplink), the MACs are set from its neighbour entry, or
 * bpf_redirect_neigh resolves it. Not through the host stack: a packet whose
 * source is now a local address (masquerade) would be dropped there as a
 * martian, and netfilter has no business with it.
 */
static __sdn_noinline int sdn_snat_send(struct __sk_buff *skb,
					 const struct sdn_pkt *p,
					 const struct sdn_snat_conf *c)
{
	struct bpf_fib_lookup fib = {};
	struct bpf_redir_neigh nh = {};
	int rc;

	if (!c->uplink_ifindex)
		return DROP_SNAT_NO_ROUTE;
	fib.ifindex = c->uplink_ifindex;
	fib.l4_protocol = p->proto;
	if (p->family == 4) {
		fib.family = SDN_AF_INET;
		fib.ipv4_src = p->src.w[3];
		fib.ipv4_dst = p->dst.w[3];
	} else {
		fib.family = SDN_AF_INET6;
		__builtin_memcpy(fib.ipv6_src, p->src.b, 16);
		__builtin_memcpy(fib.ipv6_dst, p->dst.b, 16);
	}
	rc = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_OUTPUT);
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		if (sdn_set_macs(skb, fib.dmac, fib.smac) < 0)
			return DROP_REWRITE;
		skb->mark = 0;
		return bpf_redirect(fib.ifindex, 0);
	}
	if (rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return DROP_SNAT_NO_ROUTE;
	nh.nh_family = fib.family;
	if (p->family == 4)
		nh.ipv4_nh = fib.ipv4_dst;
	else
		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
	skb->mark = 0;
	return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
}

/* A reply arriving at a NAT address, as the engine keys it. */
struct sdn_snat_reply {
	struct sdn_snat_rkey rk;
	__u8 is_err;		/* an ICMP(v6) error, keyed by its quote */
};

/* r for the ICMP(v6) error p, keyed by its quote: the packet that left
 * through the NAT address p->dst (an echo request, if ICMP). The error paths
 * are subprograms that read the quote into their own frames (sdn_snat_err_in
 * reads it again): the uplink and overlay programs' frames are near the
 * limit already.
 */
static __sdn_noinline int sdn_snat_err_key(struct __sk_buff *skb,
					    const struct sdn_pkt *p,
					    struct sdn_snat_reply *r)
{
	struct sdn_icmp_quote q = {};

	if (sdn_icmp_quote(skb, p, &q))
		return -1;
	if (!sdn_addr_eq(&q.src, &p->dst) || sdn_icmp_quote_not_echo(&q, 0))
		return -1;
	r->rk.proto = q.proto;
	r->rk.peer = q.dst;
	r->rk.nat_port = q.sport;
	r->rk.peer_port = sdn_icmp_quote_is_icmp(&q) ? 0 : q.dport;
	r->is_err = 1;
	return 0;
}

/* Fills r for p (to the NAT address p->dst); -1 if p cannot be the reply
 * of a NATed flow (or an error about one).
 */
static __always_inline int sdn_snat_reply_key(struct __sk_buff *skb,
					      const struct sdn_pkt *p,
					      struct sdn_snat_reply *r)
{
	r->rk.nat = p->dst;
	r->rk.proto = p->proto;
	if (sdn_icmp_is_error(p))
		return sdn_snat_err_key(skb, p, r);
	if (p->frag == SDN_FRAG_LATER)
		return -1;
	r->rk.peer = p->src;
	switch (p->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		r->rk.nat_port = p->dport;
		r->rk.peer_port = p->sport;
		return 0;
	case IPPROTO_ICMP:
		if (p->family != 4 || p->icmp_type != ICMP_ECHOREPLY)
			return -1;
		break;
	case IPPROTO_ICMPV6:
		if (p->family != 6 || p->icmp_type != ICMPV6_ECHO_REPLY)
			return -1;
		break;
	default:
		return -1;
	}
	r->rk.nat_port = p->sport;
	r->rk.peer_port = 0;
	return 0;
}

/* The pod's side of the flow r->rk names, marked as seen now; NULL if none. */
static __always_inline struct sdn_snat_rev *
sdn_snat_rev_touch(const struct sdn_snat_reply *r)
{
	struct sdn_snat_rev *cur = bpf_map_lookup_elem(&sdn_snat_rev, &r->rk);
	__u32 now = sdn_snat_now();

	if (cur && cur->seen != now)
		cur->seen = now;
	return cur;
}

/*
 * Un-NATs the reply r (not an error) on the node that owns its flow: the
 * destination becomes the pod's. On success p->dst is the pod and *net its
 * net. Returns 0, SDN_SNAT_XLAT (the gateway's NAT64 reply to a v6-only pod:
 * the caller translates, sdn_snat_in64), or DROP_SNAT_NO_CT / DROP_REWRITE.
 */
static __sdn_noinline int sdn_snat_in(struct __sk_buff *skb,
				       struct sdn_pkt *p,
				       struct sdn_snat_reply *r, __u32 *net)
{
	struct sdn_frag_key frk = {};
	struct sdn_snat_rev *cur;
	struct sdn_snat_rev rv;

	cur = sdn_snat_rev_touch(r);
	if (!cur)
		return DROP_SNAT_NO_CT;
	if (p->proto == IPPROTO_TCP)
		sdn_snat_track(cur, sdn_snat_tcp_flags(skb, p), 0);
	rv = *cur;
	*net = rv.net;
	sdn_frag_key(&frk, p, rv.net);
	if (p->family == 4 && !sdn_addr_is_v4(&rv.pod)) {
		/* The gateway's NAT64 (lib/egress.h): the caller translates
		 * (sdn_snat_in64), outside this frame.
		 */
		p->dst = rv.pod;
		p->dport = rv.pod_port;
		return SDN_SNAT_XLAT;
	}
	if (p->family == 4) {
		if (sdn_nat4_addr(skb, p, 0, p->dst.w[3], rv.pod.w[3]) ||
		    sdn_nat4_port(skb, p, 0, r->rk.nat_port, rv.pod_port))
			return DROP_REWRITE;
	} else if (sdn_nat6_addr(skb, p, 0, &p->dst, &rv.pod) ||
		   sdn_nat4_port(skb, p, 0, r->rk.nat_port, rv.pod_port)) {
		return DROP_REWRITE;
	}
	p->dst = rv.pod;
	p->dport = rv.pod_port;
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6)
		p->sport = rv.pod_port;
	if (p->frag)
		sdn_frag_note(&frk, p);
	return 0;
}

/*
 * After sdn_snat_in returned SDN_SNAT_XLAT: the IPv4 reply to a v6-only pod
 * becomes IPv6 from the peer's 64:ff9b:: form (which p->src already is) to
 * the pod (p->dst, p->dport: sdn_snat_in put them there). Inlined into the
 * program's frame: the translation's subprogram must not sit under
 * sdn_snat_in's on the overlay program's 312-byte frame (624 > 512).
 */
static __always_inline int sdn_snat_in64(struct __sk_buff *skb,
					 struct sdn_pkt *p, __be16 nat_port)
{
	struct sdn_addr pod = p->dst;
	__be16 pod_port = p->dport;
	int ret = sdn_xlat_4to6(skb, p, &p->src, &pod);

	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 0, nat_port, pod_port))
		return DROP_REWRITE;
	p->dport = pod_port;
	if (p->proto == IPPROTO_ICMPV6)
		p->sport = pod_port;
	return 0;
}

/*
 * sdn_snat_in for the ICMP(v6) error r (sdn_snat_err_key): the destination
 * and, in the quote, the source address and port (echo id) become the pod's,
 * so the quote is the packet the pod sent.
 */
static __sdn_noinline int sdn_snat_err_in(struct __sk_buff *skb,
					   struct sdn_pkt *p,
					   struct sdn_snat_reply *r, __u32 *net)
{
	struct sdn_icmp_quote q = {};
	struct sdn_snat_rev *cur;
	struct sdn_snat_rev rv;

	cur = sdn_snat_rev_touch(r);
	if (!cur)
		return DROP_SNAT_NO_CT;
	rv = *cur;
	*net = rv.net;
	if (sdn_addr_is_v4(&rv.pod) != (p->family == 4) ||
	    sdn_icmp_quote(skb, p, &q))
		return DROP_SNAT_NO_CT;
	if (sdn_icmp_quote_addr(skb, p, &q, 1, &rv.pod) ||
	    sdn_icmp_quote_port(skb, p, &q, 1, rv.pod_port) ||
	    sdn_icmp_outer_addr(skb, p, 0, &p->dst, &rv.pod))
		return DROP_REWRITE;
	p->dst = rv.pod;
	return 0;
}
