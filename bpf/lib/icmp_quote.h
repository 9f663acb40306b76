/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The quote of an ICMP or ICMPv6 error, and rewrites inside it, for every
 * translator an error crosses: the fabric bridge (lib/icmp_err.h), the SNAT
 * engine (lib/snat.h) and Floating IPs (lib/fip.h). An error quotes the start
 * of the packet it is about (RFC 792: the IP header and 8 bytes more; RFC
 * 4443: as much as fits in 1280 bytes), and the host that receives it finds
 * the socket by that quote, so a translator rewrites the quote the way the
 * quoted packet was rewritten, backwards.
 *
 * Every byte changed in the quote is covered by the error's own checksum (at
 * p->l4_off + 2 in both families) and, for addresses and ports, by the
 * quoted L4 checksum when the quote holds it: the helpers here keep both
 * valid, incrementally. The family specifics (reading the quoted IP header,
 * its addresses) are in lib/icmp_err.h (IPv4) and lib/icmp6_err.h (IPv6).
 */
#pragma once

#include "common.h"
#include "parse.h"

#define SDN_ICMP_HLEN		8	/* type, code, checksum, 4 bytes by type */

/* The packet an ICMP(v6) error quotes. Offsets are from the frame's start. */
struct sdn_icmp_quote {
	__u16 ip_off;
	__u16 l4_off;
	__u16 l4_csum_off;	/* 0: not in the quote, or a UDP datagram without one */
	__u8 proto;
	__u8 icmp_type;		/* a quoted ICMP(v6) message's type */
	__be16 sport;		/* TCP/UDP ports; ICMP(v6) echo: the id in both */
	__be16 dport;
	struct sdn_addr src;	/* IPv4 as 64:ff9b::/96, like every address */
	struct sdn_addr dst;
};

/* The quoted L4 header's first 8 bytes l4 (q->proto and q->l4_off set):
 * ports or the echo id, and where the quoted L4 checksum is. icmp is the
 * quoting family's ICMP; the other family's is no packet of this one.
 */
static __always_inline int sdn_icmp_quote_l4(struct __sk_buff *skb,
					     struct sdn_icmp_quote *q,
					     const __u8 *l4, __u8 icmp)
{
	q->l4_csum_off = 0;
	if (q->proto == IPPROTO_TCP) {
		/* Beyond the 8 bytes a minimal quote holds. */
		if (skb->len >= q->l4_off + 18)
			q->l4_csum_off = q->l4_off + 16;
	} else if (q->proto == IPPROTO_UDP) {
		if (l4[6] || l4[7])
			q->l4_csum_off = q->l4_off + 6;
	} else if (q->proto == icmp) {
		q->icmp_type = l4[0];
		q->l4_csum_off = q->l4_off + 2;
		__builtin_memcpy(&q->sport, &l4[4], 2);
		q->dport = q->sport;
		return 0;
	} else {
		return DROP_UNSUPPORTED_L4;
	}
	__builtin_memcpy(&q->sport, &l4[0], 2);
	__builtin_memcpy(&q->dport, &l4[2], 2);
	return 0;
}

static __always_inline int sdn_icmp_quote_is_icmp(const struct sdn_icmp_quote *q)
{
	return q->proto == IPPROTO_ICMP || q->proto == IPPROTO_ICMPV6;
}

/* Whether the quote is an ICMP(v6) message other than an echo request
 * (reply == 0) or reply (reply == 1): no translated flow carries one.
 */
static __always_inline int sdn_icmp_quote_not_echo(const struct sdn_icmp_quote *q,
						   int reply)
{
	if (q->proto == IPPROTO_ICMP)
		return q->icmp_type != (reply ? ICMP_ECHOREPLY : ICMP_ECHO);
	if (q->proto == IPPROTO_ICMPV6)
		return q->icmp_type !=
		       (reply ? ICMPV6_ECHO_REPLY : ICMPV6_ECHO_REQUEST);
	return 0;
}

/* RFC 1624 (eqn. 3) on 16-bit words as they lie in memory: one's complement
 * sums do not depend on the byte order they are computed in. A difference
 * (diff) is a one's complement sum of ~from and to, as bpf_csum_diff() also
 * returns it.
 */
static __always_inline __u16 sdn_csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

static __always_inline __u16 sdn_csum_apply(__u16 check, __u32 diff)
{
	return sdn_csum_fold((__u16)~check + (diff & 0xffff) + (diff >> 16));
}

static __always_inline __u32 sdn_csum_diff16(__u16 from, __u16 to)
{
	return (__u16)~from + (__u32)to;
}

static __always_inline __u32 sdn_csum_diff32(__u32 from, __u32 to)
{
	return (__u16)~(from >> 16) + (__u16)~(from & 0xffff) + (to >> 16) +
	       (to & 0xffff);
}

/* Store into the quote, keeping the error's checksum (which covers it) valid. */
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

/* The quoted L4 checksum after a change (diff) in what it covers. */
static __always_inline int sdn_icmp_quote_l4_csum(struct __sk_buff *skb,
						  const struct sdn_pkt *p,
						  const struct sdn_icmp_quote *q,
						  __u32 diff)
{
	__u16 c, n;

	if (!q->l4_csum_off)
		return 0;
	if (bpf_skb_load_bytes(skb, q->l4_csum_off, &c, sizeof(c)) < 0)
		return -1;
	n = sdn_csum_apply(c, diff);
	/* In UDP, 0 means "no checksum": a computed 0 is sent as its twin. */
	if (q->proto == IPPROTO_UDP && !n)
		n = 0xffff;
	return sdn_icmp_quote_store16(skb, p, q->l4_csum_off, c, n);
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
	if (sdn_icmp_quote_is_icmp(q))
		off = q->l4_off + 4;
	else
		off = q->l4_off + (is_src ? 0 : 2);
	if (sdn_icmp_quote_l4_csum(skb, p, q, sdn_csum_diff16(from, to)))
		return -1;
	return sdn_icmp_quote_store16(skb, p, off, from, to);
}
