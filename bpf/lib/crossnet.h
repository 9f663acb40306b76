/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Cross-net decisions (VPC peering): which net a destination outside the
 * source's own net belongs to (sdn_xnet_routes, keyed by source net and
 * destination prefix, so overlapping VPCs stay apart), and whether the source
 * net may talk to it (sdn_xnet_allow). Addresses are native on both sides: a
 * peered packet is delivered unchanged, no NAT.
 *
 * Both ends decide: sdn_from_pod on the sending node and sdn_from_overlay on
 * the receiving one (the packet travels under the source net's VNI), so a
 * peering removed on either node stops the traffic there.
 */
#pragma once

#include "common.h"

/* The net `dst` belongs to, seen from `net`, in *to; 0 when the crossing is
 * allowed (and counted), DROP_VPC_ISOLATION when no peer net holds dst,
 * DROP_XNET_DENIED when one does but the pair is not allowed.
 */
static __always_inline int sdn_xnet_resolve(struct __sk_buff *skb, __u32 net,
					    const struct sdn_addr *dst,
					    __u32 *to)
{
	struct sdn_xnet_key k = {
		.prefixlen = 32 + 128,
		.net = net,
		.ip = *dst,
	};
	struct sdn_xnet_pair pair = { .src = net };
	struct sdn_xnet_route *r;
	struct sdn_xnet_stats *st;

	r = bpf_map_lookup_elem(&sdn_xnet_routes, &k);
	if (!r)
		return DROP_VPC_ISOLATION;
	pair.dst = r->net;
	/* A route into the own net or net 0 is never a crossing. */
	if (!pair.dst || pair.dst == net)
		return DROP_VPC_ISOLATION;
	st = bpf_map_lookup_elem(&sdn_xnet_allow, &pair);
	if (!st)
		return DROP_XNET_DENIED;
	/* Shared between CPUs: atomic adds. */
	__sync_fetch_and_add(&st->packets, 1);
	__sync_fetch_and_add(&st->bytes, skb->len);
	*to = pair.dst;
	return 0;
}
