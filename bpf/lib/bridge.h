/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The fabric -> VPC bridge (dual-address pods). A VPC pod's status.podIP is a
 * fabric IP the pod never sees. Traffic to it from the default network
 * (kubelet probes, Services) is DNATed to the VPC IP in sdn_to_pod, and the
 * client is masqueraded to the link-local gateway so that the pod's reply
 * comes back through its only route; sdn_from_pod undoes both on the reply.
 * The client's address never enters the VPC, so a VPC that overlaps the
 * fabric cannot misroute the reply.
 *
 * Flows: TCP, UDP and ICMP echo over IPv4 and IPv6 (the IPv6 rewrites are in
 * lib/bridge6.h). A v4 fabric address bridged to a v6-only pod's VPC address
 * is translated (NAT46 in, NAT64 back, lib/xlat.h): the pod sees the client
 * as fe80::1 as every v6 client. IPv4 fragments (lib/frag.h) and the
 * ICMP and ICMPv6 errors about bridged flows (lib/icmp_err.h) are translated;
 * IPv6 fragments are not (see docs/datapath.md).
 */
#pragma once

#include "bridge6.h"
#include "common.h"
#include "frag.h"
#include "icmp_err.h"
#include "nat.h"
#include "parse.h"
#include "xlat.h"

static __always_inline int sdn_bridge_ports(const struct sdn_pkt *p, int fwd,
					    __be16 *client_port,
					    __be16 *pod_port)
{
	switch (p->proto) {
	case IPPROTO_TCP:
	case IPPROTO_UDP:
		*client_port = fwd ? p->sport : p->dport;
		*pod_port = fwd ? p->dport : p->sport;
		return 0;
	case IPPROTO_ICMP:
		if (p->icmp_type != (fwd ? ICMP_ECHO : ICMP_ECHOREPLY))
			return DROP_UNSUPPORTED_L4;
		*client_port = p->sport;
		*pod_port = 0;
		return 0;
	case IPPROTO_ICMPV6:
		if (p->icmp_type !=
		    (fwd ? ICMPV6_ECHO_REQUEST : ICMPV6_ECHO_REPLY))
			return DROP_UNSUPPORTED_L4;
		*client_port = p->sport;
		*pod_port = 0;
		return 0;
	}
	return DROP_UNSUPPORTED_L4;
}

/* Pick a gateway port for a new flow. The reverse entry is inserted with
 * BPF_NOEXIST, so two flows can never share {net, vpc_ip, gw_port, pod_port}.
 */
static __always_inline int sdn_bridge_alloc(struct sdn_ct_rev_key *rk,
					    const struct sdn_ct_rev *rv)
{
	__u32 start = bpf_get_prandom_u32();

#pragma unroll
	for (int i = 0; i < SDN_GW_PORT_TRIES; i++) {
		__u16 port = SDN_GW_PORT_MIN + (start + i) % SDN_GW_PORT_SPAN;

		rk->gw_port = bpf_htons(port);
		if (!bpf_map_update_elem(&sdn_ct_rev, rk, rv, BPF_NOEXIST))
			return 0;
	}
	return DROP_CT_FULL;
}

/* sdn_bridge_forward for a packet of a flow (not an ICMP error). */
static __sdn_noinline int sdn_bridge_forward_flow(struct __sk_buff *skb,
						   struct sdn_pkt *p,
						   const struct sdn_bridge *b,
						   __be16 *xlat_port)
{
	struct sdn_ct_fwd_key fk = {};
	struct sdn_ct_rev_key rk = {};
	struct sdn_frag_key frk = {};
	struct sdn_ct_rev rv = {};
	struct sdn_ct_fwd fv = {};
	struct sdn_ct_fwd *hit;
	__be16 client_port, pod_port;
	__be32 gw = CONFIG(gw_ipv4);
	int ret;

	if (p->frag == SDN_FRAG_LATER)
		return sdn_frag_follow(skb, p, b->net);
	sdn_frag_key(&frk, p, b->net);
	ret = sdn_bridge_ports(p, 1, &client_port, &pod_port);
	if (ret)
		return ret;

	fk.client = p->src;
	fk.fabric = p->dst;
	fk.client_port = client_port;
	fk.pod_port = pod_port;
	fk.proto = p->proto;

	rk.net = b->net;
	rk.vpc_ip = b->vpc_ip;
	rk.pod_port = pod_port;
	rk.proto = p->proto;
	/* Keyed as the pod's reply will be: ICMPv6 echo of a translated ping. */
	if (p->proto == IPPROTO_ICMP && !sdn_addr_is_v4(&b->vpc_ip))
		rk.proto = IPPROTO_ICMPV6;
	rv.fabric = p->dst;
	rv.client = p->src;
	rv.client_port = client_port;

	hit = bpf_map_lookup_elem(&sdn_ct_fwd, &fk);
	if (hit) {
		fv.gw_port = hit->gw_port;
		rk.gw_port = fv.gw_port;
		/* The LRU may have evicted only the reverse half. */
		if (!bpf_map_lookup_elem(&sdn_ct_rev, &rk) &&
		    bpf_map_update_elem(&sdn_ct_rev, &rk, &rv, BPF_ANY))
			return DROP_CT_FULL;
	} else {
		ret = sdn_bridge_alloc(&rk, &rv);
		if (ret)
			return ret;
		fv.gw_port = rk.gw_port;
		if (bpf_map_update_elem(&sdn_ct_fwd, &fk, &fv, BPF_ANY)) {
			bpf_map_delete_elem(&sdn_ct_rev, &rk);
			return DROP_CT_FULL;
		}
	}

	if ((p->family == 4) != sdn_addr_is_v4(&b->vpc_ip)) {
		/* NAT46: the caller translates (sdn_bridge_xlat_fwd), outside
		 * this frame.
		 */
		*xlat_port = fv.gw_port;
		return 0;
	}
	if (p->family == 6) {
		ret = sdn_bridge6_fwd(skb, p, &b->vpc_ip, client_port, fv.gw_port);
		if (ret)
			return ret;
		p->dst = b->vpc_ip;
		sdn_gw6(&p->src);
		return 0;
	}
	if (sdn_nat4_addr(skb, p, 0, p->dst.w[3], b->vpc_ip.w[3]) ||
	    sdn_nat4_addr(skb, p, 1, p->src.w[3], gw) ||
	    sdn_nat4_port(skb, p, 1, client_port, fv.gw_port))
		return DROP_REWRITE;

	p->dst = b->vpc_ip;
	sdn_addr_from_v4(&p->src, gw);
	p->sport = fv.gw_port;
	if (p->proto == IPPROTO_ICMP)
		p->dport = fv.gw_port;
	if (p->frag)
		sdn_frag_note(&frk, p);
	return 0;
}

