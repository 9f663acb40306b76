/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Load balancing inside VPCs: a VPC pod's packet to a ServiceVIP port
 * {net, vip, proto, port} is DNATed to one of the Service's backends, chosen
 * by a consistent hash (a Maglev lookup table per frontend, built by the
 * agent, agent/src/services.rs) and pinned for the flow's life in
 * sdn_lb_flows, so a new table never moves an established flow. The reply is
 * reverse-NATed (source back to the VIP) by sdn_lb_reverse wherever it meets
 * the client's node: sdn_from_pod when the backend is on that node,
 * sdn_from_overlay when it comes from another. Maps: include/sdn/lb_maps.h.
 *
 * A backend calling its own Service and given itself (hairpin) is SNATed to
 * the hairpin address: its reply then leaves its netns towards the gateway and
 * comes back through sdn_lb_reverse, which restores both addresses.
 *
 * TCP and UDP only; other protocols to a VIP find no frontend and are treated
 * as any address that is no endpoint.
 */
#pragma once

#include "common.h"
#include "nat.h"
#include "nat6.h"
#include "parse.h"

/* The hairpin source: 169.254.42.1, and for IPv6 100::2a01 (RFC 6666's
 * discard-only prefix: outside every pod's on-link routes, so the reply goes
 * to the default gateway, i.e. through sdn_from_pod, without neighbour
 * discovery for it).
 */
#define SDN_LB_HAIRPIN4		__builtin_bswap32(0xa9fe2a01)
#define SDN_LB_HAIRPIN6_W0	__builtin_bswap32(0x01000000)
#define SDN_LB_HAIRPIN6_W3	__builtin_bswap32(0x00002a01)

#define SDN_NSEC_PER_SEC	1000000000ULL

static __always_inline void sdn_lb_hairpin_addr(struct sdn_addr *a, __u8 family)
{
	if (family == 4) {
		sdn_addr_from_v4(a, SDN_LB_HAIRPIN4);
		return;
	}
	a->w[0] = SDN_LB_HAIRPIN6_W0;
	a->w[1] = 0;
	a->w[2] = 0;
	a->w[3] = SDN_LB_HAIRPIN6_W3;
}

static __always_inline void sdn_lb_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&sdn_lb_stats, &idx);

	if (c)
		*c += 1;
}

/* murmur3's 32-bit block and finaliser: cheap, and mixes every input bit. */
static __always_inline __u32 sdn_lb_mix(__u32 h, __u32 v)
{
	v *= 0xcc9e2d51;
	v = (v << 15) | (v >> 17);
	v *= 0x1b873593;
	h ^= v;
	h = (h << 13) | (h >> 19);
	return h * 5 + 0xe6546b64;
}

/* murmur3's finaliser: every input bit reaches every output bit. */
static __always_inline __u32 sdn_lb_fmix(__u32 h)
{
	h ^= h >> 16;
	h *= 0x85ebca6b;
	h ^= h >> 13;
	h *= 0xc2b2ae35;
	h ^= h >> 16;
	return h;
}

static __always_inline __u32 sdn_lb_hash(const struct sdn_pkt *p, __u32 svc,
					 int with_port)
{
	__u32 h = svc;

	h = sdn_lb_mix(h, p->src.w[0]);
	h = sdn_lb_mix(h, p->src.w[1]);
	h = sdn_lb_mix(h, p->src.w[2]);
	h = sdn_lb_mix(h, p->src.w[3]);
	if (with_port)
		h = sdn_lb_mix(h, ((__u32)p->sport << 16) | p->proto);
	return sdn_lb_fmix(h);
}

/* The backend id of the table slot the hash picks; 0 if there is none. The
 * frontend's flags say which of the two tables it has (lb_maps.h).
 */
