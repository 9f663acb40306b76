/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The policy layers' decision (issue 14; docs/policy.md): NetworkPolicy on the
 * default network and SecurityGroups in VPC nets, on one connection table
 * (lib/pct.h). The rule lookups are those of the `policy` crate's verdict.rs,
 * which the datapath tests compare against case by case: a peer is resolved
 * to a token (its NP identity, or its net and group bitmap), then
 * sdn_pol_rules is asked for {layer, dir, subject, peer, proto, port} with
 * the peer's own token, its CIDR class (sdn_pol_cidrs), and SDN_PEER_ANY.
 *
 * Every evaluation decides the whole flow, the source's egress AND the
 * destination's ingress, from this node's maps, wherever it runs: the hooks
 * of one node share the connection table, so an entry created by one hook
 * (the source's from_pod) must already hold for the other (the destination's
 * to_pod on the same node). A node without a remote subject's rules finds it
 * open, and that subject's own node decides it.
 *
 * Where it runs:
 *   NP  sdn_from_pod (net 0, the source's egress side) and sdn_to_pod (net 0,
 *       the destination's delivery: the host routes same-node traffic there
 *       too, so there is no same-node shortcut around it);
 *   SG  wherever a VPC packet is delivered to a local pod (sdn_from_pod,
 *       sdn_from_overlay) and where a local pod's packet is encapsulated
 *       (so that each node's table sees both directions of its pods' flows);
 *   HF  lib/hostfw.h: sdn_from_uplink (to this node) and sdn_host_out (the
 *       node's own packets leaving by the uplink or the tunnel device).
 * A flow is policed (and tracked) when one of its ends is a subject: an NP
 * identity some policy isolates (in either direction: the net-0 fast path
 * spares the others the table), or an endpoint with SecurityGroups. Other
 * flows pay two lookups, and the isolation markers of those ends that have an
 * identity. Refusals are also counted per layer and net (lib/pol_drops.h).
 */
#pragma once

#include "common.h"
#include "overlay.h"
#include "parse.h"
#include "pct.h"
#include "pol_drops.h"

#define SDN_PEER_ALL		(1ULL << SDN_PEER_ALL_BIT)

/*
 * The source's groups on the wire (CONFIG(tunnel_groups)), as a tag: bit 0 set
 * means the tag is exact, bits 1..62 being the source's groups (bit 0 and bit
 * 63 are never groups); 0 means "not carried", and the receiver looks the
 * source up in sdn_sg_members.
 *   VXLAN-GBP: the 16-bit policy id is the tag's low 16 bits, so it is exact
 *   only for a source whose groups are all below 16 (ids are per VPC and
 *   dense from 1: a VPC of up to 15 groups always travels exactly); other
 *   sources send 0.
 *   Geneve: one option of our own class (experimental range) holding the
 *   whole tag, always exact.
 */
#define SDN_TAG_EXACT		1
#define SDN_GENEVE_CLASS	0xfff1	/* RFC 8926 experimental class range */
#define SDN_GENEVE_TYPE_GROUPS	0x01

/* struct geneve_opt with 8 bytes of data (length counts 4-byte words). */
struct sdn_geneve_groups {
	__be16 opt_class;
	__u8 type;
	__u8 length;
	__be32 hi;
	__be32 lo;
};

static __always_inline __u64 sdn_sg_tag_of(__u64 groups)
{
	return groups | SDN_TAG_EXACT;
}

static __always_inline __u32 sdn_sg_gbp_encode(__u64 groups)
{
	if (groups >> 16)
		return 0;
	return sdn_sg_tag_of(groups) & 0xffff;
}

/* The SG check's state over the subject's groups (bpf_loop's context, which
 * must live on the stack).
 */
struct sdn_sg_loop {
	__u64 mine;
	__u64 theirs;
	__u32 token;
	__u32 cls;
	__u32 rule;
	__u32 ok;
};

/*
 * The policy check's working set, in sdn_pol_work (per-CPU) rather than on
 * the stack: sdn_to_pod's own frame is 408 bytes, and the flow, its key, a
 * new entry and the lookup keys would take the combined stack past 512.
 */
struct sdn_pol_scratch {
	struct sdn_flow f;
	struct sdn_pct_key k;
	struct sdn_pct n;
	struct sdn_prule_key rk;
	union {
		struct sdn_pcidr_key cidr;
		struct sdn_lb_flow_key lb;
		struct sdn_lbg_rev_key lbg;
		struct sdn_block_key block;
		struct sdn_ep_key ep;
		struct sdn_xnet_key xnet;
		struct sdn_geneve_groups geneve;
		__u32 gbp;
	} u;
	/* The first matching admin rule of sdn_admin_first: its ordinal and
	 * action (SDN_ACTION_*).
	 */
	__u32 adm_rule;
	__u32 adm_action;
	/* In a HostFirewall hook: its direction + 1 (SDN_DIR_*), the end
	 * whose link-local address is the node's (sdn_hf_check); else 0.
	 */
	__u8 hf_hook;
};
_Static_assert(sizeof(struct sdn_pol_scratch) <= sizeof(struct sdn_pol_work),
	       "sdn_pol_work holds the policy scratch");

static __always_inline struct sdn_pol_scratch *sdn_pol_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&sdn_pol_work, &zero);
}

