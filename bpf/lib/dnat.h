/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Replies of flows the host DNATed into a pod of this node go back through the
 * host. A pod's reply is normally encapsulated straight to the node of its
 * destination, but the reply of a DNATed flow (a hostPort, a NodePort or an
 * externalIP whose backend is here) must first meet this node's conntrack,
 * which turns its source back into <node>:<port>; the client would otherwise
 * see a reply from an address it never talked to.
 *
 * The host's conntrack is not visible at tc ingress, where the reply is seen:
 * tc runs before netfilter. So the request marks it on the way in: the agent's
 * netfilter rule sets CONFIG(dnat_mark) on packets of DNATed connections
 * (original direction) routed into a pod veth, sdn_to_pod records the flow in
 * sdn_dnat and flags the port, and sdn_from_pod looks a reply up only on a
 * flagged port. See docs/datapath.md.
 */
#pragma once

#include "common.h"
#include "parse.h"

/* Records p's flow (client -> pod, as routed in) so that sdn_from_pod hands
 * its replies to the host unchanged, and flags the port.
 */
static __always_inline void sdn_dnat_record(struct sdn_port *port,
					    const struct sdn_pkt *p)
{
	struct sdn_dnat_key k = {};
	struct sdn_dnat v = {};

	k.pod = p->dst;
	k.peer = p->src;
	k.pod_port = p->dport;
	k.peer_port = p->sport;
	k.proto = p->proto;
	/* Only the flow's first packets write: later ones find the entry. */
	if (!bpf_map_lookup_elem(&sdn_dnat, &k))
		bpf_map_update_elem(&sdn_dnat, &k, &v, BPF_ANY);
	/* A plain store: the only other writers set the same bit, or the agent
	 * (re)writes the whole entry of a new port.
	 */
	if (!(port->flags & SDN_PORT_F_DNAT))
		port->flags |= SDN_PORT_F_DNAT;
}

/* sdn_to_pod, before any rewrite: p is the packet the host routed in (client
 * -> pod). Records the flow if netfilter marked it DNATed.
 */
static __always_inline void sdn_dnat_note(struct __sk_buff *skb,
					  struct sdn_port *port,
					  const struct sdn_pkt *p)
{
	if (likely(!(skb->mark & CONFIG(dnat_mark))))
		return;
	sdn_dnat_record(port, p);
}

/* sdn_from_pod: whether p (pod -> client; for a bridged VPC pod after the
 * bridge's reverse rewrite) is the reply of a flow the host DNATed.
 */
static __always_inline int sdn_dnat_reply(__u32 port_flags,
					  const struct sdn_pkt *p)
{
	struct sdn_dnat_key k = {};

	if (likely(!(port_flags & SDN_PORT_F_DNAT)))
		return 0;
	k.pod = p->src;
	k.peer = p->dst;
	k.pod_port = p->sport;
	k.peer_port = p->dport;
	k.proto = p->proto;
	return bpf_map_lookup_elem(&sdn_dnat, &k) != NULL;
}
