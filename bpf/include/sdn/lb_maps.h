/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps of the load balancer (lib/lb.h): ServiceVIPs inside VPCs and
 * Kubernetes Services on the default network (net 0). Included
 * from maps.h, so every object carries them like every other map. Rust mirror:
 * bpf/src/abi.rs and bpf/src/maps/lb_*.rs.
 *
 * The agent (agent/src/core/lb/) writes the frontends (sdn_lb_svc), the
 * backends (sdn_lb_backends) and one Maglev lookup table per frontend
 * (sdn_lb_maglev, or sdn_lb_mag_big for a frontend with many backends); the
 * datapath writes the flow state (sdn_lb_flows, sdn_lb_rev, sdn_lb_affinity)
 * and the counters (sdn_lb_stats).
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* Slots of one Maglev table: a prime, so every backend's permutation walks
 * them all. About 1/N of them per backend; ~1000 backends is where the
 * spread gets coarse.
 */
#define SDN_LB_SLOTS		1021

/* Slots of a big frontend's table (sdn_lb_mag_big). Removing one of N
 * backends moves, besides its own slots, a share of the others' that shrinks
 * as the table grows: 3-5 % at 1021 slots for 16 to 100 backends, 0.86 % at
 * this size for 100 (agent/src/core/lb/maglev.rs measures it; 27,000 slots
 * give 0.96 %, and more than this size no longer helps at 100). 120 KiB of
 * kernel memory per table: the agent gives it only to frontends with many
 * backends (agent/src/core/lb/mod.rs).
 */
#define SDN_LB_BIG_SLOTS	29989

/* A big table is stored as chunks of this many slots (the last one partly
 * used): a chunk's map element (4000 bytes, the 8-byte key and the kernel's
 * element header) fits a 4 KiB allocation. One 120 KiB value instead would be
 * an order-5 allocation, which a fragmented node's non-sleeping allocation
 * for a map element can fail, and the kernel's per-CPU element cache would
 * hold such 128 KiB blocks on every CPU even with no big table.
 */
#define SDN_LB_CHUNK_SLOTS	1000
#define SDN_LB_BIG_CHUNKS	30
_Static_assert(SDN_LB_BIG_CHUNKS * SDN_LB_CHUNK_SLOTS >= SDN_LB_BIG_SLOTS &&
	       (SDN_LB_BIG_CHUNKS - 1) * SDN_LB_CHUNK_SLOTS < SDN_LB_BIG_SLOTS,
	       "ABI: SDN_LB_BIG_CHUNKS covers SDN_LB_BIG_SLOTS");

/* The net of the frontends that traffic from outside the cluster meets at the
 * uplink (sdn_from_uplink): a Service's NodePorts on this node's addresses,
 * its external and LoadBalancer IPs, balanced over the endpoints its
 * externalTrafficPolicy allows. Outside the 24-bit VNI space, so it is never
 * a VPC's; the backends are net 0's.
 */
#define SDN_LB_NET_EXTERNAL	0x40000000

/* Key of sdn_lb_svc: a ServiceVIP port as a client addresses it. */
struct sdn_lb_key {
	__u32 net;		/* the VIP's net (VNI) */
	struct sdn_addr vip;
	__be16 port;
	__u8 proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad;
};
_Static_assert(sizeof(struct sdn_lb_key) == 24, "ABI: sdn_lb_key");

/* sdn_lb_svc value. */
struct sdn_lb_svc {
	__u32 id;		/* key of this frontend's table in sdn_lb_maglev
				 * (sdn_lb_mag_big with SDN_LB_SVC_F_BIG) */
	__u32 count;		/* backends in the table; 0: none (a miss) */
	__u32 affinity;		/* sessionAffinity ClientIP timeout in seconds; 0: none */
	__u32 flags;		/* low byte: the agent's owner of the frontend
				 * (0 ServiceVIPs, 1 Kubernetes Services), which
				 * the datapath ignores; SDN_LB_SVC_F_* in the
				 * bits above it */
};
_Static_assert(sizeof(struct sdn_lb_svc) == 16, "ABI: sdn_lb_svc");

