/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Overlay trust per node (issue 29): a known node may inject into a net only
 * the inner sources it holds, with the groups they hold. sdn_from_overlay
 * checks the outer source against sdn_nodes first (DROP_OVERLAY_SOURCE); this
 * is the check after it, on the inner packet:
 *
 *   net 0: an address of another node's pod block (sdn_net0_remote_lookup)
 *          must be the sender's; a node's tunnel address (sdn_nodes) must be
 *          the sender's own; this node's own addresses (sdn_hf_self), its own
 *          block (CONFIG(own_block), CONFIG(own_block6): its pods and its free
 *          addresses) and its own pods' (sdn_endpoints) are never another
 *          node's to send.
 *   VPC:   {net, src} held by a node (sdn_remotes) must be held by the sender;
 *          one of this node's endpoints, or an address inside the VPC's own
 *          ranges that no node holds, is forged (a wrong VNI lands here too:
 *          the VNI names the source's net). Addresses outside the VPC's ranges
 *          pass: the doors (Floating IP, LoadBalancer, the gateway's NAT)
 *          carry outside sources to the pod's node.
 *          A live migration's other launcher (lib/migrate.h) holds its
 *          VM's address too, and relays copies with any inner source.
 *   tag:   an exact group tag (VXLAN-GBP or Geneve, lib/policy.h) must be the
 *          inner source's groups as this node has them (sdn_sg_members; none
 *          for an address no Port holds, and for net 0).
 *
 * Refusals are counted per sending node and reason in sdn_forged
 * (sdn/trust_maps.h). What a compromised node can still do is in
 * docs/datapath.md, "Overlay trust".
 */
#pragma once

#include "common.h"
#include "endpoint.h"
#include "policy.h"

/* Counts a forged packet under its sender; returns ret. Its own frame, so the
 * key and the zero entry stay off sdn_from_overlay's stack.
 */
static __sdn_noinline int sdn_forged_count(__u32 len,
					   const struct sdn_addr *node, int ret)
{
	struct sdn_forged_key k = {};
	struct sdn_drop_stats zero = {}, *st;

	k.node = *node;
	k.reason = -ret;
	st = bpf_map_lookup_elem(&sdn_forged, &k);
	if (!st) {
		bpf_map_update_elem(&sdn_forged, &k, &zero, BPF_NOEXIST);
		st = bpf_map_lookup_elem(&sdn_forged, &k);
		if (!st)
			return ret;
	}
	st->packets++;
	st->bytes += len;
	return ret;
}

/* Whether addr is inside VPC net's own ranges (not net 0's). */
static __always_inline int sdn_trust_in_vpc(__u32 net,
					    const struct sdn_addr *addr)
{
	struct sdn_xnet_key k = {
		.prefixlen = 32 + 128,
		.net = net,
		.ip = *addr,
	};

	return bpf_map_lookup_elem(&sdn_internal, &k) != NULL;
}

/* Whether addr is inside base/len (the 128-bit form); len 0 is no block. */
static __always_inline int sdn_trust_in_block(const struct sdn_addr *addr,
					      const struct sdn_addr *base,
					      __u32 len)
{
	__u32 i, bits, mask;

	if (!len || len > 128)
		return 0;
#pragma unroll
	for (i = 0; i < 4; i++) {
		if (len <= i * 32)
			break;
		bits = len - i * 32;
		mask = bits >= 32 ? 0xffffffff : ~(0xffffffffU >> bits);
		if ((addr->w[i] ^ base->w[i]) & bpf_htonl(mask))
			return 0;
	}
	return 1;
}

/* Whether addr is in this node's own fabric block, either family. */
static __always_inline int sdn_trust_own_block(const struct sdn_addr *addr)
{
	struct sdn_addr b4 = CONFIG(own_block), b6 = CONFIG(own_block6);

	return sdn_trust_in_block(addr, &b4, CONFIG(own_block_len)) ||
	       sdn_trust_in_block(addr, &b6, CONFIG(own_block6_len));
}

static __always_inline int sdn_trust_src(__u32 net, const struct sdn_addr *src,
					 const struct sdn_addr *outer)
{
	struct sdn_endpoint *ep;
	struct sdn_remote *r;

	if (!net) {
		r = sdn_net0_remote_lookup(src);
		if (r)
			return sdn_addr_eq(&r->node, outer);
		if (bpf_map_lookup_elem(&sdn_nodes, src))
			return sdn_addr_eq(src, outer);
		if (bpf_map_lookup_elem(&sdn_hf_self, src))
			return 0;
		/* A free address of this node's block is no other node's either:
		 * its own pods are in sdn_endpoints, the rest in nobody's map.
		 */
		if (sdn_trust_own_block(src))
			return 0;
		return !sdn_endpoint_lookup(0, src);
	}
	r = sdn_remote_lookup(net, src);
	if (r)
		return sdn_addr_eq(&r->node, outer) ||
		       sdn_mig_holds(net, src, NULL, outer);
	ep = sdn_endpoint_lookup(net, src);
	if (ep)
		return sdn_mig_holds(net, src, ep, outer);
	return !sdn_trust_in_vpc(net, src);
}

/* Whether the tag is what this node knows of src's groups. */
static __always_inline int sdn_trust_tag(__u32 net, const struct sdn_addr *src,
					 __u64 tag)
{
	struct sdn_ep_key k = { .net = net, .ip = *src };
	struct sdn_sg_member *m;
	__u64 groups = 0;

	if (!(tag & SDN_TAG_EXACT))
		return 1;
	if (net) {
		m = bpf_map_lookup_elem(&sdn_sg_members, &k);
		if (m)
			groups = m->groups;
	}
	return (tag & ~(__u64)SDN_TAG_EXACT) == groups;
}

/* 0, or DROP_OVERLAY_FORGED_SRC / _TAG counted under the sender (outer). */
static __always_inline int sdn_overlay_trust(struct __sk_buff *skb,
					     const struct sdn_pkt *p, __u32 net,
					     const struct sdn_addr *outer,
					     __u64 tag)
{
	/* A migrating VM's relayed copy carries its sender's source: the relay
	 * (its other launcher's node) vouches for it (lib/migrate.h).
	 */
	if (!sdn_trust_src(net, &p->src, outer) &&
	    !(net && sdn_mig_relayed(net, &p->dst, outer)))
		return sdn_forged_count(skb->len, outer,
					DROP_OVERLAY_FORGED_SRC);
	if (!sdn_trust_tag(net, &p->src, tag))
		return sdn_forged_count(skb->len, outer,
					DROP_OVERLAY_FORGED_TAG);
	return 0;
}
