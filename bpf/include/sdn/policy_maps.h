/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The policy layers' maps (issue 14): SecurityGroups (VPC nets), NetworkPolicy
 * (the default network, net 0) and HostFirewall (the node's own traffic), all
 * three deciding into one connection table (sdn/ct.h). docs/policy.md explains
 * how they compose; the userspace compiler that writes them is the `policy`
 * crate, whose verdict() is the reference the datapath must agree with.
 *
 * Rust mirror: bpf/src/abi.rs (structs), bpf/src/maps/pol_*.rs, sg_members.rs,
 * np_idents.rs, hf_self.rs (one wrapper per map); checked against this file by
 * bpf/tests/abi_layout.rs and bpf/tests/policy_abi.rs.
 *
 * Included from maps.h, so every object carries these maps; the datapath
 * half is bpf/lib/pct.h (the connection table) and bpf/lib/policy.h (the
 * lookups and the hooks' entry points).
 *
 * Two ideas carry the design:
 *
 * 1. Two-stage lookups, so no dimension is expanded into another. A peer is
 *    first resolved to a token: a group bitmap (SG, sdn_sg_members or the
 *    tunnel option), a label-set identity (NP, sdn_np_idents) or a CIDR class
 *    (sdn_pol_cidrs, the longest prefix any rule of that scope names, excepts
 *    included). Then ONE trie, sdn_pol_rules, answers for {layer, direction,
 *    subject, peer token, protocol, port}.
 * 2. Ports are the last bits of the rule key and matched by longest prefix: a
 *    range [a, b] is at most 30 aligned blocks (never per port), "any port" is
 *    a 0-bit prefix, ICMP puts type<<8|code there (any code: an 8-bit
 *    prefix). The compiler stores in each entry the union of every rule whose
 *    range covers the whole block, so the longest match alone decides.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>
#include <sdn/maps.h>
#include <sdn/ct.h>

/* Layers, as the `layer` member of keys and bits of sdn_pct.layers. */
#define SDN_LAYER_SG		1	/* SecurityGroups, VPC nets */
#define SDN_LAYER_NP		2	/* NetworkPolicy, net 0 */
#define SDN_LAYER_HF		3	/* HostFirewall, the node's own addresses */
#define SDN_LAYER_ANP		4	/* AdminNetworkPolicy, net 0, above NetworkPolicy */
#define SDN_LAYER_BANP		5	/* BaselineAdminNetworkPolicy, net 0, below it */

/* Direction, from the subject's point of view. */
#define SDN_DIR_INGRESS		0
#define SDN_DIR_EGRESS		1

/* sdn_pol_rules peer token kinds. A peer without this bit is an SG net (the
 * value is then a bitmap of that net's groups) or an NP identity. */
#define SDN_PEER_CLASS		(1u << 31)	/* | class id from sdn_pol_cidrs */
/* Any peer at all (an NP rule with no from/to, an HF rule with no CIDR). The
 * datapath looks up the peer's own token, then its CIDR class, then this. */
#define SDN_PEER_ANY		0
/* NP: "this subject is isolated in this direction" (port prefix 0, value bit
 * 63). Absent means no policy selects the identity: allow-all. */
#define SDN_PEER_ISOLATED	0x7fffffffu

/* The admin tiers (issue 14's NP layer, issue 29): an ANP/BANP entry's value
 * holds the first matching rule's ordinal in `rule` (lower is tried first: the
 * datapath takes the lowest of its three peer lookups) and its action in
 * `flags`. An isolation marker's `flags` say which tiers apply to the subject
 * in the direction; 0, as every marker written before the admin tiers, is
 * "NetworkPolicy isolates it, nothing else".
 */
#define SDN_ACTION_ALLOW	1	/* admitted; no later tier is asked */
#define SDN_ACTION_DENY		2
#define SDN_ACTION_PASS		3	/* the ANP tier ends: NetworkPolicy, else BANP, decides */
#define SDN_MARK_NO_NP		(1u << 0)	/* no NetworkPolicy isolates the subject */
#define SDN_MARK_ANP		(1u << 1)	/* ANP rules apply: look up layer ANP */
#define SDN_MARK_BANP		(1u << 2)	/* BANP rules apply: look up layer BANP */

/* sdn_pol_rules value bit meaning "the peer token as a whole" (a CIDR class,
 * an NP identity, an isolation marker); bits 0..62 are SG group ids. */
#define SDN_PEER_ALL_BIT	63

/* Bits of the key after prefixlen that are always matched: net, subject,
 * peer, layer, dir, proto, pad. prefixlen = SDN_PRULE_FIXED_BITS + 0..16. */
#define SDN_PRULE_FIXED_BITS	128

/* Key of sdn_pol_rules (LPM trie). */
struct sdn_prule_key {
	__u32 prefixlen;
	__u32 net;		/* SG: the subject's net (VNI); NP, HF: 0 */
	__u32 subject;		/* SG: subject group id 1..62; NP, ANP, BANP: subject identity; HF: 0 (this node) */
	__u32 peer;		/* SG: the peer's net; NP: peer identity; or SDN_PEER_CLASS|class; or SDN_PEER_ISOLATED */
	__u8 layer;		/* SDN_LAYER_* */
	__u8 dir;		/* SDN_DIR_* */
	__u8 proto;		/* IPPROTO_TCP/UDP/SCTP/ICMP/ICMPV6 */
	__u8 pad;
	__be16 port;		/* destination port; ICMP: type << 8 | code */
	__u8 pad2[2];		/* never matched (prefixlen <= 144), always 0 */
};
_Static_assert(sizeof(struct sdn_prule_key) == 24, "ABI: sdn_prule_key");

/* sdn_pol_rules value. Allowed iff peers & want != 0, where want is the
 * peer's group bitmap for an SG net peer, 1 << SDN_PEER_ALL_BIT otherwise. */
struct sdn_prule {
	__u64 peers;
	__u32 rule;		/* id of one admitting rule (metrics, trace); 0 = none; ANP/BANP: the first rule's ordinal */
	__u32 flags;		/* ANP/BANP: SDN_ACTION_*; a marker: SDN_MARK_*; else 0 */
};
_Static_assert(sizeof(struct sdn_prule) == 16, "ABI: sdn_prule");

/* Key of sdn_pol_cidrs (LPM trie): the CIDR classes of one scope. prefixlen =
 * 64 + prefix bits of the 128-bit address (an IPv4 /24 is 64 + 96 + 24). v6
 * keeps ::/0 from matching IPv4 (stored as 64:ff9b::/96). */
struct sdn_pcidr_key {
	__u32 prefixlen;
	__u32 scope;		/* SG: the subject's net; NP, HF: 0 */
	__u8 layer;		/* SDN_LAYER_* */
	__u8 v6;		/* 1 for an IPv6 prefix, 0 for IPv4 */
	__u8 pad[2];
	struct sdn_addr ip;
};
_Static_assert(sizeof(struct sdn_pcidr_key) == 28, "ABI: sdn_pcidr_key");

struct sdn_pcidr {
	__u32 class;		/* peer token: sdn_prule_key.peer = SDN_PEER_CLASS | class */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_pcidr) == 8, "ABI: sdn_pcidr");

/* sdn_sg_members: {net, address} -> the endpoint's SecurityGroups. Local and
 * remote endpoints of VPCs with groups; across nodes the tunnel option's
 * bitmap is authoritative. Absent or 0: ungrouped (allow-all in its VPC). */
struct sdn_sg_member {
	__u64 groups;		/* bit n = group id n (1..62) */
};
_Static_assert(sizeof(struct sdn_sg_member) == 8, "ABI: sdn_sg_member");

/* sdn_np_idents: a default-network pod address -> its label-set identity.
 * hostNetwork pods have none (they are the node to NetworkPolicy). */
struct sdn_np_ident {
	__u32 id;
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_np_ident) == 8, "ABI: sdn_np_ident");

