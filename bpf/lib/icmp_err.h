/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP errors about bridged flows (lib/bridge.h). An error quotes the header of
 * the packet it is about, and the host that receives it finds the socket by that
 * quote. The bridge shows the two ends of a flow different addresses (the pod
 * its VPC address and the gateway, the fabric the pod's fabric IP and the
 * client), so an error crossing the bridge is translated twice: its own header
 * like any packet of the flow, and the quoted header the way the quoted packet
 * was translated, which is the opposite direction. Checksums are updated
 * incrementally: the outer IP header's, the quoted IP header's, the quoted L4
 * checksum when the quote contains it, and the ICMP checksum, which covers the
 * quote and so every change made inside it.
 *
 *   sdn_to_pod   (fabric -> pod): an error about a packet the pod sent, e.g. a
 *                router's "fragmentation needed" for the pod's reply to the
 *                client. Outer: R -> fabric becomes gw -> vpc (R, the router or
 *                the client, is never shown to the pod, as no fabric address
 *                is). Quote: fabric:pod_port -> client:client_port becomes
 *                vpc:pod_port -> gw:gw_port, found in sdn_ct_fwd.
 *   sdn_from_pod (pod -> fabric): an error the pod sends about a packet it got
 *                through the bridge, e.g. "port unreachable". Outer: vpc -> gw
 *                becomes fabric -> client. Quote: gw:gw_port -> vpc:pod_port
 *                becomes client:client_port -> fabric:pod_port, from sdn_ct_rev.
 *
 * IPv4 (destination unreachable, time exceeded, parameter problem). ICMPv6
 * errors (packet too big, time exceeded, unreachable) have the same shape: the
 * quote follows an 8-byte ICMPv6 header, the ICMPv6 checksum also covers a
 * pseudo-header, and the quoted IPv6 header has no checksum of its own; they
 * would plug in beside sdn_icmp4_inner() and the two entry points below.
 */
#pragma once

#include "common.h"
#include "nat.h"
#include "parse.h"

#define SDN_ICMP_DEST_UNREACH	3
#define SDN_ICMP_TIME_EXCEEDED	11
#define SDN_ICMP_PARAMETERPROB	12

#define SDN_ICMP_HLEN		8	/* type, code, checksum, 4 bytes by type */

/* The packet an ICMP error quotes. Offsets are from the frame's start. */
struct sdn_icmp_quote {
	__u16 ip_off;
	__u16 l4_off;
	__u16 l4_csum_off;	/* 0: not in the quote, or a UDP datagram without one */
	__u8 proto;
	__u8 icmp_type;		/* a quoted ICMP message's type */
	__be16 sport;		/* TCP/UDP ports; ICMP echo: the id in both */
	__be16 dport;
	__be32 src;
	__be32 dst;
};

static __always_inline int sdn_icmp4_is_error(const struct sdn_pkt *p)
{
	if (p->family != 4 || p->proto != IPPROTO_ICMP)
		return 0;
	return p->icmp_type == SDN_ICMP_DEST_UNREACH ||
	       p->icmp_type == SDN_ICMP_TIME_EXCEEDED ||
	       p->icmp_type == SDN_ICMP_PARAMETERPROB;
}

/* Reads the quote of the ICMPv4 error p. RFC 792 quotes the IP header and at
 * least 8 bytes of what follows: enough for ports and the echo id.
 */
static __always_inline int sdn_icmp4_quote(struct __sk_buff *skb,
					   const struct sdn_pkt *p,
					   struct sdn_icmp_quote *q)
{
	struct iphdr ip;
	__u8 l4[8];

	/* Errors are small; one that arrives fragmented is not translated. */
	if (p->frag)
		return DROP_FRAGMENT;
	q->ip_off = p->l4_off + SDN_ICMP_HLEN;
	if (bpf_skb_load_bytes(skb, q->ip_off, &ip, sizeof(ip)) < 0)
		return DROP_INVALID;
	if (ip.version != 4 || ip.ihl < 5)
		return DROP_INVALID;
	/* A quoted later fragment has no ports to find its flow by. */
	if (ip.frag_off & bpf_htons(SDN_IP_OFFSET))
		return DROP_UNSUPPORTED_L4;
	q->l4_off = q->ip_off + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, q->l4_off, l4, sizeof(l4)) < 0)
		return DROP_INVALID;
	q->proto = ip.protocol;
	q->src = ip.saddr;
	q->dst = ip.daddr;
	q->l4_csum_off = 0;
	switch (q->proto) {
	case IPPROTO_TCP:
		/* Beyond the 8 bytes a minimal quote holds. */
		if (skb->len >= q->l4_off + 18)
			q->l4_csum_off = q->l4_off + 16;
		break;
	case IPPROTO_UDP:
		if (l4[6] || l4[7])
			q->l4_csum_off = q->l4_off + 6;
		break;
	case IPPROTO_ICMP:
		q->icmp_type = l4[0];
		q->l4_csum_off = q->l4_off + 2;
		__builtin_memcpy(&q->sport, &l4[4], 2);
		q->dport = q->sport;
		return 0;
	default:
		return DROP_UNSUPPORTED_L4;
	}
	__builtin_memcpy(&q->sport, &l4[0], 2);
	__builtin_memcpy(&q->dport, &l4[2], 2);
	return 0;
}

