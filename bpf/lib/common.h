/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Included first by every program: kernel UAPI, libbpf helpers, the ABI and
 * the config globals. Each program is its own compilation unit, so defining
 * the config globals here gives every object its own .rodata copy, patched
 * independently by the loader.
 */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/pkt_cls.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define SDN_DEFINE_CONFIG
#include <sdn/addr.h>
#include <sdn/config.h>
#include <sdn/drop_reasons.h>
#include <sdn/maps.h>

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* linux/icmp.h drags in glibc's socket headers, which -target bpf lacks. */
#define ICMP_ECHOREPLY	0
#define ICMP_ECHO	8
#define ICMPV6_ECHO_REQUEST	128
#define ICMPV6_ECHO_REPLY	129

#define likely(x)	__builtin_expect(!!(x), 1)
#define unlikely(x)	__builtin_expect(!!(x), 0)

static __always_inline void sdn_addr_from_v4(struct sdn_addr *a, __be32 ip)
{
	a->w[0] = SDN_NAT64_W0;
	a->w[1] = SDN_NAT64_W1;
	a->w[2] = SDN_NAT64_W2;
	a->w[3] = ip;
}

/* The IPv6 gateway, fe80::1 (see SDN_GW6_W0). */
static __always_inline void sdn_gw6(struct sdn_addr *a)
{
	a->w[0] = SDN_GW6_W0;
	a->w[1] = 0;
	a->w[2] = 0;
	a->w[3] = SDN_GW6_W3;
}

static __always_inline int sdn_addr_is_v4(const struct sdn_addr *a)
{
	return a->w[0] == SDN_NAT64_W0 && a->w[1] == SDN_NAT64_W1 &&
	       a->w[2] == SDN_NAT64_W2;
}

static __always_inline int sdn_addr_eq(const struct sdn_addr *a,
				       const struct sdn_addr *b)
{
	return a->w[0] == b->w[0] && a->w[1] == b->w[1] &&
	       a->w[2] == b->w[2] && a->w[3] == b->w[3];
}

static __always_inline int sdn_mac_eq(const __u8 *a, const __u8 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] &&
	       a[3] == b[3] && a[4] == b[4] && a[5] == b[5];
}

/* The config MAC is volatile; copy it byte by byte into a plain buffer. */
static __always_inline void sdn_gw_mac(__u8 *out)
{
#pragma unroll
	for (int i = 0; i < 6; i++)
		out[i] = CONFIG(gw_mac).addr[i];
}

static __always_inline void sdn_tunnel_mac(__u8 *out)
{
#pragma unroll
	for (int i = 0; i < 6; i++)
		out[i] = CONFIG(tunnel_mac).addr[i];
}

/* A BPF-to-BPF subprogram: its locals live in its own frame, not in the
 * caller's. The pod program inlines every feature's path, and the sum of their
 * locals went past the verifier's 512-byte combined stack (576 once the doors,
 * DNS steering, the VPC load balancer and the SNAT engine were all in): the
 * bigger branches of sdn_from_pod are subprograms for that reason.
 */
#ifndef __sdn_noinline
#define __sdn_noinline		__attribute__((noinline, unused))
#endif