/* sdn_sg_members' groups of {net, ip}; 0 for an ungrouped endpoint. */
static __always_inline __u64 sdn_sg_groups(struct sdn_pol_scratch *w, __u32 net,
					   const struct sdn_addr *ip)
{
	struct sdn_sg_member *m;

	w->u.ep.net = net;
	w->u.ep.ip = *ip;
	m = bpf_map_lookup_elem(&sdn_sg_members, &w->u.ep);
	return m ? m->groups : 0;
}

/* verdict.rs class_of(): the peer's CIDR class in a scope, as a peer token;
 * 0 (SDN_PEER_ANY, never a class token) when no class holds it.
 */
static __always_inline __u32 sdn_pol_class(struct sdn_pol_scratch *w,
					   __u32 scope, __u8 layer,
					   const struct sdn_addr *ip)
{
	struct sdn_pcidr *c;

	__builtin_memset(&w->u.cidr, 0, sizeof(w->u.cidr));
	w->u.cidr.prefixlen = 64 + 128;
	w->u.cidr.scope = scope;
	w->u.cidr.layer = layer;
	w->u.cidr.v6 = !sdn_addr_is_v4(ip);
	w->u.cidr.ip = *ip;
	c = bpf_map_lookup_elem(&sdn_pol_cidrs, &w->u.cidr);
	return c ? SDN_PEER_CLASS | c->class : 0;
}

/* One sdn_pol_rules lookup of k with this peer token: allowed when the
 * longest match's peers meet want.
 */
static __always_inline int sdn_pol_try(struct sdn_prule_key *k, __u32 peer,
				       __u64 want, __u32 *rule)
{
	struct sdn_prule *v;

	k->peer = peer;
	v = bpf_map_lookup_elem(&sdn_pol_rules, k);
	if (!v || !(v->peers & want))
		return 0;
	*rule = v->rule;
	return 1;
}

/* verdict.rs admit(): the peer's own token (when want is not 0), its class
 * (when cls is not 0), any peer.
 */
static __always_inline int sdn_pol_admit(struct sdn_prule_key *k, __u32 token,
					 __u64 want, __u32 cls, __u32 *rule)
{
	if (want && sdn_pol_try(k, token, want, rule))
		return 1;
	if (cls && sdn_pol_try(k, cls, SDN_PEER_ALL, rule))
		return 1;
	return sdn_pol_try(k, SDN_PEER_ANY, SDN_PEER_ALL, rule);
}

/* verdict.rs first_admin(): the first matching rule of admin tier `layer` for
 * the key's subject, direction, protocol and port: the lowest ordinal over the
 * peer's identity (token, when not 0), its class (cls, when not 0) and any
 * peer. 1 with w->adm_rule and w->adm_action set, or 0 when none matches.
 */
