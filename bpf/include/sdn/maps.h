/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every pinned map of the datapath: its key and value layout, its size and
 * its name. The map identifier is also the pin file name under the agent's
 * bpffs directory and `NAME` in the Rust wrapper, and stays <= 15 characters
 * so bpftool shows it whole.
 *
 * Rust mirror: bpf/src/abi.rs (structs) and bpf/src/maps/<noun>.rs (one
 * wrapper per map), checked against this file by bpf/tests/abi_layout.rs
 * (sizes, alignments and field offsets as clang computes them) and
 * bpf/src/maps/mod.rs tests (every NAME present in every object).
 *
 * Padding is always an explicit member: keys are hashed byte-wise, so a hole
 * the compiler leaves uninitialised would make identical keys differ.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>
#include <sdn/drop_reasons.h>
#include <sdn/lb_maps.h>

/* sdn_ports: host-side veth ifindex -> port. Written by the CNI on ADD. */
struct sdn_port {
	__u32 net;		/* VNI of the pod's VPC; 0 = default network */
	__u32 flags;		/* SDN_PORT_F_*; the CNI writes 0 */
};
_Static_assert(sizeof(struct sdn_port) == 8, "ABI: sdn_port");

/* Set by sdn_to_pod, never cleared while the port lives: the host has delivered a
 * DNATed flow into this pod, so sdn_from_pod looks its replies up in sdn_dnat.
 * Ports without it never pay that lookup.
 */
#define SDN_PORT_F_DNAT		(1u << 0)

/* Key of sdn_endpoints and sdn_remotes: an address is only meaningful within
 * its net, which is what lets VPC CIDRs overlap.
 */
struct sdn_ep_key {
	__u32 net;
	struct sdn_addr ip;
};
_Static_assert(sizeof(struct sdn_ep_key) == 20, "ABI: sdn_ep_key");

/* sdn_endpoints: {net, ip} -> pod on this node. Written by the CNI. Also the
 * anti-spoofing record: a pod may only send from an address whose record
 * names its own veth and MAC.
 */
struct sdn_endpoint {
	__u32 ifindex;		/* host-side veth */
	__u8 mac[6];		/* pod interface MAC */
	__u16 flags;		/* SDN_EP_F_*; the CNI writes 0 */
};
_Static_assert(sizeof(struct sdn_endpoint) == 12, "ABI: sdn_endpoint");

/* Set by the agent (agent/src/sever.rs) when the pod's Port is being deleted: the
 * pod lost its right to the VPC. Its VPC traffic is dropped both ways; the fabric
 * bridge (kubelet probes) keeps working (lib/sever.h). Never cleared: a pod that
 * joins the VPC again is a new endpoint record.
 */
#define SDN_EP_F_SEVERED	(1u << 0)

/* Set by the agent while a live migration holds the endpoint's Port on two
 * nodes (issue 27): this node's launcher and the other one, whose node is
 * sdn_migrations[ifindex]. Delivery relays a copy there (lib/migrate.h).
 */
#define SDN_EP_F_MIGRATING	(1u << 1)

/* sdn_remotes: {net, ip} -> node hosting that endpoint. Written by the agent
 * from other nodes' Ports (VPCs); net 0 goes by sdn_node_blocks below.
 */
struct sdn_remote {
	struct sdn_addr node;	/* underlay address; IPv4 in 64:ff9b:: form */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_remote) == 20, "ABI: sdn_remote");

/* Key of sdn_node_blocks (an LPM trie, so the prefix length comes first, in
 * bits of the 128-bit address: an IPv4 /24 is 96 + 24 = 120).
 */
struct sdn_block_key {
	__u32 prefixlen;
	struct sdn_addr ip;
};
_Static_assert(sizeof(struct sdn_block_key) == 20, "ABI: sdn_block_key");

/* sdn_node_blocks: another node's block of fabric (net 0) addresses -> that
 * node (value: struct sdn_remote). Written by the agent from Nodes (block
 * -> tunnel address, as each agent announces them). Consulted for net 0 when sdn_remotes has no
 * exact entry: one entry per node, not per pod.
 */

/* sdn_bridges: fabric IP (status.podIP) -> the VPC address behind it. Key is a
 * bare struct sdn_addr: fabric IPs are unique cluster-wide. Written by the CNI.
 */
struct sdn_bridge {
	__u32 net;
	struct sdn_addr vpc_ip;
};
_Static_assert(sizeof(struct sdn_bridge) == 20, "ABI: sdn_bridge");

/* sdn_ct_fwd: a fabric client flow as it arrives at sdn_to_pod -> the gateway
 * port it was masqueraded to. Written by the datapath only.
 * Ports in network byte order; for ICMP echo client_port is the echo id and
 * pod_port is 0.
 */
