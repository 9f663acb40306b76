/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The two questions every north-south door of a VPC asks on the way out
 * (Floating IPs, LoadBalancer replies; the gateway NAT alike):
 *
 *   sdn_is_internal(net, dst)  is dst inside the cluster or in the VPC's own
 *                              ranges (lib/internal.h)? Such a destination is
 *                              never NATed out: it stays isolated.
 *   sdn_ns_redirect_out(skb, p) the rewritten packet leaves by the node's
 *                              route to its destination: bpf_fib_lookup
 *                              (input lookup from the pod's veth, so the
 *                              node's own policy routing applies) then
 *                              bpf_redirect_neigh to the egress device.
 *
 * Why not hand the packet to the host stack: its source is now a public
 * address no interface of the node owns, arriving on a pod veth, and strict
 * rp_filter would drop it as a martian (and netfilter would see a flow it
 * never saw begin). bpf_redirect_neigh goes straight to the egress device's
 * neighbour output: no rp_filter, no FORWARD, no conntrack.
 */
#pragma once

#include "common.h"
#include "internal.h"
#include "parse.h"

#define SDN_AF_INET	2
#define SDN_AF_INET6	10

/* Returns TC_ACT_REDIRECT, or DROP_NS_NO_ROUTE. p holds the addresses the
 * packet now carries.
 */
static __always_inline int sdn_ns_redirect_out(struct __sk_buff *skb,
					       const struct sdn_pkt *p)
{
	struct bpf_fib_lookup fib = {};
	struct bpf_redir_neigh nh = {};
	int ret;

	fib.ifindex = skb->ifindex;
	fib.l4_protocol = p->proto;
	fib.sport = p->sport;
	fib.dport = p->dport;
	if (p->family == 4) {
		fib.family = SDN_AF_INET;
		fib.ipv4_src = p->src.w[3];
		fib.ipv4_dst = p->dst.w[3];
	} else {
		fib.family = SDN_AF_INET6;
		__builtin_memcpy(fib.ipv6_src, p->src.b, 16);
		__builtin_memcpy(fib.ipv6_dst, p->dst.b, 16);
	}
	/* SKIP_NEIGH: bpf_redirect_neigh resolves the next hop itself. */
	ret = bpf_fib_lookup(skb, &fib, sizeof(fib), BPF_FIB_LOOKUP_SKIP_NEIGH);
	if (ret != BPF_FIB_LKUP_RET_SUCCESS && ret != BPF_FIB_LKUP_RET_NO_NEIGH)
		return DROP_NS_NO_ROUTE;
	nh.nh_family = fib.family;
	if (fib.family == SDN_AF_INET)
		nh.ipv4_nh = fib.ipv4_dst;
	else
		__builtin_memcpy(nh.ipv6_nh, fib.ipv6_dst, 16);
	skb->mark = 0;
	return bpf_redirect_neigh(fib.ifindex, &nh, sizeof(nh), 0);
}

#include "endpoint.h"
#include "meter.h"
#include "overlay.h"

/* Into VPC net: a packet already rewritten to the VPC address vpc_ip (client
 * preserved) goes straight into the pod if it is on this node, else over the
 * overlay under the VPC's VNI to the node of its Port (sdn_remotes), whose
 * sdn_from_overlay delivers it by {net, dst} as any VPC packet. Metered here,
 * once, on the node the door was crossed at. Returns the verdict or `missing`
 * (a DROP_* reason) when the address is nowhere.
 */
static __always_inline int sdn_ns_deliver(struct __sk_buff *skb, __u32 net,
					  const struct sdn_addr *vpc_ip,
					  __u8 door, int missing)
{
	struct sdn_endpoint *ep = sdn_endpoint_lookup(net, vpc_ip);
	struct sdn_remote *r;

	if (ep) {
		sdn_meter_door(skb, net, door, SDN_DIR_IN);
		return sdn_deliver_local(skb, net, ep);
	}
	r = sdn_remote_lookup(net, vpc_ip);
	if (!r)
		return missing;
	sdn_meter_door(skb, net, door, SDN_DIR_IN);
	return sdn_encap(skb, net, r);
}
