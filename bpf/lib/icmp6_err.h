/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The IPv6 side of ICMP error translation (lib/icmp_quote.h has what both
 * families share, lib/icmp_err.h the IPv4 side and the bridge's entry
 * points). An ICMPv6 error (destination unreachable, packet too big, time
 * exceeded, parameter problem) quotes as much of the offending packet as
 * fits in 1280 bytes after its 8-byte header. Unlike IPv4, the quoted IPv6
 * header has no checksum, and every L4 checksum it may quote (TCP, UDP,
 * ICMPv6) covers a pseudo-header with the addresses, so a quoted address
 * change always reaches the quoted L4 checksum when it is in the quote; the
 * error's own checksum covers its pseudo-header and the whole quote.
 */
#pragma once

#include "common.h"
#include "icmp_quote.h"
#include "parse.h"

#define SDN_ICMP6_DEST_UNREACH	1
#define SDN_ICMP6_PKT_TOOBIG	2
#define SDN_ICMP6_TIME_EXCEED	3
#define SDN_ICMP6_PARAMPROB	4

#define SDN_IP6_HLEN		40

static __always_inline int sdn_icmp6_is_error(const struct sdn_pkt *p)
{
	return p->family == 6 && p->proto == IPPROTO_ICMPV6 &&
	       p->icmp_type >= SDN_ICMP6_DEST_UNREACH &&
	       p->icmp_type <= SDN_ICMP6_PARAMPROB;
}

/* Reads the quote of the ICMPv6 error p. A quoted packet with extension
 * headers (a fragment's included) is not walked: DROP_UNSUPPORTED_L4.
 */
static __always_inline int sdn_icmp6_quote(struct __sk_buff *skb,
					   const struct sdn_pkt *p,
					   struct sdn_icmp_quote *q)
{
	__u8 l4[8];

	q->ip_off = p->l4_off + SDN_ICMP_HLEN;
	q->l4_off = q->ip_off + SDN_IP6_HLEN;
	/* version/class/flow, payload length, next header, hop limit */
	if (bpf_skb_load_bytes(skb, q->ip_off, l4, sizeof(l4)) < 0)
		return DROP_INVALID;
	if ((l4[0] >> 4) != 6)
		return DROP_INVALID;
	q->proto = l4[6];
	if (bpf_skb_load_bytes(skb, q->ip_off + 8, q->src.b, 16) < 0 ||
	    bpf_skb_load_bytes(skb, q->ip_off + 24, q->dst.b, 16) < 0 ||
	    bpf_skb_load_bytes(skb, q->l4_off, l4, sizeof(l4)) < 0)
		return DROP_INVALID;
	return sdn_icmp_quote_l4(skb, q, l4, IPPROTO_ICMPV6);
}

/* The quoted source (is_src) or destination address of the ICMPv6 error p
 * becomes *to.
 */
static __always_inline int sdn_icmp6_quote_addr(struct __sk_buff *skb,
						const struct sdn_pkt *p,
						const struct sdn_icmp_quote *q,
						int is_src,
						const struct sdn_addr *to)
{
	const struct sdn_addr *from = is_src ? &q->src : &q->dst;
	__s64 diff;

	if (sdn_addr_eq(from, to))
		return 0;
	diff = bpf_csum_diff((__be32 *)from->w, sizeof(*from),
			     (__be32 *)to->w, sizeof(*to), 0);
	if (diff < 0)
		return -1;
	if (sdn_icmp_quote_l4_csum(skb, p, q, (__u32)diff))
		return -1;
	/* Size 0: the last argument is a checksum difference. */
	if (bpf_l4_csum_replace(skb, p->l4_off + 2, 0, (__u32)diff, 0) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, q->ip_off + (is_src ? 8 : 24), to->b,
				   sizeof(*to), 0);
}
