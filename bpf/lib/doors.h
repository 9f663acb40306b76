/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The VPC doors in the order they are tried, for the two programs that meet
 * north-south traffic. Each door returns 0 for a packet that is not its own.
 *
 *   sdn_doors_from_pod: a VPC pod's packet bound outside its net and every
 *       peered net. A LoadBalancer backend's reply first (its client must see
 *       the frontend), then the pod's Floating IP (which wins over the gateway
 *       for its target); the gateway's NAT comes last (added with it). 0: no
 *       door; the caller drops it as DROP_VPC_ISOLATION.
 *   sdn_doors_from_uplink: Floating IPs, then LoadBalancer frontends.
 */
#pragma once

#include "fip.h"
#include "lb_gate.h"

static __sdn_noinline int sdn_doors_from_pod(struct __sk_buff *skb,
					      struct sdn_pkt *p, __u32 net)
{
	int ret = sdn_lbg_from_pod(skb, p, net);

	if (ret)
		return ret;
	return sdn_fip_from_pod(skb, p, net);
}

static __always_inline int sdn_doors_from_uplink(struct __sk_buff *skb,
						 struct sdn_pkt *p)
{
	int ret = sdn_fip_from_uplink(skb, p);

	if (ret)
		return ret;
	return sdn_lbg_from_uplink(skb, p);
}
