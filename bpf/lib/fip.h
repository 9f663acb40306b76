/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Floating IPs: a 1:1, stateless NAT between a public address and one VPC
 * address (the FloatingIP's target), both families. No flow state: the
 * mapping is a bijection, so each packet is translated by its addresses alone,
 * fragments and ICMP errors included, on whichever node sees it.
 *
 *   sdn_fip_from_uplink(skb, p)  sdn_from_uplink (tc ingress of the node's
 *       uplink): a packet to a public address of sdn_fip_in is DNATed to the
 *       target (client source preserved) and delivered into the pod, or over
 *       the overlay under the VPC's VNI to the target's node (lib/ns_out.h).
 *       An ICMP error about a packet the target sent has its quote translated
 *       too (quoted source public -> VPC address).
 *   sdn_fip_from_pod(skb, p, net)  sdn_from_pod, for a VPC pod's packet whose
 *       destination is in neither its net nor a peered one: if the pod's
 *       address has a Floating IP (sdn_fip_out) and the destination is not
 *       internal (sdn_internal), the source becomes the public address and the
 *       packet leaves by the node's route (bpf_fib_lookup +
 *       bpf_redirect_neigh). Replies so leave from the pod's node, whichever
 *       node the address is attracted to. An ICMP error the pod sends has its
 *       quote's destination translated (VPC address -> public).
 *
 * SecurityGroups (lib/policy.h) see both directions on the target's node, in
 * the VPC's view (the outside peer in the target's net, no groups: a CIDR
 * peer): inbound at the delivery (here for a target on this node, in
 * sdn_from_overlay for one on another), outbound before the doors
 * (sdn_doors_police_out, lib/doors.h, called by sdn_from_pod ahead of
 * sdn_doors_from_pod: under the doors' frame the check would take the stack
 * past 512 bytes). A
 * grouped target is closed to new flows either way until a CIDR rule admits
 * the peer; replies pass by the connection table.
 *
 * An IPv4 public address of a v6-only pod is translated (NAT46 in, NAT64
 * out, lib/xlat.h): the client is 64:ff9b::a.b.c.d inside, the pod's packets
 * to such an address leave as IPv4 from the public address. ICMP errors are
 * not translated across families (DROP_XLAT).
 *
 * Both return 0 when the packet is not theirs (the caller goes on), the tc
 * verdict, or a DROP_* reason (< 0). Both meter door SDN_DOOR_EIP.
 */
#pragma once

#include "common.h"
#include "icmp_err.h"
#include "meter.h"
#include "nat.h"
#include "nat6.h"
#include "ns_out.h"
#include "parse.h"
#include "policy.h"
#include "xlat.h"

/* One address of p, from -> to, with the checksums that cover it. A later
 * IPv4 fragment (no L4 header) and IPv4 protocols without a pseudo-header
 * checksum only need the IP header's.
 */
static __always_inline int sdn_fip_addr(struct __sk_buff *skb,
					const struct sdn_pkt *p, int is_src,
					const struct sdn_addr *from,
					const struct sdn_addr *to)
{
	if (p->family == 6) {
		if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP &&
		    p->proto != IPPROTO_ICMPV6)
			return DROP_UNSUPPORTED_L4;
		return sdn_nat6_addr(skb, p, is_src, from, to) ? DROP_REWRITE : 0;
	}
	if (p->frag != SDN_FRAG_LATER &&
	    (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP ||
	     p->proto == IPPROTO_ICMP))
		return sdn_nat4_addr(skb, p, is_src, from->w[3], to->w[3]) ?
			       DROP_REWRITE : 0;
	if (bpf_l3_csum_replace(skb, SDN_OFF_IP4_CSUM, from->w[3], to->w[3],
				sizeof(__u32)) < 0 ||
	    bpf_skb_store_bytes(skb, is_src ? SDN_OFF_IP4_SRC : SDN_OFF_IP4_DST,
				&to->w[3], sizeof(__u32), 0) < 0)
		return DROP_REWRITE;
	return 0;
}

/* The quote of an ICMP(v6) error crossing the door: its address `from` (the
 * quoted source when is_src) becomes `to`. Not an error: nothing to do.
 */
static __always_inline int sdn_fip_quote(struct __sk_buff *skb,
					 const struct sdn_pkt *p, int is_src,
					 const struct sdn_addr *from,
					 const struct sdn_addr *to)
{
	struct sdn_icmp_quote q = {};
	int ret;

	if (!sdn_icmp_is_error(p))
		return 0;
	ret = sdn_icmp_quote(skb, p, &q);
	if (ret)
		return ret;
	if (!sdn_addr_eq(is_src ? &q.src : &q.dst, from))
		return DROP_INVALID;
	return sdn_icmp_quote_addr(skb, p, &q, is_src, to) ? DROP_REWRITE : 0;
}

