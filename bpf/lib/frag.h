/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IP fragments through the fabric bridge. The bridge decides by ports (its
 * conntrack), and only a datagram's first fragment carries them. So the first
 * fragment is translated like a whole packet and its outcome is recorded in
 * sdn_frags under the datagram's identity as it arrived (net, addresses,
 * protocol, IP id); every later fragment looks that up and gets the same
 * addresses. Later fragments carry no L4 header: only the IP header and its
 * checksum change (the L4 checksum, in the first fragment, covers the whole
 * datagram and was fixed there).
 *
 * A later fragment whose first fragment was not seen (reordered, or evicted
 * from the LRU) is dropped as DROP_FRAGMENT: delivering it untranslated would
 * leak fabric addresses into the VPC, and the receiver could not reassemble
 * the datagram anyway.
 *
 * Traffic that stays inside a VPC (or crosses a peering) needs none of this:
 * its decisions depend on addresses only, which every fragment carries.
 *
 * IPv4 only; IPv6 fragments (an extension header) would fill the same key with
 * the 32-bit identification.
 */
#pragma once

#include "common.h"
#include "parse.h"

/* The identity of p's datagram as p arrived on a port of net. */
static __always_inline void sdn_frag_key(struct sdn_frag_key *k,
					 const struct sdn_pkt *p, __u32 net)
{
	k->net = net;
	k->src = p->src;
	k->dst = p->dst;
	k->id = p->frag_id;
	k->proto = p->proto;
}

/* After the first fragment was translated: p holds its new addresses/ports. */
static __always_inline void sdn_frag_note(const struct sdn_frag_key *k,
					  const struct sdn_pkt *p)
{
	struct sdn_frag v = {};

	v.src = p->src;
	v.dst = p->dst;
	v.sport = p->sport;
	v.dport = p->dport;
	bpf_map_update_elem(&sdn_frags, k, &v, BPF_ANY);
}

static __always_inline int sdn_frag_addr4(struct __sk_buff *skb, int off,
					  __be32 from, __be32 to)
{
	if (from == to)
		return 0;
	if (bpf_l3_csum_replace(skb, SDN_OFF_IP4_CSUM, from, to, sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0);
}

/*
 * A later fragment seen on a port of net: rewritten as its first fragment was.
 * On success p holds the new addresses and the first fragment's ports (what
 * the caller's later lookups, e.g. sdn_dnat, key by).
 */
static __always_inline int sdn_frag_follow(struct __sk_buff *skb,
					   struct sdn_pkt *p, __u32 net)
{
	struct sdn_frag_key k = {};
	struct sdn_frag *v;

	if (p->family != 4)
		return DROP_UNSUPPORTED;
	sdn_frag_key(&k, p, net);
	v = bpf_map_lookup_elem(&sdn_frags, &k);
	if (!v)
		return DROP_FRAGMENT;
	if (!sdn_addr_is_v4(&v->src) || !sdn_addr_is_v4(&v->dst))
		return DROP_UNSUPPORTED;
	if (sdn_frag_addr4(skb, SDN_OFF_IP4_SRC, p->src.w[3], v->src.w[3]) ||
	    sdn_frag_addr4(skb, SDN_OFF_IP4_DST, p->dst.w[3], v->dst.w[3]))
		return DROP_REWRITE;
	p->src = v->src;
	p->dst = v->dst;
	p->sport = v->sport;
	p->dport = v->dport;
	return 0;
}
