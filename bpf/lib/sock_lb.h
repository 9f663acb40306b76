/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Socket-level load balancing of the default network's Services (net 0), as
 * Cilium's socket LB does: a client's connect() (TCP, connected UDP) or
 * sendto() (unconnected UDP) to a frontend {0, VIP, port, proto} of
 * sdn_lb_svc is given a backend's address before the kernel routes anything.
 * Every packet of the connection then leaves addressed to the backend and
 * nothing rewrites it on the way: no per-packet NAT, no conntrack entry, no
 * kube-proxy rule. The way back needs no rewrite either; only what the
 * application is told is: recvmsg (a UDP reply's source) and getpeername show
 * the VIP again, from sdn_sock_rev. Maps: include/sdn/sock_maps.h, and the
 * frontends of include/sdn/lb_maps.h.
 *
 * Which sockets. The hooks sit on a cgroup2 directory (on a node, the root:
 * every process of the machine), so only a socket whose netns is in
 * sdn_sock_netns with net 0 is translated: the node's own netns and its
 * net-0 pods'. Everything else is left alone: a VPC pod (its 10.96.x may be
 * its tenant's own address; its ServiceVIPs take the tc path, lib/lb.h), and
 * any netns this agent did not register (a lab runs several nodes as netns of
 * one machine, each agent with its own maps and links on the same root).
 *
 * Backend choice. The frontend's Maglev table, the one the tc path uses
 * (sdn_lb_pick). The tc path hashes the flow's tuple; at connect() the source
 * port is not chosen yet, so the hash is over the socket cookie and the
 * frontend id: one client's connections spread over the backends as flows
 * do, and an unconnected UDP socket, translated datagram by datagram, keeps
 * its backend while the table does not change. With sessionAffinity the
 * client is its netns (a pod, or the node itself) instead of its address:
 * the sdn_lb_affinity entry is keyed {SDN_SOCK_AFF_NET, netns cookie,
 * frontend id}, a key no tc-path client can have, and holds its backend for
 * `affinity` seconds after the last use. sdn_lb_flows has no counterpart: a
 * connected socket is translated once, for its life, which keeps the tc
 * path's promise that a new table never moves an established flow.
 *
 * The tc path balances the same frontends packet by packet wherever it runs
 * (a VPC's ServiceVIPs; net 0 from pods where sdn_from_pod serves it). A
 * translated socket's packets carry a backend's address, no frontend, so the
 * two never both act on one connection, and what this path leaves alone (a
 * socket connected before the hooks were attached, a netns not registered
 * yet) still meets the tc path. Only the node's own sockets (host network)
 * have no tc path to fall back on.
 *
 * A frontend without a backend (count 0, or a slot naming a backend that is
 * gone, or of the other family) refuses: connect() and sendto() fail with
 * ECONNREFUSED (bpf_set_retval, then the hook's reject, which keeps that
 * error instead of EPERM), like kube-proxy's REJECT rule.
 */
#pragma once

#include <linux/errno.h>

#include "common.h"
#include "lb.h"

/* What a cgroup sock_addr hook returns: go on with the (rewritten) address,
 * or fail the call with the error set by bpf_set_retval.
 */
#define SDN_SOCK_PROCEED	1
#define SDN_SOCK_REJECT		0

static __always_inline void sdn_sock_count(__u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(&sdn_sock_stats, &idx);

	if (c)
		*c += 1;
}

/* lb.h's mix over a 64-bit value, with murmur3's finaliser. */
static __always_inline __u32 sdn_sock_hash(__u64 v, __u32 svc)
{
	__u32 h = svc;

	h = sdn_lb_mix(h, (__u32)v);
	h = sdn_lb_mix(h, (__u32)(v >> 32));
	return sdn_lb_fmix(h);
}

/* The backend id for a socket of netns `netns`; 0 for none. */
static __always_inline __u32 sdn_sock_select(struct bpf_sock_addr *ctx,
					     __u64 netns,
					     const struct sdn_lb_svc *svc)
{
	struct sdn_lb_aff_key ak = { .net = SDN_SOCK_AFF_NET, .svc = svc->id };
	struct sdn_lb_aff *a, na = {};
	__u64 now;

	if (!svc->affinity)
		return sdn_lb_pick(svc, sdn_sock_hash(bpf_get_socket_cookie(ctx),
						      svc->id));
	ak.client.w[0] = (__u32)netns;
	ak.client.w[1] = (__u32)(netns >> 32);
	now = bpf_ktime_get_ns();
	a = bpf_map_lookup_elem(&sdn_lb_affinity, &ak);
	if (a && now - a->seen_ns < svc->affinity * SDN_NSEC_PER_SEC &&
	    bpf_map_lookup_elem(&sdn_lb_backends, &a->backend)) {
		a->seen_ns = now;
		return a->backend;
	}
	/* A client's first pick: over the netns, not the socket (one client,
	 * one backend). After its affinity expired: over this socket, as
	 * without affinity, so the client may move (kube-proxy picks anew;
	 * the netns would only give the same backend back).
	 */
	na.backend = sdn_lb_pick(svc, sdn_sock_hash(a ? bpf_get_socket_cookie(ctx) :
							  netns,
						  svc->id));
	na.seen_ns = now;
	if (na.backend)
		bpf_map_update_elem(&sdn_lb_affinity, &ak, &na, BPF_ANY);
	return na.backend;
}

/*
 * The destination *addr:*port (128-bit form) of the hook's socket: a frontend
 * of net 0, asked from a netns of net 0, becomes a backend of the same family
 * and the way back is recorded. Returns 1 (rewritten), 0 (left alone) or -1
 * (a frontend without a backend: refuse).
 */
static __always_inline int sdn_sock_xlate(struct bpf_sock_addr *ctx,
					  struct sdn_addr *addr, __be16 *port)
{
	struct sdn_lb_key k = { .vip = *addr, .port = *port };
	struct sdn_sock_rev_key rk = {};
	struct sdn_sock_rev rv = {}, *old;
	struct sdn_lb_backend *be;
	struct sdn_sock_netns *ns;
	struct sdn_lb_svc *svc;
	__u32 id, proto = ctx->protocol;
	__u64 netns;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return 0;
	k.proto = proto;
	/* The frontend first: most connect()s are to no Service, and on a
	 * node nearly every netns is registered.
	 */
	svc = bpf_map_lookup_elem(&sdn_lb_svc, &k);
	if (!svc)
		return 0;
	netns = bpf_get_netns_cookie(ctx);
	ns = bpf_map_lookup_elem(&sdn_sock_netns, &netns);
	if (!ns || ns->net != 0)
		return 0;
	if (!svc->count)
		return -1;
	id = sdn_sock_select(ctx, netns, svc);
	be = id ? bpf_map_lookup_elem(&sdn_lb_backends, &id) : NULL;
	if (!be || sdn_addr_is_v4(&be->addr) != sdn_addr_is_v4(addr))
		return -1;

	rk.cookie = bpf_get_socket_cookie(ctx);
	rk.backend = be->addr;
	rk.port = be->port;
	rk.proto = proto;
	rv.vip = *addr;
	rv.port = *port;
	/* A UDP socket asks for every datagram: write only what changed. */
	old = bpf_map_lookup_elem(&sdn_sock_rev, &rk);
	if (!old || !sdn_addr_eq(&old->vip, addr) || old->port != *port)
		bpf_map_update_elem(&sdn_sock_rev, &rk, &rv, BPF_ANY);
	*addr = be->addr;
	*port = be->port;
	return 1;
}

/* A forward hook's return: go on, or refuse with ECONNREFUSED. */
static __always_inline int sdn_sock_verdict(int ret, __u32 stat)
{
	if (ret < 0) {
		sdn_sock_count(SDN_SOCK_STAT_REFUSED);
		bpf_set_retval(-ECONNREFUSED);
		return SDN_SOCK_REJECT;
	}
	if (ret > 0)
		sdn_sock_count(stat);
	return SDN_SOCK_PROCEED;
}

/* ::ffff:a.b.c.d (an IPv4 peer of a dual-stack IPv6 socket) in the map form
 * 64:ff9b::a.b.c.d; returns whether it was one.
 */
static __always_inline int sdn_sock_unmap(struct sdn_addr *a)
{
	if (a->w[0] || a->w[1] || a->w[2] != bpf_htonl(0xffff))
		return 0;
	sdn_addr_from_v4(a, a->w[3]);
	return 1;
}

static __always_inline void sdn_sock_map(struct sdn_addr *a)
{
	a->w[0] = 0;
	a->w[1] = 0;
	a->w[2] = bpf_htonl(0xffff);
}

static __always_inline void sdn_sock_load6(struct bpf_sock_addr *ctx,
					   struct sdn_addr *a)
{
	a->w[0] = ctx->user_ip6[0];
	a->w[1] = ctx->user_ip6[1];
	a->w[2] = ctx->user_ip6[2];
	a->w[3] = ctx->user_ip6[3];
}

static __always_inline void sdn_sock_store6(struct bpf_sock_addr *ctx,
					    const struct sdn_addr *a)
{
	ctx->user_ip6[0] = a->w[0];
	ctx->user_ip6[1] = a->w[1];
	ctx->user_ip6[2] = a->w[2];
	ctx->user_ip6[3] = a->w[3];
}

/* connect4, sendmsg4: the destination; `stat` counts a translation. */
static __always_inline int sdn_sock_fwd4(struct bpf_sock_addr *ctx, __u32 stat)
{
	__be16 port = (__be16)ctx->user_port;
	struct sdn_addr a;
	int ret;

	sdn_addr_from_v4(&a, ctx->user_ip4);
	ret = sdn_sock_xlate(ctx, &a, &port);
	if (ret > 0) {
		ctx->user_ip4 = a.w[3];
		ctx->user_port = port;
	}
	return sdn_sock_verdict(ret, stat);
}

/* connect6, sendmsg6; an IPv4-mapped destination is an IPv4 frontend and
 * gets an IPv4 backend, mapped back. A native IPv6 destination inside
 * 64:ff9b::/96 is somebody's NAT64 address, never a frontend.
 */
static __always_inline int sdn_sock_fwd6(struct bpf_sock_addr *ctx, __u32 stat)
{
	__be16 port = (__be16)ctx->user_port;
	struct sdn_addr a;
	int mapped, ret;

	sdn_sock_load6(ctx, &a);
	mapped = sdn_sock_unmap(&a);
	if (!mapped && sdn_addr_is_v4(&a))
		return SDN_SOCK_PROCEED;
	ret = sdn_sock_xlate(ctx, &a, &port);
	if (ret > 0) {
		if (mapped)
			sdn_sock_map(&a);
		sdn_sock_store6(ctx, &a);
		ctx->user_port = port;
	}
	return sdn_sock_verdict(ret, stat);
}

/* The peer *addr:*port of a translated socket back to its frontend; returns
 * whether it was one.
 */
static __always_inline int sdn_sock_unxlate(struct bpf_sock_addr *ctx,
					    struct sdn_addr *addr, __be16 *port)
{
	struct sdn_sock_rev_key rk = {
		.backend = *addr,
		.port = *port,
	};
	struct sdn_sock_rev *rv;
	__u32 proto = ctx->protocol;

	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return 0;
	rk.proto = proto;
	rk.cookie = bpf_get_socket_cookie(ctx);
	rv = bpf_map_lookup_elem(&sdn_sock_rev, &rk);
	if (!rv)
		return 0;
	*addr = rv->vip;
	*port = rv->port;
	sdn_sock_count(SDN_SOCK_STAT_REVERSED);
	return 1;
}

/* recvmsg4, getpeername4: the peer as the application must see it. These
 * hooks cannot fail a call (the verifier allows only 1).
 */
static __always_inline int sdn_sock_rev4(struct bpf_sock_addr *ctx)
{
	__be16 port = (__be16)ctx->user_port;
	struct sdn_addr a;

	sdn_addr_from_v4(&a, ctx->user_ip4);
	if (sdn_sock_unxlate(ctx, &a, &port)) {
		ctx->user_ip4 = a.w[3];
		ctx->user_port = port;
	}
	return SDN_SOCK_PROCEED;
}

/* recvmsg6, getpeername6 (an IPv4 peer of a dual-stack socket is mapped). */
static __always_inline int sdn_sock_rev6(struct bpf_sock_addr *ctx)
{
	__be16 port = (__be16)ctx->user_port;
	struct sdn_addr a;
	int mapped;

	sdn_sock_load6(ctx, &a);
	mapped = sdn_sock_unmap(&a);
	if (!mapped && sdn_addr_is_v4(&a))
		return SDN_SOCK_PROCEED;
	if (sdn_sock_unxlate(ctx, &a, &port)) {
		if (mapped)
			sdn_sock_map(&a);
		sdn_sock_store6(ctx, &a);
		ctx->user_port = port;
	}
	return SDN_SOCK_PROCEED;
}
