/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Load-time configuration knobs. Each DECLARE_CONFIG becomes a
 * `volatile const __config_<name>` in .rodata, which the loader patches before
 * load (aya EbpfLoader::override_global with must_exist = true, so a rename on
 * either side fails the load instead of silently using the default). The
 * verifier then sees constants and prunes dead branches.
 *
 * Rust mirror: bpf/src/config.rs (`DatapathConfig`, one field per knob with the
 * same name and description). Consumer: the agent's datapath loader.
 */
#pragma once

#include <linux/types.h>

#include "addr.h"

/* The default comes last so that brace initialisers survive the preprocessor. */
#define DECLARE_CONFIG(type, name, desc, ...) \
	volatile const type __config_##name = __VA_ARGS__

#define CONFIG(name) (__config_##name)

/* Six bytes without the alignment games of a raw __u8[6] global. */
struct sdn_mac {
	__u8 addr[6];
};
_Static_assert(sizeof(struct sdn_mac) == 6, "ABI: sdn_mac");

#ifdef SDN_DEFINE_CONFIG
DECLARE_CONFIG(__u32, tunnel_ifindex,
	       "ifindex of the collect-metadata VXLAN/Geneve device; 0 = no overlay",
	       0);
DECLARE_CONFIG(__u32, net0_vni,
	       "VNI that carries the default network (net 0) on the wire",
	       1);
DECLARE_CONFIG(__be32, gw_ipv4,
	       "Link-local IPv4 gateway every pod routes through, network byte order",
	       __builtin_bswap32(0xa9fe0101) /* 169.254.1.1 */);
DECLARE_CONFIG(struct sdn_mac, gw_mac,
	       "MAC that answers ARP for the gateway and sources frames delivered to pods",
	       { { 0x02, 0xcf, 0x00, 0x00, 0x00, 0x01 } });
DECLARE_CONFIG(struct sdn_mac, tunnel_mac,
	       "Inner destination MAC of overlay frames: the tunnel device MAC, equal on all nodes",
	       { { 0x02, 0xcf, 0xcf, 0xcf, 0xcf, 0xcf } });
DECLARE_CONFIG(__u32, dnat_mark,
	       "skb mark bit the agent's netfilter rule sets on DNATed packets routed into a pod; 0 = none",
	       0x00100000);
DECLARE_CONFIG(__u32, tunnel_groups,
	       "How the source's SecurityGroups travel in the tunnel option (lib/policy.h): 0 = not carried, 1 = VXLAN-GBP policy id (the device needs gbp), 2 = a Geneve option",
	       0);
DECLARE_CONFIG(__u32, tunnel_port,
	       "UDP port of the overlay (the agent's --tunnel-port), host byte order: HostFirewall exempts it between known nodes",
	       4789);
DECLARE_CONFIG(struct sdn_addr, own_block,
	       "This node's IPv4 fabric block (64:ff9b::/96 form): no other node may send from it over the overlay",
	       { { { 0 } } });
DECLARE_CONFIG(__u32, own_block_len,
	       "Prefix length of own_block in the 128-bit form (96 + the IPv4 length); 0 = none",
	       0);
DECLARE_CONFIG(struct sdn_addr, own_block6,
	       "This node's IPv6 fabric block: no other node may send from it over the overlay",
	       { { { 0 } } });
DECLARE_CONFIG(__u32, own_block6_len,
	       "Prefix length of own_block6; 0 = none",
	       0);
#endif

#define SDN_NET_MAX		0x00ffffff	/* a net is a 24-bit VNI */

/* Gateway ports the bridge masquerades fabric clients to (host byte order). */
#define SDN_GW_PORT_MIN		32768
#define SDN_GW_PORT_SPAN	28232	/* 32768..60999 */
#define SDN_GW_PORT_TRIES	8

#define SDN_TUNNEL_TTL		64

/* The IPv6 link-local gateway of every pod, fe80::1 (the agent's GATEWAY6):
 * its neighbour solicitations are answered in eBPF (lib/ndp.h), and the fabric
 * bridge masquerades IPv6 clients to it. The first and last 32-bit words in
 * network byte order; the middle two are zero.
 */
#define SDN_GW6_W0		__builtin_bswap32(0xfe800000)
#define SDN_GW6_W3		__builtin_bswap32(0x00000001)
