/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Drop accounting: the only way a program returns TC_ACT_SHOT. */
#pragma once

#include "common.h"

static __always_inline int sdn_drop(struct __sk_buff *skb, int reason)
{
	__u32 idx = -reason;
	struct sdn_drop_stats *st;

	st = bpf_map_lookup_elem(&sdn_drops, &idx);
	if (st) {
		/* Per-CPU slot: no other writer, no atomics needed. */
		st->packets++;
		st->bytes += skb->len;
	}
	return TC_ACT_SHOT;
}
