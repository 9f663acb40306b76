/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * LoadBalancer ingress into VPCs (bpf/lib/lb_gate.h): the frontends of
 * LoadBalancer Services whose backends are VPC pods, the way back for their
 * replies, and the VPCs whose gateway admits LoadBalancer traffic. Included
 * from maps.h. Written by the agent (agent/src/lb_gate.rs) on every node.
 *
 * Rust mirror: bpf/src/abi.rs (LbgKey, LbgBackend, LbgFront, LbgRevKey),
 * bpf/src/maps/lbg_front.rs, lbg_rev.rs, lbg_ingress.rs.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* A frontend: status.loadBalancer.ingress address, Service port, protocol. */
struct sdn_lbg_key {
	struct sdn_addr addr;
	__be16 port;
	__u8 proto;		/* IPPROTO_TCP / IPPROTO_UDP */
	__u8 pad;
};
_Static_assert(sizeof(struct sdn_lbg_key) == 20, "ABI: sdn_lbg_key");

struct sdn_lbg_backend {
	struct sdn_addr ip;	/* the backend pod's VPC address */
	__be16 port;		/* the target port */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_lbg_backend) == 20, "ABI: sdn_lbg_backend");

#define SDN_LBG_BACKENDS		16

/* sdn_lbg_front value: the VPC of the backends and up to 16 of them (more are
 * left out by the agent, logged). count == 0: no ready backend.
 */
struct sdn_lbg_front {
	__u32 net;		/* VNI of the backends' VPC */
	__u32 count;
	__u32 flags;		/* SDN_LBG_F_* */
	struct sdn_lbg_backend be[SDN_LBG_BACKENDS];
};
_Static_assert(sizeof(struct sdn_lbg_front) == 332, "ABI: sdn_lbg_front");

/* The frontend is a NodePort of this node (node address, nodePort): only the
 * gate applies here; an admitted packet is left to the host, whose Service
 * proxy (kube-proxy) DNATs it to the backend's fabric address and the bridge.
 * Without this entry a NodePort would be a side door around the gate.
 */
#define SDN_LBG_F_GATE_ONLY	(1u << 0)

/* sdn_lbg_rev key: a backend as its replies leave it -> the frontend (struct
 * sdn_lbg_key) they must come from.
 */
struct sdn_lbg_rev_key {
	__u32 net;
	struct sdn_addr ip;
	__be16 port;
	__u8 proto;
	__u8 pad;
};
_Static_assert(sizeof(struct sdn_lbg_rev_key) == 24, "ABI: sdn_lbg_rev_key");

/* sdn_lbg_ingress: net (VNI) -> __u32 flags (reserved, 0). Presence: the VPC's
 * effective VPCGateway has spec.ingress.loadBalancer: true.
 */

#define SDN_LBG_FRONT_MAX	16384
#define SDN_LBG_REV_MAX		65536
#define SDN_LBG_INGRESS_MAX	4096

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LBG_FRONT_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_lbg_key);
	__type(value, struct sdn_lbg_front);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lbg_front SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LBG_REV_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_lbg_rev_key);
	__type(value, struct sdn_lbg_key);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lbg_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LBG_INGRESS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lbg_ingress SEC(".maps");
#endif /* __bpf__ */
