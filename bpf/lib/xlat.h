/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Cross-family header translation (stateless IP/ICMP translation, RFC 7915),
 * the building block of NAT46/NAT64: the fabric bridge of a v6-only VPC pod
 * on a v4 default network, and the DNS steering of its queries. The caller
 * owns the state and picks the addresses; this file swaps the IP header and
 * fixes the L4 checksum. Ports are left alone (sdn_nat4_port rewrites them
 * afterwards, in either family).
 *
 * Translated: TCP, UDP with a checksum, and ICMP echo <-> ICMPv6 echo. Refused
 * with DROP_XLAT (counted, never passed half-translated): IPv4 options,
 * fragments (IPv4 with MF or an offset; IPv6 fragment headers are not walked,
 * see docs/datapath.md, and are no TCP/UDP/ICMPv6 here), a UDP datagram
 * without a checksum (IPv6 requires one, and computing it means reading the
 * whole payload), ICMP errors and every other protocol.
 *
 * Checksums: TCP and UDP cover a pseudo-header in both families, whose length
 * and protocol words sum alike, so only the addresses change it. ICMPv4 covers
 * no pseudo-header and ICMPv6 does: it is added (4->6) or taken out (6->4),
 * with the type change. Every change goes in with BPF_F_PSEUDO_HDR, so that a
 * CHECKSUM_PARTIAL skb (a TCP probe the node itself sends) keeps its partial
 * sum right.
 */
#pragma once

#include "common.h"
#include "icmp_quote.h"
#include "parse.h"

#define SDN_OFF_ETH_PROTO	12
#define SDN_IP6_HLEN		40
#define SDN_IP4_HLEN		20
#define SDN_IP_DF		0x4000

/* The ICMPv6 pseudo-header (RFC 8200 8.1), summed when translating echo. */
struct sdn_xlat_ph6 {
	struct sdn_addr src;
	struct sdn_addr dst;
	__be32 len;
	__be32 next;
};

/* 0 if p is something the translator takes, else DROP_XLAT. */
static __always_inline int sdn_xlat_takes(struct __sk_buff *skb,
					  const struct sdn_pkt *p)
{
	__be16 check;

	if (p->frag)
		return DROP_XLAT;
	switch (p->proto) {
	case IPPROTO_TCP:
		return 0;
	case IPPROTO_UDP:
		if (bpf_skb_load_bytes(skb, p->l4_off + 6, &check, sizeof(check)) < 0)
			return DROP_INVALID;
		return check ? 0 : DROP_XLAT;
	case IPPROTO_ICMP:
		return p->icmp_type == ICMP_ECHO || p->icmp_type == ICMP_ECHOREPLY ?
			       0 : DROP_XLAT;
	case IPPROTO_ICMPV6:
		return p->icmp_type == ICMPV6_ECHO_REQUEST ||
				       p->icmp_type == ICMPV6_ECHO_REPLY ?
			       0 : DROP_XLAT;
	}
	return DROP_XLAT;
}

/* The echo type of the other family. */
static __always_inline __u8 sdn_xlat_echo_type(__u8 type)
{
	switch (type) {
	case ICMP_ECHO:
		return ICMPV6_ECHO_REQUEST;
	case ICMP_ECHOREPLY:
		return ICMPV6_ECHO_REPLY;
	case ICMPV6_ECHO_REQUEST:
		return ICMP_ECHO;
	}
	return ICMP_ECHOREPLY;
}

/*
 * The L4 part of a translation, after the new IP header is in place at
 * p->l4_off (already the new offset). from/to are the old and new address
 * pairs as they lie in the pseudo-headers; ph6 the ICMPv6 pseudo-header
 * (added going to v6, removed going to v4).
 */