/* RFC 1624 (eqn. 3) on 16-bit words as they lie in memory: one's complement
 * sums do not depend on the byte order they are computed in.
 */
static __always_inline __u16 sdn_csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

static __always_inline __u16 sdn_csum_upd16(__u16 check, __u16 from, __u16 to)
{
	return sdn_csum_fold((__u16)~check + (__u16)~from + (__u32)to);
}

static __always_inline __u16 sdn_csum_upd32(__u16 check, __u32 from, __u32 to)
{
	return sdn_csum_fold((__u16)~check + (__u16)~(from >> 16) +
			     (__u16)~(from & 0xffff) + (to >> 16) + (to & 0xffff));
}

/* Store into the quote, keeping the outer ICMP checksum (which covers it) valid. */
static __always_inline int sdn_icmp_quote_store16(struct __sk_buff *skb,
						  const struct sdn_pkt *p,
						  int off, __u16 from, __u16 to)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, p->l4_off + 2, from, to, sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0);
}

static __always_inline int sdn_icmp_quote_store32(struct __sk_buff *skb,
						  const struct sdn_pkt *p,
						  int off, __u32 from, __u32 to)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, p->l4_off + 2, from, to, sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0);
}

/* The quoted L4 checksum after a change of from -> to in what it covers. */
static __always_inline int sdn_icmp_quote_l4_csum(struct __sk_buff *skb,
						  const struct sdn_pkt *p,
						  const struct sdn_icmp_quote *q,
						  __u32 from, __u32 to, int size)
{
	__u16 c, n;

	if (!q->l4_csum_off)
		return 0;
	if (bpf_skb_load_bytes(skb, q->l4_csum_off, &c, sizeof(c)) < 0)
		return -1;
	n = size == 4 ? sdn_csum_upd32(c, from, to) :
			sdn_csum_upd16(c, (__u16)from, (__u16)to);
	/* In UDP, 0 means "no checksum": a computed 0 is sent as its twin. */
	if (q->proto == IPPROTO_UDP && !n)
		n = 0xffff;
	return sdn_icmp_quote_store16(skb, p, q->l4_csum_off, c, n);
}

/* The quoted source (is_src) or destination address becomes to. */
static __always_inline int sdn_icmp_quote_addr(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       const struct sdn_icmp_quote *q,
					       int is_src, __be32 to)
{
	__be32 from = is_src ? q->src : q->dst;
	__u16 c;

	if (from == to)
		return 0;
	if (bpf_skb_load_bytes(skb, q->ip_off + 10, &c, sizeof(c)) < 0)
		return -1;
	if (sdn_icmp_quote_store16(skb, p, q->ip_off + 10, c,
				   sdn_csum_upd32(c, from, to)))
		return -1;
	/* TCP and UDP checksums cover the addresses (pseudo-header); ICMP's not. */
	if (q->proto != IPPROTO_ICMP &&
	    sdn_icmp_quote_l4_csum(skb, p, q, from, to, 4))
		return -1;
	return sdn_icmp_quote_store32(skb, p, q->ip_off + (is_src ? 12 : 16),
				      from, to);
}

/* The quoted source (is_src) or destination port, or the echo id, becomes to. */
static __always_inline int sdn_icmp_quote_port(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       const struct sdn_icmp_quote *q,
					       int is_src, __be16 to)
{
	__be16 from = is_src ? q->sport : q->dport;
	int off;

	if (from == to)
		return 0;
	if (q->proto == IPPROTO_ICMP)
		off = q->l4_off + 4;
	else
		off = q->l4_off + (is_src ? 0 : 2);
	if (sdn_icmp_quote_l4_csum(skb, p, q, from, to, 2))
		return -1;
	return sdn_icmp_quote_store16(skb, p, off, from, to);
}