static __always_inline __u32 sdn_lb_pick(const struct sdn_lb_svc *svc, __u32 h)
{
	struct sdn_lb_chunk_key ck;
	struct sdn_lb_chunk *c;
	struct sdn_lb_table *t;
	__u32 slot;

	if (svc->flags & SDN_LB_SVC_F_BIG) {
		slot = h % SDN_LB_BIG_SLOTS;
		ck.id = svc->id;
		ck.chunk = slot / SDN_LB_CHUNK_SLOTS;
		slot = slot % SDN_LB_CHUNK_SLOTS;
		/* The verifier does not bound a modulo: hide it from the
		 * compiler so the explicit check below survives.
		 */
		asm volatile("" : "+r"(slot));
		c = bpf_map_lookup_elem(&sdn_lb_mag_big, &ck);
		if (!c || slot >= SDN_LB_CHUNK_SLOTS)
			return 0;
		return c->slot[slot];
	}
	t = bpf_map_lookup_elem(&sdn_lb_maglev, &svc->id);
	slot = h % SDN_LB_SLOTS;
	asm volatile("" : "+r"(slot));
	if (!t || slot >= SDN_LB_SLOTS)
		return 0;
	return t->slot[slot];
}

/* A new flow's backend: the affinity entry's while it is fresh (ClientIP),
 * else the table's. Returns the backend id, 0 for none.
 */
static __always_inline __u32 sdn_lb_select(const struct sdn_pkt *p, __u32 net,
					   const struct sdn_lb_svc *svc)
{
	struct sdn_lb_aff_key ak = { .net = net, .client = p->src, .svc = svc->id };
	struct sdn_lb_aff *a, na = {};
	__u64 now;

	if (!svc->affinity)
		return sdn_lb_pick(svc, sdn_lb_hash(p, svc->id, 1));
	now = bpf_ktime_get_ns();
	a = bpf_map_lookup_elem(&sdn_lb_affinity, &ak);
	if (a && now - a->seen_ns < svc->affinity * SDN_NSEC_PER_SEC &&
	    bpf_map_lookup_elem(&sdn_lb_backends, &a->backend)) {
		a->seen_ns = now;
		return a->backend;
	}
	/* A client's first pick: without the source port (one client, one
	 * backend). After its affinity expired: with it, as without affinity,
	 * so the client may move (kube-proxy picks anew; the address alone
	 * would only give the same backend back).
	 */
	na.backend = sdn_lb_pick(svc, sdn_lb_hash(p, svc->id, a != NULL));
	na.seen_ns = now;
	if (na.backend)
		bpf_map_update_elem(&sdn_lb_affinity, &ak, &na, BPF_ANY);
	return na.backend;
}

static __always_inline int sdn_lb_rewrite(struct __sk_buff *skb,
					  const struct sdn_pkt *p, int is_src,
					  const struct sdn_addr *from,
					  const struct sdn_addr *to)
{
	if (p->family == 4)
		return sdn_nat4_addr(skb, p, is_src, from->w[3], to->w[3]);
	return sdn_nat6_addr(skb, p, is_src, from, to);
}

/*
 * A client's packet to a frontend of net `net` (the client's own net, or a
 * peered net the caller resolved): DNAT to the flow's backend, choosing and
 * pinning it on the first packet. *p is updated to the new addressing.
 * Returns 0 (not a frontend, or rewritten) or a DROP_* reason.
 */
