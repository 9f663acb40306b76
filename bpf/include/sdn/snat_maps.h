/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps of the north-south SNAT engine (lib/snat.h) and its two users:
 * net-0 masquerade and the VPC gateway's NAT (lib/egress.h). Included by
 * sdn/maps.h, so every object carries them like the others.
 *
 * Rust mirror: bpf/src/abi.rs (structs, checked by bpf/tests/abi_layout.rs)
 * and bpf/src/maps/snat_*.rs (one wrapper per map).
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* sdn_snat_conf: one entry (key 0), written by the agent at start
 * (agent/src/uplink.rs). Ports in host byte order.
 */
struct sdn_snat_conf {
	__u32 flags;		/* SDN_SNAT_F_* */
	__u32 uplink_ifindex;	/* where NATed packets leave; 0 = no uplink */
	struct sdn_addr node4;	/* the uplink's IPv4 address (net-0 masquerade) */
	struct sdn_addr node6;	/* the uplink's IPv6 address; zero = none */
	__u16 masq_min;		/* net-0 masquerade ports: [masq_min, masq_max] */
	__u16 masq_max;
	__u16 gw_min;		/* gateway ports: gw_shards shards of gw_shard_size from gw_min */
	__u16 gw_shard_size;
	__u16 gw_shards;
	__u16 shard;		/* this node's shard */
};
_Static_assert(sizeof(struct sdn_snat_conf) == 52, "ABI: sdn_snat_conf");

#define SDN_SNAT_F_MASQ		(1u << 0)	/* net-0 masquerade on (--masquerade=bpf) */
#define SDN_SNAT_F_HAVE4	(1u << 1)	/* node4 is set */
#define SDN_SNAT_F_HAVE6	(1u << 2)	/* node6 is set */

/* sdn_snat_addrs: an address replies of NATed flows come back to -> whose.
 * This node's uplink addresses (net 0, masquerade) and every VPC's NAT
 * address (net = the VPC's VNI), on every node: whichever node the address
 * is attracted to sends the reply on to the flow's owner.
 */
struct sdn_snat_addr {
	__u32 net;
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_snat_addr) == 8, "ABI: sdn_snat_addr");

/* sdn_snat_gws: net (VNI) -> the NAT addresses of its effective gateway with
 * NAT enabled. A VPC without an entry has no way out (DROP_NO_GATEWAY).
 */
struct sdn_snat_gw {
	struct sdn_addr addr4;	/* zero: no IPv4 NAT address (yet) */
	struct sdn_addr addr6;	/* zero: no IPv6 NAT address (yet) */
	__u32 flags;		/* SDN_SNAT_GW_F_* */
};
_Static_assert(sizeof(struct sdn_snat_gw) == 36, "ABI: sdn_snat_gw");

#define SDN_SNAT_GW_F_HAVE4	(1u << 0)
#define SDN_SNAT_GW_F_HAVE6	(1u << 1)

/* sdn_snat_shards: array, gateway port shard -> the node that allocates from
 * it (struct sdn_remote: its tunnel address). A reply to a VPC NAT address
 * whose port is in another node's shard is sent to that node.
 */

/* sdn_snat_fwd: a NATed flow as its packets leave the pod -> its NAT side.
 * Ports network order; ICMP echo: sport is the id, dport 0.
 */
struct sdn_snat_key {
	__u32 net;
	struct sdn_addr src;	/* the pod */
	struct sdn_addr dst;	/* the peer outside */
	__be16 sport;
	__be16 dport;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_snat_key) == 44, "ABI: sdn_snat_key");

struct sdn_snat_fwd {
	struct sdn_addr nat;
	__be16 nat_port;
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_snat_fwd) == 20, "ABI: sdn_snat_fwd");

/* sdn_snat_rev: a reply as it arrives from outside -> the pod's side.
 * Inserted with BPF_NOEXIST: that is what keeps a NAT port unique per
 * {nat, peer, peer_port, proto}. seen (seconds of bpf_ktime) lets an expired
 * flow's port be taken over before the LRU evicts it; state (SDN_SNAT_S_*,
 * TCP only) lets a closed connection's port be taken over at once.
 *
 * A key with pad[0] == SDN_SNAT_CLAIM is no flow: it is the short-lived lock
 * one CPU holds while it takes over the entry of the same key with pad 0
 * (lib/snat.h, sdn_snat_take). Replies never look such a key up.
 */
struct sdn_snat_rkey {
	struct sdn_addr nat;
	struct sdn_addr peer;
	__be16 nat_port;
	__be16 peer_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_snat_rkey) == 40, "ABI: sdn_snat_rkey");

struct sdn_snat_rev {
	__u32 net;
	struct sdn_addr pod;
	__be16 pod_port;
	__u8 pad[2];
	__u32 seen;
	__u32 state;		/* SDN_SNAT_S_*: a TCP flow's life; 0 otherwise */
};
_Static_assert(sizeof(struct sdn_snat_rev) == 32, "ABI: sdn_snat_rev");

/* sdn_snat_rev.state: what the NAT saw of a TCP connection, one byte per
 * event, each a count (non-zero: seen). Counts, not bits: both directions of
 * a connection update it at once on different CPUs (a simultaneous close),
 * and BPF has an atomic add on every kernel, not an atomic or.
 */
#define SDN_SNAT_S_REPLIED	(1u << 0)	/* a packet came back from the peer */
#define SDN_SNAT_S_FIN_OUT	(1u << 8)	/* the pod sent a FIN */
#define SDN_SNAT_S_FIN_IN	(1u << 16)	/* the peer sent a FIN */
#define SDN_SNAT_S_CLOSED	(1u << 24)	/* an RST, or the last ACK after both FINs */
/* The byte of event e in state s: non-zero once e was seen. */
#define SDN_SNAT_S_SEEN(s, e)	((s) & ((e) * 0xffu))

/* sdn_snat_rkey.pad[0] of a takeover lock (see sdn_snat_rev). */
#define SDN_SNAT_CLAIM		1

/* sdn_snat_work: per-CPU scratch of sdn_snat_out (key 0). Its keys would not
 * fit the 512-byte stack on top of sdn_from_pod's own frame. Datapath only.
 */
struct sdn_snat_work {
	struct sdn_snat_key fk;
	struct sdn_snat_rkey rk;
	struct sdn_snat_rev rv;
	struct sdn_snat_fwd fv;
	struct sdn_frag_key frk;
	struct sdn_snat_key old;	/* an expired flow's forward key */
	struct sdn_frag frag;		/* what a first fragment became */
};
_Static_assert(sizeof(struct sdn_snat_work) == 264, "ABI: sdn_snat_work");

#define SDN_SNAT_CT_MAX		131072
#define SDN_SNAT_ADDRS_MAX	16384
#define SDN_SNAT_GWS_MAX	16384
#define SDN_SNAT_SHARDS_MAX	1024

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdn_snat_conf);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_conf SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_SNAT_ADDRS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_snat_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_SNAT_GWS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sdn_snat_gw);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_gws SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SDN_SNAT_SHARDS_MAX);
	__type(key, __u32);
	__type(value, struct sdn_remote);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_shards SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sdn_snat_work);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_work SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_SNAT_CT_MAX);
	__type(key, struct sdn_snat_key);
	__type(value, struct sdn_snat_fwd);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_SNAT_CT_MAX);
	__type(key, struct sdn_snat_rkey);
	__type(value, struct sdn_snat_rev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_snat_rev SEC(".maps");
#endif /* __bpf__ */