/* sdn_fip_from_pod: the caller must translate (sdn_fip_xlat_out). No tc
 * verdict has this value.
 */
#define SDN_FIP_XLAT		0x102

/* After sdn_fip_from_pod returned SDN_FIP_XLAT: the v6-only pod's packet
 * leaves as IPv4 from its public address (p->src) to the host (p->dst, in its
 * 64:ff9b:: form). Its own subprogram: under the doors' frame the
 * translation's took sdn_from_pod's chain to 544 bytes.
 */
static __sdn_noinline int sdn_fip_xlat_out(struct __sk_buff *skb,
					    struct sdn_pkt *p, __u32 net)
{
	struct sdn_addr pub = p->src;
	int ret = sdn_xlat_6to4(skb, p, &pub, &p->dst);

	if (ret)
		return ret;
	ret = sdn_ns_redirect_out(skb, p);
	if (ret == TC_ACT_REDIRECT)
		sdn_meter_door(skb, net, SDN_DOOR_EIP, SDN_DIR_OUT);
	return ret;
}

static __always_inline int sdn_fip_from_uplink(struct __sk_buff *skb,
					       struct sdn_pkt *p)
{
	struct sdn_addr pub = p->dst, vpc;
	struct sdn_fip *f;
	__u32 net;
	int ret;

	/* Neighbour discovery for the address is the link's (whatever attracts
	 * it answers), never the target's.
	 */
	if (sdn_is_ndp(p))
		return 0;
	f = bpf_map_lookup_elem(&sdn_fip_in, &pub);
	if (!f)
		return 0;
	net = f->net;
	vpc = f->vpc_ip;
	if (p->family == 4 && !sdn_addr_is_v4(&vpc)) {
		/* NAT46: an IPv4 address of a v6-only pod; the client as
		 * 64:ff9b::a.b.c.d, which p->src already is (lib/xlat.h).
		 */
		ret = sdn_xlat_4to6(skb, p, &p->src, &vpc);
		if (ret)
			return ret;
	} else if ((p->family == 4) != sdn_addr_is_v4(&vpc)) {
		return DROP_UNSUPPORTED;
	} else {
		/* The quote is of a packet the target sent: from the public
		 * address.
		 */
		ret = sdn_fip_quote(skb, p, 1, &pub, &vpc);
		if (ret)
			return ret;
		ret = sdn_fip_addr(skb, p, 0, &pub, &vpc);
		if (ret)
			return ret;
	}
	p->dst = vpc;
	/* The target's ingress, where it is delivered: on this node here. */
	if (sdn_endpoint_lookup(net, &vpc)) {
		ret = sdn_sg_police(skb, p, net, net, 0);
		if (ret)
			return ret;
	}
	return sdn_ns_deliver(skb, net, &vpc, SDN_DOOR_EIP, DROP_FIP_NO_TARGET);
}

static __always_inline int sdn_fip_from_pod(struct __sk_buff *skb,
					    struct sdn_pkt *p, __u32 net)
{
	struct sdn_ep_key k = { .net = net, .ip = p->src };
	struct sdn_addr vpc = p->src, pub;
	struct sdn_fip_pub *fp;
	int ret;

	fp = bpf_map_lookup_elem(&sdn_fip_out, &k);
	if (!fp)
		return 0;
	pub = fp->addr;
	if (sdn_is_internal(net, &p->dst))
		return 0;
	if (p->family == 6 && sdn_addr_is_v4(&pub)) {
		/* NAT64: a v6-only pod's IPv4 public address, to an IPv4
		 * host in its 64:ff9b:: form; anything else is not this
		 * door's (the gateway may take it). The caller translates
		 * (sdn_fip_xlat_out), outside the doors' frame.
		 */
		if (!sdn_addr_is_v4(&p->dst))
			return 0;
		p->src = pub;
		return SDN_FIP_XLAT;
	} else if ((p->family == 4) != sdn_addr_is_v4(&pub)) {
		return 0;
	} else {
		/* The pod's error is about a packet it got through the door:
		 * to it.
		 */
		ret = sdn_fip_quote(skb, p, 0, &vpc, &pub);
		if (ret)
			return ret;
		ret = sdn_fip_addr(skb, p, 1, &vpc, &pub);
		if (ret)
			return ret;
	}
	p->src = pub;
	ret = sdn_ns_redirect_out(skb, p);
	if (ret == TC_ACT_REDIRECT)
		sdn_meter_door(skb, net, SDN_DOOR_EIP, SDN_DIR_OUT);
	return ret;
}
