/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The cluster-internal ranges: one map every feature asks "is this address
 * the cluster's own?" (lib/internal.h). Included from maps.h.
 *
 * Rust mirror: bpf/src/abi.rs (Internal), bpf/src/maps/internal.rs. Written
 * by the agent alone (agent/src/internal.rs), on every node.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* sdn_internal: LPM over struct sdn_xnet_key {prefixlen, net, prefix}
 * (prefixlen counts the net's 32 bits too) -> struct sdn_internal.
 *
 * Net 0: the cluster-internal ranges (every node's fabric blocks and
 * addresses, the Service CIDRs, the agent's --internal-cidrs). Net N: VPC N's
 * own ranges.
 *
 * Readers, and which nets they ask:
 *  - net-0 masquerade (lib/egress.h), net 0: an internal destination keeps
 *    the pod's source; an internal source is no flow from outside;
 *  - the VPC gateway's NAT (egress.h) and the doors of Floating IPs and
 *    LoadBalancer replies (fip.h, lb_gate.h), net 0 and the VPC's net: such a
 *    destination is never NATed out, it stays inside, isolated;
 *  - DNS steering (dns.h), net 0: a VPC pod's port 53 to an internal address
 *    goes to the node's resolver (its own VPC's endpoints are left alone).
 * They once had a map each; the ranges are the same question for all of
 * them, and the one difference (whether net N counts) is the reader's key,
 * not the entry's. So flags stay reserved.
 */
struct sdn_internal {
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_internal) == 4, "ABI: sdn_internal");

#define SDN_INTERNAL_MAX	16384

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SDN_INTERNAL_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_xnet_key);
	__type(value, struct sdn_internal);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_internal SEC(".maps");
#endif /* __bpf__ */
