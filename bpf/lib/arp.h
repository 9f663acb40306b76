/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * ARP for the link-local gateway, answered in eBPF. Pods route everything
 * through CONFIG(gw_ipv4) and need a neighbour entry for it; a VPC pod must
 * not depend on the host's proxy_arp (its VPC addresses are never routed by
 * the host), so the reply is built here and bounced back out of the veth.
 */
#pragma once

#include "common.h"
#include "parse.h"

#define SDN_ARP_LEN	28	/* Ethernet/IPv4 ARP body */
#define SDN_ARPOP_REQ	1
#define SDN_ARPOP_REPLY	2

/* Returns 1 if the frame is an ARP request for the gateway and was turned
 * into the reply (caller redirects it back out), 0 if it is any other ARP,
 * or a DROP_* reason.
 */
static __sdn_noinline int sdn_arp_gateway_reply(struct __sk_buff *skb,
						 const struct sdn_pkt *p)
{
	__u8 arp[SDN_ARP_LEN];
	__u8 gw_mac[6];
	__be32 tpa, spa, gw = CONFIG(gw_ipv4);

	if (bpf_skb_load_bytes(skb, SDN_ETH_HLEN, arp, sizeof(arp)) < 0)
		return DROP_INVALID;
	/* htype 1, ptype 0x0800, hlen 6, plen 4 */
	if (arp[0] != 0 || arp[1] != 1 || arp[2] != 0x08 || arp[3] != 0x00 ||
	    arp[4] != 6 || arp[5] != 4)
		return 0;
	if (arp[6] != 0 || arp[7] != SDN_ARPOP_REQ)
		return 0;
	__builtin_memcpy(&spa, &arp[14], 4);
	__builtin_memcpy(&tpa, &arp[24], 4);
	if (tpa != gw)
		return 0;

	sdn_gw_mac(gw_mac);
	arp[7] = SDN_ARPOP_REPLY;
	/* target := the asker, sender := the gateway */
	__builtin_memcpy(&arp[18], &arp[8], 6);
	__builtin_memcpy(&arp[24], &spa, 4);
	__builtin_memcpy(&arp[8], gw_mac, 6);
	__builtin_memcpy(&arp[14], &gw, 4);

	if (bpf_skb_store_bytes(skb, SDN_ETH_HLEN, arp, sizeof(arp), 0) < 0)
		return DROP_REWRITE;
	if (sdn_set_macs(skb, p->src_mac, gw_mac) < 0)
		return DROP_REWRITE;
	return 1;
}
