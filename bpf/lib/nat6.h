/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv6 address rewrites for the fabric bridge. IPv6 has no header checksum;
 * the L4 checksum (TCP, UDP, ICMPv6: all three cover the pseudo-header) is
 * updated with the 128-bit difference. Port rewrites are family-neutral
 * (sdn_nat4_port in lib/nat.h).
 */
#pragma once

#include "common.h"
#include "nat.h"
#include "parse.h"

#define SDN_OFF_IP6_SRC		(SDN_ETH_HLEN + 8)
#define SDN_OFF_IP6_DST		(SDN_ETH_HLEN + 24)

static __always_inline int sdn_nat6_addr(struct __sk_buff *skb,
					 const struct sdn_pkt *p, int is_src,
					 const struct sdn_addr *from,
					 const struct sdn_addr *to)
{
	struct sdn_addr f = *from, t = *to;
	__u64 flags;
	__s64 diff;
	int csum;

	if (sdn_addr_eq(&f, &t))
		return 0;
	csum = sdn_l4_csum_off(p, &flags);
	if (csum < 0)
		return -1;
	diff = bpf_csum_diff(f.w, sizeof(f), t.w, sizeof(t), 0);
	if (diff < 0)
		return -1;
	if (bpf_l4_csum_replace(skb, csum, 0, diff, flags | BPF_F_PSEUDO_HDR) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, is_src ? SDN_OFF_IP6_SRC : SDN_OFF_IP6_DST,
				   t.b, sizeof(t), 0);
}
