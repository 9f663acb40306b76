/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Floating IPs (1:1 stateless NAT between a public address and one VPC
 * address, bpf/lib/fip.h). Included from maps.h. What the doors never NAT
 * to is sdn_internal (internal_maps.h).
 *
 * Rust mirror: bpf/src/abi.rs (Fip, FipPub), bpf/src/maps/fip_in.rs,
 * fip_out.rs. Written by the agent (agent/src/fip.rs) on every node:
 * whichever node receives the public address delivers it.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* sdn_fip_in: public address (a bare sdn_addr, unique cluster-wide) -> the
 * target it is DNATed to. Looked up by sdn_from_uplink for every packet.
 */
struct sdn_fip {
	__u32 net;		/* the target's VPC (VNI) */
	struct sdn_addr vpc_ip;	/* the target's address in it */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_fip) == 24, "ABI: sdn_fip");

/* sdn_fip_out: struct sdn_ep_key {net, vpc_ip} of the target -> its public
 * address, for the SNAT of what the target sends out of the cluster.
 */
struct sdn_fip_pub {
	struct sdn_addr addr;	/* same family as the target */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_fip_pub) == 20, "ABI: sdn_fip_pub");

#define SDN_FIP_MAX		65536

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_FIP_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_fip);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_fip_in SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_FIP_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_fip_pub);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_fip_out SEC(".maps");
#endif /* __bpf__ */