static __always_inline int sdn_xlat_l4(struct __sk_buff *skb,
				       const struct sdn_pkt *p, __u8 new_type,
				       __be32 *from, __u32 from_len, __be32 *to,
				       __u32 to_len,
				       const struct sdn_xlat_ph6 *ph6, int to6)
{
	__u64 flags = BPF_F_PSEUDO_HDR;
	__s64 diff;
	int off;

	if (p->proto == IPPROTO_TCP || p->proto == IPPROTO_UDP) {
		off = p->l4_off + (p->proto == IPPROTO_TCP ? 16 : 6);
		if (p->proto == IPPROTO_UDP)
			flags |= BPF_F_MARK_MANGLED_0;
		diff = bpf_csum_diff(from, from_len, to, to_len, 0);
	} else {
		/* The type byte, code 0 beside it, the checksum bytes left out. */
		__be32 old_w = 0, new_w = 0;

		((__u8 *)&old_w)[0] = p->icmp_type;
		((__u8 *)&new_w)[0] = new_type;
		off = p->l4_off + 2;
		diff = bpf_csum_diff(&old_w, 4, &new_w, 4, 0);
		if (diff < 0)
			return DROP_REWRITE;
		if (to6)
			diff = bpf_csum_diff(NULL, 0, (__be32 *)ph6, sizeof(*ph6),
					     (__u32)diff);
		else
			diff = bpf_csum_diff((__be32 *)ph6, sizeof(*ph6), NULL, 0,
					     (__u32)diff);
		if (diff < 0 ||
		    bpf_skb_store_bytes(skb, p->l4_off, &new_type, 1, 0) < 0)
			return DROP_REWRITE;
	}
	if (diff < 0 || bpf_l4_csum_replace(skb, off, 0, diff, flags) < 0)
		return DROP_REWRITE;
	return 0;
}

/* The first 8 bytes of an IPv6 header; the addresses follow as in ph6. */
struct sdn_xlat_ip6_head {
	__be32 vtc_flow;
	__be16 payload_len;
	__u8 nexthdr;
	__u8 hop_limit;
};

/*
 * IPv4 -> IPv6: p (parsed, family 4) leaves as src6 -> dst6. On success p
 * describes the new packet. 0 or a DROP_*. The frames of both directions
 * are kept small (the new header is stored from the pseudo-header's
 * addresses; the old addresses are summed where they lie): the bridge's
 * reverse path calls this under sdn_from_pod's own frame.
 */
static __sdn_noinline int sdn_xlat_4to6(struct __sk_buff *skb,
					struct sdn_pkt *p,
					const struct sdn_addr *src6,
					const struct sdn_addr *dst6)
{
	__be16 eth_proto = bpf_htons(ETH_P_IPV6);
	struct sdn_xlat_ip6_head h;
	struct sdn_xlat_ph6 ph6;
	struct iphdr ip;
	__u8 new_type;
	__u16 plen;
	int ret;

	if (p->family != 4)
		return DROP_XLAT;
	if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip)) < 0)
		return DROP_INVALID;
	if (ip.ihl != 5)
		return DROP_XLAT;
	ret = sdn_xlat_takes(skb, p);
	if (ret)
		return ret;
	plen = bpf_ntohs(ip.tot_len);
	if (plen < SDN_IP4_HLEN)
		return DROP_INVALID;
	plen -= SDN_IP4_HLEN;

	/* Version 6, the TOS as traffic class, flow label 0. */
	h.vtc_flow = bpf_htonl((6u << 28) | ((__u32)ip.tos << 20));
	h.payload_len = bpf_htons(plen);
	h.nexthdr = p->proto == IPPROTO_ICMP ? IPPROTO_ICMPV6 : p->proto;
	h.hop_limit = ip.ttl;
	ph6.src = *src6;
	ph6.dst = *dst6;
	ph6.len = bpf_htonl(plen);
	ph6.next = bpf_htonl(IPPROTO_ICMPV6);
	new_type = sdn_xlat_echo_type(p->icmp_type);

	if (bpf_skb_change_proto(skb, eth_proto, 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_OFF_ETH_PROTO, &eth_proto,
				sizeof(eth_proto), 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &h, sizeof(h), 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_ETH_HLEN + sizeof(h), &ph6,
				2 * sizeof(struct sdn_addr), 0) < 0)
		return DROP_REWRITE;
	p->l4_off = SDN_ETH_HLEN + SDN_IP6_HLEN;
	/* saddr and daddr lie next to each other in the IPv4 header. */
	ret = sdn_xlat_l4(skb, p, new_type, &ip.saddr, 8, (__be32 *)&ph6,
			  2 * sizeof(struct sdn_addr), &ph6, 1);
	if (ret)
		return ret;
	p->eth_proto = ETH_P_IPV6;
	p->family = 6;
	if (p->proto == IPPROTO_ICMP) {
		p->proto = IPPROTO_ICMPV6;
		p->icmp_type = new_type;
	}
	p->frag_id = 0;
	p->src = *src6;
	p->dst = *dst6;
	return 0;
}

