/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * A guest's address autoconfiguration (issue 28): its DHCPv4 and DHCPv6
 * requests and its router solicitations are the agent's to answer
 * (agent/src/features/autoconf), on the node, on the pod's own link. The
 * agent reads them with a packet socket on the pod's host veth; this header
 * keeps them on that link.
 *
 * From the pod (sdn_from_pod, before the source check, which a DISCOVER from
 * 0.0.0.0 would fail): a DHCPv4 client packet (UDP 68 -> 67, whatever its
 * addresses: a DISCOVER is broadcast, a renewal is unicast to the gateway), a
 * DHCPv6 client packet (UDP 546 -> 547) or a router solicitation is marked
 * PACKET_OTHERHOST and passed (TC_ACT_OK): packet sockets on the veth see it,
 * the host's IP stack drops it on arrival (ip_rcv/ipv6_rcv), so it is never
 * routed anywhere and never reaches a DHCP server of the node itself. It is
 * not counted as a drop: it was delivered to its one reader.
 *
 * Towards the pod (sdn_to_pod): the agent's answers, sent by its packet
 * socket out of the host veth, pass the VPC's and NetworkPolicy's checks only
 * if they are answers of the gateway: DHCPv4 from CONFIG(gw_ipv4):67 to port
 * 68 of the limited broadcast or of this veth's own endpoint, DHCPv6 from
 * fe80::1:547 to port 546, a router advertisement from fe80::1. The host
 * forwards nothing with a link-local source, and routes to a veth only its
 * pod's addresses, so nothing else can take this way in.
 */
#pragma once

#include "common.h"
#include "endpoint.h"
#include "parse.h"

#define SDN_DHCP4_SERVER	67
#define SDN_DHCP4_CLIENT	68
#define SDN_DHCP6_CLIENT	546
#define SDN_DHCP6_SERVER	547
#define SDN_ICMP6_RS		133
#define SDN_ICMP6_RA		134

/* A whole datagram (a DHCP packet is never fragmented by its client). */
static __always_inline int sdn_autoconf_udp(const struct sdn_pkt *p,
					    __u16 sport, __u16 dport)
{
	return p->proto == IPPROTO_UDP && !p->frag &&
	       p->sport == bpf_htons(sport) && p->dport == bpf_htons(dport);
}

/* Returns 1 if the pod's packet is an autoconfiguration request, now marked
 * for the packet socket only (the caller returns TC_ACT_OK), else 0.
 */
static __always_inline int sdn_autoconf_from_pod(struct __sk_buff *skb,
						 const struct sdn_pkt *p)
{
	int ask;

	if (p->family == 4)
		ask = sdn_autoconf_udp(p, SDN_DHCP4_CLIENT, SDN_DHCP4_SERVER);
	else
		ask = sdn_autoconf_udp(p, SDN_DHCP6_CLIENT, SDN_DHCP6_SERVER) ||
		      (p->proto == IPPROTO_ICMPV6 &&
		       p->icmp_type == SDN_ICMP6_RS);
	if (!ask)
		return 0;
	bpf_skb_change_type(skb, PACKET_OTHERHOST);
	return 1;
}

/* Returns 1 if the packet the host sends into the pod is the gateway's
 * autoconfiguration answer (see above), else 0.
 */
static __always_inline int sdn_autoconf_to_pod(struct __sk_buff *skb,
					       const struct sdn_pkt *p,
					       __u32 net)
{
	struct sdn_endpoint *ep;
	struct sdn_addr gw;

	if (p->family == 4) {
		if (!sdn_autoconf_udp(p, SDN_DHCP4_SERVER, SDN_DHCP4_CLIENT) ||
		    p->src.w[3] != CONFIG(gw_ipv4))
			return 0;
		if (p->dst.w[3] == 0xffffffff)
			return 1;
		ep = sdn_endpoint_lookup(net, &p->dst);
		return ep && ep->ifindex == skb->ifindex;
	}
	sdn_gw6(&gw);
	if (p->src.w[0] != gw.w[0] || p->src.w[1] || p->src.w[2] ||
	    p->src.w[3] != gw.w[3])
		return 0;
	return sdn_autoconf_udp(p, SDN_DHCP6_SERVER, SDN_DHCP6_CLIENT) ||
	       (p->proto == IPPROTO_ICMPV6 && p->icmp_type == SDN_ICMP6_RA);
}
