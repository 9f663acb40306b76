/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * DNS steering: a VPC pod's queries reach this node's split-horizon resolver
 * (the agent's, crate resolver), which answers from that pod's VPC's view.
 *
 * From the pod (sdn_dns_steer, in sdn_from_pod): a UDP or TCP packet to port 53
 * of a cluster-internal address (sdn_internal at net 0: the cluster DNS's
 * ClusterIP, or a pod or node a socket-level load balancer already turned it
 * into) that is not an endpoint or a ServiceVIP of the pod's own VPC is
 * re-addressed: source VPC address -> the pod's fabric address of the same
 * family (sdn_dns_pods), destination -> the resolver's address of that family
 * (sdn_dns_cfg), and handed to the host stack. The query's original
 * destination is recorded in sdn_dns_ct under {fabric, source port, proto}.
 * The resolver therefore sees the pod's fabric address, which names the pod.
 *
 * Back to the pod (sdn_dns_restore, in sdn_to_pod): the host routes the answer
 * to the fabric address, i.e. into the pod's veth; an answer from the
 * resolver's address and port is re-addressed from what the pod asked, to the
 * pod's VPC address, and delivered. It never meets the fabric bridge.
 *
 * Both families are steered, each within itself: an IPv6 query needs the pod's
 * IPv6 fabric address (a dual-stack default network) and an IPv6 resolver
 * address; without either it is not steered (no slot) or a counted drop (no
 * fabric address). The one crossing: a v6-only VPC pod whose fabric address is
 * IPv4 (a v4 default network) asks the cluster DNS in its NAT64 form,
 * 64:ff9b::<ClusterIP>; that query is translated to IPv4 towards the v4
 * resolver (lib/xlat.h) and the answer back to IPv6 from the address asked.
 *
 * Left alone: port-53 traffic inside the pod's VPC, to a pod or to one of its
 * VPC's ServiceVIPs (a tenant may run its own DNS), default-network pods (their
 * DNS is the cluster's, untouched), and a family whose slot the agent has not
 * configured (port 0).
 */
#pragma once

#include "common.h"
#include "endpoint.h"
#include "internal.h"
#include "nat.h"
#include "nat6.h"
#include "parse.h"
#include "xlat.h"

#define SDN_DNS_PORT	53

/* The resolver of the packet's family, or 0 while that family is not steered;
 * an IPv6 packet to or from an address in the v4 form (64:ff9b::/96: a
 * v6-only pod asking a v4 cluster DNS) takes the v4 resolver.
 */
static __always_inline struct sdn_dns_cfg *sdn_dns_config(const struct sdn_pkt *p,
							  const struct sdn_addr *peer)
{
	__u32 slot = p->family == 6 && !sdn_addr_is_v4(peer) ? SDN_DNS_CFG_V6 :
								SDN_DNS_CFG_V4;
	struct sdn_dns_cfg *c = bpf_map_lookup_elem(&sdn_dns_cfg, &slot);

	return c && c->port ? c : 0;
}

/* A ServiceVIP port of the pod's own VPC: the tenant's own DNS behind its own
 * load balancer, as much inside the VPC as a pod's address is.
 */
static __always_inline int sdn_dns_is_vip(__u32 net, const struct sdn_pkt *p)
{
	struct sdn_lb_key k = {};

	k.net = net;
	k.vip = p->dst;
	k.port = p->dport;
	k.proto = p->proto;
	return bpf_map_lookup_elem(&sdn_lb_svc, &k) != 0;
}

/* The IPv6 rewrites of a steered query: pod -> cluster DNS becomes
 * fabric -> resolver (the port is family-neutral).
 */
static __always_inline int sdn_dns_steer6(struct __sk_buff *skb,
					  struct sdn_pkt *p,
					  const struct sdn_addr *fabric,
					  const struct sdn_dns_cfg *cfg)
{
	if (sdn_nat6_addr(skb, p, 1, &p->src, fabric) ||
	    sdn_nat6_addr(skb, p, 0, &p->dst, &cfg->node) ||
	    sdn_nat4_port(skb, p, 0, p->dport, cfg->port))
		return DROP_REWRITE;
	p->src = *fabric;
	p->dst = cfg->node;
	p->dport = cfg->port;
	return 1;
}

/* A v6-only pod's query to 64:ff9b::<ClusterIP>: translated to IPv4, fabric
 * -> resolver. A subprogram: its translation's frame stays out of
 * sdn_dns_steer's.
 */
static __sdn_noinline int sdn_dns_steer64(struct __sk_buff *skb,
					   struct sdn_pkt *p,
					   const struct sdn_addr *fabric,
					   const struct sdn_dns_cfg *cfg)
{
	int ret = sdn_xlat_6to4(skb, p, fabric, &cfg->node);

	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 0, p->dport, cfg->port))
		return DROP_REWRITE;
	p->dport = cfg->port;
	return 1;
}

/* 0: not a query to steer (the caller goes on); 1: steered, hand it to the host
 * stack; < 0: a DROP_* reason.
 */
static __sdn_noinline int sdn_dns_steer(struct __sk_buff *skb,
					 struct sdn_pkt *p, __u32 net)
{
	struct sdn_dns_ct_key k = {};
	struct sdn_dns_ct v = {};
	struct sdn_dns_cfg *cfg;
	struct sdn_dns_pod *pod;
	struct sdn_ep_key pk = {};
	__be32 fabric, node;
	__be16 port;

