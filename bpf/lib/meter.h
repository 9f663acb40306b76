/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-door metering: every crossing of a VPC's boundary is counted per
 * {net, door, direction} in sdn_door_stats (include/sdn/meter_maps.h), and so is
 * every refusal at the boundary. East-west traffic is lib/stats.h's
 * (sdn_net_stats, tx/rx per net); the agent exports both per VPC.
 *
 * The API, for every door's code:
 *
 *   sdn_meter_door(skb, net, door, dir)
 *       A packet of VPC `net` crossed `door` (SDN_DOOR_GATEWAY, SDN_DOOR_EIP,
 *       SDN_DOOR_LOADBALANCER) in direction `dir` (SDN_DIR_IN: into the VPC,
 *       SDN_DIR_OUT: out of it). Call it once per packet, at the point the
 *       crossing is decided (after the NAT rewrite succeeded, before the
 *       redirect), with skb->len as the packet then is.
 *   sdn_meter_refused(skb, net, door, dir)
 *       The boundary refused a packet of VPC `net` at `door` (e.g. LoadBalancer
 *       traffic into a VPC whose gateway does not admit it, a VPC without a
 *       gateway sending out). The caller still drops it through sdn_drop() with
 *       its own reason: both are counted.
 *
 * Net 0 (the default network) is not a VPC and is never metered per door: both
 * calls return at once for it. Counters are per CPU (no atomics); the agent sums
 * the CPUs at each scrape.
 */
#pragma once

#include "common.h"

static __always_inline struct sdn_door_stats *
sdn_door_stats_of(__u32 net, __u8 door, __u8 dir)
{
	struct sdn_door_key k = { .net = net, .door = door, .dir = dir };
	struct sdn_door_stats *st, zero = {};

	st = bpf_map_lookup_elem(&sdn_door_stats, &k);
	if (st)
		return st;
	/* Another CPU may have created it meanwhile: NOEXIST keeps its counts. */
	bpf_map_update_elem(&sdn_door_stats, &k, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&sdn_door_stats, &k);
}

static __always_inline void sdn_meter_door(struct __sk_buff *skb, __u32 net,
					   __u8 door, __u8 dir)
{
	struct sdn_door_stats *st;

	if (!net)
		return;
	st = sdn_door_stats_of(net, door, dir);
	if (st) {
		st->packets++;
		st->bytes += skb->len;
	}
}

static __always_inline void sdn_meter_refused(struct __sk_buff *skb, __u32 net,
					      __u8 door, __u8 dir)
{
	struct sdn_door_stats *st;

	if (!net)
		return;
	st = sdn_door_stats_of(net, door, dir);
	if (st) {
		st->refused_packets++;
		st->refused_bytes += skb->len;
	}
}
