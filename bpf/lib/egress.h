/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The two SNAT doors out of the cluster, on top of the engine (lib/snat.h):
 *
 *  - net-0 masquerade (sdn_masq_*): a default-network pod's packet to a
 *    destination outside the cluster-internal ranges leaves with the node's
 *    uplink address and a port from the masquerade range; the reply comes
 *    back to the node (sdn_from_uplink) and into the pod.
 *  - the VPC gateway (sdn_gw_*): a VPC pod's packet to a destination outside
 *    the cluster and outside its VPC leaves, from the pod's own node, with its
 *    VPC's NAT address and a port from this node's shard of the gateway range;
 *    the reply arrives at whichever node the address is attracted to, which
 *    un-NATs it if the shard is its own, else sends it over the overlay (under
 *    the VPC's VNI) to the shard's node, whose sdn_from_overlay un-NATs it.
 *
 * Cluster-internal destinations are never NATed. A VPC without an effective
 * NAT-enabled gateway (for the packet's family) has no way out. An IPv6
 * packet to 64:ff9b::/96 through a gateway with an IPv4 NAT address is
 * translated (NAT64: a v6-only VPC reaching the IPv4 internet).
 *
 * Every entry point returns SDN_SNAT_PASS (not its business: the caller goes
 * on as before), a tc verdict, or a DROP_* reason (negative).
 */
#pragma once

#include "meter.h"
#include "common.h"
#include "dnat.h"
#include "endpoint.h"
#include "internal.h"
#include "overlay.h"
#include "parse.h"
#include "policy.h"
#include "snat.h"
#include "xlat.h"

/* IPv4 multicast and broadcast are nobody's to NAT. */
static __always_inline int sdn_egress_v4_group(const struct sdn_pkt *p)
{
	return p->family == 4 && (p->dst.b[12] & 0xf0) >= 0xe0;
}

/* sdn_from_pod, net 0, destination on no node. */
static __sdn_noinline int sdn_masq_from_pod(struct __sk_buff *skb,
					     struct sdn_pkt *p)
{
	struct sdn_snat_conf *c = sdn_snat_conf_get();
	const struct sdn_addr *nat;
	__be16 sport, dport;
	int ret;

	if (!c || !(c->flags & SDN_SNAT_F_MASQ))
		return SDN_SNAT_PASS;
	if (p->family == 4 && (c->flags & SDN_SNAT_F_HAVE4))
		nat = &c->node4;
	else if (p->family == 6 && (c->flags & SDN_SNAT_F_HAVE6))
		nat = &c->node6;
	else
		return SDN_SNAT_PASS;
	if (sdn_egress_v4_group(p) || sdn_is_internal(0, &p->dst))
		return SDN_SNAT_PASS;
	if (p->frag == SDN_FRAG_LATER) {
		/* A datagram whose first fragment was not NATed goes as before. */
		if (sdn_frag_follow(skb, p, 0))
			return SDN_SNAT_PASS;
		return sdn_snat_send(skb, p, c);
	}
	/* An error about a masqueraded flow's reply leaves translated; other
	 * errors and untranslatable protocols leave as before (host).
	 */
	if (sdn_icmp_is_error(p)) {
		ret = sdn_snat_err_out(skb, p, 0, nat);
		if (ret)
			return ret;
		return sdn_snat_send(skb, p, c);
	}
	if (sdn_snat_out_ports(p, &sport, &dport))
		return SDN_SNAT_PASS;
	ret = sdn_snat_out(skb, p, 0, nat,
			   (__u64)c->masq_min << 32 |
				   ((__u32)c->masq_max - c->masq_min + 1));
	if (ret)
		return ret;
	return sdn_snat_send(skb, p, c);
}

/*
 * sdn_to_pod, net 0 or the fabric bridge, before any rewrite: a flow that
 * came in from outside the cluster (a client reaching a pod's fabric address
 * through a router) must be answered with the pod's own address, not
 * masqueraded. It is recorded like a DNATed flow (lib/dnat.h), whose replies
 * sdn_from_pod already hands to the host unchanged.
 */
static __always_inline void sdn_masq_note_inbound(struct sdn_port *port,
						  const struct sdn_pkt *p)
{
	struct sdn_snat_conf *c = sdn_snat_conf_get();

	if (!c || !(c->flags & SDN_SNAT_F_MASQ) || p->frag == SDN_FRAG_LATER)
		return;
	if (sdn_is_link_scoped6(p) || sdn_is_internal(0, &p->src))
		return;
	sdn_dnat_record(port, p);
}

/*
 * NAT64 at the gateway, before the engine: the pod's IPv6 packet to
 * 64:ff9b::a.b.c.d becomes IPv4 to a.b.c.d (lib/xlat.h), its source for now
 * the low word of the pod's address, which sdn_snat_out rewrites to the NAT
 * address as for any IPv4 flow. p->src stays the pod's IPv6 address, so the
 * engine keys the flow by the pod, and its reply (sdn_snat_in) finds a v6
 * pod behind an IPv4 reply and translates it back.
 */
static __sdn_noinline int sdn_gw_xlat_out(struct __sk_buff *skb,
					   struct sdn_pkt *p)
{
	struct sdn_addr pod = p->src, src4;
	int ret;

	sdn_addr_from_v4(&src4, p->src.w[3]);
	ret = sdn_xlat_6to4(skb, p, &src4, &p->dst);
	if (ret)
		return ret;
	p->src = pod;
	return 0;
}

/* sdn_from_pod, a VPC pod's destination that is no endpoint, remote or peer. */
static __sdn_noinline int sdn_gw_from_pod(struct __sk_buff *skb,
					   struct sdn_pkt *p, __u32 net)
{
	struct sdn_snat_conf *c;
	struct sdn_snat_gw *gw;
	struct sdn_addr nat;
	int ret, xlat = 0;
	__u32 min;

	if (sdn_egress_v4_group(p) || sdn_is_internal(net, &p->dst))
		return DROP_VPC_ISOLATION;
	gw = bpf_map_lookup_elem(&sdn_snat_gws, &net);
	if (p->family == 4 && gw && (gw->flags & SDN_SNAT_GW_F_HAVE4))
		nat = gw->addr4;
	else if (p->family == 6 && gw && sdn_addr_is_v4(&p->dst) &&
		 (gw->flags & SDN_SNAT_GW_F_HAVE4)) {
		/* NAT64: an IPv4 host in its 64:ff9b:: form, through the
		 * VPC's IPv4 NAT address (sdn_gw_xlat_out).
		 */
		nat = gw->addr4;
		xlat = 1;
	} else if (p->family == 6 && gw && (gw->flags & SDN_SNAT_GW_F_HAVE6))
		nat = gw->addr6;
	else {
		/* No door out: the boundary refuses it, and says so per VPC. */
		sdn_meter_refused(skb, net, SDN_DOOR_GATEWAY, SDN_DIR_OUT);
		return DROP_NO_GATEWAY;
	}
	c = sdn_snat_conf_get();
	if (!c || !c->gw_shard_size)
		return DROP_NO_GATEWAY;
	/* SecurityGroups: the pod's egress to a CIDR peer, in the VPC's view
	 * before the NAT. Its replies come back to this node (the owner of
	 * the port's shard) and pass by the same entry in sdn_snat_deliver,
	 * so the one table sees both directions however long the flow lives.
	 */
	ret = sdn_sg_police(skb, p, net, net, 0);
	if (ret)
		return ret;
	if (p->frag == SDN_FRAG_LATER) {
		/* Never out un-NATed: a fragment without its first stays in. */
		ret = sdn_frag_follow(skb, p, net);
		if (ret)
			return ret;
		return sdn_snat_send(skb, p, c);
	}
	if (xlat) {
		/* Errors about a translated flow are not translated (yet). */
		if (sdn_icmp_is_error(p))
			return DROP_XLAT;
		ret = sdn_gw_xlat_out(skb, p);
		if (ret)
			return ret;
	}
	if (sdn_icmp_is_error(p)) {
		/* Only about a reply of one of the VPC's NATed flows. */
		ret = sdn_snat_err_out(skb, p, net, &nat);
		if (ret == SDN_SNAT_PASS)
			return DROP_SNAT_UNSUPPORTED;
		if (ret)
			return ret;
		sdn_meter_door(skb, net, SDN_DOOR_GATEWAY, SDN_DIR_OUT);
		return sdn_snat_send(skb, p, c);
	}
	min = (__u32)c->gw_min + (__u32)c->shard * c->gw_shard_size;
	if (min + c->gw_shard_size > 65536)
		return DROP_SNAT_FULL;
	ret = sdn_snat_out(skb, p, net, &nat,
			   (__u64)min << 32 | c->gw_shard_size);
	if (ret)
		return ret;
	sdn_meter_door(skb, net, SDN_DOOR_GATEWAY, SDN_DIR_OUT);
	return sdn_snat_send(skb, p, c);
}

/* The reply r is this node's to un-NAT: into the pod (it is local, since
 * this node allocated the port). Valid at tc ingress only.
 */
static __always_inline int sdn_snat_deliver(struct __sk_buff *skb,
					    struct sdn_pkt *p,
					    struct sdn_snat_reply *r)
{
	struct sdn_endpoint *ep;
	__u32 net = 0;
	int ret;

	ret = r->is_err ? sdn_snat_err_in(skb, p, r, &net) :
			  sdn_snat_in(skb, p, r, &net);
	if (ret == SDN_SNAT_XLAT)
		ret = sdn_snat_in64(skb, p, r->rk.nat_port);
	if (ret)
		return ret;
	ep = sdn_endpoint_lookup(net, &p->dst);
	if (!ep)
		return DROP_NO_ENDPOINT;
	/* A gateway flow's reply, in the VPC's view after the un-NAT, passes
	 * by the entry its pod's packet made in sdn_gw_from_pod (refused, it
	 * is not counted as crossing). Net 0's masquerade has no groups.
	 */
	if (net) {
		ret = sdn_sg_police(skb, p, net, net, 0);
		if (ret)
			return ret;
	}
	/* Net 0 (the masquerade) is no VPC: the meter leaves it out. */
	sdn_meter_door(skb, net, SDN_DOOR_GATEWAY, SDN_DIR_IN);
	return sdn_deliver_local(skb, net, ep);
}

/* A later fragment of a reply this node un-NATed the first fragment of. */
static __always_inline int sdn_snat_deliver_frag(struct __sk_buff *skb,
						 struct sdn_pkt *p, __u32 net)
{
	struct sdn_endpoint *ep;
	int ret = sdn_frag_follow(skb, p, net);

	if (ret)
		return ret;
	ep = sdn_endpoint_lookup(net, &p->dst);
	if (!ep)
		return DROP_NO_ENDPOINT;
	return sdn_deliver_local(skb, net, ep);
}

/*
 * sdn_from_uplink: replies to this node's masquerade address or to any VPC's
 * NAT address. Anything else, and what the masquerade does not know (the
 * node's own flows), passes.
 */
static __always_inline int sdn_snat_from_uplink(struct __sk_buff *skb,
						struct sdn_pkt *p)
{
	struct sdn_snat_reply r = {};
	struct sdn_snat_conf *c;
	struct sdn_snat_addr *a;
	struct sdn_remote *owner;
	__u32 net, port, shard;
	int ret;

	a = bpf_map_lookup_elem(&sdn_snat_addrs, &p->dst);
	if (!a)
		return SDN_SNAT_PASS;
	net = a->net;
	c = sdn_snat_conf_get();
	if (!c)
		return SDN_SNAT_PASS;
	if (p->frag == SDN_FRAG_LATER) {
		ret = sdn_snat_deliver_frag(skb, p, net);
		if (!net && ret < 0)
			return SDN_SNAT_PASS;
		return ret;
	}
	if (sdn_snat_reply_key(skb, p, &r))
		return net ? DROP_SNAT_NO_CT : SDN_SNAT_PASS;
	port = bpf_ntohs(r.rk.nat_port);

	if (!net) {
		if (port < c->masq_min || port > c->masq_max ||
		    !bpf_map_lookup_elem(&sdn_snat_rev, &r.rk))
			return SDN_SNAT_PASS;
		return sdn_snat_deliver(skb, p, &r);
	}

	if (!c->gw_shard_size || port < c->gw_min)
		return DROP_SNAT_NO_CT;
	shard = (port - c->gw_min) / c->gw_shard_size;
	if (shard >= c->gw_shards)
		return DROP_SNAT_NO_CT;
	if (shard == c->shard)
		return sdn_snat_deliver(skb, p, &r);
	owner = bpf_map_lookup_elem(&sdn_snat_shards, &shard);
	if (!owner || !(owner->node.w[0] | owner->node.w[1] |
			owner->node.w[2] | owner->node.w[3]))
		return DROP_SNAT_NO_OWNER;
	return sdn_encap(skb, net, owner);
}

/*
 * sdn_from_overlay, a VPC packet whose destination is no endpoint of net:
 * the reply to net's NAT address that the node it is attracted to sent on
 * to this node, the owner of the port's shard.
 */
static __always_inline int sdn_snat_from_overlay(struct __sk_buff *skb,
						 struct sdn_pkt *p, __u32 net)
{
	struct sdn_snat_reply r = {};
	struct sdn_snat_addr *a;

	a = bpf_map_lookup_elem(&sdn_snat_addrs, &p->dst);
	if (!a || a->net != net)
		return SDN_SNAT_PASS;
	if (p->frag == SDN_FRAG_LATER)
		return sdn_snat_deliver_frag(skb, p, net);
	if (sdn_snat_reply_key(skb, p, &r))
		return DROP_SNAT_NO_CT;
	return sdn_snat_deliver(skb, p, &r);
}
