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
 *
 * SecurityGroups police every door at the pod's side, in the VPC's view (the
 * outside peer a CIDR peer of the pod's net): inbound where the packet is
 * delivered to a local pod (the doors here, sdn_from_overlay for a pod on
 * another node), outbound in sdn_doors_police_out ahead of the doors.
 */
#pragma once

#include "fip.h"
#include "lb_gate.h"
#include "policy.h"

/*
 * SecurityGroups for a VPC pod's packet that sdn_doors_from_pod will send out
 * by a door: a LoadBalancer backend's reply or a packet out by the pod's
 * Floating IP. The pod's egress (a reply passes by its flow's entry, which
 * the inbound packet made here or in sdn_from_overlay: the backend's and the
 * target's node sees both directions), in the VPC's view, before any
 * translation. It asks what the doors will, in their order: not internal, a
 * backend's reply of the packet's family, else a Floating IP of the packet's
 * family. The gateway polices its own (sdn_gw_from_pod). Keys in the policy
 * scratch: a subprogram of its own, so only its small frame sits between
 * sdn_from_pod and the policy check. 0 to go on (the doors decide), or a
 * DROP_*.
 */
static __sdn_noinline int sdn_doors_police_out(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       __u32 net)
{
	struct sdn_pol_scratch *w = sdn_pol_scratch();
	struct sdn_lbg_key *fe;
	struct sdn_fip_pub *fp;

	if (!w)
		return 0;
	w->u.xnet.prefixlen = 32 + 128;
	w->u.xnet.net = 0;
	w->u.xnet.ip = p->dst;
	if (bpf_map_lookup_elem(&sdn_internal, &w->u.xnet))
		return 0;
	w->u.xnet.net = net;
	if (bpf_map_lookup_elem(&sdn_internal, &w->u.xnet))
		return 0;
	if ((p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) &&
	    p->frag != SDN_FRAG_LATER) {
		__builtin_memset(&w->u.lbg, 0, sizeof(w->u.lbg));
		w->u.lbg.net = net;
		w->u.lbg.ip = p->src;
		w->u.lbg.port = p->sport;
		w->u.lbg.proto = p->proto;
		fe = bpf_map_lookup_elem(&sdn_lbg_rev, &w->u.lbg);
		if (fe && (p->family == 4) == sdn_addr_is_v4(&fe->addr))
			return sdn_sg_police(skb, p, net, net, 0);
	}
	w->u.ep.net = net;
	w->u.ep.ip = p->src;
	fp = bpf_map_lookup_elem(&sdn_fip_out, &w->u.ep);
	if (!fp)
		return 0;
	/* Same family, or NAT64 from a v6-only pod to 64:ff9b::/96. */
	if ((p->family == 4) != sdn_addr_is_v4(&fp->addr) &&
	    !(p->family == 6 && sdn_addr_is_v4(&p->dst)))
		return 0;
	return sdn_sg_police(skb, p, net, net, 0);
}

static __sdn_noinline int sdn_doors_from_pod(struct __sk_buff *skb,
					      struct sdn_pkt *p, __u32 net)
{
	int ret = sdn_lbg_from_pod(skb, p, net);

	if (ret)
		return ret;
	return sdn_fip_from_pod(skb, p, net);
}

/* After sdn_doors_from_pod returned SDN_FIP_XLAT: a Floating IP's NAT64 out. */
static __always_inline int sdn_doors_xlat_out(struct __sk_buff *skb,
					      struct sdn_pkt *p, __u32 net)
{
	return sdn_fip_xlat_out(skb, p, net);
}

static __always_inline int sdn_doors_from_uplink(struct __sk_buff *skb,
						 struct sdn_pkt *p)
{
	int ret = sdn_fip_from_uplink(skb, p);

	if (ret)
		return ret;
	return sdn_lbg_from_uplink(skb, p);
}