/*
 * sdn_to_pod: p is an ICMP error to the fabric IP of the bridge b, about a
 * packet the pod sent (fabric -> client, the bridge's reverse rewrite). On
 * success p's addresses are gw -> the pod's VPC address.
 */
static __always_inline int sdn_icmp_err_forward(struct __sk_buff *skb,
						struct sdn_pkt *p,
						const struct sdn_bridge *b)
{
	struct sdn_ct_fwd_key fk = {};
	struct sdn_icmp_quote q = {};
	struct sdn_ct_fwd *fv;
	__be32 gw = CONFIG(gw_ipv4);
	__be32 fabric = p->dst.w[3];
	__be32 vpc = b->vpc_ip.w[3];
	__be16 gw_port;
	int ret;

	ret = sdn_icmp4_quote(skb, p, &q);
	if (ret)
		return ret;
	/* The quoted packet left the pod (its fabric IP); a pod's ICMP that
	 * went out was an echo reply.
	 */
	if (q.src != fabric ||
	    (q.proto == IPPROTO_ICMP && q.icmp_type != ICMP_ECHOREPLY))
		return DROP_BRIDGE_NO_CT;
	sdn_addr_from_v4(&fk.client, q.dst);
	fk.fabric = p->dst;
	fk.client_port = q.dport;
	fk.pod_port = q.proto == IPPROTO_ICMP ? 0 : q.sport;
	fk.proto = q.proto;
	fv = bpf_map_lookup_elem(&sdn_ct_fwd, &fk);
	if (!fv)
		return DROP_BRIDGE_NO_CT;
	gw_port = fv->gw_port;

	if (sdn_icmp_quote_addr(skb, p, &q, 1, vpc) ||
	    sdn_icmp_quote_addr(skb, p, &q, 0, gw) ||
	    sdn_icmp_quote_port(skb, p, &q, 0, gw_port) ||
	    sdn_nat4_addr(skb, p, 0, fabric, vpc) ||
	    sdn_nat4_addr(skb, p, 1, p->src.w[3], gw))
		return DROP_REWRITE;
	p->dst = b->vpc_ip;
	sdn_addr_from_v4(&p->src, gw);
	return 0;
}

/*
 * sdn_from_pod: p is an ICMP error the pod of net sends to the gateway, about a
 * packet it received through the bridge. On success p's addresses are the
 * pod's fabric IP -> the client.
 */
static __always_inline int sdn_icmp_err_reverse(struct __sk_buff *skb,
						struct sdn_pkt *p, __u32 net)
{
	struct sdn_ct_rev_key rk = {};
	struct sdn_icmp_quote q = {};
	struct sdn_ct_rev *rv;
	__be32 vpc = p->src.w[3];
	__be32 gw = p->dst.w[3];
	int ret;

	ret = sdn_icmp4_quote(skb, p, &q);
	if (ret)
		return ret;
	/* The quoted packet came in through the bridge: gw -> the pod; the
	 * bridge lets ICMP in only as echo requests.
	 */
	if (q.dst != vpc || q.src != gw ||
	    (q.proto == IPPROTO_ICMP && q.icmp_type != ICMP_ECHO))
		return DROP_BRIDGE_NO_CT;
	rk.net = net;
	rk.vpc_ip = p->src;
	rk.gw_port = q.sport;
	rk.pod_port = q.proto == IPPROTO_ICMP ? 0 : q.dport;
	rk.proto = q.proto;
	rv = bpf_map_lookup_elem(&sdn_ct_rev, &rk);
	if (!rv)
		return DROP_BRIDGE_NO_CT;
	if (!sdn_addr_is_v4(&rv->fabric) || !sdn_addr_is_v4(&rv->client))
		return DROP_UNSUPPORTED;

	if (sdn_icmp_quote_addr(skb, p, &q, 1, rv->client.w[3]) ||
	    sdn_icmp_quote_addr(skb, p, &q, 0, rv->fabric.w[3]) ||
	    sdn_icmp_quote_port(skb, p, &q, 1, rv->client_port) ||
	    sdn_nat4_addr(skb, p, 1, vpc, rv->fabric.w[3]) ||
	    sdn_nat4_addr(skb, p, 0, gw, rv->client.w[3]))
		return DROP_REWRITE;
	p->src = rv->fabric;
	p->dst = rv->client;
	return 0;
}