static __sdn_noinline int sdn_lb_forward(struct __sk_buff *skb,
					  struct sdn_pkt *p, __u32 client_net,
					  __u32 net)
{
	struct sdn_lb_key k = {
		.net = net,
		.vip = p->dst,
		.port = p->dport,
		.proto = p->proto,
	};
	struct sdn_lb_backend *be;
	struct sdn_lb_flow *f;
	struct sdn_lb_work *w;
	struct sdn_lb_svc *svc;
	struct sdn_addr hp;
	__u32 id, zero = 0;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return 0;
	if (p->frag == SDN_FRAG_LATER)
		return 0;
	svc = bpf_map_lookup_elem(&sdn_lb_svc, &k);
	if (!svc)
		return 0;
	w = bpf_map_lookup_elem(&sdn_lb_work, &zero);
	if (!w)
		return DROP_REWRITE;
	__builtin_memset(w, 0, sizeof(*w));
	w->fk.net = client_net;
	w->fk.client = p->src;
	w->fk.vip = p->dst;
	w->fk.client_port = p->sport;
	w->fk.vip_port = p->dport;
	w->fk.proto = p->proto;

	f = bpf_map_lookup_elem(&sdn_lb_flows, &w->fk);
	if (f) {
		w->nf = *f;
	} else {
		if (!svc->count) {
			sdn_lb_count(SDN_LB_STAT_MISSES);
			return DROP_VIP_NO_BACKEND;
		}
		id = sdn_lb_select(p, client_net, svc);
		be = id ? bpf_map_lookup_elem(&sdn_lb_backends, &id) : NULL;
		if (!be) {
			sdn_lb_count(SDN_LB_STAT_MISSES);
			return DROP_VIP_NO_BACKEND;
		}
		w->nf.backend = be->addr;
		w->nf.net = be->net;
		w->nf.backend_port = be->port;
		if (be->net == client_net && sdn_addr_eq(&be->addr, &p->src))
			w->nf.flags = SDN_LB_F_HAIRPIN;
		bpf_map_update_elem(&sdn_lb_flows, &w->fk, &w->nf, BPF_ANY);

		w->rk.net = w->nf.net;
		w->rk.backend = w->nf.backend;
		w->rk.backend_port = w->nf.backend_port;
		w->rk.client_port = p->sport;
		w->rk.proto = p->proto;
		if (w->nf.flags & SDN_LB_F_HAIRPIN)
			sdn_lb_hairpin_addr(&w->rk.client, p->family);
		else
			w->rk.client = p->src;
		w->rv.vip = p->dst;
		w->rv.vip_port = p->dport;
		w->rv.client = p->src;
		bpf_map_update_elem(&sdn_lb_rev, &w->rk, &w->rv, BPF_ANY);
		sdn_lb_count(SDN_LB_STAT_FLOWS);
	}

	if (sdn_lb_rewrite(skb, p, 0, &p->dst, &w->nf.backend) < 0 ||
	    sdn_nat4_port(skb, p, 0, p->dport, w->nf.backend_port) < 0)
		return DROP_REWRITE;
	p->dst = w->nf.backend;
	p->dport = w->nf.backend_port;
	if (w->nf.flags & SDN_LB_F_HAIRPIN) {
		sdn_lb_hairpin_addr(&hp, p->family);
		if (sdn_lb_rewrite(skb, p, 1, &p->src, &hp) < 0)
			return DROP_REWRITE;
		p->src = hp;
	}
	sdn_lb_count(SDN_LB_STAT_SELECTIONS);
	return 0;
}

/*
 * A backend's reply (net `net` is the backend's): if it answers a flow this
 * node balanced, its source becomes the VIP again (and for a hairpin flow its
 * destination the client). *p is updated. Returns 1 when it was rewritten, 0
 * when it answers no balanced flow, or a DROP_* reason (< 0).
 */
static __sdn_noinline int sdn_lb_reverse(struct __sk_buff *skb,
					  struct sdn_pkt *p, __u32 net)
{
	struct sdn_lb_rev_key rk = {
		.net = net,
		.backend = p->src,
		.client = p->dst,
		.backend_port = p->sport,
		.client_port = p->dport,
		.proto = p->proto,
	};
	struct sdn_lb_rev *rv, r;

	if (p->proto != IPPROTO_TCP && p->proto != IPPROTO_UDP)
		return 0;
	if (p->frag == SDN_FRAG_LATER)
		return 0;
	rv = bpf_map_lookup_elem(&sdn_lb_rev, &rk);
	if (!rv)
		return 0;
	r = *rv;
	if (sdn_lb_rewrite(skb, p, 1, &p->src, &r.vip) < 0 ||
	    sdn_nat4_port(skb, p, 1, p->sport, r.vip_port) < 0)
		return DROP_REWRITE;
	p->src = r.vip;
	p->sport = r.vip_port;
	if (!sdn_addr_eq(&r.client, &p->dst)) {
		if (sdn_lb_rewrite(skb, p, 0, &p->dst, &r.client) < 0)
			return DROP_REWRITE;
		p->dst = r.client;
	}
	return 1;
}

/* sdn_from_pod, VPC pod of net `net`, before delivery: a reply of a balanced
 * flow is reverse-NATed, a packet to a frontend of the pod's own net DNATed.
 */
static __always_inline int sdn_lb_from_pod(struct __sk_buff *skb,
					   struct sdn_pkt *p, __u32 net)
{
	int ret = sdn_lb_reverse(skb, p, net);

	if (ret < 0)
		return ret;
	return sdn_lb_forward(skb, p, net, net);
}