/* sdn_lb_svc.flags: the frontend's table is in sdn_lb_mag_big
 * (SDN_LB_BIG_SLOTS), not in sdn_lb_maglev. The agent writes the table before
 * the frontend that names its map, so the bit never leads to a missing table.
 */
#define SDN_LB_SVC_F_BIG	(1u << 8)

/* sdn_lb_maglev: frontend id -> its lookup table, SDN_LB_SLOTS backend ids.
 * Replaced whole by the agent (one map update), so a packet sees either the
 * old table or the new one.
 */
struct sdn_lb_table {
	__u32 slot[SDN_LB_SLOTS];
};
_Static_assert(sizeof(struct sdn_lb_table) == 4 * SDN_LB_SLOTS, "ABI: sdn_lb_table");

/* sdn_lb_mag_big: {frontend id, chunk} -> the slots from chunk *
 * SDN_LB_CHUNK_SLOTS on of the table of a frontend with SDN_LB_SVC_F_BIG
 * (slot s is in chunk s / SDN_LB_CHUNK_SLOTS at s % SDN_LB_CHUNK_SLOTS). The
 * agent writes a table chunk by chunk, so a packet may meet old slots and new
 * ones: each names a backend still in sdn_lb_backends (removed only once no
 * table names it), so the mix balances as either table does.
 */
struct sdn_lb_chunk_key {
	__u32 id;
	__u32 chunk;		/* 0 .. SDN_LB_BIG_CHUNKS - 1 */
};
_Static_assert(sizeof(struct sdn_lb_chunk_key) == 8, "ABI: sdn_lb_chunk_key");

struct sdn_lb_chunk {
	__u32 slot[SDN_LB_CHUNK_SLOTS];
};
_Static_assert(sizeof(struct sdn_lb_chunk) == 4 * SDN_LB_CHUNK_SLOTS, "ABI: sdn_lb_chunk");

/* sdn_lb_backends: backend id -> where it is. Written before any table names
 * the id, removed after none does.
 */
struct sdn_lb_backend {
	__u32 net;		/* the backend's net (the VIP's) */
	struct sdn_addr addr;
	__be16 port;		/* the target port */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_lb_backend) == 24, "ABI: sdn_lb_backend");

/* sdn_lb_flows: a client's flow to a VIP, as the client sends it -> the
 * backend it was given. Pinned at the first packet: a later change of the
 * backend set (a new table) never moves it.
 */
struct sdn_lb_flow_key {
	__u32 net;		/* the client's net */
	struct sdn_addr client;
	struct sdn_addr vip;
	__be16 client_port;
	__be16 vip_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_lb_flow_key) == 44, "ABI: sdn_lb_flow_key");

struct sdn_lb_flow {
	struct sdn_addr backend;
	__u32 net;		/* the backend's net */
	__be16 backend_port;
	__u8 flags;		/* SDN_LB_F_* */
	__u8 pad;
};
_Static_assert(sizeof(struct sdn_lb_flow) == 24, "ABI: sdn_lb_flow");

/* The client is its own backend: its source is rewritten to the hairpin
 * address, or the backend's reply would never leave its netns.
 */
#define SDN_LB_F_HAIRPIN	(1u << 0)

/* sdn_lb_rev: the backend's reply, keyed as it leaves the backend -> what it
 * must look like to the client. Written on the client's node with the flow;
 * read by sdn_from_pod (backend on that node) and sdn_from_overlay (reply
 * from another node).
 */
struct sdn_lb_rev_key {
	__u32 net;		/* the backend's net */
	struct sdn_addr backend;
	struct sdn_addr client;	/* the hairpin address for a hairpin flow */
	__be16 backend_port;
	__be16 client_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_lb_rev_key) == 44, "ABI: sdn_lb_rev_key");

