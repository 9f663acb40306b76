/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Header parsing into a stack summary. Everything is read with
 * bpf_skb_load_bytes() rather than direct packet access: the programs rewrite
 * headers with helpers later, and helpers invalidate packet pointers, so a
 * copy on the stack is what the rest of the code can rely on. It also works
 * for non-linear skbs without a bpf_skb_pull_data().
 */
#pragma once

#include "common.h"

#define SDN_ETH_HLEN		14
#define SDN_OFF_IP4_CSUM	(SDN_ETH_HLEN + 10)
#define SDN_OFF_IP4_SRC		(SDN_ETH_HLEN + 12)
#define SDN_OFF_IP4_DST		(SDN_ETH_HLEN + 16)

#define SDN_IP_MF		0x2000
#define SDN_IP_OFFSET		0x1fff

/* sdn_pkt.frag: the first fragment carries the L4 header (parsed as usual),
 * the later ones carry none (ports stay 0).
 */
#define SDN_FRAG_FIRST		1
#define SDN_FRAG_LATER		2

struct sdn_pkt {
	__u8 dst_mac[6];
	__u8 src_mac[6];
	__u16 eth_proto;	/* host byte order */
	__u8 family;		/* 4 or 6; 0 if not IP */
	__u8 proto;		/* L4 protocol (IPv6: first next header) */
	__u8 frag;		/* SDN_FRAG_*: 0 for a whole datagram */
	__u8 icmp_type;
	__u16 l4_off;
	__be16 sport;		/* TCP/UDP ports; ICMP echo: id in both */
	__be16 dport;
	__u32 frag_id;		/* IPv4 identification (network order), for sdn_frags */
	struct sdn_addr src;
	struct sdn_addr dst;
};

/* Returns 0, or a DROP_* reason. */
static __always_inline int sdn_parse(struct __sk_buff *skb, struct sdn_pkt *p)
{
	struct ethhdr eth;

	if (bpf_skb_load_bytes(skb, 0, &eth, sizeof(eth)) < 0)
		return DROP_INVALID;
	__builtin_memcpy(p->dst_mac, eth.h_dest, 6);
	__builtin_memcpy(p->src_mac, eth.h_source, 6);
	p->eth_proto = bpf_ntohs(eth.h_proto);
	p->family = 0;
	p->frag = 0;
	p->frag_id = 0;
	p->proto = 0;
	p->icmp_type = 0;
	p->sport = 0;
	p->dport = 0;

	if (p->eth_proto == ETH_P_IP) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip)) < 0)
			return DROP_INVALID;
		if (ip.version != 4 || ip.ihl < 5)
			return DROP_INVALID;
		p->family = 4;
		p->proto = ip.protocol;
		p->l4_off = SDN_ETH_HLEN + ip.ihl * 4;
		if (ip.frag_off & bpf_htons(SDN_IP_OFFSET))
			p->frag = SDN_FRAG_LATER;
		else if (ip.frag_off & bpf_htons(SDN_IP_MF))
			p->frag = SDN_FRAG_FIRST;
		p->frag_id = ip.id;
		sdn_addr_from_v4(&p->src, ip.saddr);
		sdn_addr_from_v4(&p->dst, ip.daddr);
	} else if (p->eth_proto == ETH_P_IPV6) {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip6, sizeof(ip6)) < 0)
			return DROP_INVALID;
		if (ip6.version != 6)
			return DROP_INVALID;
		p->family = 6;
		/* Extension headers are not walked (see docs/datapath.md). */
		p->proto = ip6.nexthdr;
		p->l4_off = SDN_ETH_HLEN + sizeof(ip6);
		__builtin_memcpy(p->src.b, &ip6.saddr, 16);
		__builtin_memcpy(p->dst.b, &ip6.daddr, 16);
	} else {
		return 0;
	}

	if (p->frag == SDN_FRAG_LATER)
		return 0;
	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		__be16 ports[2];

		if (bpf_skb_load_bytes(skb, p->l4_off, ports, sizeof(ports)) < 0)
			return DROP_INVALID;
		p->sport = ports[0];
		p->dport = ports[1];
	} else if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6) {
		/* type, code, checksum, echo id; errors are as long. */
		__u8 icmp[8];

		if (bpf_skb_load_bytes(skb, p->l4_off, icmp, sizeof(icmp)) < 0)
			return DROP_INVALID;
		p->icmp_type = icmp[0];
		__builtin_memcpy(&p->sport, &icmp[4], 2);
		p->dport = p->sport;
	}
	return 0;
}

/* Link-scoped ICMPv6 (MLD and NDP, sent from fe80:: or ::, which are no
 * endpoints): it stays on the link, i.e. goes to the host side of the veth
 * and no further. Solicitations for the gateway never get here (lib/ndp.h).
 */
static __always_inline int sdn_is_ndp(const struct sdn_pkt *p)
{
	if (p->family != 6 || p->proto != IPPROTO_ICMPV6)
		return 0;
	/* MLD query/report/done, RS, RA, NS, NA, redirect; MLDv2 report */
	return (p->icmp_type >= 130 && p->icmp_type <= 137) ||
	       p->icmp_type == 143;
}

/* IPv6 that stays on the link whatever its protocol: from fe80::/10 or ::
 * (which are no endpoints), or to a multicast group of interface or link
 * scope (MLD reports carry a hop-by-hop header, so sdn_is_ndp cannot see
 * them). It goes to the host end of the veth, which forwards none of it.
 */
static __always_inline int sdn_is_link_scoped6(const struct sdn_pkt *p)
{
	if (p->family != 6)
		return 0;
	if (p->src.b[0] == 0xfe && (p->src.b[1] & 0xc0) == 0x80)
		return 1;
	if (!(p->src.w[0] | p->src.w[1] | p->src.w[2] | p->src.w[3]))
		return 1;
	return p->dst.b[0] == 0xff && (p->dst.b[1] & 0x0f) <= 2;
}

/* Rewrite both MACs of the frame, as a router hop would. */
static __always_inline int sdn_set_macs(struct __sk_buff *skb, const __u8 *dst,
					const __u8 *src)
{
	__u8 macs[12];

	__builtin_memcpy(macs, dst, 6);
	__builtin_memcpy(macs + 6, src, 6);
	return bpf_skb_store_bytes(skb, 0, macs, sizeof(macs), 0);
}
