/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * sdn_pol_drops: the policy layers' drops per layer, net and reason (issue 14,
 * "drop counters per layer, per VPC and per reason"), for the agent's /metrics.
 * sdn_drops counts the same packets by reason alone.
 *
 * Counted by lib/policy.h where a policed packet is refused (DROP_POL_*):
 * a NetworkPolicy drop is net 0; a SecurityGroup drop is counted under the
 * net of the end whose groups the flow met (the destination's when it is
 * grouped, else the source's). Entries are created by the datapath on first
 * use; their number is bounded by nets x layers x reasons.
 *
 * Rust mirror: bpf/src/abi.rs (PolDropKey; the value is DropStats),
 * bpf/src/maps/pol_drops.rs; checked by bpf/tests/abi_layout.rs.
 */
#pragma once

#include <linux/types.h>

struct sdn_pol_drop_key {
	__u32 net;		/* VNI; 0 for NetworkPolicy (the default network) */
	__u8 layer;		/* SDN_LAYER_* (sdn/policy_maps.h) */
	__u8 reason;		/* -DROP_POL_* (sdn/drop_reasons.h) */
	__u8 pad[2];		/* 0 */
};
_Static_assert(sizeof(struct sdn_pol_drop_key) == 8, "ABI: sdn_pol_drop_key");

#define SDN_POL_DROPS_MAX	16384

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Value: struct sdn_drop_stats (sdn/maps.h), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, SDN_POL_DROPS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_pol_drop_key);
	__type(value, struct sdn_drop_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_pol_drops SEC(".maps");
#endif /* __bpf__ */
