/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Per-door metering of VPC boundary crossings (bpf/lib/meter.h). Included from
 * maps.h; its structs and map are part of the ABI like the rest.
 *
 * Rust mirror: bpf/src/abi.rs (DoorKey, DoorStats), bpf/src/maps/door_stats.rs.
 */
#pragma once

#include <linux/types.h>

/* Doors of a VPC: the only ways in and out of it. Values are ABI (map keys and
 * metric labels): never renumbered.
 */
#define SDN_DOOR_GATEWAY	0	/* the VPCGateway's NAT identity (egress) */
#define SDN_DOOR_EIP		1	/* a FloatingIP, both ways */
#define SDN_DOOR_LOADBALANCER	2	/* LoadBalancer Services into the VPC */
#define SDN_DOOR_MAX		3

#define SDN_DIR_IN		0	/* into the VPC */
#define SDN_DIR_OUT		1	/* out of the VPC */

/* Key of sdn_door_stats: one row per {VPC net, door, direction}. */
struct sdn_door_key {
	__u32 net;		/* VNI; net 0 is never metered */
	__u8 door;		/* SDN_DOOR_* */
	__u8 dir;		/* SDN_DIR_* */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_door_key) == 8, "ABI: sdn_door_key");

/* sdn_door_stats value (per CPU): what crossed the door, and what the boundary
 * refused there (the packet was dropped; its drop reason is counted too).
 */
struct sdn_door_stats {
	__u64 packets;
	__u64 bytes;
	__u64 refused_packets;
	__u64 refused_bytes;
};
_Static_assert(sizeof(struct sdn_door_stats) == 32, "ABI: sdn_door_stats");

/* 4096 VPCs x 3 doors x 2 directions. */
#define SDN_DOOR_STATS_MAX	24576

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* Created by the datapath on first use, like sdn_net_stats: nets only come from
 * our own maps, so the growth is bounded.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, SDN_DOOR_STATS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_door_key);
	__type(value, struct sdn_door_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_door_stats SEC(".maps");
#endif /* __bpf__ */
