/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Live migration (issue 27, item 2): a VM's Port on two nodes at once.
 *
 * From the moment the target launcher is prepared until the source launcher is
 * gone, the two nodes relay: every packet delivered to the VM's endpoint on
 * one of them is also sent, as a copy, to the other (sdn_migrations), unless
 * it came from that other node. So whichever launcher the VM runs in gets it,
 * before, during and after the cutover, while the rest of the cluster still
 * sends to the Port's old node or already to the new one: nothing waits for
 * the Port's update to reach every node. The copy to the launcher the VM has
 * left is dropped there (no guest behind its tap); that is the cost, for the
 * seconds a migration takes, paid only by the migrating VM's traffic. The
 * target's launcher gets nothing until the VM announces itself there (QEMU's
 * RARP or a gratuitous ARP after the switch, sdn_mig_announce): before that
 * it may still hold the VM's address itself and answer in its name (a TCP
 * reset).
 *
 * Trust follows: the receiving node accepts the relayed copy from the peer
 * whatever its inner source (sdn_mig_relayed), and every node accepts the
 * VM's own packets from the target's node as well as from the Port's node
 * (sdn_mig_holds), so the VM's replies from the target pass before the Port
 * moves.
 *
 * Cost when no migration runs: a flag test on the endpoint record delivery
 * already holds; the lookups run only for a flagged endpoint, and for an
 * overlay packet whose source trust already failed.
 */
#pragma once

#include "common.h"
#include "overlay.h"

/* QEMU announces a migrated guest with RARP frames. */
#define SDN_ETH_P_RARP	0x8035

/* The node holding ep's other launcher, if ep is migrating. */
static __always_inline struct sdn_remote *
sdn_mig_peer(const struct sdn_endpoint *ep)
{
	__u32 k = ep->ifindex;

	if (likely(!(ep->flags & SDN_EP_F_MIGRATING)))
		return NULL;
	return bpf_map_lookup_elem(&sdn_migrations, &k);
}

/* Sends a copy of the packet, as it is about to be delivered to the endpoint
 * of host veth ifindex in net, to the node of the other launcher, unless it
 * came from there. A subprogram: its tunnel key stays off the callers' stack.
 * Returns 0, or DROP_MIG_STANDBY when the endpoint is a target whose VM has
 * not announced itself yet (the copy is the one that counts).
 */
static __sdn_noinline int sdn_mig_relay(struct __sk_buff *skb, __u32 net,
					__u32 ifindex)
{
	struct bpf_tunnel_key key = {};
	__u32 tun = CONFIG(tunnel_ifindex);
	struct sdn_remote *m;
	struct sdn_addr from;
	int standby;

	m = bpf_map_lookup_elem(&sdn_migrations, &ifindex);
	if (!m)
		return 0;
	standby = m->flags & SDN_MIG_F_STANDBY ? DROP_MIG_STANDBY : 0;
	if (!tun)
		return standby;
	if (!sdn_tunnel_src(skb, &key, &from) && sdn_addr_eq(&from, &m->node))
		return standby;
	if (sdn_encap_key(skb, net, m))
		return standby;
	bpf_clone_redirect(skb, tun, 0);
	return standby;
}

/* Delivery to a local endpoint: the relay of a migrating one; 0 or
 * DROP_MIG_STANDBY (not to be delivered here).
 */
static __always_inline int sdn_mig_deliver(struct __sk_buff *skb, __u32 net,
					   const struct sdn_endpoint *ep)
{
	if (likely(!(ep->flags & SDN_EP_F_MIGRATING)))
		return 0;
	return sdn_mig_relay(skb, net, ep->ifindex);
}

/* A frame from a pod's veth that announces a migrated guest there: QEMU's
 * RARP, or a gratuitous ARP (sender address = target address), never a pod's
 * ordinary ARP request for its gateway. It makes a standby target launcher's
 * endpoint receive.
 */
static __always_inline void sdn_mig_announce(struct __sk_buff *skb,
					     const struct sdn_pkt *p)
{
	__u32 k = skb->ifindex;
	struct sdn_remote *m;
	__be32 spa, tpa;

	if (p->eth_proto == ETH_P_ARP) {
		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN + 14, &spa, 4) < 0 ||
		    bpf_skb_load_bytes(skb, SDN_ETH_HLEN + 24, &tpa, 4) < 0 ||
		    spa != tpa)
			return;
	} else if (p->eth_proto != SDN_ETH_P_RARP) {
		return;
	}
	m = bpf_map_lookup_elem(&sdn_migrations, &k);
	if (m && (m->flags & SDN_MIG_F_STANDBY))
		m->flags &= ~SDN_MIG_F_STANDBY;
}

/* Overlay trust: whether outer holds {net, src} as the other launcher of a
 * migration: this node's endpoint's peer, or another node's Port's target.
 */
static __always_inline int sdn_mig_holds(__u32 net, const struct sdn_addr *src,
					 const struct sdn_endpoint *ep,
					 const struct sdn_addr *outer)
{
	struct sdn_ep_key k = { .net = net, .ip = *src };
	struct sdn_remote *m;

	m = ep ? sdn_mig_peer(ep) : bpf_map_lookup_elem(&sdn_mig_peers, &k);
	return m && sdn_addr_eq(&m->node, outer);
}

/* Overlay trust: whether the packet is a relayed copy for this node's
 * migrating endpoint {net, dst} from the node of its other launcher.
 */
static __always_inline int sdn_mig_relayed(__u32 net,
					   const struct sdn_addr *dst,
					   const struct sdn_addr *outer)
{
	struct sdn_ep_key k = { .net = net, .ip = *dst };
	struct sdn_endpoint *ep = bpf_map_lookup_elem(&sdn_endpoints, &k);
	struct sdn_remote *m;

	if (!ep)
		return 0;
	m = sdn_mig_peer(ep);
	return m && sdn_addr_eq(&m->node, outer);
}
