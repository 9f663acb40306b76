/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ICMP and ICMPv6 errors about bridged flows (lib/bridge.h), and the IPv4
 * side of error translation (lib/icmp_quote.h has what both families share,
 * lib/icmp6_err.h the IPv6 side; the SNAT engine and Floating IPs use the
 * family-neutral helpers below too).
 *
 * The bridge shows the two ends of a flow different addresses (the pod its
 * VPC address and the gateway, the fabric the pod's fabric IP and the
 * client), so an error crossing the bridge is translated twice: its own
 * header like any packet of the flow, and the quoted header the way the
 * quoted packet was translated, which is the opposite direction. Checksums
 * are updated incrementally: the outer IP header's (IPv4), the quoted IP
 * header's (IPv4), the quoted L4 checksum when the quote contains it, and the
 * ICMP(v6) checksum, which covers the quote and so every change made inside
 * it (and, in IPv6, a pseudo-header with the outer addresses).
 *
 *   sdn_to_pod   (fabric -> pod): an error about a packet the pod sent, e.g. a
 *                router's "fragmentation needed" or "packet too big" for the
 *                pod's reply to the client. Outer: R -> fabric becomes gw ->
 *                vpc (R, the router or the client, is never shown to the pod,
 *                as no fabric address is). Quote: fabric:pod_port ->
 *                client:client_port becomes vpc:pod_port -> gw:gw_port, found
 *                in sdn_ct_fwd.
 *   sdn_from_pod (pod -> fabric): an error the pod sends about a packet it got
 *                through the bridge, e.g. "port unreachable". Outer: vpc -> gw
 *                becomes fabric -> client. Quote: gw:gw_port -> vpc:pod_port
 *                becomes client:client_port -> fabric:pod_port, from sdn_ct_rev.
 *
 * gw is the family's gateway: CONFIG(gw_ipv4), or fe80::1. Both entry points
 * are subprograms: their quote and keys stay out of the programs' frames.
 */
#pragma once

#include "common.h"
#include "icmp6_err.h"
#include "icmp_quote.h"
#include "nat.h"
#include "nat6.h"
#include "parse.h"

#define SDN_ICMP_DEST_UNREACH	3
#define SDN_ICMP_TIME_EXCEEDED	11
#define SDN_ICMP_PARAMETERPROB	12

static __always_inline int sdn_icmp4_is_error(const struct sdn_pkt *p)
{
	if (p->family != 4 || p->proto != IPPROTO_ICMP)
		return 0;
	return p->icmp_type == SDN_ICMP_DEST_UNREACH ||
	       p->icmp_type == SDN_ICMP_TIME_EXCEEDED ||
	       p->icmp_type == SDN_ICMP_PARAMETERPROB;
}

/* Reads the quote of the ICMPv4 error p: RFC 792 quotes the IP header and at
 * least 8 bytes of what follows, enough for ports and the echo id.
 */
static __always_inline int sdn_icmp4_quote(struct __sk_buff *skb,
					   const struct sdn_pkt *p,
					   struct sdn_icmp_quote *q)
{
	struct iphdr ip;
	__u8 l4[8];

	/* Errors are small; one that arrives fragmented is not translated. */
	if (p->frag)
		return DROP_FRAGMENT;
	q->ip_off = p->l4_off + SDN_ICMP_HLEN;
	if (bpf_skb_load_bytes(skb, q->ip_off, &ip, sizeof(ip)) < 0)
		return DROP_INVALID;
	if (ip.version != 4 || ip.ihl < 5)
		return DROP_INVALID;
	/* A quoted later fragment has no ports to find its flow by. */
	if (ip.frag_off & bpf_htons(SDN_IP_OFFSET))
		return DROP_UNSUPPORTED_L4;
	q->l4_off = q->ip_off + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, q->l4_off, l4, sizeof(l4)) < 0)
		return DROP_INVALID;
	q->proto = ip.protocol;
	sdn_addr_from_v4(&q->src, ip.saddr);
	sdn_addr_from_v4(&q->dst, ip.daddr);
	return sdn_icmp_quote_l4(skb, q, l4, IPPROTO_ICMP);
}

static __always_inline int sdn_icmp_quote_store32(struct __sk_buff *skb,
						  const struct sdn_pkt *p,
						  int off, __u32 from, __u32 to)
{
	if (from == to)
		return 0;
	if (bpf_l4_csum_replace(skb, p->l4_off + 2, from, to, sizeof(to)) < 0)
		return -1;
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0);
}

/* The quoted source (is_src) or destination of the ICMPv4 error p becomes to. */
static __always_inline int sdn_icmp4_quote_addr(struct __sk_buff *skb,
						const struct sdn_pkt *p,
						const struct sdn_icmp_quote *q,
						int is_src, __be32 to)
{
	__be32 from = is_src ? q->src.w[3] : q->dst.w[3];
	__u16 c;

	if (from == to)
		return 0;
	if (bpf_skb_load_bytes(skb, q->ip_off + 10, &c, sizeof(c)) < 0)
		return -1;
	if (sdn_icmp_quote_store16(skb, p, q->ip_off + 10, c,
				   sdn_csum_apply(c, sdn_csum_diff32(from, to))))
		return -1;
	/* TCP and UDP checksums cover the addresses (pseudo-header); ICMP's not. */
	if (q->proto != IPPROTO_ICMP &&
	    sdn_icmp_quote_l4_csum(skb, p, q, sdn_csum_diff32(from, to)))
		return -1;
	return sdn_icmp_quote_store32(skb, p, q->ip_off + (is_src ? 12 : 16),
				      from, to);
}

/* Either family, by p's. */

static __always_inline int sdn_icmp_is_error(const struct sdn_pkt *p)
{
	return sdn_icmp4_is_error(p) || sdn_icmp6_is_error(p);
}

