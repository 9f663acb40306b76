/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * sdn_forged: overlay packets from a known node that claimed what that
 * node does not hold (issue 29, "overlay trust per node"), per sending node
 * and reason, for the agent's /metrics (cozyplane_overlay_forged_*_total with
 * the node's name). sdn_drops counts the same packets by reason alone.
 *
 * Counted by lib/overlay_trust.h in sdn_from_overlay. Entries are created by
 * the datapath on first use; their number is bounded by nodes x reasons.
 *
 * Rust mirror: bpf/src/abi.rs (ForgedKey; the value is DropStats),
 * bpf/src/maps/forged.rs; checked by bpf/tests/abi_layout.rs.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

struct sdn_forged_key {
	struct sdn_addr node;	/* the sender's tunnel address (sdn_nodes' key) */
	__u8 reason;		/* -DROP_OVERLAY_FORGED_* (sdn/drop_reasons.h) */
	__u8 pad[3];		/* 0 */
};
_Static_assert(sizeof(struct sdn_forged_key) == 20, "ABI: sdn_forged_key");

#define SDN_OVERLAY_FORGED_MAX	8192

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Value: struct sdn_drop_stats (sdn/maps.h), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, SDN_OVERLAY_FORGED_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_forged_key);
	__type(value, struct sdn_drop_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_forged SEC(".maps");
#endif /* __bpf__ */