static __always_inline int sdn_admin_first(struct sdn_pol_scratch *w,
					   __u8 layer, __u32 token, __u32 cls)
{
	struct sdn_prule_key *k = &w->rk;
	struct sdn_prule *v;
	int found = 0;

	k->layer = layer;
	if (token) {
		k->peer = token;
		v = bpf_map_lookup_elem(&sdn_pol_rules, k);
		if (v) {
			w->adm_rule = v->rule;
			w->adm_action = v->flags;
			found = 1;
		}
	}
	if (cls) {
		k->peer = cls;
		v = bpf_map_lookup_elem(&sdn_pol_rules, k);
		if (v && (!found || v->rule < w->adm_rule)) {
			w->adm_rule = v->rule;
			w->adm_action = v->flags;
			found = 1;
		}
	}
	k->peer = SDN_PEER_ANY;
	v = bpf_map_lookup_elem(&sdn_pol_rules, k);
	if (v && (!found || v->rule < w->adm_rule)) {
		w->adm_rule = v->rule;
		w->adm_action = v->flags;
		found = 1;
	}
	return found;
}

/*
 * verdict.rs np_dir(): one direction of the default network's tiers. The
 * subject's isolation marker says which apply: its ANP rules first (the first
 * match decides; Pass ends the tier), then NetworkPolicy when one isolates it,
 * else the BANP's first match, else open. 0 open or admitted (*rule: the NP
 * rule id or the admin rule's ordinal), else the deciding tier's DROP_POL_*.
 */
static __always_inline int sdn_np_check(struct sdn_pol_scratch *w, __u8 dir,
					const struct sdn_addr *me,
					const struct sdn_addr *peer, __u32 *rule)
{
	struct sdn_prule_key *k = &w->rk;
	struct sdn_np_ident *id = bpf_map_lookup_elem(&sdn_np_idents, me);
	struct sdn_prule *m;
	__u32 token = 0, cls, tiers;
	__u64 want = 0;

	if (!id)
		return 0;
	__builtin_memset(k, 0, sizeof(*k));
	k->prefixlen = SDN_PRULE_FIXED_BITS + 16;
	k->subject = id->id;
	k->layer = SDN_LAYER_NP;
	k->dir = dir;
	k->peer = SDN_PEER_ISOLATED;
	/* No marker: no tier selects it in this direction, open. */
	m = bpf_map_lookup_elem(&sdn_pol_rules, k);
	if (!m)
		return 0;
	tiers = m->flags;
	id = bpf_map_lookup_elem(&sdn_np_idents, peer);
	if (id) {
		token = id->id;
		want = SDN_PEER_ALL;
	}
	cls = sdn_pol_class(w, 0, SDN_LAYER_NP, peer);
	k->proto = w->f.proto;
	k->port = w->f.rport;
	if ((tiers & SDN_MARK_ANP) &&
	    sdn_admin_first(w, SDN_LAYER_ANP, token, cls)) {
		if (w->adm_action == SDN_ACTION_ALLOW) {
			*rule = w->adm_rule;
			return 0;
		}
		/* Deny, or an action this code does not know: closed. */
		if (w->adm_action != SDN_ACTION_PASS)
			return DROP_POL_ANP;
	}
	if (!(tiers & SDN_MARK_NO_NP)) {
		k->layer = SDN_LAYER_NP;
		return sdn_pol_admit(k, token, want, cls, rule) ? 0 : DROP_POL_NP;
	}
	if ((tiers & SDN_MARK_BANP) &&
	    sdn_admin_first(w, SDN_LAYER_BANP, token, cls)) {
		if (w->adm_action == SDN_ACTION_ALLOW) {
			*rule = w->adm_rule;
			return 0;
		}
		if (w->adm_action != SDN_ACTION_PASS)
			return DROP_POL_BANP;
	}
	return 0;
}

/* One group of the subject (bpf_loop callback): the first admitting group
 * ends the loop.
 */
static long sdn_sg_group(__u64 i, void *ctx)
{
	struct sdn_sg_loop *l = ctx;
	struct sdn_pol_scratch *w;
	__u32 g = i + 1;

	if (!(l->mine & (1ULL << g)))
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return 1;
	w->rk.subject = g;
	if (!sdn_pol_admit(&w->rk, l->token, l->theirs, l->cls, &l->rule))
		return 0;
	l->ok = 1;
	return 1;
}

