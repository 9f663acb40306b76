/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * SecurityGroups on the fabric bridge (lib/bridge.h). A VPC pod's fabric
 * address is a way in from the default network: a default-network pod, a
 * Service's backend traffic, another host. For a grouped pod that is
 * north-south ingress, closed until a CIDR rule of its VPC admits the client.
 *
 * Exempt: the Kubernetes contract. A client that is this node (sdn_hf_self:
 * kubelet probes, NodePort traffic the host masqueraded) or another node
 * (sdn_nodes: the API server's calls into pods) passes unpoliced, both ways.
 *
 * The view: the client from net 0 to the pod's VPC address in its net, before
 * the bridge rewrites the flow; the pod's replies in the same view after the
 * reverse rewrite, by the flow's entry. Net 0 as the client's net keeps a
 * fabric address from ever taking the groups of a VPC address it equals (a
 * VPC's range may overlap the fabric): it has no groups, so only CIDR rules
 * can admit it. ICMP errors are not policed here (lib/icmp_err.h translates
 * only errors about flows the bridge knows), later fragments neither (their
 * first was decided).
 */
#pragma once

#include "common.h"
#include "icmp_err.h"
#include "policy.h"

static __always_inline int sdn_bridge_is_node(const struct sdn_addr *a)
{
	return bpf_map_lookup_elem(&sdn_hf_self, a) ||
	       bpf_map_lookup_elem(&sdn_nodes, a);
}

/* sdn_to_pod, before sdn_bridge_forward: the client's packet to b's pod.
 * p is restored before returning. 0 to go on, or a DROP_*.
 */
static __sdn_noinline int sdn_bridge_police_in(struct __sk_buff *skb,
					       struct sdn_pkt *p,
					       const struct sdn_bridge *b)
{
	struct sdn_addr fabric;
	int ret;

	/* A v4 client of a v6-only pod (NAT46) is judged as it is kept in
	 * every map: 64:ff9b::a.b.c.d, to the pod's VPC address.
	 */
	if (sdn_icmp_is_error(p) || sdn_bridge_is_node(&p->src))
		return 0;
	fabric = p->dst;
	p->dst = b->vpc_ip;
	ret = sdn_sg_police(skb, p, 0, b->net, 0);
	p->dst = fabric;
	return ret;
}

/* sdn_from_pod, after sdn_bridge_reverse: the pod's packet back to its
 * client, p in the fabric's view (the pod's fabric address to the client).
 * p is restored before returning. 0 to go on, or a DROP_*.
 */
static __sdn_noinline int sdn_bridge_police_out(struct __sk_buff *skb,
						struct sdn_pkt *p, __u32 net)
{
	struct sdn_bridge *b;
	struct sdn_addr fabric;
	int ret;

	if (sdn_icmp_is_error(p) || sdn_bridge_is_node(&p->dst))
		return 0;
	b = bpf_map_lookup_elem(&sdn_bridges, &p->src);
	if (!b || b->net != net)
		return 0;
	fabric = p->src;
	p->src = b->vpc_ip;
	ret = sdn_sg_police(skb, p, net, 0, 0);
	p->src = fabric;
	return ret;
}
