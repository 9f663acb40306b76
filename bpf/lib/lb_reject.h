/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A Service frontend without endpoints refuses a TCP connection at once, as
 * kube-proxy's reject rule does, instead of leaving the client to time out:
 * the client's SYN is turned into the RST|ACK the frontend would send (the
 * addresses and ports swapped, ack = the SYN's seq + 1, no options, no
 * payload) and sent back into the client's veth, where sdn_to_pod delivers
 * it like any packet. The client's connect() fails with ECONNREFUSED.
 *
 * Other packets to such a frontend (UDP, a segment of no known flow) are
 * dropped and counted (DROP_VIP_NO_BACKEND): an ICMP port unreachable would
 * need a new header and a quote, not done yet.
 */
#pragma once

#include "common.h"
#include "icmp_quote.h"
#include "parse.h"

#define SDN_TCP_FLAGS_OFF	13	/* the flags byte in the TCP header */
#define SDN_TCP_SYN		0x02
#define SDN_TCP_RST		0x04
#define SDN_TCP_ACK		0x10

/* The IPv6 pseudo-header and the TCP header, summed as one buffer. */
struct sdn_rst6_sum {
	struct sdn_addr src;
	struct sdn_addr dst;
	__be32 len;
	__be32 next;	/* 3 zero bytes, then IPPROTO_TCP */
	struct tcphdr tcp;
};

struct sdn_rst4_sum {
	__be32 src;
	__be32 dst;
	__u8 zero;
	__u8 proto;
	__be16 len;
	struct tcphdr tcp;
};

/* The reset's TCP header from the SYN's (th): ports swapped, RST|ACK. */
static __always_inline void sdn_rst_header(struct tcphdr *rst,
					   const struct tcphdr *th)
{
	__builtin_memset(rst, 0, sizeof(*rst));
	rst->source = th->dest;
	rst->dest = th->source;
	rst->seq = 0;
	rst->ack_seq = bpf_htonl(bpf_ntohl(th->seq) + 1);
	rst->doff = 5;
	rst->rst = 1;
	rst->ack = 1;
}

/*
 * The SYN in skb (p: its parse) becomes the frontend's reset to it. Returns 1
 * when it did (the caller sends it back out of the veth it came from), 0 when
 * p is no SYN it can answer (the caller drops it), < 0 when the rewrite
 * failed half-way (drop it as DROP_REWRITE).
 */
static __sdn_noinline int sdn_lb_reject(struct __sk_buff *skb,
					 const struct sdn_pkt *p)
{
	__u32 l4 = p->l4_off;
	struct tcphdr th;
	__u8 mac[12];

	if (p->proto != IPPROTO_TCP || p->frag)
		return 0;
	/* IPv4 options or IPv6 extension headers: left to the drop. */
	if (l4 != SDN_ETH_HLEN + (p->family == 4 ? sizeof(struct iphdr) :
						    sizeof(struct ipv6hdr)))
		return 0;
	if (bpf_skb_load_bytes(skb, l4, &th, sizeof(th)) < 0)
		return 0;
	if (!th.syn || th.ack || th.rst)
		return 0;
	if (bpf_skb_change_tail(skb, l4 + sizeof(th), 0) < 0)
		return -1;
	/* Ethernet: back where it came from. */
	__builtin_memcpy(mac, p->src_mac, 6);
	__builtin_memcpy(mac + 6, p->dst_mac, 6);
	if (bpf_skb_store_bytes(skb, 0, mac, sizeof(mac), 0) < 0)
		return -1;

	if (p->family == 4) {
		struct sdn_rst4_sum s = {};
		struct iphdr ip;
		__u32 i, sum = 0;
		__u16 *w;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip)) < 0)
			return -1;
		s.src = ip.daddr;
		s.dst = ip.saddr;
		ip.saddr = s.src;
		ip.daddr = s.dst;
		ip.tot_len = bpf_htons(sizeof(ip) + sizeof(th));
		ip.ttl = 64;
		ip.frag_off = 0;
		ip.check = 0;
		w = (__u16 *)&ip;
#pragma unroll
		for (i = 0; i < sizeof(ip) / 2; i++)
			sum += w[i];
		ip.check = sdn_csum_fold(sum);
		s.proto = IPPROTO_TCP;
		s.len = bpf_htons(sizeof(th));
		sdn_rst_header(&s.tcp, &th);
		s.tcp.check = sdn_csum_fold((__u32)bpf_csum_diff(NULL, 0, (__be32 *)&s,
								  sizeof(s), 0));
		if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l4, &s.tcp, sizeof(s.tcp), 0) < 0)
			return -1;
	} else {
		struct sdn_rst6_sum s = {};
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip6, sizeof(ip6)) < 0)
			return -1;
		__builtin_memcpy(&s.src, &ip6.daddr, 16);
		__builtin_memcpy(&s.dst, &ip6.saddr, 16);
		__builtin_memcpy(&ip6.saddr, &s.src, 16);
		__builtin_memcpy(&ip6.daddr, &s.dst, 16);
		ip6.payload_len = bpf_htons(sizeof(th));
		ip6.hop_limit = 64;
		s.len = bpf_htonl(sizeof(th));
		s.next = bpf_htonl(IPPROTO_TCP);
		sdn_rst_header(&s.tcp, &th);
		s.tcp.check = sdn_csum_fold((__u32)bpf_csum_diff(NULL, 0, (__be32 *)&s,
								  sizeof(s), 0));
		if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &ip6, sizeof(ip6), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l4, &s.tcp, sizeof(s.tcp), 0) < 0)
			return -1;
	}
	return 1;
}