static __always_inline int sdn_icmp_quote(struct __sk_buff *skb,
					  const struct sdn_pkt *p,
					  struct sdn_icmp_quote *q)
{
	if (p->family == 6)
		return sdn_icmp6_quote(skb, p, q);
	return sdn_icmp4_quote(skb, p, q);
}

/* The quoted source (is_src) or destination address becomes *to. */
static __always_inline int sdn_icmp_quote_addr(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       const struct sdn_icmp_quote *q,
					       int is_src,
					       const struct sdn_addr *to)
{
	if (p->family == 6)
		return sdn_icmp6_quote_addr(skb, p, q, is_src, to);
	return sdn_icmp4_quote_addr(skb, p, q, is_src, to->w[3]);
}

/* One address of the error's own header, from -> to. */
static __always_inline int sdn_icmp_outer_addr(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       int is_src,
					       const struct sdn_addr *from,
					       const struct sdn_addr *to)
{
	if (p->family == 6)
		return sdn_nat6_addr(skb, p, is_src, from, to);
	return sdn_nat4_addr(skb, p, is_src, from->w[3], to->w[3]);
}

/* The bridge's gateway address in p's family. */
static __always_inline void sdn_icmp_gw(const struct sdn_pkt *p,
					struct sdn_addr *gw)
{
	if (p->family == 6)
		sdn_gw6(gw);
	else
		sdn_addr_from_v4(gw, CONFIG(gw_ipv4));
}

/*
 * sdn_to_pod: p is an ICMP(v6) error to the fabric IP of the bridge b, about a
 * packet the pod sent (fabric -> client, the bridge's reverse rewrite). On
 * success p's addresses are gw -> the pod's VPC address.
 */
static __sdn_noinline int sdn_icmp_err_forward(struct __sk_buff *skb,
						struct sdn_pkt *p,
						const struct sdn_bridge *b)
{
	struct sdn_ct_fwd_key fk = {};
	struct sdn_icmp_quote q = {};
	struct sdn_ct_fwd *fv;
	struct sdn_addr gw;
	__be16 gw_port;
	int ret;

	ret = sdn_icmp_quote(skb, p, &q);
	if (ret)
		return ret;
	/* The quoted packet left the pod (its fabric IP); a pod's ICMP that
	 * went out was an echo reply.
	 */
	if (!sdn_addr_eq(&q.src, &p->dst) || sdn_icmp_quote_not_echo(&q, 1))
		return DROP_BRIDGE_NO_CT;
	fk.client = q.dst;
	fk.fabric = p->dst;
	fk.client_port = q.dport;
	fk.pod_port = sdn_icmp_quote_is_icmp(&q) ? 0 : q.sport;
	fk.proto = q.proto;
	fv = bpf_map_lookup_elem(&sdn_ct_fwd, &fk);
	if (!fv)
		return DROP_BRIDGE_NO_CT;
	gw_port = fv->gw_port;
	sdn_icmp_gw(p, &gw);

	if (sdn_icmp_quote_addr(skb, p, &q, 1, &b->vpc_ip) ||
	    sdn_icmp_quote_addr(skb, p, &q, 0, &gw) ||
	    sdn_icmp_quote_port(skb, p, &q, 0, gw_port) ||
	    sdn_icmp_outer_addr(skb, p, 0, &p->dst, &b->vpc_ip) ||
	    sdn_icmp_outer_addr(skb, p, 1, &p->src, &gw))
		return DROP_REWRITE;
	p->dst = b->vpc_ip;
	p->src = gw;
	return 0;
}

/*
 * sdn_from_pod: p is an ICMP(v6) error the pod of net sends to the gateway,
 * about a packet it received through the bridge. On success p's addresses are
 * the pod's fabric IP -> the client.
 */
static __sdn_noinline int sdn_icmp_err_reverse(struct __sk_buff *skb,
						struct sdn_pkt *p, __u32 net)
{
	struct sdn_ct_rev_key rk = {};
	struct sdn_icmp_quote q = {};
	struct sdn_ct_rev *rv;
	int v4 = p->family == 4;
	int ret;

	ret = sdn_icmp_quote(skb, p, &q);
	if (ret)
		return ret;
	/* The quoted packet came in through the bridge: gw -> the pod; the
	 * bridge lets ICMP in only as echo requests.
	 */
	if (!sdn_addr_eq(&q.dst, &p->src) || !sdn_addr_eq(&q.src, &p->dst) ||
	    sdn_icmp_quote_not_echo(&q, 0))
		return DROP_BRIDGE_NO_CT;
	rk.net = net;
	rk.vpc_ip = p->src;
	rk.gw_port = q.sport;
	rk.pod_port = sdn_icmp_quote_is_icmp(&q) ? 0 : q.dport;
	rk.proto = q.proto;
	rv = bpf_map_lookup_elem(&sdn_ct_rev, &rk);
	if (!rv)
		return DROP_BRIDGE_NO_CT;
	if (sdn_addr_is_v4(&rv->fabric) != v4 || sdn_addr_is_v4(&rv->client) != v4)
		return DROP_UNSUPPORTED;

	if (sdn_icmp_quote_addr(skb, p, &q, 1, &rv->client) ||
	    sdn_icmp_quote_addr(skb, p, &q, 0, &rv->fabric) ||
	    sdn_icmp_quote_port(skb, p, &q, 1, rv->client_port) ||
	    sdn_icmp_outer_addr(skb, p, 1, &p->src, &rv->fabric) ||
	    sdn_icmp_outer_addr(skb, p, 0, &p->dst, &rv->client))
		return DROP_REWRITE;
	p->src = rv->fabric;
	p->dst = rv->client;
	return 0;
}