struct sdn_lb_rev {
	struct sdn_addr vip;
	struct sdn_addr client;	/* the real client (differs from the key's for hairpin) */
	__be16 vip_port;
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_lb_rev) == 36, "ABI: sdn_lb_rev");

/* sdn_lb_affinity: sessionAffinity ClientIP, {client net, client, frontend
 * id} -> the backend it was last given and when.
 */
struct sdn_lb_aff_key {
	__u32 net;
	struct sdn_addr client;
	__u32 svc;
};
_Static_assert(sizeof(struct sdn_lb_aff_key) == 24, "ABI: sdn_lb_aff_key");

struct sdn_lb_aff {
	__u64 seen_ns;		/* bpf_ktime_get_ns() of the last packet */
	__u32 backend;		/* backend id */
	__u32 pad;
};
_Static_assert(sizeof(struct sdn_lb_aff) == 16, "ABI: sdn_lb_aff");

/* sdn_lb_stats: per-CPU array of counters, indexed by SDN_LB_STAT_*. */
#define SDN_LB_STAT_FLOWS	0	/* flows pinned (first packets) */
#define SDN_LB_STAT_SELECTIONS	1	/* packets DNATed to a backend */
#define SDN_LB_STAT_MISSES	2	/* packets to a VIP port without a backend */
#define SDN_LB_STAT_SNAT	3	/* packets from outside NATed to a backend on another node (lib/lb_snat.h) */
#define SDN_LB_STAT_MAX		4

/* Frontends: a cluster's 10,000 dual-stack Services with three ports each
 * (Kubernetes Services and ServiceVIPs share the maps); backends: its 100,000
 * endpoints and more. Both are allocated per entry (BPF_F_NO_PREALLOC), so
 * the bound costs nothing until used.
 */
#define SDN_LB_SVC_MAX		65536
#define SDN_LB_BACKENDS_MAX	262144
#define SDN_LB_FLOWS_MAX	65536
#define SDN_LB_AFFINITY_MAX	16384
/* Big tables (of SDN_LB_BIG_CHUNKS entries each): 120 KiB each once written,
 * so the bound is what caps their kernel memory (480 MiB if every one were
 * used); the agent falls back to a small table for a frontend that finds the
 * map full.
 */
#define SDN_LB_BIG_MAX		4096

/* sdn_lb_work: per-CPU scratch of sdn_lb_forward (key 0). Its keys would not
 * fit the 512-byte stack on top of sdn_from_pod's own frame (the combined
 * stack reached 520 bytes). Datapath only.
 */
struct sdn_lb_work {
	struct sdn_lb_flow_key fk;
	struct sdn_lb_rev_key rk;
	struct sdn_lb_rev rv;
	struct sdn_lb_flow nf;
};
_Static_assert(sizeof(struct sdn_lb_work) == 148, "ABI: sdn_lb_work");

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LB_SVC_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_lb_key);
	__type(value, struct sdn_lb_svc);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_svc SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LB_SVC_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sdn_lb_table);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_maglev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LB_BIG_MAX * SDN_LB_BIG_CHUNKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_lb_chunk_key);
	__type(value, struct sdn_lb_chunk);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_mag_big SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_LB_BACKENDS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sdn_lb_backend);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_backends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_LB_FLOWS_MAX);
	__type(key, struct sdn_lb_flow_key);
	__type(value, struct sdn_lb_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_LB_FLOWS_MAX);
	__type(key, struct sdn_lb_rev_key);
	__type(value, struct sdn_lb_rev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_LB_AFFINITY_MAX);
	__type(key, struct sdn_lb_aff_key);
	__type(value, struct sdn_lb_aff);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_affinity SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SDN_LB_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_stats SEC(".maps");
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdn_lb_work);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_lb_work SEC(".maps");
#endif /* __bpf__ */