struct sdn_ct_fwd_key {
	struct sdn_addr client;
	struct sdn_addr fabric;
	__be16 client_port;
	__be16 pod_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_ct_fwd_key) == 40, "ABI: sdn_ct_fwd_key");

struct sdn_ct_fwd {
	__be16 gw_port;
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_ct_fwd) == 4, "ABI: sdn_ct_fwd");

/* sdn_ct_rev: the pod's reply as it leaves sdn_from_pod -> the original
 * fabric/client addressing. Inserted with BPF_NOEXIST, which is what makes a
 * gateway port unique per {net, vpc_ip, pod_port, proto}.
 */
struct sdn_ct_rev_key {
	__u32 net;
	struct sdn_addr vpc_ip;
	__be16 gw_port;
	__be16 pod_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_ct_rev_key) == 28, "ABI: sdn_ct_rev_key");

struct sdn_ct_rev {
	struct sdn_addr fabric;
	struct sdn_addr client;
	__be16 client_port;
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_ct_rev) == 36, "ABI: sdn_ct_rev");

/* sdn_dnat: a flow the host DNATed on its way into a pod of this node (portmap's
 * hostPorts, kube-proxy's NodePorts and externalIPs), keyed as the pod's reply
 * leaves it. Written by sdn_to_pod when netfilter marked the packet with
 * CONFIG(dnat_mark), read by sdn_from_pod: such a reply goes to the host stack,
 * whose conntrack reverses the DNAT, wherever its destination lives. An entry
 * outliving its conntrack entry only costs a later flow of the same five-tuple
 * the host path. Ports in network byte order; for a bridged VPC pod, pod is its
 * fabric IP.
 */
struct sdn_dnat_key {
	struct sdn_addr pod;	/* reply source: the pod (after the DNAT) */
	struct sdn_addr peer;	/* reply destination: the client */
	__be16 pod_port;
	__be16 peer_port;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_dnat_key) == 40, "ABI: sdn_dnat_key");

struct sdn_dnat {
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_dnat) == 4, "ABI: sdn_dnat");

/* Key of sdn_xnet_routes, an LPM trie over {source net, destination}: "from
 * net S, destination D belongs to which net?". prefixlen counts the bits after
 * itself: the whole net (32) plus the destination prefix in the 128-bit
 * address (an IPv4 /24 is 32 + 96 + 24 = 152). net is in host byte order and
 * always matched whole, so its byte order does not matter to the trie.
 */
struct sdn_xnet_key {
	__u32 prefixlen;
	__u32 net;		/* source net (VNI) */
	struct sdn_addr ip;	/* destination prefix */
};
_Static_assert(sizeof(struct sdn_xnet_key) == 24, "ABI: sdn_xnet_key");

/* sdn_xnet_routes value: the net the destination belongs to. Written by the
 * agent: for a programmed peering S-T, every CIDR of T under S and every CIDR
 * of S under T. Not a permission by itself: sdn_xnet_allow decides.
 */
struct sdn_xnet_route {
	__u32 net;		/* target net (VNI) */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_xnet_route) == 8, "ABI: sdn_xnet_route");

/* Key of sdn_xnet_allow: "may net src talk to net dst?" */
struct sdn_xnet_pair {
	__u32 src;
	__u32 dst;
};
_Static_assert(sizeof(struct sdn_xnet_pair) == 8, "ABI: sdn_xnet_pair");

/* sdn_xnet_allow value: presence is the permission (written by the agent, both
 * directions of a peering, removed first when the peering goes); the counters
 * are the crossings this node decided (written by the datapath, atomically).
 */
struct sdn_xnet_stats {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct sdn_xnet_stats) == 16, "ABI: sdn_xnet_stats");

/* sdn_nodes: the tunnel (underlay) address of every other node -> struct
 * sdn_node. Written by the agent from Nodes. sdn_from_overlay drops a packet
 * whose outer source is not in it: the underlay is not trusted blindly.
 */
struct sdn_node {
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_node) == 4, "ABI: sdn_node");

/* sdn_frags: a bridged flow's IP fragments, keyed as they arrive (before the
 * bridge's rewrite) -> what the first fragment was rewritten to. Only the first
 * fragment carries the ports the bridge translates by, so it decides and
 * records; the later ones of the same datagram (same net, addresses, protocol
 * and IP id) follow it. Written and read by the datapath (lib/frag.h); an LRU,
 * so a datagram that never completes costs nothing lasting. id is the IPv4
 * identification (network order) in the low 16 bits; 32 bits leave room for
 * the IPv6 fragment header's.
 */
