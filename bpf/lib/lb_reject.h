/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A Service frontend without endpoints refuses at once, as kube-proxy's reject
 * rule does, instead of leaving the client to time out. The refusal is built
 * from the client's own packet and sent back into the client's veth, where
 * sdn_to_pod delivers it like any packet:
 *
 *   TCP  the SYN becomes the RST|ACK the frontend would send (addresses and
 *        ports swapped, ack = the SYN's seq + 1, no options, no payload);
 *        connect() fails with ECONNREFUSED.
 *   UDP  the datagram becomes the frontend's ICMP port unreachable (IPv4: type
 *        3 code 3; IPv6: type 1 code 4) quoting it: a new IP header and the
 *        8-byte ICMP header are inserted between the Ethernet header and the
 *        datagram, which is cut to what an error may carry (RFC 1812 4.3.2.3:
 *        an ICMPv4 error within 576 bytes; RFC 4443 2.4 (c): an ICMPv6 error
 *        within the IPv6 minimum MTU, 1280), so the quote always holds the
 *        datagram's IP and UDP headers the client's stack finds its socket by
 *        (RFC 792 asks for the IP header and 8 bytes); a connected socket's
 *        next call fails with ECONNREFUSED.
 *
 * The refusal comes from the frontend's address, as the RST does. It is not
 * rate limited as the host's ICMP is: it only ever goes back to the one pod
 * that sent the packet, one for one. Other packets to such a frontend (a TCP
 * segment that is no SYN, a later fragment, a malformed datagram) are dropped
 * and counted (DROP_VIP_NO_BACKEND).
 */
#pragma once

#include "common.h"
#include "icmp6_err.h"
#include "icmp_err.h"
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

/* The checksum of an IPv4 header without options (its check field 0). */
static __always_inline __u16 sdn_reject_ip4_check(const struct iphdr *ip)
{
	const __u16 *w = (const __u16 *)ip;
	__u32 i, sum = 0;

#pragma unroll
	for (i = 0; i < sizeof(*ip) / 2; i++)
		sum += w[i];
	return sdn_csum_fold(sum);
}