/* verdict.rs sg()'s check for one direction, over the subject's groups. */
static __always_inline int sdn_sg_check(struct sdn_pol_scratch *w, __u8 dir,
					__u32 *rule)
{
	const struct sdn_flow *f = &w->f;
	int egress = dir == SDN_DIR_EGRESS;
	__u32 net = egress ? f->src_net : f->dst_net;
	struct sdn_sg_loop l = {
		.mine = egress ? f->src_groups : f->dst_groups,
		.theirs = egress ? f->dst_groups : f->src_groups,
		.token = egress ? f->dst_net : f->src_net,
	};

	if (!l.mine)
		return 1;
	l.cls = sdn_pol_class(w, net, SDN_LAYER_SG, egress ? &f->dst : &f->src);
	__builtin_memset(&w->rk, 0, sizeof(w->rk));
	w->rk.prefixlen = SDN_PRULE_FIXED_BITS + 16;
	w->rk.net = net;
	w->rk.layer = SDN_LAYER_SG;
	w->rk.dir = dir;
	w->rk.proto = f->proto;
	w->rk.port = f->rport;
	/* Group ids are 1..62: bit 0 and bit 63 are never groups. */
	bpf_loop(62, sdn_sg_group, &l, 0);
	if (l.ok)
		*rule = l.rule;
	return l.ok;
}

/*
 * A first packet from a pod to an address that is cluster-internal but no pod,
 * no node and no other node's pod block: a Service's virtual IP, which the
 * host DNATs after sdn_from_pod. Its egress is not decided there, where the
 * backend is unknown: the flow enters the table (so that its replies, un-NATed
 * by the host, pass) and the backend's sdn_to_pod decides the flow with the
 * client's egress and its own ingress (every node knows every pod's
 * identity).
 */
static __always_inline int sdn_np_service(struct sdn_pol_scratch *w)
{
	const struct sdn_addr *dst = &w->f.dst;

	w->u.block.prefixlen = 128;
	w->u.block.ip = *dst;
	if (bpf_map_lookup_elem(&sdn_np_idents, dst) ||
	    bpf_map_lookup_elem(&sdn_hf_self, dst) ||
	    bpf_map_lookup_elem(&sdn_nodes, dst) ||
	    bpf_map_lookup_elem(&sdn_node_blocks, &w->u.block))
		return 0;
	/* sdn_is_internal(0, dst), with its key out of the stack. */
	w->u.xnet.prefixlen = 32 + 128;
	w->u.xnet.net = 0;
	w->u.xnet.ip = *dst;
	return bpf_map_lookup_elem(&sdn_internal, &w->u.xnet) != NULL;
}

/* NP: an identity (sdn_np_idents' value, or NULL) is isolated in some
 * direction, some policy selecting it: its isolation marker in either
 * direction.
 */
static __always_inline int sdn_np_isolated(struct sdn_pol_scratch *w,
					   const struct sdn_np_ident *id)
{
	if (!id)
		return 0;
	__builtin_memset(&w->rk, 0, sizeof(w->rk));
	w->rk.prefixlen = SDN_PRULE_FIXED_BITS + 16;
	w->rk.subject = id->id;
	w->rk.layer = SDN_LAYER_NP;
	w->rk.peer = SDN_PEER_ISOLATED;
	w->rk.dir = SDN_DIR_INGRESS;
	if (bpf_map_lookup_elem(&sdn_pol_rules, &w->rk))
		return 1;
	w->rk.dir = SDN_DIR_EGRESS;
	return bpf_map_lookup_elem(&sdn_pol_rules, &w->rk) != NULL;
}

/* Link-local (fe80::/10). Never forwarded: one arriving at a HostFirewall
 * hook as the destination (a neighbour's packet on the uplink, a pod's to its
 * veth's host end), or leaving the node as the source, is the node's own, so
 * the hooks count it as such besides sdn_hf_self.
 */
static __always_inline int sdn_hf_link_local(const struct sdn_addr *a)
{
	return a->b[0] == 0xfe && (a->b[1] & 0xc0) == 0x80;
}

/* verdict.rs hf()'s check for one direction: `me` is this node's subject end.
 * 1 open (not one of this node's addresses, or the direction not armed) or
 * admitted, 0 denied. HostFirewall peers have no token: their CIDR class
 * (scope 0), then any.
 */
