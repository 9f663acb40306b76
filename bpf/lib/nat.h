/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv4 address/port rewrites with incremental checksum updates. Port and
 * checksum offsets serve both families; IPv6 addresses are in lib/nat6.h.
 */
#pragma once

#include "common.h"
#include "parse.h"

/* Offset of the L4 checksum, or -1 for protocols we do not rewrite. */
static __always_inline int sdn_l4_csum_off(const struct sdn_pkt *p,
					   __u64 *flags)
{
	switch (p->proto) {
	case IPPROTO_TCP:
		*flags = 0;
		return p->l4_off + 16;
	case IPPROTO_UDP:
		/* A zero UDP checksum means "none" and must stay zero. */
		*flags = BPF_F_MARK_MANGLED_0;
		return p->l4_off + 6;
	case IPPROTO_ICMP:
	case IPPROTO_ICMPV6:
		*flags = 0;
		return p->l4_off + 2;
	}
	return -1;
}

/* Offset of the source (is_src) or destination port; ICMP echo has a single
 * identifier that plays both roles.
 */
static __always_inline int sdn_l4_port_off(const struct sdn_pkt *p, int is_src)
{
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6)
		return p->l4_off + 4;
	return p->l4_off + (is_src ? 0 : 2);
}

static __always_inline int sdn_nat4_addr(struct __sk_buff *skb,
					 const struct sdn_pkt *p, int is_src,
					 __be32 from, __be32 to)
{
	int off = is_src ? SDN_OFF_IP4_SRC : SDN_OFF_IP4_DST;
	__u64 flags;
	int csum;

	if (from == to)
		return 0;
	csum = sdn_l4_csum_off(p, &flags);
	if (csum < 0)
		return -1;
	/* ICMPv4 has no pseudo-header: only the IP checksum covers addresses. */
	if (p->proto != IPPROTO_ICMP &&
	    bpf_l4_csum_replace(skb, csum, from, to,
				flags | BPF_F_PSEUDO_HDR | sizeof(to)) < 0)
		return -1;
	if (bpf_l3_csum_replace(skb, SDN_OFF_IP4_CSUM, from, to, sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0);
}

static __always_inline int sdn_nat4_port(struct __sk_buff *skb,
					 const struct sdn_pkt *p, int is_src,
					 __be16 from, __be16 to)
{
	__u64 flags;
	int csum;

	if (from == to)
		return 0;
	csum = sdn_l4_csum_off(p, &flags);
	if (csum < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, csum, from, to, flags | sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, sdn_l4_port_off(p, is_src), &to,
				   sizeof(to), 0);
}
