/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * externalTrafficPolicy: Cluster, from outside the cluster. A client outside
 * reaches a Service at this node's uplink (a NodePort of the node, an external
 * or LoadBalancer IP routed to it) and sdn_lb_forward gives its flow a backend
 * of any node (the external net's frontend, lib/lb.h):
 *
 *  - a backend on this node is reached as it is: the host routes it into the
 *    pod, the client's address kept (what Local always does);
 *  - a backend elsewhere gets this node's uplink address as source, with a
 *    port of the masquerade range, through the SNAT engine (lib/snat.h; its
 *    flows in their own net, SDN_LB_NET_EXTERNAL, apart from the pods'
 *    masquerade), and is encapsulated straight to the backend's node (a net-0
 *    pod), or routed out of the uplink (a host-network endpoint). The
 *    backend answers this node's address: the reply comes back over the
 *    underlay to this uplink, where sdn_lb_snat_reply undoes both
 *    translations and sends it to the client from the frontend.
 *
 * Why a source NAT and not DSR: with DSR the backend's node would answer
 * from the frontend (this node's address, or a LoadBalancer IP) out of its own
 * uplink, which the anti-spoofing of clouds and switches drops, and VXLAN (no
 * Geneve in the reference kernel) has no option to carry the frontend. It is
 * also what kube-proxy does (its masquerade). The cost is the client's
 * address: a backend behind Cluster sees this node's, as behind kube-proxy.
 *
 * Why not hand the NATed packet to the host: its source is now the node's own
 * address arriving on the uplink, a martian the host drops.
 */
#pragma once

#include "common.h"
#include "endpoint.h"
#include "lb.h"
#include "overlay.h"
#include "parse.h"
#include "snat.h"

/* This node's own: a net-0 pod of it, or one of its addresses (a
 * host-network endpoint here).
 */
static __always_inline int sdn_lb_snat_is_local(const struct sdn_addr *a)
{
	return sdn_endpoint_lookup(0, a) || bpf_map_lookup_elem(&sdn_hf_self, a);
}

/*
 * sdn_from_uplink: a Service frontend of the external net. DNATed to the
 * flow's backend; one of another node NATed to this node's address. Returns 0
 * (not a frontend, or a backend of this node: carry on), 1 (NATed: the caller
 * sends it with sdn_lb_snat_send), or a DROP_*. The sending is the caller's so
 * that its frame (tunnel key, FIB query) is not stacked on the engine's.
 */
static __sdn_noinline int sdn_lb_from_uplink(struct __sk_buff *skb,
					      struct sdn_pkt *p)
{
	struct sdn_addr front = p->dst;
	const struct sdn_addr *nat;
	struct sdn_snat_conf *c;
	__be16 port = p->dport;
	int ret;

	ret = sdn_lb_forward(skb, p, 0, SDN_LB_NET_EXTERNAL);
	if (ret)
		return ret;
	if ((sdn_addr_eq(&front, &p->dst) && port == p->dport) ||
	    sdn_lb_snat_is_local(&p->dst))
		return 0;
	c = sdn_snat_conf_get();
	if (!c)
		return DROP_SNAT_NO_ROUTE;
	if (p->family == 4 && (c->flags & SDN_SNAT_F_HAVE4))
		nat = &c->node4;
	else if (p->family == 6 && (c->flags & SDN_SNAT_F_HAVE6))
		nat = &c->node6;
	else
		return DROP_SNAT_NO_ROUTE;
	ret = sdn_snat_out(skb, p, SDN_LB_NET_EXTERNAL, nat,
			   (__u64)c->masq_min << 32 |
				   ((__u32)c->masq_max - c->masq_min + 1));
	if (ret)
		return ret;
	sdn_lb_count(SDN_LB_STAT_SNAT);
	return 1;
}

/* A flow sdn_lb_from_uplink NATed, to its backend: encapsulated to the node
 * of a net-0 pod, else (a host-network endpoint) routed out of the uplink.
 * Returns the tc verdict or a DROP_*.
 */
static __sdn_noinline int sdn_lb_snat_send(struct __sk_buff *skb,
					    const struct sdn_pkt *p)
{
	struct sdn_remote *r = sdn_net0_remote_lookup(&p->dst);
	struct sdn_snat_conf *c;

	if (r)
		return sdn_encap(skb, 0, r);
	c = sdn_snat_conf_get();
	if (!c)
		return DROP_SNAT_NO_ROUTE;
	return sdn_snat_send(skb, p, c);
}

/*
 * sdn_from_uplink, first: a backend's reply to a flow sdn_lb_snat_out NATed
 * (to this node's address, at a port the engine gave it in the external net).
 * Its destination becomes the client's again, its source the frontend's, and
 * it leaves by the uplink. Returns SDN_SNAT_PASS (not such a reply), a tc
 * verdict, or a DROP_*.
 */
static __sdn_noinline int sdn_lb_snat_reply(struct __sk_buff *skb,
					     struct sdn_pkt *p)
{
	struct sdn_snat_reply r = {};
	struct sdn_snat_rev *cur;
	struct sdn_snat_conf *c;
	__u32 net = 0;
	int ret;

	/* ICMP errors about these flows are not translated (yet). */
	if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) ||
	    p->frag == SDN_FRAG_LATER)
		return SDN_SNAT_PASS;
	/* Every uplink packet comes here first: the array's port range turns
	 * away all but the masquerade ports before the hash lookup.
	 */
	c = sdn_snat_conf_get();
	if (!c || bpf_ntohs(p->dport) < c->masq_min ||
	    bpf_ntohs(p->dport) > c->masq_max)
		return SDN_SNAT_PASS;
	r.rk.nat = p->dst;
	r.rk.peer = p->src;
	r.rk.nat_port = p->dport;
	r.rk.peer_port = p->sport;
	r.rk.proto = p->proto;
	cur = bpf_map_lookup_elem(&sdn_snat_rev, &r.rk);
	if (!cur || cur->net != SDN_LB_NET_EXTERNAL)
		return SDN_SNAT_PASS;
	ret = sdn_snat_in(skb, p, &r, &net);
	if (ret)
		return ret;
	/* The balanced flow's reverse half (written with the NAT's first
	 * packet, as for any balanced flow) gives the frontend back.
	 */
	ret = sdn_lb_reverse(skb, p, 0);
	if (ret < 0)
		return ret;
	if (!ret)
		return DROP_SNAT_NO_CT;
	return sdn_snat_send(skb, p, c);
}