static __always_inline int sdn_hf_check(struct sdn_pol_scratch *w, __u8 dir,
					__u32 armed,
					const struct sdn_addr *me,
					const struct sdn_addr *peer, __u32 *rule)
{
	__u32 flag = dir == SDN_DIR_INGRESS ? SDN_POL_F_HF_INGRESS :
					      SDN_POL_F_HF_EGRESS;

	if (!(armed & flag))
		return 1;
	if (!bpf_map_lookup_elem(&sdn_hf_self, me) &&
	    !(w->hf_hook == dir + 1 && sdn_hf_link_local(me)))
		return 1;
	__builtin_memset(&w->rk, 0, sizeof(w->rk));
	w->rk.prefixlen = SDN_PRULE_FIXED_BITS + 16;
	w->rk.layer = SDN_LAYER_HF;
	w->rk.dir = dir;
	w->rk.proto = w->f.proto;
	w->rk.port = w->f.rport;
	return sdn_pol_admit(&w->rk, 0, 0,
			     sdn_pol_class(w, 0, SDN_LAYER_HF, peer), rule);
}

/* The armed HostFirewall directions (SDN_POL_F_HF_*) of sdn_pol_state. */
static __always_inline __u32 sdn_hf_armed(void)
{
	struct sdn_pol_state *st;
	__u32 zero = 0;

	st = bpf_map_lookup_elem(&sdn_pol_state, &zero);
	return st ? st->flags & (SDN_POL_F_HF_INGRESS | SDN_POL_F_HF_EGRESS) : 0;
}

/* verdict.rs hf(): the source's egress, then the destination's ingress, each
 * when it is one of this node's addresses and the direction is armed.
 */
static __always_inline int sdn_hf_eval(struct sdn_pol_scratch *w, __u32 *rule)
{
	__u32 armed = sdn_hf_armed();

	if (!sdn_hf_check(w, SDN_DIR_EGRESS, armed, &w->f.src, &w->f.dst, rule))
		return DROP_POL_HF_EGRESS;
	if (!sdn_hf_check(w, SDN_DIR_INGRESS, armed, &w->f.dst, &w->f.src, rule))
		return DROP_POL_HF_INGRESS;
	return 0;
}

/*
 * The rules' verdict on the flow w->f in `layer`: the source's egress, then
 * the destination's ingress. 0 when both admit (*rule: the last admitting
 * rule), else the layer's DROP_*. The node's own addresses (sdn_hf_self)
 * reaching its pods pass NetworkPolicy ingress: kubelet probes. A Service
 * address is left to the backend (sdn_np_service).
 */
static __always_inline int sdn_pol_eval(struct sdn_pol_scratch *w, __u32 layer,
					__u32 *rule)
{
	int ret;

	if (layer == SDN_LAYER_HF)
		return sdn_hf_eval(w, rule);
	if (layer == SDN_LAYER_NP) {
		if (sdn_np_service(w))
			return 0;
		ret = sdn_np_check(w, SDN_DIR_EGRESS, &w->f.src, &w->f.dst, rule);
		if (ret)
			return ret;
		if (bpf_map_lookup_elem(&sdn_hf_self, &w->f.src))
			return 0;
		return sdn_np_check(w, SDN_DIR_INGRESS, &w->f.dst, &w->f.src, rule);
	}
	if (!sdn_sg_check(w, SDN_DIR_EGRESS, rule))
		return DROP_POL_SG;
	if (!sdn_sg_check(w, SDN_DIR_INGRESS, rule))
		return DROP_POL_SG;
	return 0;
}

/*
 * NP: a TCP segment that cannot open a flow and has no live entry, with an
 * end isolated (sdn_np_police passed the others by). Its flow may have begun
 * while neither end was isolated, when the net-0 fast path kept no entry, or
 * before its pod had an identity here: cutting it because the table never
 * saw it would cut connections a new policy still admits. Who opened it is
 * unknown, so it is admitted only when the rules admit it in both
 * orientations (never a flow refused in its true one), and then entered as
 * established, initiated by this packet's sender; else DROP_POL_CT_INVALID.
 */