/* sdn_hf_self: this node's own addresses (the HostFirewall's subject). */
struct sdn_hf_self {
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_hf_self) == 4, "ABI: sdn_hf_self");

/* sdn_pol_state[0]: the policy generation and the armed layers. The agent
 * bumps generation after every applied change that removed or narrowed an entry;
 * a connection whose sdn_pct.generation differs is re-checked on its next packet. */
struct sdn_pol_state {
	__u32 generation;
	__u32 flags;		/* SDN_POL_F_* */
};
_Static_assert(sizeof(struct sdn_pol_state) == 8, "ABI: sdn_pol_state");

/* sdn_pol_work[0]: per-CPU scratch of the policy check (bpf/lib/policy.h): the
 * flow, its connection key, a new entry and the lookup keys, which do not fit
 * the 512-byte stack under sdn_to_pod's own 408-byte frame. Datapath only; the
 * layout inside is lib/policy.h's (struct sdn_pol_scratch, asserted to fit).
 */
struct sdn_pol_work {
	__u64 scratch[32];
};
_Static_assert(sizeof(struct sdn_pol_work) == 256, "ABI: sdn_pol_work");

#define SDN_POL_F_HF_INGRESS	(1u << 0)	/* some HostFirewall selects this node for ingress */
#define SDN_POL_F_HF_EGRESS	(1u << 1)	/* ... for egress */

#define SDN_POL_RULES_MAX	262144
#define SDN_POL_CIDRS_MAX	65536
#define SDN_SG_MEMBERS_MAX	65536
#define SDN_NP_IDENTS_MAX	65536
#define SDN_HF_SELF_MAX		64

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_POL_CT_MAX);
	__type(key, struct sdn_pct_key);
	__type(value, struct sdn_pct);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_ct SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdn_pol_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SDN_POL_RULES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_prule_key);
	__type(value, struct sdn_prule);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SDN_POL_CIDRS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_pcidr_key);
	__type(value, struct sdn_pcidr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_cidrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_SG_MEMBERS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_sg_member);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_sg_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_NP_IDENTS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_np_ident);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_np_idents SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdn_pol_work);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_work SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_HF_SELF_MAX);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_hf_self);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_hf_self SEC(".maps");
#endif /* __bpf__ */
