/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * HostFirewall in the datapath (issue 14; docs/policy.md, "HostFirewall"):
 * the node's own traffic, judged by the HF layer of the rule trie on the
 * policy layers' connection table (lib/pct.h, lib/policy.h), when some
 * HostFirewall selecting the node arms a direction (sdn_pol_state.flags).
 *
 *   sdn_hf_from_uplink(skb, p)  sdn_from_uplink, after the doors: a packet to
 *       one of this node's addresses (sdn_hf_self). Pod fabric addresses, NAT
 *       replies and Floating IPs are the doors' and never get here as such.
 *   sdn_hf_out(skb)             sdn_host_out, tc egress of the uplink and of
 *       the tunnel device: a packet the node itself sent (no ingress device:
 *       forwarded pod traffic, encapsulated or masqueraded, is not the
 *       node's) from one of its addresses. The tunnel device's egress is how
 *       the node reaches other nodes' pods (the kernel routes their blocks
 *       into it); the node reaches its own pods through their veths, which
 *       these hooks never see (kubelet probes stay exempt).
 *
 * When any direction is armed both hooks track every flow of the node's own
 * addresses, so that the reply to a flow one direction opened finds its entry
 * in the other. Exempt before any rule, in both directions:
 *   - ICMPv6 neighbour discovery (types 133..137) and anything from or to
 *     fe80::/10: node IPv6 and BGP over link-local survive the firewall;
 *   - the overlay: UDP to the tunnel port (CONFIG(tunnel_port), the agent's
 *     --tunnel-port: VXLAN 4789 or Geneve 6081 unless set) to or from a known
 *     node (sdn_nodes);
 *   - node-to-node control traffic: TCP to or from the API server's (6443)
 *     or the kubelet's (10250) port, with a known node (sdn_nodes) as the
 *     other end: the Kubernetes contract survives any rule set;
 *   - ICMP errors quoting a flow with a live entry, and the flows' later
 *     packets (lib/policy.h);
 *   - later IP fragments (their first fragment was judged).
 */
#pragma once

#include "common.h"
#include "parse.h"
#include "policy.h"

/* Kubernetes' node-to-node control ports: the API server, the kubelet. */
#define SDN_HF_APISERVER_PORT	6443
#define SDN_HF_KUBELET_PORT	10250

static __always_inline int sdn_hf_control_port(__be16 port)
{
	return port == bpf_htons(SDN_HF_APISERVER_PORT) ||
	       port == bpf_htons(SDN_HF_KUBELET_PORT);
}

static __always_inline int sdn_hf_link_local(const struct sdn_addr *a)
{
	/* fe80::/10; IPv4 (64:ff9b::/96) never matches. */
	return (a->b[0] == 0xfe) && ((a->b[1] & 0xc0) == 0x80);
}

/* Exempt before any rule (above); `peer` is the end that is not this node. */
static __always_inline int sdn_hf_exempt(const struct sdn_pkt *p,
					 const struct sdn_addr *peer)
{
	if (p->proto == IPPROTO_ICMPV6 && p->icmp_type >= 133 &&
	    p->icmp_type <= 137)
		return 1;
	if (sdn_hf_link_local(&p->src) || sdn_hf_link_local(&p->dst))
		return 1;
	if (p->proto == IPPROTO_UDP &&
	    p->dport == bpf_htons((__u16)CONFIG(tunnel_port)) &&
	    bpf_map_lookup_elem(&sdn_nodes, peer))
		return 1;
	/* Node-to-node control traffic: either way, either end's port. */
	if (p->proto == IPPROTO_TCP &&
	    (sdn_hf_control_port(p->dport) || sdn_hf_control_port(p->sport)) &&
	    bpf_map_lookup_elem(&sdn_nodes, peer))
		return 1;
	return 0;
}

/* One packet of the node's own traffic through the HF layer: 0 to pass, or a
 * DROP_*. `peer` is p->src (ingress) or p->dst (egress).
 */
static __sdn_noinline int sdn_hf_police(struct __sk_buff *skb,
					const struct sdn_pkt *p,
					const struct sdn_addr *peer)
{
	struct sdn_pol_scratch *w;
	int ret;

	if (p->frag == SDN_FRAG_LATER || sdn_hf_exempt(p, peer))
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return 0;
	ret = sdn_flow_of(skb, p, 0, 0, &w->f);
	if (ret)
		return ret;
	return sdn_pol_flow(w, SDN_LAYER_HF);
}

/* sdn_from_uplink: a packet to this node's own addresses. 0 or a DROP_*. */
static __always_inline int sdn_hf_from_uplink(struct __sk_buff *skb,
					      const struct sdn_pkt *p)
{
	if (!sdn_hf_armed() || !bpf_map_lookup_elem(&sdn_hf_self, &p->dst))
		return 0;
	return sdn_hf_police(skb, p, &p->src);
}

/* sdn_host_out: the node's own packet leaving. TC_ACT_OK or a DROP_*. */
static __always_inline int sdn_hf_out(struct __sk_buff *skb)
{
	struct sdn_pkt p;

	/* Received on some device first: forwarded, not the node's own. */
	if (skb->ingress_ifindex || !sdn_hf_armed())
		return 0;
	if (sdn_parse(skb, &p) || !p.family)
		return 0;
	if (!bpf_map_lookup_elem(&sdn_hf_self, &p.src))
		return 0;
	return sdn_hf_police(skb, &p, &p.dst);
}
