/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Endpoint lookups by {net, ip}, anti-spoofing and local delivery. */
#pragma once

#include "common.h"
#include "parse.h"
#include "migrate.h"
#include "sever.h"
#include "stats.h"

static __always_inline struct sdn_endpoint *
sdn_endpoint_lookup(__u32 net, const struct sdn_addr *ip)
{
	struct sdn_ep_key k = { .net = net, .ip = *ip };

	return bpf_map_lookup_elem(&sdn_endpoints, &k);
}

static __always_inline struct sdn_remote *
sdn_remote_lookup(__u32 net, const struct sdn_addr *ip)
{
	struct sdn_ep_key k = { .net = net, .ip = *ip };

	return bpf_map_lookup_elem(&sdn_remotes, &k);
}

/* The node whose fabric block holds a net-0 address: an exact sdn_remotes
 * entry first (it may pin one address elsewhere), then the longest block.
 */
static __always_inline struct sdn_remote *
sdn_net0_remote_lookup(const struct sdn_addr *ip)
{
	struct sdn_block_key k = { .prefixlen = 128, .ip = *ip };
	struct sdn_remote *r = sdn_remote_lookup(0, ip);

	if (r)
		return r;
	return bpf_map_lookup_elem(&sdn_node_blocks, &k);
}

/*
 * A pod may only send from an address recorded for its own veth, with its own
 * MAC. Checking the record by {net, src} (not by ifindex) lets a port own
 * several addresses (dual stack) without a list in the port record. The
 * record's flags go to *ep_flags (lib/sever.h).
 */
static __always_inline int sdn_check_source(struct __sk_buff *skb,
					    const struct sdn_pkt *p, __u32 net,
					    __u16 *ep_flags)
{
	struct sdn_endpoint *ep = sdn_endpoint_lookup(net, &p->src);

	if (!ep || ep->ifindex != skb->ifindex)
		return DROP_SPOOF_IP;
	if (!sdn_mac_eq(ep->mac, p->src_mac))
		return DROP_SPOOF_MAC;
	*ep_flags = ep->flags;
	return 0;
}

/*
 * Same-node delivery: hand the packet to the destination veth's egress so that
 * sdn_to_pod runs for it exactly as for a packet from another node (placement
 * independence). bpf_redirect_peer() would be faster but skips that hook.
 */
/*
 * Delivery to a pod of this node, straight into its netns: bpf_redirect_peer
 * hands the packet to the ingress of the pod's end of the veth, skipping the
 * host end's egress (sdn_to_pod) and the per-CPU backlog queue a veth transmit
 * goes through. So the checks sdn_to_pod makes for such traffic are made here:
 * the endpoint was found by {net, dst}, and the CNI records a port's net with
 * its endpoints, so the port is of the packet's net; and a severed pod gets
 * nothing (lib/sever.h). VPC traffic only: net 0
 * must pass the host's conntrack (kube-proxy's NAT). Only valid at tc ingress
 * (sdn_from_pod, sdn_from_overlay). Returns the verdict or a DROP_* reason.
 */
static __always_inline int sdn_deliver_local(struct __sk_buff *skb, __u32 net,
					     const struct sdn_endpoint *ep)
{
	__u8 gw_mac[6];
	int ret;

	/* A migrating VM: a copy to its other launcher's node, before the
	 * severed check (the source left behind relays until it goes).
	 */
	ret = sdn_mig_deliver(skb, net, ep);
	if (ret)
		return ret;
	ret = sdn_sever_to_pod(ep);
	if (ret)
		return ret;
	sdn_gw_mac(gw_mac);
	if (sdn_set_macs(skb, ep->mac, gw_mac) < 0)
		return DROP_REWRITE;
	/* The frame arrived addressed to the gateway or the tunnel MAC; the pod's
	 * stack must take it as its own (no eth_type_trans runs again).
	 */
	if (skb->pkt_type != PACKET_HOST)
		bpf_skb_change_type(skb, PACKET_HOST);
	skb->mark = 0;
	sdn_count_rx(skb, net);
	return bpf_redirect_peer(ep->ifindex, 0);
}

/* The kernel drops frames not addressed to the device; ours are addressed to
 * the gateway MAC, which need not be the host veth's own address.
 */
static __always_inline int sdn_to_host(struct __sk_buff *skb)
{
	if (skb->pkt_type == PACKET_OTHERHOST)
		bpf_skb_change_type(skb, PACKET_HOST);
	return TC_ACT_OK;
}