static __always_inline int sdn_np_adopt(struct sdn_pol_scratch *w, int from_b,
					__u64 now, __u32 gen)
{
	int ret;

	w->n.rule = 0;
	if (sdn_pol_eval(w, SDN_LAYER_NP, &w->n.rule))
		return DROP_POL_CT_INVALID;
	sdn_flow_reverse(&w->f);
	ret = sdn_pol_eval(w, SDN_LAYER_NP, &w->n.rule);
	sdn_flow_reverse(&w->f);
	if (ret)
		return DROP_POL_CT_INVALID;
	sdn_pct_new(&w->n, &w->f, from_b, now, gen, w->n.rule);
	w->n.tcp = SDN_TCP_ESTABLISHED;
	w->n.flags |= SDN_PCT_F_REPLIED;
	w->n.layers = 1 << SDN_LAYER_NP;
	sdn_pct_step(&w->n, &w->f, from_b, now, gen);
	bpf_map_update_elem(&sdn_pol_ct, &w->k, &w->n, BPF_ANY);
	return 0;
}

/*
 * One packet of a policed flow (w->f) through the connection table (ct.rs
 * step): 0 to pass, or a DROP_*. A first packet is evaluated and, admitted,
 * opens an entry; an entry from an older generation is re-checked in the
 * flow's first direction and deleted when no longer admitted; an ICMP error
 * passes only with a live entry of the flow it quotes.
 */
static __always_inline int sdn_pol_flow(struct sdn_pol_scratch *w, __u32 layer)
{
	struct sdn_pol_state *st;
	__u64 now = bpf_ktime_get_ns();
	__u32 zero = 0, gen = 0;
	int from_b, init_b, ret;
	struct sdn_pct *e;

	st = bpf_map_lookup_elem(&sdn_pol_state, &zero);
	if (st)
		gen = st->generation;
	from_b = sdn_pct_key_of(&w->f, &w->k);
	e = bpf_map_lookup_elem(&sdn_pol_ct, &w->k);
	if (w->f.icmp_err)
		return e && e->expires > now ? 0 : DROP_POL_CT_INVALID;

	switch (sdn_pct_step(e, &w->f, from_b, now, gen)) {
	case SDN_PCT_PASS:
		return 0;
	case SDN_PCT_INVALID:
		/* ct.rs drops it; NP decides it as a flow the table never saw. */
		if (layer == SDN_LAYER_NP)
			return sdn_np_adopt(w, from_b, now, gen);
		/* HF: a flow that began before the firewall was armed (or
		 * before this entry's eviction) passes packet by packet when
		 * the rules admit it in its own direction: arming a firewall
		 * that admits SSH does not cut the session that installs it.
		 */
		if (layer == SDN_LAYER_HF) {
			w->n.rule = 0;
			return sdn_hf_eval(w, &w->n.rule) ? DROP_POL_CT_INVALID : 0;
		}
		return DROP_POL_CT_INVALID;
	case SDN_PCT_RECHECK:
		if (!e)
			return DROP_POL_CT_INVALID;
		init_b = !!(e->flags & SDN_PCT_F_INIT_B);
		if (from_b != init_b)
			sdn_flow_reverse(&w->f);
		ret = sdn_pol_eval(w, layer, &w->n.rule);
		if (from_b != init_b)
			sdn_flow_reverse(&w->f);
		if (ret) {
			bpf_map_delete_elem(&sdn_pol_ct, &w->k);
			return DROP_POL_REVOKED;
		}
		e->generation = gen;
		e->rule = w->n.rule;
		sdn_pct_step(e, &w->f, from_b, now, gen);
		return 0;
	}
	w->n.rule = 0;
	ret = sdn_pol_eval(w, layer, &w->n.rule);
	if (ret)
		return ret;
	sdn_pct_new(&w->n, &w->f, from_b, now, gen, w->n.rule);
	w->n.layers = 1 << layer;
	bpf_map_update_elem(&sdn_pol_ct, &w->k, &w->n, BPF_ANY);
	return 0;
}

/*
 * The connection-table step alone, for a packet whose flow has a live entry of
 * the current generation: 1 when it passed (the entry stepped), 0 when the
 * flow needs the whole path (no entry, an expired or older one, an ICMP
 * error). A passing step is the verdict sdn_pol_flow would reach for it.
 */
