/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The one address type of the datapath ABI.
 *
 * Rust mirror: bpf/src/abi.rs (`Addr`), checked against this file by
 * bpf/tests/abi_layout.rs. Conversions from std::net live in bpf/src/addr.rs.
 */
#pragma once

#include <linux/types.h>

/*
 * Every address in every map is 128 bits in network byte order. IPv4 is stored
 * in the RFC 6052 well-known-prefix form 64:ff9b::a.b.c.d, never as a
 * v4-mapped ::ffff:a.b.c.d, so one key type serves both families and a v4 key
 * can never collide with a real v6 address a pod might use.
 */
struct sdn_addr {
	union {
		__u8 b[16];
		__be32 w[4];
	};
};
_Static_assert(sizeof(struct sdn_addr) == 16, "ABI: sdn_addr");
_Static_assert(_Alignof(struct sdn_addr) == 4, "ABI: sdn_addr align");

/* 64:ff9b::/96 as the first three 32-bit words, network byte order. */
#define SDN_NAT64_W0 __builtin_bswap32(0x0064ff9b)
#define SDN_NAT64_W1 0
#define SDN_NAT64_W2 0