	if (likely(p->dport != bpf_htons(SDN_DNS_PORT)))
		return 0;
	if (p->frag || (p->proto != IPPROTO_UDP && p->proto != IPPROTO_TCP))
		return 0;
	cfg = sdn_dns_config(p, &p->dst);
	if (!cfg)
		return 0;
	if (!sdn_is_internal(0, &p->dst))
		return 0;
	if (sdn_endpoint_lookup(net, &p->dst) || sdn_remote_lookup(net, &p->dst) ||
	    sdn_dns_is_vip(net, p))
		return 0;

	pk.net = net;
	pk.ip = p->src;
	pod = bpf_map_lookup_elem(&sdn_dns_pods, &pk);
	/* Within the family, or NAT64 from a v6-only pod to a v4 resolver. */
	if (!pod || sdn_addr_is_v4(&pod->fabric) != sdn_addr_is_v4(&cfg->node))
		return DROP_DNS_NO_SOURCE;

	k.fabric = pod->fabric;
	k.sport = p->sport;
	k.proto = p->proto;
	v.dst = p->dst;
	v.dport = p->dport;
	if (bpf_map_update_elem(&sdn_dns_ct, &k, &v, BPF_ANY))
		return DROP_DNS_CT_FULL;

	if (p->family == 6 && sdn_addr_is_v4(&cfg->node))
		return sdn_dns_steer64(skb, p, &pod->fabric, cfg);
	if (p->family == 6)
		return sdn_dns_steer6(skb, p, &pod->fabric, cfg);
	fabric = pod->fabric.w[3];
	node = cfg->node.w[3];
	port = cfg->port;
	if (sdn_nat4_addr(skb, p, 1, p->src.w[3], fabric) ||
	    sdn_nat4_addr(skb, p, 0, p->dst.w[3], node) ||
	    sdn_nat4_port(skb, p, 0, p->dport, port))
		return DROP_REWRITE;
	p->src.w[3] = fabric;
	p->dst.w[3] = node;
	p->dport = port;
	return 1;
}

/* The IPv6 rewrites of an answer: resolver -> fabric becomes what the pod
 * asked -> its VPC address.
 */
static __always_inline int sdn_dns_restore6(struct __sk_buff *skb,
					    struct sdn_pkt *p,
					    const struct sdn_dns_ct *ct,
					    const struct sdn_addr *vpc)
{
	if (sdn_nat6_addr(skb, p, 1, &p->src, &ct->dst) ||
	    sdn_nat4_port(skb, p, 1, p->sport, ct->dport) ||
	    sdn_nat6_addr(skb, p, 0, &p->dst, vpc))
		return DROP_REWRITE;
	p->src = ct->dst;
	p->sport = ct->dport;
	p->dst = *vpc;
	return 1;
}

/* The answer to a v6-only pod's translated query: resolver -> fabric becomes
 * 64:ff9b::<ClusterIP> (what it asked) -> its VPC address, in IPv6.
 */
static __sdn_noinline int sdn_dns_restore46(struct __sk_buff *skb,
					     struct sdn_pkt *p,
					     const struct sdn_dns_ct *ct,
					     const struct sdn_addr *vpc)
{
	__be16 from = p->sport;
	int ret = sdn_xlat_4to6(skb, p, &ct->dst, vpc);

	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 1, from, ct->dport))
		return DROP_REWRITE;
	p->sport = ct->dport;
	return 1;
}

/* sdn_to_pod, for a packet to the fabric address of a VPC pod (bridge b):
 * 0: not an answer of the resolver; 1: restored, p now addressed to the pod's
 * VPC address, deliver it; < 0: a DROP_* reason. A subprogram: inlined, its
 * keys sat in to_pod_vpc's frame under the bridge's 288-byte one and took
 * sdn_to_pod's call chain to 544 bytes (the limit is 512).
 */
static __sdn_noinline int sdn_dns_restore(struct __sk_buff *skb,
					   struct sdn_pkt *p,
					   const struct sdn_bridge *b)
{
	struct sdn_dns_ct_key k = {};
	struct sdn_dns_cfg *cfg;
	struct sdn_dns_ct *ct;
	__be32 orig, vpc;
	__be16 oport;
	int v4 = p->family == 4;

	if (p->frag || (p->proto != IPPROTO_UDP && p->proto != IPPROTO_TCP))
		return 0;
	cfg = sdn_dns_config(p, &p->src);
	if (!cfg || p->sport != cfg->port || !sdn_addr_eq(&p->src, &cfg->node))
		return 0;
	k.fabric = p->dst;
	k.sport = p->dport;
	k.proto = p->proto;
	ct = bpf_map_lookup_elem(&sdn_dns_ct, &k);
	/* What the pod asked is in its own family: a v6-only pod behind a v4
	 * fabric address asked 64:ff9b::<ClusterIP> (NAT46 back).
	 */
	if (!ct || sdn_addr_is_v4(&ct->dst) != v4)
		return DROP_DNS_NO_CT;
	if (v4 && !sdn_addr_is_v4(&b->vpc_ip))
		return sdn_dns_restore46(skb, p, ct, &b->vpc_ip);
	if (sdn_addr_is_v4(&b->vpc_ip) != v4)
		return DROP_UNSUPPORTED;
	if (!v4)
		return sdn_dns_restore6(skb, p, ct, &b->vpc_ip);
	orig = ct->dst.w[3];
	oport = ct->dport;
	vpc = b->vpc_ip.w[3];

	if (sdn_nat4_addr(skb, p, 1, p->src.w[3], orig) ||
	    sdn_nat4_port(skb, p, 1, p->sport, oport) ||
	    sdn_nat4_addr(skb, p, 0, p->dst.w[3], vpc))
		return DROP_REWRITE;
	p->src.w[3] = orig;
	p->sport = oport;
	p->dst = b->vpc_ip;
	return 1;
}
