/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * HostFirewall in the datapath (issue 14; docs/policy.md, "HostFirewall"):
 * the node's own traffic, judged by the HF layer of the rule trie on the
 * policy layers' connection table (lib/pct.h, lib/policy.h), when some
 * HostFirewall selecting the node arms a direction (sdn_pol_state.flags).
 *
 *   sdn_hf_in(skb, p)           sdn_from_uplink after the doors, sdn_from_pod
 *       and sdn_from_overlay (net 0): a packet to one of this node's
 *       addresses (sdn_hf_self). Pod fabric addresses, NAT replies and
 *       Floating IPs are the doors' and never get here as such.
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
 *   - ICMPv6 router and neighbour discovery and redirects (types 133..137):
 *     node IPv6 survives the firewall. Anything else over link-local
 *     (fe80::/10: BGP, SSH to a neighbour) is the rules', as any address is;
 *   - the overlay: UDP to the tunnel port (CONFIG(tunnel_port), the agent's
 *     --tunnel-port: VXLAN 4789 or Geneve 6081 unless set) to or from a known
 *     node (sdn_nodes);
 *   - node-to-node control traffic: TCP to the API server's (6443) or the
 *     kubelet's (10250) port of a known node (sdn_nodes) or from one to this
 *     node's: admitted by its *destination* port and tracked like any flow, so
 *     its replies pass by the connection table (never by their source port:
 *     a known node's SYN from port 6443 to any other port is the rules'). A
 *     control connection already open when the firewall was armed is adopted
 *     by its first packet that is no lone SYN;
 *   - ICMP errors quoting a flow with a live entry, and the flows' later
 *     packets (lib/policy.h);
 *   - later IP fragments (their first fragment was judged).
 *
 * Besides the uplink, the node's pods reach it (sdn_from_pod, net 0) and
 * so could a node through the overlay (sdn_from_overlay): sdn_hf_in judges
 * both as ingress like the uplink's. The node's own flows to its pods (kubelet
 * probes) are tracked where they enter the pod (sdn_hf_to_pod), so that the
 * pods' replies pass by the table: no rule can cut the Kubernetes contract.
 * A scratch that cannot be had drops (DROP_POL_SCRATCH): never a pass
 * unjudged.
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

/* One of this node's own addresses at a hook: listed (sdn_hf_self), or
 * link-local (lib/policy.h, sdn_hf_link_local).
 */
static __always_inline int sdn_hf_mine(const struct sdn_addr *a)
{
	return bpf_map_lookup_elem(&sdn_hf_self, a) || sdn_hf_link_local(a);
}

/* Exempt before any rule (above): nothing is recorded for these. `peer` is
 * the end that is not this node.
 */
static __always_inline int sdn_hf_exempt(const struct sdn_pkt *p,
					 const struct sdn_addr *peer)
{
	if (p->proto == IPPROTO_ICMPV6 && p->icmp_type >= 133 &&
	    p->icmp_type <= 137)
		return 1;
	return p->proto == IPPROTO_UDP &&
	       p->dport == bpf_htons((__u16)CONFIG(tunnel_port)) &&
	       bpf_map_lookup_elem(&sdn_nodes, peer);
}

/* Node-to-node control traffic (above): a known node's TCP to a control port,
 * and what comes back from one, but for a lone SYN (a connection that a
 * control port would open to any other port).
 */
static __always_inline int sdn_hf_control(const struct sdn_pkt *p,
					  const struct sdn_addr *peer, __u8 tcp)
{
	if (p->proto != IPPROTO_TCP || !bpf_map_lookup_elem(&sdn_nodes, peer))
		return 0;
	if (sdn_hf_control_port(p->dport))
		return 1;
	return sdn_hf_control_port(p->sport) &&
	       (tcp & (SDN_TCPF_SYN | SDN_TCPF_ACK)) != SDN_TCPF_SYN;
}

/* A control flow's packet (sdn_hf_control): its entry made or stepped as if a
 * rule admitted it, at the current generation, so no re-check after a policy
 * change ever cuts it.
 */
static __always_inline int sdn_hf_admit(struct sdn_pol_scratch *w)
{
	struct sdn_pol_state *st;
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0, gen = 0;
	struct sdn_pct *e;
	int from_b;

	st = bpf_map_lookup_elem(&sdn_pol_state, &zero);
	if (st)
		gen = st->generation;
	from_b = sdn_pct_key_of(&w->f, &w->k);
	e = bpf_map_lookup_elem(&sdn_pol_ct, &w->k);
	if (e && e->expires > now) {
		e->generation = gen;
		sdn_pct_step(e, &w->f, from_b, now, gen);
		return 0;
	}
	sdn_pct_new(&w->n, &w->f, from_b, now, gen, 0);
	w->n.layers = 1 << SDN_LAYER_HF;
	bpf_map_update_elem(&sdn_pol_ct, &w->k, &w->n, BPF_ANY);
	return 0;
}

/* One packet of the node's own traffic through the HF layer, at a hook of
 * direction `dir` (SDN_DIR_*): 0 to pass, or a DROP_*. `peer` is p->src
 * (ingress) or p->dst (egress).
 */
static __sdn_noinline int sdn_hf_police(struct __sk_buff *skb,
					const struct sdn_pkt *p,
					const struct sdn_addr *peer, __u8 dir)
{
	struct sdn_pol_scratch *w;
	int ret;

	if (p->frag == SDN_FRAG_LATER || sdn_hf_exempt(p, peer))
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return DROP_POL_SCRATCH;
	ret = sdn_flow_of(skb, p, 0, 0, &w->f);
	if (ret)
		return ret;
	w->hf_hook = dir + 1;
	if (!w->f.icmp_err && sdn_hf_control(p, peer, w->f.tcp))
		return sdn_hf_admit(w);
	return sdn_pol_flow(w, SDN_LAYER_HF);
}

/* The node's own flow into one of its pods (sdn_to_pod, before delivery):
 * tracked without rules, so the pod's replies pass sdn_hf_in by the
 * table. 0, or DROP_POL_SCRATCH.
 */
static __sdn_noinline int sdn_hf_to_pod(struct __sk_buff *skb,
					const struct sdn_pkt *p)
{
	struct sdn_pol_scratch *w;
	int ret;

	if (!sdn_hf_armed() || p->frag == SDN_FRAG_LATER ||
	    !sdn_hf_mine(&p->src))
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return DROP_POL_SCRATCH;
	ret = sdn_flow_of(skb, p, 0, 0, &w->f);
	if (ret || w->f.icmp_err)
		return 0;
	return sdn_hf_admit(w);
}

/* A packet into the node: at the uplink (after the doors), from one of its
 * net-0 pods, or decapsulated from the overlay; judged as ingress when it is
 * to one of the node's own addresses. 0 or a DROP_*.
 */
static __always_inline int sdn_hf_in(struct __sk_buff *skb,
				     const struct sdn_pkt *p)
{
	if (!sdn_hf_armed() || !sdn_hf_mine(&p->dst))
		return 0;
	return sdn_hf_police(skb, p, &p->src, SDN_DIR_INGRESS);
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
	if (!sdn_hf_mine(&p.src))
		return 0;
	return sdn_hf_police(skb, &p, &p.dst, SDN_DIR_EGRESS);
}