/* A translated flow's packet to a v6-only pod (NAT46, lib/xlat.h): client:port
 * -> fabric becomes fe80::1:gw_port -> the pod's v6 address.
 */
static __always_inline int sdn_bridge_xlat_fwd(struct __sk_buff *skb,
					       struct sdn_pkt *p,
					       const struct sdn_bridge *b,
					       __be16 gw_port)
{
	__be16 client_port = p->sport;
	struct sdn_addr gw6;
	int ret;

	sdn_gw6(&gw6);
	ret = sdn_xlat_4to6(skb, p, &gw6, &b->vpc_ip);
	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 1, client_port, gw_port))
		return DROP_REWRITE;
	p->sport = gw_port;
	if (p->proto == IPPROTO_ICMPV6)
		p->dport = gw_port;
	return 0;
}

/* sdn_bridge_reverse for a packet of a flow (not an ICMP error). */
static __sdn_noinline int sdn_bridge_reverse_flow(struct __sk_buff *skb,
						   struct sdn_pkt *p, __u32 net)
{
	struct sdn_ct_rev_key rk = {};
	struct sdn_frag_key frk = {};
	struct sdn_ct_rev *rv;
	__be16 gw_port, pod_port;
	int ret;

	if (p->frag == SDN_FRAG_LATER)
		return sdn_frag_follow(skb, p, net);
	sdn_frag_key(&frk, p, net);
	ret = sdn_bridge_ports(p, 0, &gw_port, &pod_port);
	if (ret)
		return ret == DROP_UNSUPPORTED_L4 ? DROP_BRIDGE_NO_CT : ret;

	rk.net = net;
	rk.vpc_ip = p->src;
	rk.gw_port = gw_port;
	rk.pod_port = pod_port;
	rk.proto = p->proto;
	rv = bpf_map_lookup_elem(&sdn_ct_rev, &rk);
	if (!rv)
		return DROP_BRIDGE_NO_CT;
	if (p->family == 6 && sdn_addr_is_v4(&rv->fabric)) {
		/* NAT64: back to the v4 client of a v6-only pod (lib/xlat.h). */
		ret = sdn_xlat_6to4(skb, p, &rv->fabric, &rv->client);
		if (ret)
			return ret;
		if (sdn_nat4_port(skb, p, 0, gw_port, rv->client_port))
			return DROP_REWRITE;
	} else if (p->family == 6) {
		ret = sdn_bridge6_rev(skb, p, rv, gw_port);
		if (ret)
			return ret;
	} else if (!sdn_addr_is_v4(&rv->fabric) || !sdn_addr_is_v4(&rv->client)) {
		return DROP_UNSUPPORTED;
	} else if (sdn_nat4_addr(skb, p, 1, p->src.w[3], rv->fabric.w[3]) ||
		   sdn_nat4_addr(skb, p, 0, p->dst.w[3], rv->client.w[3]) ||
		   sdn_nat4_port(skb, p, 0, gw_port, rv->client_port)) {
		return DROP_REWRITE;
	}

	p->src = rv->fabric;
	p->dst = rv->client;
	p->dport = rv->client_port;
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6)
		p->sport = rv->client_port;
	if (p->frag)
		sdn_frag_note(&frk, p);
	return 0;
}

/*
 * The two entry points. Flows and ICMP errors about them take sibling
 * subprograms, so only the larger of the two frames adds to the program's.
 *
 * sdn_to_pod: fabric client -> VPC pod. On success p->dst is the VPC IP.
 */
static __always_inline int sdn_bridge_forward(struct __sk_buff *skb,
					      struct sdn_pkt *p,
					      const struct sdn_bridge *b)
{
	__be16 xlat_port = 0;
	int ret;

	if (sdn_icmp_is_error(p)) {
		/* Errors about a translated flow are not translated (yet). */
		if ((p->family == 4) != sdn_addr_is_v4(&b->vpc_ip))
			return DROP_XLAT;
		return sdn_icmp_err_forward(skb, p, b);
	}
	ret = sdn_bridge_forward_flow(skb, p, b, &xlat_port);
	if (ret || !xlat_port)
		return ret;
	return sdn_bridge_xlat_fwd(skb, p, b, xlat_port);
}

/* sdn_from_pod: the VPC pod's reply to the gateway -> back to the fabric
 * client. On success p's addresses and ports are those of the rewritten packet:
 * the fabric IP and the client.
 */
static __always_inline int sdn_bridge_reverse(struct __sk_buff *skb,
					      struct sdn_pkt *p, __u32 net)
{
	if (sdn_icmp_is_error(p))
		return sdn_icmp_err_reverse(skb, p, net);
	return sdn_bridge_reverse_flow(skb, p, net);
}