/* The SYN in skb (p: its parse) becomes the frontend's reset to it. */
static __sdn_noinline int sdn_lb_reject_tcp(struct __sk_buff *skb,
					     const struct sdn_pkt *p)
{
	__u32 l4 = p->l4_off;
	struct tcphdr th;
	__u8 mac[12];

	if (p->frag)
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
		ip.check = sdn_reject_ip4_check(&ip);
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

#define SDN_ICMP_PORT_UNREACH	3	/* code of SDN_ICMP_DEST_UNREACH */
#define SDN_ICMP6_PORT_UNREACH	4	/* code of SDN_ICMP6_DEST_UNREACH */
#define SDN_REJECT4_MAX		576	/* an ICMPv4 error's IP length at most */
#define SDN_REJECT6_MAX		1280	/* an ICMPv6 error's IP length at most */
#define SDN_REJECT_CHUNK	64	/* bytes summed per load */

/* The IPv6 pseudo-header of an ICMPv6 message (RFC 4443 2.3). */
struct sdn_reject6_pseudo {
	struct sdn_addr src;
	struct sdn_addr dst;
	__be32 len;
	__be32 next;	/* 3 zero bytes, then IPPROTO_ICMPV6 */
};

/* The one's complement sum, seeded with sum and not folded, of the len bytes
 * of skb from off (len at most an error's length): 16-bit words in memory
 * order, an odd last byte padded with zero, as bpf_csum_diff() sums. Whole
 * chunks first, then whole words, then the last bytes: every load has a
 * constant size. < 0 when a load failed.
 */
static __sdn_noinline __s64 sdn_reject_sum(struct __sk_buff *skb, __u32 off,
					    __u32 len, __u32 sum)
{
	__u8 buf[SDN_REJECT_CHUNK];
	__u32 i, done = 0;
	__s64 s = sum;

	for (i = 0; i < SDN_REJECT6_MAX / SDN_REJECT_CHUNK; i++) {
		if (done + SDN_REJECT_CHUNK > len)
			break;
		if (bpf_skb_load_bytes(skb, off + done, buf, SDN_REJECT_CHUNK) < 0)
			return -1;
		s = bpf_csum_diff(NULL, 0, (__be32 *)buf, SDN_REJECT_CHUNK, (__u32)s);
		if (s < 0)
			return -1;
		done += SDN_REJECT_CHUNK;
	}
	for (i = 0; i < SDN_REJECT_CHUNK / 4; i++) {
		if (done + 4 > len)
			break;
		if (bpf_skb_load_bytes(skb, off + done, buf, 4) < 0)
			return -1;
		s = bpf_csum_diff(NULL, 0, (__be32 *)buf, 4, (__u32)s);
		if (s < 0)
			return -1;
		done += 4;
	}
	__builtin_memset(buf, 0, 4);
	for (i = 0; i < 3; i++) {
		if (done >= len)
			break;
		if (bpf_skb_load_bytes(skb, off + done, &buf[i], 1) < 0)
			return -1;
		done++;
	}
	if (i)
		s = bpf_csum_diff(NULL, 0, (__be32 *)buf, 4, (__u32)s);
	return s;
}

/* The UDP datagram in skb (p: its parse) becomes the frontend's ICMP(v6) port
 * unreachable to its sender, quoting it.
 */
static __sdn_noinline int sdn_lb_reject_udp(struct __sk_buff *skb,
					     const struct sdn_pkt *p)
{
	__u8 icmp[SDN_ICMP_HLEN] = {};
	__u32 hlen, qlen, room, l4;
	__u8 mac[12];
	__s64 sum;
	__u16 check;

	/* A later fragment has no UDP header to quote (RFC 1122 3.2.2). */
	if (p->frag == SDN_FRAG_LATER)
		return 0;
	/* The quote: the whole datagram as its IP header has it, cut to what
	 * an error may carry. A frame shorter than its header says is no
	 * datagram to answer.
	 */
	if (p->family == 4) {
		struct iphdr ip;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip)) < 0)
			return 0;
		qlen = bpf_ntohs(ip.tot_len);
		if (qlen < ip.ihl * 4 + sizeof(struct udphdr))
			return 0;
		hlen = sizeof(struct iphdr);
		room = SDN_REJECT4_MAX - hlen - SDN_ICMP_HLEN;
	} else {
		struct ipv6hdr ip6;

		if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, &ip6, sizeof(ip6)) < 0)
			return 0;
		qlen = sizeof(ip6) + bpf_ntohs(ip6.payload_len);
		if (qlen < sizeof(ip6) + sizeof(struct udphdr))
			return 0;
		hlen = sizeof(struct ipv6hdr);
		room = SDN_REJECT6_MAX - hlen - SDN_ICMP_HLEN;
	}
	if (qlen > skb->len - SDN_ETH_HLEN)
		return 0;
	if (qlen > room)
		qlen = room;

	/* Cut first (less to move), then the room for the new headers between
	 * the Ethernet header and the quoted datagram.
	 */
	if (bpf_skb_change_tail(skb, SDN_ETH_HLEN + qlen, 0) < 0 ||
	    bpf_skb_adjust_room(skb, hlen + SDN_ICMP_HLEN, BPF_ADJ_ROOM_MAC, 0) < 0)
		return -1;
	/* Ethernet: back where it came from. */
	__builtin_memcpy(mac, p->src_mac, 6);
	__builtin_memcpy(mac + 6, p->dst_mac, 6);
	if (bpf_skb_store_bytes(skb, 0, mac, sizeof(mac), 0) < 0)
		return -1;
	l4 = SDN_ETH_HLEN + hlen;

	if (p->family == 4) {
		struct iphdr ip = {};

		ip.version = 4;
		ip.ihl = 5;
		ip.tot_len = bpf_htons(hlen + SDN_ICMP_HLEN + qlen);
		ip.ttl = 64;
		ip.protocol = IPPROTO_ICMP;
		ip.saddr = p->dst.w[3];
		ip.daddr = p->src.w[3];
		ip.check = sdn_reject_ip4_check(&ip);
		icmp[0] = SDN_ICMP_DEST_UNREACH;
		icmp[1] = SDN_ICMP_PORT_UNREACH;
		if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &ip, sizeof(ip), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l4, icmp, sizeof(icmp), 0) < 0)
			return -1;
		/* ICMPv4's checksum covers the message alone. */
		sum = sdn_reject_sum(skb, l4, SDN_ICMP_HLEN + qlen, 0);
	} else {
		struct sdn_reject6_pseudo ph = {};
		struct ipv6hdr ip6 = {};

		ip6.version = 6;
		ip6.payload_len = bpf_htons(SDN_ICMP_HLEN + qlen);
		ip6.nexthdr = IPPROTO_ICMPV6;
		ip6.hop_limit = 64;
		__builtin_memcpy(&ip6.saddr, p->dst.b, 16);
		__builtin_memcpy(&ip6.daddr, p->src.b, 16);
		icmp[0] = SDN_ICMP6_DEST_UNREACH;
		icmp[1] = SDN_ICMP6_PORT_UNREACH;
		if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, &ip6, sizeof(ip6), 0) < 0 ||
		    bpf_skb_store_bytes(skb, l4, icmp, sizeof(icmp), 0) < 0)
			return -1;
		/* ICMPv6's covers a pseudo-header with the addresses too. */
		ph.src = p->dst;
		ph.dst = p->src;
		ph.len = bpf_htonl(SDN_ICMP_HLEN + qlen);
		ph.next = bpf_htonl(IPPROTO_ICMPV6);
		sum = bpf_csum_diff(NULL, 0, (__be32 *)&ph, sizeof(ph), 0);
		if (sum < 0)
			return -1;
		sum = sdn_reject_sum(skb, l4, SDN_ICMP_HLEN + qlen, (__u32)sum);
	}
	if (sum < 0)
		return -1;
	check = sdn_csum_fold((__u32)sum);
	if (bpf_skb_store_bytes(skb, l4 + 2, &check, sizeof(check), 0) < 0)
		return -1;
	return 1;
}

/*
 * The packet in skb (p: its parse) to a frontend without endpoints becomes
 * the frontend's refusal (above). Returns 1 when it did (the caller sends it
 * back out of the veth it came from), 0 when p is nothing it answers (the
 * caller drops it), < 0 when the rewrite failed half-way (drop it as
 * DROP_REWRITE).
 */
static __sdn_noinline int sdn_lb_reject(struct __sk_buff *skb,
					 const struct sdn_pkt *p)
{
	if (p->proto == IPPROTO_TCP)
		return sdn_lb_reject_tcp(skb, p);
	if (p->proto == IPPROTO_UDP)
		return sdn_lb_reject_udp(skb, p);
	return 0;
}