/*
 * IPv6 -> IPv4: p (parsed, family 6) leaves as src4 -> dst4 (both in the
 * 64:ff9b::/96 form). On success p describes the new packet. 0 or a DROP_*.
 */
static __sdn_noinline int sdn_xlat_6to4(struct __sk_buff *skb,
					struct sdn_pkt *p,
					const struct sdn_addr *src4,
					const struct sdn_addr *dst4)
{
	__be16 eth_proto = bpf_htons(ETH_P_IP);
	struct sdn_xlat_ip6_head h;
	struct sdn_xlat_ph6 ph6;
	struct iphdr ip = {};
	__u8 new_type;
	__s64 sum;
	int ret;

	if (p->family != 6 || !sdn_addr_is_v4(src4) || !sdn_addr_is_v4(dst4))
		return DROP_XLAT;
	if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &h, sizeof(h)) < 0 ||
	    bpf_skb_load_bytes(skb, SDN_ETH_HLEN + sizeof(h), &ph6,
			       2 * sizeof(struct sdn_addr)) < 0)
		return DROP_INVALID;
	ret = sdn_xlat_takes(skb, p);
	if (ret)
		return ret;

	ip.version = 4;
	ip.ihl = 5;
	ip.tos = (__u8)(bpf_ntohl(h.vtc_flow) >> 20);
	ip.tot_len = bpf_htons(bpf_ntohs(h.payload_len) + SDN_IP4_HLEN);
	/* DF: the v6 sender never fragments on the way (RFC 7915 5.1). */
	ip.frag_off = bpf_htons(SDN_IP_DF);
	ip.ttl = h.hop_limit;
	ip.protocol = p->proto == IPPROTO_ICMPV6 ? IPPROTO_ICMP : p->proto;
	ip.saddr = src4->w[3];
	ip.daddr = dst4->w[3];
	sum = bpf_csum_diff(NULL, 0, (__be32 *)&ip, sizeof(ip), 0);
	if (sum < 0)
		return DROP_REWRITE;
	ip.check = sdn_csum_fold((__u32)sum);
	ph6.len = bpf_htonl(bpf_ntohs(h.payload_len));
	ph6.next = bpf_htonl(IPPROTO_ICMPV6);
	new_type = sdn_xlat_echo_type(p->icmp_type);

	if (bpf_skb_change_proto(skb, eth_proto, 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_OFF_ETH_PROTO, &eth_proto,
				sizeof(eth_proto), 0) < 0 ||
	    bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip), 0) < 0)
		return DROP_REWRITE;
	p->l4_off = SDN_ETH_HLEN + SDN_IP4_HLEN;
	ret = sdn_xlat_l4(skb, p, new_type, (__be32 *)&ph6,
			  2 * sizeof(struct sdn_addr), &ip.saddr, 8, &ph6, 0);
	if (ret)
		return ret;
	p->eth_proto = ETH_P_IP;
	p->family = 4;
	if (p->proto == IPPROTO_ICMPV6) {
		p->proto = IPPROTO_ICMP;
		p->icmp_type = new_type;
	}
	p->src = *src4;
	p->dst = *dst4;
	return 0;
}
