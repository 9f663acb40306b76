/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * LoadBalancer ingress into VPCs: the VPC boundary's gate for LoadBalancer
 * Services whose backends are VPC pods, and the delivery it guards.
 *
 * Without this, LoadBalancer traffic would reach a VPC pod as any fabric
 * client does (LB address -> kube-proxy's DNAT to the pod's fabric address ->
 * the host route -> sdn_to_pod's bridge), where nothing can tell it from a
 * kubelet probe or a default-network pod. So the frontend is resolved before
 * the host stack, where the address itself still says "LoadBalancer": at the
 * uplink (sdn_from_uplink, ahead of kube-proxy's netfilter hooks, and working
 * where no kube-proxy runs at all). The agent feeds the frontends
 * (sdn_lbg_front) and which VPCs admit them (sdn_lbg_ingress, from the VPC's
 * effective VPCGateway's spec.ingress.loadBalancer).
 *
 *   sdn_lbg_from_uplink(skb, p)  a TCP/UDP packet to a frontend: refused
 *       (DROP_LB_REFUSED, metered as a refusal of door loadbalancer) unless the
 *       backends' VPC admits LoadBalancer ingress; then DNATed straight to one
 *       backend's VPC address and target port, the client preserved, chosen
 *       by a hash of the client's address and ports (the same on every node,
 *       so no flow state), and delivered like a Floating IP's packet. A
 *       NodePort of this node (SDN_LBG_F_GATE_ONLY) is only gated: admitted, it
 *       is the host's (its Service proxy DNATs it to the fabric bridge).
 *   sdn_lbg_from_pod(skb, p, net)  a VPC pod's packet from a backend address
 *       and target port (sdn_lbg_rev) to a non-internal destination is a reply:
 *       its source becomes the frontend, and it leaves by the node's route.
 *
 * SecurityGroups (lib/policy.h) police both directions on the backend's node,
 * the client a CIDR peer of its VPC: inbound at a local delivery here (in
 * sdn_from_overlay for a backend on another node), the replies in
 * sdn_doors_police_out (lib/doors.h) before sdn_lbg_from_pod.
 *
 * Both return 0 when the packet is not theirs, the tc verdict, or a DROP_*
 * reason (< 0). Both meter door SDN_DOOR_LOADBALANCER.
 */
#pragma once

#include "common.h"
#include "meter.h"
#include "nat.h"
#include "ns_out.h"
#include "parse.h"
#include "policy.h"
#include "fip.h"

/* The backend a client's flow goes to: depends only on the client's address
 * and the ports, so every node picks the same one for a flow.
 */
static __always_inline __u32 sdn_lbg_hash(const struct sdn_pkt *p)
{
	__u32 h = p->src.w[0] ^ p->src.w[1] ^ p->src.w[2] ^ p->src.w[3];

	h ^= ((__u32)p->sport << 16) | p->dport;
	h ^= h >> 16;
	h *= 0x7feb352d;
	h ^= h >> 15;
	h *= 0x846ca68b;
	h ^= h >> 16;
	return h;
}

static __always_inline int sdn_lbg_from_uplink(struct __sk_buff *skb,
					      struct sdn_pkt *p)
{
	struct sdn_lbg_key k = {};
	struct sdn_lbg_backend be;
	struct sdn_lbg_front *f;
	__u32 net, n, i;
	int ret;

	if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) ||
	    p->frag == SDN_FRAG_LATER)
		return 0;
	k.addr = p->dst;
	k.port = p->dport;
	k.proto = p->proto;
	f = bpf_map_lookup_elem(&sdn_lbg_front, &k);
	if (!f)
		return 0;
	net = f->net;
	if (!bpf_map_lookup_elem(&sdn_lbg_ingress, &net)) {
		sdn_meter_refused(skb, net, SDN_DOOR_LOADBALANCER, SDN_DIR_IN);
		return DROP_LB_REFUSED;
	}
	if (f->flags & SDN_LBG_F_GATE_ONLY) {
		sdn_meter_door(skb, net, SDN_DOOR_LOADBALANCER, SDN_DIR_IN);
		return 0;
	}
	n = f->count;
	if (!n || n > SDN_LBG_BACKENDS)
		return DROP_LB_NO_BACKEND;
	i = sdn_lbg_hash(p) % n;
	/* Keep the mask the verifier needs: clang knows i < 16 and drops it. */
	asm volatile("%0 &= 15" : "+r"(i));
	be = f->be[i];
	if ((p->family == 4) != sdn_addr_is_v4(&be.ip))
		return DROP_UNSUPPORTED;

	ret = sdn_fip_addr(skb, p, 0, &p->dst, &be.ip);
	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 0, p->dport, be.port))
		return DROP_REWRITE;
	p->dst = be.ip;
	p->dport = be.port;
	/* SecurityGroups at a local backend's delivery (a remote one's node
	 * polices it in sdn_from_overlay), as for a Floating IP: the client
	 * is a CIDR peer of the backend's VPC, the port the target port.
	 */
	if (sdn_endpoint_lookup(net, &be.ip)) {
		ret = sdn_sg_police(skb, p, net, net, 0);
		if (ret)
			return ret;
	}
	return sdn_ns_deliver(skb, net, &be.ip, SDN_DOOR_LOADBALANCER,
			      DROP_LB_NO_BACKEND);
}

static __always_inline int sdn_lbg_from_pod(struct __sk_buff *skb,
					   struct sdn_pkt *p, __u32 net)
{
	struct sdn_lbg_rev_key k = {};
	struct sdn_lbg_key *fe;
	struct sdn_lbg_key front;
	int ret;

	if ((p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP) ||
	    p->frag == SDN_FRAG_LATER)
		return 0;
	k.net = net;
	k.ip = p->src;
	k.port = p->sport;
	k.proto = p->proto;
	fe = bpf_map_lookup_elem(&sdn_lbg_rev, &k);
	if (!fe)
		return 0;
	front = *fe;
	if ((p->family == 4) != sdn_addr_is_v4(&front.addr) ||
	    sdn_is_internal(net, &p->dst))
		return 0;
	ret = sdn_fip_addr(skb, p, 1, &p->src, &front.addr);
	if (ret)
		return ret;
	if (sdn_nat4_port(skb, p, 1, p->sport, front.port))
		return DROP_REWRITE;
	p->src = front.addr;
	p->sport = front.port;
	ret = sdn_ns_redirect_out(skb, p);
	if (ret == TC_ACT_REDIRECT)
		sdn_meter_door(skb, net, SDN_DOOR_LOADBALANCER, SDN_DIR_OUT);
	return ret;
}
