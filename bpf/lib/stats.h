/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Per-net east-west counters (sdn_net_stats). */
#pragma once

#include "common.h"

static __always_inline struct sdn_net_stats *sdn_net_stats_of(__u32 net)
{
	struct sdn_net_stats *st, zero = {};

	st = bpf_map_lookup_elem(&sdn_net_stats, &net);
	if (st)
		return st;
	/* Another CPU may have created it meanwhile: NOEXIST keeps its counts. */
	bpf_map_update_elem(&sdn_net_stats, &net, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&sdn_net_stats, &net);
}

static __always_inline void sdn_count_tx(struct __sk_buff *skb, __u32 net)
{
	struct sdn_net_stats *st = sdn_net_stats_of(net);

	if (st) {
		st->tx_packets++;
		st->tx_bytes += skb->len;
	}
}

static __always_inline void sdn_count_rx(struct __sk_buff *skb, __u32 net)
{
	struct sdn_net_stats *st = sdn_net_stats_of(net);

	if (st) {
		st->rx_packets++;
		st->rx_bytes += skb->len;
	}
}