static __always_inline int sdn_pol_established(struct sdn_pol_scratch *w)
{
	struct sdn_pol_state *st;
	__u32 zero = 0, gen = 0;
	struct sdn_pct *e;
	int from_b;

	if (w->f.icmp_err)
		return 0;
	st = bpf_map_lookup_elem(&sdn_pol_state, &zero);
	if (st)
		gen = st->generation;
	from_b = sdn_pct_key_of(&w->f, &w->k);
	e = bpf_map_lookup_elem(&sdn_pol_ct, &w->k);
	if (!e || e->generation != gen)
		return 0;
	return sdn_pct_step(e, &w->f, from_b, bpf_ktime_get_ns(), gen) ==
	       SDN_PCT_PASS;
}

/*
 * A backend's reply that sdn_lb_reverse already gave the VIP as source (it
 * does so before delivery, on the client's node): policed as the backend's,
 * the view its flow's entry was made with (the client's packet, DNATed).
 */
static __always_inline void sdn_sg_unbalance(struct sdn_pol_scratch *w)
{
	struct sdn_flow *f = &w->f;
	struct sdn_lb_flow *b;

	if (f->proto != IPPROTO_TCP && f->proto != IPPROTO_UDP)
		return;
	__builtin_memset(&w->u.lb, 0, sizeof(w->u.lb));
	w->u.lb.net = f->dst_net;
	w->u.lb.client = f->dst;
	w->u.lb.vip = f->src;
	w->u.lb.client_port = f->dport;
	w->u.lb.vip_port = f->sport;
	w->u.lb.proto = f->proto;
	b = bpf_map_lookup_elem(&sdn_lb_flows, &w->u.lb);
	if (!b)
		return;
	f->src = b->backend;
	f->src_net = b->net;
	f->sport = b->backend_port;
}

/* NetworkPolicy for a net-0 packet at sdn_from_pod (the source pod's side) or
 * sdn_to_pod (the destination pod's). 0 to go on, or a DROP_*.
 */
static __sdn_noinline int sdn_np_police(struct __sk_buff *skb,
					const struct sdn_pkt *p)
{
	struct sdn_np_ident *src, *dst;
	struct sdn_pol_scratch *w;
	int ret;

	if (p->frag == SDN_FRAG_LATER)
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return DROP_POL_SCRATCH;
	ret = sdn_flow_of(skb, p, 0, 0, &w->f);
	if (ret)
		return ret;
	/* A Service reply already given its frontend as source is judged as
	 * its backend's, like its flow's first packet (sdn_lb_reverse).
	 */
	if (!w->f.icmp_err)
		sdn_sg_unbalance(w);
	/* An established policed flow passes on its entry before the isolation
	 * checks below, which cost up to four sdn_pol_rules (LPM) lookups: with
	 * 13,130 rules loaded, policing an established flow added ~520 ns to
	 * each packet's 520–780 in sdn_from_pod and sdn_to_pod, and adds 40–70
	 * this way (lab/benches/policy.rs, bpf_stats). A flow whose ends are no
	 * longer isolated passes either way.
	 */
	if (sdn_pol_established(w))
		return 0;
	src = bpf_map_lookup_elem(&sdn_np_idents, &w->f.src);
	dst = bpf_map_lookup_elem(&sdn_np_idents, &w->f.dst);
	/* The net-0 fast path: neither end isolated in either direction (no
	 * policy selects it), so the rules would admit the flow both ways and
	 * nothing needs its state. No connection-table step, no entry; should
	 * an end become isolated, the flow's next segment is decided by
	 * sdn_np_adopt.
	 */
	if (!sdn_np_isolated(w, src) && !sdn_np_isolated(w, dst))
		return 0;
	return sdn_pol_count(skb->len, 0, SDN_LAYER_NP,
			     sdn_pol_flow(w, SDN_LAYER_NP));
}

/*
 * SecurityGroups for a VPC packet from {src_net, p->src} to {dst_net,
 * p->dst}, at its local delivery or its encapsulation. src_tag: the tunnel
 * option's tag when it came from another node with an exact one, else 0 and
 * the source's groups come from sdn_sg_members. 0 to go on, or a DROP_*.
 */
