/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * IPv6 neighbour discovery for the link-local gateway (SDN_GW6, fe80::1),
 * answered in eBPF: the IPv6 twin of lib/arp.h. Every pod's IPv6 default route
 * goes through fe80::1, which no interface owns; a neighbour solicitation for
 * it is turned into the advertisement (router, solicited, override, target
 * link-layer address = gw_mac) and bounced back out of the veth. Nothing of
 * it reaches the host stack or the fabric.
 */
#pragma once

#include "common.h"
#include "parse.h"

#define SDN_ND_LEN	32	/* NS/NA body (24) + one link-layer option (8) */
#define SDN_ND_PKT	(SDN_ETH_HLEN + 40 + SDN_ND_LEN)
#define SDN_ICMP6_NS	135
#define SDN_ICMP6_NA	136

/* Whether p is a neighbour solicitation (caller checked it is ICMPv6). */
static __always_inline int sdn_is_ns(const struct sdn_pkt *p)
{
	return p->family == 6 && p->proto == IPPROTO_ICMPV6 &&
	       p->icmp_type == SDN_ICMP6_NS;
}

/* Returns 1 if the frame is a solicitation for the gateway and was turned
 * into the advertisement (caller redirects it back out), 0 if it asks for
 * anything else (DAD from ::, another target), or a DROP_* reason.
 */
static __sdn_noinline int sdn_ndp_gateway_reply(struct __sk_buff *skb,
						 const struct sdn_pkt *p)
{
	/* The pseudo-header and the ICMPv6 message, summed in one go. */
	struct {
		struct sdn_addr src;
		struct sdn_addr dst;
		__be32 len;
		__be32 nexthdr;
		__u8 icmp[SDN_ND_LEN];
	} nd = {};
	struct sdn_addr target, gw;
	__u8 gw_mac[6];
	__u8 hdr[8] = { 0x60, 0, 0, 0, 0, SDN_ND_LEN, IPPROTO_ICMPV6, 255 };
	__s64 sum;
	__u32 c;

	if (bpf_skb_load_bytes(skb, p->l4_off + 8, &target, sizeof(target)) < 0)
		return DROP_INVALID;
	sdn_gw6(&gw);
	/* A DAD probe (from ::) is no question about the gateway. */
	if (!sdn_addr_eq(&target, &gw) ||
	    !(p->src.w[0] | p->src.w[1] | p->src.w[2] | p->src.w[3]))
		return 0;

	sdn_gw_mac(gw_mac);
	nd.src = gw;
	nd.dst = p->src;
	nd.len = bpf_htonl(SDN_ND_LEN);
	nd.nexthdr = bpf_htonl(IPPROTO_ICMPV6);
	nd.icmp[0] = SDN_ICMP6_NA;
	nd.icmp[4] = 0xe0;	/* router, solicited, override */
	__builtin_memcpy(&nd.icmp[8], &gw, 16);
	nd.icmp[24] = 2;	/* target link-layer address, 8 bytes */
	nd.icmp[25] = 1;
	__builtin_memcpy(&nd.icmp[26], gw_mac, 6);
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&nd, sizeof(nd), 0);
	if (sum < 0)
		return DROP_REWRITE;
	c = (__u32)sum;
	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	c = ~c & 0xffff;
	__builtin_memcpy(&nd.icmp[2], &c, 2);

	/* A solicitation without the source link-layer option is shorter. */
	if (skb->len != SDN_ND_PKT &&
	    bpf_skb_change_tail(skb, SDN_ND_PKT, 0) < 0)
		return DROP_REWRITE;
	if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, hdr, sizeof(hdr), 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_ETH_HLEN + 8, &nd.src, 32, 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_ETH_HLEN + 40, nd.icmp, SDN_ND_LEN, 0) < 0)
		return DROP_REWRITE;
	if (sdn_set_macs(skb, p->src_mac, gw_mac) < 0)
		return DROP_REWRITE;
	return 1;
}
