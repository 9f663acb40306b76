/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The maps of the socket-level load balancer (lib/sock_lb.h, progs/sock.bpf.c):
 * Kubernetes Services of the default network (net 0) translated when a client
 * connects or sends, so its packets leave addressed to a backend and need no
 * per-packet NAT. Included from maps.h, so every object carries them like
 * every other map. Rust mirror: bpf/src/abi.rs (SockNetns, SockRevKey,
 * SockRev), bpf/src/maps/sock_netns.rs, sock_rev.rs, sock_stats.rs.
 *
 * The frontends are the load balancer's own maps (lb_maps.h): sdn_lb_svc
 * under net 0, sdn_lb_maglev and sdn_lb_mag_big, sdn_lb_backends, and
 * sdn_lb_affinity for sessionAffinity. The agent writes sdn_sock_netns (its own netns at start,
 * a pod's at CNI ADD, removed at DEL: agent/src/core/node.rs,
 * agent/src/core/cni/add.rs, del.rs); the datapath writes sdn_sock_rev and
 * sdn_sock_stats.
 */
#pragma once

#include <linux/types.h>
#include <sdn/addr.h>

/* sdn_sock_netns: netns cookie (SO_NETNS_COOKIE, bpf_get_netns_cookie) -> the
 * net that netns is on. The hooks sit on a cgroup2 directory (the root: every
 * process of the machine), so this map is what limits them to the sockets of
 * this node: its own netns and its pods'. A netns not listed (another node of
 * a lab sharing the machine, a process the agent knows nothing of) or listed
 * with a VPC's net (whose 10.96.x may be its own tenant address) is left
 * alone.
 */
struct sdn_sock_netns {
	__u32 net;		/* 0: translated; a VPC's VNI: left alone */
	__u32 flags;		/* reserved, 0 */
};
_Static_assert(sizeof(struct sdn_sock_netns) == 8, "ABI: sdn_sock_netns");

/* sdn_sock_rev: a translated socket's backend -> the frontend it asked for,
 * so recvmsg (a UDP reply's source) and getpeername show the VIP. Keyed by
 * the socket cookie (never reused while the machine runs), so one client's
 * entries never answer for another's socket; an LRU, as nothing tells the
 * map a socket closed.
 */
struct sdn_sock_rev_key {
	__u64 cookie;		/* bpf_get_socket_cookie() of the client's socket */
	struct sdn_addr backend;
	__be16 port;		/* the backend's port */
	__u8 proto;		/* IPPROTO_TCP or IPPROTO_UDP */
	__u8 pad[5];
};
_Static_assert(sizeof(struct sdn_sock_rev_key) == 32, "ABI: sdn_sock_rev_key");

struct sdn_sock_rev {
	struct sdn_addr vip;
	__be16 port;		/* the Service port */
	__u8 pad[2];
};
_Static_assert(sizeof(struct sdn_sock_rev) == 20, "ABI: sdn_sock_rev");

/* sessionAffinity of a socket client in sdn_lb_affinity: the key's net is
 * this value, outside the 24-bit VNI space, and its client address holds the
 * client's netns cookie (first 8 bytes, host order, the rest 0). A socket
 * client can so never share an entry with a client of the tc path, whose
 * key is a real net and a real address.
 */
#define SDN_SOCK_AFF_NET	0x80000000u

/* sdn_sock_stats: per-CPU array of counters, indexed by SDN_SOCK_STAT_*. */
#define SDN_SOCK_STAT_CONNECT	0	/* connect()s to a frontend, given a backend */
#define SDN_SOCK_STAT_SENDMSG	1	/* datagrams to a frontend, given a backend */
#define SDN_SOCK_STAT_REFUSED	2	/* connect()s and datagrams refused: no backend */
#define SDN_SOCK_STAT_REVERSED	3	/* recvmsg/getpeername addresses shown as the VIP */
#define SDN_SOCK_STAT_MAX	8

#define SDN_SOCK_NETNS_MAX	16384
#define SDN_SOCK_REV_MAX	65536

#ifdef __bpf__
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SDN_SOCK_NETNS_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct sdn_sock_netns);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_sock_netns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, SDN_SOCK_REV_MAX);
	__type(key, struct sdn_sock_rev_key);
	__type(value, struct sdn_sock_rev);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_sock_rev SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SDN_SOCK_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} sdn_sock_stats SEC(".maps");
#endif /* __bpf__ */