struct sdn_frag_key {
	__u32 net;		/* the net of the port it is seen on */
	struct sdn_addr src;
	struct sdn_addr dst;
	__u32 id;
	__u8 proto;
	__u8 pad[3];
};
_Static_assert(sizeof(struct sdn_frag_key) == 44, "ABI: sdn_frag_key");

struct sdn_frag {
	struct sdn_addr src;	/* addresses after the rewrite */
	struct sdn_addr dst;
	__be16 sport;		/* the first fragment's ports after the rewrite */
	__be16 dport;
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_frag) == 40, "ABI: sdn_frag");

/* sdn_drops: per-CPU array indexed by -DROP_* (see drop_reasons.h). */
struct sdn_drop_stats {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct sdn_drop_stats) == 16, "ABI: sdn_drop_stats");

/* sdn_net_stats: per-CPU, net -> east-west traffic of that net. tx is counted
 * where a packet leaves its pod (sdn_from_pod), rx where it is handed to the
 * destination pod (sdn_to_pod). Entries are created by the datapath on first
 * use; nets only come from our own maps, so growth is bounded.
 */
struct sdn_net_stats {
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 rx_packets;
	__u64 rx_bytes;
};
_Static_assert(sizeof(struct sdn_net_stats) == 32, "ABI: sdn_net_stats");

#define SDN_PORTS_MAX		65536
#define SDN_ENDPOINTS_MAX	65536
#define SDN_REMOTES_MAX		131072
#define SDN_NODE_BLOCKS_MAX	16384
#define SDN_BRIDGES_MAX		65536
#define SDN_CT_MAX		65536
#define SDN_DNAT_MAX		65536
#define SDN_NET_STATS_MAX	4096
#define SDN_XNET_ROUTES_MAX	16384
#define SDN_XNET_ALLOW_MAX	16384
#define SDN_NODES_MAX		16384
#define SDN_FRAGS_MAX		8192

/*
 * The map definitions themselves. Every object includes all of them, so each
 * ELF carries the full set and whichever object the agent loads first creates
 * and pins them; the others reuse the pins (LIBBPF_PIN_BY_NAME).
 */
#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_PORTS_MAX);
	__type(key, __u32);
	__type(value, struct sdn_port);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_ENDPOINTS_MAX);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_endpoint);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_endpoints SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_REMOTES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_ep_key);
	__type(value, struct sdn_remote);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_remotes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SDN_NODE_BLOCKS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_block_key);
	__type(value, struct sdn_remote);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_node_blocks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_BRIDGES_MAX);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_bridge);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_bridges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_CT_MAX);
	__type(key, struct sdn_ct_fwd_key);
	__type(value, struct sdn_ct_fwd);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_ct_fwd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_CT_MAX);
	__type(key, struct sdn_ct_rev_key);
	__type(value, struct sdn_ct_rev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_ct_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_DNAT_MAX);
	__type(key, struct sdn_dnat_key);
	__type(value, struct sdn_dnat);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_dnat SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_FRAGS_MAX);
	__type(key, struct sdn_frag_key);
	__type(value, struct sdn_frag);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_frags SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SDN_DROP_MAX);
	__type(key, __u32);
	__type(value, struct sdn_drop_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, SDN_NET_STATS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct sdn_net_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_net_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, SDN_XNET_ROUTES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_xnet_key);
	__type(value, struct sdn_xnet_route);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_xnet_routes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_XNET_ALLOW_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_xnet_pair);
	__type(value, struct sdn_xnet_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_xnet_allow SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_NODES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct sdn_addr);
	__type(value, struct sdn_node);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_nodes SEC(".maps");
#endif /* __bpf__ */

/* The cluster-internal ranges, read by every feature below. */
#include <sdn/internal_maps.h>
#include <sdn/dns_maps.h>

/* Maps of the north-south doors, each in its own header. */
#include <sdn/meter_maps.h>
#include <sdn/fip_maps.h>
#include <sdn/lb_gate_maps.h>
/* North-south SNAT maps (h1): their own header. */
#include <sdn/snat_maps.h>
/* The policy layers and their connection table (issue 14). */
#include <sdn/policy_maps.h>
/* The policy layers' drops per layer, net and reason (issue 14). */
#include <sdn/pol_drops_maps.h>
/* Overlay packets that claimed what their sending node does not hold (issue 29). */
#include <sdn/trust_maps.h>
/* The socket-level load balancer of the default network's Services. */
#include <sdn/sock_maps.h>
/* Live migration: the relays between a VM's two launchers (issue 27). */
#include <sdn/migrate_maps.h>