static __sdn_noinline int sdn_sg_police(struct __sk_buff *skb,
					const struct sdn_pkt *p, __u32 src_net,
					__u32 dst_net, __u64 src_tag)
{
	struct sdn_pol_scratch *w;
	int ret;

	if (p->frag == SDN_FRAG_LATER)
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return DROP_POL_SCRATCH;
	ret = sdn_flow_of(skb, p, src_net, dst_net, &w->f);
	if (ret)
		return ret;
	/* An ICMP error (w->f is its quote, turned around) passes by its
	 * flow's entry: the groups only say whether it is policed, and the
	 * option describes the error's sender, not the quote's.
	 */
	if (w->f.icmp_err)
		src_tag = 0;
	else
		sdn_sg_unbalance(w);
	/* As in sdn_np_police: an established policed flow passes on its
	 * entry, without the members lookups.
	 */
	if (sdn_pol_established(w))
		return 0;
	if (src_tag & SDN_TAG_EXACT)
		w->f.src_groups = src_tag & ~(__u64)SDN_TAG_EXACT;
	else
		w->f.src_groups = sdn_sg_groups(w, w->f.src_net, &w->f.src);
	w->f.dst_groups = sdn_sg_groups(w, w->f.dst_net, &w->f.dst);
	if (!w->f.src_groups && !w->f.dst_groups)
		return 0;
	return sdn_pol_count(skb->len,
			     w->f.dst_groups ? w->f.dst_net : w->f.src_net,
			     SDN_LAYER_SG, sdn_pol_flow(w, SDN_LAYER_SG));
}

/* After sdn_encap() of a VPC packet: the source's groups in the tunnel
 * option, when the device carries one (CONFIG(tunnel_groups)). 0, or
 * DROP_ENCAP.
 */
static __always_inline int sdn_sg_tag(struct __sk_buff *skb, __u32 net,
				      const struct sdn_addr *src)
{
	__u32 mode = CONFIG(tunnel_groups);
	struct sdn_pol_scratch *w;
	__u64 tag;

	if (mode != SDN_TUNNEL_GROUPS_GBP && mode != SDN_TUNNEL_GROUPS_GENEVE)
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return DROP_ENCAP;
	tag = sdn_sg_groups(w, net, src);
	if (mode == SDN_TUNNEL_GROUPS_GBP) {
		w->u.gbp = sdn_sg_gbp_encode(tag);
		if (bpf_skb_set_tunnel_opt(skb, &w->u.gbp, sizeof(w->u.gbp)) < 0)
			return DROP_ENCAP;
		return 0;
	}
	tag = sdn_sg_tag_of(tag);
	w->u.geneve.opt_class = bpf_htons(SDN_GENEVE_CLASS);
	w->u.geneve.type = SDN_GENEVE_TYPE_GROUPS;
	w->u.geneve.length = 2;
	w->u.geneve.hi = bpf_htonl(tag >> 32);
	w->u.geneve.lo = bpf_htonl((__u32)tag);
	if (bpf_skb_set_tunnel_opt(skb, &w->u.geneve, sizeof(w->u.geneve)) < 0)
		return DROP_ENCAP;
	return 0;
}

/* sdn_from_overlay: the tag the sender put in the tunnel option, or 0 (look
 * the source up) when there is none, it is not ours, or the device carries
 * none.
 */
static __always_inline __u64 sdn_sg_tag_in(struct __sk_buff *skb)
{
	__u32 mode = CONFIG(tunnel_groups);
	struct sdn_pol_scratch *w;

	if (mode != SDN_TUNNEL_GROUPS_GBP && mode != SDN_TUNNEL_GROUPS_GENEVE)
		return 0;
	w = sdn_pol_scratch();
	if (!w)
		return 0;
	if (mode == SDN_TUNNEL_GROUPS_GBP) {
		if (bpf_skb_get_tunnel_opt(skb, &w->u.gbp, sizeof(w->u.gbp)) !=
		    sizeof(w->u.gbp))
			return 0;
		return w->u.gbp & 0xffff;
	}
	if (bpf_skb_get_tunnel_opt(skb, &w->u.geneve, sizeof(w->u.geneve)) !=
		    sizeof(w->u.geneve) ||
	    w->u.geneve.opt_class != bpf_htons(SDN_GENEVE_CLASS) ||
	    w->u.geneve.type != SDN_GENEVE_TYPE_GROUPS ||
	    (w->u.geneve.length & 0x1f) != 2)
		return 0;
	return (__u64)bpf_ntohl(w->u.geneve.hi) << 32 | bpf_ntohl(w->u.geneve.lo);
}
